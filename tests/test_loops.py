"""Async generators iterated from synchronous code on a background loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator

import pytest

from surge.loops import iterate_in_thread


def test_every_item_arrives_in_order_none_included() -> None:
    async def items() -> AsyncGenerator[int | None, None]:
        for i in range(2000):  # more than the buffer: the producer waits for room
            yield None if i % 2 else i

    got = list(iterate_in_thread(items, name="t-items", buffer=16))
    assert got == [None if i % 2 else i for i in range(2000)]


def test_an_exception_in_the_generator_is_raised_to_the_consumer() -> None:
    async def failing() -> AsyncGenerator[int, None]:
        yield 1
        raise ValueError("bad input line 7")

    iterator = iterate_in_thread(failing, name="t-fail", buffer=4)
    assert next(iterator) == 1
    with pytest.raises(ValueError, match="line 7"):
        next(iterator)


def test_closing_early_stops_the_generator_and_its_thread() -> None:
    closed = threading.Event()

    async def endless() -> AsyncGenerator[int, None]:
        try:
            i = 0
            while True:
                yield i
                i += 1
                await asyncio.sleep(0)
        finally:
            closed.set()

    iterator = iterate_in_thread(endless, name="t-endless", buffer=8)
    assert [next(iterator) for _ in range(5)] == [0, 1, 2, 3, 4]
    iterator.close()
    assert closed.wait(5)
    assert not any(t.name == "t-endless" for t in threading.enumerate())


def test_closing_early_cancels_a_generator_that_is_waiting() -> None:
    """A consumer that leaves while the generator awaits something slow (a request
    in flight for up to --max-time) is not held until it finishes: the wait is
    cancelled and the generator closed."""
    cancelled = threading.Event()
    closed = threading.Event()

    async def slow() -> AsyncGenerator[int, None]:
        try:
            yield 1
            await asyncio.sleep(3600)
            yield 2
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finally:
            closed.set()

    iterator = iterate_in_thread(slow, name="t-slow", buffer=4)
    assert next(iterator) == 1
    closer = threading.Thread(target=iterator.close)  # returns once the thread has ended
    closer.start()
    closer.join(10)  # not an hour
    assert not closer.is_alive()
    assert cancelled.is_set() and closed.is_set()
    assert not any(t.name == "t-slow" for t in threading.enumerate())
