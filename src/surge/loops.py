"""Event loops for surge's own threads: the fast loop, and async generators
driven from synchronous code.

``surge.fetch_all`` and ``surge.s3.list_all`` are plain iterators over async
engines. Each runs its engine on a loop of its own in a background thread, so
they work where a loop is already running (Jupyter, an async framework's sync
view), and hands results over through a bounded queue: a slow consumer slows the
engine instead of growing memory, and closing the iterator early stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import aclosing
from typing import TypeVar

T = TypeVar("T")

#: How often a producer facing a full queue checks whether the consumer left.
_FULL_POLL_S = 0.002


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (the fast loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - depends on the environment
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def iterate_in_thread(
    make: Callable[[], AsyncGenerator[T, None]], *, name: str, buffer: int
) -> Generator[T, None, None]:
    """Iterate ``make()`` (an async generator) from synchronous code.

    The generator runs on a new event loop in a daemon thread called ``name``;
    at most ``buffer`` items wait in between. An exception in the generator is
    raised here; closing this iterator cancels the generator where it waits (a
    request in flight is abandoned, not waited for), closes it (``aclose``) and
    waits for the thread.
    """
    handoff: queue.Queue[T | BaseException | _Done] = queue.Queue(maxsize=buffer)
    stop = threading.Event()
    loop = new_event_loop()

    async def produce() -> None:
        try:
            async with aclosing(make()) as items:
                async for item in items:
                    while True:
                        try:
                            handoff.put_nowait(item)
                            break
                        except queue.Full:
                            if stop.is_set():
                                return
                            await asyncio.sleep(_FULL_POLL_S)
                    if stop.is_set():
                        return
        except asyncio.CancelledError:
            if stop.is_set():
                return  # the consumer left: cancelled on purpose, nobody to tell
            raise
        except BaseException as e:
            handoff.put(e)
            return
        handoff.put(_DONE)

    producer = loop.create_task(produce())

    def thread_main() -> None:
        try:
            loop.run_until_complete(producer)
        finally:
            loop.close()

    thread = threading.Thread(target=thread_main, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if isinstance(item, _Done):
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        # The producer may be waiting on the generator (a request in flight for
        # up to --max-time): cancel it there, so that leaving early is prompt
        # and what was in flight is abandoned, not waited for.
        with contextlib.suppress(RuntimeError):  # the loop has closed already
            loop.call_soon_threadsafe(producer.cancel)
        while thread.is_alive():  # let the producer see the stop and finish
            try:
                handoff.get_nowait()
            except queue.Empty:
                thread.join(0.01)


class _Done:
    """The end of the items (a sentinel no async generator can yield by accident)."""


_DONE = _Done()
