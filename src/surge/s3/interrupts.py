"""How a signal stops an ``surge s3`` command: one owner from the command's
first line to its exit.

* While the command's own module loads (``surge s3`` named on the command
  line): :func:`hold` keeps the first signal, to be acted on once the
  command starts - raised inside an import, it would reach click as its
  "Aborted!".
* Before the run (imports, options, the plan): :func:`stopping` installs
  handlers for SIGINT, SIGTERM and SIGHUP that raise :class:`Interrupted`
  where the code stands - nothing is under way yet, so nothing is left half
  done - and the command line turns it into one line and 128 + the signal's
  number.  Python's own SIGINT would reach click as "Aborted!" and exit 1, and
  SIGTERM's default would kill the process without its cleanup.
* During the run: :func:`run_cleanly` hands the signals to the event loop,
  where the first one cancels the work at its next await, so its cleanup runs
  (temporary files removed, multipart uploads aborted, a listing's tasks
  awaited: no "Task was destroyed but it is pending!").  The hand-over is made
  with the signals blocked: one that arrives meanwhile is taken by the loop,
  never lost or raised between the two.
* After it, the early handlers again (a signal while the summary is written).
* An exit that cannot wait (a second signal, or a cleanup past its bound)
  first tells what has requests sent and not answered (:func:`owe`: a
  delete's keys, each ``Unconfirmed``), so that nothing the server may have
  done goes unsaid.

Light on purpose: ``surge s3 ls`` loads it, not the transfers.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

T = TypeVar("T")

#: The signals that stop a command cleanly (as Ctrl-C does): a terminal
#: closed (SIGHUP) or a service stopped (SIGTERM) must not leave multipart
#: uploads stored and billed either.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: Seconds an interrupted run has to stop: its requests cancelled, its
#: temporary files removed, its multipart uploads aborted.  Past it the run is
#: left where it stands (see :func:`run_cleanly`).
CANCEL_GRACE = 5.0


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal: ``signum`` says which (SIGINT: Ctrl-C).
    ``status``: the shell's exit status for it, 128 + the signal's number."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def status(self) -> int:
        return 128 + self.signum


#: Per event loop, what must be told before an exit that cannot wait for
#: the answers it waits for (see :func:`owe`).
_owed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[Callable[[], None]]] = (
    weakref.WeakKeyDictionary()
)


def owe(tell_now: Callable[[], None]) -> None:
    """While requests are sent and unanswered on the running loop:
    ``tell_now()`` tells each of them unconfirmed (whether the server did it
    is not known), should the run have to exit without waiting
    (:func:`run_cleanly`'s second signal, or its grace past).  :func:`paid`
    once they are answered."""
    _owed.setdefault(asyncio.get_running_loop(), set()).add(tell_now)


def paid(tell_now: Callable[[], None]) -> None:
    """What :func:`owe` registered is told by its own answers now."""
    with suppress(RuntimeError, KeyError):
        _owed[asyncio.get_running_loop()].discard(tell_now)


def tell_owed(loop: asyncio.AbstractEventLoop) -> None:
    """Each :func:`owe` of ``loop``'s work told now (an exit that cannot wait)."""
    for tell_now in list(_owed.pop(loop, ())):
        with suppress(Exception):  # the exit goes on whatever one of them raises
            tell_now()


def _raise(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


#: The signal :func:`hold` kept, if one came.
_held: list[int] = []


def _keep(signum: int, _frame: object) -> None:
    if not _held:
        _held.append(signum)


def hold(signals: Sequence[int] = STOP_SIGNALS) -> None:
    """From now until :func:`stopping`, the first of ``signals`` is kept
    (and acted on there) instead of raised or killing the process: for a
    process that runs an s3 command and nothing else, while it loads."""
    if threading.current_thread() is threading.main_thread():
        for signum in signals:
            signal.signal(signum, _keep)


@contextmanager
def stopping(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, each of ``signals`` raises :class:`Interrupted` (and
    one :func:`hold` kept is raised as the block starts); the handlers before
    it are put back after.  Off the main thread (where no handler can be
    set), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise) for signum in signals}
    try:
        if _held:
            raise Interrupted(_held.pop())
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def _blocked(signals: Sequence[int]) -> Iterator[None]:
    """``signals`` held back by the kernel within the block (delivered after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def run_cleanly(
    loop: asyncio.AbstractEventLoop,
    work: Coroutine[Any, Any, T],
    *,
    signals: Sequence[int] = (signal.SIGINT,),
    grace: float = CANCEL_GRACE,
    again: Callable[[int], None] | None = None,
) -> T:
    """``loop.run_until_complete(work)``, where the first of ``signals``
    (Ctrl-C's SIGINT; the command line adds SIGTERM and SIGHUP) cancels the
    work at its next await - so its cleanup runs: temporary files removed,
    multipart uploads aborted - and then raises :class:`Interrupted`.
    Python's own handler would raise wherever the code happened to be,
    mid-bookkeeping.  The handlers in place before are put back after.

    A second signal, or a cleanup still running ``grace`` seconds after the
    first, stops at once: what the work owes (:func:`owe`) is told, then
    ``again(signum)`` (the command line exits there), else
    :class:`Interrupted` is raised out of the loop as it stands."""
    received: list[int] = []
    task: asyncio.Task[T] | None = None

    def stop_now(signum: int) -> None:
        tell_owed(loop)
        if again is not None:
            again(signum)
        raise Interrupted(signum)

    def interrupt(signum: int) -> None:
        if received:
            stop_now(signum)
        received.append(signum)
        if task is not None:
            task.cancel()
        loop.call_later(grace, overdue)

    def overdue() -> None:
        if task is not None and not task.done():
            stop_now(received[0])

    handled: list[tuple[int, Any]] = []
    main = threading.current_thread() is threading.main_thread()
    try:
        with _blocked(signals if main else ()):
            task = loop.create_task(work)
            if main:
                for signum in signals:
                    previous = signal.getsignal(signum)
                    try:
                        loop.add_signal_handler(signum, interrupt, signum)
                    except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                        continue
                    handled.append((signum, previous))
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if received:
            raise Interrupted(received[0]) from None
        raise
    except KeyboardInterrupt as e:
        if task is not None and not task.done():
            task.cancel()
            if not isinstance(e, Interrupted):  # Python's own (no handler here): clean up
                with suppress(BaseException):
                    loop.run_until_complete(task)
        raise
    finally:
        if task is None:  # stopped before it started: no "coroutine was never awaited"
            work.close()
        with _blocked([signum for signum, _ in handled]):
            for signum, previous in handled:
                loop.remove_signal_handler(signum)
                if previous is not None:
                    signal.signal(signum, previous)
