"""What ``surge fetch`` keeps of bodies: files (``--output-dir``) and WARC
records (``--warc``), each body streamed to disk as it arrives.

A run that keeps bodies reads each response as a stream (surge.http's
``client.stream``): the connection's read-ahead and the decoder's pieces bound
what one request holds, never the body, so 100 requests in flight of 50 MB
bodies take megabytes, not gigabytes.  ``--max-filesize`` still bounds each
body on the wire: a longer one is ``body_too_large`` and nothing of it is kept.

Files.  ``DIR/HOST/NAME``: HOST is the input URL's host as sent (IDNA for
international names, lower-case), with ``_PORT`` when the port is not the
scheme's; NAME is the first 32 hex digits of the SHA-256 of the input URL.  So
the same URL lands in the same file on every run (a re-run replaces it), no
URL can name a path outside DIR (nothing of its path is used), and two inputs
share a file only if they are the same URL.  A body is written to a hidden
temporary file beside its final name and renamed when complete: an interrupted
run or a failed request leaves no half body under a final name.  The file
holds the body decoded from its Content-Encoding (what a browser would save);
the record says where (``body_path``) and what (``body_sha256`` of the file).

WARC.  Each hop's request and response, the response body as it came off the
wire (dechunked, not decoded), written by :class:`surge.bulk.warc.WarcWriter`:
a redirect followed as it is followed (the client's ``_on_hop``), the final
response after its body is complete.  A request that fails writes its
redirects, not its failure; each try under ``--retries`` writes what it
exchanged.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import os
import re
import sys
import tempfile
from pathlib import Path
from time import perf_counter, time
from typing import IO, TYPE_CHECKING, Any

from surge.errors import RequestError, UsageError
from surge.http.connection import body_too_large
from surge.http.url import parse_url

if TYPE_CHECKING:
    from surge.bulk.warc import WarcWriter
    from surge.http.client import AsyncClient
    from surge.http.response import Response

_UNSAFE = re.compile(r"[^a-z0-9._-]")
_TEMP_NUMBERS = itertools.count()


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

    def pieces(self) -> list[bytes]:
        """The body, as pieces in order: read back whole at the write (one body
        at a time, as writes do not overlap), not every body in flight."""
        if self.file is None:
            return self.chunks
        self.file.seek(0)
        return [self.file.read()]

    def close(self) -> None:
        self.chunks = []
        if self.file is not None:
            self.file.close()


def _write_exchange(
    warc: WarcWriter, response: Response, body: list[bytes], sent: float | None
) -> None:
    """One exchange to the WARC: the request as sent, the response as received."""
    conn = response.connection
    ip = conn.address[0] if conn is not None and conn.address is not None else None
    head, _, sent_body = (response.request_head or b"").partition(b"\r\n\r\n")
    # when the request was sent, in POSIX seconds (timings are perf_counter's)
    date = None if sent is None else time() - (perf_counter() - sent)
    try:
        warc.write_exchange(response.final_url, ip, head, sent_body, response.head, body, date)
    except OSError as e:
        raise UsageError(f"{warc.path}: writing the WARC failed: {e.strerror}") from None


class _Saved:
    """A body being written to its file: temporary until complete."""

    def __init__(self, final: Path) -> None:
        self.final = final
        final.parent.mkdir(parents=True, exist_ok=True)
        # Unique per body, not per URL: the same URL twice in flight writes two
        # temporary files (the later rename wins), never one file twice.
        self.temp = final.with_name(f".{final.name}.{os.getpid()}.{next(_TEMP_NUMBERS)}.part")
        self.file: IO[bytes] = open(self.temp, "wb")  # noqa: SIM115 - closed by finish/drop
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.hash.update(data)

    def finish(self) -> str:
        self.file.close()
        os.replace(self.temp, self.final)
        return self.hash.hexdigest()

    def drop(self) -> None:
        self.file.close()
        with contextlib.suppress(OSError):
            self.temp.unlink()


async def fetch_kept(
    client: AsyncClient,
    url: str,
    method: str,
    headers: Any,
    body: bytes | None,
    cap: int,
    files: BodyFiles | None,
    warc: WarcWriter | None,
) -> tuple[Response, dict[str, Any]]:
    """One request whose body is kept: the response (its body not held) and the
    record's extra fields (``body_path``, ``body_sha256``).  Raises the request's
    ``RequestError``, as ``client.request`` does; a local failure to write (a
    full disk) is a ``UsageError`` naming the file."""
    on_hop = None
    if warc is not None:
        # every redirect hop is an exchange of its own in the WARC, written as
        # it is followed (wget's --warc-file and warcprox do the same)
        def on_hop(hop: Response, hop_body: list[bytes]) -> None:
            _write_exchange(warc, hop, hop_body, hop.timings.sent)

    async with client.stream(method, url, headers=headers, body=body, _on_hop=on_hop) as response:
        saved = None
        try:
            if files is not None and method != "HEAD":
                path = files.path_for(url)
                try:
                    saved = _Saved(path)
                except OSError as e:
                    raise UsageError(f"{path}: cannot write: {e.strerror}") from None
            decoder = response.content_decoder() if saved is not None else None
            raw = _Spool(warc) if warc is not None else None
            size = 0
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > cap:
                    raise body_too_large(cap, response.status)
                if raw is not None:
                    raw.write(chunk)
                if saved is not None:
                    if decoder is None:
                        saved.write(chunk)
                    else:
                        for piece in decoder.feed(chunk):
                            saved.write(piece)
            if saved is not None and decoder is not None:
                for piece in decoder.finish():
                    saved.write(piece)
        except RequestError as e:
            if saved is not None:
                saved.drop()
            if raw is not None:
                raw.close()
            response.annotate(e)
            raise
        except BaseException:
            if saved is not None:
                saved.drop()
            if raw is not None:
                raw.close()
            raise
    extras: dict[str, Any] = {}
    if saved is not None:
        try:
            extras["body_sha256"] = saved.finish()
        except OSError as e:
            saved.drop()
            raise UsageError(f"{saved.final}: cannot write: {e.strerror}") from None
        extras["body_path"] = str(saved.final)
    if warc is not None and raw is not None:
        try:
            _write_exchange(warc, response, raw.pieces(), response.timings.sent)
        except OSError as e:  # reading the spooled body back
            raise UsageError(f"{warc.path}: writing the WARC failed: {e.strerror}") from None
        finally:
            raw.close()
    return response, extras
