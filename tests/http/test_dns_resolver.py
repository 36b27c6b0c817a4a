"""The resolver's c-ares backend against the simulated DNS server, and the rules
that pick a backend.

Every name belongs to one test, so per-name query counts at the server say
exactly what a test caused.  Cache expiry is driven by an injected clock; the
only sleeps order events, and nothing asserts a wall-clock time.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import require

from surge.bulk.engine import FetchOptions
from surge.errors import RequestError, UsageError
from surge.http import cares, resolver
from surge.http.client import AsyncClient
from surge.http.resolver import Resolver, choose_backend, nsswitch_sources, parse_servers
from surge.sim.dns import DNSServer, Entry, Zone, running

#: The rule itself (tests/conftest.py makes every test's machine IPv6-capable).
HAS_GLOBAL_IPV6 = cares.has_global_ipv6

require("pycares")

V4, V4B, V6 = "192.0.2.1", "192.0.2.2", "2001:db8::1"

ZONE = Zone(
    {
        "both.test": Entry(a=(V4, V4B), aaaa=(V6,)),
        "v6only.test": Entry(aaaa=(V6,)),
        "nx.test": Entry(failure="nxdomain"),
        "servfail.test": Entry(failure="servfail"),
        "refused.test": Entry(failure="refused"),
        "empty.test": Entry(failure="noanswer"),
        "drop.test": Entry(failure="drop"),
        "close.test": Entry(failure="drop"),
        "late.test": Entry(a=(V4,), latency=2.0),
        "tc.test": Entry(a=(V4,), aaaa=(V6,), failure="truncate"),
        "ttl60.test": Entry(a=(V4,), ttl=60),
        "ttl5.test": Entry(a=(V4,), ttl=5),
        "ttlhuge.test": Entry(a=(V4,), ttl=86400),
        "www.chain.test": Entry(cname="mid.chain.test", ttl=300),
        "mid.chain.test": Entry(cname="end.chain.test", ttl=20),
        "end.chain.test": Entry(a=(V4,), aaaa=(V6,), ttl=600),
        "negative.test": Entry(failure="nxdomain"),
        "shared.test": Entry(a=(V4,), latency=0.2),
        "family4.test": Entry(a=(V4,), aaaa=(V6,)),
        "family6.test": Entry(a=(V4,), aaaa=(V6,)),
        "*.gen.test": Entry(a=("127.0.0.1",)),
    },
    rules=[(r"nx-\d+\.gen\.test", Entry(failure="nxdomain"))],
)


@pytest.fixture(scope="module")
def server() -> Iterator[DNSServer]:
    with running(ZONE) as server:
        yield server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["c-api", "pycares-api"])
def make(
    request: pytest.FixtureRequest,
    server: DNSServer,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., Resolver]]:
    """``make(**options)``: a c-ares resolver asking the simulated server, closed
    when the test ends; each test runs on both of cares.py's paths: c-ares's C
    API through pycares's bindings (the default), and pycares's public API (the
    fallback, when those bindings are not there)."""
    if request.param == "pycares-api":
        monkeypatch.setattr(cares, "_ffi", None)
    server.questions.clear()  # counted per test: the server is the module's
    server.queries.clear()
    made: list[Resolver] = []

    def build(**options: object) -> Resolver:
        options.setdefault("servers", [server.server_spec])
        options.setdefault("clock", clock)
        options.setdefault("backend", "cares")
        r = Resolver(**options)  # type: ignore[arg-type]
        made.append(r)
        return r

    yield build
    for r in made:
        r.close()


async def _error(r: Resolver, host: str) -> RequestError:
    with pytest.raises(RequestError) as caught:
        await r.resolve(host, 80)
    assert caught.value.error_class == "dns_error"
    return caught.value


# -- answers -------------------------------------------------------------------------


async def test_ipv4_first_then_ipv6(make) -> None:
    r = make()
    assert r.backend == "cares"
    assert await r.resolve("both.test", 443) == (V4, V4B, V6)
    assert r.lookups == 1


async def test_aaaa_only(make) -> None:
    assert await make().resolve("v6only.test", 80) == (V6,)


async def test_cname_chain(make, server: DNSServer) -> None:
    r = make()
    assert await r.resolve("www.chain.test", 80) == (V4, V6)
    assert server.count("mid.chain.test") == 0  # one query per type: the server followed


async def test_truncated_answer_is_asked_again_over_tcp(make, server: DNSServer) -> None:
    assert await make().resolve("tc.test", 80) == (V4, V6)
    assert server.count("tc.test", transport="udp") == 2  # A and AAAA, each truncated
    assert server.count("tc.test", transport="tcp") == 2


@pytest.mark.parametrize(
    ("family", "host", "expected", "not_asked"),
    [
        (socket.AF_INET, "family4.test", (V4,), "AAAA"),
        (socket.AF_INET6, "family6.test", (V6,), "A"),
    ],
)
async def test_family_restriction(
    make, server: DNSServer, family: int, host: str, expected: tuple[str, ...], not_asked: str
) -> None:
    assert await make(family=family).resolve(host, 80) == expected
    assert server.count(host, qtype=not_asked) == 0


async def test_generated_names(make) -> None:
    r = make()
    assert await r.resolve("site123.gen.test", 80) == ("127.0.0.1",)
    assert (await _error(r, "nx-123.gen.test")).detail == "nx-123.gen.test: NXDOMAIN"


# -- failures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "detail"),
    [
        ("nx.test", "nx.test: NXDOMAIN"),
        ("servfail.test", "servfail.test: SERVFAIL"),
        ("refused.test", "refused.test: REFUSED"),
        ("empty.test", "empty.test: no answer (NOERROR, no address records)"),
    ],
)
async def test_each_failure_says_which(make, host: str, detail: str) -> None:
    r = make()
    assert (await _error(r, host)).detail == detail
    with pytest.raises(RequestError) as cached:  # and the cache repeats it
        r.cached(host, 80)
    assert cached.value.detail == detail


async def test_a_dropped_query_times_out(make, server: DNSServer) -> None:
    r = make(dns_timeout=0.3)
    assert waited(await _error(r, "drop.test"), "drop.test") >= 0.3
    assert server.count("drop.test", qtype="A") >= 1  # it was sent, never answered


async def test_an_answer_slower_than_the_timeout_is_a_timeout(make) -> None:
    """The answer is on its way (2 s), the lookup gives up first (0.3 s): an
    ordering, which no wall clock is needed to check."""
    r = make(dns_timeout=0.3)
    assert waited(await _error(r, "late.test"), "late.test") >= 0.3


def waited(error: RequestError, host: str) -> float:
    """The seconds a timeout's message says the lookup waited (the time it
    really waited, at least its limit: not the limit itself)."""
    found = re.fullmatch(rf"{re.escape(host)}: timeout after (\d+\.\d\d) s", error.detail)
    assert found, error.detail
    return float(found.group(1))


async def test_a_closed_channel_fails_new_lookups_as_cancelled(server: DNSServer) -> None:
    """Nothing reaches c-ares once its channel is closed (the C API has no guard
    of its own): the lookup fails at once, as cancelled."""
    channel = cares._LoopChannel(asyncio.get_running_loop(), [server.server_spec], 1.0)
    channel.close()
    with pytest.raises(RequestError) as caught:
        await channel.lookup("both.test", socket.AF_UNSPEC)
    assert caught.value.detail == "both.test: lookup cancelled"


async def test_lookups_go_to_c_ares_directly(
    server: DNSServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default path calls c-ares's ``ares_getaddrinfo`` itself, with one C
    callback for all lookups: pycares's per-lookup wrapper (a lock, a cffi
    handle, hints allocated, a dataclass per address) is never called."""
    calls: list[str] = []
    original = cares.pycares.Channel.getaddrinfo

    def counted(self: object, host: str, *args: object, **kwargs: object) -> object:
        calls.append(host)
        return original(self, host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cares.pycares.Channel, "getaddrinfo", counted)
    r = Resolver(servers=[server.server_spec], backend="cares")
    try:
        answers = await asyncio.gather(
            r.resolve("both.test", 80),
            r.resolve("www.chain.test", 80),
            r.resolve("v6only.test", 80),
            _error(r, "nx.test"),
        )
    finally:
        r.close()
    assert answers[:3] == [(V4, V4B, V6), (V4, V6), (V6,)]
    assert answers[3].detail == "nx.test: NXDOMAIN"
    assert r.lookups == 4
    assert calls == []


