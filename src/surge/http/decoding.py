"""Content decoding, in one place: every coding in a stream, capped.

A compressed body is a bomb until proven otherwise: 89 bytes of brotli became
50 MiB, and ``brotli.decompress`` of a 200 MB-of-zeros body took a client to
432 MB of RSS.  So each coding is a streaming decoder fed the body's chunks as
they came off the wire, each call asked for at most what is left of the cap
(``--max-filesize``, the client's ``body_cap``), and the first byte past the
cap is ``body_too_large``.  Memory is bounded by the cap on both sides: the
wire body (connection.py stops at the cap) and the decoded one (here).

Codings: gzip (x-gzip), deflate (zlib-wrapped, or raw as some servers send),
br (the ``brotli`` package) and zstd (``backports.zstd`` on 3.11-3.13, the
standard library's ``compression.zstd`` from 3.14), applied last-first when a
response lists several (``Content-Encoding: gzip, br``).  A coding surge did not
ask for is handed over undecoded, as curl does.  brotli and zstd are found at
import and loaded by the first body that needs them (together ~1.5 ms of start-up).
"""

from __future__ import annotations

import importlib
import importlib.util
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from surge.errors import RequestError


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is not there
        return False


#: br when the brotli package is installed.
_BROTLI = _found("brotli")
#: zstd: the standard library's from 3.14, its backport before (None: neither).
_ZSTD = next((name for name in ("compression.zstd", "backports.zstd") if _found(name)), None)

#: What the client asks for (its Accept-Encoding): the codings it can decode.
ACCEPT_ENCODING = ", ".join(["gzip", "deflate"] + ["br"] * _BROTLI + ["zstd"] * bool(_ZSTD))

#: A decoder stage: called with the next input (b"" at the end, to flush) and the
#: most output one piece may hold; yields the output in pieces of at most that.
Stage = Callable[[bytes, int], Iterator[bytes]]

#: The most decoded output held at once while streaming: a bomb's 64 KiB chunk
#: that inflates to 64 MB comes out a piece at a time.
STEP = 256 * 1024


class _TooLarge(Exception):
    pass


class Decoder:
    """The codings of one body, undone a chunk at a time.

    ``feed(chunk)`` and then ``finish()`` yield the decoded body in pieces of at
    most ``STEP`` bytes, lazily (nothing is decoded before it is asked for), so
    memory stays bounded however far a chunk inflates.  ``cap`` (None: no cap)
    bounds the decoded total: the first byte past it is ``body_too_large``.
    Errors are ``RequestError``: ``protocol_error`` for a body that is not what
    its coding says."""

    __slots__ = ("_names", "_stages", "_status", "cap", "total")

    def __init__(self, stages: list[Stage], names: list[str], cap: int | None, status: int):
        self._stages = stages
        self._names = names
        self._status = status
        self.cap = cap
        self.total = 0

    @classmethod
    def for_codings(cls, codings: bytes, cap: int | None, status: int) -> Decoder | None:
        """The decoder of a Content-Encoding value, or None when a coding is not
        one surge decodes (or there is nothing to undo)."""
        names = [c.strip().decode("latin-1") for c in codings.lower().split(b",")]
        stages: list[Stage] = []
        for name in reversed(names):  # the last coding applied is undone first
            if name in ("identity", ""):
                continue
            make = _DECODERS.get(name)
            if make is None:
                return None
            stages.append(make())
        return cls(stages, names, cap, status) if stages else None

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        return self._guarded(chunk, False)

    def finish(self) -> Iterator[bytes]:
        return self._guarded(b"", True)

    def _guarded(self, chunk: bytes, final: bool) -> Iterator[bytes]:
        cap = self.cap
        step = STEP if cap is None else min(STEP, cap + 1)
        try:
            for piece in _pipe(self._stages, 0, chunk, final, step):
                self.total += len(piece)
                if cap is not None and self.total > cap:
                    raise _TooLarge
                yield piece
        except _TooLarge:
            raise RequestError(
                "body_too_large",
                f"decoded body exceeds the {cap:,}-byte cap",
                status=self._status,
            ) from None
        except Exception as e:  # zlib.error, brotli.error, zstd.ZstdError, EOFError
            what = "/".join(self._names)
            raise RequestError(
                "protocol_error", f"bad {what} body: {e}", status=self._status
            ) from None


