"""The checkout and return of an idle resource make a fixed, small number of
Python calls, on every front-end: counted with ``sys.setprofile``, never timed.

The budgets are what the hot paths make today (the pool's own method, the
core's, nothing more); a shared step that slips into a hot path (an adapter, a
helper "for symmetry") shows here as one call more.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from surge.pool import AsyncKeyedPool, AsyncPool, KeyedPool, Pool


class Res:
    pass


def python_calls(step: Callable[[], object], n: int = 50) -> float:
    """Python-level calls per ``step`` (the step's own frame not counted)."""
    step()  # warm: the resource exists and is idle
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(profile)
    try:
        for _ in range(n):
            step()
    finally:
        sys.setprofile(None)
    return calls / n - 1


def sync_step(coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run a coroutine that never suspends (an idle resource) without a loop's calls."""

    def step() -> None:
        coro = coro_fn()
        try:
            coro.send(None)
        except StopIteration:
            return
        raise AssertionError("the hot path awaited")

    return step


def cases() -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (a checkout and return, the Python calls it may make)."""
    pool: Pool[Res] = Pool(Res, max_size=2)
    keyed: KeyedPool[str, Res] = KeyedPool(lambda key: Res(), max_size=2, max_per_key=2)
    apool: AsyncPool[Res] = AsyncPool(Res, max_size=2)
    akeyed: AsyncKeyedPool[str, Res] = AsyncKeyedPool(lambda key: Res(), max_size=2, max_per_key=2)
    checked: Pool[Res] = Pool(
        Res, max_size=2, check=lambda r, idle: True, reset=lambda r: True
    )  # surge.db's shape: a check and a reset on every cycle

    def plain() -> None:
        pool.release(pool.acquire())

    def plain_with() -> None:
        with pool.connection():
            pass

    def keyed_cycle() -> None:
        keyed.release(keyed.acquire("k"))

    def checked_cycle() -> None:
        checked.release(checked.acquire())

    async def async_plain() -> None:
        await apool.release(await apool.acquire())

    async def async_keyed() -> None:  # the HTTP client's keep-alive request
        akeyed.release_nowait(await akeyed.acquire("k"))

    async def async_with() -> None:
        async with apool.connection():
            pass

    return {
        "Pool acquire+release": (plain, 4),
        "Pool with connection()": (plain_with, 11),
        "KeyedPool acquire+release": (keyed_cycle, 6),
        "Pool with check and reset": (checked_cycle, 12),
        "AsyncPool acquire+release": (sync_step(async_plain), 6),
        "AsyncKeyedPool acquire+release_nowait": (sync_step(async_keyed), 7),
        "AsyncPool async with connection()": (sync_step(async_with), 10),
    }


@pytest.mark.parametrize("name", list(cases()))
def test_a_checkout_and_return_make_no_more_python_calls_than_their_budget(name: str) -> None:
    step, budget = cases()[name]
    calls = python_calls(step)
    assert calls <= budget, f"{name}: {calls:g} Python calls, budget {budget}"
