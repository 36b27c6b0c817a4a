"""Proxies: which one a request goes through, and the handshakes that open a way
through it.

What it decides, as curl does (its manual's ENVIRONMENT section, ``--proxy``,
``--noproxy``; lib/noproxy.c for the matching):

* The proxy for a URL: ``proxy=`` (curl's ``-x/--proxy``) for every URL;
  without it, when ``trust_env`` (httpx's name; the default), the environment:
  ``http_proxy`` for http:// URLs, ``https_proxy`` or ``HTTPS_PROXY`` for
  https:// URLs, ``all_proxy`` or ``ALL_PROXY`` when the scheme's own is not
  set (the lower-case name first; an empty value is unset).  ``proxy=""``
  means no proxy and the environment's ignored, as ``curl -x ""``.
* Who goes around it: ``noproxy=`` (curl's ``--noproxy``), else ``no_proxy`` or
  ``NO_PROXY``, a list of host names, domains and (curl 7.86) IP addresses and
  CIDR ranges, separated by commas or blanks; ``*`` alone is every host.  The
  environment's list applies to ``proxy=`` too (curl since 7.53); ``noproxy=""``
  overrides it and proxies every host.  It is judged for each hop of a
  redirect chain on that hop's own host.

How a request goes through:

* http:// URL, http:// or https:// proxy: *forwarded*.  The request goes to
  the proxy with an absolute-form target (``GET http://host/path HTTP/1.1``,
  RFC 9112 3.2.2) and the proxy's ``Proxy-Authorization``, over a keep-alive
  connection to the proxy that any origin's requests share: its pool key is
  ``("http", "*", 0, proxy)``.  So the per-host bound counts the proxy as the
  host for them, as curl's CURLMOPT_MAX_HOST_CONNECTIONS does.
* https:// URL, or any URL through a SOCKS5 proxy: *tunnelled*.  A connection
  to the proxy becomes a tunnel to one origin (HTTP ``CONNECT``, RFC 9110
  9.3.6, with ``Proxy-Authorization``; or SOCKS5, RFC 1928, with RFC 1929's
  username/password), then TLS to the origin runs through it.  Its pool key is
  the origin's (scheme, host, port) and the proxy: one origin per connection.
  ``socks5://`` resolves the host here and sends the address; ``socks5h://``
  sends the name, and the proxy resolves it (no lookup here at all).
* An ``https://`` proxy: TLS to the proxy itself, verified as origins are
  (``cafile=``, ``insecure=``), or by its own (``proxy_cafile=``,
  ``proxy_insecure=``: curl's ``--proxy-cacert``, ``--proxy-insecure``), and for
  an https:// URL a second TLS, to the origin, inside it.

``Proxy-Authorization`` goes to the proxy only: on a forwarded request (which
the proxy consumes, RFC 9110 11.7.2) or in the ``CONNECT``, never inside a
tunnel and never to a host that ``noproxy`` sends direct.

The timings of a tunnel: ``connect_ms`` runs until the tunnel is open (TCP to
the proxy, TLS to an https proxy, and the proxy's answer); ``tls_ms`` is the
TLS with the origin.  ``remote_ip`` is the proxy's, as curl's ``%{remote_ip}``.

The handshakes are written here (about 100 lines, RFC 1928/1929 and CONNECT)
rather than taken from python-socks: it opens sockets of its own, and surge's
own connection path - Happy Eyeballs, handshake pacing, the connect deadline,
phase timings, TLS to an https proxy - would have to be rebuilt around it.
The messages are built and parsed by pure functions (unit-tested without a
socket); :func:`open_through` drives them over the connection's transport.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import re
import ssl
from collections.abc import Mapping
from time import perf_counter
from typing import Any, NamedTuple
from urllib.parse import unquote_to_bytes, urlsplit

from surge.errors import RequestError, UsageError
from surge.http.connection import MAX_HEAD_BYTES, HTTPConnection
from surge.http.deadlines import Deadlines
from surge.http.timings import Timings
from surge.http.url import URL, _normalise_host

#: Ports when the proxy URL names none: curl's (1080 for every kind, 443 for https).
DEFAULT_PORTS = {"http": 1080, "https": 443, "socks5": 1080, "socks5h": 1080}

#: A pooled connection's key: the origin's (scheme, host, port), and the proxy it
#: goes through, if it does.
PoolKey = tuple[str, str, int] | tuple[str, str, int, "Proxy"]


class Proxy(NamedTuple):
    """One proxy, from a URL such as ``http://user:password@proxy:3128``."""

    scheme: str  # "http", "https", "socks5" or "socks5h"
    host: str  # as url.py normalises hosts: lower-case, IDNA, IPv6 without brackets
    port: int
    username: bytes | None = None  # percent-decoded
    password: bytes | None = None

    @property
    def tunnels_only(self) -> bool:
        """A SOCKS5 proxy carries tunnels only (an HTTP proxy forwards http:// too)."""
        return self.scheme in ("socks5", "socks5h")

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def authorization(self) -> bytes:
        """The ``Proxy-Authorization`` line for an HTTP proxy, or b"" (RFC 7617)."""
        if self.username is None:
            return b""
        token = base64.b64encode(self.username + b":" + (self.password or b""))
        return b"Proxy-Authorization: Basic %s\r\n" % token

    def __repr__(self) -> str:  # pool stats and errors show it: never the password
        shown = f"[{self.host}]" if ":" in self.host else self.host
        user = "" if self.username is None else "***@"
        return f"Proxy('{self.scheme}://{user}{shown}:{self.port}')"


