"""The bytes a simulated host sends: response heads, bodies and their encodings.

Sans-I/O: these functions turn a :class:`~surge.sim.behaviour.Behaviour` into
bytes and know nothing of sockets or time, so the server stays a thin loop and
the framing is testable on its own.  Bodies up to :data:`WHOLE_BODY_MAX` are built
whole (and, gzipped, cached per size: the server sends the same few thousand
bodies over and over); larger ones are generated piece by piece so that
``big-1000m.sim`` costs no memory.
"""

from __future__ import annotations

import gzip as gzip_module
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from http import HTTPStatus

from surge.sim.behaviour import Behaviour

#: Bodies up to this size (decoded) are built whole; larger ones are streamed.
WHOLE_BODY_MAX = 1 << 20
#: Size of the pieces a streamed body is written in.
PIECE_BYTES = 64 * 1024
#: Chunk size of ``Transfer-Encoding: chunked`` bodies; small bodies are cut into
#: at least three chunks so that clients meet real chunk boundaries.
CHUNK_BYTES = 16 * 1024
#: What a ``garbage`` host sends: binary noise, then a line that no HTTP parser
#: takes for a status line (every client parser fails on the first bytes).
GARBAGE = b"\x00\xff\x13\x37 surge.sim garbage: this is not an HTTP response\r\n\r\n\x00\x01"
#: The last chunk of a chunked body (no trailers).
LAST_CHUNK = b"0\r\n\r\n"
#: Statuses whose responses never carry a body (RFC 9110 sections 15.3.5, 15.4.5).
BODILESS = frozenset({204, 304})


@dataclass(frozen=True, slots=True)
class Response:
    """A response ready for the wire: ``head``, then ``body`` (None: stream it)."""

    head: bytes
    body: bytes | None


@lru_cache(maxsize=1)
def _filler() -> bytes:
    # HTML-ish lines with counters: compressible like a web page (gzip ~ 5x), not
    # like a run of one byte, so gzip and decoders do real work.
    lines = []
    size = 0
    i = 0
    while size < WHOLE_BODY_MAX + PIECE_BYTES:
        line = f'<p class="l{i % 7}">surge sim filler line {i:07d} lorem ipsum dolor</p>\n'
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines).encode()


def body(size: int) -> bytes:
    """The decoded body of ``size`` bytes (at most :data:`WHOLE_BODY_MAX`)."""
    if size > WHOLE_BODY_MAX:
        raise ValueError(f"bodies over {WHOLE_BODY_MAX} bytes are streamed, not built")
    return _filler()[:size]


def body_pieces(size: int) -> Iterator[bytes]:
    """The decoded body of any ``size``, in pieces of at most :data:`PIECE_BYTES`."""
    filler = _filler()
    offset = 0
    while size > 0:
        take = min(size, PIECE_BYTES)
        yield filler[offset : offset + take]
        size -= take
        offset = (offset + take) % WHOLE_BODY_MAX


@lru_cache(maxsize=8192)
def gzipped(size: int) -> bytes:
    """The gzipped body of ``size`` bytes; mtime 0 so the bytes are deterministic."""
    return gzip_module.compress(body(size), compresslevel=6, mtime=0)


