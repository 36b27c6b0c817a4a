"""What ``surge fetch`` keeps of bodies: files (``--output-dir``) and WARC
records (``--warc``), each body streamed to disk as it arrives.

A run that keeps bodies reads each response as a stream (surge.http's
``client.stream``): the connection's read-ahead and the decoder's pieces bound
what one request holds, never the body, so 100 requests in flight of 50 MB
bodies take megabytes, not gigabytes.  ``--max-filesize`` bounds each body on
the wire and decoded alike: past it the record says ``body_too_large``, no more
than the cap reached the disk, and the partial file is removed.  (The WARC
keeps what the wire carried: a body that decodes past the cap, but is under it
on the wire, is still written there.)

Every file goes through :mod:`surge.sinks`: a write that fails is one error
naming the file (the run stops, exit 2), never a traceback.

Files.  ``DIR/HOST/NAME``: HOST is the input URL's host as sent (IDNA for
international names, lower-case), with ``_PORT`` when the port is not the
scheme's; NAME is the first 32 hex digits of the SHA-256 of the input URL.  So
the same URL lands in the same file on every run (a re-run replaces it), no
URL can name a path outside DIR (nothing of its path is used), and two inputs
share a file only if they are the same URL.  A body is written to a hidden
temporary file beside its final name and renamed when complete
(:func:`surge.sinks.open_replacement`): an interrupted run or a failed request
leaves no half body under a final name.  The file
holds the body decoded from its Content-Encoding (what a browser would save);
the record says where (``body_path``) and what (``body_sha256`` of the file).

WARC.  Each hop's request and response, the response body as it came off the
wire with its transfer codings undone (dechunked), its content codings not,
written by :class:`surge.bulk.warc.WarcWriter`: a redirect followed as it is
followed (the client's ``_on_hop``), the final response after its body is
complete.  A request that fails writes its redirects, not its failure; each
try under ``--retries`` writes what it exchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from time import perf_counter, time
from typing import IO, TYPE_CHECKING, Any

from surge.bulk.ranges import continuation, continue_header
from surge.errors import LocalResourceError, RequestError, SinkError, UsageError
from surge.http.connection import body_too_large
from surge.http.url import parse_url
from surge.sinks import (
    LOCAL_SHORTAGE,
    Sink,
    open_output,
    open_replacement,
    reason,
    refuse_claimed,
)

if TYPE_CHECKING:
    from surge.bulk.warc import WarcWriter
    from surge.http.client import AsyncClient
    from surge.http.response import Response

_UNSAFE = re.compile(r"[^a-z0-9._-]")


#: glibc's mallopt parameter for the size from which malloc maps memory of its own.
_M_MMAP_THRESHOLD = -3
_large_allocations_bounded = False


def return_large_buffers() -> None:
    """Have glibc give every large buffer back to the system when it is freed.

    A streamed body passes through the process as reads of up to 256 KiB; glibc
    maps such a block and unmaps it when freed - until the first unmapping,
    after which it raises its threshold (up to 32 MB) and serves those sizes
    from its heap, where 100 connections' reads, freed in any order, left
    ~100 MB of holes: 136 MB peak RSS for 100 bodies of 50 MB in flight, 95 MB
    with the threshold fixed at 128 KiB (benchmarks/fetch_extras.py).  So a
    run that keeps bodies fixes it, once, for the process (Linux's glibc only;
    elsewhere nothing).  A block that size costs an mmap and a munmap, a few
    microseconds against the 256 KiB it carries.
    """
    global _large_allocations_bounded
    if _large_allocations_bounded or not sys.platform.startswith("linux"):
        return
    _large_allocations_bounded = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):  # not glibc (musl, say): nothing to tune
        pass


class BodyFiles:
    """Where ``--output-dir`` puts each body (see the module's docstring)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = Path(directory)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{directory}: cannot create the directory: {e.strerror}") from None
        if not os.access(self.root, os.W_OK):
            raise UsageError(f"{directory}: cannot write: permission denied")
        self._turns: dict[Path, list[Any]] = {}

    def path_for(self, url: str) -> Path:
        """The file of ``url``'s body."""
        target = parse_url(url)
        host = target.host.lower().strip("[]")
        folder = _UNSAFE.sub("_", host) or "_"
        if folder in (".", ".."):
            folder = "_" + folder
        default = 443 if target.scheme == "https" else 80
        if target.port != default:
            folder = f"{folder}_{target.port}"
        name = hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        return self.root / folder / name

    @contextlib.asynccontextmanager
    async def turn(self, path: Path) -> AsyncIterator[None]:
        """Hold ``path`` for one request at a time (``-C -`` writes a body in
        place, so the same URL twice in flight takes turns: the second goes on
        from what the first left, instead of both appending at once)."""
        held = self._turns.get(path)
        if held is None:
            held = self._turns[path] = [asyncio.Lock(), 0]
        lock: asyncio.Lock = held[0]
        held[1] += 1
        try:
            async with lock:
                yield
        finally:
            held[1] -= 1
            if held[1] == 0:
                del self._turns[path]


#: A WARC body held in memory up to this; past it, in a file beside the WARC.
SPOOL_IN_MEMORY = 1024 * 1024


class _Spool:
    """The wire's bytes of one body, for the WARC: the connection's chunks as
    they are (no copy) up to :data:`SPOOL_IN_MEMORY`, then a file beside the
    WARC (not /tmp, often memory itself), so that what 100 bodies in flight
    hold is their read-ahead, not their bodies.  A list rather than a
    ``SpooledTemporaryFile``: that one cost ~5 us per 10 KB body (its creation,
    the BytesIO copy and the read back) against ~0.2 us."""

    __slots__ = ("chunks", "file", "size", "warc")

    def __init__(self, warc: WarcWriter) -> None:
        self.warc = warc
        self.chunks: list[bytes] = []
        self.size = 0
        self.file: IO[bytes] | None = None

    def write(self, chunk: bytes) -> None:
        file = self.file
        try:
            if file is None:
                self.size += len(chunk)
                if self.size <= SPOOL_IN_MEMORY:
                    self.chunks.append(chunk)
                    return
                folder = self.warc.path.parent
                # closed by close()
                file = self.file = tempfile.TemporaryFile(dir=folder, prefix=".surge-warc-")  # noqa: SIM115
                file.writelines(self.chunks)
                self.chunks = []
            file.write(chunk)
        except OSError as e:
            raise _spool_error(self.warc, e) from None

    def pieces(self) -> list[bytes]:
        """The body, as pieces in order: read back whole at the write (one body
        at a time, as writes do not overlap), not every body in flight."""
        if self.file is None:
            return self.chunks
        try:
            self.file.seek(0)
            return [self.file.read()]
        except OSError as e:
            raise _spool_error(self.warc, e) from None

    def close(self) -> None:
        self.chunks = []
        if self.file is not None:
            self.file.close()


def _spool_error(warc: WarcWriter, error: OSError) -> UsageError | LocalResourceError:
    """A failure of the WARC's spool file (beside the WARC): out of descriptors
    is waited out by the engine, anything else stops the run naming the folder."""
    where = f"{warc.path.parent}/.surge-warc-*"
    if error.errno in LOCAL_SHORTAGE:
        return LocalResourceError(f"{where}: cannot open: {reason(error)}")
    return SinkError(f"{where}: cannot write: {reason(error)}")


def _write_exchange(
    warc: WarcWriter, response: Response, body: list[bytes], sent: float | None, line: int | None
) -> None:
    """One exchange to the WARC: the request as sent, the response as received."""
    conn = response.connection
    ip = conn.address[0] if conn is not None and conn.address is not None else None
    head, _, sent_body = (response.request_head or b"").partition(b"\r\n\r\n")
    # when the request was sent, in POSIX seconds (timings are perf_counter's)
    date = None if sent is None else time() - (perf_counter() - sent)
    # a failed write is the sink's SinkError, naming the WARC
    warc.write_exchange(
        response.final_url, ip, head, sent_body, response.head, body, date, line=line
    )


class _Saved:
    """A body being written to its file: a replacement (surge.sinks), temporary
    until complete.  Each body has a temporary file of its own, not one per URL:
    the same URL twice in flight writes two (the later rename wins), never one
    file twice."""

    def __init__(self, final: Path) -> None:
        self.final = final
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SinkError(f"{final.parent}: cannot create the directory: {reason(e)}") from None
        self.sink: Sink = open_replacement(final)
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.sink.write(data)
        self.hash.update(data)

    def finish(self) -> str:
        self.sink.commit()
        return self.hash.hexdigest()

    def drop(self) -> None:
        self.sink.discard()

    def fail(self, error: BaseException) -> None:
        """The transfer failed or was stopped: no half body under the final name."""
        self.sink.discard()


#: What a continued body's file is read back in, to hash the bytes it held.
_READ_BACK = 1024 * 1024


class _Partial:
    """A body continued in place (``-C -``, :mod:`surge.bulk.ranges`): the
    file under its final name, opened and locked (surge.sinks) before the
    request, so that its size is the offset the Range asks from.  A 206 is
    appended to it, a whole body rewrites it from byte 0; what arrived stays
    when the transfer fails or the run is stopped - the partial file the next
    ``-C -`` run goes on from - but for a body past the cap, cut back to where
    this transfer began.  ``body_sha256`` is of the whole file."""

    def __init__(self, final: Path) -> None:
        self.final = final
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SinkError(f"{final.parent}: cannot create the directory: {reason(e)}") from None
        refuse_claimed(final)  # no other output of the run, by a link
        self.sink: Sink = open_output(final, append=True, rollback="write")
        #: The partial file's size: where the Range asks from.
        self.offset = self.sink.position
        #: Where this transfer's bytes begin in the file.
        self.start = self.offset
        self.hash = hashlib.sha256()
        self.kept = False

    def begin(self, outcome: str) -> None:
        """Write on from the file's end ("appended"), or from byte 0."""
        if outcome == "appended":
            self.hash = self.held_hash()
        elif self.offset:
            self.sink.truncate(0)
            self.start = 0

    def held_hash(self) -> Any:
        """The SHA-256 of the ``offset`` bytes the file held (read back)."""
        digest = hashlib.sha256()
        at = 0
        try:
            while at < self.offset:
                piece = os.pread(self.sink.fd, min(_READ_BACK, self.offset - at), at)
                if not piece:
                    raise OSError(0, f"the file ended at {at} of {self.offset} bytes")
                digest.update(piece)
                at += len(piece)
        except OSError as e:
            raise SinkError(f"{self.final}: cannot read back: {reason(e)}") from None
        return digest

    def write(self, data: bytes) -> None:
        self.sink.write(data)
        self.hash.update(data)

    def finish(self) -> str:
        self.kept = True
        self.sink.close()
        return self.hash.hexdigest()

    def drop(self) -> None:
        """Cut back to where this transfer began (a body past the cap)."""
        if self.sink.regular and not self.sink.closed:
            self.sink.truncate(self.start)
        self.close()

    def fail(self, error: BaseException) -> None:
        if isinstance(error, RequestError) and error.error_class == "body_too_large":
            self.drop()
        else:  # what arrived is the partial file the next -C run continues
            self.close()

    def close(self) -> None:
        """Let go of the file; one this run created and wrote nothing to is removed."""
        if self.kept:
            self.sink.discard()
        else:
            self.sink.abandon()


async def fetch_kept(
    client: AsyncClient,
    url: str,
    method: str,
    headers: Any,
    body: bytes | None,
    cap: int,
    files: BodyFiles | None,
    warc: WarcWriter | None,
    line: int | None = None,
    limit_rate: int | None = None,
    max_time: float | None = None,
    continuing: bool = False,
    partial: _Partial | None = None,
) -> tuple[Response, dict[str, Any]]:
    """One request whose body is kept: the response (its body not held) and the
    record's extra fields (``body_path``, ``body_sha256``); ``line``: the input
    line it is of, which its WARC exchanges name.  Raises the request's
    ``RequestError``, as ``client.request`` does; a local failure to write (a
    full disk) is a ``UsageError`` naming the file.

    ``limit_rate`` (--limit-rate): bytes a second at most, on average from the
    body's start, as curl's: the body is read no faster, and the connection's
    read-ahead bound (``STREAM_HIGH_WATER``) makes the sender wait too.  Its
    waits end within ``max_time`` from the call (the try's own bound, which a
    body paced past it ends as a ``read_timeout``, as curl's exit 28).

    ``continuing`` (-C -, with ``files``): the body continues the partial
    file under its name, written in place (:class:`_Partial`, the rules:
    surge.bulk.ranges); the extra fields gain ``continue_from`` and
    ``continued``; ``partial``: that file, held (the call is made again with
    it).  A 206's body is saved as it came (a part of a coded body cannot be
    decoded alone), with or without ``continuing``."""
    if continuing and partial is None and files is not None and method != "HEAD":
        path = files.path_for(url)
        async with files.turn(path):
            partial = _Partial(path)
            try:
                asked = continue_header(partial.offset)
                if asked is not None:
                    own = list(headers.items() if isinstance(headers, Mapping) else headers or ())
                    headers = [*own, asked]
                return await fetch_kept(
                    client,
                    url,
                    method,
                    headers,
                    body,
                    cap,
                    files,
                    warc,
                    line,
                    limit_rate,
                    max_time,
                    partial=partial,
                )
            finally:
                partial.close()
    on_hop = None
    if warc is not None:
        # every redirect hop is an exchange of its own in the WARC, written as
        # it is followed (wget's --warc-file and warcprox do the same)
        def on_hop(hop: Response, hop_body: list[bytes]) -> None:
            _write_exchange(warc, hop, hop_body, hop.timings.sent, line)

    called = asyncio.get_running_loop().time()
    async with client.stream(method, url, headers=headers, body=body, _on_hop=on_hop) as response:
        saved: _Saved | _Partial | None = None
        raw = None
        too_large: RequestError | None = None  # the decoded body passed the cap
        continued = None
        try:
            if partial is not None:
                continued = continuation(
                    partial.offset,
                    response.status,
                    response.header("content-range"),
                    response.header("content-encoding"),
                )
                if continued in ("new", "appended", "restarted"):
                    partial.begin(continued)
                    saved = partial
            elif files is not None and method != "HEAD":
                saved = _Saved(files.path_for(url))
            # every Content-Encoding line undone, the decoded body under the cap
            # too: a bomb is not written out (a 206's part of a coded body is
            # not decodable alone: saved as it came, as curl saves it)
            decoder = (
                response.content_decoder(cap)
                if saved is not None and response.status != 206
                else None
            )
            raw = _Spool(warc) if warc is not None else None
            size = 0
            loop = asyncio.get_running_loop()
            began = loop.time()
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if limit_rate is not None:
                    now = loop.time()
                    ahead = size / limit_rate - (now - began)
                    if max_time is not None and now + ahead > called + max_time:
                        await asyncio.sleep(max(0.0, called + max_time - now))
                        raise RequestError(
                            "read_timeout",
                            f"the body, read at --limit-rate {limit_rate:,} bytes/s, takes "
                            f"longer than the try may ({max_time:g} s)",
                            status=response.status,
                        )
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                # the cap on the wire (response.bytes) and on what a transfer
                # coding decodes to (size), as a body read whole is held
                if size > cap or response.bytes > cap:
                    raise body_too_large(cap, response.status)
                if raw is not None:
                    raw.write(chunk)
                if saved is not None:
                    if decoder is None:
                        saved.write(chunk)
                    else:
                        try:
                            for piece in decoder.feed(chunk):
                                saved.write(piece)
                        except RequestError as e:
                            if e.error_class != "body_too_large" or raw is None:
                                raise
                            # The file is dropped (no more than the cap reached it);
                            # the WARC still gets the wire's bytes, read to the end.
                            too_large = e
                            saved.drop()
                            saved = None
            if saved is not None and decoder is not None:
                for piece in decoder.finish():
                    saved.write(piece)
        except BaseException as e:
            if saved is not None:
                saved.fail(e)
            if raw is not None:
                raw.close()
            if isinstance(e, RequestError):
                response.annotate(e)
            raise
    extras: dict[str, Any] = {}
    if saved is not None:
        try:
            extras["body_sha256"] = saved.finish()
        except BaseException as e:
            saved.fail(e)
            if raw is not None:
                raw.close()
            raise
        extras["body_path"] = str(saved.final)
    if partial is not None:
        if continued == "complete":
            extras["body_sha256"] = partial.held_hash().hexdigest()
            extras["body_path"] = str(partial.final)
        extras["continue_from"] = partial.offset
        extras["continued"] = continued
    if warc is not None and raw is not None:
        try:
            _write_exchange(warc, response, raw.pieces(), response.timings.sent, line)
        finally:
            raw.close()
    if too_large is not None:
        response.annotate(too_large)
        raise too_large
    return response, extras
