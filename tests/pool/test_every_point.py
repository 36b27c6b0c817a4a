"""An interruption at every point of a checkout and its return.

A signal handler that raises (KeyboardInterrupt, a timeout's alarm) can run at
any point of the pool's Python code, and of the ``with`` statement that uses
it, where CPython checks for signals (tests/_interrupt.py).  Seeded signals hit
a few of those points per run; this test hits each one, in order: it raises at
the Nth such point reached in the pool's modules (and in the caller's frame
that holds the ``with``), for N = 1, 2, ... until a run finishes first.  After each run the pool
must be whole: nothing in use, nobody waiting, every slot there (a checkout
within its timeout), and at most the one resource retired at that instant
left unclosed to its finaliser.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests._interrupt import each_point, interrupted_at

import surge.pool
from surge.pool import AsyncKeyedPool, AsyncPool, KeyedPool, Pool

#: An interruption landing in a checkout's finaliser is reported by Python as
#: "Exception ignored in __del__" (what a real signal there does too).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

POOL_CODE = str(Path(surge.pool.__file__).parent)
#: No checkout and return has this many points: a run that reaches it is stuck.
LIMIT = 5_000


class Res:
    def __init__(self, made: list[Res]) -> None:
        self.closed = False
        made.append(self)

    def close(self) -> None:
        self.closed = True


def plain(**options: Any) -> tuple[Any, Callable[[Any], Any], list[Res]]:
    made: list[Res] = []
    pool = Pool(lambda: Res(made), max_size=1, timeout=2, close=Res.close, **options)
    return pool, lambda p: p.connection(), made


def keyed(**options: Any) -> tuple[Any, Callable[[Any], Any], list[Res]]:
    made: list[Res] = []
    pool = KeyedPool(
        lambda key: Res(made), max_size=1, max_per_key=1, timeout=2, close=Res.close, **options
    )
    return pool, lambda p: p.connection("k"), made


def use_once(pool: Any, checkout: Callable[[Any], Any]) -> None:
    """What an application writes: ``with pool.connection() as conn: ...``."""
    with checkout(pool) as res:
        assert not res.closed


def assert_whole(pool: Any, checkout: Callable[[Any], Any], made: list[Res], where: str) -> None:
    stats = pool.stats()
    assert stats["in_use"] == 0 and stats["waiting"] == 0, (where, stats)
    assert stats["open"] == stats["idle"] <= 1, (where, stats)
    with checkout(pool) as res:  # the slot is there: within the timeout
        assert not res.closed
    # Every resource the pool counts is one it holds; one it retired (discarded,
    # expired) at the instant of the interruption may be left unclosed, to its
    # finaliser (a lock's release is a call, after which the handler can run),
    # but never more than that one.
    forgotten = len([r for r in made if not r.closed]) - pool.stats()["open"]
    assert forgotten in (0, 1), (where, forgotten, pool.stats())


def check_reset(res: Res, idle: float) -> bool:
    return True


SETUPS = {
    "pool, idle resource": (plain, {}, True),
    "pool, created on checkout": (plain, {}, False),
    "pool, check and reset": (plain, {"check": check_reset, "reset": lambda r: True}, True),
    "pool, reset fails": (plain, {"reset": lambda r: False}, True),
    "keyed, idle resource": (keyed, {}, True),
    "keyed, created on checkout": (keyed, {}, False),
    "keyed, check and reset": (keyed, {"check": check_reset, "reset": lambda r: True}, True),
}


@pytest.mark.parametrize("setup", list(SETUPS))
def test_an_interruption_at_any_point_leaves_the_pool_whole(setup: str) -> None:
    make, options, warm = SETUPS[setup]

    def run(n: int) -> str | None:
        pool, checkout, made = make(**options)
        try:
            if warm:
                use_once(pool, checkout)
            where = interrupted_at(
                n, partial(use_once, pool, checkout), use_once.__code__, POOL_CODE
            )
            if where is not None:
                assert_whole(pool, checkout, made, where)
            return where
        finally:
            pool.close()

    hit = each_point(run, LIMIT)
    assert hit > 5, f"only {hit} points were interrupted"


@pytest.mark.parametrize("kind", [plain, keyed], ids=["pool", "keyed"])
def test_an_interruption_at_any_point_of_a_waiting_checkout(kind: Any) -> None:
    """The checkout waits for the one resource, which another thread returns."""

    def run(n: int) -> str | None:
        pool, checkout, made = kind()
        try:
            taken = checkout(pool)
            res = taken.__enter__()
            assert not res.closed
            timer = threading.Timer(0.002, taken.__exit__, (None, None, None))
            timer.start()
            try:
                where = interrupted_at(
                    n, partial(use_once, pool, checkout), use_once.__code__, POOL_CODE
                )
            finally:
                timer.join(5)
            if where is not None:
                assert_whole(pool, checkout, made, where)
            return where
        finally:
            pool.close()

    hit = each_point(run, LIMIT)
    assert hit > 5, f"only {hit} points were interrupted"


def keyed_res(made: list[Res], key: str) -> Res:
    return Res(made)


def wait_for_b(pool: Any, served: list[Any]) -> None:
    with pool.connection("b") as res:
        served.append(res)


def until_one_waits(pool: Any) -> None:
    """Until the other thread waits in the pool (at most 2 s)."""
    for _ in range(2000):
        if pool.stats()["waiting"] == 1:
            return
        threading.Event().wait(0.001)


def give_back(held: list[Any]) -> None:
    """The end of a ``with`` block; the checkout then dies, as the statement's does."""
    held.pop().__exit__(None, None, None)


