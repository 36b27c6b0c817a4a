"""The simulated web's server: thousands of virtual hosts on one HTTP and one HTTPS port.

A raw :class:`asyncio.Protocol` with the httptools (llhttp) request parser, on
uvloop when the caller's loop is uvloop: a server built on aiohttp or
http.server would spend more CPU per request than the clients it is meant to
measure.  A plain 200 goes out from inside ``data_received`` with no task, no
timer and (after the first time) no rendering: the bytes are cached per
(host, encoding, keep-alive, method).  Everything slower -- delays, trickled or
streamed bodies -- runs on a timer or a task of its own connection.

The host is taken from the ``Host`` header (port stripped) and its behaviour from
:func:`surge.sim.behaviour.behaviour`; the server only carries it out.  Both ports
bind to a loopback address and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import math
import os
import resource
import shutil
import socket
import ssl
import struct
import tempfile
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import httptools

from surge.sim import responses
from surge.sim.behaviour import Behaviour, behaviour

#: Listen backlog asked for; the kernel caps it at net.core.somaxconn.  The
#: default of 100 would drop SYNs when a benchmark opens thousands of
#: connections at once, and the retransmission (1 s) would be charged to the client.
BACKLOG = 65535
#: Cached response bytes kept at most, and the largest response cached.
CACHE_ENTRIES = 50_000
CACHE_RESPONSE_MAX = 64 * 1024
#: Trickled bodies are sent in this many pieces at most (and at least two).
TRICKLE_PIECES_MAX = 50
TRICKLE_INTERVAL_MIN_MS = 20

# A request as the parser hands it over: (host header, request target,
# accept-encoding, keep-alive, HEAD).
_Request = tuple[bytes, bytes, bytes, bool, bool]


@dataclass(frozen=True, slots=True)
class SimInfo:
    """Where a running simulated web listens, and how to reach it."""

    http_port: int
    https_port: int
    cafile: str
    seed: int = 0
    host: str = "127.0.0.1"
    pid: int | None = None
    #: The port of its DNS server (``surge sim`` runs one: surge.sim.dns), if any.
    dns_port: int | None = None

    @property
    def dns_servers(self) -> str | None:
        """Its DNS server as ``--dns-servers`` / ``dns_servers=`` take it, if any."""
        return None if self.dns_port is None else f"{self.host}:{self.dns_port}"

    def url(self, host: str, path: str = "/", tls: bool = False) -> str:
        """The URL of ``path`` on simulated ``host`` (which resolves to :attr:`host`)."""
        scheme, port = ("https", self.https_port) if tls else ("http", self.http_port)
        return f"{scheme}://{host}:{port}{path}"

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the simulated web's CA."""
        return ssl.create_default_context(cafile=self.cafile)

    def to_json(self) -> dict[str, object]:
        """The fields printed by ``surge sim`` on its one line of JSON."""
        return {
            "host": self.host,
            "http_port": self.http_port,
            "https_port": self.https_port,
            "cafile": self.cafile,
            "seed": self.seed,
            "pid": self.pid,
            "dns_port": self.dns_port,
            "dns_servers": self.dns_servers,
        }


class _Site:
    """State shared by every connection of one server."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.connections: set[_Connection] = set()
        self._cache: dict[tuple[str, bool, bool, bool], bytes] = {}

    def small_response(
        self, b: Behaviour, gzip_ok: bool, keep_alive: bool, head_only: bool
    ) -> bytes | None:
        """Head and body of ``b``'s final response in one piece, or None to stream it."""
        key = (b.host, gzip_ok, keep_alive, head_only)
        data = self._cache.get(key)
        if data is None:
            response = responses.final(
                b, gzip_ok=gzip_ok, keep_alive=keep_alive, head_only=head_only
            )
            if response.body is None:
                return None
            data = response.head + response.body
            if len(data) <= CACHE_RESPONSE_MAX:
                if len(self._cache) >= CACHE_ENTRIES:
                    self._cache.clear()
                self._cache[key] = data
        return data


