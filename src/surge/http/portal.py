"""A portal: one event loop in a thread of its own, that any thread hands
coroutines to and waits on.

The synchronous :class:`surge.http.Client` is an :class:`~surge.http.AsyncClient`
behind a portal, so that threads sharing one client run their requests at the
same time on one pool of connections, each finishing in its own time (a lock
around a loop run in the caller's thread, as before, made a 10 ms request wait
8 s behind eight 1 s ones).  Anything else that needs blocking calls into
asyncio code - an httpx transport, a requests adapter - can sit on the same
layer: :meth:`Portal.call` runs a coroutine there and returns its result or
raises its exception in the calling thread.

Why a thread and a hand-off, not the loop run in each caller's thread: a
connection belongs to one loop, and a loop runs in one thread at a time, so
threads that take turns running it wait on each other, and a call from a
signal handler (which runs in the middle of the main thread's own call) could
never run.  The hand-off costs less than it seems: on uvloop, a keep-alive GET
from one thread costs 96-131 us of CPU through the portal, against 118-155 us
for ``run_until_complete`` in the caller's thread (asyncio's loop; 157-190 us
through a portal on asyncio's loop), measured side by side on the simulated
web (benchmarks/api.py's ``threads`` section has the rows that count).  Each
call is one ``call_soon_threadsafe`` (a wake-up of the loop) and one lock the
caller waits on, released by the task's end: no ``concurrent.futures.Future``
and no ``run_coroutine_threadsafe`` (a second future and two callbacks).

Where a portal is used from:

* any thread, a thread pool, ``asyncio.to_thread``: the caller blocks, the loop
  runs every caller's coroutine at once;
* a thread that runs an event loop of its own (async code, Jupyter): the call
  blocks that loop as a requests call would; the portal's loop is another one;
* a signal handler: it runs in the main thread, maybe in the middle of that
  thread's own call, which only waits - the portal's loop goes on and serves
  the handler's call too;
* the portal's own thread (a callback of a request calling the synchronous API
  again): that would wait for itself for ever, so it is a ``RuntimeError``
  saying so.

What a call runs of its caller's own code - a request body's reads (a
generator, a file, a pipe) - runs in the calling thread, never on the loop,
where one caller's blocking read would stall every other caller's requests:
the call is given a :class:`Caller`, the coroutine asks it for each read
(``await caller.run(read)``), and the waiting thread runs those reads in turn
until its call is done (httpx and requests read a body in the calling thread
too).  A call without one costs what it did: its thread only waits.

Ctrl-C in a waiting thread cancels that call's task on the loop and raises at
once.  :meth:`Portal.close` (from any thread, again and again) cancels the
calls in flight - their callers get ``RuntimeError`` - runs a last coroutine
(the client's close), stops the loop and waits for its thread (not when called
from that thread).

``os.fork()``: the child has no portal thread, and the loop's epoll instance,
self-pipe and sockets are the parent's too - closing them in the child, even
through a finalizer, would unregister them from the parent's loop.  So every
portal alive at a fork is marked forked in the child (``os.register_at_fork``:
nothing on the path of a call) and kept referenced, untouched, for the rest of
the child's life; a call on it raises ``PortalForked``, and the synchronous
client takes that as the sign to build a fresh portal and client state.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import os
import signal
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from queue import Empty, SimpleQueue
from typing import Any, Generic, TypeVar

from surge.loops import new_event_loop

T = TypeVar("T")

#: How long ``close()`` waits for the loop's last coroutine and thread.
CLOSE_TIMEOUT_S = 10.0

#: How often the main thread, waiting for a call, wakes to run signal handlers.
#: A signal sent to the process may be taken by any thread that does not block
#: it, and CPython runs the handler only when the main thread next runs Python
#: code: a main thread asleep on a lock would not wake for Ctrl-C until the
#: response came (seen in CI-like load with server threads about).  Waking
#: every 50 ms costs nothing measurable; other threads never run handlers and
#: sleep until their outcome is in.
_SIGNAL_POLL_S = 0.05

#: The thread CPython runs signal handlers in (the forking thread, in a child).
_main_thread = threading.main_thread().ident

#: What a fork left behind in this (child) process, kept referenced so that no
#: finalizer ever closes the parent's descriptors (see the module's notes).
_ABANDONED: list[object] = []


class PortalClosed(RuntimeError):
    """The portal (its client) was closed: before the call, or while it ran."""


class PortalForked(PortalClosed):
    """The portal was made in the parent of this forked process."""


class Caller:
    """The thread waiting on one portal call, as the place where that call's
    blocking code of the caller's own runs (a request body's reads).

    On the loop, :meth:`run` hands a function to the waiting thread and gives a
    future of its result; the thread runs each function in turn, in the order
    asked, while it waits for its call (:meth:`Portal.call` with this caller).
    A function asked for after the call ended, or whose future was cancelled
    before the thread came to it, is not run."""

    __slots__ = ("_jobs", "finished")

    def __init__(self) -> None:
        self._jobs: SimpleQueue[Any] = SimpleQueue()
        self.finished = False  # set on the loop when the call's task ended

    def run(self, function: Callable[[], T]) -> asyncio.Future[T]:
        """(On the loop.)  ``function()`` run in the calling thread: its future."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put((function, future))
        return future

    def _end(self) -> None:
        """(On the loop.)  The call's outcome is in: wake its thread."""
        self.finished = True
        self._jobs.put(None)

    def _serve(self, loop: asyncio.AbstractEventLoop, main: bool) -> None:
        """(In the calling thread.)  Run what the loop asks until the call ends."""
        jobs = self._jobs
        while True:
            if main:  # where signal handlers run: see _SIGNAL_POLL_S
                try:
                    job = jobs.get(True, _SIGNAL_POLL_S)
                except Empty:
                    continue
            else:
                job = jobs.get()
            if job is None:
                return
            function, future = job
            if self.finished or future.cancelled():
                continue  # nobody waits for it: a read that could block for nothing
            try:
                value = function()
            except Exception as error:  # the caller's code failed: the call's failure
                outcome: tuple[Any, BaseException | None] = (None, error)
            else:
                outcome = (value, None)
            with contextlib.suppress(RuntimeError):  # the loop closed: the call ended
                loop.call_soon_threadsafe(_settle, future, *outcome)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


