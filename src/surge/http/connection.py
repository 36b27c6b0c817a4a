"""One HTTP/1.1 client connection: an asyncio Protocol fed by the llhttp parser.

This is the whole wire-level engine, kept behind a small interface (``open``,
``send``, which returns a :class:`WireResponse`, ``close``) so another engine -
a Rust one, say - could replace it.  As in httpcore, the response is an object
of its own, not state of the connection: the connection can go back to the
pool (and carry another request) the moment its response is complete, while
the caller still reads that response.  It is an ``asyncio.Protocol`` rather than streams because a
protocol's ``data_received`` hands bytes straight to httptools' C parser with no
buffering layer in between: on this machine kind such a client spent ~0.02 ms
of CPU per keep-alive request against aiohttp's ~0.14 ms.

httptools gaps handled here:

* It cannot tell llhttp "this response has no body" (llhttp's way is a return
  value from on_headers_complete that httptools does not pass on), so the
  response to a HEAD completes at its head and the parser is replaced.
* It has no ``finish()``, so a body delimited by the connection closing (no
  Content-Length, not chunked) completes in ``connection_lost``.
* 1xx interim responses are skipped.

Headers are not collected through llhttp's per-header callback (a Python call
per header, ten to twenty on real responses): the raw head is kept as bytes,
framing and Content-Encoding are found with C-level searches in it, and the
header list is built only if someone asks for it (``Response.headers``).
"""

from __future__ import annotations

import asyncio
import ssl
from time import perf_counter
from typing import Any

import httptools

from surge.errors import LocalResourceError, RequestError
from surge.http.deadlines import Deadlines, Expirable
from surge.http.timings import Timings

_NO_BODY_STATUSES = frozenset({204, 304})

#: The largest response head accepted (1xx interim heads included), as curl's
#: limit on a response's headers: a server that never ends its head is cut off
#: here, not when ``max_time`` runs out with everything it sent held in memory.
MAX_HEAD_BYTES = 300 * 1024

#: A streamed body's read-ahead: past this many unread bytes the connection stops
#: reading from the socket until the reader catches up (TCP's window then holds
#: the server back), so a slow reader of a large body holds at most this much.
STREAM_HIGH_WATER = 256 * 1024