async def test_close_fails_the_lookups_in_flight(make) -> None:
    r = make(dns_timeout=5)
    lookup = asyncio.ensure_future(r.resolve("close.test", 80))
    await asyncio.sleep(0.05)  # the query is out
    r.close()
    with pytest.raises(RequestError, match="cancelled"):
        await lookup


async def test_the_cache_holds_no_exceptions(make) -> None:
    r = make()
    await _error(r, "nx.test")
    await _error(r, "servfail.test")
    await r.resolve("both.test", 80)
    assert sorted(type(answer).__name__ for _, answer in r.cache._entries.values()) == [
        "str",
        "str",
        "tuple",
    ]


# -- TTLs and the cache --------------------------------------------------------------


async def test_the_answers_ttl_goes_to_the_cache(make, server: DNSServer, clock: Clock) -> None:
    r = make()
    await r.resolve("ttl60.test", 80)
    asked = server.count("ttl60.test")
    clock.now += 59
    assert r.cached("ttl60.test", 80) == (V4,)
    clock.now += 2
    assert r.cached("ttl60.test", 80) is None
    assert await r.resolve("ttl60.test", 80) == (V4,)
    # Asked again: c-ares's own query cache (1 hour by default) is off.
    assert server.count("ttl60.test") == 2 * asked
    assert r.lookups == 2


