"""The thread-safe Pool: exclusivity under threads, fairness, timeouts, faults."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from surge.pool import Pool, PoolClosed, PoolTimeout


class Conn:
    """A stand-in resource that knows whether two users hold it at once."""

    count = 0

    def __init__(self) -> None:
        Conn.count += 1
        self.n = Conn.count
        self.users = 0
        self.closed = False
        self.resets = 0

    def __repr__(self) -> str:
        return f"Conn{self.n}"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


def make_pool(**kwargs: Any) -> Pool[Conn]:
    kwargs.setdefault("max_size", 2)
    kwargs.setdefault("close", lambda c: setattr(c, "closed", True))
    return Pool(Conn, **kwargs)


def test_32_threads_on_8_resources_never_share_one() -> None:
    pool = make_pool(max_size=8, timeout=10)
    errors: list[str] = []
    guard = threading.Lock()
    high_water = [0]
    in_use = [0]

    def worker() -> None:
        for _ in range(300):
            conn = pool.acquire()
            with guard:
                conn.users += 1
                in_use[0] += 1
                high_water[0] = max(high_water[0], in_use[0])
                if conn.users != 1:
                    errors.append(f"{conn} shared by {conn.users}")
            time.sleep(0)  # let others run while it is held
            with guard:
                conn.users -= 1
                in_use[0] -= 1
            pool.release(conn)

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = pool.stats()
    assert high_water[0] <= 8
    assert stats["created"] <= 8
    assert stats["created"] + stats["reused"] == 32 * 300
    assert stats["in_use"] == 0 and stats["waiting"] == 0


def test_waiters_are_served_in_arrival_order() -> None:
    pool = make_pool(max_size=1)
    held = pool.acquire()
    order: list[int] = []

    def waiter(i: int) -> None:
        conn = pool.acquire(timeout=10)
        order.append(i)
        pool.release(conn)

    threads = []
    for i in range(6):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda i=i: pool.stats()["waiting"] == i + 1)  # queued in this order
    pool.release(held)
    for t in threads:
        t.join()
    assert order == list(range(6))
    stats = pool.stats()
    assert stats["waits"] == 6 and stats["created"] == 1 and stats["wait_max_s"] > 0


def test_a_returned_resource_goes_to_the_waiter_not_back_to_its_releaser() -> None:
    """The starvation SQLAlchemy's QueuePool shows: a thread that releases and at
    once acquires again must not jump the queue."""
    pool = make_pool(max_size=1)
    held = pool.acquire()
    got: list[Conn] = []
    t = threading.Thread(target=lambda: got.append(pool.acquire(timeout=5)))
    t.start()
    wait_until(lambda: pool.stats()["waiting"] == 1)
    pool.release(held)
    with pytest.raises(PoolTimeout):
        pool.acquire(timeout=0)  # the releaser cannot take it back
    t.join()
    assert got == [held]


def test_timeout_message_says_size_in_use_and_waiting() -> None:
    pool = make_pool(max_size=2, max_overflow=1, timeout=0.5)
    held = [pool.acquire() for _ in range(3)]
    served: list[Conn] = []
    blocker = threading.Thread(target=lambda: served.append(pool.acquire(timeout=5)))
    blocker.start()
    wait_until(lambda: pool.stats()["waiting"] == 1)
    assert pool.stats()["waits"] == 1 and pool.stats()["timeouts"] == 0
    # The acquire below must block in the queue beside the blocker for the pool's
    # default timeout: an observer sees the two waiters at once (an acquire that
    # gave up without waiting would leave it seeing only one).
    queued_together = threading.Event()

    def observe() -> None:
        with contextlib.suppress(AssertionError):
            wait_until(lambda: pool.stats()["waiting"] == 2)
            queued_together.set()

    observer = threading.Thread(target=observe)
    observer.start()
    with pytest.raises(PoolTimeout) as info:
        pool.acquire()
    observer.join(timeout=10)  # a hang guard only
    assert not observer.is_alive()
    assert queued_together.is_set()
    # it was counted as a wait that ended in a timeout; the blocker still waits
    stats = pool.stats()
    assert stats["waits"] == 2 and stats["timeouts"] == 1 and stats["waiting"] == 1
    message = str(info.value)
    assert "0.5 s" in message
    assert "max_size=2 + max_overflow=1" in message
    assert "3 in use" in message
    assert "1 waiting" in message
    assert isinstance(info.value, TimeoutError)
    for c in held:
        pool.release(c)
    blocker.join()
    assert served == [held[0]]  # the waiter who stayed is served first
    assert pool.stats()["timeouts"] == 1


def test_zero_timeout_does_not_wait() -> None:
    pool = make_pool(max_size=1)
    held = pool.acquire()
    with pytest.raises(PoolTimeout):
        pool.acquire(timeout=0)
    pool.release(held)
    assert pool.acquire(timeout=0) is held


def test_failing_create_leaks_no_slot_and_passes_it_to_a_waiter() -> None:
    attempts = [0]
    gate = threading.Event()

    def create() -> Conn:
        attempts[0] += 1
        if attempts[0] == 2:
            gate.wait(5)
            raise ConnectionError("server down")
        return Conn()

    pool: Pool[Conn] = Pool(create, max_size=2, timeout=5)
    first = pool.acquire()
    errors: list[BaseException] = []

    def failing() -> None:
        try:
            pool.acquire()
        except ConnectionError as e:
            errors.append(e)

    t1 = threading.Thread(target=failing)
    t1.start()
    wait_until(lambda: pool.stats()["open"] == 2)  # the slot is reserved, create blocks
    got: list[Conn] = []
    t2 = threading.Thread(target=lambda: got.append(pool.acquire()))
    t2.start()
    wait_until(lambda: pool.stats()["waiting"] == 1)
    gate.set()  # the create fails: its slot must go to the waiter
    t1.join()
    t2.join()
    assert len(errors) == 1 and len(got) == 1 and got[0] is not first
    stats = pool.stats()
    assert stats["open"] == 2 and stats["in_use"] == 2 and stats["created"] == 2


def test_check_failure_discards_and_replaces() -> None:
    clock = FakeClock()
    bad: set[int] = set()

    def check(c: Conn, idle: float) -> bool:
        if c.n in bad:
            raise OSError("gone away")
        return True

    pool = make_pool(check=check, check_idle_after=1.0, clock=clock)
    a = pool.acquire()
    pool.release(a)
    bad.add(a.n)
    assert pool.acquire() is a  # idle for less than check_idle_after: not checked
    pool.release(a)
    clock.now += 2
    b = pool.acquire()  # checked, fails, discarded, replaced
    assert b is not a and a.closed
    assert pool.stats()["discarded"] == 1


def test_check_returning_false_discards() -> None:
    pool = make_pool(check=lambda c, idle: c.n % 2 == 0)
    Conn.count = 0
    first = pool.acquire()  # Conn1: new, so not checked
    pool.release(first)
    second = pool.acquire()  # Conn1 fails its check; Conn2 is created
    assert first.closed and second.n == 2


def test_reset_runs_on_return_and_a_failing_reset_discards() -> None:
    def reset(c: Conn) -> None:
        c.resets += 1
        if c.resets == 2:
            raise OSError("rollback failed")

    pool = make_pool(reset=reset)
    a = pool.acquire()
    pool.release(a)
    assert pool.acquire() is a
    pool.release(a)  # the reset raises: a is discarded
    assert a.closed and pool.stats()["idle"] == 0 and pool.stats()["discarded"] == 1


def test_connection_context_releases_or_discards() -> None:
    pool = make_pool()
    with pool.connection() as a:
        pass
    assert pool.stats()["idle"] == 1
    with pytest.raises(RuntimeError), pool.connection() as b:
        assert b is a
        raise RuntimeError("the block failed")
    assert a.closed and pool.stats()["idle"] == 0 and pool.stats()["open"] == 0


def test_lifo_reuses_the_hottest_and_fifo_rotates() -> None:
    lifo = make_pool(max_size=3)
    a, b, c = (lifo.acquire() for _ in range(3))
    for x in (a, b, c):
        lifo.release(x)
    assert lifo.acquire() is c
    fifo = make_pool(max_size=3, lifo=False)
    a, b, c = (fifo.acquire() for _ in range(3))
    for x in (a, b, c):
        fifo.release(x)
    assert fifo.acquire() is a


def test_overflow_resources_are_closed_on_return() -> None:
    pool = make_pool(max_size=1, max_overflow=2)
    held = [pool.acquire() for _ in range(3)]
    with pytest.raises(PoolTimeout):
        pool.acquire(timeout=0)
    for c in held:
        pool.release(c)
    stats = pool.stats()
    assert stats["idle"] == 1 and stats["open"] == 1
    assert sum(c.closed for c in held) == 2


def test_max_idle_expires_from_the_cold_end() -> None:
    clock = FakeClock()
    pool = make_pool(max_size=3, max_idle=10.0, clock=clock)
    a, b = pool.acquire(), pool.acquire()
    pool.release(a)
    clock.now += 6
    pool.release(b)
    clock.now += 5  # a idle 11 s, b idle 5 s
    assert pool.acquire() is b
    assert a.closed and pool.stats()["expired"] == 1
    pool.release(b)
    clock.now += 11
    pool.expire()
    assert b.closed and pool.stats()["idle"] == 0


def test_max_lifetime_with_jitter() -> None:
    clock = FakeClock()
    pool = make_pool(max_size=50, max_lifetime=100.0, clock=clock)
    conns = [pool.acquire() for _ in range(50)]
    for c in conns:
        pool.release(c)
    clock.now += 89.9  # below 90: jitter shortens lifetimes by at most 10%
    assert pool.stats()["expired"] == 0
    again = [pool.acquire() for _ in range(50)]
    assert not any(c.closed for c in again)
    clock.now += 5  # 94.9 s: some of them (jittered down) have expired on return
    for c in again:
        pool.release(c)
    expired = pool.stats()["expired"]
    assert 0 < expired < 50  # jitter spread the expiries
    clock.now += 5.2  # past 100: every one has expired
    fresh = pool.acquire()
    assert all(c.closed for c in again) and not fresh.closed


def test_release_of_a_foreign_or_double_returned_resource_raises() -> None:
    pool = make_pool()
    with pytest.raises(ValueError, match="not checked out"):
        pool.release(Conn())
    a = pool.acquire()
    pool.release(a)
    with pytest.raises(ValueError, match="not checked out"):
        pool.release(a)


def test_close_closes_idle_refuses_acquire_and_fails_waiters() -> None:
    pool = make_pool(max_size=2)
    idle, held = pool.acquire(), pool.acquire()
    pool.release(idle)
    failures: list[BaseException] = []

    def waiter() -> None:
        try:
            pool.acquire(timeout=5)
        except PoolClosed as e:
            failures.append(e)

    taken = pool.acquire()  # the idle one
    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: pool.stats()["waiting"] == 1)
    pool.release(taken)  # handed straight to the waiter, who keeps it
    t.join()
    assert failures == []  # it was served before the close
    waiting = threading.Thread(target=waiter)
    waiting.start()
    wait_until(lambda: pool.stats()["waiting"] == 1)
    pool.close()
    waiting.join()
    assert len(failures) == 1 and "closed" in str(failures[0])
    with pytest.raises(PoolClosed):
        pool.acquire()
    pool.release(held)  # a resource in use at close is closed when it comes back
    assert held.closed
    assert pool.stats()["in_use"] == 1  # the one the first waiter kept


def test_stats_fields() -> None:
    pool = make_pool()
    with pool.connection():
        pass
    stats = pool.stats()
    for field in (
        "created",
        "reused",
        "discarded",
        "expired",
        "timeouts",
        "waits",
        "wait_total_s",
        "wait_max_s",
        "in_use",
        "idle",
        "waiting",
    ):
        assert field in stats
    assert stats["created"] == 1 and stats["idle"] == 1


def test_bad_options_are_refused() -> None:
    for kwargs in (
        {"max_size": 0},
        {"max_overflow": -1},
        {"timeout": -1},
        {"max_idle": 0},
        {"max_lifetime": 0},
        {"lifetime_jitter": 1.0},
    ):
        with pytest.raises(ValueError):
            make_pool(**kwargs)


def test_clear_closes_every_idle_resource_and_leaves_those_in_use() -> None:
    pool = make_pool(max_size=3)
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    pool.release(a)
    pool.release(b)
    pool.clear()
    assert a.closed and b.closed and not c.closed
    assert pool.stats()["idle"] == 0 and pool.stats()["open"] == 1
    fresh = pool.acquire()  # the freed slots are usable at once
    assert fresh not in (a, b, c)
    pool.release(c)
    assert not c.closed and pool.acquire() is c


def test_set_max_lifetime_applies_to_resources_created_afterwards() -> None:
    clock = FakeClock()
    pool = make_pool(max_size=2, clock=clock, lifetime_jitter=0.0)
    old = pool.acquire()
    pool.set_max_lifetime(10.0)
    new = pool.acquire()
    pool.release(old)
    pool.release(new)
    clock.now += 11
    # the hot one (new) has outlived its lifetime; the old one never had one
    assert pool.acquire() is old
    assert new.closed and not old.closed