def test_an_interruption_at_any_point_of_a_return_that_serves_another_keys_waiter() -> None:
    """KeyedPool full with key "a"'s resource; another thread waits for key "b"
    (room in its key, none in the pool: a global waiter).  The return of "a",
    interrupted at each point, must still let "b" be served within its timeout."""

    def run(n: int) -> str | None:
        made: list[Res] = []
        pool = KeyedPool(partial(keyed_res, made), max_size=1, max_per_key=1, timeout=3)
        try:
            held = [pool.connection("a")]
            held[0].__enter__()
            served: list[Any] = []
            other = threading.Thread(target=wait_for_b, args=(pool, served), daemon=True)
            other.start()
            until_one_waits(pool)
            where = interrupted_at(n, partial(give_back, held), None, POOL_CODE)
            other.join(10)
            assert not other.is_alive() and served, (where, pool.stats())
            if where is not None:
                stats = pool.stats()
                assert stats["in_use"] == 0 and stats["waiting"] == 0, (where, stats)
            return where
        finally:
            pool.close()

    hit = each_point(run, LIMIT)
    assert hit > 5, f"only {hit} points were interrupted"


def hold_a(pool: Any, served: list[Any], errors: list[BaseException]) -> None:
    """Wait for key "a", then hold it a moment: it must stay open and ours."""
    try:
        with pool.connection("a") as res:
            closed_at_start = res.closed
            threading.Event().wait(0.01)
            served.append((closed_at_start, res.closed))
    except BaseException as e:  # a release of a resource the returner took back
        errors.append(e)


def test_an_interruption_at_any_point_of_a_return_that_hands_over_to_a_waiter() -> None:
    """KeyedPool with key "a" at its max_per_key; another thread waits for "a"
    (a waiter of the key).  The return, interrupted at each point, either hands
    the resource over or takes it back whole: the waiter never gets a resource
    the returner then closes, nor waits past its timeout."""

    def run(n: int) -> str | None:
        made: list[Res] = []
        pool = KeyedPool(
            partial(keyed_res, made), max_size=2, max_per_key=1, timeout=3, close=Res.close
        )
        try:
            held = [pool.connection("a")]
            held[0].__enter__()
            served: list[Any] = []
            errors: list[BaseException] = []
            other = threading.Thread(target=hold_a, args=(pool, served, errors), daemon=True)
            other.start()
            until_one_waits(pool)
            where = interrupted_at(n, partial(give_back, held), None, POOL_CODE)
            other.join(10)
            assert not other.is_alive() and not errors, (where, errors, pool.stats())
            assert served == [(False, False)], (where, served)
            if where is not None:
                stats = pool.stats()
                assert stats["in_use"] == 0 and stats["waiting"] == 0, (where, stats)
            return where
        finally:
            pool.close()

    hit = each_point(run, LIMIT)
    assert hit > 5, f"only {hit} points were interrupted"


