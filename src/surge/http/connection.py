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

A body framed by Content-Length skips the parser after the read that ends
its head: each later read is body (up to the length left) and goes to
``on_body`` as the very bytes object the transport made, instead of
httptools slicing a copy of it out (a new allocation and a copy of every body
byte: 9.5 us of CPU per 256 KiB read against 0.5 us, 0.037 s per GiB, in
benchmarks/http_body.py; ``data_received`` was 0.40 s of a 2 GB ``s3 cp``'s
~3 s in cProfile).  The read that ends the head still goes to llhttp, and so
does every other framing (chunks, the close, no body).

Headers are not collected through llhttp's per-header callback (a Python call
per header, ten to twenty on real responses): the raw head is kept as bytes,
framing and Content-Encoding are found with C-level searches in it, and the
header list is built only if someone asks for it (``Response.headers``).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import inspect
import itertools
import json
import re
import ssl
import time
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

import httptools

from surge.errors import LocalResourceError, RequestError
from surge.http.deadlines import Deadlines, Expirable
from surge.http.decoding import CODINGS
from surge.http.timings import Timings
from surge.http.tlssession import Offer, Resume, ResumingContext, keep_session, offer_var

_NO_BODY_STATUSES = frozenset({204, 304})
#: Each connection's ``serial``: a number per connection in the process (a
#: HAR entry's ``connection``, a waterfall's lanes).  ``next`` on it is atomic.
_serials = itertools.count(1)

#: RFC 8305 section 5's Connection Attempt Delay: with several addresses, the
#: next one is tried when this long has passed since the last attempt began
#: (or at once, when that attempt failed).  250 ms is the RFC's recommended
#: value; it adapts nothing to measured round-trip times.
ATTEMPT_DELAY = 0.25
#: Attempts an error's detail names one by one (a host may have dozens).
DETAIL_ATTEMPTS = 8

#: The largest response head accepted (1xx interim heads included), as curl's
#: limit on a response's headers: a server that never ends its head is cut off
#: here, not when ``max_time`` runs out with everything it sent held in memory.
MAX_HEAD_BYTES = 300 * 1024

#: The bytes of a read kept in case a chunk-size line goes on in the next one.
_CHUNK_LINE_KEPT = 64
#: A chunk size's hexadecimal digits.
_HEX_PREFIX = re.compile(rb"[0-9A-Fa-f]+")
#: An obs-fold (RFC 9112 5.2): a header line continued on an indented line.
_FOLD = re.compile(rb"\r\n[ \t]+")

#: The largest body length a head may declare, in a Content-Length or a chunk
#: size: curl's (a signed 64-bit curl_off_t).  llhttp takes up to 2^64 - 1 and
#: would then wait for bytes that can never come, until ``max_time``.
MAX_DECLARED_SIZE = 2**63 - 1

#: Transfer codings undone besides chunked: RFC 9112 7's gzip and deflate (and
#: x-gzip), and whatever else decoding.py undoes for Content-Encoding.  Any
#: other ("compress") is a ``protocol_error``: its body cannot be read, and
#: handing it over still encoded would be a wrong body with no error.
TRANSFER_CODINGS = frozenset(name.encode() for name in CODINGS) | {b"identity"}

#: A streamed body's read-ahead: past this many unread bytes the connection stops
#: reading from the socket until the reader catches up (TCP's window then holds
#: the server back), so a slow reader of a large body holds about this much
#: (plus the read that crossed it). 64 KiB, not 256: 100 bodies of 50 MB in
#: flight to --output-dir peaked at 82 MB RSS, against 110 MB at 256 KiB, at the
#: same throughput (benchmarks/fetch_extras.py).
STREAM_HIGH_WATER = 64 * 1024

#: With a read timeout, the slowest a body of known length may come, in bytes
#: a second over a whole read-timeout window (curl's --speed-limit, with the
#: read timeout its --speed-time): a byte every few seconds is never silence,
#: and a link slower than this for that long is not told from a broken one.
LOW_SPEED = 1024

#: Whether a body framed by Content-Length is counted down here rather than fed
#: to llhttp (see the module's notes).  A switch for benchmarks/http_body.py only.
_FAST_BODY = True


#: asyncio's _SSLProtocolTransport._force_close(exc) calls SSLProtocol._abort(exc),
#: which takes no argument in CPython 3.11 and 3.12 (see start_tls).
_BROKEN_FORCE_CLOSE = not inspect.signature(
    asyncio.sslproto.SSLProtocol._abort
).parameters.keys() - {"self"}


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
        "discard",
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
        "transfer_coding",
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
        self.discard = False  # the body is counted (and capped), not kept
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
        #: Every Content-Encoding line's codings, joined ("gzip, br"), lower-cased.
        self.content_encoding: bytes | None = None
        #: The Transfer-Encoding codings other than the final chunked ("gzip"):
        #: undone whether or not the client decompresses (RFC 9112 7).
        self.transfer_coding: bytes | None = None

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


#: RFC 4514's short names for the attributes certificates mostly carry.
_RDN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
}


class TLSInfo(dict[str, str | bool | None]):
    """A connection's TLS as a record holds it: a dict (``version``, ``cipher``,
    ``alpn``, ``subject``, ``issuer``, ``not_after``, ``resumed``: the handshake
    resumed a kept session), with its JSON made once (``json``), since every
    record of the connection carries the same."""

    __slots__ = ("json",)
    json: str

    @classmethod
    def of(cls, tls: tuple[str | None, str | None, str | None], ssl_object: Any) -> TLSInfo:
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        info = cls(
            version=tls[0],
            cipher=tls[1],
            alpn=tls[2],
            subject=_rdns(cert.get("subject")) if cert else None,
            issuer=_rdns(cert.get("issuer")) if cert else None,
            not_after=_cert_time(cert.get("notAfter")) if cert else None,
            resumed=bool(ssl_object.session_reused) if ssl_object is not None else None,
        )
        info.json = json.dumps(info, ensure_ascii=False, separators=(",", ":"))
        return info