async def test_ttls_are_clamped(make, clock: Clock) -> None:
    r = make(min_ttl=30, max_ttl=3600)
    await r.resolve("ttl5.test", 80)
    await r.resolve("ttlhuge.test", 80)
    clock.now += 29
    assert r.cached("ttl5.test", 80) == (V4,)  # 5 s, kept 30
    clock.now += 3600 - 29 + 1
    assert r.cached("ttlhuge.test", 80) is None  # a day, kept an hour


async def test_a_cname_chain_lives_as_long_as_its_shortest_ttl(make, clock: Clock) -> None:
    r = make()
    await r.resolve("www.chain.test", 80)
    clock.now += 19
    assert r.cached("www.chain.test", 80) == (V4, V6)
    clock.now += 2
    assert r.cached("www.chain.test", 80) is None


async def test_negative_answers_are_kept_for_negative_ttl(
    make, server: DNSServer, clock: Clock
) -> None:
    r = make(negative_ttl=30)
    await _error(r, "negative.test")
    asked = server.count("negative.test")
    clock.now += 29
    with pytest.raises(RequestError, match="NXDOMAIN"):
        r.cached("negative.test", 80)
    assert server.count("negative.test") == asked
    clock.now += 2
    assert r.cached("negative.test", 80) is None
    await _error(r, "negative.test")
    assert server.count("negative.test") == 2 * asked


async def test_concurrent_lookups_share_one_query(make, server: DNSServer) -> None:
    r = make()
    answers = await asyncio.gather(*(r.resolve("shared.test", 80) for _ in range(20)))
    assert answers == [(V4,)] * 20
    assert server.count("shared.test", qtype="A") == 1
    assert r.lookups == 1


