"""httpx's request arguments - ``params``, ``content``, ``data``, ``json`` - turned
into what a request sends: a URL, header pairs and body bytes.

One place for the rules, used by both clients:

* ``params`` (a mapping or (name, value) pairs; a list value repeats the name)
  is form-encoded and appended to the URL's query (after ``&`` if it has one);
* at most one body: ``content`` (bytes, or text sent as UTF-8; or streamed -
  a binary file, an iterator or an async iterator of bytes, see
  :class:`Upload`), ``data`` (a mapping: ``application/x-www-form-urlencoded``)
  or ``json`` (any JSON value, compact, UTF-8: ``application/json``);
* a Content-Type the caller gave wins over the one a body argument implies.
"""

from __future__ import annotations

import io
import json as jsonlib
import os
import stat
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from surge.errors import StreamConsumed, UsageError
from surge.http.headers import HeaderInput

if TYPE_CHECKING:
    from surge.http.portal import Caller

#: A query or form: a mapping, or (name, value) pairs.  A value may be a list.
Params = Mapping[str, Any] | Iterable[tuple[str, Any]]


def form(params: Params) -> str:
    """``params`` form-encoded (``a=1&b=x+y``); a list value repeats its name."""
    items = params.items() if isinstance(params, Mapping) else params
    pairs: list[tuple[str, str]] = []
    for name, value in items:
        values = value if isinstance(value, list | tuple) else [value]
        pairs.extend((str(name), _text(v)) for v in values)
    return urlencode(pairs)


def with_params(url: str, params: Params) -> str:
    """``url`` with ``params`` form-encoded onto its query (before any fragment)."""
    query = form(params)
    if not query:
        return url
    base, hash_, fragment = url.partition("#")
    joiner = "&" if "?" in base and not base.endswith(("?", "&")) else ("" if "?" in base else "?")
    return f"{base}{joiner}{query}{hash_}{fragment}"


class FileRange:
    """``length`` bytes of an open file from ``offset``, read with ``os.pread`` as
    they are sent: one part of a multipart upload, sent with its Content-Length,
    without moving the file's position (parts of one file go out at once)."""

    __slots__ = ("fd", "length", "offset", "position")

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd = fd
        self.offset = offset
        self.length = length
        self.position = 0

    def read(self, size: int = -1) -> bytes:
        left = self.length - self.position
        if size < 0 or size > left:
            size = left
        block = os.pread(self.fd, size, self.offset + self.position) if size else b""
        self.position += len(block)
        return block

    def seek(self, position: int) -> None:
        self.position = position


class Upload:
    """A request body sent as it is read, never held whole.

    A binary file - on disk, or in memory (``io.BytesIO``) - is sent with a
    Content-Length (what is left of it, from where it stands) and read 64 KiB
    at a time; an iterator or an async
    iterator of bytes is sent chunked (its length is not known before the
    end), and so is a pipe or a socket, read as its bytes come.  A file can be
    sent again - a 307/308 redirect, or the one retry of a request that met a
    stale keep-alive connection - from where it began; an iterator cannot:
    such a redirect is :class:`StreamConsumed`, and the stale-connection retry
    is not made once it has begun.

    Where the reads run: the reads of a file and the steps of a plain iterator
    are the caller's code, which may block (a pipe, a slow mount, a generator
    waiting on something).  With ``caller`` set (the synchronous clients: a
    :class:`~surge.http.portal.Caller`), each read runs in the calling thread,
    one read ahead of what is being written (back-pressure: never more than
    one chunk waits), so that no read ever holds the event loop that other
    threads' requests run on; without it (an ``AsyncClient``), in place.  An
    async iterator runs on the loop, where it belongs.  The position a file is
    sent again from is set by its first read, in the same place (``rewind()``
    itself touches nothing of the caller's).
    """

    __slots__ = ("_file", "_seek", "_source", "_start", "caller", "length", "started")

    READ_SIZE = 64 * 1024

    def __init__(self, source: Any, length: int | None = None) -> None:
        self._source = source
        self._file = hasattr(source, "read")
        self._start = 0
        self._seek = False  # the next read starts from _start again
        self.length: int | None = None
        self.started = False
        #: Where the reads run (see the class's notes): None, in place.
        self.caller: Caller | None = None
        if length is not None:  # declared by the caller (a drop-in's Content-Length)
            self.length = length
            if self._file:
                try:
                    self._start = source.tell()
                except (AttributeError, OSError, io.UnsupportedOperation):
                    self._file = False  # read once, as it comes
        elif isinstance(source, FileRange):
            self.length = source.length
        elif self._file:
            if isinstance(source, io.TextIOBase):
                raise UsageError("content= takes a file opened in binary mode ('rb'), not text")
            try:
                self._start = source.tell()
            except (AttributeError, OSError, io.UnsupportedOperation):
                self._file = False  # a pipe or a socket: read until its end, chunked
            else:
                self.length = _length_of(source, self._start)
                if self.length is None:
                    self._file = False

    @property
    def blocking(self) -> bool:
        """Whether its reads are the caller's blocking code (a file, an
        iterator), not an async iterator's steps on the loop."""
        source = self._source
        return hasattr(source, "read") or not hasattr(source, "__aiter__")

    def rewind(self) -> bool:
        """Ready to be sent (again) from its start: True if it can be."""
        if not self.started:
            return True
        if not self._file:
            return False
        self._seek = True  # by the first read, where the reads run
        self.started = False
        return True

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body's bytes, as they are read (none empty)."""
        if self.started and not self.rewind():
            raise StreamConsumed(
                "a streamed request body cannot be sent twice: give bytes or a file"
            )
        self.started = True
        if not self.blocking:
            async for chunk in self._source:
                chunk = _chunk(chunk)
                if chunk:
                    yield chunk
            return
        read = self._reader()
        caller = self.caller
        if caller is None:
            while chunk := read():
                yield chunk
            return
        pending = caller.run(read)
        try:
            while chunk := await pending:
                pending = caller.run(read)  # the next read goes on while this is written
                yield chunk
        finally:
            pending.cancel()  # not run if the calling thread has not begun it

    def _reader(self) -> Callable[[], bytes]:
        """The body's next chunk on each call, b"" at its end: every call into
        the caller's code (see the class's notes), the rewind's seek included."""
        source = self._source
        if not hasattr(source, "read"):
            steps: Iterator[Any] | None = None

            def step() -> bytes:
                nonlocal steps
                if steps is None:
                    steps = iter(source)
                for chunk in steps:
                    chunk = _chunk(chunk)
                    if chunk:
                        return chunk
                return b""

            return step
        # A pipe or a socket: what has come, not 64 KiB (a stream of lines is
        # sent as its lines come).  A file: full reads.
        read = source.read1 if not self._file and hasattr(source, "read1") else source.read
        left = self.length  # None: to the end
        size = self.READ_SIZE
        # This reader's, not the Upload's: a read of the last send still to run
        # (its read-ahead) must not take the seek that this one begins with.
        seek, self._seek = self._seek, False

        def next_read() -> bytes:
            nonlocal left, seek
            if seek:
                seek = False
                source.seek(self._start)
            if left is None:
                chunk = read(size)
            elif left > 0:
                chunk = read(min(size, left))
            else:
                return b""
            if not chunk:
                return b""
            chunk = _chunk(chunk)
            if left is not None:
                left -= len(chunk)
            return chunk

        return next_read


