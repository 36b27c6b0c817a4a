"""The thread pool under contention, black-box: many threads in tight acquire /
release loops with the interpreter switching threads as often as it can.

An earlier ``Pool.acquire`` let go of its lock once the core had queued a
waiter and gave the waiter its wake lock in a second critical section: a
release in between was handed that waiter and called ``.release()`` on None -
an AttributeError in the releasing thread, and a waiter that slept out its whole
timeout although it had been granted a resource.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from surge.pool import AsyncKeyedPool, Pool

#: Wall-clock budget of one run (a bound on the test's length, never asserted).
BUDGET_S = 4.0


@pytest.fixture
def switch_often() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.mark.parametrize(("threads", "max_size"), [(4, 1), (8, 2), (16, 4)])
def test_tight_acquire_release_loops_lose_no_wake_up(
    switch_often: None, threads: int, max_size: int
) -> None:
    pool: Pool[object] = Pool(object, max_size=max_size, timeout=5.0)
    errors: list[BaseException] = []
    acquires = [0] * threads
    in_use = [0]
    most_in_use = [0]
    count_lock = threading.Lock()
    stop_at = time.monotonic() + BUDGET_S

    def worker(n: int) -> None:
        try:
            while time.monotonic() < stop_at and not errors:
                resource = pool.acquire()
                with count_lock:
                    in_use[0] += 1
                    most_in_use[0] = max(most_in_use[0], in_use[0])
                    in_use[0] -= 1
                pool.release(resource)
                acquires[n] += 1
        except BaseException as error:  # reported below, with the others
            errors.append(error)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(BUDGET_S + 30)  # a stranded waiter sleeps its 5 s timeout out: bounded
    assert not any(t.is_alive() for t in workers)
    assert errors == []
    stats = pool.stats()
    assert stats["in_use"] == 0 and stats["waiting"] == 0 and stats["timeouts"] == 0
    assert stats["open"] <= max_size and most_in_use[0] <= max_size
    assert sum(acquires) > 1000  # the loops ran


@pytest.mark.parametrize("step", ["check", "reset", "create"])
def test_an_interrupted_callback_gives_the_slot_back(step: str) -> None:
    """KeyboardInterrupt (a BaseException) inside check, reset or create: it
    propagates, and the pool of one still has its slot."""
    interrupt = [False]

    def callback(*_: object) -> object:
        if interrupt[0]:
            interrupt[0] = False
            raise KeyboardInterrupt
        return object() if step == "create" else True

    pool: Pool[object] = Pool(
        callback if step == "create" else object,
        max_size=1,
        timeout=0.5,
        check=callback if step == "check" else None,
        reset=callback if step == "reset" else None,
    )
    if step != "create":
        pool.release(pool.acquire())  # an idle resource for check to look at
    interrupt[0] = True
    with pytest.raises(KeyboardInterrupt):
        resource = pool.acquire()
        pool.release(resource)
    pool.release(pool.acquire())  # no PoolTimeout: the slot came back
    assert pool.stats()["in_use"] == 0


async def test_a_waiter_granted_while_the_acquire_awaits_a_close_is_woken() -> None:
    """AsyncKeyedPool: an acquire that queues a waiter for its full key while the
    same call retired another key's expired connection awaits that ``close``
    before it waits; a release in that gap grants the waiter. The waiter's wake
    must exist from the moment it is queued (it was made later, in ``_wait``:
    the release raised AttributeError and the waiter slept out its timeout)."""
    now = [0.0]
    closing = asyncio.Event()

    async def close(_: object) -> None:
        closing.set()
        await asyncio.sleep(0.01)  # the gap: other tasks run here

    pool: AsyncKeyedPool[str, object] = AsyncKeyedPool(
        lambda key: object(),
        max_size=4,
        max_per_key=1,
        max_idle=1.0,
        close=close,
        timeout=2.0,
        clock=lambda: now[0],
    )
    held = await pool.acquire("a")
    await pool.release(await pool.acquire("b"))  # idle, and about to expire
    now[0] = 5.0
    waiting = asyncio.create_task(pool.acquire("a"))  # expires b, queues for a
    await closing.wait()
    await pool.release(held)  # in the gap: hands "held" to the waiter
    assert await asyncio.wait_for(waiting, 1.0) is held
    await pool.close()
