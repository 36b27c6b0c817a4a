"""The HTTP client: one request at a time, over pooled keep-alive connections.

    async with Client(cafile="ca.pem", resolve=["*.sim:*:127.0.0.1"]) as client:
        response = await client.get("https://site1.sim/")
        print(response.status, response.timings.phases_ms())

What it adds to the connection (connection.py): a keyed pool of connections per
(scheme, host, port) (surge.pool), the resolver, TLS from one shared
``SSLContext`` per client, paced handshakes, timeouts that start only when the
request's own network work starts, redirects, decompression, a body cap, one
transparent retry of an idempotent request that met a stale keep-alive
connection (never of a POST once written: surge.retry.may_resend), and the
classification of every failure into one of surge's error classes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable, Coroutine, Iterable, Mapping
from contextlib import AbstractAsyncContextManager as AsyncContextManager
from contextvars import ContextVar
from time import perf_counter
from typing import TYPE_CHECKING, Any

from surge._log import logger as get_logger
from surge.errors import LocalResourceError, RequestError, StreamConsumed, UsageError
from surge.http import redirects as redirect_policy
from surge.http.arguments import Params, Upload, prepare
from surge.http.auth import Auth, Signed
from surge.http.auth import check as check_auth
from surge.http.auth import lines as auth_lines
from surge.http.connection import HTTPConnection, WireResponse, sets_cookies
from surge.http.deadlines import Deadlines, TaskDeadline
from surge.http.decoding import ACCEPT_ENCODING, decode, layers
from surge.http.gate import Gate
from surge.http.headers import HeaderInput, RequestHeaders, build, check_method
from surge.http.multiplex import Multiplexer
from surge.http.resolver import DNS_TIMEOUT, Override, Resolver, parse_servers
from surge.http.response import Response
from surge.http.stream import BodyStream, drain
from surge.http.timeout import Timeout
from surge.http.timeout import split as split_timeout
from surge.http.timings import Timings
from surge.http.tlssession import resuming
from surge.http.url import parse_url
from surge.pool import AsyncKeyedPool
from surge.retry import may_resend

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

    from surge.http.cookies import CookiesInput, CookieStore
    from surge.http.http2 import HTTP2Connection
    from surge.http.proxy import PoolKey, Proxies

#: The request whose connection is being opened, and its connect timeout (None:
#: the client's): the pool calls ``create(key)`` in the acquiring task, so the
#: connect phases land in that request's timings.
_opening_for: ContextVar[tuple[Timings, float | None, Callable[[], None] | None]] = ContextVar(
    "surge_opening_for"
)

#: The caller's "may this request still be sent?" (the bulk engine's
#: ``--max-host-errors``, surge.bulk.engine): called at the last moment before
#: the request's network work - before a connection is opened for it, and
#: before it is written on a connection - after every wait (for a connection
#: to its host, in a pacer); it raises a ``RequestError`` to stop the request
#: unsent.  Asked of a request's first hop only; None: always.
may_send: ContextVar[Callable[[], None] | None] = ContextVar("surge_may_send", default=None)

#: DEBUG: one line per phase of each request (nothing at INFO or above).
log = get_logger("surge.http")
_DEBUG = logging.DEBUG

#: How many times one request goes again after HTTP/2 said it was not
#: processed (a GOAWAY above its stream, REFUSED_STREAM, a stream the
#: server's lowered limit would not open): the protocol's promise makes it
#: safe for a POST too; once, as docs/http.md says (the Multiplexer learns a
#: server's streams per connection from its GOAWAY, so the resend goes where
#: it is taken), apart from the one resend of a stale HTTP/1.1 connection.
UNPROCESSED_RETRIES = 1
#: How many times one request may find its stream slot taken back before its
#: HEADERS went out (a GOAWAY came between): no resend, nothing was sent, but
#: bounded all the same against a server that goes away on every connection.
UNSENT_RETRIES = 16

_REDIRECTS = redirect_policy.STATUSES


#: A client certificate: a PEM file with the certificate and its key, or the
#: two files as (certificate, key) - httpx's ``cert``, curl's --cert/--key.
ClientCert = str | tuple[str, str]


def make_ssl_context(
    cafile: str | None = None,
    *,
    insecure: bool = False,
    cert: ClientCert | None = None,
    http2: bool = False,
) -> ssl.SSLContext:
    """One context per configuration, built once: building one loads the CA store,
    which costs milliseconds (OpenSSL 3 made it several times slower, cpython
    #95031), so a context per request or per connection is a classic slowdown.
    ``cert``: the certificate this client shows a server that asks for one.
    ``http2``: ALPN offers ``h2`` before ``http/1.1``.  The context resumes TLS
    sessions (surge.http.tlssession): it keeps the last session of each origin."""
    try:
        context = resuming(ssl.create_default_context(cafile=cafile))
    except (OSError, ssl.SSLError) as e:  # the CA file named by --cacert: a usage error
        raise UsageError(f"{cafile}: cannot load CA certificates: {e}") from None
    if cert is not None:
        certfile, keyfile = (cert, None) if isinstance(cert, str) else cert
        try:
            context.load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as e:
            files = certfile if keyfile is None else f"{certfile}, {keyfile}"
            raise UsageError(f"{files}: cannot load the client certificate: {e}") from None
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2", "http/1.1"] if http2 else ["http/1.1"])
    return context


def _resolver(
    resolve: Iterable[str | Override],
    servers: str | Iterable[str] | None,
    dns_timeout: float | None,
    ip_version: int | None,
    connect_timeout: float,
    max_connections: int,
) -> Resolver:
    """The resolver :class:`AsyncClient` builds from its options (see there)."""
    if isinstance(ip_version, bool) or ip_version not in (None, 4, 6):
        raise UsageError(f"ip_version must be 4, 6 or None, not {ip_version!r}")
    if isinstance(servers, str):  # checked here: an empty one is a mistake, not "none"
        servers = parse_servers(servers)
    if dns_timeout is None:
        dns_timeout = DNS_TIMEOUT
    elif isinstance(dns_timeout, bool) or not isinstance(dns_timeout, int | float):
        raise UsageError(f"dns_timeout must be a number of seconds, not {dns_timeout!r}")
    elif not 0 < dns_timeout < float("inf"):
        raise UsageError(f"dns_timeout must be more than 0 seconds and finite, not {dns_timeout}")
    return Resolver(
        resolve,
        servers=servers,
        dns_timeout=min(dns_timeout, connect_timeout),
        family=_FAMILIES[ip_version],
        # Each connection being opened may be waiting for a lookup: the
        # resolver's sockets are sized for that many answers at once.
        concurrency=max_connections,
    )


def _proxies(proxy: str | None, noproxy: str | None, trust_env: bool) -> Proxies | None:
    """The client's proxy routes (proxy.py decides them), or None: proxy.py is
    loaded only when a proxy may be set - ``proxy=`` given, or ``trust_env`` and
    a variable named ``*_proxy`` (any case) other than ``no_proxy`` set."""
    if proxy is None and not (
        trust_env
        and any(n.lower().endswith("_proxy") and n.lower() != "no_proxy" for n in os.environ)
    ):
        return None
    from surge.http.proxy import Proxies

    return Proxies.configure(proxy, noproxy, trust_env)


#: Request header sets a client keeps validated (bounded: callers make them).
_BUILT_KEPT = 64

#: ``ip_version`` -> the resolver's address family.
_FAMILIES = {None: socket.AF_UNSPEC, 4: socket.AF_INET, 6: socket.AF_INET6}


class AsyncClient:
    """An asyncio HTTP/1.1 client for many requests to many hosts
    (:class:`surge.http.Client` is its synchronous twin).

    ``max_connections`` bounds the open connections in all (idle ones of other
    hosts are closed to make room), ``per_host`` per (scheme, host, port).
    ``connect_timeout`` covers DNS, TCP and TLS; ``max_time`` the whole request,
    redirects included; ``read_timeout`` (None: none) is the longest the server
    may stay silent - no byte of the response, or none of the request's body
    taken - once the request is sent.  They start when the request starts its
    own network work: time spent waiting for a connection slot or a handshake
    slot never counts, nor does a streamed body left unread by its reader.
    ``max_connecting`` bounds handshakes in flight: thousands of simultaneous
    SYNs overflow listen backlogs and drop hosts.

    Names resolve through a :class:`~surge.http.resolver.Resolver` built from
    ``resolve`` (curl's ``--resolve`` overrides), ``dns_servers`` (curl's
    ``--dns-servers IP[:PORT],...``: ask these nameservers, through c-ares),
    ``dns_timeout`` (seconds a lookup may take once its query is sent) and
    ``ip_version`` (4 or 6: addresses of that family only, curl's ``-4``/``-6``);
    or give a ``resolver`` of your own instead of all four.  The lookup is part
    of the connect phase, so ``connect_timeout`` bounds it too: ``dns_timeout``
    is cut to ``connect_timeout`` (by default it is the smaller of 5 s and
    ``connect_timeout``), so that the resolver spreads its retransmissions over
    the time it really has.  A request's own, shorter ``Timeout(connect=...)``
    still ends a lookup early; that is reported as ``dns_error``, "timed out
    resolving".  With several addresses, connections are raced as RFC 8305's
    Happy Eyeballs (connection.py).

    ``cert`` (httpx's name; curl's ``--cert``/``--key``): the certificate this
    client shows a server that asks for one - a PEM file holding it and its
    key, or (certificate file, key file).

    ``proxy`` (curl's ``--proxy``: ``http://``, ``https://``, ``socks5://`` or
    ``socks5h://``, credentials as ``user:password@``) carries every request;
    ``noproxy`` (curl's ``--noproxy``) names the hosts that go direct; with
    ``trust_env`` (the default, httpx's name) the environment's ``http_proxy``,
    ``https_proxy``, ``all_proxy`` and ``no_proxy`` are read as curl reads them,
    an explicit option winning (proxy.py).  An ``https://`` proxy's own
    certificate is verified as origins' are, unless ``proxy_cafile`` (curl's
    ``--proxy-cacert``) or ``proxy_insecure`` (``--proxy-insecure``) say
    otherwise for the proxy alone.
    """

    def __init__(
        self,
        *,
        max_connections: int = 1000,
        per_host: int | None = None,
        connect_timeout: float = 10.0,
        max_time: float = 30.0,
        follow_redirects: bool = False,
        max_redirects: int = 10,
        headers: HeaderInput = None,
        auth: Auth | None = None,
        location_trusted: bool = False,
        timeout: float | Timeout | None = None,
        cookies: CookiesInput | bool = None,
        cafile: str | None = None,
        insecure: bool = False,
        cert: ClientCert | None = None,
        resolve: Iterable[str | Override] = (),
        resolver: Resolver | None = None,
        dns_servers: str | Iterable[str] | None = None,
        dns_timeout: float | None = None,
        ip_version: int | None = None,
        body_cap: int = 10 * 1024 * 1024,
        decompress: bool = True,
        max_connecting: int = 256,
        idle_timeout: float = 15.0,
        ssl_context: ssl.SSLContext | None = None,
        proxy: str | None = None,
        noproxy: str | None = None,
        trust_env: bool = True,
        proxy_cafile: str | None = None,
        proxy_insecure: bool = False,
        read_timeout: float | None = None,
        http2: bool = True,
        http2_prior_knowledge: bool = False,
    ) -> None:
        if max_connections < 1:
            raise UsageError(f"max_connections must be at least 1, not {max_connections}")
        total, connect = split_timeout(timeout)  # httpx's name for both at once
        max_time = total or max_time
        connect_timeout = connect or connect_timeout
        if isinstance(timeout, Timeout) and timeout.read is not None:
            read_timeout = timeout.read
        if (
            connect_timeout <= 0
            or max_time <= 0
            or (read_timeout is not None and read_timeout <= 0)
        ):
            raise UsageError("timeouts must be positive")
        #: Seconds the server may stay silent once a request is sent (None: no limit).
        self.read_timeout = read_timeout
        if max_redirects < 0:
            raise UsageError(f"max_redirects must be 0 or more, not {max_redirects}")
        self.connect_timeout = min(connect_timeout, max_time)
        self._max_time = max_time
        self.follow_redirects = follow_redirects
        self.max_redirects = max_redirects
        self._body_cap = body_cap
        self.decompress = decompress
        if resolver is None:
            resolver = _resolver(
                resolve,
                dns_servers,
                dns_timeout,
                ip_version,
                self.connect_timeout,
                max_connections,
            )
        elif resolve or dns_servers is not None or dns_timeout is not None or ip_version:
            raise UsageError(
                "give resolver= or the options it is built from"
                " (resolve, dns_servers, dns_timeout, ip_version), not both"
            )
        self.resolver = resolver
        #: Which requests go through which proxy (proxy.py); None: all direct.
        self._proxies = _proxies(proxy, noproxy, trust_env)
        self._ssl_context = ssl_context
        self._ssl_context_given = ssl_context is not None  # the caller's: used as it is
        self._cafile = cafile
        self._insecure = insecure
        self._cert = cert
        #: TLS to an https:// proxy: its own trust only if asked (curl's --proxy-cacert).
        self._proxy_cafile = proxy_cafile
        self._proxy_insecure = proxy_insecure
        self._proxy_ssl_context: ssl.SSLContext | None = None
        #: The client's headers (surge's defaults first), split by headers.py's policy.
        self._headers = build(headers, ACCEPT_ENCODING if decompress else None)
        self._credentials = self._headers.credentials
        #: Request header sets already validated and merged (_with_headers).
        self._built: dict[tuple[Any, ...], RequestHeaders] = {}
        #: ``-u user:password``: sent to the first origin of each request only; a
        #: callable is called for each request (auth.py).
        check_auth(auth)
        self._auth = auth_lines(auth, "", "", None) if isinstance(auth, tuple | list) else None
        self._auth_fn = auth if callable(auth) else None
        #: curl's --location-trusted: credentials follow redirects to any origin.
        self.location_trusted = location_trusted
        #: What servers set, sent back where it belongs (cookies.py); made by the
        #: first cookie (the caller's, or a response's Set-Cookie), so a run that
        #: meets none never loads http.cookiejar.  cookies=False: none kept.
        self._keeps_cookies = cookies is not False
        self._cookies: CookieStore | None = None
        if cookies is not None and not isinstance(cookies, bool):
            self._cookie_store(cookies)
        self._connecting = Gate(max_connecting)  # O(1) FIFO; asyncio.Semaphore is O(waiters)
        self._pool: AsyncKeyedPool[PoolKey, Any] = AsyncKeyedPool(
            self._open,
            max_size=max_connections,
            max_per_key=per_host or max_connections,
            timeout=1e9,  # waiting for a connection is surge's own queue: no timeout
            max_idle=idle_timeout,
            close=_close,
        )
        #: HTTP/2 (http2.py): ALPN h2 over TLS (``http2``), cleartext h2c to
        #: every http:// origin (``http2_prior_knowledge``, curl's name).
        self.http2 = http2
        self.http2_prior_knowledge = http2_prior_knowledge
        #: Always there: a caller's own ``ssl_context`` may negotiate h2 even with http2=False.
        self._mux = Multiplexer(self._pool, min(per_host or max_connections, max_connections))
        self.requests = 0
        self._deadlines: Deadlines | None = None  # made on the loop, by the first connect

    # Read-only: every pooled connection carries both from when it opened.
    @property
    def max_time(self) -> float:
        """Seconds a request may take, redirects included (from its own network work)."""
        return self._max_time

    @property
    def body_cap(self) -> int:
        """The largest body accepted, on the wire and decoded, in bytes."""
        return self._body_cap

    @property
    def cookies(self) -> CookieJar:
        """The cookies the client keeps (a ``http.cookiejar.CookieJar``): set by
        its responses, and by ``cookies=``; sent back by the jar's rules."""
        if not self._keeps_cookies:
            raise UsageError("this client keeps no cookies (cookies=False)")
        return self._cookie_store().jar

    def _cookie_store(self, cookies: CookiesInput = None) -> CookieStore:
        if self._cookies is None:
            # Here, not at import: http.cookiejar costs ~15 ms, and most runs set no cookie.
            from surge.http.cookies import CookieStore

            self._cookies = CookieStore(cookies)
        return self._cookies

    @property
    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = make_ssl_context(
                self._cafile, insecure=self._insecure, cert=self._cert, http2=self.http2
            )
        return self._ssl_context

    @property
    def proxy_ssl_context(self) -> ssl.SSLContext:
        """What TLS to an https:// proxy trusts: the client's own context, unless
        ``proxy_cafile`` or ``proxy_insecure`` were given."""
        same = self._proxy_cafile is None and not self._proxy_insecure
        if same and (not self.http2 or self._ssl_context_given):
            return self.ssl_context
        if self._proxy_ssl_context is None:
            # A proxy is spoken to in HTTP/1.1: its context offers no h2.
            self._proxy_ssl_context = (
                make_ssl_context(self._cafile, insecure=self._insecure, cert=self._cert)
                if same
                else make_ssl_context(self._proxy_cafile, insecure=self._proxy_insecure)
            )
        return self._proxy_ssl_context

    # -- the public API -------------------------------------------------------------------

    # get() and head() return request()'s coroutine rather than awaiting it in
    # one of their own: a coroutine layer less per request.
    def get(self, url: str, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        """``await client.get(url)``: a GET request."""
        return self.request("GET", url, **kwargs)

    def head(self, url: str, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        """``await client.head(url)``: a HEAD request."""
        return self.request("HEAD", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        return self.request("DELETE", url, **kwargs)

    def options(self, url: str, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        return self.request("OPTIONS", url, **kwargs)

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Params | None = None,
        headers: HeaderInput = None,
        content: bytes | str | Upload | None = None,
        data: Mapping[str, Any] | None = None,
        json: Any = None,
        body: bytes | None = None,
        timeout: float | Timeout | None = None,
        auth: Auth | None = None,
        follow_redirects: bool | None = None,
        location_trusted: bool | None = None,
        _stream: bool = False,
        _discard: bool = False,
        _on_hop: Callable[[Response, list[bytes]], None] | None = None,
        _pool_timeout: float | None = None,
        _max_redirects: int | None = None,
    ) -> Response:
        """Send one request (following redirects if asked) and read the response.

        ``params``, ``content``, ``data`` (a form) and ``json`` are httpx's
        (arguments.py); ``body`` is raw bytes as ``content``.  ``timeout``: this
        request's ``max_time``, or a :class:`Timeout` (its ``connect`` applies to
        a connection opened for this request).  ``auth``: (user, password) for
        Basic authentication, or a callable (auth.py), instead of the client's,
        on the same terms (its origin only, unless ``location_trusted``).
        Raises a ``RequestError`` subclass named for its ``error_class``; a
        response of any status is a response, not an error.

        One coroutine for the whole request - every hop, and the one retry of a
        request that met a stale keep-alive connection: each await layer costs
        about a microsecond on a path that costs tens.

        ``_on_hop(response, body)`` (surge.bulk.bodies' WARC) is called with each
        redirect response followed, its ``request_head`` set, and its entity body
        (its transfer codings undone - dechunked, a Transfer-Encoding's gzip
        inflated - its content codings not, as ``aiter_raw()`` gives a body),
        before the next hop is sent.

        ``_pool_timeout`` (the drop-in transports': httpx's ``Timeout(pool=)``):
        the longest this request waits for a connection slot, then ``PoolTimeout``;
        surge's own callers never set it (waiting in surge's queue is no failure).

        ``_max_redirects`` (robots.txt's, RFC 9309's five): fewer hops than the
        client's ``max_redirects`` for this request.
        """
        timings = Timings(perf_counter())
        upload: Upload | None = None  # a body streamed from a file or an iterator
        if params is not None or content is not None or data is not None or json is not None:
            url, headers, body, upload = prepare(url, params, headers, content, data, json, body)
        max_time = self._max_time
        connect_timeout = None
        read_timeout = self.read_timeout
        if timeout is not None:
            total, connect_timeout = split_timeout(timeout)
            max_time = total or max_time
            if connect_timeout is not None:
                connect_timeout = min(connect_timeout, max_time)
            if isinstance(timeout, Timeout) and timeout.read is not None:
                read_timeout = timeout.read
        try:
            target = parse_url(url)
        except RequestError as e:
            e.url = url
            e.timings = timings
            raise
        if method != "GET":
            method = check_method(method)
        follow = self.follow_redirects if follow_redirects is None else follow_redirects
        own = self._headers
        if headers:
            own = self._with_headers(headers)
            secret = own.credentials
        else:
            secret = self._credentials  # a local copy: NamedTuple fields cost a lookup
        first = target  # its origin is where credentials may go (redirects.py)
        user_auth = self._auth
        if auth is None:
            auth = self._auth_fn  # None unless the client's auth is a callable
        if auth is not None:
            user_auth = auth_lines(auth, method, url, body)
        if target.auth is not None or user_auth is not None:
            secret = redirect_policy.credentials(own, user_auth, first, target, True)
        common = own.common
        host_header = own.host or target.host_header
        pool = self._pool
        mux = self._mux
        proxies = self._proxies
        key: PoolKey  # the pool's key for a hop: its origin's, or with a proxy in it
        deadline: float | None = None  # set when the first hop starts its network work
        redirects = 0
        history: list[Response] | None = None  # the redirect hops' responses, if any
        gate = may_send.get()  # None but under --max-host-errors
        most_hops = self.max_redirects
        if _max_redirects is not None:
            most_hops = min(most_hops, _max_redirects)
        while True:  # a hop per turn
            jar = self._cookies  # per hop: a response may have made it meanwhile
            cookie = b"" if jar is None else jar.header(target.url)
            if cookie and b"cookie:" in secret.lower():
                cookie = b""  # the caller's own Cookie header wins, as in cookiejar
            # Direct, unless a proxy takes this hop (judged per hop: no_proxy is
            # about each hop's own host): then the pool key has the proxy in it,
            # and a forwarded request has an absolute target and the proxy's
            # credentials (proxy.py).
            if proxies is None:
                key, request_target, to_proxy = target.key, target.target, b""
            else:
                key, request_target, to_proxy = proxies.route(target)
            # The request head, built here rather than in a helper: a call less
            # on every request.
            head = b"".join(
                (
                    method.encode("ascii"),
                    b" ",
                    request_target,
                    b" HTTP/1.1\r\nHost: ",
                    host_header,
                    b"\r\n",
                    common,
                    secret,
                    to_proxy,
                    cookie,
                    b"\r\n",
                )
            )
            if body is not None:
                head = b"%sContent-Length: %d\r\n\r\n%s" % (head[:-2], len(body), body)
            elif upload is not None:
                length = upload.length
                framing = (
                    b"Transfer-Encoding: chunked"
                    if length is None
                    else b"Content-Length: %d" % length
                )
                head = b"%s%s\r\n\r\n" % (head[:-2], framing)
            retried = False
            unprocessed_left = UNPROCESSED_RETRIES
            unsent_left = UNSENT_RETRIES
            while True:  # an attempt per turn
                # A free HTTP/2 stream to the origin, or a keep-alive connection if idle.
                owner: Any = pool  # what the connection (or stream) goes back to
                # An HTTPConnection, or an HTTP/2 stream (http2.H2Stream) in its place.
                conn: Any = mux.ready(key)
                if conn is None:
                    conn = pool.acquire_nowait(key)
                    if conn is None:
                        token = _opening_for.set((timings, connect_timeout, gate))
                        try:
                            conn = await mux.acquire(key, _pool_timeout, self._multiplexes(key))
                        except RequestError as e:
                            _annotate(e, url, target.url, timings, redirects)
                            raise
                        finally:
                            _opening_for.reset(token)
                    elif conn.multiplexed:  # an idle HTTP/2 connection
                        # (pinged first only if idle long: no await on the hot path)
                        conn = (
                            await mux.stream_for(key, conn)
                            if mux.idle_long(conn)
                            else mux.adopted(key, conn)
                        )
                        if conn is None:  # its server went silent, or allows no stream now
                            continue
                if conn.is_stream:  # an HTTP/2 stream: it goes back to the multiplexer
                    owner = mux
                if conn.closed:  # the server closed it while it was idle
                    await owner.discard(conn)
                    continue
                if gate is not None:  # asked once: now, on the connection it goes out on
                    asked = gate
                    gate = None  # not again: not of a redirect's hop, nor of a stale resend
                    try:
                        asked()
                    except RequestError as e:
                        owner.release_nowait(conn)  # unused: it goes back as it came
                        _annotate(e, url, target.url, timings, redirects)
                        raise
                fresh = conn.connect_timings is timings
                now = timings.connected = perf_counter()
                if deadline is None:
                    # The connection's loop, not asyncio.get_running_loop(): on 3.11
                    # that makes a getpid() system call each time.
                    if fresh and timings.dns_start:
                        # The clock started at the lookup, less the wait for a
                        # handshake slot (surge's own queue, between the two).
                        timings.started = timings.dns_start
                        spent = now - timings.dns_start
                        if timings.connect_start and timings.dns_end:
                            spent -= timings.connect_start - timings.dns_end
                        deadline = conn.loop.time() + max_time - spent
                    else:
                        timings.started = now
                        deadline = conn.loop.time() + max_time
                wire = None
                try:
                    # Positional: keyword arguments cost a little on every request.
                    wire = conn.send(
                        head, method == "HEAD", deadline, max_time, _stream, _discard, read_timeout
                    )
                    if upload is not None:
                        await _send_upload(conn, upload, wire)
                    elif conn.is_stream and not conn.sent_end:
                        # HTTP/2 read a caller's Transfer-Encoding header as a body
                        # to come: none comes (RFC 9113 8.2.2: the field means nothing)
                        conn.end_body()
                    timings.sent = perf_counter()
                    await (wire.done if wire.head_ready is None else wire.head_ready)
                except RequestError as e:
                    first_byte = timings.first_byte = None if wire is None else wire.first_byte
                    await owner.discard(conn)
                    # Stale: a connection reused - an exchange done on it before
                    # (a tunnel's first request, whoever opened it, is none).  Or
                    # HTTP/2's GOAWAY or REFUSED_STREAM: the server did not process it.
                    unprocessed = e.unprocessed
                    if unprocessed and wire is None and unsent_left:
                        # Never sent (a GOAWAY came between its stream slot and its
                        # HEADERS): not a resend at all (UNSENT_RETRIES).
                        unsent_left -= 1
                        _reset_attempt(timings)
                        continue
                    if (
                        unprocessed
                        and unprocessed_left
                        and may_resend(method, wire is not None, True)
                        and (upload is None or upload.rewind())
                    ):  # the server said it did not process it: again, a few times
                        unprocessed_left -= 1
                        _reset_attempt(timings)
                        continue
                    stale = (
                        not retried
                        and not unprocessed
                        and conn.requests
                        and e.error_class == "connection_reset"
                        and first_byte is None
                        and may_resend(method, wire is not None, False)  # at most once
                        and (upload is None or upload.rewind())
                    )
                    if stale:  # closed by the server as we reused it: once more, afresh
                        retried = True
                        _reset_attempt(timings)
                        continue
                    if wire is not None:
                        if wire.head_done and e.status is None:
                            e.status = wire.status
                        e.bytes = wire.body_bytes
                    if conn.address is not None:  # connected: where to, for the record
                        e.remote_ip = conn.address[0]
                        e.tls = conn.tls_info()
                    _annotate(e, url, target.url, timings, redirects)
                    raise
                except BaseException:
                    conn.abort()
                    await owner.discard(conn)
                    raise
                break
            timings.first_byte = wire.first_byte
            timings.connection = conn.serial
            timings.http2 = conn.http2
            if jar is None and self._keeps_cookies and sets_cookies(wire.head):
                jar = self._cookie_store()
            if jar is not None:
                jar.extract(target.url, wire.head)
            hop_body = wire.body  # the raw chunks, for _on_hop (streamed: drained below)
            if _stream:
                hop = follow and wire.status in _REDIRECTS
                if not (hop and redirect_policy.location(wire.head)):
                    response = self._streamed(
                        url, target.url, wire, timings, redirects, conn, owner
                    )
                    response.request_head = head
                    response._history = history
                    return response
                hop_body = []
                try:  # a hop to follow: its body is read and dropped (or kept for _on_hop)
                    await drain(wire, self._body_cap, hop_body if _on_hop is not None else None)
                except RequestError as e:
                    await owner.discard(conn)
                    _annotate(e, url, target.url, timings, redirects)
                    raise
            timings.done = perf_counter()
            self.requests += 1
            # The response is its own object: the connection can go back at once.
            if wire.keep_alive and not conn.closed:
                owner.release_nowait(conn)  # no reset callback: no need to await
            else:
                await owner.discard(conn)
            try:
                response = self._response(url, target.url, wire, timings, redirects, conn)
            except RequestError as e:
                _annotate(e, url, target.url, timings, redirects)
                raise
            status = wire.status
            if log.isEnabledFor(_DEBUG):
                _log_phases(method, target.url, response)
            if not (follow and status in _REDIRECTS):
                if history is not None:
                    response._history = history
                return response
            location = redirect_policy.location(wire.head)
            if location is None:  # none, or empty: nowhere to go (curl neither)
                response._history = history
                return response
            if history is None:
                history = []
            history.append(response)  # the hop's own response (response.history)
            if _on_hop is not None:
                response.request_head = head
                if wire.transfer_coding is not None and hop_body:  # the entity body
                    transfer = layers(wire.transfer_coding, None, self._body_cap, status).transfer
                    if transfer is not None:
                        try:
                            hop_body = [decode(hop_body, transfer)]
                        except RequestError as e:
                            e.bytes = wire.body_bytes
                            _annotate(e, url, target.url, timings, redirects)
                            raise
                _on_hop(response, hop_body)
            redirects += 1
            if redirects > most_hops:
                error = RequestError(
                    "too_many_redirects",
                    f"more than {most_hops} redirects (last to {location[:200]})",
                    status=status,
                )
                _annotate(error, url, target.url, timings, redirects)
                raise error
            try:
                next_target = target.join(location)
            except RequestError as e:
                e.detail = f"redirect to an invalid URL: {location[:200]!r}"
                _annotate(e, url, target.url, timings, redirects)
                raise
            timings.url, timings.status = target.url, status  # for traces: hop by hop
            trusted = self.location_trusted if location_trusted is None else location_trusted
            secret = redirect_policy.credentials(own, user_auth, first, next_target, trusted)
            host_header = redirect_policy.host_header(own, first, next_target)
            target = next_target
            if upload is None:
                method, body = redirect_policy.next_method(status, method, body)
            else:
                method, upload = redirect_policy.next_method(status, method, upload)
                if upload is not None and not upload.rewind():
                    raise StreamConsumed(
                        f"a {status} redirect asks for the request body again, and an"
                        " iterator's body cannot be sent twice: give bytes or a file"
                    )
            timings = _next_hop(timings)

    def callers_code(
        self, method: str, url: str, arguments: dict[str, Any]
    ) -> tuple[str, dict[str, Any], Upload | None]:
        """What :meth:`request` would run of its caller's own code, run now: the
        body arguments (``params``, ``content``, ``data``, ``json``) made into
        bytes or an :class:`Upload` (a file's size read, a value's ``str()``),
        and an ``auth`` callable called (the client's, or the request's).  The
        synchronous clients run this in the calling thread, never on the loop
        every thread's requests share (auth.py, arguments.py's ``Upload``).
        Returns the URL and ``arguments`` with those replaced (``request(method,
        url, **arguments)`` then sends the same request), and the ``Upload``,
        whose reads are the caller's code too."""
        params = arguments.pop("params", None)
        content = arguments.pop("content", None)
        data = arguments.pop("data", None)
        json = arguments.pop("json", None)
        upload = None
        if params is not None or content is not None or data is not None or json is not None:
            url, headers, body, upload = prepare(
                url, params, arguments.get("headers"), content, data, json, arguments.get("body")
            )
            arguments["headers"] = headers
            if upload is not None:
                arguments["content"] = upload
            elif body is not None:
                arguments["body"] = body
        auth = arguments.get("auth")
        if auth is None:
            auth = self._auth_fn
        if callable(auth):
            if method != "GET":
                method = check_method(method)
            try:
                parse_url(url)
            except RequestError:
                return url, arguments, upload  # request() fails first: no credentials made
            body = arguments.get("body")
            arguments["auth"] = Signed(auth_lines(auth, method, url, body))
        return url, arguments, upload

    def _with_headers(self, headers: HeaderInput) -> RequestHeaders:
        """The client's headers plus a request's, validated and split once per
        distinct set: a program (or a library above a drop-in transport) sends
        the same few sets again and again, and checking each line costs ~5 us."""
        pairs: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers or ()
        key = tuple(pairs)
        try:
            made = self._built.get(key)
        except TypeError:  # unhashable values: not kept
            return self._headers.plus(build(key))
        if made is None:
            made = self._headers.plus(build(key))
            if len(self._built) >= _BUILT_KEPT:
                self._built.clear()
            self._built[key] = made
        return made

    def stream(self, method: str, url: str, **kwargs: Any) -> AsyncContextManager[Response]:
        """``async with client.stream("GET", url) as response:`` a response whose
        body is read as it arrives: ``async for chunk in response.aiter_bytes()``
        (or ``aiter_raw``, ``aiter_text``, ``aiter_lines``, ``aread()``).  The
        arguments are :meth:`request`'s.  The block's end lets go of the
        connection: back to the pool if the body was read, else closed."""
        return _Streaming(self.request(method, url, _stream=True, **kwargs))

    def _streamed(
        self,
        url: str,
        final_url: str,
        wire: WireResponse,
        timings: Timings,
        redirects: int,
        conn: HTTPConnection,
        owner: Any,
    ) -> Response:
        """The caller's :class:`Response` with its body still on the connection
        (``owner``: the pool, or for an HTTP/2 stream the multiplexer)."""
        self.requests += 1
        response = Response(
            url, final_url, wire.status, wire.head, b"", 0, timings, 1, redirects, conn
        )
        response._stream = BodyStream(
            wire, conn, owner, timings, decompress=self.decompress, cap=self._body_cap
        )
        return response

    def _response(
        self,
        url: str,
        final_url: str,
        wire: WireResponse,
        timings: Timings,
        redirects: int,
        conn: HTTPConnection,
    ) -> Response:
        """The caller's :class:`Response`: the body joined and decoded (decoding.py:
        streamed, bounded by the body cap; a coding surge does not decode stays as
        it came)."""
        chunks = wire.body
        wire_bytes = wire.body_bytes
        payload = None
        content = wire.content_encoding if self.decompress else None
        if chunks and (wire.transfer_coding is not None or content is not None):
            transfer, decoder = layers(wire.transfer_coding, content, self._body_cap, wire.status)
            try:
                if transfer is not None:  # hop-by-hop: always undone
                    chunks = [decode(chunks, transfer)]
                if decoder is not None:
                    payload = decode(chunks, decoder)
            except RequestError as e:
                e.bytes = wire_bytes
                raise
        if payload is None:
            payload = b"".join(chunks) if len(chunks) != 1 else chunks[0]
        return Response(
            url,
            final_url,
            wire.status,
            wire.head,
            payload,
            wire_bytes,
            timings,
            1,  # one try: retries (--retries) are the caller's, who counts them
            redirects,
            conn,
        )

    def look_ahead(self, url: str) -> None:
        """Start resolving ``url``'s host now and return at once: for a request
        queued behind the ones in flight (the bulk engine calls it for inputs it
        has read ahead), so that its answer is ready when a slot frees.  A lookup
        made inside the slot makes every wave of a crawl over many names wait a
        DNS round trip before its first byte.  Nothing happens if a proxy may
        carry the request (then it is not this client that resolves the name)
        or if the pool has a connection to the origin (the request will likely
        reuse one and resolve nothing); the resolver decides the rest
        (Resolver.prefetch: an answer is held for the request, a failure is not:
        the request asks again)."""
        if self._proxies is not None:
            return
        try:
            parsed = parse_url(url)
        except (RequestError, UsageError, ValueError):  # the request reports it
            return
        if self._pool._holds(parsed.key):  # a connection to reuse: likely no lookup
            return
        self.resolver.prefetch(parsed.host, parsed.port)

    async def close(self) -> None:
        await self._mux.close()
        await self._pool.close()
        self.resolver.close()

    async def aclose(self) -> None:
        """httpx's name for :meth:`close`."""
        await self.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def stats(self) -> dict[str, Any]:
        stats = self._pool.stats()
        stats["requests"] = self.requests
        stats["dns_lookups"] = self.resolver.lookups
        return stats

    # -- opening connections ------------------------------------------------------------------

    def _multiplexes(self, key: PoolKey) -> bool:
        """Whether a connection to ``key`` may speak HTTP/2: TLS with ALPN ``h2``
        (a tunnel through a proxy too), or h2c with prior knowledge (direct)."""
        if key[0] == "https":
            return self.http2
        return self.http2_prior_knowledge and len(key) == 3

    async def _open(self, key: PoolKey) -> HTTPConnection | HTTP2Connection:
        """The pool's ``create``: resolve, wait for a handshake slot, connect
        (through the key's proxy, if it has one: proxy.py)."""
        timings, timeout, gate = _opening_for.get()
        if gate is not None:
            gate()  # the request may no longer go out: no connection for it
        scheme, host, port = key[0], key[1], key[2]
        proxy = key[3] if len(key) == 4 else None
        if timeout is None:
            timeout = self.connect_timeout
        loop = asyncio.get_running_loop()
        if self._deadlines is None:
            self._deadlines = Deadlines(loop)
        # Built (once per client) before the clock of any phase starts: loading
        # the CA store takes milliseconds, which are no part of the TCP connect.
        ssl_context = self.ssl_context if scheme == "https" else None
        proxy_context = self.proxy_ssl_context if proxy is not None and proxy.tls else None
        timings.dns_start = perf_counter()
        target_address = None
        if proxy is not None:
            if proxy.scheme == "socks5" and host != "*":  # socks5h: the proxy resolves
                target_address = (await self._resolve(host, port, timeout))[0]
            host, port = proxy.host, proxy.port  # then connect to the proxy
        # Inline, not in _resolve: the common case (cached) costs no await.
        addresses = self.resolver.cached(host, port) or await self._resolve(host, port, timeout)
        timings.dns_end = perf_counter()
        remaining = timeout - (timings.dns_end - timings.dns_start)
        # Several addresses are raced (connection.race): what each did goes
        # into the timeout's detail.
        attempts: list[str] | None = [] if len(addresses) > 1 else None
        async with self._connecting:
            timings.connect_start = perf_counter()
            try:
                with TaskDeadline(self._deadlines, loop.time() + remaining):
                    if proxy is not None:
                        from surge.http.proxy import open_through  # loaded by _proxies

                        tunnel = await open_through(
                            proxy,
                            key,
                            addresses,
                            target_address=target_address,
                            ssl_context=ssl_context,
                            proxy_ssl_context=proxy_context,
                            timings=timings,
                            deadlines=self._deadlines,
                            body_cap=self._body_cap,
                            attempts=attempts,
                        )
                        if tunnel.tls is not None and tunnel.tls[2] == "h2":
                            return _http2(tunnel)
                        return tunnel
                    prior = self.http2_prior_knowledge and scheme == "http"
                    conn = await HTTPConnection.open(
                        (scheme, host, port),
                        addresses,
                        ssl_context=ssl_context,
                        server_hostname=host,
                        timings=timings,
                        deadlines=self._deadlines,
                        body_cap=self._body_cap,
                        attempts=attempts,
                        prior_knowledge=prior,
                    )
                    if prior or (conn.tls is not None and conn.tls[2] == "h2"):
                        return _http2(conn)
                    return conn
            except TimeoutError:
                if proxy is not None:
                    phase = f"connecting through the proxy {proxy.host}:{proxy.port}"
                else:
                    phase = "TLS handshake" if timings.tcp_end else "TCP connect"
                error = _timeout_error("connect_timeout", phase, timeout)
                if attempts and not timings.tcp_end:
                    detail = f"{error.detail}: {'; '.join(attempts)}"
                    error = RequestError("connect_timeout", detail)
                raise error from None
            except LocalResourceError:
                # Out of descriptors: idle keep-alive sockets (to hosts this run
                # may not see again) hold some. Close them, so that the caller's
                # next try - the bulk engine waits and tries again - finds one.
                await self._pool.clear()
                raise

    async def _resolve(self, host: str, port: int, timeout: float) -> tuple[str, ...]:
        """The addresses of ``host``: a lookup bounded by ``timeout`` (the timeout
        costs ~10 us, so only a real lookup has one)."""
        addresses = self.resolver.cached(host, port)
        if addresses is not None:
            return addresses
        try:
            async with asyncio.timeout(timeout):
                return await self.resolver.resolve(host, port)
        except TimeoutError:
            raise _timeout_error("dns_error", f"resolving {host}", timeout) from None


def _http2(conn: HTTPConnection) -> HTTP2Connection:
    """HTTP/2 on a connection just opened (http2.py, and the ``h2`` package,
    loaded by the first connection that speaks it)."""
    from surge.http.http2 import HTTP2Connection

    return HTTP2Connection.take_over(conn)


def _close(conn: Any) -> None:
    """The pool's ``close``: an HTTP/1.1 or an HTTP/2 connection, each its own way."""
    conn.close()


async def _send_upload(conn: HTTPConnection, upload: Upload, wire: WireResponse) -> None:
    """A streamed request body, after its head; its length kept to, if it has one."""
    chunks = upload.chunks()
    try:
        sent = await conn.send_body(chunks, upload.length is None, wire)
    finally:
        # At once, not when collected: a read still asked of the caller's
        # thread (one ahead) is called off, and a resend's reads come after.
        await chunks.aclose()
    if upload.length is not None and sent != upload.length and not wire.done.done():
        raise UsageError(
            f"the request body's file gave {sent:,} bytes, not the {upload.length:,}"
            " it had when the request began"
        )


class _Streaming:
    """``client.stream()``'s context manager: the response, closed at the end."""

    __slots__ = ("_request", "_response")

    def __init__(self, request: Coroutine[Any, Any, Response]) -> None:
        self._request = request
        self._response: Response | None = None

    async def __aenter__(self) -> Response:
        self._response = await self._request
        return self._response

    async def __aexit__(self, *exc_info: object) -> None:
        if self._response is not None:
            await self._response.aclose()


def _timeout_error(
    error_class: str, what: str, limit: float, status: int | None = None
) -> RequestError:
    return RequestError(error_class, f"timed out {what} (limit {limit:g} s)", status=status)


def parse_header(text: str) -> tuple[str, str]:
    """A ``-H 'Name: value'`` flag (curl's form) as a (name, value) pair."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or " " in name.strip():
        raise UsageError(f"-H {text!r}: expected 'Name: value'")
    return name.strip(), value.strip()


def _annotate(
    error: RequestError,
    url: str,
    final_url: str,
    timings: Timings,
    redirects: int,
) -> None:
    """What the failed request's record needs, carried by its error."""
    if log.isEnabledFor(_DEBUG):
        log.debug("%s failed: %s: %s", final_url, error.error_class, error.detail)
    error.url = url
    error.final_url = final_url
    error.timings = timings
    error.attempts = 1
    error.redirects = redirects


def _log_phases(method: str, url: str, response: Response) -> None:
    """The DEBUG lines of one hop: a line per phase it went through."""
    for phase, ms in response.timings.phases_ms().items():
        if ms is not None:
            log.debug("%s %s %s %.3f ms", method, url, phase.removesuffix("_ms"), ms)
    log.debug("%s %s -> %d, %d bytes on the wire", method, url, response.status, response.bytes)


def _reset_attempt(timings: Timings) -> None:
    timings.sent = timings.first_byte = timings.done = None


def _next_hop(previous: Timings) -> Timings:
    """A redirect's timings continue the same clock; phases are the last hop's, and
    the earlier hops stay reachable through ``previous`` (the trace draws them)."""
    timings = Timings(previous.queued)
    timings.started = previous.started
    timings.hop_start = perf_counter()
    timings.previous = previous
    return timings
