"""Real servers on loopback for the HTTP client's tests (and real proxies:
``start_proxy``)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from tests.conftest import install_hint

from surge.http import AsyncClient
from surge.sim import SimInfo


@pytest.fixture
def client_for(sim: SimInfo) -> Callable[..., AsyncClient]:
    """A client that reaches *.sim on the simulated web and trusts its CA."""

    def make(**kwargs: object) -> AsyncClient:
        kwargs.setdefault("resolve", ["*.sim:*:127.0.0.1"])
        kwargs.setdefault("cafile", sim.cafile)
        kwargs.setdefault("max_time", 5.0)
        return AsyncClient(**kwargs)  # type: ignore[arg-type]

    return make


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def tiny_server() -> Callable[[Handler], AbstractAsyncContextManager[int]]:
    """``async with tiny_server(handler) as port``: a one-purpose server."""
    return _tiny_server


@asynccontextmanager
async def _tiny_server(handler: Handler) -> AsyncIterator[int]:
    """A one-purpose TCP server on 127.0.0.1; yields its port."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture(scope="session")
def httpbin() -> Iterator[str]:
    """A real httpbin (the httpbin package under gunicorn) on 127.0.0.1; its base URL.

    .ci/run installs httpbin with --no-deps: it pins greenlet<3, which would break
    gevent in the same environment, and runs fine on greenlet 3."""
    import importlib.util

    missing = [m for m in ("httpbin", "gunicorn") if importlib.util.find_spec(m) is None]
    if missing:
        message = f"{', '.join(missing)} not installed: " + "; ".join(
            install_hint(m) for m in missing
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(message)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            "1",
            "--threads",
            "8",
            "--log-level",
            "warning",
            "httpbin:app",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    error = process.stderr.read().decode() if process.stderr else ""
                    pytest.fail(f"httpbin did not start: {error[-2000:]}", pytrace=False)
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never answers (its
    backlog holds them): a TLS handshake there waits until a timeout ends it."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


# -- real proxies on loopback: tinyproxy (HTTP, CONNECT) and microsocks (SOCKS5) -----------


class ProxyServer:
    """A proxy process on 127.0.0.1 (Debian's tinyproxy or microsocks), started by
    the ``start_proxy`` fixture; ``stop()`` ends it (a test may, to show that its
    requests went through it), and the fixture stops it in any case."""

    def __init__(self, kind: str, command: list[str], port: int, log: Path) -> None:
        self.kind = kind
        self.command = command
        self.port = port
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, scheme: str = "http", userinfo: str = "") -> str:
        return f"{scheme}://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"{self.kind} did not start: {self.log_text()[-2000:]}")
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def proxy_binary(name: str) -> str:
    """The path of ``name``; missing: a failure under CI (.ci/run installs it),
    else a skip."""
    found = shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.path.exists(p)), None
    )
    if found is None:
        message = f"{name} is not installed (apt-get install {name}; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


StartProxy = Callable[..., ProxyServer]


@pytest.fixture
def start_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartProxy]:
    """``start_proxy("tinyproxy" | "microsocks", auth=(user, password),
    connect_ports=[...])``: a proxy of the test's own, running, on a free port.

    tinyproxy: an HTTP proxy that forwards and tunnels (CONNECT to
    ``connect_ports`` only, as its ConnectPort allows), adds ``Via``, logs each
    request, and with ``auth`` asks for Basic credentials (BasicAuth: letters,
    digits and ``-._`` only).  microsocks: SOCKS5, with ``auth`` RFC 1929's
    user name and password."""
    servers: list[ProxyServer] = []

    def start(
        kind: str, *, auth: tuple[str, str] | None = None, connect_ports: Iterable[int] = ()
    ) -> ProxyServer:
        binary = proxy_binary(kind)
        port = _free_port()
        base = tmp_path_factory.mktemp(kind)
        log = base / f"{kind}.log"
        if kind == "tinyproxy":
            lines = [
                f"Port {port}",
                "Listen 127.0.0.1",
                "Timeout 30",
                "MaxClients 64",
                "LogLevel Connect",
                "Allow 127.0.0.1",
                *(f"ConnectPort {p}" for p in connect_ports),
            ]
            if auth is not None:
                lines.append(f"BasicAuth {auth[0]} {auth[1]}")
            config = base / "tinyproxy.conf"
            config.write_text("\n".join(lines) + "\n")
            command = [binary, "-d", "-c", str(config)]
        elif kind == "microsocks":
            command = [binary, "-i", "127.0.0.1", "-p", str(port)]
            if auth is not None:
                command += ["-u", auth[0], "-P", auth[1]]
        else:
            raise ValueError(f"no such proxy kind: {kind}")
        server = ProxyServer(kind, command, port, log)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@asynccontextmanager
async def tls_front(
    target_port: int, context: ssl.SSLContext, resumed: list[bool] | None = None
) -> AsyncIterator[int]:
    """TLS in front of a plain proxy: what an https:// proxy is to its clients
    (``resumed``: each connection's ``session_reused``, as the server saw it)."""

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if resumed is not None:
            resumed.append(writer.get_extra_info("ssl_object").session_reused)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