def _split_host(value: bytes) -> tuple[str, str]:
    """``Host`` header -> (lower-case name, ``:port`` suffix or "")."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        name, _, rest = text.partition("]")
        return name + "]", rest
    name, colon, port = text.rpartition(":")
    if colon and port.isdigit():
        return name, ":" + port
    return text, ""


def _path(target: bytes) -> str:
    path = target.decode("latin-1")
    if path.startswith("/"):
        return path
    # absolute-form (a request through a proxy): keep what follows the authority
    _, sep, rest = path.partition("://")
    if sep:
        slash = rest.find("/")
        return rest[slash:] if slash >= 0 else "/"
    return "/"


class _Connection(asyncio.Protocol):
    """One client connection: parse requests, carry out each host's behaviour in order."""

    def __init__(self, site: _Site, tls: bool) -> None:
        self._site = site
        self._scheme = "https" if tls else "http"
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._host = b""
        self._accept_encoding = b""
        # Requests are answered one at a time, in order (HTTP/1.1 pipelining);
        # ``_busy`` is set while a delayed or streamed response is under way.
        self._busy = False
        self._pending: deque[_Request] = deque()
        self._draining = False
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._drained: asyncio.Future[None] | None = None
        self._write_paused = False

    # -- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = cast(asyncio.Transport, transport)
        self._site.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._site.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the request itself was answered; what follows is not ours to read
        except httptools.HttpParserCallbackError:
            self.abort()
            raise
        except httptools.HttpParserError:
            if not self._busy and not self._closed and self._transport is not None:
                self._transport.write(responses.head(400, "", length=0, keep_alive=False))
                self._transport.close()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- httptools callbacks -----------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._host = b""
        self._accept_encoding = b""

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"host":
            self._host = value
        elif name == b"accept-encoding":
            self._accept_encoding = value

    def on_message_complete(self) -> None:
        if self._closed:
            return
        request = (
            self._host,
            self._url,
            self._accept_encoding,
            self._parser.should_keep_alive(),
            self._parser.get_method() == b"HEAD",
        )
        if self._busy:
            self._pending.append(request)
        else:
            self._handle(request)

    # -- behaviours ----------------------------------------------------------------

    def abort(self) -> None:
        """Drop the connection at once (used by :meth:`SimServer.close`)."""
        if self._transport is not None:
            self._transport.abort()

    def _handle(self, request: _Request) -> None:
        host_header = request[0]
        name, port_suffix = _split_host(host_header)
        b = behaviour(name, self._site.seed)
        if b.delay_ms:
            self._busy = True
            self._timer = self._loop.call_later(
                b.delay_ms / 1000.0, self._act, b, port_suffix, request
            )
        else:
            self._act(b, port_suffix, request)

    def _act(self, b: Behaviour, port_suffix: str, request: _Request) -> None:
        self._timer = None
        transport = self._transport
        if self._closed or transport is None:
            return
        _, target, accept_encoding, keep_alive, head_only = request
        if b.redirects:
            location = f"{self._scheme}://{b.next_host}{port_suffix}{_path(target)}"
            response = responses.redirect(b, location, keep_alive=keep_alive, head_only=head_only)
            transport.write(response.head + (response.body or b""))
            self._finish(keep_alive)
        elif b.action == "respond":
            gzip_ok = b.gzip and responses.accepts_gzip(accept_encoding)
            if not head_only and (b.slowbody_ms or b.body_bytes > responses.WHOLE_BODY_MAX):
                self._busy = True
                self._task = self._loop.create_task(
                    self._send_slowly(b, gzip_ok, keep_alive, head_only)
                )
                return
            data = self._site.small_response(b, gzip_ok, keep_alive, head_only)
            assert data is not None  # bodies under WHOLE_BODY_MAX are never streamed
            transport.write(data)
            self._finish(keep_alive)
        elif b.action == "hang":
            self._busy = True  # and nothing else happens, ever
        elif b.action == "hang_body":
            self._busy = True
            transport.write(responses.stalled(b, keep_alive=keep_alive))
        elif b.action == "reset":
            self._reset(transport)
        elif b.action == "close":
            self._closed = True
            transport.close()
        elif b.action == "garbage":
            self._closed = True
            transport.write(responses.GARBAGE)
            transport.close()

    def _reset(self, transport: asyncio.Transport) -> None:
        # SO_LINGER with a zero timeout makes close() send RST instead of FIN
        # (socket(7)); abort() closes without flushing anything first.
        self._closed = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    def _finish(self, keep_alive: bool) -> None:
        """A response is complete: close, or answer the next pipelined request."""
        self._busy = False
        if not keep_alive:
            self._closed = True
            if self._transport is not None:
                self._transport.close()
            return
        # One loop drains the queue; the _finish() calls nested in it return at once,
        # so a thousand pipelined requests do not become a thousand stack frames.
        if self._draining:
            return
        self._draining = True
        try:
            while self._pending and not self._busy and not self._closed:
                self._handle(self._pending.popleft())
        finally:
            self._draining = False

    async def _send_slowly(
        self, b: Behaviour, gzip_ok: bool, keep_alive: bool, head_only: bool
    ) -> None:
        """A response that is trickled (``slowbody``) or streamed (``big`` over 1 MiB)."""
        transport = self._transport
        assert transport is not None
        response = responses.final(b, gzip_ok=gzip_ok, keep_alive=keep_alive, head_only=head_only)
        pieces: Iterator[bytes]
        if response.body is None:
            pieces = responses.streamed_body(b, gzip_ok=gzip_ok)
            count = math.ceil(b.body_bytes / responses.PIECE_BYTES) + 1
        elif not response.body:
            pieces, count = iter(()), 1
        else:
            count = min(
                TRICKLE_PIECES_MAX,
                max(2, b.slowbody_ms // TRICKLE_INTERVAL_MIN_MS),
                max(1, len(response.body)),
            )
            size = -(-len(response.body) // count)
            pieces = iter([response.body[i : i + size] for i in range(0, len(response.body), size)])
        interval = b.slowbody_ms / 1000.0 / max(1, count - 1)
        start = self._loop.time()
        transport.write(response.head)
        for i, piece in enumerate(pieces):
            if interval and i:
                await asyncio.sleep(max(0.0, start + i * interval - self._loop.time()))
            if self._closed:
                return
            transport.write(piece)
            if self._write_paused:
                self._drained = self._loop.create_future()
                await self._drained
                self._drained = None
        self._task = None
        self._finish(keep_alive)


class SimServer:
    """A running simulated web in this process; ``await close()`` when done."""

    def __init__(
        self,
        http: asyncio.Server,
        https: asyncio.Server,
        site: _Site,
        info: SimInfo,
        tempdir: str,
    ) -> None:
        self._http = http
        self._https = https
        self._site = site
        self.info = info
        self._tempdir = tempdir

    @property
    def http_port(self) -> int:
        return self.info.http_port

    @property
    def https_port(self) -> int:
        return self.info.https_port

    @property
    def cafile(self) -> str:
        return self.info.cafile

    @property
    def seed(self) -> int:
        return self.info.seed

    @property
    def host(self) -> str:
        return self.info.host

    def url(self, host: str, path: str = "/", tls: bool = False) -> str:
        """The URL of ``path`` on simulated ``host``."""
        return self.info.url(host, path, tls)

    async def close(self) -> None:
        """Stop listening, drop every open connection, remove the temporary directory."""
        self._http.close()
        self._https.close()
        for connection in list(self._site.connections):
            connection.abort()
        await self._http.wait_closed()
        await self._https.wait_closed()
        shutil.rmtree(self._tempdir, ignore_errors=True)


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return the new soft limit.

    10,000 concurrent connections need 10,000 descriptors; the usual soft limit is 1,024.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    tls_port: int = 0,
    seed: int = 0,
    *,
    cafile: str | None = None,
    warm_tls: int = 0,
) -> SimServer:
    """Start the simulated web on the running loop.

    ``port`` and ``tls_port`` 0 pick free ports.  The CA's PEM goes to ``cafile``
    (default: a file in the server's temporary directory, removed by ``close()``).
    ``warm_tls`` issues the certificates of the first that many generic sites
    before listening, so that no benchmarked handshake waits for one.
    """
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the simulated web binds to loopback only, not {host!r}")
    from surge.sim.tls import SimTLS  # trustme and cryptography load only when serving

    raise_open_files_limit()
    loop = asyncio.get_running_loop()
    site = _Site(seed)
    tempdir = tempfile.mkdtemp(prefix="surge-sim-")
    servers: list[asyncio.Server] = []
    try:
        tls = SimTLS(tempdir, seed)
        tls.warm(warm_tls)
        if cafile is None:
            cafile = os.path.join(tempdir, "ca.pem")
        tls.write_ca(cafile)
        http = await loop.create_server(
            lambda: _Connection(site, tls=False), host, port, backlog=BACKLOG
        )
        servers.append(http)
        https = await loop.create_server(
            lambda: _Connection(site, tls=True), host, tls_port, ssl=tls.context, backlog=BACKLOG
        )
    except BaseException:
        for server in servers:
            server.close()
        shutil.rmtree(tempdir, ignore_errors=True)
        raise
    info = SimInfo(
        http_port=http.sockets[0].getsockname()[1],
        https_port=https.sockets[0].getsockname()[1],
        cafile=cafile,
        seed=seed,
        host=host,
        pid=os.getpid(),
    )
    return SimServer(http, https, site, info, tempdir)
