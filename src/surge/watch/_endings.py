"""How a recorded process ends, and the hooks that still hand its recording over
when it ends by force.

A process that returns from its program, calls ``sys.exit`` or dies of an
uncaught exception runs its ``atexit`` handlers: the recording is written
there, whole.  Three endings skip them, and each gets a hook here, in the
process that started the recording only - but for ``os._exit`` in a forked
child, which is how a forked worker ends once its work is done (the
recording is written there, whole; a signal's handler in a child writes
nothing: it may have interrupted anything, in a copy of a process whose other
threads are gone):

- **SIGTERM, SIGHUP** (how services are stopped, how a terminal closing ends a
  program): a handler, installed only where the program has none yet (a
  program's own handler, installed later, replaces it and is the program's
  to run), writes the recording, then puts the default action back and sends
  the signal again, so that the process still dies of it (exit status 143,
  129);
- **os._exit**: the recording is written, then the real ``os._exit`` runs;
- **SIGINT**: Python's own handler raises KeyboardInterrupt, which unwinds to
  the normal exit; ``sys.excepthook`` notes it (and any uncaught exception)
  so the recording says how the program ended.

A recording written at a forced ending is *partial*: what was in flight then is
cut off (marked ``unfinished``), and whatever the program would have done after
is not there.  Nothing is written to the program's stdout or stderr, and
neither is flushed: its output stays exactly what it would have been.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType, TracebackType

from surge.watch._log import failed

#: Signals whose default action kills the process without running atexit, and
#: which programs are commonly stopped with.
FORCED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: Endings after which a recording is partial (beside every signal's name).
INTERRUPTED = "KeyboardInterrupt"


def is_partial(ended_by: str | None) -> bool:
    """Whether a recording that ended so is cut short: by a signal, os._exit or
    Ctrl-C (an uncaught exception, or an exit, ends the program's own way)."""
    if ended_by is None:
        return False
    return ended_by.startswith(("SIG", "os._exit")) or ended_by == INTERRUPTED


class Endings:
    """The hooks for one process: ``finish(ended_by)`` runs once, at the first
    forced ending (``"SIGTERM"``, ``"os._exit(3)"``); :attr:`uncaught` is the
    uncaught exception the program ended with, if any (``"KeyboardInterrupt"``,
    ``"uncaught ValueError"``), for the ``atexit`` path to report."""

    def __init__(self, finish: Callable[[str | None], None]) -> None:
        self.finish: Callable[[str | None], None] = finish
        self.pid = os.getpid()
        self.uncaught: str | None = None
        self.done = False
        self._real_exit: Callable[[int], None] = os._exit

    def install(self) -> Endings:
        for signum in FORCED_SIGNALS:
            # not the main thread, or a signal this platform lacks: no hook
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                if signal.getsignal(signum) is signal.SIG_DFL:
                    signal.signal(signum, self._signalled)
        self._real_exit = os._exit
        setattr(os, "_exit", self._exit)  # noqa: B010 - mypy: os._exit is a function
        previous = sys.excepthook

        def excepthook(
            kind: type[BaseException], value: BaseException, tb: TracebackType | None
        ) -> None:
            if os.getpid() == self.pid:
                name = kind.__name__
                self.uncaught = INTERRUPTED if name == INTERRUPTED else f"uncaught {name}"
            previous(kind, value, tb)

        sys.excepthook = excepthook
        return self

    def forked(self) -> None:
        """In a forked child: the signals this put its handler on get their
        default action back, so that the child dies of one as it would unwatched
        (``Pool.terminate``'s SIGTERM), by the kernel, whatever its Python is
        doing - a handler in a child could be left waiting on a lock another
        thread held at the fork."""
        for signum in FORCED_SIGNALS:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                if signal.getsignal(signum) == self._signalled:
                    signal.signal(signum, signal.SIG_DFL)

    def end(self, ended_by: str, *, forked_too: bool = False) -> None:
        """Run ``finish`` once, in the process that started the recording (and,
        ``forked_too``, in a forked child: with ``None``, its normal end)."""
        forked = os.getpid() != self.pid
        if self.done or (forked and not forked_too):
            return
        self.done = True
        try:
            self.finish(None if forked else ended_by)
        except Exception:
            failed(f"writing the recording at {ended_by}")

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        self.end(signal.Signals(signum).name)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _exit(self, status: int) -> None:
        self.end(f"os._exit({status})", forked_too=True)
        self._real_exit(status)