async def test_names_that_need_no_query(make, server: DNSServer) -> None:
    r = make()
    r.add_override("over.test:80:192.0.2.55")
    before = sum(server.queries.values())
    assert await r.resolve("over.test", 80) == ("192.0.2.55",)
    assert await r.resolve("localhost", 80) == ("127.0.0.1", "::1")
    assert await r.resolve("203.0.113.9", 80) == ("203.0.113.9",)
    assert await r.resolve("::1", 80) == ("::1",)
    assert "RFC 6761" in (await _error(r, "x.invalid")).detail
    assert sum(server.queries.values()) == before
    assert r.lookups == 0


# -- the system backend's timeout -----------------------------------------------------


async def test_system_timeout_starts_when_a_thread_takes_the_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One thread: the second lookup waits for it longer than dns_timeout, and
    still succeeds, since its timeout starts only when the thread picks it up.
    (getaddrinfo cannot be pointed at the simulated server: it is replaced.)"""
    release = threading.Event()

    def getaddrinfo(host: str, port: int, *args: object) -> list[tuple[object, ...]]:
        if host == "blocks.test":
            release.wait(10)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (V4, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    r = Resolver(backend="system", threads=1, dns_timeout=0.2)
    try:
        first = asyncio.ensure_future(r.resolve("blocks.test", 80))
        second = asyncio.ensure_future(r.resolve("queued.test", 80))
        with pytest.raises(RequestError, match=r"blocks.test: timeout after 0.2 s"):
            await first
        await asyncio.sleep(0.3)  # the queued lookup has now waited > dns_timeout
        release.set()
        assert await second == (V4,)
    finally:
        release.set()
        r.close()


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["127.0.0.1:5353", "[::1]:53", "10.0.0.1"], ["127.0.0.1:5353", "[::1]:53", "10.0.0.1"]),
        ("127.0.0.1:5353,[::1]:53", ["127.0.0.1:5353", "[::1]:53"]),
        (["::1", "[2001:DB8::1]", " 192.0.2.1 "], ["[::1]", "[2001:db8::1]", "192.0.2.1"]),
    ],
)
def test_servers_are_parsed_as_curl_does(given: object, expected: list[str]) -> None:
    assert parse_servers(given) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    ["dns.example", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:x", "[::1",
     "[::1]x", "[127.0.0.1]:53", "::1]:53", "1.2.3", ""],
)  # fmt: skip
def test_bad_servers_are_a_usage_error_of_one_line(bad: str) -> None:
    with pytest.raises(UsageError) as caught:
        Resolver(servers=[bad])
    assert "\n" not in str(caught.value)
    assert "--dns-servers" in str(caught.value)


def _nsswitch(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nsswitch.conf"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "sources", "backend"),
    [
        ("hosts: files dns\n", ["files", "dns"], "cares"),
        ("passwd: files\nhosts:\tfiles [NOTFOUND=return] dns # x\n", ["files", "dns"], "cares"),
        ("hosts: files mdns4_minimal [ NOTFOUND = return ] dns\n", None, "system"),
        ("hosts: resolve [!UNAVAIL=return] files myhostname dns\n", None, "system"),
        ("#hosts: files mdns4\npasswd: files\n", ["dns", "files"], "cares"),
    ],
)
def test_nsswitch_decides_the_automatic_backend(
    tmp_path: Path, text: str, sources: list[str] | None, backend: str
) -> None:
    path = _nsswitch(tmp_path, text)
    if sources is not None:
        assert nsswitch_sources(path) == sources
    assert choose_backend("auto", None, path) == backend
    assert choose_backend("cares", None, path) == "cares"
    assert choose_backend("auto", ["127.0.0.1"], path) == "cares"  # servers need c-ares
    assert choose_backend("system", None, path) == "system"


def test_no_nsswitch_file_is_the_c_librarys_default(tmp_path: Path) -> None:
    assert nsswitch_sources(str(tmp_path / "absent")) == ["dns", "files"]


def test_without_pycares_the_system_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pycares", None)  # what an import finds when absent
    assert Resolver().backend == "system"
    with pytest.raises(UsageError, match="pycares"):
        Resolver(backend="cares")
    with pytest.raises(UsageError, match="pycares"):
        Resolver(servers=["127.0.0.1"])


def test_other_bad_options() -> None:
    with pytest.raises(UsageError, match="c-ares"):
        Resolver(backend="system", servers=["127.0.0.1"])
    with pytest.raises(UsageError, match="backend"):
        Resolver(backend="bind")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="timeout"):
        Resolver(dns_timeout=0)


def test_the_default_backend_here() -> None:
    expected = "cares" if set(nsswitch_sources()) <= resolver.CARES_SOURCES else "system"
    assert Resolver().backend == expected


async def test_a_burst_of_lookups_loses_no_answer() -> None:
    """1,000 lookups at once (2,000 queries, answered together): every answer is
    read, none retransmitted (cares.py: the receive buffer, a socket per 256
    queries).  With c-ares's defaults about half were dropped here."""
    with running(Zone({"*.burst.test": Entry(a=(V4,))}), count_names=False) as server:
        lookups = Resolver(servers=[server.server_spec])
        try:
            answers = await asyncio.gather(
                *(lookups.resolve(f"b{i}.burst.test", 80) for i in range(1000))
            )
        finally:
            lookups.close()
        assert answers == [(V4,)] * 1000
        assert server.queries["udp"] == 2000