def gzip_pieces(size: int) -> Iterator[bytes]:
    """A streamed body of ``size`` bytes, gzipped on the fly (non-empty pieces only)."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    for piece in body_pieces(size):
        out = compressor.compress(piece)
        if out:
            yield out
    yield compressor.flush()


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (RFC 9112 section 7.1)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def chunked(data: bytes) -> bytes:
    """``data`` framed as a complete chunked body, in at least three chunks when it can be."""
    size = max(1, min(CHUNK_BYTES, -(-len(data) // 3)))
    frames = [chunk(data[i : i + size]) for i in range(0, len(data), size)]
    frames.append(LAST_CHUNK)
    return b"".join(frames)


def accepts_gzip(accept_encoding: bytes) -> bool:
    """Whether an ``Accept-Encoding`` value allows gzip (RFC 9110 section 12.5.3).

    ``gzip`` (or ``x-gzip``) with a non-zero quality says yes; so does ``*`` when
    gzip is not named; ``;q=0`` says no.
    """
    star: bool | None = None
    for item in accept_encoding.lower().split(b","):
        name, _, params = item.partition(b";")
        name = name.strip()
        quality = 1.0
        params = params.strip()
        if params.startswith(b"q="):
            try:
                quality = float(params[2:])
            except ValueError:
                quality = 0.0
        if name in (b"gzip", b"x-gzip"):
            return quality > 0
        if name == b"*":
            star = quality > 0
    return bool(star)


def head(
    status: int,
    host: str,
    *,
    length: int | None,
    is_chunked: bool = False,
    is_gzip: bool = False,
    vary: bool = False,
    location: str | None = None,
    keep_alive: bool = True,
) -> bytes:
    """A response head; ``length`` None means no ``Content-Length`` header."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "Server: surge-sim",
        "Content-Type: text/html; charset=utf-8",
        f"X-Sim-Host: {host}",
    ]
    if is_gzip:
        lines.append("Content-Encoding: gzip")
    if vary:
        lines.append("Vary: Accept-Encoding")
    if is_chunked:
        lines.append("Transfer-Encoding: chunked")
    elif length is not None:
        lines.append(f"Content-Length: {length}")
    if location is not None:
        lines.append(f"Location: {location}")
    if not keep_alive:
        lines.append("Connection: close")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def redirect(b: Behaviour, location: str, *, keep_alive: bool, head_only: bool) -> Response:
    """The redirect answered by a host whose chain has hops left."""
    text = f'<a href="{location}">moved</a>\n'.encode()
    response_head = head(
        b.redirect_status, b.host, length=len(text), location=location, keep_alive=keep_alive
    )
    return Response(response_head, b"" if head_only else text)


def final(b: Behaviour, *, gzip_ok: bool, keep_alive: bool, head_only: bool) -> Response:
    """The response at the end of a chain; ``body`` is None when it must be streamed
    (see :func:`streamed_body`)."""
    if b.status in BODILESS:
        return Response(head(b.status, b.host, length=None, keep_alive=keep_alive), b"")
    use_gzip = b.gzip and gzip_ok
    if b.body_bytes > WHOLE_BODY_MAX:
        # The encoded length of a streamed gzip body is not known up front.
        is_chunked = b.chunked or use_gzip
        response_head = head(
            b.status,
            b.host,
            length=None if is_chunked else b.body_bytes,
            is_chunked=is_chunked,
            is_gzip=use_gzip,
            vary=b.gzip,
            keep_alive=keep_alive,
        )
        return Response(response_head, b"" if head_only else None)
    data = gzipped(b.body_bytes) if use_gzip else body(b.body_bytes)
    response_head = head(
        b.status,
        b.host,
        length=len(data),
        is_chunked=b.chunked,
        is_gzip=use_gzip,
        vary=b.gzip,
        keep_alive=keep_alive,
    )
    if head_only:
        return Response(response_head, b"")
    return Response(response_head, chunked(data) if b.chunked else data)


def streamed_body(b: Behaviour, *, gzip_ok: bool) -> Iterator[bytes]:
    """The wire pieces of a body over :data:`WHOLE_BODY_MAX` (framed when chunked)."""
    use_gzip = b.gzip and gzip_ok
    pieces = gzip_pieces(b.body_bytes) if use_gzip else body_pieces(b.body_bytes)
    if not (b.chunked or use_gzip):
        yield from pieces
        return
    for piece in pieces:
        if piece:
            yield chunk(piece)
    yield LAST_CHUNK


def stalled(b: Behaviour, *, keep_alive: bool) -> bytes:
    """What a ``hang-body`` host sends before stalling: a head announcing the whole
    body and the first half of it (identity encoding, so the cut is exact)."""
    size = max(b.body_bytes, 2)
    sent = body(min(size // 2, WHOLE_BODY_MAX))
    if b.chunked:
        return head(b.status, b.host, length=None, is_chunked=True, keep_alive=keep_alive) + chunk(
            sent
        )
    return head(b.status, b.host, length=size, keep_alive=keep_alive) + sent