def _pipe(stages: list[Stage], i: int, data: bytes, final: bool, step: int) -> Iterator[bytes]:
    """``data`` through stages ``i`` onwards; ``final``: then flush each in turn."""
    if i == len(stages):
        if data:
            yield data
        return
    stage = stages[i]
    if data:
        for piece in stage(data, step):
            if piece:
                yield from _pipe(stages, i + 1, piece, False, step)
    if final:
        for piece in stage(b"", step):
            if piece:
                yield from _pipe(stages, i + 1, piece, False, step)
        yield from _pipe(stages, i + 1, b"", True, step)


def decode(chunks: Iterable[bytes], codings: bytes, cap: int, status: int) -> bytes | None:
    """The decoded body, or None when a coding is not one surge decodes.

    Raises ``RequestError``: ``body_too_large`` past ``cap`` decoded bytes,
    ``protocol_error`` for a body that is not what its coding says."""
    decoder = Decoder.for_codings(codings, cap, status)
    if decoder is None:
        return None
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    out.extend(decoder.finish())
    return b"".join(out)


# Each stage yields pieces of at most ``step`` bytes, asking the decompressor for
# no more at a time: however far the input inflates, one piece is in memory.


def _zlib_stage(wbits: int, raw_fallback: bool = False) -> Stage:
    state: dict[str, Any] = {"d": zlib.decompressobj(wbits), "fresh": True}

    def feed(data: bytes, step: int) -> Iterator[bytes]:
        d = state["d"]
        if not data:
            yield d.flush()
            return
        try:
            out = d.decompress(data, step)
        except zlib.error:
            if not (raw_fallback and state["fresh"]):
                raise
            # "deflate" as some servers send it: raw, without the zlib wrapper.
            d = state["d"] = zlib.decompressobj(-zlib.MAX_WBITS)
            out = d.decompress(data, step)
        state["fresh"] = False
        yield out
        while d.unconsumed_tail:
            yield d.decompress(d.unconsumed_tail, step)

    return feed


def _brotli_stage() -> Stage:
    import brotli

    d = brotli.Decompressor()

    def feed(data: bytes, step: int) -> Iterator[bytes]:
        # The limit is a soft one (a piece may run past it), and
        # can_accept_more_data() says True with output still pending (brotli
        # 1.1): so ask again while output comes and the stream is not over.
        out = d.process(data, output_buffer_limit=step)
        yield out
        while out and not d.is_finished():
            out = d.process(b"", output_buffer_limit=step)
            yield out

    return feed


def _zstd_stage() -> Stage:
    assert _ZSTD is not None
    d = importlib.import_module(_ZSTD).ZstdDecompressor()

    def feed(data: bytes, step: int) -> Iterator[bytes]:
        if d.eof:  # bytes after the frame: ignored, as curl does
            return
        if not data and d.needs_input:
            return
        yield d.decompress(data, step)
        while not d.needs_input and not d.eof:
            yield d.decompress(b"", step)

    return feed


_DECODERS: dict[str, Callable[[], Stage]] = {
    "gzip": lambda: _zlib_stage(zlib.MAX_WBITS | 16),
    "x-gzip": lambda: _zlib_stage(zlib.MAX_WBITS | 16),
    "deflate": lambda: _zlib_stage(zlib.MAX_WBITS, raw_fallback=True),
}
if _BROTLI:
    _DECODERS["br"] = _brotli_stage
if _ZSTD is not None:
    _DECODERS["zstd"] = _zstd_stage

#: The codings surge undoes (Content-Encoding, and Transfer-Encoding besides chunked).
CODINGS = frozenset(_DECODERS)