#: File objects whose bytes are their descriptor's (a size from fstat holds).
_PLAIN_FILES = (io.FileIO, io.BufferedReader, io.BufferedRandom)


def _length_of(source: Any, start: int) -> int | None:
    """What is left of a binary file from ``start``, None if it is no file one
    can go back in (a pipe, a socket, a character device): a plain file
    (``open(path, "rb")``, a temporary file) by its size; any other seekable
    file (``io.BytesIO``; ``gzip.open``, whose descriptor is the compressed
    file's, so its size is not the bytes it reads) by seeking to its end and
    back."""
    plain = source if isinstance(source, _PLAIN_FILES) else getattr(source, "file", None)
    if isinstance(plain, _PLAIN_FILES):  # (tempfile's wrappers hold theirs in .file)
        try:
            info = os.fstat(plain.fileno())
        except (OSError, ValueError):
            return None
        return max(0, info.st_size - start) if stat.S_ISREG(info.st_mode) else None
    try:
        if not source.seekable():
            return None
        end = source.seek(0, io.SEEK_END)
        source.seek(start)
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return None
    return max(0, end - start) if isinstance(end, int) else None


def _chunk(chunk: Any) -> bytes:
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, bytearray | memoryview):
        return bytes(chunk)
    raise UsageError(f"a streamed body gives bytes, not {type(chunk).__name__}")


def encode_body(content: Any, data: Any, json: Any) -> tuple[bytes | Upload | None, str | None]:
    """The body and the Content-Type it implies (None: the caller's or none)."""
    given = [
        name for name, v in (("content", content), ("data", data), ("json", json)) if v is not None
    ]
    if len(given) > 1:
        raise UsageError(f"give one request body, not {' and '.join(given)}")
    if content is not None:
        if isinstance(content, Upload):
            return content, None
        if isinstance(content, str):
            return content.encode("utf-8"), None
        if isinstance(content, bytes | bytearray | memoryview):
            return bytes(content), None
        if hasattr(content, "read") or hasattr(content, "__aiter__"):
            return Upload(content), None
        if isinstance(content, Iterable) and not isinstance(content, Mapping):
            return Upload(iter(content)), None
        raise UsageError(
            f"content= takes bytes, str, a binary file or an iterator of bytes, "
            f"not {type(content).__name__}"
        )
    if data is not None:
        if not isinstance(data, Mapping):
            raise UsageError(
                f"data= takes a mapping (a form); send {type(data).__name__} with content="
            )
        return form(data).encode("ascii"), "application/x-www-form-urlencoded"
    if json is not None:
        text = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8"), "application/json"
    return None, None


def prepare(
    url: str,
    params: Params | None,
    headers: HeaderInput,
    content: Any,
    data: Any,
    json: Any,
    body: bytes | None = None,
) -> tuple[str, HeaderInput, bytes | None, Upload | None]:
    """The URL, headers and body of a request made with httpx's arguments: the
    body as bytes, or as an :class:`Upload` to stream (one body at most:
    ``body`` is raw bytes given beside them)."""
    if params is not None:
        url = with_params(url, params)
    encoded, content_type = encode_body(content, data, json)
    if content_type is not None:
        pairs = list(headers.items() if isinstance(headers, Mapping) else headers or ())
        if not any(str(name).lower() == "content-type" for name, _ in pairs):
            pairs.append(("Content-Type", content_type))
        headers = pairs
    if encoded is None:
        return url, headers, body, None
    if body is not None:
        raise UsageError("give one request body: body= or content=/data=/json=")
    if isinstance(encoded, Upload):
        return url, headers, None, encoded
    return url, headers, encoded, None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"  # httpx's spelling, not Python's
    return str(value)