def _rdns(name: Any) -> str | None:
    """A certificate name as RFC 4514 text, most significant first as OpenSSL prints."""
    if not name:
        return None
    parts = []
    for rdn in name:
        for key, value in rdn:
            parts.append(f"{_RDN_NAMES.get(key, key)}={value}")
    return ",".join(parts)


def _cert_time(text: str | None) -> str | None:
    """A certificate's ``notAfter`` as ISO 8601 UTC (``2027-01-31T12:00:00Z``)."""
    if not text:
        return None
    try:
        when = ssl.cert_time_to_seconds(text)
    except ValueError:
        return text
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


class HTTPConnection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection to one (scheme, host, port)."""

    loop: asyncio.AbstractEventLoop  # set when the transport connects
    #: TCP connections begun to open this one (several only in a Happy Eyeballs race).
    connect_attempts: int = 1
    http2 = False  # (H2Stream's is True)
    #: One exchange at a time (http2.py's HTTP2Connection carries many).
    multiplexed = False
    #: A connection, not an HTTP/2 stream standing in for one (http2.H2Stream).
    is_stream = False

    def __init__(
        self,
        key: tuple[str, str, int],
        deadlines: Deadlines,
        body_cap: int,
    ) -> None:
        self.key = key
        self.serial = next(_serials)
        self._deadlines = deadlines
        #: The client's body cap: the same for every exchange on the connection.
        self._body_cap = body_cap
        self.transport: asyncio.Transport | None = None
        self.closed = False
        #: Reads kept while the connection may yet be taken over by HTTP/2
        #: (http2.py): a server's SETTINGS may come before the handshake's
        #: caller resumes.  None: bytes nobody asked for end the connection.
        self.early: list[bytes] | None = None
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
        #: Body bytes still to come of a response framed by Content-Length,
        #: once its head is read (0: the parser has every read).
        self._body_left = 0
        #: A chunked body's chunk-size checks (see _check_chunk_size): the body
        #: is chunked; a chunk header came in the read being fed; a chunk's data
        #: is being read, and how much body there was before it; the last bytes
        #: of the last read.
        self._chunked = False
        self._chunk_header_seen = False
        self._chunk_open = False
        self._chunk_mark = 0
        self._chunk_tail = b""
        #: Where it connected (address, port), and for TLS (version, cipher, ALPN).
        self.address: tuple[str, int] | None = None
        self.tls: tuple[str | None, str | None, str | None] | None = None
        self._ssl_object: ssl.SSLObject | None = None
        self._tls_info: TLSInfo | None = None
        #: The session this connection offers on its handshake (tlssession.py), and
        #: where its own session is kept for the next connection.
        self.offer = Offer()
        self.resume: Resume | None = None
        #: Set while the transport's write buffer is full (a streamed request body
        #: waits on it); resolved when it drains or the connection is lost.
        self._writable: asyncio.Future[None] | None = None
        #: Set while a streamed request body waits for its source's next chunk
        #: (the caller's code: a generator, a file): that wait is the caller's,
        #: not the server's silence, so the read timeout's clock stands still.
        self._sourcing = False
        #: The exchange's read (idle) timeout, its whole deadline, and the loop
        #: time the server was last heard from (a read) or took body bytes.
        self._idle: float | None = None
        self._deadline = 0.0
        self._active = 0.0
        #: Where the body's current rate window began (loop time, body bytes).
        self._window_at = 0.0
        self._window_bytes = 0

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
        attempts: list[str] | None = None,
        attempt_delay: float = ATTEMPT_DELAY,
        prior_knowledge: bool = False,
    ) -> HTTPConnection:
        """TCP to the first address that answers, then TLS if ``ssl_context``.

        Several addresses are raced as RFC 8305's Happy Eyeballs (see
        :func:`race`, which ``attempts`` and ``attempt_delay`` are passed to);
        one is connected to directly, with no task or timer of its own.
        Errors are ``RequestError`` with the class of the phase that failed.
        ``prior_knowledge``: cleartext HTTP/2 (h2c) follows, so the server's
        first bytes are kept for it (``early``).
        """
        loop = asyncio.get_running_loop()
        port = key[2]
        protocol: HTTPConnection
        # uvloop runs the TLS protocol's connection_made in the transport's
        # context, copied here: it must hold this connection's Offer (tlssession.py).
        offer = Offer()
        token = offer_var.set(offer)

        def made() -> HTTPConnection:
            conn = cls(key, deadlines, body_cap)
            if prior_knowledge:
                # from its first byte: an h2c server may send its SETTINGS on
                # accept, read before this coroutine resumes
                conn.early = []
            return conn

        try:
            if len(addresses) == 1:
                address = addresses[0]
                try:
                    _, protocol = await loop.create_connection(made, address, port)
                except OSError as e:
                    raise _connect_error(address, port, e) from None
            else:
                _, protocol, address, tried = await race(
                    loop,
                    made,
                    addresses,
                    port,
                    attempt_delay,
                    attempts,
                )
                protocol.connect_attempts = tried
        finally:
            offer_var.reset(token)
        protocol.offer = offer
        timings.tcp_end = perf_counter()
        protocol.address = (address, port)
        if ssl_context is not None:
            await protocol.start_tls(ssl_context, server_hostname, port, timings)
        protocol.connect_timings = timings
        return protocol

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str, port: int, timings: Timings
    ) -> None:
        """TLS over the connection as it stands: over TCP (``open``), or over a
        tunnel through a proxy (proxy.py), itself maybe TLS to an https proxy.
        A :class:`ResumingContext` offers the session it kept for
        (``server_hostname``, ``port``), and keeps this one's (see ``keep_session``)."""
        transport = self.transport
        assert transport is not None
        if _BROKEN_FORCE_CLOSE and isinstance(transport, asyncio.sslproto._SSLProtocolTransport):
            # TLS inside TLS (an https:// origin through an https:// proxy): a
            # failed inner handshake calls the outer transport's _force_close(exc),
            # whose SSLProtocol._abort() takes no argument on CPython 3.11 and
            # 3.12 - a TypeError that loses the handshake's own error.  Abort plainly.
            transport._force_close = lambda exc: transport.abort()  # type: ignore[attr-defined]
        self.early = []  # if ALPN says h2, bytes before the caller resumes are HTTP/2's
        offer = self.offer
        if self.resume is not None:
            # TLS inside TLS: the https proxy's session, kept before the tunnel's
            # TLS replaces it (its TLS 1.3 ticket was read with the CONNECT answer).
            keep_session(self.resume, self._ssl_object)
        self.resume = None
        if isinstance(ssl_context, ResumingContext):
            offer.session, keep = ssl_context.sighting(server_hostname, port)
            if keep:
                self.resume = (ssl_context, server_hostname, port)
        token = offer_var.set(offer)  # asyncio's call_soon copies this context
        try:
            tls_transport = await self.loop.start_tls(
                transport, self, ssl_context, server_hostname=server_hostname
            )
        except ssl.SSLCertVerificationError as e:
            self._tls_failed(transport)
            raise RequestError("tls_error", f"certificate: {e.verify_message}") from None
        except ssl.SSLError as e:
            self._tls_failed(transport)
            raise RequestError("tls_error", f"TLS handshake: {e.reason or e}") from None
        except (ConnectionError, OSError) as e:
            self._tls_failed(transport)
            raise RequestError("tls_error", f"TLS handshake: {_describe(e)}") from None
        finally:
            offer_var.reset(token)
            offer.session = None
        if tls_transport is None:  # the peer closed during the handshake
            self._tls_failed(transport)
            raise RequestError("tls_error", "TLS handshake: connection closed")
        self.transport = tls_transport
        timings.tls_end = perf_counter()
        tls = tls_transport.get_extra_info("ssl_object")
        if tls is not None:  # once per connection, for `surge trace`
            cipher = tls.cipher()
            self.tls = (tls.version(), cipher[0] if cipher else None, tls.selected_alpn_protocol())
            self._ssl_object = tls  # its certificate, read when a record asks
            self._tls_info = None  # a tunnel's TLS replaces the proxy's
            # Resumed (nothing to keep), or TLS 1.2 (the session is whole now); a TLS
            # 1.3 ticket comes later (reading a session costs: tlssession.py).
            if (
                self.resume is not None
                and (tls.session_reused or tls.version() != "TLSv1.3")
                and keep_session(self.resume, tls)
            ):
                self.resume = None
        if self.tls is None or self.tls[2] != "h2":
            early, self.early = self.early, None
            if early:  # bytes nobody asked for, from an HTTP/1.1 server: not reusable
                self.abort()

    def _tls_failed(self, transport: asyncio.Transport) -> None:
        """A handshake failed: the session offered (if any) is not offered again."""
        transport.abort()
        resume, self.resume = self.resume, None
        if resume is not None:
            resume[0].forget(resume[1], resume[2])

    # -- one exchange -------------------------------------------------------------------

    def send(
        self,
        data: bytes,
        is_head: bool,
        deadline: float,
        limit: float,
        stream: bool = False,
        discard: bool = False,
        idle: float | None = None,
    ) -> WireResponse:
        """Write a request; its response's ``done`` resolves when the response is
        complete, or fails with ``read_timeout`` at ``deadline`` (event-loop time,
        honoured to within the deadlines' resolution, 50 ms), or once the server
        has been silent for ``idle`` seconds (see :meth:`expire`).  ``stream``: the
        body is read by the caller as it comes (see :class:`WireResponse`); the
        deadline still covers all of it, as curl's ``--max-time`` does.
        ``discard``: the body is counted and capped, never kept (a bulk run that
        records only the status holds no bodies).

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
        if discard:
            response.discard = True
        self._idle = idle
        self._deadline = deadline
        if idle is not None:
            now = self._active = loop.time()
            self._window_at = now
            self._window_bytes = 0
            if now + idle < deadline:
                deadline = now + idle
        self._slot = self._deadlines.add(self, deadline)
        if self._parser is None:
            self._parser = _new_parser(self)
        # ``_head_parts`` and ``_interim`` are emptied by the head that completed
        # the last exchange (a connection whose exchange failed is never reused).
        self.transport.write(data)
        return response

    def tls_info(self) -> TLSInfo | None:
        """The TLS of this connection for a record (None: plain TCP): protocol,
        cipher, ALPN and the server certificate's subject, issuer and expiry
        (None each when it was not verified: ``-k`` reads no certificate).
        Made once per connection, on first use."""
        info = self._tls_info
        if info is None and self.tls is not None:
            info = self._tls_info = TLSInfo.of(self.tls, self._ssl_object)
        return info

    async def send_body(self, chunks: Any, chunked: bool, response: WireResponse) -> int:
        """Write a streamed request body after ``send``'s head: ``chunks`` an async
        or plain iterator of bytes, each written as it comes (as HTTP/1.1 chunks,
        ``chunked``), waiting while the socket's buffer is full.  Stops early
        when the response completed first (a server may answer before it reads
        the body; the connection is then not reused).  Returns the bytes sent."""
        sent = 0
        aiter = getattr(chunks, "__aiter__", None)
        source = (chunks if aiter is not None else _as_async(chunks)).__aiter__()
        while True:
            self._sourcing = True  # the caller's wait, not the server's silence
            try:
                chunk = await anext(source)
            except StopAsyncIteration:
                break
            finally:
                self._sourcing = False
            if not chunk:
                continue
            # The server's silence counts from here: it had nothing to take before.
            self._active = self.loop.time()
            transport = self.transport
            if self.closed or transport is None or response.done.done():
                response.keep_alive = False
                return sent
            if chunked:
                transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
            else:
                transport.write(chunk)
            sent += len(chunk)
            if self._writable is not None:  # the peer takes no more: wait until it does
                await self._writable
        if chunked and self.transport is not None and not self.closed:
            self.transport.write(b"0\r\n\r\n")
        return sent

    def pause_writing(self) -> None:
        self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        self._active = self.loop.time()
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
        # The read timeout's clock (uvloop's loop time is its cached uv_now: no
        # system call).
        self._active = self.loop.time()
        left = self._body_left
        if left:  # the rest of a body framed by Content-Length
            self._body_received(data, left)
            return
        response = self.response
        if response is None:
            if self.early is not None:  # maybe HTTP/2's: kept for http2.py
                self.early.append(data)
                return
            # Bytes nobody asked for on an idle connection: it cannot be reused.
            self.abort()
            return
        if response.first_byte is None:
            response.first_byte = perf_counter()
        head_done = response.head_done
        if not head_done:
            self._head_parts.append(data)
            self._head_bytes += len(data)
        try:
            if (
                head_done
                or (b" :" not in data and b"\t:" not in data)
                or type(self._parser) is _RepeatedLength
            ):
                self._parser.feed_data(data)
            else:  # maybe a name with whitespace before its colon: read without it
                self._reread_length()
        except httptools.HttpParserUpgrade:
            self._fail(RequestError("protocol_error", "the server switched protocols"))
        except httptools.HttpParserError as e:
            if head_done or str(e) not in _LENGTH_REFUSALS:
                self._fail(RequestError("protocol_error", f"not a valid HTTP response: {e}"))
            else:  # maybe one length said twice (RFC 9112 6.3): read again without llhttp's no
                self._reread_length()
        else:
            if self._chunked:
                if self._chunk_header_seen:  # set by on_chunk_header
                    self._chunk_header_seen = False
                    if self._chunk_open and self.response is response:
                        self._check_chunk_size(data)
                self._chunk_tail = data[-_CHUNK_LINE_KEPT:]  # a size line may be split
            if head_done:
                return
            if not response.head_done:
                # Judged after the parse: a read that ends the head may carry any
                # amount of body behind it.
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._fail(
                        RequestError(
                            "protocol_error", f"the response head exceeds {MAX_HEAD_BYTES:,} bytes"
                        )
                    )
            elif self.response is response and _FAST_BODY:
                # This read ended the head and the body goes on: if a plain
                # Content-Length frames it, the reads to come skip the parser.
                # (A response without a body, the end of a 1xx, or a body that
                # ended in this read was completed by the parse: no longer ours.)
                length = _content_length(response.head)
                if length > response.body_bytes:
                    self._body_left = length - response.body_bytes

    def _body_received(self, data: bytes, left: int) -> None:
        """A read of a body framed by Content-Length, ``left`` bytes of it still
        to come: handed on as it is, without the parser (see the module's notes)."""
        size = len(data)
        if size < left:
            self._body_left = left - size
            self.on_body(data)
            return
        self._body_left = 0
        response = self.response
        self.on_body(data if size == left else data[:left])
        if self.response is response:  # on_body did not fail it (the body cap)
            # llhttp still waits for this body: the next exchange gets a new parser.
            self._parser = None
            self.on_message_complete()
        if size > left and not self.closed:
            # Bytes past the body: nobody asked for them, so the connection cannot
            # be reused (as bytes that come while it is idle).
            self.abort()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.resume is not None and keep_session(self.resume, self._ssl_object):
            self.resume = None
        try:
            self._settle_on_loss(exc)  # (_fail reads whether a body was being written)
        finally:
            self._release_writer()  # a body writer stops; the response says why
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
            error = RequestError("connection_reset", detail)
            error.empty_reply = exc is None
            self._fail(error)
        else:
            where = "body" if response.head_done else "response head"
            detail = f"connection lost during the {where}"
            self._fail(
                RequestError("connection_reset", f"{detail}: {_describe(exc)}" if exc else detail)
            )

    def _reread_length(self) -> None:
        """llhttp refused a second Content-Length, or a list of them, in the
        head being read - or the head may hold a field name with whitespace
        before its colon, which llhttp would take: a :class:`_RepeatedLength`
        reads this head from its start - the bytes of this response so far,
        less the 1xx heads already read - and what comes next."""
        data = b"".join(self._head_parts)
        start = 0
        for _ in range(self._interim):  # read by llhttp: their callbacks ran
            start = data.index(b"\r\n\r\n", start) + 4
        rereader = self._parser = _RepeatedLength(self)
        try:
            rereader.feed_data(data[start:])
        except httptools.HttpParserError as e:
            self._fail(RequestError("protocol_error", f"not a valid HTTP response: {e}"))

    def _check_chunk_size(self, data: bytes) -> None:
        """The read just fed ends inside a chunk whose size line it holds: fail
        the response if that size is past ``MAX_DECLARED_SIZE`` (httptools does
        not tell the size; llhttp would wait for 2^64 - 1 bytes).  The line is
        found from the end: the chunk's bytes read so far are the read's last
        ones, the size line (and its extensions) ends just before them - so a
        read costs the line's length, not its own."""
        response = self.response
        assert response is not None
        end = len(data) - (response.body_bytes - self._chunk_mark)  # after the line's LF
        start = data.rfind(b"\n", 0, max(end - 1, 0)) + 1
        line = data[start:end]
        if start == 0:  # the line began in the read before
            line = self._chunk_tail + line
            line = line[line.rfind(b"\n", 0, max(len(line) - 1, 0)) + 1 :]
        size = _HEX_PREFIX.match(line.lstrip(b" \t0"))
        digits = size.group() if size is not None else b""
        if len(digits) >= 16 and int(digits, 16) > MAX_DECLARED_SIZE:
            self._fail(
                RequestError(
                    "protocol_error", f"a chunk size of 0x{digits[:32].decode()} is too large"
                )
            )

    # -- httptools callbacks --------------------------------------------------------------

    def on_chunk_header(self) -> None:
        response = self.response
        if response is not None:
            self._chunk_header_seen = self._chunk_open = True
            self._chunk_mark = response.body_bytes

    def on_chunk_complete(self) -> None:
        self._chunk_open = False

    def on_headers_complete(self) -> None:
        parser = self._parser
        response = self.response
        if response is None:  # the exchange failed while this data was being fed
            return
        status = parser.get_status_code()
        if 100 <= status < 200:
            self._interim += 1
            return
        if status < 100:
            # RFC 9110 15: a status's first digit is its class, 1 to 5; llhttp
            # takes any three digits (curl refuses this too; 600-999 it keeps).
            self._fail(RequestError("protocol_error", f"status {status:03d} is not an HTTP status"))
            return
        response.status = status
        response.head_done = True
        if self._idle is not None:  # the body's rate is judged from here
            self._window_at = self.loop.time()
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
        head = raw[: raw.find(b"\r\n\r\n")]
        if head.find(b"\x00") >= 0:
            # RFC 9110 5.5: a NUL in a field value is rejected (or replaced); llhttp's
            # lenient values (for obs-fold, _new_parser) let it through.  Other
            # controls may stay (the RFC allows it, as curl keeps them); a CR or
            # LF alone llhttp still refuses.
            self._fail(RequestError("protocol_error", "a NUL in the response head"))
            return
        if head.find(b"\r\n ") >= 0 or head.find(b"\r\n\t") >= 0:
            # RFC 9112 5.2: a user agent replaces each obs-fold with a space
            # before it reads the value (llhttp joined them, leniently; surge
            # reads the raw head, so it is unfolded here, once) - except in a
            # framing field, which llhttp reads its own way ("gzip,\r\n chunked"
            # is not chunked to it): one response, one reading of its length.
            folded = _folded_framing(head)
            if folded is not None:
                why = f"a folded {folded} (its framing is ambiguous)"
                self._fail(RequestError("protocol_error", why, status=status))
                return
            head = _FOLD.sub(b" ", head)
        response.head = head
        if response.is_head or status in _NO_BODY_STATUSES:
            self._parser = None  # llhttp would wait for a body: start afresh next time
            self.on_message_complete()
            return
        # find(), not ``in``: on 3.11 ``marker in head`` first tries the marker as
        # an integer and builds and drops a TypeError (~1,800 instructions each).
        # How the body ends (length, chunks or the close) is llhttp's business
        # until the connection is lost mid-body: _settle_on_loss looks then.
        lower = head.lower()
        if lower.find(b"\ncontent-encoding:") >= 0:
            response.content_encoding = header_values(head, lower, b"\ncontent-encoding:").lower()
        error = None
        if lower.find(b"\ntransfer-encoding:") >= 0:
            codings, self._chunked, error = transfer_codings(head, lower)
            response.transfer_coding = codings
        else:
            error = _declared_length_error(head, lower)
        if error is not None:
            self._fail(RequestError("protocol_error", error, status=status))
            return
        ready = response.head_ready
        if ready is not None:
            ready.set_result(None)

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
        if not response.discard:
            response.body.append(body)

    def on_message_begin(self) -> None:
        """llhttp's callback as a response starts.  One that starts when no
        request waits is bytes the server sent past the response before, in
        the read that ended it (in a later read, data_received refuses them):
        the parser would take them for the next response's start, and the
        request sent next on this connection would fail or hang.  Raised out
        of ``feed_data``; data_received's ``_fail`` then closes the connection."""
        if self.response is None:
            raise UnaskedBytes("bytes after the response")

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
        self._body_left = 0
        if self._chunked:
            self._chunked = self._chunk_open = False
            self._chunk_tail = b""
        self.requests += 1
        if self.resume is not None and keep_session(self.resume, self._ssl_object):
            self.resume = None
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
        """The deadline slot came: the request's whole deadline passed, or maybe
        its read (idle) timeout.  The idle clock is checked here rather than
        re-armed on every read (a slot joined per read would cost more than the
        read): if the server was heard from since, or the streamed body's reader
        has paused the socket (its own back-pressure, not the server's silence),
        the exchange waits in a later slot."""
        response = self.response
        idle = self._idle
        if idle is not None and response is not None:
            now = self.loop.time()
            if now < self._deadline:
                first = response.first_byte
                if not response.head_done and first is not None and perf_counter() - first > idle:
                    # A head comes whole, at once; one that trickles in (a byte
                    # every few seconds is never silence) is no server's.
                    self._fail(
                        RequestError(
                            "read_timeout",
                            f"the response head was still coming {idle:g} s after its first"
                            " byte (the read timeout)",
                        )
                    )
                    return
                if response.head_done and response.resume is None and self._trickles(now, idle):
                    return
                # The reader's pause (a streamed body left unread) and the wait
                # for a request body's source are the caller's: the clock restarts.
                paused = response.resume is not None or self._sourcing
                due = now + idle if paused else self._active + idle
                if due > now:
                    self._slot = self._deadlines.add(self, min(due, self._deadline))
                    return
                if self._still_writing(response):
                    self._fail(
                        RequestError(
                            "write_timeout",
                            f"the server took none of the request body for {idle:g} s"
                            " (the read timeout)",
                        )
                    )
                    return
                self._fail(
                    RequestError(
                        "read_timeout",
                        f"no data from the server for {idle:g} s (the read timeout)",
                        status=response.status if response.head_done else None,
                    )
                )
                return
        head_done = response is not None and response.head_done
        limit = "" if response is None else f" (limit {response.limit:g} s)"
        if response is not None and self._still_writing(response):
            self._fail(RequestError("write_timeout", f"timed out sending the request{limit}"))
            return
        where = "the body" if head_done else "the response"
        self._fail(
            RequestError(
                "read_timeout",
                f"timed out waiting for {where}{limit}",
                status=response.status if response is not None and head_done else None,
            )
        )

    def _still_writing(self, response: WireResponse) -> bool:
        """Whether the request is still going out as its exchange times out: the
        server takes no more of it (the socket's buffer is full), or part of it
        waits in the transport - and no byte of an answer came first."""
        if response.first_byte is not None:
            return False
        transport = self.transport
        return self._writable is not None or (
            transport is not None and transport.get_write_buffer_size() > 0
        )

    def _trickles(self, now: float, idle: float) -> bool:
        """A body of a known length coming slower than :data:`LOW_SPEED` over
        a whole read-timeout window: failed (True).  The server has every byte
        of such a body; a byte every few seconds is never silence, and would
        hold the request for its whole ``max_time``.  (A body of unknown length
        may trickle on purpose: S3 keeps a CompleteMultipartUpload alive with a
        space every few seconds, after its head.)"""
        response = self.response
        assert response is not None
        took = now - self._window_at
        if took < idle:
            return False
        came = response.body_bytes - self._window_bytes
        if came < LOW_SPEED * took and _content_length(response.head) >= 0:
            self._fail(
                RequestError(
                    "read_timeout",
                    f"the body came at {came / took:,.0f} bytes/s for {took:.0f} s, under"
                    f" {LOW_SPEED:,} bytes/s (the read timeout's floor)",
                    status=response.status,
                )
            )
            return True
        self._window_at, self._window_bytes = now, response.body_bytes
        return False

    def _fail(self, error: RequestError) -> None:
        if self._writable is not None:  # the server had stopped taking the request
            error.sending = True
        slot = self._slot
        if slot is not None:
            slot.discard(self)
            self._slot = None
        response = self.response
        self.response = None
        self._parser = None
        self._body_left = 0
        if self._chunked:
            self._chunked = self._chunk_open = False
            self._chunk_tail = b""
        if response is not None:
            response.keep_alive = False
            # Marked retrieved (``exception()``): a waiter still gets the error,
            # but a request given up on (cancelled: Ctrl-C, a run stopped) has
            # no waiter, and asyncio would log "Future exception was never
            # retrieved" for the abort that follows.
            if not response.done.done():
                response.done.set_exception(error)
                response.done.exception()
            ready = response.head_ready
            if ready is not None:
                if not ready.done():
                    ready.set_exception(error)
                    ready.exception()
                response._wake()
        if not self.closed:
            self.abort()

    def _resume_reading(self) -> None:
        transport = self.transport
        if transport is not None and not self.closed:
            transport.resume_reading()
            response = self.response
            if response is not None:  # the reader's pause is no slowness of the server's
                self._window_at = self.loop.time()
                self._window_bytes = response.body_bytes


def _new_parser(protocol: HTTPConnection) -> Any:
    """llhttp for one response, lenient about header values: that leniency is
    what takes an obs-fold (RFC 9112 5.2: a user agent MUST accept it), which
    llhttp otherwise refuses ("Unexpected whitespace after header value"); it
    also lets through characters llhttp's strict value check refuses, which
    surge then reads as latin-1, as curl does.  And lenient about spaces and
    tabs after a chunk size: RFC 9112 7.1 has whitespace (BWS, which a
    recipient MUST parse and remove: RFC 9110 5.6.3) before a chunk extension's
    ``;``, where llhttp refuses it, and curl takes whitespace there with or
    without an extension; what else may follow a size stays refused."""
    parser = httptools.HttpResponseParser(protocol)
    parser.set_dangerous_leniencies(lenient_headers=True, lenient_spaces_after_chunk_size=True)
    return parser


#: llhttp's refusals of a head that may hold one length said more than once.
_LENGTH_REFUSALS = frozenset({"Duplicate Content-Length", "Invalid character in Content-Length"})


class _RepeatedLength:
    """Stands in for llhttp after it refused a head's second Content-Length
    (llhttp has no leniency for it), until the head is whole.  RFC 9112 6.3
    rule 5 (and RFC 9110 8.6): Content-Length repeated, or a list, whose values
    are all the same number is read as that one number - as curl and browsers
    read it; values that differ, or are not numbers, are an error the
    recipient MUST treat as unrecoverable (curl 7.88 takes the last: a
    documented difference).  Then a new llhttp is fed the head with one
    Content-Length line, and everything after it; the head surge reads and
    shows (``Response.headers``) stays as the server sent it.

    Nothing on the path of a head llhttp takes: this exists only after
    llhttp's refusal (``_LENGTH_REFUSALS``), and the head's bound
    (``MAX_HEAD_BYTES``) holds while it collects."""

    __slots__ = ("conn", "parts", "tail")

    def __init__(self, conn: HTTPConnection) -> None:
        self.conn = conn
        self.parts: list[bytes] = []
        self.tail = b""  # the last bytes seen: the head's end may straddle two reads

    def feed_data(self, data: bytes) -> None:
        # Each read is searched once, with the 3 bytes before it: a head that
        # trickles in a byte a read costs its length, not its length squared.
        self.parts.append(data)
        seen = self.tail + data
        if seen.find(b"\r\n\r\n") < 0:
            self.tail = seen[-3:]
            return
        pending = b"".join(self.parts)
        end = pending.find(b"\r\n\r\n")
        conn = self.conn
        try:
            head = one_length(pending[:end])
        except ValueError as e:  # the head was read: its status goes with the error
            code = pending[9:12]  # llhttp read the status line before it refused
            why = f"not a valid HTTP response: {e}"
            status = int(code) if code.isdigit() else None
            conn._fail(RequestError("protocol_error", why, status=status))
            return
        parser = conn._parser = _new_parser(conn)
        parser.feed_data(head + pending[end:])


def spaced_name(line: bytes) -> bool:
    """Whether a header line's field name ends in whitespace before its colon.
    RFC 9112 5.1 allows none there (a server MUST reject such a request, a
    proxy MUST remove the whitespace); curl ignores the line, and so does
    surge: it neither frames the body nor is one of the response's headers.
    (A line that starts with whitespace continues the one before: an obs-fold.)"""
    name, colon, _ = line.partition(b":")
    return bool(colon) and name[-1:] in (b" ", b"\t") and name[:1] not in (b" ", b"\t", b"")


def one_length(head: bytes) -> bytes:
    """``head`` (no blank line) without the lines whose field name ends in
    whitespace (:func:`spaced_name`), and with its Content-Length lines made
    one, if they all say the same number (see :class:`_RepeatedLength`); else
    ``ValueError`` saying why not."""
    lines = head.split(b"\r\n")
    values: list[bytes] = []
    first = -1
    kept: list[bytes] = []
    transfer_coded = False
    for i, line in enumerate(lines):
        if i and spaced_name(line):
            continue
        name, colon, value = line.partition(b":")
        name = name.strip().lower()
        if i and colon and name == b"transfer-encoding":
            transfer_coded = True
        if i and colon and name == b"content-length":
            if first < 0:
                first = len(kept)
            values.extend(v.strip() for v in value.split(b","))
            continue
        kept.append(line)
    if first < 0:  # no length: nothing to make one of
        return b"\r\n".join(kept)
    if transfer_coded:
        raise ValueError("Transfer-Encoding can't be present with Content-Length")
    if _folded_framing(head) is not None:
        raise ValueError("a folded Content-Length (its framing is ambiguous)")
    shown = b", ".join(values)[:80].decode("latin-1")
    if not values or not all(v.isdigit() for v in values):
        raise ValueError(f"Content-Length {shown!r} is not a number")
    numbers = {v.lstrip(b"0") or b"0" for v in values}
    if len(numbers) != 1:
        raise ValueError(f"Content-Length values differ: {shown} (RFC 9112 6.3)")
    (number,) = numbers
    if len(number) > 19 or int(number) > MAX_DECLARED_SIZE:
        raise ValueError(f"a Content-Length of {number[:40].decode()} is too large")
    kept.insert(first, b"Content-Length: " + number)
    return b"\r\n".join(kept)


def interleave(addresses: Sequence[str]) -> list[str]:
    """RFC 8305 section 4: the addresses with their families alternating, starting
    with the family of the first one ("First Address Family Count" 1), each
    family's own order kept.

    The RFC assumes a list sorted by RFC 6724, which puts IPv6 first wherever the
    host has IPv6 connectivity; surge's resolver puts IPv4 first instead (it does
    not sort: c-ares's sorting connects a UDP socket per address), so IPv4 goes
    first.  On a network with broken IPv6 that costs nothing, where IPv6 first
    would wait the attempt delay on every such host; on one with working IPv6,
    IPv4 is the common family of the hosts a crawl visits.
    """
    first_v6 = ":" in addresses[0]
    same = [a for a in addresses if (":" in a) == first_v6]
    other = [a for a in addresses if (":" in a) != first_v6]
    if not other:
        return list(addresses)
    order: list[str] = []
    for n in range(max(len(same), len(other))):
        order += same[n : n + 1] + other[n : n + 1]
    return order


async def race(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], HTTPConnection],
    addresses: Sequence[str],
    port: int,
    delay: float = ATTEMPT_DELAY,
    attempts: list[str] | None = None,
) -> tuple[Any, HTTPConnection, str, int]:
    """Happy Eyeballs v2 (RFC 8305 sections 4-5) over resolved addresses.

    The addresses are tried in :func:`interleave`'s order, a new attempt
    starting ``delay`` seconds after the last one began, or at once when an
    attempt fails; attempts already begun go on meanwhile.  The first to
    connect wins and every other one is cancelled (one that connects anyway is
    closed).  Returns (transport, protocol, address, attempts begun).

    A dead address (its SYNs dropped) so costs ``delay``, not the connect
    timeout; a refusing one costs nothing.  When every attempt fails, the
    ``connect_refused`` error names each address and what it said.  When the
    caller's deadline cancels the race, ``attempts`` (if given) holds a line
    per address tried - its failure, or that it had not answered - for the
    caller's timeout error.  Out of file descriptors is this process's
    trouble, not the host's: ``LocalResourceError`` at once.
    """
    order = interleave(addresses)
    failures: list[str] = [] if attempts is None else attempts
    racing: dict[asyncio.Task[tuple[Any, HTTPConnection]], str] = {}
    begun = 0
    try:
        while True:
            if begun < len(order):  # at the start, after the delay, or after a failure
                address = order[begun]
                begun += 1
                racing[loop.create_task(loop.create_connection(factory, address, port))] = address
            if not racing:
                break
            done, _ = await asyncio.wait(
                racing,
                timeout=delay if begun < len(order) else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            won: tuple[Any, HTTPConnection, str, int] | None = None
            for task in done:
                address = racing.pop(task)
                error = task.exception()
                if error is None:
                    transport, protocol = task.result()
                    if won is None:
                        won = (transport, protocol, address, begun)
                    else:  # two connected in the same turn: keep one
                        transport.abort()
                elif isinstance(error, OSError):
                    failure = _connect_error(address, port, error)
                    if isinstance(failure, LocalResourceError):
                        raise failure
                    failures.append(failure.detail)
                else:
                    raise error
            if won is not None:
                return won
    except asyncio.CancelledError:  # the caller's deadline: say who had not answered
        failures += [f"{address}:{port} did not answer" for address in racing.values()]
        raise
    finally:
        for task in racing:  # the losers, and all of them if this raised
            task.cancel()
            task.add_done_callback(_close_if_connected)
    shown = failures[:DETAIL_ATTEMPTS]
    if len(failures) > DETAIL_ATTEMPTS:
        shown.append(f"and {len(failures) - DETAIL_ATTEMPTS} more")
    raise RequestError("connect_refused", "; ".join(shown))


def _connect_error(address: str, port: int, error: OSError) -> RequestError | LocalResourceError:
    """A failed TCP connect as surge reports it: ``LocalResourceError`` when the
    failure is this process's (out of descriptors), not the host's."""
    if error.errno in LocalResourceError.ERRNOS:
        return LocalResourceError(f"connecting to {address}:{port}: {error.strerror or error}")
    if isinstance(error, ConnectionRefusedError):
        return RequestError("connect_refused", f"{address}:{port} refused the connection")
    return RequestError("connect_refused", f"{address}:{port}: {error.strerror or error}")


def _close_if_connected(task: asyncio.Task[tuple[Any, HTTPConnection]]) -> None:
    """A cancelled attempt that connected before the cancel reached it: closed."""
    if not task.cancelled() and task.exception() is None:
        task.result()[0].abort()


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


class UnaskedBytes(Exception):
    """Bytes after a complete response, in the read that ended it."""


def _content_length(head: bytes) -> int:
    """The body's length from a final response's head when a single plain
    Content-Length frames it, else -1: any Transfer-Encoding, a second
    Content-Length, or a value that is not all ASCII digits leaves the framing
    to llhttp (which already refused what RFC 9112 6.3 forbids; this is only
    not to second-guess it)."""
    lower = head.lower()
    if lower.find(b"\ntransfer-encoding:") >= 0:
        return -1
    marker = b"\ncontent-length:"
    at = lower.find(marker)
    if at < 0 or lower.find(marker, at + len(marker)) >= 0:
        return -1
    value = header_value(head, lower, marker)
    # bytes.isdigit() is ASCII-only: no signs, spaces, underscores or commas.
    # Leading zeros go first: llhttp takes thousands of them, and int() refuses
    # a string of over 4,300 digits (ValueError); over 20 digits is past llhttp's
    # 64-bit bound anyway.
    value = value.lstrip(b"0") or b"0"
    return int(value) if value.isdigit() and len(value) <= 20 else -1


def _folded_framing(head: bytes) -> str | None:
    """The name of a Transfer-Encoding or Content-Length field continued on an
    indented line (an obs-fold), or None."""
    name = b""
    for line in head.split(b"\r\n")[1:]:
        if line[:1] in (b" ", b"\t"):
            if name in (b"transfer-encoding", b"content-length"):
                return name.decode()
        else:
            name = line.partition(b":")[0].strip().lower()
    return None


def header_values(head: bytes, lower: bytes, marker: bytes) -> bytes:
    """The values of every header whose lower-cased ``\\nname:`` is ``marker``,
    joined with ", " in order, as one line of a list-valued field
    (RFC 9110 5.3): ``Content-Encoding: gzip`` then ``Content-Encoding: br``
    is "gzip, br"."""
    at = lower.find(marker)
    values = []
    while at >= 0:
        at += len(marker)
        end = head.find(b"\r\n", at)
        values.append(head[at : end if end >= 0 else len(head)].strip())
        at = lower.find(marker, at)
    return b", ".join(v for v in values if v)


def transfer_codings(head: bytes, lower: bytes) -> tuple[bytes | None, bool, str | None]:
    """A response's Transfer-Encoding, every line of it: (the codings to undo
    besides chunked, or None; whether chunked frames the body; an error, or
    None).  chunked must be the last coding if it is there (RFC 9112 6.1); a
    coding surge cannot undo is an error, not a body handed over still encoded."""
    codings = header_values(head, lower, b"\ntransfer-encoding:").lower()
    names = [c.strip() for c in codings.split(b",")]
    names = [name for name in names if name]
    chunked = bool(names) and names[-1] == b"chunked"
    if chunked:
        names.pop()
    if b"chunked" in names:
        return None, False, "chunked is not the last transfer coding (RFC 9112 6.1)"
    unknown = [name for name in names if name not in TRANSFER_CODINGS]
    if unknown:
        name = unknown[0][:40].decode("latin-1")
        return None, chunked, f"transfer coding {name!r} is not supported"
    names = [name for name in names if name != b"identity"]
    return (b", ".join(names) if names else None), chunked, None


def _declared_length_error(head: bytes, lower: bytes) -> str | None:
    """Why a Content-Length cannot be waited for (past ``MAX_DECLARED_SIZE``),
    or None.  Only a long value is read: two searches per response."""
    at = lower.find(b"\ncontent-length:")
    if at < 0:
        return None
    end = lower.find(b"\r\n", at + 16)
    if (end if end >= 0 else len(lower)) - at < 16 + 19:  # 18 digits and less: fine
        return None
    value = header_value(head, lower, b"\ncontent-length:").lstrip(b"0")
    if value.isdigit() and (len(value) > 19 or int(value) > MAX_DECLARED_SIZE):
        return f"a Content-Length of {value[:40].decode()} is too large"
    return None


def header_value(head: bytes, lower: bytes, marker: bytes) -> bytes:
    """The value of the first header whose lower-cased ``\\nname:`` is ``marker``."""
    at = lower.find(marker) + len(marker)
    end = head.find(b"\r\n", at)
    return head[at : end if end >= 0 else len(head)].strip()


def sets_cookies(head: bytes) -> bool:
    """Whether a response head has a Set-Cookie header (one search, no parse)."""
    return head.lower().find(b"\nset-cookie:") >= 0


def parse_head(head: bytes) -> list[tuple[bytes, bytes]]:
    """(name, value) pairs of a response head (status line first, then headers)."""
    headers = []
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name[-1:] in (b" ", b"\t") and spaced_name(line):  # not a field: ignored
            continue
        headers.append((name.strip(), value.strip()))
    return headers


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "closed"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
