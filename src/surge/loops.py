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
import errno
import os
import queue
import resource
import threading
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import aclosing
from typing import Final, TypeVar

from surge.errors import LocalResourceError

T = TypeVar("T")

#: How often a producer facing a full queue checks whether the consumer left.
_FULL_POLL_S = 0.002


#: Descriptors an event loop holds once it runs: uvloop's epoll, io_uring,
#: eventfd, two pipes and its signal socketpair (9, counted in /proc/self/fd
#: with uvloop 0.21 on Linux 6); asyncio's epoll and self-pipe (3).
UVLOOP_DESCRIPTORS: Final = 9
ASYNCIO_DESCRIPTORS: Final = 3


def loop_descriptors() -> int:
    """The descriptors :func:`new_event_loop`'s loop takes."""
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        return ASYNCIO_DESCRIPTORS
    return UVLOOP_DESCRIPTORS


def free_descriptors() -> int | None:
    """How many more descriptors this process may open now (None: unlimited,
    or too many to count): the soft open-files limit less those open below it."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft > 1 << 16:
        return None
    try:
        names = os.listdir("/proc/self/fd")  # its own descriptor is among them
        used = sum(1 for name in names if name.isdigit() and int(name) < soft) - 1
    except OSError as exc:
        if exc.errno == errno.EMFILE:
            return 0
        used = 0  # no /proc: ask each number below the limit
        for fd in range(soft):
            try:
                os.fstat(fd)
            except OSError:
                continue
            used += 1
    return max(0, soft - used)


def require_descriptors(needed: int) -> None:
    """Raise :class:`~surge.errors.LocalResourceError` (one line, exit 2 on the
    command line) when fewer than ``needed`` descriptors can be opened: below
    what the loop and the run's files need, a run cannot even start - libuv
    aborts the process when its loop cannot get its own - and waiting for a
    descriptor to come back (what a run does once going) would wait for ever."""
    free = free_descriptors()
    if free is not None and free < needed:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        plural = "" if free == 1 else "s"
        raise LocalResourceError(
            f"the open-files limit ({limit}) leaves {free} descriptor{plural} free, and this "
            f"run needs at least {needed} (raise it with 'ulimit -n')"
        )


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
