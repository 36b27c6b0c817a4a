"""AsyncPool and AsyncKeyedPool: the same semantics on one event loop, and
cancellation that never loses a resource."""

from __future__ import annotations

import asyncio

import pytest

from surge.pool import AsyncKeyedPool, AsyncPool, PoolClosed, PoolTimeout


class Conn:
    count = 0

    def __init__(self, key: str = "") -> None:
        Conn.count += 1
        self.n = Conn.count
        self.key = key
        self.users = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"Conn{self.key}{self.n}"


async def create() -> Conn:
    await asyncio.sleep(0)  # a real await, as a connect would
    return Conn()


async def aclose(c: Conn) -> None:
    c.closed = True


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_1000_tasks_on_10_resources_never_share_one() -> None:
    pool: AsyncPool[Conn] = AsyncPool(create, max_size=10, close=aclose)
    shared = []

    async def worker() -> None:
        for _ in range(5):
            async with pool.connection() as conn:
                conn.users += 1
                if conn.users != 1:
                    shared.append(conn)
                await asyncio.sleep(0)
                conn.users -= 1

    await asyncio.gather(*(worker() for _ in range(1000)))
    stats = pool.stats()
    assert shared == []
    assert stats["created"] == 10 and stats["created"] + stats["reused"] == 5000
    assert stats["waits"] > 0 and stats["in_use"] == 0


async def test_waiters_in_arrival_order_and_timeout() -> None:
    pool: AsyncPool[Conn] = AsyncPool(create, max_size=1, timeout=5)
    held = await pool.acquire()
    order: list[int] = []

    async def waiter(i: int) -> None:
        conn = await pool.acquire()
        order.append(i)
        await pool.release(conn)

    tasks = [asyncio.create_task(waiter(i)) for i in range(5)]
    await settle()
    with pytest.raises(PoolTimeout, match="1 in use, 5 waiting"):
        await pool.acquire(timeout=0.01)
    await pool.release(held)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert pool.stats()["timeouts"] == 1


async def test_a_cancelled_waiter_loses_nothing() -> None:
    pool: AsyncPool[Conn] = AsyncPool(create, max_size=1)
    held = await pool.acquire()
    task = asyncio.create_task(pool.acquire())
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.stats()["waiting"] == 0
    await pool.release(held)
    assert pool.stats()["idle"] == 1 and await pool.acquire() is held


async def test_cancelled_in_the_same_turn_as_its_grant_hands_the_resource_on() -> None:
    """The race: a release grants the resource to a waiter, and that waiter is
    cancelled before it runs.  The resource must go to the next waiter."""
    pool: AsyncPool[Conn] = AsyncPool(create, max_size=1)
    held = await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    second = asyncio.create_task(pool.acquire())
    await settle()
    await pool.release(held)  # granted to `first`, which has not run yet
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 1) is held
    stats = pool.stats()
    assert stats["in_use"] == 1 and stats["waiting"] == 0 and stats["open"] == 1


async def test_cancelled_after_a_slot_grant_gives_the_slot_back() -> None:
    pool: AsyncPool[Conn] = AsyncPool(create, max_size=1, close=aclose)
    held = await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    second = asyncio.create_task(pool.acquire())
    await settle()
    await pool.discard(held)  # frees the slot: granted to `first` to create in
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    new = await asyncio.wait_for(second, 1)
    assert new is not held and held.closed
    assert pool.stats()["open"] == 1


async def test_cancelled_during_create_frees_the_slot() -> None:
    started = asyncio.Event()

    async def slow_create() -> Conn:
        started.set()
        await asyncio.sleep(10)
        return Conn()

    pool: AsyncPool[Conn] = AsyncPool(slow_create, max_size=1)
    task = asyncio.create_task(pool.acquire())
    await started.wait()
    assert pool.stats()["open"] == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.stats()["open"] == 0


async def test_async_check_reset_close_callbacks() -> None:
    resets: list[Conn] = []

    async def check(c: Conn, idle: float) -> bool:
        return c.n % 2 == 1  # odd ones pass

    async def reset(c: Conn) -> None:
        resets.append(c)

    Conn.count = 0
    pool: AsyncPool[Conn] = AsyncPool(create, max_size=2, check=check, reset=reset, close=aclose)
    a = await pool.acquire()  # Conn1
    b = await pool.acquire()  # Conn2
    await pool.release(b)
    await pool.release(a)
    assert resets == [b, a]
    assert await pool.acquire() is a  # LIFO: a, odd, passes
    c = await pool.acquire()  # b (even) fails its check and is replaced
    assert b.closed and c.n == 3


