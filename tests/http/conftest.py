"""Real servers on loopback for the HTTP client's tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from surge.http import Client
from surge.sim import SimInfo


@pytest.fixture
def client_for(sim: SimInfo) -> Callable[..., Client]:
    """A client that reaches *.sim on the simulated web and trusts its CA."""

    def make(**kwargs: object) -> Client:
        kwargs.setdefault("resolve", ["*.sim:*:127.0.0.1"])
        kwargs.setdefault("cafile", sim.cafile)
        kwargs.setdefault("max_time", 5.0)
        return Client(**kwargs)  # type: ignore[arg-type]

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