KIB = 1024


@pytest.mark.parametrize(
    ("lookups", "queries", "per_socket", "asked"),
    [
        (1, 1, cares.UDP_MAX_QUERIES, 128 * KIB),  # the floor: never below Linux's default
        (10, 2, cares.UDP_MAX_QUERIES, 128 * KIB),
        (100, 1, cares.UDP_MAX_QUERIES, 200 * KIB),  # 100 answers x 2 KiB
        (100, 2, cares.UDP_MAX_QUERIES, 400 * KIB),  # A + AAAA: twice the answers
        (1000, 2, cares.UDP_MAX_QUERIES, 512 * KIB),  # one socket carries 256 queries
        (1000, 2, None, 4000 * KIB),  # every answer on one socket
        (10_000, 2, None, 4096 * KIB),  # the cap
    ],
)
def test_the_receive_buffer_rule(lookups: int, queries: int, per_socket: int, asked: int) -> None:
    assert cares.receive_buffer(lookups, queries, per_socket) == asked


def _kernel_gives(asked: int) -> int:
    """What SO_RCVBUF reads back for ``asked``: Linux doubles the size (room for
    its bookkeeping) after capping it at ``net.core.rmem_max``."""
    if sys.platform != "linux":
        return asked
    return 2 * min(asked, int(Path("/proc/sys/net/core/rmem_max").read_text()))


@pytest.mark.parametrize(
    ("concurrency", "ip_version", "asked"),
    [(10, 4, 128 * KIB), (100, 4, 200 * KIB), (100, None, 400 * KIB)],
)
async def test_c_ares_sockets_get_the_receive_buffer_of_the_concurrency(
    server: DNSServer, concurrency: int, ip_version: int | None, asked: int
) -> None:
    """The buffer on c-ares's own socket (read back from the descriptor its
    socket callback gave the loop) follows the client's ``max_connections``,
    as ``surge fetch -c`` and ``surge.fetch(concurrency=)`` build it."""
    assert FetchOptions(concurrency=concurrency).client().resolver.concurrency == concurrency
    client = AsyncClient(
        max_connections=concurrency, dns_servers=server.server_spec, ip_version=ip_version
    )
    r = client.resolver
    try:
        lookup = asyncio.ensure_future(r.resolve(f"rcvbuf-{concurrency}-{ip_version}.gen.test", 80))
        await asyncio.sleep(0)  # the query is sent: its socket is on the loop
        assert r._cares is not None and r._cares._current is not None
        descriptors = set(r._cares._current.readers)
        assert descriptors
        for fd in descriptors:
            with socket.fromfd(fd, socket.AF_INET, socket.SOCK_DGRAM) as sock:
                got = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            assert got == _kernel_gives(asked)
        assert await lookup == ("127.0.0.1",)
    finally:
        await client.aclose()


