"""Hostile round on the bulk engine's DNS look-ahead (commit 250a739): the engine
reads inputs up to ``concurrency`` ahead of its workers and has the resolver
send their names' queries at once (``AsyncClient.look_ahead`` ->
``Resolver.prefetch``).  The claim (docs/architecture-rules.md, "Names are looked
up ahead of the slots"; the commit): records are what they were without it -- same
statuses, error classes and details, same DNS query counts -- only faster.

Each test here is a case where that does not hold; each fails on 250a739 and
passes with the look-ahead turned off (``AsyncClient.look_ahead`` a no-op).
Real servers on loopback: the simulated web and the simulated DNS server.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import pytest
from tests.conftest import require
from tests.http.test_happy_eyeballs import LIVE

import surge
from surge.http import AsyncClient
from surge.http.resolver import Resolver
from surge.sim import SimInfo
from surge.sim.dns import DNSServer, Entry, Zone, running

ZONE = Zone(
    {
        # TTL 0 (the resolver keeps it min_ttl, 5 s): /etc/hosts names and
        # load-balanced services answer so.
        "*.ttl.la.sim": Entry(a=(LIVE,), ttl=0),
        "*.nocache.la.sim": Entry(a=(LIVE,)),
        "slow.timeout.la.sim": Entry(a=(LIVE,), latency=3.0),
        "*.timeout.la.sim": Entry(a=(LIVE,)),
        "*.closed.la.sim": Entry(a=(LIVE,)),
        "late.closed.la.sim": Entry(a=(LIVE,), latency=1.5),
        "*.stale.la.sim": Entry(a=(LIVE,)),
        "flaky.stale.la.sim": Entry(failure="servfail"),  # until the test mends it
    }
)


@pytest.fixture(scope="module")
def dns() -> Iterator[DNSServer]:
    require("pycares")
    with running(ZONE) as server:
        yield server


def test_an_answer_looked_up_ahead_is_not_asked_again_when_its_slot_comes_late(
    sim: SimInfo, dns: DNSServer
) -> None:
    """Expected: one A query for ``b`` -- without the look-ahead its request
    asks when its slot frees and uses the answer at once (the commit: "same DNS
    query counts").  Actual: 2.  The look-ahead asks at t=0, puts the answer in
    the cache for its TTL (0 here, kept 5 s: min_ttl), the slot frees at t=6
    (the first input takes 6 s), the answer has expired and the request asks
    again.  Any input queued behind slow ones longer than its name's TTL pays
    a query more (a crawl of hosts answering 1-3 s, names with TTL 0-5 s), and
    the look-ahead's query was wasted."""
    urls = [sim.url("delay-6000.ttl.la.sim"), sim.url("b.ttl.la.sim")]
    records = list(surge.fetch_all(urls, concurrency=1, dns_servers=dns.server_spec, ip_version=4))
    assert [(r["status"], r["error"]) for r in records] == [(200, None), (200, None)]
    assert dns.count("b.ttl.la.sim", "A") == 1


def test_a_resolver_that_caches_nothing_asks_once_per_request(sim: SimInfo, dns: DNSServer) -> None:
    """``Resolver(cache_size=0)`` keeps no answers (dnscache: "at most
    max_entries names"), e.g. for names whose addresses rotate.  Expected: one
    query per request, as without the look-ahead (a request's own lookup hands
    it its answer, cache or not).  Actual: 2 for ``b``: the look-ahead's
    answer is put in a cache that keeps nothing, and the request asks again.
    The same happens to any answer the LRU lets go before its request comes:
    a cache smaller than what the look-ahead holds ahead (``-c`` of 8,192 or
    more against the default 16,384 names, since up to 2 x c lookups are in
    flight and c inputs queued)."""

    async def main() -> list[dict[str, Any]]:
        resolver = Resolver(
            servers=dns.server_spec, family=socket.AF_INET, cache_size=0, backend="cares"
        )
        async with AsyncClient(resolver=resolver) as client:
            urls = [sim.url("delay-1000.nocache.la.sim"), sim.url("b.nocache.la.sim")]
            return [r async for r in surge.fetch(urls, client=client, concurrency=1)]

    records = asyncio.run(main())
    assert [(r["status"], r["error"]) for r in records] == [(200, None), (200, None)]
    assert dns.count("b.nocache.la.sim", "A") == 1


def test_a_dns_timeout_record_states_what_its_request_waited(sim: SimInfo, dns: DNSServer) -> None:
    """resolver.py: "``dns_timeout`` bounds each lookup from the moment its
    query is sent"; cares.py: a timeout's message states "the seconds the
    lookup actually waited"; the existing test_dns_timeout checks the stated
    wait is what the request waited.  Expected: the record of ``slow`` (DNS
    answers after 3 s, --dns-timeout 1) says its lookup timed out after about
    1 s, and its elapsed_ms is at least that -- as without the look-ahead (its
    request asks at t=2, times out at t=3).  Actual: the look-ahead asked at
    t=0 and timed out at t=1, while the input was still queued; the request at
    t=2 finds that failure in the cache and reports "timeout after 1.00 s"
    with an elapsed time of ~0 ms: the record says the request waited a second
    for DNS when it waited for nothing, and never got its own try."""
    urls = [sim.url("delay-2000.timeout.la.sim"), sim.url("slow.timeout.la.sim")]
    options: dict[str, Any] = {"dns_servers": dns.server_spec, "ip_version": 4}
    records = list(surge.fetch_all(urls, concurrency=1, dns_timeout=1.0, **options))
    record = next(r for r in records if "slow" in r["input"])
    assert record["error"] == "dns_error"
    waited = re.search(r"timeout after (\d+\.\d\d) s", record["error_detail"])
    assert waited, record["error_detail"]
    assert float(waited.group(1)) <= record["elapsed_ms"] / 1000 + 0.25, record


def test_closing_a_client_leaves_no_failure_in_a_shared_resolver(
    sim: SimInfo, dns: DNSServer
) -> None:
    """A resolver of one's own (``AsyncClient(resolver=...)``, documented) may
    outlive a client: Resolver.close says lookups in flight fail, not that
    their names do.  Expected: after a run stopped early (the caller leaves the
    loop after the first record) and its client closed, a new client on the
    same resolver fetches ``late`` (DNS answers in 1.5 s): without the
    look-ahead nobody had asked for it.  Actual: the look-ahead's lookup of
    ``late`` was cancelled by the close, and Resolver.prefetch's callback put
    that cancellation in the cache as the name's failure: every request for it
    in the next 30 s (negative_ttl) is ``dns_error: lookup cancelled``, with no
    query sent.  (Resolver.resolve does not cache an abandoned lookup.)"""

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        resolver = Resolver(
            servers=dns.server_spec, family=socket.AF_INET, backend="cares", dns_timeout=10
        )
        urls = [sim.url("a.closed.la.sim"), sim.url("late.closed.la.sim")]
        first: list[dict[str, Any]] = []
        client = AsyncClient(resolver=resolver)
        async with client, aclosing(surge.fetch(urls, client=client, concurrency=1)) as records:
            async for record in records:
                first.append(record)
                break
        async with AsyncClient(resolver=resolver) as again:
            later = [r async for r in surge.fetch(urls[1:], client=again)]
        return first, later[0]

    first, later = asyncio.run(main())
    assert [(r["status"], r["error"]) for r in first] == [(200, None)]
    assert (later["status"], later["error"], later["error_detail"]) == (200, None, None)


def test_inputs_whose_requests_reuse_a_connection_send_no_query(
    sim: SimInfo, dns: DNSServer
) -> None:
    """Five inputs of one host, one slot: the first request looks the name up
    and opens a connection, the other four reuse it (keep-alive) and look
    nothing up, without the look-ahead: one A query (the commit: "same DNS
    query counts").  Actual: 2.  The answer's TTL (0, kept 5 s) runs out while
    the slot is busy (2 s a request); the look-ahead of the fifth input, at
    t=6, finds no answer cached and asks again -- for a request that never
    resolves.  A crawl of a single host (the brief's 1,000,000 inputs of one
    host, on keep-alive connections) asks the name again every TTL, where it
    asked once."""
    urls = [sim.url("delay-2000.ka.ttl.la.sim", f"/{i}") for i in range(5)]
    records = list(surge.fetch_all(urls, concurrency=1, dns_servers=dns.server_spec, ip_version=4))
    assert [(r["status"], r["error"]) for r in records] == [(200, None)] * 5
    assert dns.count("delay-2000.ka.ttl.la.sim", "A") == 1


def test_a_request_is_not_answered_by_a_failure_from_before_its_turn(
    sim: SimInfo, dns: DNSServer
) -> None:
    """The nameserver fails ``flaky`` (SERVFAIL) for a moment, then answers; the
    slot is busy with a 4 s request meanwhile.  Expected, as without the
    look-ahead: ``flaky``'s request asks when its turn comes (t=4), when the
    name resolves, and its record is a 200 (the commit: "same statuses, same
    error classes").  Actual: the look-ahead asked at t=0, while the input was
    only queued; the SERVFAIL went into the cache for negative_ttl (30 s), and
    the request, 4 s later, reports ``dns_error: SERVFAIL`` without asking.  A
    failure the request itself never met becomes its record (any input queued
    less than 30 s behind a transient DNS failure; with --retries too, since
    every try finds the cached failure)."""
    ZONE["flaky.stale.la.sim"] = Entry(failure="servfail")
    asked = dns.count("flaky.stale.la.sim", "A")
    records: list[dict[str, Any]] = []

    def run() -> None:
        urls = [sim.url("delay-4000.stale.la.sim"), sim.url("flaky.stale.la.sim")]
        options = {"dns_servers": dns.server_spec, "ip_version": 4}
        records.extend(surge.fetch_all(urls, concurrency=1, **options))

    worker = threading.Thread(target=run)
    worker.start()
    try:
        # Until c-ares has had its 2 tries' SERVFAILs (at once, with the
        # look-ahead), or 3 s (before the slot frees at 4 s, without it).
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and dns.count("flaky.stale.la.sim", "A") < asked + 2:
            time.sleep(0.01)
        time.sleep(0.3)  # the last SERVFAIL is read by the client
    finally:
        ZONE["flaky.stale.la.sim"] = Entry(a=(LIVE,))
        worker.join(60)
    outcome = {r["input"]: (r["status"], r["error"], r["error_detail"]) for r in records}
    assert outcome[sim.url("flaky.stale.la.sim")] == (200, None, None)
