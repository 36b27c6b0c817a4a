"""httpx transports on surge's engine: ``httpx.Client(transport=surge.httpx.HTTPTransport())``.

:class:`HTTPTransport` and :class:`AsyncHTTPTransport` are httpx's
``BaseTransport`` and ``AsyncBaseTransport``, with httpx's own transports'
options.  httpx keeps its semantics - redirects, cookies, auth, event hooks,
content decoding, the proxy chosen for each URL - and the transport sends the
request it is given: its method, URL and headers (the framing headers are
surge's to write, the same way: surge.http.dropin).  Underneath: surge's
pooled HTTP/1.1 connections, resolver and phase timings.

* Timeouts: the request's ``extensions["timeout"]`` (httpx puts its client's
  ``Timeout`` there): ``connect`` bounds DNS, TCP and TLS; ``read`` and
  ``write`` are one idle limit in surge - the server silent, or taking none of
  the body - the smaller of the two; ``pool`` bounds the wait for a connection.
* Errors: httpx's (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
  ``WriteTimeout``, ``ReadError``, ``RemoteProtocolError``, ``PoolTimeout``,
  ...), from surge's error classes through :data:`ERRORS`, the one table.
* Streaming both ways: a request body from an iterator is sent as it comes
  (read in the calling thread, as httpx's own transport reads it, never on
  the loop other threads' requests share); a response body is read as it
  arrives (``client.stream(...)``).
* ``response.extensions["surge_timings"]``: the request's phases
  (:class:`surge.http.Timings`; ``.phases_ms()`` gives dns, connect, tls, ttfb
  and body in milliseconds, body once it has been read), for event hooks.
* The synchronous transport runs on a portal (surge.http.portal): threads that
  share one ``httpx.Client`` run their requests at once on one pool.

* ``http2=True`` (httpx's flag, off by default as in httpx) offers HTTP/2 by
  ALPN over TLS (surge.http.http2); ``response.http_version`` then says
  ``HTTP/2``.  ``http1=False`` with ``http2=True`` offers ``h2`` alone.

Not supported (refused by name): neither HTTP/1.1 nor HTTP/2 (``http1=False``
without ``http2``), ``uds``, ``local_address``, ``socket_options``,
``retries``, proxy headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

from surge.extras import missing

try:
    import httpx
except ModuleNotFoundError as e:  # the extra is not installed: say which
    raise missing(e, "surge.httpx") from None

from surge.errors import (
    LocalResourceError,
    PoolClosed,
    PoolTimeout,
    RequestError,
    StreamConsumed,
    StreamError,
    SurgeError,
    UsageError,
)
from surge.http import dropin
from surge.http.arguments import Upload
from surge.http.client import AsyncClient
from surge.http.portal import Portal, PortalClosed
from surge.http.response import Response
from surge.http.sync import Client, reads_here
from surge.http.timeout import Timeout

__all__ = ["DEFAULT_LIMITS", "ERRORS", "AsyncHTTPTransport", "HTTPTransport"]

#: httpx's own transports' default limits.
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)

#: surge's error classes as httpx's exceptions: (before the request was all
#: sent, after).  The one place the mapping is written.
ERRORS: dict[str, tuple[type[httpx.TransportError], type[httpx.TransportError]]] = {
    "invalid_url": (httpx.ConnectError, httpx.ConnectError),  # as httpcore: no connection
    "dns_error": (httpx.ConnectError, httpx.ConnectError),
    "connect_refused": (httpx.ConnectError, httpx.ConnectError),
    "connect_timeout": (httpx.ConnectTimeout, httpx.ConnectTimeout),
    "tls_error": (httpx.ConnectError, httpx.ConnectError),
    "read_timeout": (httpx.WriteTimeout, httpx.ReadTimeout),
    "write_timeout": (httpx.WriteTimeout, httpx.WriteTimeout),
    "connection_reset": (httpx.WriteError, httpx.ReadError),
    "protocol_error": (httpx.RemoteProtocolError, httpx.RemoteProtocolError),
    "too_many_redirects": (httpx.RemoteProtocolError, httpx.RemoteProtocolError),  # never:
    "body_too_large": (httpx.ReadError, httpx.ReadError),  # no redirects, no cap here
}


def _error(e: BaseException) -> BaseException:
    """httpx's exception for one of surge's (the table above, and every other
    surge exception that can reach the transport: none escapes it); anything
    else - a library's own, a caller's - as it is."""
    if isinstance(e, RequestError):
        sending = dropin.while_sending(e)
        if e.empty_reply and not sending:  # closed, not reset, before a byte of an answer
            error: Exception = httpx.RemoteProtocolError(
                "Server disconnected without sending a response."
            )
        else:
            before, after = ERRORS[e.error_class]
            error = (before if sending else after)(str(e))
    elif isinstance(e, PoolTimeout):
        error = httpx.PoolTimeout(str(e))
    elif isinstance(e, LocalResourceError):
        error = httpx.ConnectError(str(e))
    elif isinstance(e, UsageError):  # a request surge cannot send as given (a header)
        error = httpx.LocalProtocolError(str(e))
    elif isinstance(e, PortalClosed | PoolClosed):
        # The client was closed (from another thread, or task) under the
        # request: its connection went, as httpcore's socket does (ReadError).
        error = httpx.ReadError(str(e))
    elif isinstance(e, StreamConsumed):
        error = httpx.StreamConsumed()
    elif isinstance(e, StreamError):
        error = httpx.StreamError(str(e))
    elif isinstance(e, SurgeError):  # none reaches here today: still httpx's
        error = httpx.TransportError(str(e))
    else:
        return e
    error.__cause__ = e
    return error


def _options(
    verify: ssl.SSLContext | str | bool,
    cert: Any,
    trust_env: bool,
    http1: bool,
    http2: bool,
    limits: httpx.Limits,
    proxy: Any,
    uds: str | None,
    local_address: str | None,
    retries: int,
    socket_options: Any,
    surge_options: dict[str, Any],
) -> dict[str, Any]:
    """surge's client options for httpx's transport options (see the module's notes)."""
    for name, value in (
        ("uds", uds),
        ("local_address", local_address),
        ("socket_options", socket_options),
    ):
        if value is not None:
            raise UsageError(f"surge.httpx transports do not support {name}=")
    if retries:
        raise UsageError("surge.httpx transports do not support retries= (connect retries)")
    if not http1 and not http2:
        raise UsageError("surge.httpx transports: http1=False without http2=True leaves nothing")
    # httpx's own trust rules: certifi, SSL_CERT_FILE/SSL_CERT_DIR under trust_env,
    # a context of the caller's as it is.
    context = httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
    context.set_alpn_protocols((["h2"] if http2 else []) + (["http/1.1"] if http1 else []))
    options: dict[str, Any] = {"ssl_context": context, "http2": http2}
    if limits.max_connections is not None:
        options["max_connections"] = limits.max_connections
    options["idle_timeout"] = (
        dropin.FOREVER if limits.keepalive_expiry is None else limits.keepalive_expiry
    )
    if proxy is not None:
        options["proxy"] = _proxy(proxy)
    return dropin.client_options(**options, **surge_options)


def _proxy(proxy: Any) -> str:
    """surge's proxy URL for httpx's ``proxy=`` (a URL or an ``httpx.Proxy``)."""
    if not isinstance(proxy, httpx.Proxy):
        proxy = httpx.Proxy(url=proxy)
    url = proxy.url
    if url.scheme not in ("http", "https", "socks5", "socks5h"):
        raise UsageError(f"proxy {url.scheme}://: surge proxies http, https, socks5, socks5h")
    own_headers = [name for name, _ in proxy.headers.raw if name.lower() != b"proxy-authorization"]
    if own_headers:
        raise UsageError("surge.httpx transports do not send headers of their own to a proxy")
    userinfo = ""
    if proxy.auth is not None:
        user, password = proxy.auth
        userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    host = url.raw_host.decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{userinfo}{host}{port}"


def _timeout(request: httpx.Request) -> tuple[Timeout | None, float | None]:
    """surge's Timeout and the pool timeout for the request's httpx timeouts."""
    given = request.extensions.get("timeout")
    if not given:
        return None, None
    read, write = given.get("read"), given.get("write")
    idle = read if write is None else write if read is None else min(read, write)
    return dropin.timeout(given.get("connect"), idle), given.get("pool")


def _file_of(stream: Any) -> Any:
    """The binary file under httpx's stream of a ``content=`` file (its
    ``IteratorByteStream`` reads it once, from where it stands), so that surge
    can send it again from its start where a request goes again (a 307/308, a
    stale keep-alive connection), as surge's own client does; any other
    stream as it is."""
    source = getattr(stream, "_stream", None)
    if (
        type(stream).__name__ == "IteratorByteStream"
        and hasattr(source, "read")
        and hasattr(source, "seek")
        and hasattr(source, "tell")
    ):
        return source
    return stream


def _call(request: httpx.Request) -> tuple[str, str, list[tuple[str, str]]]:
    """The method, URL (without user info or fragment) and headers to send."""
    url = request.url
    scheme = url.scheme
    if scheme not in ("http", "https"):
        if not scheme:
            raise httpx.UnsupportedProtocol(
                "Request URL is missing an 'http://' or 'https://' protocol."
            )
        raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{scheme}://'.")
    host = url.raw_host.decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    port = url.port
    target = url.raw_path.decode("ascii")
    where = f"{scheme}://{host}{target}" if port is None else f"{scheme}://{host}:{port}{target}"
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    return request.method, where, headers


def _response(
    request: httpx.Request,
    response: Response,
    stream: httpx.SyncByteStream | httpx.AsyncByteStream,
) -> httpx.Response:
    head = response.head
    version = (
        head[:8]
        if head.startswith(b"HTTP/1.")
        else b"HTTP/2"
        if head.startswith(b"HTTP/2 ")
        else b"HTTP/1.1"
    )
    reason = dropin.reason(response).encode("latin-1")
    headers = response.raw_headers
    trace = request.extensions.get("trace")
    if trace is not None:  # httpcore's events of the response's head (after the fact)
        trace("http11.receive_response_headers.started", {"request": request})
        trace(
            "http11.receive_response_headers.complete",
            {"request": request, "return_value": (version, response.status, reason, headers)},
        )
    return httpx.Response(
        response.status,
        headers=headers,
        stream=stream,
        extensions={
            "http_version": version,
            "reason_phrase": reason,
            "surge_timings": response.timings,
        },
    )


class _Configured:
    """What both transports take: httpx's transport arguments (its signature,
    mirrored for callers and their tools), made surge client options once
    (:func:`_options`); each transport makes its client of them (``_start``)."""

    _options: dict[str, Any]

    def __init__(
        self,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = DEFAULT_LIMITS,
        proxy: Any = None,
        uds: str | None = None,
        local_address: str | None = None,
        retries: int = 0,
        socket_options: Any = None,
        **surge_options: Any,
    ) -> None:
        self._options = _options(
            verify,
            cert,
            trust_env,
            http1,
            http2,
            limits,
            proxy,
            uds,
            local_address,
            retries,
            socket_options,
            surge_options,
        )
        self._start()

    def _start(self) -> None:
        raise NotImplementedError


class HTTPTransport(_Configured, httpx.BaseTransport):
    """httpx's ``HTTPTransport`` on surge's engine: its options (``verify``,
    ``cert``, ``trust_env``, ``limits``, ``proxy``, ...); more keyword
    arguments are surge's client options (``resolve=``, ``dns_servers=``, ...:
    :class:`surge.http.AsyncClient`)."""

    def _start(self) -> None:
        self._client = Client(**self._options)

    @property
    def client(self) -> Client:
        """surge's client underneath (its ``stats()``)."""
        return self._client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        method, url, headers = _call(request)
        stream = request.stream
        client = self._client
        try:
            portal = client.portal
            limits, pool_timeout = _timeout(request)
            if isinstance(stream, httpx.ByteStream):
                headers, body = dropin.frame(headers, request.read())
            else:
                headers, body = dropin.frame(headers, None, _file_of(stream))
            response, payload = portal.call(
                dropin.send(client.async_client, method, url, headers, body, limits, pool_timeout),
                reads_here(body),  # a streamed body is read in this thread, not on the loop
            )
        except Exception as e:
            raise _error(e) from None
        if payload is None:  # read as it comes, each step on the portal's loop
            response._stream.run = portal.call  # type: ignore[union-attr]
        return _response(request, response, _Body(response, payload, portal))

    def close(self) -> None:
        self._client.close()


class _Body(httpx.SyncByteStream):
    """A response body: the whole of it, or read through the portal as it comes."""

    def __init__(self, response: Response, payload: list[bytes] | None, portal: Portal) -> None:
        self._response = response
        self._payload = payload
        self._portal = portal

    def __iter__(self) -> Iterator[bytes]:
        payload = self._payload
        if payload is not None:
            for piece in payload:
                if piece:
                    yield piece
            return
        try:
            yield from self._response.iter_raw()
        except Exception as e:
            raise _error(e) from None

    def close(self) -> None:
        if self._payload is None and not self._portal.closed:
            with contextlib.suppress(PortalClosed):  # closed meanwhile: nothing to let go
                self._response.close()


class AsyncHTTPTransport(_Configured, httpx.AsyncBaseTransport):
    """httpx's ``AsyncHTTPTransport`` on surge's :class:`~surge.http.AsyncClient`
    (the options as :class:`HTTPTransport`'s).  Under asyncio the requests run
    on the caller's loop; under trio (which surge's engine does not run on)
    each goes to a surge client's portal through a worker thread."""

    def _start(self) -> None:
        self._client = AsyncClient(**self._options)
        self._threaded: Client | None = None  # made by the first request under trio

    @property
    def client(self) -> AsyncClient:
        """surge's client underneath (its ``stats()``)."""
        return self._client

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        method, url, headers = _call(request)
        stream = request.stream
        try:
            limits, pool_timeout = _timeout(request)
            if isinstance(stream, httpx.ByteStream):
                headers, body = dropin.frame(headers, await request.aread())
            else:
                headers, body = dropin.frame(headers, None, _file_of(stream))
            if asyncio._get_running_loop() is None:  # trio
                return await self._in_thread(
                    request, method, url, headers, body, limits, pool_timeout
                )
            response, payload = await dropin.send(
                self._client, method, url, headers, body, limits, pool_timeout
            )
        except Exception as e:
            raise _error(e) from None
        return _response(request, response, _AsyncBody(response, payload))

    async def _in_thread(
        self,
        request: httpx.Request,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: Any,
        limits: Timeout | None,
        pool_timeout: float | None,
    ) -> httpx.Response:
        import anyio.to_thread

        if isinstance(body, Upload) and hasattr(body._source, "__aiter__"):
            # Its chunks are made on trio: gathered here, then sent as they were framed.
            gathered = [chunk async for chunk in body._source]
            body = Upload(iter(gathered), length=body.length)
        if self._threaded is None:
            self._threaded = Client(**self._options)
        client = self._threaded
        portal = client.portal
        exchange = dropin.send(
            client.async_client, method, url, headers, body, limits, pool_timeout
        )
        response, payload = await anyio.to_thread.run_sync(portal.call, exchange, reads_here(body))
        return _response(request, response, _AsyncBody(response, payload, portal))

    async def aclose(self) -> None:
        if self._threaded is not None:
            import anyio.to_thread

            await anyio.to_thread.run_sync(self._threaded.close)
        if asyncio._get_running_loop() is not None:
            await self._client.close()


async def _next(chunks: AsyncIterator[bytes]) -> bytes:
    return await anext(chunks)


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(
        self, response: Response, payload: list[bytes] | None, portal: Portal | None = None
    ) -> None:
        self._response = response
        self._payload = payload
        self._portal = portal  # under trio: the body is read through it

    async def __aiter__(self) -> AsyncIterator[bytes]:
        payload = self._payload
        if payload is not None:
            for piece in payload:
                if piece:
                    yield piece
            return
        try:
            if self._portal is None:
                async for chunk in self._response.aiter_raw():
                    yield chunk
                return
            import anyio.to_thread

            chunks = self._response.aiter_raw()
            while True:
                try:
                    chunk = await anyio.to_thread.run_sync(self._portal.call, _next(chunks))
                except StopAsyncIteration:
                    return
                yield chunk
        except Exception as e:
            raise _error(e) from None

    async def aclose(self) -> None:
        if self._payload is not None:
            return
        with contextlib.suppress(PortalClosed):  # closed meanwhile: nothing to let go
            if self._portal is None:
                await self._response.aclose()
            elif not self._portal.closed:
                import anyio.to_thread

                await anyio.to_thread.run_sync(self._portal.call, self._response.aclose())
