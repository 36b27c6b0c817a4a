"""The resolver's cache: bounded by count, expiring, and keeping no exceptions."""

from __future__ import annotations

import sys
import tracemalloc

import pytest

from surge.errors import RequestError
from surge.http.dnscache import DNSCache
from surge.http.resolver import Resolver


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_answers_and_failures_expire_at_their_own_ttls() -> None:
    clock = Clock()
    cache = DNSCache(ttl=300, negative_ttl=30, clock=clock)
    cache.put("a.test", ("192.0.2.1",))
    cache.put_failure("gone.test", "gone.test: Name or service not known")
    with pytest.raises(RequestError) as first:
        cache.get("gone.test")
    with pytest.raises(RequestError) as second:
        cache.get("gone.test")
    assert first.value is not second.value  # a fresh error each time, never the stored one
    assert first.value.error_class == "dns_error" and "not known" in first.value.detail
    clock.now = 31
    assert cache.get("gone.test") is None  # the failure expired: look it up again
    assert cache.get("a.test") == ("192.0.2.1",)
    clock.now = 301
    assert cache.get("a.test") is None and len(cache) == 0


def test_a_ttl_from_the_answer_is_clamped() -> None:
    clock = Clock()
    cache = DNSCache(min_ttl=5, max_ttl=60, clock=clock)
    cache.put("zero.test", ("192.0.2.1",), ttl=0)  # a TTL of 0 still serves a burst
    cache.put("week.test", ("192.0.2.2",), ttl=7 * 86400)
    clock.now = 4.9
    assert cache.get("zero.test") == ("192.0.2.1",)
    clock.now = 59.9
    assert cache.get("zero.test") is None and cache.get("week.test") == ("192.0.2.2",)
    clock.now = 60
    assert cache.get("week.test") is None


def test_the_least_recently_used_name_goes_first() -> None:
    cache = DNSCache(max_entries=2)
    cache.put("a.test", ("192.0.2.1",))
    cache.put("b.test", ("192.0.2.2",))
    assert cache.get("a.test")  # a is now the most recently used
    cache.put("c.test", ("192.0.2.3",))
    assert cache.get("b.test") is None and cache.get("a.test") and cache.get("c.test")
    assert cache.evicted == 1


def test_many_distinct_names_stay_within_the_bound() -> None:
    """Half answered, half failed: the entry count, and the memory, stop growing
    at the bound; a failure costs what an answer does (no traceback kept)."""
    cache = DNSCache(max_entries=10_000)
    tracemalloc.start()
    try:
        for i in range(20_000):
            _fill(cache, i)
        at_bound, _ = tracemalloc.get_traced_memory()
        for i in range(20_000, 300_000):
            _fill(cache, i)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(cache) == 10_000 and cache.evicted == 290_000
    assert after <= at_bound * 1.1
    stored = [answer for _, answer in cache._entries.values()]
    assert {type(a) for a in stored} == {tuple, str}
    assert all(sys.getsizeof(a) < 200 for a in stored)


def _fill(cache: DNSCache, i: int) -> None:
    if i % 2:
        cache.put_failure(f"h{i}.test", f"h{i}.test: Name or service not known")
    else:
        cache.put(f"h{i}.test", ("192.0.2.1",))


async def test_the_resolver_keeps_a_failure_as_text() -> None:
    """A lookup that fails (an empty label: getaddrinfo refuses it before any
    query is sent) is cached as its detail, and the cached failure says the same."""
    resolver = Resolver(cache_size=8)
    try:
        with pytest.raises(RequestError) as looked_up:
            await resolver.resolve("a..test", 80)
        assert resolver.lookups == 1
        with pytest.raises(RequestError) as cached:
            resolver.cached("a..test", 80)
        assert cached.value.detail == looked_up.value.detail
        assert resolver.lookups == 1
        assert [type(a) for _, a in resolver.cache._entries.values()] == [str]
    finally:
        resolver.close()
