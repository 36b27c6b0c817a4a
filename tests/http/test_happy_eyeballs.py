"""Happy Eyeballs (RFC 8305) in HTTPConnection.open: several addresses raced.

Every address is a loopback one (127.0.0.0/8 and ::1 are all local on Linux).
A refusing address is one where nothing listens (an RST at once); a dead one
is a listener whose accept queue is full, which Linux answers by dropping the
SYN, so a connect there waits until its caller gives up -- a host that does
not answer.  Tests assert which address won and which attempts were begun, in
what order, never how long anything took; a generous bound (``asyncio.timeout``)
only keeps a broken race from hanging the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from tests.conftest import require

import surge
from surge.errors import ConnectRefused, ConnectTimeout, RequestError, UsageError
from surge.http import AsyncClient, Client, connection
from surge.http.connection import ATTEMPT_DELAY, HTTPConnection, interleave, race
from surge.http.deadlines import Deadlines
from surge.sim import SimInfo
from surge.sim.dns import Entry, Zone, running

DEAD, REFUSING, LIVE = "127.0.0.2", "127.0.0.3", "127.0.0.1"
#: Bounds a whole race in the tests that call race() directly (seconds).
BOUND = 20.0


@contextlib.contextmanager
def dead(address: str, port: int) -> Iterator[None]:
    """``address:port`` drops SYNs: a listener with a backlog of 0 whose queue's
    one place is taken by a connection nobody accepts."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as listener:
        listener.bind((address, port))
        listener.listen(0)
        with socket.create_connection((address, port), timeout=5):
            yield


def test_interleave_alternates_families_from_the_first() -> None:
    assert interleave(["10.0.0.1", "10.0.0.2", "::1", "::2", "::3"]) == [
        "10.0.0.1",
        "::1",
        "10.0.0.2",
        "::2",
        "::3",
    ]
    assert interleave(["::1", "10.0.0.1", "10.0.0.2"]) == ["::1", "10.0.0.1", "10.0.0.2"]
    assert interleave(["10.0.0.2", "10.0.0.1"]) == ["10.0.0.2", "10.0.0.1"]


# -- through the client ---------------------------------------------------------------------


async def test_a_dead_first_address_costs_the_attempt_delay_not_the_timeout(
    sim: SimInfo,
) -> None:
    """Before the race, a dead first address held the request until the connect
    timeout (here 10 s: connect_timeout, not a 200)."""
    port = sim.http_port
    with dead(DEAD, port):
        async with AsyncClient(
            resolve=[f"he-dead.sim:{port}:{DEAD},{LIVE}"], connect_timeout=10
        ) as client:
            response = await client.get(sim.url("he-dead.sim"))
    assert response.status == 200
    assert response.connection is not None
    assert response.connection.address == (LIVE, port)
    assert response.connection.connect_attempts == 2


async def test_every_refusal_is_named(sim: SimInfo) -> None:
    port = sim.http_port
    async with AsyncClient(resolve=[f"he-refused.sim:{port}:127.0.0.3,127.0.0.4"]) as client:
        with pytest.raises(ConnectRefused) as caught:
            await client.get(sim.url("he-refused.sim"))
    assert caught.value.detail == (
        f"127.0.0.3:{port} refused the connection; 127.0.0.4:{port} refused the connection"
    )


async def test_a_timeout_says_what_each_address_did(sim: SimInfo) -> None:
    port = sim.http_port
    with dead(DEAD, port):
        async with AsyncClient(
            resolve=[f"he-timeout.sim:{port}:{REFUSING},{DEAD}"], connect_timeout=1
        ) as client:
            with pytest.raises(ConnectTimeout) as caught:
                await client.get(sim.url("he-timeout.sim"))
    assert caught.value.detail == (
        f"timed out TCP connect (limit 1 s): {REFUSING}:{port} refused the connection;"
        f" {DEAD}:{port} did not answer"
    )


