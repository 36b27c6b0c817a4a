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
ask for is handed over undecoded, as curl does.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from typing import Any

from surge.errors import RequestError

try:  # br when the brotli package is installed
    import brotli
except ImportError:  # pragma: no cover - depends on the environment
    brotli = None
try:  # zstd: the standard library from 3.14, its backport before
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on the Python version
    try:
        from backports import zstd  # type: ignore[no-redef,unused-ignore]
    except ImportError:
        zstd = None

#: What the client asks for (its Accept-Encoding): the codings it can decode.
ACCEPT_ENCODING = ", ".join(
    ["gzip", "deflate"] + ["br"] * (brotli is not None) + ["zstd"] * (zstd is not None)
)

#: A decoder: called with the next input (b"" at the end) and the most output it
#: may return beyond the cap's remainder; returns the output.
Stage = Callable[[bytes, int], bytes]


class _TooLarge(Exception):
    pass


def decode(chunks: Iterable[bytes], codings: bytes, cap: int, status: int) -> bytes | None:
    """The decoded body, or None when a coding is not one surge decodes.

    Raises ``RequestError``: ``body_too_large`` past ``cap`` decoded bytes,
    ``protocol_error`` for a body that is not what its coding says."""
    names = [c.strip().decode("latin-1") for c in codings.lower().split(b",")]
    stages: list[Stage] = []
    for name in reversed(names):  # the last coding applied is undone first
        if name in ("identity", ""):
            continue
        make = _DECODERS.get(name)
        if make is None:
            return None
        stages.append(make())
    if not stages:
        return None
    out: list[bytes] = []
    total = 0
    try:
        for chunk in [*chunks, b""]:
            data = chunk
            for stage in stages:
                data = stage(data, cap)
            total += len(data)
            if total > cap:
                raise _TooLarge
            if data:
                out.append(data)
    except _TooLarge:
        raise RequestError(
            "body_too_large", f"decoded body exceeds the {cap:,}-byte cap", status=status
        ) from None
    except Exception as e:  # zlib.error, brotli.error, zstd.ZstdError, EOFError
        what = "/".join(names)
        raise RequestError("protocol_error", f"bad {what} body: {e}", status=status) from None
    return b"".join(out)


# Each stage returns at most cap + 1 bytes per call and raises _TooLarge rather
# than produce more: one byte past the cap is enough to know.


def _zlib_stage(wbits: int, raw_fallback: bool = False) -> Stage:
    state: dict[str, Any] = {"d": zlib.decompressobj(wbits), "fresh": True}

    def feed(data: bytes, cap: int) -> bytes:
        d = state["d"]
        if not data:
            out = d.flush()
        else:
            try:
                out = d.decompress(data, cap + 1)
            except zlib.error:
                if not (raw_fallback and state["fresh"]):
                    raise
                # "deflate" as some servers send it: raw, without the zlib wrapper.
                d = state["d"] = zlib.decompressobj(-zlib.MAX_WBITS)
                out = d.decompress(data, cap + 1)
        state["fresh"] = False
        if len(out) > cap or d.unconsumed_tail:
            raise _TooLarge
        return bytes(out)

    return feed


def _brotli_stage() -> Stage:
    d = brotli.Decompressor()

    def feed(data: bytes, cap: int) -> bytes:
        out = d.process(data, output_buffer_limit=cap + 1)
        if len(out) > cap:
            raise _TooLarge
        if not d.can_accept_more_data():  # it stopped at the limit with more to give
            raise _TooLarge
        return bytes(out)

    return feed


def _zstd_stage() -> Stage:
    d = zstd.ZstdDecompressor()

    def feed(data: bytes, cap: int) -> bytes:
        if d.eof:  # bytes after the frame: ignored, as curl does
            return b""
        if not data and d.needs_input:
            return b""
        out = d.decompress(data, cap + 1)
        if len(out) > cap or (not d.needs_input and not d.eof):
            raise _TooLarge
        return bytes(out)

    return feed


_DECODERS: dict[str, Callable[[], Stage]] = {
    "gzip": lambda: _zlib_stage(zlib.MAX_WBITS | 16),
    "x-gzip": lambda: _zlib_stage(zlib.MAX_WBITS | 16),
    "deflate": lambda: _zlib_stage(zlib.MAX_WBITS, raw_fallback=True),
}
if brotli is not None:
    _DECODERS["br"] = _brotli_stage
if zstd is not None:
    _DECODERS["zstd"] = _zstd_stage