class _Call(Generic[T]):
    """One coroutine handed to the loop, and how its caller learns the outcome:
    the call is its task's done callback (no closure per call)."""

    __slots__ = ("caller", "coroutine", "done", "error", "task", "value")

    def __init__(self, coroutine: Coroutine[Any, Any, T], caller: Caller | None) -> None:
        self.coroutine = coroutine
        self.caller = caller
        self.done = _thread.allocate_lock()  # held until the outcome is in
        self.done.acquire()
        self.task: asyncio.Task[T] | None = None
        self.value: T | None = None
        self.error: BaseException | None = None

    def __call__(self, task: asyncio.Task[T]) -> None:
        """The task ended (on the loop): its outcome, then the caller wakes."""
        self.task = None
        if task.cancelled():
            self.error = PortalClosed("the client was closed while the call ran")
        else:
            error = task.exception()
            if error is None:
                self.value = task.result()
            else:
                self.error = error
        self.done.release()
        caller = self.caller
        if caller is not None:
            caller._end()

    def wake(self) -> None:
        """The outcome is in (set by hand, with no task)."""
        self.done.release()
        if self.caller is not None:
            self.caller._end()


class Portal:
    """An event loop (uvloop when installed) running in a daemon thread called
    ``name``, started at once; :meth:`call` runs coroutines on it."""

    def __init__(
        self,
        name: str = "surge-portal",
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = new_event_loop,
    ) -> None:
        self._loop = loop_factory()
        self._closing = False
        self._forked = False
        self._lock = threading.RLock()  # close()'s state; reentrant: a signal handler
        self._stopped = threading.Event()
        started = threading.Event()
        self._thread = threading.Thread(
            target=_run_loop, args=(self._loop, started, self._stopped), name=name, daemon=True
        )
        self._thread.start()
        started.wait()
        self._ident = self._thread.ident
        _LIVE.add(self)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def forked(self) -> bool:
        """Made in the parent of this forked process (and so closed here)."""
        return self._forked

    def call(self, coroutine: Coroutine[Any, Any, T], caller: Caller | None = None) -> T:
        """Run ``coroutine`` on the portal's loop and wait for it: its result,
        or its exception raised here.  ``caller``: the :class:`Caller` the
        coroutine hands its blocking code of the caller's to, run here while
        this thread waits."""
        if self._closing or _thread.get_ident() == self._ident:
            coroutine.close()  # never awaited: no "was never awaited" warning
            raise self._refusal()
        call = _Call(coroutine, caller)
        try:
            self._loop.call_soon_threadsafe(self._begin, call)
        except RuntimeError:  # the loop closed under us (close() in another thread)
            coroutine.close()
            raise PortalClosed("the client is closed") from None
        done = call.done
        try:
            if caller is not None:
                caller._serve(self._loop, _thread.get_ident() == _main_thread)
                done.acquire()  # released before the caller was told: no wait
            elif _thread.get_ident() != _main_thread:
                done.acquire()
            else:  # where signal handlers run: see _SIGNAL_POLL_S
                while not done.acquire(True, _SIGNAL_POLL_S):
                    pass
        except BaseException:  # Ctrl-C (or a signal handler's exception) while waiting
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._cancel, call)
            raise
        error = call.error
        if error is not None:
            call.error = None  # no cycle through the traceback
            raise error
        return call.value  # type: ignore[return-value]

    def _refusal(self) -> PortalClosed | RuntimeError:
        if self._forked:
            return PortalForked("the client was made before os.fork(), in the parent process")
        if self._closing:
            return PortalClosed("the client is closed")
        return RuntimeError(
            "a synchronous surge client called from its own event loop's thread (from a"
            " callback of one of its requests) would wait for itself: use the AsyncClient"
            " there (client.async_client)"
        )

    # -- on the loop ----------------------------------------------------------------------

    def _begin(self, call: _Call[Any]) -> None:
        if self._closing:
            call.coroutine.close()
            call.error = PortalClosed("the client was closed")
            call.wake()
            return
        task = call.task = self._loop.create_task(call.coroutine)
        task.add_done_callback(call)

    def _cancel(self, call: _Call[Any]) -> None:
        if call.task is not None:
            call.task.cancel()

    async def _shutdown(self, final: Callable[[], Awaitable[Any]] | None) -> None:
        # Every other task on this loop is a call's (or a request's own).
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        try:
            if final is not None:
                await asyncio.wait_for(final(), CLOSE_TIMEOUT_S)
        finally:
            self._loop.stop()

    # -- closing ------------------------------------------------------------------------------

    def close(self, final: Callable[[], Awaitable[Any]] | None = None) -> None:
        """Cancel the calls in flight, run ``final()`` on the loop (the client's
        own close), stop the loop and wait for its thread; again: nothing.
        From any thread, the loop's own included (then without the wait)."""
        with self._lock:
            if self._closing:
                first = False
            else:
                self._closing = first = True
        if self._forked:
            return
        if first:
            try:
                self._loop.call_soon_threadsafe(self._start_shutdown, final)
            except RuntimeError:  # pragma: no cover - the loop is gone already
                return
        if _thread.get_ident() == self._ident or sys.is_finalizing():
            return  # the loop's own thread cannot wait for itself; at exit, nobody waits
        self._stopped.wait(CLOSE_TIMEOUT_S)

    def _start_shutdown(self, final: Callable[[], Awaitable[Any]] | None) -> None:
        task = self._loop.create_task(self._shutdown(final))
        task.add_done_callback(_log_failure)

    def _after_fork_in_child(self) -> None:
        self._forked = self._closing = True
        self._lock = threading.RLock()
        _ABANDONED.append(self._loop)


