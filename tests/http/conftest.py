"""Real servers on loopback for the HTTP client's tests."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

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
        message = f"{', '.join(missing)} not installed (.ci/run installs them)"
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