@pytest.mark.parametrize("kind", [plain, keyed], ids=["pool", "keyed"])
def test_an_interruption_at_any_point_of_a_checkout_that_reclaims_an_orphan(kind: Any) -> None:
    """A ``with`` block left without its return (its checkout died: an orphan);
    the next checkout reclaims it, interrupted at each point: the orphan's slot
    is never lost (taken off the list before its discard, it would be)."""

    def run(n: int) -> str | None:
        pool, checkout, made = kind()
        try:
            taken = checkout(pool)
            taken.__enter__()
            del taken  # an orphan: its finaliser hands it to the pool
            where = interrupted_at(
                n, partial(use_once, pool, checkout), use_once.__code__, POOL_CODE
            )
            if where is not None:
                assert_whole(pool, checkout, made, where)
            return where
        finally:
            pool.close()

    hit = each_point(run, LIMIT)
    assert hit > 5, f"only {hit} points were interrupted"


# -- the asyncio pools: a cancellation at every await ----------------------------------
#
# An asyncio pool is interrupted only where it awaits: a task cancelled there (a
# Ctrl-C under asyncio.run cancels the main task).  Each run cancels the checkout
# after N turns of the loop, for N = 0, 1, 2, ... until it finishes first; the
# plain and the keyed pool go through the same cases, so a give-back that holds
# for one only fails here.


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def async_pool(kind: str, **options: Any) -> tuple[Any, tuple[str, ...], list[Res]]:
    made: list[Res] = []

    async def create(*_: object) -> Res:
        await asyncio.sleep(0)  # a connect: an await to be cancelled at
        return Res(made)

    async def close(res: Res) -> None:
        await asyncio.sleep(0)
        res.close()

    if kind == "plain":
        return AsyncPool(create, max_size=1, timeout=2, close=close, **options), (), made
    pool = AsyncKeyedPool(create, max_size=1, max_per_key=1, timeout=2, close=close, **options)
    return pool, ("k",), made


async def async_check(res: Res, idle: float) -> bool:
    await asyncio.sleep(0)
    return True


async def async_reset(res: Res) -> bool:
    await asyncio.sleep(0)
    return True


async def async_use(pool: Any, key: tuple[str, ...]) -> None:
    async with pool.connection(*key) as res:
        assert not res.closed
        await asyncio.sleep(0)


ASYNC_SETUPS = {
    "idle resource": ({}, True, False),
    "created on checkout": ({}, False, False),
    "check and reset": ({"check": async_check, "reset": async_reset}, True, False),
    "waiting for the one resource": ({}, True, True),
}


@pytest.mark.parametrize("setup", list(ASYNC_SETUPS))
@pytest.mark.parametrize("kind", ["plain", "keyed"])
def test_a_cancellation_at_any_await_leaves_an_async_pool_whole(kind: str, setup: str) -> None:
    options, warm, contended = ASYNC_SETUPS[setup]

    async def run(n: int) -> bool:
        pool, key, made = async_pool(kind, **options)
        try:
            if warm:
                await async_use(pool, key)
            holder = None
            if contended:  # another task holds the resource a few turns, then returns it
                held = await pool.acquire(*key)

                async def give_back_later() -> None:
                    await _turns(3)
                    await pool.release(held)

                holder = asyncio.ensure_future(give_back_later())
            task = asyncio.ensure_future(async_use(pool, key))
            await _turns(n)
            finished = task.done()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if holder is not None:
                await holder
            await _turns(4)  # what the cancelled task handed on has been closed
            stats = pool.stats()
            where = f"{kind}, {setup}, cancelled after {n} turns"
            assert stats["in_use"] == 0 and stats["waiting"] == 0, (where, stats)
            assert stats["open"] == stats["idle"] <= 1, (where, stats)
            await asyncio.wait_for(async_use(pool, key), 1)  # the slot is there
            unclosed = len([r for r in made if not r.closed]) - pool.stats()["open"]
            assert unclosed in (0, 1), (where, unclosed)  # at most the one being closed
            return not finished
        finally:
            await pool.close()

    n = 0
    while asyncio.run(run(n)):
        n += 1
    assert n >= 2, f"only {n} awaits were cancelled at"