def _run_loop(
    loop: asyncio.AbstractEventLoop, started: threading.Event, stopped: threading.Event
) -> None:
    """The portal's thread: the loop until stopped, then closed.  It refers to the
    loop, not to the portal, so that an unclosed client can still be collected."""
    if hasattr(signal, "pthread_sigmask"):  # signals are for the threads that handle them
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _SYNCHRONOUS)
    asyncio.set_event_loop(loop)
    started.set()
    try:
        while True:
            try:
                loop.run_forever()
                break  # stopped: the portal's close
            except BaseException:
                # A call's coroutine that raised SystemExit or KeyboardInterrupt
                # (a request's callback did) has that exception as its result,
                # which its caller gets; asyncio also raises it out of
                # run_forever, which would end the loop of every other caller.
                continue
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
            stopped.set()


#: Signals a thread raises on itself (a fault): never blocked (POSIX leaves a
#: blocked one undefined).
_SYNCHRONOUS = {
    getattr(signal, name)
    for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGSYS")
    if hasattr(signal, name)
}


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        from surge._log import logger

        logger("surge.http").warning("closing a client failed", exc_info=task.exception())


#: Every portal alive, for the fork hook.
_LIVE: weakref.WeakSet[Portal] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _main_thread
    _main_thread = _thread.get_ident()
    for portal in list(_LIVE):
        portal._after_fork_in_child()
    _LIVE.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
