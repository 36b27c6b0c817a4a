"""The four front-ends - Pool, KeyedPool, AsyncPool, AsyncKeyedPool - offer the
same public API and behave alike where it means something: the same method
names, the ``*_nowait`` forms, ``clear``, ``set_max_lifetime``, a repr, and a
slot given back whichever callback a BaseException interrupts.

Each test runs every front-end through one driver: a sync pool's calls return
their result, an async pool's are run on the test's own event loop.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from surge.pool import AsyncKeyedPool, AsyncPool, KeyedPool, Pool, PoolTimeout

FRONT_ENDS = [Pool, KeyedPool, AsyncPool, AsyncKeyedPool]
PUBLIC = {
    "acquire",
    "acquire_nowait",
    "release",
    "release_nowait",
    "discard",
    "connection",
    "expire",
    "clear",
    "set_max_lifetime",
    "close",
    "stats",
}


class Driver:
    """One pool of any front-end, driven the same way: ``key`` is passed to the
    keyed ones only, awaitables are run to completion on one loop."""

    def __init__(self, cls: type, loop: asyncio.AbstractEventLoop, **options: Any) -> None:
        self.keyed = cls in (KeyedPool, AsyncKeyedPool)
        self.loop = loop
        create = options.pop("create", None) or (lambda *_: object())
        if self.keyed:
            options.setdefault("max_per_key", options["max_size"])
            self.pool = cls(create, **options)
        else:
            self.pool = cls(lambda: create(), **options)

    def run(self, value: Any) -> Any:
        return self.loop.run_until_complete(value) if inspect.isawaitable(value) else value

    def acquire(self, timeout: float | None = None) -> Any:
        if self.keyed:
            return self.run(self.pool.acquire("k", timeout))
        return self.run(self.pool.acquire(timeout))

    def acquire_nowait(self) -> Any:
        return self.pool.acquire_nowait("k") if self.keyed else self.pool.acquire_nowait()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.pool, name)
        return lambda *args: self.run(method(*args))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_every_front_end_has_the_same_public_methods() -> None:
    for cls in FRONT_ENDS:
        names = {n for n in dir(cls) if not n.startswith("_")}
        assert names == PUBLIC, (cls.__name__, names ^ PUBLIC)


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
def test_nowait_clear_lifetime_and_repr(cls: type, loop: asyncio.AbstractEventLoop) -> None:
    closed: list[object] = []
    now = [0.0]
    pool = Driver(cls, loop, max_size=2, close=closed.append, clock=lambda: now[0])
    assert pool.acquire_nowait() is None  # nothing idle: never creates
    first, second = pool.acquire(), pool.acquire()
    pool.release_nowait(first)
    pool.release(second)
    assert pool.acquire_nowait() is second  # LIFO
    pool.release(second)
    pool.clear()  # both idle ones closed
    assert sorted(map(id, closed)) == sorted(map(id, [first, second]))
    pool.set_max_lifetime(10.0)
    young = pool.acquire()
    pool.release(young)
    now[0] = 20.0  # past its lifetime: retired, not handed out
    assert pool.acquire() is not young
    assert young in closed
    text = repr(pool.pool)
    assert text.startswith(f"<{cls.__name__} max_size=2 ") and "in_use=1" in text
    pool.close()


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("step", ["check", "reset", "create"])
def test_a_callback_interrupted_by_a_base_exception_gives_the_slot_back(
    cls: type, step: str, loop: asyncio.AbstractEventLoop
) -> None:
    """KeyboardInterrupt inside check, reset or create propagates, and the pool
    of one has its slot back: the next acquire does not time out."""
    interrupt = [False]

    def callback(*_: object) -> object:
        if interrupt[0]:
            interrupt[0] = False
            raise KeyboardInterrupt
        return object() if step == "create" else True

    options: dict[str, Any] = {"max_size": 1, "timeout": 0.5, step: callback}
    pool = Driver(cls, loop, **options)
    if step != "create":
        pool.release(pool.acquire())  # an idle resource for check to look at
    interrupt[0] = True
    with pytest.raises(KeyboardInterrupt):
        pool.release(pool.acquire())
    try:
        pool.release(pool.acquire())
    except PoolTimeout:
        pytest.fail(f"{cls.__name__}: the slot leaked after an interrupted {step}")
    assert pool.stats()["in_use"] == 0
    pool.close()