async def test_a_burst_of_answers_arriving_at_once_all_land() -> None:
    """1,000 lookups in flight at -c 1000 (2,000 queries) whose answers all
    arrive while the loop reads nothing -- as a burst from the network lands
    while the loop is busy -- wait in c-ares's sockets' buffers: every lookup
    is answered from them, none retransmitted, none timed out."""
    n = 1000
    with running(Zone({"*.wave.test": Entry(a=(V4,))}), count_names=False) as server:
        # Each try (a third of the timeout: cares.py) far longer than the wait
        # below: c-ares asks again only for an answer that was lost.
        client = AsyncClient(
            max_connections=n,
            dns_servers=server.server_spec,
            max_time=120,
            connect_timeout=90,
            dns_timeout=90,
        )
        r = client.resolver
        try:
            lookups = [asyncio.ensure_future(r.resolve(f"w{i}.wave.test", 80)) for i in range(n)]
            await asyncio.sleep(0)  # every query sent
            queries = 2 * n  # A + AAAA (tests/conftest.py: the host has global IPv6)
            deadline = time.monotonic() + 20
            while server.responses["udp"] < queries and time.monotonic() < deadline:
                time.sleep(0.01)  # the loop blocked: the answers pile up in the kernel
            assert server.responses["udp"] == queries
            answers = await asyncio.gather(*lookups)
        finally:
            await client.aclose()
        assert answers == [(V4,)] * n
        assert server.queries["udp"] == queries  # no answer lost: nothing asked twice


@pytest.mark.parametrize(
    ("table", "usable"),
    [
        # address, interface index, prefix length, scope, flags, name (Linux)
        ("00000000000000000000000000000001 01 80 10 80 lo\n", False),
        ("fe8000000000000000fc00fffe000001 04 40 20 80 eth0\n", False),  # link-local
        ("fd000000000000000000000000000002 04 40 00 82 eth0\n", False),  # unique local
        ("20010db8000000000000000000000001 04 40 00 80 eth0\n", True),  # global
    ],
)
def test_aaaa_is_asked_only_with_a_global_ipv6_address(
    table: str, usable: bool, tmp_path: Path
) -> None:
    path = tmp_path / "if_inet6"
    path.write_text(table)
    assert HAS_GLOBAL_IPV6(str(path)) is usable


def test_without_a_global_ipv6_address_only_a_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cares, "has_global_ipv6", lambda: False)
    assert cares.CaresBackend().family == socket.AF_INET
    assert cares.CaresBackend(family=socket.AF_INET6).family == socket.AF_INET6  # -6


async def test_a_prefetched_answer_serves_one_request_and_never_outlives_its_ttl(
    make, server: DNSServer, clock: Clock
) -> None:
    """prefetch holds its answer for the request it was asked for, past the
    cache's TTL if that request comes late; the first ask takes it, so a later
    request after the TTL asks again instead of getting the held copy."""
    r = make(min_ttl=5)

    async def prefetched(host: str) -> None:
        r.prefetch(host, 80)
        deadline = time.monotonic() + 10
        while host in r._inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    await prefetched("ttl5.test")
    asked = server.count("ttl5.test")
    assert asked >= 1
    assert r.cached("ttl5.test", 80) == (V4,)  # its request, in time
    clock.now += 6  # past the TTL
    assert r.cached("ttl5.test", 80) is None  # the held copy went with the first ask
    # Its request late: the TTL ran out first, and the held answer serves it, once.
    await prefetched("ttl5.test")
    assert server.count("ttl5.test") == 2 * asked
    clock.now += 6
    assert r.cached("ttl5.test", 80) == (V4,)
    assert r.cached("ttl5.test", 80) is None
    assert await r.resolve("ttl5.test", 80) == (V4,)
    assert server.count("ttl5.test") == 3 * asked
