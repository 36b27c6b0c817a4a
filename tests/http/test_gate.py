"""The handshake gate: FIFO, cancellation-safe, and O(1) per operation (counted)."""

from __future__ import annotations

import asyncio

import pytest
from tests.pool.test_complexity import CountingDeque

import surge.http.gate as gate_module
from surge.http.gate import Gate


async def test_holders_never_exceed_slots_and_waiters_go_in_arrival_order() -> None:
    gate = Gate(3)
    holding = 0
    most = 0
    order: list[int] = []

    async def hold(i: int) -> None:
        nonlocal holding, most
        async with gate:
            order.append(i)
            holding += 1
            most = max(most, holding)
            await asyncio.sleep(0.001)
            holding -= 1

    await asyncio.gather(*(hold(i) for i in range(50)))
    assert most == 3
    assert order == list(range(50))  # the first three at once, then arrival order
    assert gate.free == 3 and gate.waiting == 0


async def test_a_cancelled_waiter_takes_no_slot() -> None:
    gate = Gate(1)
    await gate.acquire()
    waiters = [asyncio.create_task(gate.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    waiters[0].cancel()
    waiters[1].cancel()
    await asyncio.gather(*waiters[:2], return_exceptions=True)
    gate.release()  # passes over the two cancelled waiters to the third
    await asyncio.wait_for(waiters[2], 1)
    assert gate.free == 0
    gate.release()
    assert gate.free == 1 and gate.waiting == 0


async def test_a_waiter_granted_then_cancelled_passes_the_slot_on() -> None:
    gate = Gate(1)
    await gate.acquire()
    first = asyncio.create_task(gate.acquire())
    second = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()  # the slot is granted to first ...
    first.cancel()  # ... which is cancelled before it runs
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, 1)  # the slot went on, not lost
    assert first.cancelled()
    gate.release()
    assert gate.free == 1


async def test_every_operation_touches_o1_waiters(monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio.Semaphore's release walks past every woken waiter (O(N)); this
    one touches a constant number of deque elements per operation, whatever N."""
    monkeypatch.setattr(gate_module, "deque", CountingDeque)

    async def per_operation(n: int) -> float:
        gate = Gate(1)
        await gate.acquire()
        tasks = [asyncio.create_task(gate.acquire()) for _ in range(n)]
        await asyncio.sleep(0)
        for task in tasks[::3]:
            task.cancel()  # a third give up while waiting
        await asyncio.sleep(0)
        CountingDeque.touched = 0
        for _ in range(n):
            gate.release()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks, return_exceptions=True)
        return CountingDeque.touched / n

    small, large = await per_operation(300), await per_operation(10_000)
    assert large <= 2.0  # each waiter queued once and popped once
    assert large <= small * 1.1 + 0.1  # the same constant at 30x the waiters


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        Gate(0)