async def test_one_address_is_connected_to_directly(
    sim: SimInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No race, so no task and no timer, for the common case."""

    def no_race(*args: object, **kwargs: object) -> None:
        raise AssertionError("race() with one address")

    monkeypatch.setattr(connection, "race", no_race)
    async with AsyncClient(resolve=[f"he-one.sim:*:{LIVE}"]) as client:
        response = await client.get(sim.url("he-one.sim"))
    assert response.status == 200
    assert response.connection is not None
    assert response.connection.connect_attempts == 1


async def test_the_sim_dns_answers_several_addresses_some_dead(sim: SimInfo) -> None:
    require("pycares")
    port = sim.http_port
    zone = Zone({"he-dns.sim": Entry(a=(DEAD, REFUSING, LIVE))})
    with dead(DEAD, port), running(zone) as dns:
        async with AsyncClient(dns_servers=dns.server_spec, connect_timeout=10) as client:
            response = await client.get(sim.url("he-dns.sim"))
        assert dns.count("he-dns.sim", "A") == 1
    assert response.status == 200
    assert response.connection is not None
    assert response.connection.address == (LIVE, port)
    # The dead one, then at once past it the refusing one, then the live one.
    assert response.connection.connect_attempts == 3


# -- race() itself --------------------------------------------------------------------------


def record_attempts(loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The addresses the loop's create_connection is called with, in order."""
    begun: list[str] = []
    create = loop.create_connection

    async def create_connection(factory: Any, host: str, port: int) -> Any:
        begun.append(host)
        return await create(factory, host, port)

    monkeypatch.setattr(loop, "create_connection", create_connection)
    return begun


class Served:
    """What the servers of :func:`listening` saw: connections accepted and ended
    (the client closed them: EOF or RST)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.ended = 0
        self.writers: list[asyncio.StreamWriter] = []


@contextlib.asynccontextmanager
async def listening(*addresses: str) -> AsyncIterator[tuple[int, Served]]:
    """Servers on one port at each of ``addresses``; yields the port."""
    served = Served()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.accepted += 1
        served.writers.append(writer)
        with contextlib.suppress(OSError):
            await reader.read()  # until the client closes
        served.ended += 1

    servers: list[asyncio.Server] = []
    port = 0
    for _ in range(20):  # a port free on every address
        try:
            for address in addresses:
                servers.append(await asyncio.start_server(serve, address, port))
                port = servers[0].sockets[0].getsockname()[1]
            break
        except OSError:
            for server in servers:
                server.close()
            servers, port = [], 0
    else:
        pytest.skip(f"no port free on all of {addresses}")
    try:
        yield port, served
    finally:
        for writer in served.writers:
            writer.close()
        for server in servers:
            server.close()


def _factory() -> HTTPConnection:
    return HTTPConnection(("http", "test", 80), Deadlines(asyncio.get_running_loop()), 1024)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _settle(condition: Any) -> bool:
    """Let the loop run (at most 2 s) until ``condition()`` holds."""
    for _ in range(200):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return bool(condition())


async def test_a_refusal_starts_the_next_attempt_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a delay of a minute, only a failure can start the second attempt."""
    loop = asyncio.get_running_loop()
    begun_on = record_attempts(loop, monkeypatch)
    async with listening(LIVE) as (port, _served):
        async with asyncio.timeout(BOUND):
            transport, _protocol, address, begun = await race(
                loop, _factory, [REFUSING, LIVE], port, delay=60
            )
        transport.close()
    assert (address, begun) == (LIVE, 2)
    assert begun_on == [REFUSING, LIVE]


async def test_families_alternate_and_the_first_success_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    try:
        socket.socket(socket.AF_INET6).close()
    except OSError as e:
        pytest.skip(f"no IPv6 here: {e}")
    loop = asyncio.get_running_loop()
    begun_on = record_attempts(loop, monkeypatch)
    async with listening("::1") as (port, _served):
        with dead(DEAD, port):
            async with asyncio.timeout(BOUND):
                transport, _protocol, address, _begun = await race(
                    loop, _factory, [DEAD, REFUSING, "::1"], port
                )
            transport.close()
    assert address == "::1"
    # IPv4 first (the resolver's order), then the other family, then IPv4 again.
    assert begun_on[:2] == [DEAD, "::1"]


async def test_losers_are_cancelled_or_closed() -> None:
    """All begun at once (no delay): one live address wins; the other live one's
    connection is closed, the dead one's socket is let go."""
    loop = asyncio.get_running_loop()
    async with listening(LIVE, "127.0.0.5") as (port, served):
        with dead(DEAD, port):
            before = _open_fds()
            async with asyncio.timeout(BOUND):
                transport, _protocol, address, begun = await race(
                    loop, _factory, [DEAD, LIVE, "127.0.0.5"], port, delay=0
                )
            assert address in (LIVE, "127.0.0.5")
            assert begun == 3
            transport.close()
            # The servers see every connection made closed (the winner's by us,
            # another that connected by the race), and no client socket is left
            # (the servers' ends stay open until the block ends).
            assert await _settle(lambda: served.accepted == served.ended >= 1)
            assert await _settle(lambda: _open_fds() - served.accepted <= before)


async def test_every_attempt_failing_is_one_connect_refused() -> None:
    loop = asyncio.get_running_loop()
    addresses = [f"127.0.0.{n}" for n in range(3, 14)]  # nothing listens on these
    with pytest.raises(RequestError) as caught:
        async with asyncio.timeout(BOUND):
            await race(loop, _factory, addresses, 9, delay=60)
    assert caught.value.error_class == "connect_refused"
    parts = caught.value.detail.split("; ")
    assert parts[:8] == [f"{a}:9 refused the connection" for a in addresses[:8]]
    assert parts[8:] == ["and 3 more"]


def test_the_attempt_delay_is_rfc_8305s() -> None:
    assert ATTEMPT_DELAY == 0.25


# -- the resolver's options on the client ------------------------------------------------


def test_resolver_options_reach_the_resolver() -> None:
    client = AsyncClient(ip_version=6, dns_timeout=2, connect_timeout=3)
    assert client.resolver._family == socket.AF_INET6
    assert client.resolver.dns_timeout == 2
    assert AsyncClient(ip_version=4).resolver._family == socket.AF_INET
    assert AsyncClient().resolver._family == socket.AF_UNSPEC


def test_the_dns_timeout_sits_inside_the_connect_timeout() -> None:
    assert AsyncClient(connect_timeout=1.5).resolver.dns_timeout == 1.5
    assert AsyncClient(connect_timeout=30).resolver.dns_timeout == 5.0
    assert AsyncClient(connect_timeout=2, dns_timeout=9).resolver.dns_timeout == 2


@pytest.mark.parametrize(
    "options",
    [
        {"ip_version": 5},
        {"ip_version": True},
        {"dns_timeout": 0},
        {"dns_timeout": float("nan")},
        {"dns_timeout": "1"},
        {"dns_servers": ""},
        {"dns_servers": "not-an-ip"},
    ],
)
def test_bad_resolver_options_are_usage_errors(options: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        AsyncClient(**options)


def test_a_resolver_of_ones_own_or_its_options_not_both() -> None:
    from surge.http.resolver import Resolver

    for options in ({"dns_timeout": 1}, {"ip_version": 4}, {"resolve": ["a:1:127.0.0.1"]}):
        with pytest.raises(UsageError, match="not both"):
            AsyncClient(resolver=Resolver(), **options)  # type: ignore[arg-type]


def test_the_synchronous_client_and_surge_get_take_them_too(sim: SimInfo) -> None:
    require("pycares")
    zone = Zone({"sync.sim": Entry(a=(LIVE,), aaaa=("::1",))})
    with running(zone) as dns:
        response = surge.get(sim.url("sync.sim"), dns_servers=dns.server_spec, ip_version=4)
        assert response.status == 200
        with Client(dns_servers=[dns.server_spec], dns_timeout=1) as client:
            assert client.get(sim.url("sync.sim")).status == 200
            assert client.async_client.resolver.dns_timeout == 1
        assert (dns.count("sync.sim", "A"), dns.count("sync.sim", "AAAA")) == (2, 1)
