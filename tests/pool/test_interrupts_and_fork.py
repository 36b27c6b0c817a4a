"""Interruptions and fork, at every front-end: a waiter interrupted in any state
loses no resource and no slot, and a forked child never reuses, resets or
closes what its parent's pool held.

The interruption is made deterministic by the waiter's own wake object: a lock
whose ``acquire`` first lets the test grant the waiter (or not) and then raises
KeyboardInterrupt, exactly where a Ctrl-C lands in a blocked acquire.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest
from tests.pool._child import run_in_child

from surge.errors import PoolTimeout
from surge.pool import AsyncKeyedPool, AsyncPool, KeyedPool, Pool, _sync


class Res:
    n = 0

    def __init__(self) -> None:
        Res.n += 1
        self.n = Res.n
        self.closed = self.severed = False

    def __repr__(self) -> str:
        return f"Res{self.n}"


def make_pool(kind: str) -> Any:
    if kind == "pool":
        return Pool(Res, max_size=1)
    return KeyedPool(lambda key: Res(), max_size=1, max_per_key=1)


def acquire(pool: Any, timeout: float | None = None) -> Any:
    return pool.acquire(timeout) if isinstance(pool, Pool) else pool.acquire("k", timeout)


class InterruptingWake:
    """A waiter's wake lock whose blocking acquire runs ``before`` (which may grant
    the waiter), then raises KeyboardInterrupt as a signal handler would."""

    before: Callable[[], None] = staticmethod(lambda: None)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking:
            return self._lock.acquire(False)
        InterruptingWake.before()
        raise KeyboardInterrupt

    def release(self) -> None:
        if self._lock.locked():
            self._lock.release()


@pytest.fixture
def interrupting_wakes(monkeypatch: pytest.MonkeyPatch) -> type[InterruptingWake]:
    def armed() -> Any:
        wake = InterruptingWake()
        wake._lock.acquire()
        return wake

    monkeypatch.setattr(_sync, "_armed_lock", armed)
    yield InterruptingWake
    InterruptingWake.before = staticmethod(lambda: None)


@pytest.mark.parametrize("kind", ["pool", "keyed"])
@pytest.mark.parametrize(
    "grant", ["nothing", "handed the resource", "granted a slot"], ids=lambda g: g.replace(" ", "-")
)
def test_an_interrupted_waiter_loses_nothing(
    interrupting_wakes: type[InterruptingWake], kind: str, grant: str
) -> None:
    """Ctrl-C in a blocked acquire, before or just as the holder gives up its
    resource: afterwards the pool is whole (one resource, free), never at
    in_use=1 for ever with every acquire timing out (the bug: the interrupted
    waiter stayed queued and the holder's release was handed to it)."""
    pool = make_pool(kind)
    held = acquire(pool)
    if grant == "handed the resource":
        interrupting_wakes.before = staticmethod(lambda: pool.release(held))
    elif grant == "granted a slot":
        interrupting_wakes.before = staticmethod(lambda: pool.discard(held))
    with pytest.raises(KeyboardInterrupt):
        acquire(pool, timeout=5)
    stats = pool.stats()
    assert stats["waiting"] == 0
    if grant == "nothing":
        assert stats["in_use"] == 1
        pool.release(held)
    assert pool.stats()["in_use"] == 0
    again = acquire(pool, timeout=0.5)  # no PoolTimeout: the slot came back
    pool.release(again)
    assert pool.stats()["open"] <= 1


def test_a_real_sigint_in_a_blocked_acquire_loses_nothing() -> None:
    """The same with a real SIGINT delivered to the main thread blocked in
    acquire, while another thread releases: whatever the order, the pool is whole."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    pool: Pool[Res] = Pool(Res, max_size=1)
    main = threading.get_ident()
    for _ in range(20):
        held = pool.acquire()

        def interrupt_then_release(held: Res = held) -> None:
            while pool.stats()["waiting"] == 0:
                threading.Event().wait(0.001)
            signal.pthread_kill(main, signal.SIGINT)
            pool.release(held)

        helper = threading.Thread(target=interrupt_then_release)
        helper.start()
        try:
            got = pool.acquire(timeout=10)
        except KeyboardInterrupt:
            pass
        else:
            pool.release(got)  # granted first; the KeyboardInterrupt may follow here
        finally:
            helper.join()
        assert pool.stats()["in_use"] == 0, pool.stats()
        pool.release(pool.acquire(timeout=0.5))


@pytest.mark.parametrize("kind", ["pool", "keyed"])
async def test_a_task_cancelled_as_it_is_handed_a_resource_passes_it_on(kind: str) -> None:
    pool: Any = (
        AsyncPool(Res, max_size=1)
        if kind == "pool"
        else AsyncKeyedPool(lambda key: Res(), max_size=1, max_per_key=1)
    )
    args = () if kind == "pool" else ("k",)
    held = await pool.acquire(*args)
    waiting = asyncio.ensure_future(pool.acquire(*args, timeout=5))
    await asyncio.sleep(0)
    assert pool.stats()["waiting"] == 1
    await pool.release(held)  # granted to the waiting task ...
    waiting.cancel()  # ... which is cancelled in the same loop iteration
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.stats()["in_use"] == 0
    again = await pool.acquire(*args, timeout=0.5)
    await pool.release(again)


# -- fork -----------------------------------------------------------------------------


def in_child(body: Callable[[], None]) -> None:
    """Run ``body`` in a forked child; fail the test with what the child raised."""
    outcome = run_in_child(body)
    if outcome == "hung":
        pytest.fail("the forked child hung (a lock held across the fork?)")
    assert outcome is None, outcome


@pytest.mark.parametrize("kind", ["pool", "keyed"])
def test_a_forked_child_severs_what_the_parent_held_and_starts_afresh(kind: str) -> None:
    severed_in_child: list[Res] = []
    if kind == "pool":
        pool: Any = Pool(
            Res,
            max_size=2,
            close=lambda r: setattr(r, "closed", True),
            sever=severed_in_child.append,
        )
        idle = acquire(pool)
        out = acquire(pool)
        pool.release(idle)
    else:  # one per key: an idle one of another key, and one held
        pool = KeyedPool(
            lambda key: Res(),
            max_size=2,
            max_per_key=1,
            close=lambda r: setattr(r, "closed", True),
            sever=severed_in_child.append,
        )
        idle = pool.acquire("other")
        pool.release(idle)
        out = acquire(pool)

    def child() -> None:
        assert sorted(r.n for r in severed_in_child) == sorted([idle.n, out.n])
        assert not out.closed and not idle.closed  # severed, never closed
        assert pool.stats()["in_use"] == 0 and pool.stats()["open"] == 0
        fresh = acquire(pool, timeout=0.5)  # a new resource, in a slot of its own
        assert fresh not in (idle, out)
        pool.release(out)  # the parent's: dropped without a word, not pooled
        pool.release(fresh)
        assert acquire(pool, timeout=0.5) is fresh

    in_child(child)
    # the parent's pool is untouched
    assert severed_in_child == [] and not out.closed
    assert pool.stats()["in_use"] == 1
    pool.release(out)
    assert acquire(pool, timeout=0.5) is out


def test_a_fork_while_another_thread_holds_the_pool_lock_does_not_deadlock() -> None:
    pool: Pool[Res] = Pool(Res, max_size=2)
    pool.release(pool.acquire())
    pool._lock.acquire()  # as if another thread were inside the pool at fork time
    try:
        in_child(lambda: pool.release(pool.acquire(timeout=1)))
    finally:
        pool._lock.release()


async def test_an_async_pool_in_a_forked_child_starts_afresh() -> None:
    severed: list[Res] = []
    pool: AsyncPool[Res] = AsyncPool(Res, max_size=1, sever=severed.append)
    held = await pool.acquire()

    def child() -> None:
        assert severed == [held]

        async def use() -> None:
            fresh = await pool.acquire(timeout=0.5)
            assert fresh is not held
            await pool.release(held)  # dropped
            await pool.release(fresh)

        asyncio.run(use())

    in_child(child)
    await pool.release(held)
    assert severed == []


def test_timeouts_still_count_and_report() -> None:
    pool: Pool[Res] = Pool(Res, max_size=1)
    held = pool.acquire()
    with pytest.raises(PoolTimeout):
        pool.acquire(timeout=0.01)
    assert pool.stats()["timeouts"] == 1
    pool.release(held)


@pytest.mark.parametrize("kind", ["pool", "keyed"])
async def test_a_cancelled_close_leaves_the_rest_for_the_next(kind: str) -> None:
    """close() cancelled while it awaits a resource's close: a second close()
    closes every other one, none twice (as the thread pools' interrupted close)."""
    closes: list[Res] = []

    async def aclose(res: Res) -> None:
        await asyncio.sleep(0)
        closes.append(res)

    pool: Any
    if kind == "pool":
        pool = AsyncPool(Res, max_size=6, close=aclose)
        taken = [await pool.acquire() for _ in range(6)]
    else:
        pool = AsyncKeyedPool(lambda key: Res(), max_size=6, max_per_key=6, close=aclose)
        taken = [await pool.acquire("k") for _ in range(6)]
    for res in taken:
        await pool.release(res)
    first = asyncio.ensure_future(pool.close())
    for _ in range(3):  # into the second resource's close
        await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await pool.close()
    assert len(closes) == len(set(map(id, closes))), "one closed twice"
    assert len(closes) >= 5, f"{6 - len(closes)} left unclosed (one may be: it was mid-close)"