class WireResponse:
    """One response as the wire gave it: the status, the raw head, the body's
    chunks (not decoded), and when its first byte came.  ``done`` resolves when
    it is complete, or fails with the ``RequestError`` that ended it; the fields
    then say how far it got (``head_done``, ``body_bytes``, ``first_byte``).

    Streamed (``head_ready`` set), the head is there when ``head_ready``
    resolves, and the body is taken a batch of chunks at a time with
    :meth:`next_chunks`; reading pauses while ``STREAM_HIGH_WATER`` bytes wait
    unread, and the client's body cap does not apply (nothing is kept)."""

    __slots__ = (
        "body",
        "body_bytes",
        "buffered",
        "content_encoding",
        "done",
        "first_byte",
        "head",
        "head_done",
        "head_ready",
        "is_head",
        "keep_alive",
        "limit",
        "resume",
        "status",
        "waiter",
    )

    def __init__(
        self,
        done: asyncio.Future[None],
        is_head: bool,
        limit: float,
        head_ready: asyncio.Future[None] | None = None,
    ) -> None:
        self.done = done
        self.is_head = is_head
        self.limit = limit  # the request's max_time, for a read_timeout's message
        self.head_ready = head_ready  # streamed: resolves with the head
        self.waiter: asyncio.Future[None] | None = None  # streamed: a reader waits
        self.buffered = 0  # streamed: bytes received and not yet taken
        self.resume: Any = None  # streamed: resumes the paused socket
        self.status = 0
        self.head = b""  # the final response's status line and header lines
        self.head_done = False
        self.body: list[bytes] = []
        self.body_bytes = 0  # on the wire, before any decoding
        self.first_byte: float | None = None
        self.keep_alive = False
        self.content_encoding: bytes | None = None

    async def next_chunks(self) -> list[bytes]:
        """Streamed: the body chunks received since the last call, waiting for
        some; [] at the end of the body.  Raises the ``RequestError`` that ended
        the response early."""
        while not self.body:
            if self.done.done():
                self.done.result()  # the error that ended it, if one did
                return []
            waiter = self.waiter = self.done.get_loop().create_future()
            try:
                await waiter
            finally:
                self.waiter = None
        chunks = self.body
        self.body = []
        self.buffered = 0
        resume = self.resume
        if resume is not None:
            self.resume = None
            resume()
        return chunks

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class HTTPConnection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection to one (scheme, host, port)."""

    loop: asyncio.AbstractEventLoop  # set when the transport connects

    def __init__(
        self,
        key: tuple[str, str, int],
        deadlines: Deadlines,
        body_cap: int,
    ) -> None:
        self.key = key
        self._deadlines = deadlines
        #: The client's body cap: the same for every exchange on the connection.
        self._body_cap = body_cap
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.requests = 0  # responses completed on this connection
        #: Set by ``open`` for the request that made it; taken by that request.
        self.connect_timings: Timings | None = None
        self._parser: Any = None
        #: The response being read; None while the connection is idle.
        self.response: WireResponse | None = None
        #: The deadline slot this exchange waits in (deadlines.py), while it runs.
        self._slot: set[Expirable] | None = None
        self._head_parts: list[bytes] = []  # the head being read, as it came
        self._head_bytes = 0  # their size
        self._interim = 0  # 1xx heads seen before the final one
        #: Where it connected (address, port), and for TLS (version, cipher, ALPN).
        self.address: tuple[str, int] | None = None
        self.tls: tuple[str | None, str | None, str | None] | None = None
        #: Set while the transport's write buffer is full (a streamed request body
        #: waits on it); resolved when it drains or the connection is lost.
        self._writable: asyncio.Future[None] | None = None

    # -- opening -----------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        key: tuple[str, str, int],
        addresses: tuple[str, ...],
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str,
        timings: Timings,
        deadlines: Deadlines,
        body_cap: int,
    ) -> HTTPConnection:
        """TCP to the first address that answers, then TLS if ``ssl_context``.

        Errors are ``RequestError`` with the class of the phase that failed.
        """
        loop = asyncio.get_running_loop()
        port = key[2]
        error: RequestError | None = None
        transport: Any = None
        protocol: HTTPConnection | None = None
        for address in addresses:
            try:
                transport, protocol = await loop.create_connection(
                    lambda: cls(key, deadlines, body_cap), address, port
                )
                break
            except ConnectionRefusedError:
                error = RequestError("connect_refused", f"{address}:{port} refused the connection")
            except OSError as e:
                if e.errno in LocalResourceError.ERRNOS:  # ours, not the host's
                    raise LocalResourceError(
                        f"connecting to {address}:{port}: {e.strerror or e}"
                    ) from None
                error = RequestError("connect_refused", f"{address}:{port}: {e.strerror or e}")
        if protocol is None:
            assert error is not None
            raise error
        timings.tcp_end = perf_counter()
        protocol.address = (address, port)
        if ssl_context is not None:
            try:
                tls_transport = await loop.start_tls(
                    transport, protocol, ssl_context, server_hostname=server_hostname
                )
            except ssl.SSLCertVerificationError as e:
                transport.abort()
                raise RequestError("tls_error", f"certificate: {e.verify_message}") from None
            except ssl.SSLError as e:
                transport.abort()
                raise RequestError("tls_error", f"TLS handshake: {e.reason or e}") from None
            except (ConnectionError, OSError) as e:
                transport.abort()
                raise RequestError("tls_error", f"TLS handshake: {_describe(e)}") from None
            if tls_transport is None:  # the peer closed during the handshake
                transport.abort()
                raise RequestError("tls_error", "TLS handshake: connection closed")
            protocol.transport = tls_transport
            timings.tls_end = perf_counter()
            tls = tls_transport.get_extra_info("ssl_object")
            if tls is not None:  # once per connection, for `surge trace`
                cipher = tls.cipher()
                protocol.tls = (
                    tls.version(),
                    cipher[0] if cipher else None,
                    tls.selected_alpn_protocol(),
                )
        protocol.connect_timings = timings
        return protocol

    # -- one exchange -------------------------------------------------------------------

    def send(
        self, data: bytes, is_head: bool, deadline: float, limit: float, stream: bool = False
    ) -> WireResponse:
        """Write a request; its response's ``done`` resolves when the response is
        complete, or fails with ``read_timeout`` at ``deadline`` (event-loop time,
        honoured to within the deadlines' resolution, 50 ms).  ``stream``: the
        body is read by the caller as it comes (see :class:`WireResponse`); the
        deadline still covers all of it, as curl's ``--max-time`` does.

        The deadline joins a shared slot (deadlines.py), not a timer of its own and
        not ``asyncio.timeout()``: a timer costs ~3.4 us a request on uvloop, the
        context manager ~10 us.
        """
        if self.closed or self.transport is None:
            raise RequestError("connection_reset", "connection closed before the request")
        loop = self.loop
        response = self.response = WireResponse(
            loop.create_future(), is_head, limit, loop.create_future() if stream else None
        )
        self._slot = self._deadlines.add(self, deadline)
        if self._parser is None:
            self._parser = httptools.HttpResponseParser(self)
        # ``_head_parts`` and ``_interim`` are emptied by the head that completed
        # the last exchange (a connection whose exchange failed is never reused).
        self.transport.write(data)
        return response

    async def send_body(self, chunks: Any, chunked: bool, response: WireResponse) -> int:
        """Write a streamed request body after ``send``'s head: ``chunks`` an async
        or plain iterator of bytes, each written as it comes (as HTTP/1.1 chunks,
        ``chunked``), waiting while the socket's buffer is full.  Stops early
        when the response completed first (a server may answer before it reads
        the body; the connection is then not reused).  Returns the bytes sent."""
        sent = 0
        aiter = getattr(chunks, "__aiter__", None)
        source = chunks if aiter is not None else _as_async(chunks)
        async for chunk in source:
            if not chunk:
                continue
            transport = self.transport
            if self.closed or transport is None or response.done.done():
                response.keep_alive = False
                return sent
            if chunked:
                transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
            else:
                transport.write(chunk)
            sent += len(chunk)
            if self._writable is not None:
                await self._writable
        if chunked and self.transport is not None and not self.closed:
            self.transport.write(b"0\r\n\r\n")
        return sent

    def pause_writing(self) -> None:
        self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        self._release_writer()

    def _release_writer(self) -> None:
        writable = self._writable
        self._writable = None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:
            # Bytes nobody asked for on an idle connection: it cannot be reused.
            self.abort()
            return
        if response.first_byte is None:
            response.first_byte = perf_counter()
        if not response.head_done:
            self._head_parts.append(data)
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(RequestError("protocol_error", "the server switched protocols"))
        except httptools.HttpParserError as e:
            self._fail(RequestError("protocol_error", f"not a valid HTTP response: {e}"))
        else:
            # Judged after the parse: a read that ends the head may carry any
            # amount of body behind it.
            if not response.head_done and self._head_bytes > MAX_HEAD_BYTES:
                self._fail(
                    RequestError(
                        "protocol_error", f"the response head exceeds {MAX_HEAD_BYTES:,} bytes"
                    )
                )

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release_writer()  # a body writer stops; the response says why
        try:
            self._settle_on_loss(exc)
        finally:
            # The transport and the parser (through its bound callbacks) point back
            # at this protocol: drop both, so that a closed connection is freed by
            # reference counting at once instead of waiting for the cycle collector
            # (a cycle per connection made the GC ~8% of a 10,000-host run's CPU).
            self.transport = None
            self._parser = None

    def _settle_on_loss(self, exc: Exception | None) -> None:
        response = self.response
        if response is None:
            return
        if response.head_done and exc is None and _ends_at_close(response.head):
            response.keep_alive = False
            self.on_message_complete()
        elif response.first_byte is None:
            detail = _describe(exc) if exc else "server closed the connection without a response"
            self._fail(RequestError("connection_reset", detail))
        else:
            where = "body" if response.head_done else "response head"
            detail = f"connection lost during the {where}"
            self._fail(
                RequestError("connection_reset", f"{detail}: {_describe(exc)}" if exc else detail)
            )

    # -- httptools callbacks --------------------------------------------------------------

    def on_headers_complete(self) -> None:
        parser = self._parser
        response = self.response
        if response is None:  # the exchange failed while this data was being fed
            return
        status = parser.get_status_code()
        if 100 <= status < 200:
            self._interim += 1
            return
        response.status = status
        response.head_done = True
        response.keep_alive = parser.should_keep_alive()
        parts = self._head_parts
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        self._head_parts = []
        self._head_bytes = 0
        if self._interim:  # skip the 1xx heads (a guard: range() is a call per response)
            start = 0
            for _ in range(self._interim):
                start = raw.index(b"\r\n\r\n", start) + 4
            raw = raw[start:]
            self._interim = 0
        head = response.head = raw[: raw.find(b"\r\n\r\n")]
        if response.is_head or status in _NO_BODY_STATUSES:
            self._parser = None  # llhttp would wait for a body: start afresh next time
            self.on_message_complete()
            return
        ready = response.head_ready
        if ready is not None:
            ready.set_result(None)
        # find(), not ``in``: on 3.11 ``marker in head`` first tries the marker as
        # an integer and builds and drops a TypeError (~1,800 instructions each).
        # How the body ends (length, chunks or the close) is llhttp's business
        # until the connection is lost mid-body: _settle_on_loss looks then.
        lower = head.lower()
        if lower.find(b"\ncontent-encoding:") >= 0:
            response.content_encoding = header_value(head, lower, b"\ncontent-encoding:").lower()

    def on_body(self, body: bytes) -> None:
        response = self.response
        if response is None:  # the exchange failed while this data was being fed
            return
        received = response.body_bytes = response.body_bytes + len(body)
        if response.head_ready is not None:  # streamed: the reader bounds it
            response.body.append(body)
            response.buffered += len(body)
            if response.buffered > STREAM_HIGH_WATER and response.resume is None:
                transport = self.transport
                if transport is not None:
                    transport.pause_reading()
                    response.resume = self._resume_reading
            response._wake()
            return
        if received > self._body_cap:
            self._fail(body_too_large(self._body_cap))
            self.abort()
            return
        response.body.append(body)

    def on_message_complete(self) -> None:
        """The response is complete (llhttp's callback; also called here for a
        response without a body and for one that ended at the close)."""
        response = self.response
        if response is None or not response.head_done:  # failed, or the end of a 1xx
            return
        slot = self._slot
        if slot is not None:
            slot.discard(self)
            self._slot = None
        self.response = None
        self.requests += 1
        done = response.done
        if not done.done():
            done.set_result(None)
        ready = response.head_ready
        if ready is not None:  # streamed: a head without a body completes both
            if not ready.done():
                ready.set_result(None)
            if response.resume is not None:  # the connection goes back reading
                response.resume = None
                self._resume_reading()
            response._wake()

    # -- internals ------------------------------------------------------------------------

    def expire(self) -> None:
        """The read deadline passed (called by the deadline slot)."""
        response = self.response
        head_done = response is not None and response.head_done
        where = "the body" if head_done else "the response"
        self._fail(
            RequestError(
                "read_timeout",
                f"timed out waiting for {where}"
                + ("" if response is None else f" (limit {response.limit:g} s)"),
                status=response.status if response is not None and head_done else None,
            )
        )

    def _fail(self, error: RequestError) -> None:
        slot = self._slot
        if slot is not None:
            slot.discard(self)
            self._slot = None
        response = self.response
        self.response = None
        self._parser = None
        if response is not None:
            response.keep_alive = False
            if not response.done.done():
                response.done.set_exception(error)
            ready = response.head_ready
            if ready is not None:
                if not ready.done():
                    ready.set_exception(error)
                response._wake()
        if not self.closed:
            self.abort()

    def _resume_reading(self) -> None:
        transport = self.transport
        if transport is not None and not self.closed:
            transport.resume_reading()


async def _as_async(chunks: Any) -> Any:
    for chunk in chunks:
        yield chunk


def body_too_large(cap: int, status: int | None = None) -> RequestError:
    """The error of a body past the cap on the wire (one wording everywhere)."""
    return RequestError("body_too_large", f"body exceeds the {cap:,}-byte cap", status=status)


def _ends_at_close(head: bytes) -> bool:
    """Whether a response with this head ends its body by closing the connection
    (RFC 9112 6.3: no Content-Length and not chunked)."""
    lower = head.lower()
    at = lower.rfind(b"\ntransfer-encoding:")
    if at < 0:
        return lower.find(b"\ncontent-length:") < 0
    # 6.3 rule 4: chunked only if it is the final coding (of the last such header, as
    # llhttp reads it); any other Transfer-Encoding is read until the close.
    last = lower[at:]
    value = header_value(last, last, b"\ntransfer-encoding:")
    return value.rsplit(b",", 1)[-1].strip() != b"chunked"


def header_value(head: bytes, lower: bytes, marker: bytes) -> bytes:
    """The value of the first header whose lower-cased ``\\nname:`` is ``marker``."""
    at = lower.find(marker) + len(marker)
    end = head.find(b"\r\n", at)
    return head[at : end if end >= 0 else len(head)].strip()


def parse_head(head: bytes) -> list[tuple[bytes, bytes]]:
    """(name, value) pairs of a response head (status line first, then headers)."""
    headers = []
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.strip(), value.strip()))
    return headers


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "closed"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
