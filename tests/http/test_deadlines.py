"""The deadline wheel: one loop timer per slot, never early, nothing expired twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from surge.http.deadlines import Deadlines, TaskDeadline


class Exchange:
    def __init__(self, deadlines: Deadlines, deadline: float) -> None:
        self.expired_at: float | None = None
        self.deadline = deadline
        self.slot: set[Exchange] | None = deadlines.add(self, deadline)  # type: ignore[arg-type]

    def expire(self) -> None:
        assert self.expired_at is None, "expired twice"
        self.expired_at = asyncio.get_running_loop().time()
        self.done()

    def done(self) -> None:
        if self.slot is not None:
            self.slot.discard(self)
            self.slot = None


async def test_many_exchanges_share_one_timer_per_slot() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, resolution=0.05)
    now = loop.time()
    # 1,000 deadlines spread over 0.1 s fall into at most three 50 ms slots.
    exchanges = [Exchange(deadlines, now + 0.1 + i * 0.0001) for i in range(1000)]
    assert deadlines.timers() <= 3
    assert deadlines.pending() == 1000
    for exchange in exchanges[::2]:
        exchange.done()  # answered in time: they leave their slot
    assert deadlines.pending() == 500
    await asyncio.sleep(0.3)
    assert deadlines.pending() == 0 and deadlines.timers() == 0
    for i, exchange in enumerate(exchanges):
        if i % 2 == 0:
            assert exchange.expired_at is None
        else:
            assert exchange.expired_at is not None
            assert exchange.expired_at >= exchange.deadline  # never early


async def test_a_deadline_fires_at_most_one_resolution_late() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, resolution=0.05)
    exchange = Exchange(deadlines, loop.time() + 0.02)
    while exchange.expired_at is None:
        await asyncio.sleep(0.01)
    # The slot ends within one resolution of the deadline; the loop may add its
    # own scheduling delay, so the bound here is loose (behaviour, not timing).
    assert exchange.deadline <= exchange.expired_at < exchange.deadline + 1.0


async def test_an_exchange_finished_by_another_expiry_is_not_expired() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, resolution=0.05)
    deadline = loop.time() + 0.01
    pair = [Exchange(deadlines, deadline), Exchange(deadlines, deadline)]
    for me, other in (pair, pair[::-1]):
        own = me.expire

        def expire_and_finish_the_other(own: Any = own, other: Exchange = other) -> None:
            own()
            other.done()  # as an expiry that settles a shared exchange might

        me.expire = expire_and_finish_the_other  # type: ignore[method-assign]
    await asyncio.sleep(0.15)
    # Whichever the slot expired first finished the other: that one must not expire.
    assert sorted(e.expired_at is None for e in pair) == [False, True]


async def test_resolution_must_be_positive() -> None:
    with pytest.raises(ValueError, match="resolution"):
        Deadlines(asyncio.get_running_loop(), resolution=0)


async def test_task_deadline_turns_its_own_cancellation_into_timeout_error() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, resolution=0.05)
    with pytest.raises(TimeoutError), TaskDeadline(deadlines, loop.time() + 0.02) as guard:
        await asyncio.sleep(5)
    assert guard.expired
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0  # nothing left pending


async def test_task_deadline_in_time_leaves_nothing_behind() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, resolution=0.05)
    with TaskDeadline(deadlines, loop.time() + 0.05) as guard:
        await asyncio.sleep(0)
    assert deadlines.pending() == 0 and not guard.expired
    await asyncio.sleep(0.15)  # the slot's timer fires on an empty slot: no cancel
    assert not guard.expired


async def test_task_deadline_lets_an_outside_cancellation_through() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, resolution=0.05)

    async def guarded() -> None:
        with TaskDeadline(deadlines, loop.time() + 10):
            await asyncio.sleep(5)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.01)
    task.cancel()  # not the deadline: must stay a CancelledError
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadlines.pending() == 0