async def test_connection_discards_on_error_and_close_fails_waiters() -> None:
    pool: AsyncPool[Conn] = AsyncPool(create, max_size=1, close=aclose)
    with pytest.raises(KeyError):
        async with pool.connection() as conn:
            raise KeyError("boom")
    assert conn.closed and pool.stats()["open"] == 0
    held = await pool.acquire()
    waiter = asyncio.create_task(pool.acquire())
    await settle()
    await pool.close()
    with pytest.raises(PoolClosed):
        await waiter
    with pytest.raises(PoolClosed):
        await pool.acquire()
    await pool.release(held)
    assert held.closed


# -- keyed -------------------------------------------------------------------------------


async def keyed_create(key: str) -> Conn:
    await asyncio.sleep(0)
    return Conn(key)


async def test_keyed_per_key_limit_and_eviction() -> None:
    pool: AsyncKeyedPool[str, Conn] = AsyncKeyedPool(
        keyed_create, max_size=3, max_per_key=2, close=aclose
    )
    a1 = await pool.acquire("a")
    a2 = await pool.acquire("a")
    with pytest.raises(PoolTimeout, match="for key 'a'"):
        await pool.acquire("a", timeout=0.01)  # per-key limit
    b1 = await pool.acquire("b")
    await pool.release(a1)
    await pool.release(b1)  # idle: a1 (colder), b1
    c1 = await pool.acquire("c")  # full: evicts the coldest idle, a1
    assert a1.closed and not b1.closed and c1.key == "c"
    stats = pool.stats()
    assert stats["evicted"] == 1 and stats["open"] == 3
    await pool.release(a2)
    await pool.release(c1)
    assert await pool.acquire("b") is b1


async def test_keyed_waiter_for_room_is_served_by_another_keys_release() -> None:
    pool: AsyncKeyedPool[str, Conn] = AsyncKeyedPool(
        keyed_create, max_size=2, max_per_key=2, close=aclose
    )
    a1 = await pool.acquire("a")
    b1 = await pool.acquire("b")
    waiter = asyncio.create_task(pool.acquire("c"))
    await settle()
    assert pool.stats()["waiting"] == 1
    await pool.release(a1)  # nobody wants "a": a1 is closed to make room for "c"
    c1 = await asyncio.wait_for(waiter, 1)
    assert c1.key == "c" and a1.closed
    await pool.release(b1)
    await pool.release(c1)
    assert pool.stats()["keys"] == 2  # "a" emptied and was dropped


async def test_keyed_same_key_waiter_gets_the_released_resource() -> None:
    pool: AsyncKeyedPool[str, Conn] = AsyncKeyedPool(keyed_create, max_size=4, max_per_key=1)
    a1 = await pool.acquire("a")
    waiter = asyncio.create_task(pool.acquire("a"))
    await settle()
    await pool.release(a1)
    assert await asyncio.wait_for(waiter, 1) is a1


async def test_keyed_cancelled_waiter_loses_nothing() -> None:
    pool: AsyncKeyedPool[str, Conn] = AsyncKeyedPool(keyed_create, max_size=1, max_per_key=1)
    a1 = await pool.acquire("a")
    first = asyncio.create_task(pool.acquire("b"))
    second = asyncio.create_task(pool.acquire("a"))
    await settle()
    await pool.release(a1)  # the oldest waiter wants "b": a1 is closed, "b" may create
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    got = await asyncio.wait_for(second, 1)
    assert got.key == "a"
    assert pool.stats()["open"] == 1


async def test_clear_and_set_max_lifetime() -> None:
    now = [100.0]
    closed: list[object] = []
    pool: AsyncPool[object] = AsyncPool(
        object, max_size=3, close=closed.append, clock=lambda: now[0], lifetime_jitter=0.0
    )
    a, b, c = await pool.acquire(), await pool.acquire(), await pool.acquire()
    await pool.release(a)
    await pool.release(b)
    await pool.clear()
    assert closed == [a, b] and pool.stats()["idle"] == 0 and pool.stats()["open"] == 1
    pool.set_max_lifetime(10.0)
    d = await pool.acquire()  # created with the lifetime; c was not
    await pool.release(c)
    await pool.release(d)
    now[0] += 11
    assert await pool.acquire() is c  # d (the hotter one) expired while idle
    assert closed == [a, b, d]


async def test_a_resource_past_its_lifetime_is_never_handed_out() -> None:
    """max_lifetime given at construction must switch off the core's clock-free
    fast path, as the thread pool does (found by the db layer: the async pool
    handed out a connection whose lifetime had run out while it was idle)."""
    now = [0.0]
    made = iter(range(100))
    closed: list[int] = []
    pool: AsyncPool[int] = AsyncPool(
        lambda: next(made),
        max_size=2,
        max_lifetime=10.0,
        lifetime_jitter=0.0,
        close=closed.append,
        clock=lambda: now[0],
    )
    first = await pool.acquire()
    await pool.release(first)
    now[0] = 11.0  # its lifetime ran out while it was idle
    second = await pool.acquire()
    assert second != first
    assert closed == [first]
    assert pool.stats()["expired"] == 1
    await pool.release(second)
    await pool.close()
