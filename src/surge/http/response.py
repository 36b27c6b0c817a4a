"""What a request gives back: :class:`Response`, and its :class:`Headers`.

The names are httpx's where httpx has one (``status_code``, ``content``,
``text``, ``json()``, ``raise_for_status()``, ``headers.get_list()``), so a
user moving over does not relearn them.  Headers are kept as the raw head and
parsed only when asked for: a bulk run that never looks at them pays nothing.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from surge.errors import HTTPStatusError, RequestError, ResponseNotRead, StreamError
from surge.http.connection import body_too_large, parse_head
from surge.http.timings import Timings, redirect_ms

if TYPE_CHECKING:
    from surge.http.connection import HTTPConnection
    from surge.http.decoding import Decoder
    from surge.http.stream import BodyStream

#: Compiled by ``re`` at the first ``.encoding``/``.text`` (re.IGNORECASE: ~0.25 ms).
_CHARSET = r";\s*charset\s*=\s*\"?([^\s;\"]+)"


class Headers(Mapping[str, str]):
    """Response headers: a case-insensitive mapping that keeps every value.

    ``headers["set-cookie"]`` joins repeated values with ", " (as httpx does);
    ``get_list(name)`` gives each one; ``multi_items()`` every (name, value) pair
    in the order received, names as sent.
    """

    __slots__ = ("_by_name", "_items")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        by_name: dict[str, list[str]] = {}
        for name, value in items:
            by_name.setdefault(name.lower(), []).append(value)
        self._by_name = by_name

    def __getitem__(self, name: str) -> str:
        return ", ".join(self._by_name[name.lower()])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)  # lower-cased names, each once, in first-seen order

    def __len__(self) -> int:
        return len(self._by_name)

    def get_list(self, name: str) -> list[str]:
        """Every value of ``name``, in order (empty if absent)."""
        return list(self._by_name.get(name.lower(), ()))

    def multi_items(self) -> list[tuple[str, str]]:
        """Every (name, value) pair, in the order received."""
        return list(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._items == other._items
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class Response:
    """A complete response: status, headers, the (decoded) body, and timings.

    ``url`` (and ``final_url``) is the URL that answered, after redirects, as in
    httpx and requests; ``requested_url`` the one asked for; ``history`` the
    redirect responses on the way; ``bytes`` is the body's size on the wire, before decoding;
    ``attempts`` the tries under the caller's retries; ``redirects`` the hops
    followed; ``connection`` the connection it came on (``address``, ``tls``).

    A streamed response (``client.stream(...)``) has its head and not yet its
    body: read it whole (``read()``/``aread()``), or iterate it
    (``iter_bytes()``/``aiter_bytes()``, ``_raw``, ``_text``, ``_lines``) and
    close it (``close()``/``aclose()``; the ``with`` block does).
    """

    __slots__ = (
        "_headers",
        "_history",
        "_stream",
        "attempts",
        "body",
        "bytes",
        "connection",
        "final_url",
        "head",
        "redirects",
        "request_head",
        "requested_url",
        "status",
        "timings",
    )

    def __init__(
        self,
        url: str,
        final_url: str,
        status: int,
        head: bytes,
        body: bytes,
        wire_bytes: int,
        timings: Timings,
        attempts: int,
        redirects: int,
        connection: HTTPConnection | None = None,
    ) -> None:
        self.requested_url = url  # as asked for (a record's "url")
        self.final_url = final_url
        self._history: list[Response] | None = None
        self.status = status
        self.head = head  # the status line and header lines, as received
        self._headers: Headers | None = None
        self.body = body
        self.bytes = wire_bytes  # body bytes on the wire (before decoding)
        self.timings = timings
        self.attempts = attempts
        self.redirects = redirects
        self.connection = connection
        self._stream: BodyStream | None = None
        #: The last hop's request as sent (head, and a body given as bytes):
        #: kept for streamed responses (a WARC's request record), else None.
        self.request_head: bytes | None = None

    # -- httpx's names --------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL that answered: the last hop's (httpx's and requests' meaning);
        ``requested_url`` is the one asked for."""
        return self.final_url

    @property
    def history(self) -> list[Response]:
        """The redirect responses followed to this one, first first (httpx's and
        requests' name); each is a whole response of its own hop."""
        return list(self._history) if self._history else []

    @property
    def status_code(self) -> int:
        return self.status

    @property
    def content(self) -> bytes:
        """The body, decoded from its Content-Encoding (gzip, deflate, br, zstd)."""
        if self._stream is not None:
            raise ResponseNotRead(
                "a streamed response's body is not read yet: read() or aread() it first"
            )
        return self.body

    @property
    def encoding(self) -> str:
        """The charset of the Content-Type, if it names one Python knows; else UTF-8.
        Of several Content-Type headers the last counts (the Fetch standard's rule)."""
        types = self.headers.get_list("content-type")
        found = re.search(_CHARSET, types[-1], re.IGNORECASE) if types else None
        if found is not None:
            name = found.group(1)
            try:
                "".encode(name)
            except LookupError:
                return "utf-8"
            return name.lower()
        return "utf-8"

    @property
    def text(self) -> str:
        """The body as text, in ``encoding`` (undecodable bytes replaced)."""
        return self.content.decode(self.encoding, "replace")

    def json(self, **kwargs: Any) -> Any:
        """The body parsed as JSON (``json.loads``; bytes, so UTF-8/16/32 are detected)."""
        return json.loads(self.content, **kwargs)

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    def raise_for_status(self) -> Response:
        """Raise :class:`~surge.errors.HTTPStatusError` on a 4xx or 5xx; return
        the response otherwise (so it chains: ``client.get(u).raise_for_status()``)."""
        if 400 <= self.status < 600:
            kind = "client error" if self.status < 500 else "server error"
            raise HTTPStatusError(f"{self.status} {kind} for {self.final_url}", response=self)
        return self

    @property
    def elapsed(self) -> timedelta:
        """From the request's start (its own network work) to the end of the body."""
        t = self.timings
        if t.started is None or t.done is None:
            return timedelta(0)
        return timedelta(seconds=t.done - t.started)

    # -- headers ----------------------------------------------------------------------------

    @property
    def http_version(self) -> str:
        """As httpx's: "HTTP/1.1", "HTTP/1.0" (from the status line) or "HTTP/2"
        (read on use, not per response)."""
        head = self.head
        if head.startswith(b"HTTP/2 "):
            return "HTTP/2"
        return "HTTP/" + (
            head[5:8].decode("ascii", "replace") if head.startswith(b"HTTP/") else "1.1"
        )

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The response headers as bytes, in order (parsed from ``head`` on use)."""
        return parse_head(self.head)

    @property
    def headers(self) -> Headers:
        """The response headers (latin-1 decoded, as sent): see :class:`Headers`."""
        if self._headers is None:
            self._headers = Headers(
                [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self.raw_headers]
            )
        return self._headers

    def header(self, name: str) -> str | None:
        """The first value of a header, by case-insensitive name (None if absent)."""
        values = self.headers.get_list(name)
        return values[0] if values else None

    @property
    def cookies(self) -> dict[str, str]:
        """The cookies this response sets (Set-Cookie), by name."""
        from surge.http.cookies import response_cookies

        return response_cookies(self.head)

    @property
    def redirect_ms(self) -> float:
        """curl's time_redirect: from the start to the start of the last hop."""
        return redirect_ms(self.timings)

    # -- the body, streamed -------------------------------------------------------------

    @property
    def is_stream_consumed(self) -> bool:
        stream = self._stream
        return stream is not None and stream.consumed

    @property
    def is_closed(self) -> bool:
        """Whether the response holds no connection (its body read, or dropped)."""
        stream = self._stream
        return stream is None or stream.closed

    async def aread(self) -> bytes:
        """Read the rest of a streamed body (decoded, under the client's body cap),
        and give the connection back; the body is then ``content``."""
        stream = self._stream
        if stream is None:
            return self.body
        if stream.consumed:
            raise StreamError("the body was iterated: it is not kept to read() again")
        chunks = []
        size = 0
        try:
            async for chunk in stream.raw():
                size += len(chunk)
                if size > stream.cap:
                    raise body_too_large(stream.cap, self.status)
                chunks.append(chunk)
        except RequestError as e:
            self.annotate(e)
            raise
        self.bytes = stream.wire.body_bytes  # on the wire, as aiter_raw counts it
        decoder = stream.decoder(stream.cap)
        if decoder is not None:
            out: list[bytes] = []
            for chunk in chunks:
                out.extend(decoder.feed(chunk))
            out.extend(decoder.finish())
            chunks = out
        self.body = b"".join(chunks)
        self._stream = None
        return self.body

    def annotate(self, error: RequestError) -> None:
        """Give ``error``, which ended the reading of this response's body, what a
        record of it needs: this response's URLs, timings, status, bytes read,
        redirects, and the connection's address and TLS."""
        error.url, error.final_url, error.timings = self.requested_url, self.final_url, self.timings
        error.status, error.bytes, error.redirects = self.status, self.bytes, self.redirects
        conn = self.connection
        if conn is not None and conn.address is not None:
            error.remote_ip, error.tls = conn.address[0], conn.tls_info()

    def content_decoder(self, cap: int | None = None) -> Decoder | None:
        """A streamed response's decoder for its Content-Encoding, every line of
        it (None: nothing to undo, a coding surge leaves as it came, or a
        client made with ``decompress=False``): for a body read with
        ``aiter_raw()`` and decoded elsewhere.  ``cap``: decoded bytes at most."""
        stream = self._stream
        return stream.decoder(cap) if stream is not None else None

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it came off the wire, chunk by chunk: its transfer codings
        undone (dechunked; a ``Transfer-Encoding: gzip`` inflated, held to the
        body cap as every decoded layer is), its content codings not."""
        stream = self._stream
        if stream is None:
            if self.body:
                yield self.body  # already read (and decoded): what there is
            return
        wire = stream.wire
        async for chunk in stream.raw():
            # The size on the wire, before any decoding (curl's size_download),
            # as a body read whole counts it: a Transfer-Encoding's is undone here.
            self.bytes = wire.body_bytes
            yield chunk
        self.bytes = wire.body_bytes

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body decoded from its Content-Encoding, in pieces as they come
        (each at most 256 KiB however far a compressed chunk inflates).  What a
        coding decodes to is held to the client's body cap, as a body read
        whole is: a bomb is ``body_too_large``, not gigabytes handed on."""
        stream = self._stream
        if stream is None:
            if self.body:
                yield self.body
            return
        decoder = stream.decoder(stream.cap)
        async for chunk in self.aiter_raw():
            if decoder is None:
                yield chunk
                continue
            for piece in decoder.feed(chunk):
                yield piece
        if decoder is not None:
            for piece in decoder.finish():
                yield piece

    async def aiter_text(self) -> AsyncIterator[str]:
        """The body as text, in ``encoding``, in pieces (a character split across
        chunks is joined; undecodable bytes replaced)."""
        decoder = codecs.getincrementaldecoder(self.encoding)(errors="replace")
        async for chunk in self.aiter_bytes():
            text = decoder.decode(chunk)
            if text:
                yield text
        text = decoder.decode(b"", final=True)
        if text:
            yield text

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines, without their ends (``\n``, ``\r\n`` or ``\r``)."""
        pending = ""
        async for text in self.aiter_text():
            pending += text
            lines = pending.splitlines(keepends=True)
            # The last line may go on in the next piece (a "\r" may be half a "\r\n").
            pending = lines.pop() if lines and not lines[-1].endswith("\n") else ""
            for line in lines:
                yield line.rstrip("\r\n")
        if pending:
            yield pending.rstrip("\r\n")

    async def aclose(self) -> None:
        """Let go of the connection: back to the pool if the body was read to its
        end, else closed.  Again: nothing."""
        if self._stream is not None:
            await self._stream.aclose()

    # The synchronous client's twins: each step runs on its loop.

    def read(self) -> bytes:
        return self._sync(self.aread)  # type: ignore[no-any-return]

    def iter_raw(self) -> Iterator[bytes]:
        return self._sync_iter(self.aiter_raw())

    def iter_bytes(self) -> Iterator[bytes]:
        return self._sync_iter(self.aiter_bytes())

    def iter_text(self) -> Iterator[str]:
        return self._sync_iter(self.aiter_text())

    def iter_lines(self) -> Iterator[str]:
        return self._sync_iter(self.aiter_lines())

    def close(self) -> None:
        if self._stream is not None and not self._stream.closed:
            self._sync(self.aclose)

    def _runner(self) -> Any:
        """How a step runs: on the synchronous client's loop while the body is
        unread; in place once it is (the steps then never wait)."""
        stream = self._stream
        if stream is None:
            return _in_place
        if stream.run is None:
            raise StreamError("an AsyncClient's response: use aread(), aiter_bytes(), ...")
        return stream.run

    def _sync(self, method: Any) -> Any:
        return self._runner()(method())

    def _sync_iter(self, iterator: AsyncIterator[Any]) -> Iterator[Any]:
        run = self._runner()
        while True:
            try:
                yield run(anext(iterator))
            except StopAsyncIteration:
                return

    def __repr__(self) -> str:
        if self._stream is not None:
            return f"<Response {self.status} {self.final_url} streamed>"
        return f"<Response {self.status} {self.final_url} {len(self.body)} bytes>"


def _in_place(awaitable: Any) -> Any:
    """The result of an awaitable that completes without waiting for anything."""
    try:
        awaitable.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("a read response's body waited for I/O")  # pragma: no cover