def parse_proxy(text: str, source: str = "proxy") -> Proxy:
    """A proxy URL as curl reads one: ``[scheme://][user:password@]host[:port][/]``,
    http:// when no scheme is given; ``UsageError`` naming ``source`` otherwise
    (quoting the URL without its ``user:password@``)."""
    shown = _without_credentials(text)
    spec = text.strip()
    if "://" not in spec:
        spec = "http://" + spec
    try:
        parts = urlsplit(spec)
        port = parts.port
    except ValueError as e:
        raise UsageError(f"{source} {shown!r}: not a proxy URL ({e})") from None
    scheme = parts.scheme.lower()
    if scheme in ("socks4", "socks4a"):
        raise UsageError(f"{source} {shown!r}: SOCKS4 proxies are not supported (use socks5://)")
    if scheme not in DEFAULT_PORTS:
        raise UsageError(
            f"{source} {shown!r}: the scheme must be http, https, socks5 or socks5h,"
            f" not {parts.scheme!r}"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UsageError(f"{source} {shown!r}: a proxy URL has no path")
    if not parts.hostname or port == 0:
        raise UsageError(f"{source} {shown!r}: no proxy host (or port 0)")
    try:
        host = _normalise_host(parts.hostname, spec)
    except RequestError as e:
        raise UsageError(f"{source} {shown!r}: {e.detail}") from None
    username = password = None
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        user_text, _, password_text = userinfo.partition(":")
        username, password = unquote_to_bytes(user_text), unquote_to_bytes(password_text)
        if scheme.startswith("socks5") and (len(username) > 255 or len(password) > 255):
            # RFC 1929: a length byte each
            raise UsageError(f"{source}: SOCKS5 user name and password are 255 bytes at most")
    return Proxy(scheme, host, port or DEFAULT_PORTS[scheme], username, password)


def _without_credentials(text: str) -> str:
    """A proxy URL as an error quotes it: up to its last ``@`` taken out (a
    proxy URL has no path that could hold one)."""
    if "@" not in text:
        return text
    scheme_end = text.find("://")
    return text[: scheme_end + 3 if scheme_end >= 0 else 0] + text.rpartition("@")[2]


class NoProxy:
    """curl's no-proxy list, matched as lib/noproxy.c matches it.

    * ``*`` alone: every host.
    * A name matches itself and every name below it: ``example.com`` (or
      ``.example.com``: one leading dot is dropped, and a trailing one) matches
      ``example.com`` and ``www.example.com``, not ``notexample.com``;
      case-insensitive.  A name never matches an IP address.
    * An address, or a CIDR range (``192.168.0.0/16``, ``fd00::/8``), matches
      IP-address hosts only, of its family (IPv6 without brackets).  Unlike
      curl, ``/0`` is the whole family (curl compares the address alone) and
      an entry that is not an address or a range is not a match rather than an
      error either way.
    """

    __slots__ = ("everything", "names", "networks", "suffixes")

    def __init__(self, spec: str) -> None:
        self.everything = spec.strip() == "*"
        names: list[str] = []
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for token in re.split(r"[,\s]+", spec):
            if not token:
                continue
            bare = token.removeprefix("[").replace("]", "", 1)
            if ":" in bare or bare.replace("/", "").replace(".", "").isdigit():
                with contextlib.suppress(ValueError):  # curl: then it matches nothing
                    networks.append(ipaddress.ip_network(bare, strict=False))
                continue
            name = token.lower().removesuffix(".").removeprefix(".")
            if name:
                names.append(name)
        self.names = frozenset(names)
        self.suffixes = tuple("." + name for name in names)
        self.networks = tuple(networks)

    def __bool__(self) -> bool:
        return self.everything or bool(self.names) or bool(self.networks)

    def matches(self, host: str) -> bool:
        """Whether ``host`` (a URL's host, as url.py gives it) goes direct."""
        if self.everything:
            return True
        if ":" in host or host[-1:].isdigit():
            try:
                address = ipaddress.ip_address(host)
            except ValueError:
                pass
            else:
                return any(address in network for network in self.networks)
        name = host.removesuffix(".")
        return name in self.names or name.endswith(self.suffixes)


#: The environment's proxy variables by URL scheme, in the order curl reads them.
#: ``http_proxy`` is read in lower case only, as curl and Go do: a CGI script
#: gets each request header as an ``HTTP_*`` variable, so a client's ``Proxy:``
#: header becomes ``HTTP_PROXY``, and a script that trusted it would send its
#: own outgoing requests through the client's proxy ("httpoxy", CVE-2016-5385).
ENV_PROXY = {
    "http": ("http_proxy", "all_proxy", "ALL_PROXY"),
    "https": ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"),
}
ENV_NOPROXY = ("no_proxy", "NO_PROXY")


def _from_env(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``names`` set to something not empty: (name, value)."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


class Proxies:
    """A client's proxy routes: a proxy (or none) for http:// and https:// URLs
    and the hosts that go direct.  Made by :meth:`configure`, which gives None
    when no URL can go through a proxy: the client's fast path, one test."""

    __slots__ = ("_forward", "http", "https", "noproxy")

    def __init__(self, http: Proxy | None, https: Proxy | None, noproxy: NoProxy) -> None:
        self.http = http
        self.https = https
        self.noproxy = noproxy
        #: http:// URLs through an HTTP proxy: the shared key and the credentials.
        self._forward: tuple[PoolKey, bytes] | None = None
        if http is not None and not http.tunnels_only:
            self._forward = (("http", "*", 0, http), http.authorization)

    @classmethod
    def configure(
        cls,
        proxy: str | None = None,
        noproxy: str | None = None,
        trust_env: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> Proxies | None:
        """The routes for ``proxy=``/``noproxy=`` and, if ``trust_env``, the
        environment (``environ``, default ``os.environ``), by curl's precedence
        (see the module's doc); ``UsageError`` for a proxy URL that is not one."""
        env: Mapping[str, str] = (os.environ if environ is None else environ) if trust_env else {}
        http: Proxy | None = None
        https: Proxy | None = None
        if proxy is not None:
            if proxy.strip():
                http = https = parse_proxy(proxy, "proxy")
        else:
            found = _from_env(env, ENV_PROXY["http"])
            if found is not None:
                http = parse_proxy(found[1], f"${found[0]}")
            found = _from_env(env, ENV_PROXY["https"])
            if found is not None:
                https = parse_proxy(found[1], f"${found[0]}")
        if http is None and https is None:
            return None
        if noproxy is None:
            found = _from_env(env, ENV_NOPROXY)
            noproxy = found[1] if found is not None else ""
        hosts = NoProxy(noproxy)
        if hosts.everything:
            return None
        return cls(http, https, hosts)

    def proxy_for(self, target: URL) -> Proxy | None:
        """The proxy a request to ``target`` goes through; None: direct."""
        proxy = self.https if target.scheme == "https" else self.http
        if proxy is None or (self.noproxy and self.noproxy.matches(target.host)):
            return None
        return proxy

    def route(self, target: URL) -> tuple[PoolKey, bytes, bytes]:
        """How a request to ``target`` goes: its pool key, its request target,
        and the header lines for the proxy (``Proxy-Authorization``, forwarded
        requests only)."""
        proxy = self.proxy_for(target)
        if proxy is None:
            return target.key, target.target, b""
        forward = self._forward
        if forward is not None and target.scheme == "http":
            return forward[0], b"http://%s%s" % (target.host_header, target.target), forward[1]
        return (target.scheme, target.host, target.port, proxy), target.target, b""


# -- the handshakes, as bytes (sans I/O) ----------------------------------------------------


def _authority(host: str, port: int) -> bytes:
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode("ascii")


def connect_request(host: str, port: int, authorization: bytes = b"") -> bytes:
    """The ``CONNECT host:port`` request (RFC 9110 9.3.6: authority-form, and the
    Host header RFC 9112 3.2 asks of every HTTP/1.1 request)."""
    authority = _authority(host, port)
    return b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (authority, authority, authorization)


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?")


def connect_status(head: bytes) -> tuple[int, str]:
    """The status and reason of a proxy's answer head to ``CONNECT``."""
    match = _STATUS_LINE.match(head)
    if match is None:
        raise RequestError(
            "protocol_error", f"the proxy's answer to CONNECT is not HTTP: {head[:60]!r}"
        )
    return int(match[1]), (match[2] or b"").decode("latin-1").strip()


SOCKS_VERSION = 5
NO_AUTH, USER_PASSWORD, NO_ACCEPTABLE = 0x00, 0x02, 0xFF
ATYP_IPV4, ATYP_NAME, ATYP_IPV6 = 1, 3, 4
#: RFC 1928 section 6: the REP field of the reply.
SOCKS_REPLIES = {
    1: "general SOCKS server failure",
    2: "connection not allowed by ruleset",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}


def socks5_greeting(proxy: Proxy) -> bytes:
    """The methods offered: none, and username/password when there are credentials
    (as curl offers them)."""
    if proxy.username is None:
        return bytes((SOCKS_VERSION, 1, NO_AUTH))
    return bytes((SOCKS_VERSION, 2, NO_AUTH, USER_PASSWORD))


def socks5_credentials(username: bytes, password: bytes) -> bytes:
    """RFC 1929's request: version 1, then each field after its length."""
    return bytes((1, len(username))) + username + bytes((len(password),)) + password


def socks5_connect(host: str, port: int) -> bytes:
    """The CONNECT request for ``host`` (an address, or a name for the proxy to
    resolve, socks5h) and ``port``."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.encode("ascii")
        target = bytes((ATYP_NAME, len(name))) + name
    else:
        kind = ATYP_IPV4 if address.version == 4 else ATYP_IPV6
        target = bytes((kind,)) + address.packed
    return bytes((SOCKS_VERSION, 1, 0)) + target + port.to_bytes(2, "big")


def socks5_failure(reply: int, host: str, port: int) -> RequestError:
    """The error for a SOCKS5 reply other than success."""
    what = SOCKS_REPLIES.get(reply, "unknown reply")
    detail = f"SOCKS5 proxy: {what} (reply {reply}) for {host}:{port}"
    # microsocks and dante answer 6 for a connect that timed out
    return RequestError("connect_timeout" if reply == 6 else "connect_refused", detail)


# -- the handshakes, on a connection -----------------------------------------------------------


class _Reader(asyncio.Protocol):
    """The transport's protocol while a tunnel is set up: the proxy's bytes,
    kept until the handshake asks for them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.buffer = bytearray()
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _more(self, during: str) -> None:
        if self.closed:
            raise RequestError("connection_reset", f"the proxy closed the connection {during}")
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def read_exactly(self, n: int, during: str) -> bytes:
        while len(self.buffer) < n:
            await self._more(during)
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    async def read_head(self, during: str) -> bytes:
        """Up to the blank line that ends an HTTP head, at most MAX_HEAD_BYTES."""
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self.buffer[:end])
                del self.buffer[: end + 4]
                return head
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise RequestError(
                    "protocol_error",
                    f"the proxy's answer {during} exceeds {MAX_HEAD_BYTES:,} bytes",
                )
            await self._more(during)


async def _http_tunnel(reader: _Reader, transport: Any, proxy: Proxy, host: str, port: int) -> None:
    transport.write(connect_request(host, port, proxy.authorization))
    during = f"to CONNECT {host}:{port}"
    while True:
        status, reason = connect_status(await reader.read_head(during))
        if not 100 <= status < 200:  # 1xx: interim, the answer follows
            break
    if not 200 <= status < 300:
        said = f"{status} {reason}".strip()
        raise RequestError("connect_refused", f"proxy answered {said} to CONNECT {host}:{port}")


async def _socks5_tunnel(
    reader: _Reader, transport: Any, proxy: Proxy, host: str, port: int, address: str | None
) -> None:
    transport.write(socks5_greeting(proxy))
    version, method = await reader.read_exactly(2, "during the SOCKS5 greeting")
    if version != SOCKS_VERSION:
        raise RequestError("protocol_error", f"not a SOCKS5 proxy (version {version} answered)")
    if method == USER_PASSWORD and proxy.username is not None:
        transport.write(socks5_credentials(proxy.username, proxy.password or b""))
        _, status = await reader.read_exactly(2, "during SOCKS5 authentication")
        if status != 0:
            raise RequestError("connect_refused", "SOCKS5 proxy refused the user name and password")
    elif method in (NO_ACCEPTABLE, USER_PASSWORD):  # USER_PASSWORD: not offered
        hint = "" if proxy.username is not None else " (give user:password@ in the proxy URL)"
        raise RequestError(
            "connect_refused", f"SOCKS5 proxy accepts none of the methods offered{hint}"
        )
    elif method != NO_AUTH:
        raise RequestError("protocol_error", f"SOCKS5 proxy chose a method not offered ({method})")
    transport.write(socks5_connect(address or host, port))
    during = f"while the SOCKS5 proxy connected to {host}:{port}"
    version, reply, _, kind = await reader.read_exactly(4, during)
    if reply != 0:
        raise socks5_failure(reply, host, port)
    if kind == ATYP_NAME:
        size = (await reader.read_exactly(1, during))[0]
    else:
        size = 16 if kind == ATYP_IPV6 else 4
    await reader.read_exactly(size + 2, during)  # the proxy's bound address and port


async def open_through(
    proxy: Proxy,
    key: PoolKey,
    addresses: tuple[str, ...],
    *,
    target_address: str | None,
    ssl_context: ssl.SSLContext | None,
    proxy_ssl_context: ssl.SSLContext | None,
    timings: Timings,
    deadlines: Deadlines,
    body_cap: int,
    attempts: list[str] | None = None,
) -> HTTPConnection:
    """A connection for ``key`` through ``proxy`` (at ``addresses``): to the
    proxy (TLS if an https proxy), then for a tunnel the handshake and, for an
    https origin, TLS to it.  ``target_address``: the origin's address, for
    ``socks5://`` (resolved by the caller); ``ssl_context``: the client's, for
    the origin; ``proxy_ssl_context``: for an https:// proxy itself.
    Errors are ``RequestError``s that say it was the proxy."""
    try:
        conn = await HTTPConnection.open(
            (proxy.scheme, proxy.host, proxy.port),
            addresses,
            ssl_context=proxy_ssl_context if proxy.tls else None,
            server_hostname=proxy.host,
            timings=timings,
            deadlines=deadlines,
            body_cap=body_cap,
            attempts=attempts,
        )
    except RequestError as e:
        raise RequestError(e.error_class, f"cannot reach the proxy: {e.detail}") from None
    if len(key) == 3 or key[1] == "*":  # forwarded requests: the proxy's connection
        return conn
    scheme, host, port = key[0], key[1], key[2]
    transport = conn.transport
    assert transport is not None
    reader = _Reader(conn.loop)
    transport.set_protocol(reader)
    try:
        if proxy.tunnels_only:
            await _socks5_tunnel(reader, transport, proxy, host, port, target_address)
        else:
            await _http_tunnel(reader, transport, proxy, host, port)
        if reader.buffer:  # the origin speaks when asked: nothing may come yet
            raise RequestError("protocol_error", "the proxy sent bytes past its answer")
    except BaseException:
        conn.abort()
        raise
    transport.set_protocol(conn)
    # The tunnel is the connection to the origin: the connect phase ends here.
    timings.tcp_end = perf_counter()
    if scheme == "https":
        assert ssl_context is not None
        await conn.start_tls(ssl_context, host, port, timings)
    return conn
