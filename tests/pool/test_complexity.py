"""Every core operation is O(1): proved by counting, never by timing.

The cores' deques are replaced by one that counts each element it touches and
refuses the operations that scan (``remove``, ``index``, ``in``, ...).  A
workload of N operations must touch O(N) elements in total, with the same
per-operation constant whether N is a thousand or a hundred thousand.  This is
the test boto's pool (``list.pop(0)`` in a loop) and httpcore's (list scans per
request) would fail.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

import surge.pool._core as core_module
import surge.pool._keyed_core as keyed_module
from surge.pool._core import PoolCore, Waiter
from surge.pool._keyed_core import KeyedCore


class CountingDeque(deque):  # type: ignore[type-arg]
    """A deque that counts the elements it touches and forbids scanning."""

    touched = 0

    def __init__(self, iterable: Iterable[Any] = (), maxlen: int | None = None) -> None:
        items = list(iterable)
        CountingDeque.touched += len(items)
        super().__init__(items)

    def _count(self, n: int = 1) -> None:
        CountingDeque.touched += n

    def append(self, x: Any) -> None:
        self._count()
        super().append(x)

    def appendleft(self, x: Any) -> None:
        self._count()
        super().appendleft(x)

    def pop(self) -> Any:
        self._count()
        return super().pop()

    def popleft(self) -> Any:
        self._count()
        return super().popleft()

    def __getitem__(self, i: Any) -> Any:
        self._count()
        return super().__getitem__(i)

    def __iter__(self) -> Iterator[Any]:
        for x in super().__iter__():
            self._count()
            yield x

    def clear(self) -> None:
        self._count(len(self))
        super().clear()

    def _scan(self, *args: Any) -> Any:
        raise AssertionError("the pool scanned a deque")

    remove = index = count = rotate = insert = __contains__ = _scan


@pytest.fixture(autouse=True)
def counting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core_module, "deque", CountingDeque)
    monkeypatch.setattr(keyed_module, "deque", CountingDeque)
    CountingDeque.touched = 0


def touched_per_op(workload: Callable[[int], int], n: int) -> float:
    CountingDeque.touched = 0
    ops = workload(n)
    return CountingDeque.touched / ops


class R:
    __slots__ = ()


def put_then_get(n: int) -> int:
    """boto's benchmark: N resources go into the pool, then N come out."""
    core: PoolCore[R] = PoolCore(n)
    resources = []
    for _ in range(n):
        assert core.acquire(0.0) is None
        resources.append(R())
        core.created(resources[-1], 0.0)
    for r in resources:
        core.release(r, 1.0)
    for _ in range(n):
        core.acquire(2.0)
    return 3 * n


def many_waiters(n: int) -> int:
    """httpcore's case: 10,000 queued requests, served one release at a time; half
    of the waiters give up (time out) before their turn."""
    core: PoolCore[R] = PoolCore(4)
    held = []
    for _ in range(4):
        core.acquire(0.0)
        held.append(R())
        core.created(held[-1], 0.0)
    waiters: list[Waiter[R]] = []
    for _ in range(n):
        got = core.acquire(0.0)
        assert isinstance(got, Waiter)
        waiters.append(got)
    for w in waiters[1::2]:
        core.cancel(w, timed_out=True)
    resource = held[0]
    served = 0
    while core.n_waiting:
        w = core.release(resource, 1.0)
        assert w is not None and w.entry is not None
        served += 1
    assert served == n // 2 + n % 2 - 0
    return n + n // 2 + served


def idle_expiry(n: int) -> int:
    """N resources go idle over time; every acquire expires the cold ones first."""
    core: PoolCore[R] = PoolCore(n, max_idle=10.0)
    resources = []
    for i in range(n):
        core.acquire(float(i))
        resources.append(R())
        core.created(resources[-1], float(i))
    for i, r in enumerate(resources):
        core.release(r, float(i))
    for i in range(n):
        core.acquire(float(n + i))  # each time, older ones have expired
    return 3 * n


def lifetimes(n: int) -> int:
    """N idle resources whose lifetimes ended: each is skipped once, not rescanned."""
    core: PoolCore[R] = PoolCore(n, lifetimes=True)
    resources = []
    for i in range(n):
        core.acquire(0.0)
        resources.append(R())
        core.created(resources[-1], 0.0, expires_at=5.0 if i % 2 else 1e9)
    for r in resources:
        core.release(r, 1.0)
    for _ in range(n // 2):
        core.acquire(6.0)
    return 2 * n + n // 2


def keyed_churn(n: int) -> int:
    """A crawler: N distinct hosts through a keyed pool of 100; every new host evicts
    the coldest idle connection of another host."""
    core: KeyedCore[int, R] = KeyedCore(100, 4)
    for host in range(n):
        assert core.acquire(host, float(host)) is None
        r = R()
        core.created(host, r, float(host))
        core.release(r, float(host))
    assert core.n_evicted == n - 100
    assert len(core.cores) == 100  # emptied hosts are dropped
    return 3 * n


def keyed_waiters(n: int) -> int:
    """N requests for many hosts wait for room in a full keyed pool; releases serve
    them in arrival order."""
    core: KeyedCore[int, R] = KeyedCore(8, 2)
    held = []
    for host in range(8):
        core.acquire(host, 0.0)
        held.append(R())
        core.created(host, held[-1], 0.0)
    for i in range(n):
        assert isinstance(core.acquire(100 + i, 0.0), Waiter)
    served = 0
    pending = list(held)
    while core.n_global_waiting:
        core.release(pending.pop(), 1.0)
        for w in core.take_woken():
            assert w.may_create
            r = R()
            core.created(w.key, r, 1.0)
            pending.insert(0, r)
            served += 1
    assert served == n
    return 2 * n + served


WORKLOADS = [put_then_get, many_waiters, idle_expiry, lifetimes, keyed_churn, keyed_waiters]


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.__name__)
def test_work_per_operation_is_constant(workload: Callable[[int], int]) -> None:
    small = touched_per_op(workload, 1_000)
    large = touched_per_op(workload, 100_000)
    # O(1) per operation: a small constant, and no growth with N (an O(N) scan
    # per operation would make the large run ~100x the small one).
    assert large <= 8, f"{large:.1f} elements touched per operation"
    assert large <= small * 1.25 + 0.5, (small, large)


def test_the_counter_catches_a_quadratic_pool() -> None:
    """The measuring stick itself: boto's algorithm (pop(0) from a list, modelled by
    scanning the deque) is caught."""

    def boto_like(n: int) -> int:
        queue = CountingDeque()
        for i in range(n):
            queue.append(i)
        for _ in range(n):
            list(iter(queue))  # what list.pop(0) costs: the rest shifts
            queue.popleft()
        return 2 * n

    assert touched_per_op(boto_like, 1_000) > 100
