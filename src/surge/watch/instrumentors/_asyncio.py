"""A blocked event loop, from a lag monitor: each asyncio loop, while it runs
(``BaseEventLoop.run_forever``, which ``asyncio.run`` and ``run_until_complete``
go through), has a heartbeat callback due every :data:`TICK` seconds.  A beat
that runs :data:`BLOCKED` or more after it was due means the loop ran something
else all that while: a ``loop.blocked`` span from when it was due to when it
ran.  A watchdog thread looks every :data:`TICK` too: a beat overdue by half of
:data:`BLOCKED` has the loop thread's stack sampled then (the innermost frame of
the program's own code: the line the loop was stuck on), which becomes the
span's site.

Lateness that is not the loop's own is not counted (a busy machine is not a
blocked loop): unless the watchdog saw the loop's thread running code of
something other than the loop itself (a callback: the program's, a library's),
the time the thread waited for a CPU meanwhile (its run-queue wait,
``/proc/<pid>/task/<tid>/schedstat`` on Linux) comes off the lateness.  A
callback seen running keeps its whole lateness: it held the loop, CPU or not.

Nothing is added per callback: the cost is one beat per loop per :data:`TICK`.
The watchdog starts with the first loop (a program that never runs one has no
thread), a raw ``_thread`` that ends when the recording stops.  uvloop's loop
runs in C, its ``run_forever`` is not seen.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import sys
import time
from types import ModuleType
from typing import Any

from surge.watch.instrument import Instrumentor, failed
from surge.watch.recorder import Site, clock, site_in

#: A beat this late means the loop was blocked (asyncio's own
#: ``slow_callback_duration`` in debug mode).
BLOCKED = 0.1
#: How often a loop beats, and the watchdog looks.
TICK = 0.025


def _open_schedstat() -> int | None:
    """This thread's scheduler statistics, kept open (a pread re-reads them), or
    None where there are none (not Linux, or no such file)."""
    try:
        return os.open(f"/proc/self/task/{_thread.get_native_id()}/schedstat", os.O_RDONLY)
    except (OSError, AttributeError):
        return None


def _queued_s(fd: int | None) -> float:
    """How long the thread has waited, runnable, for a CPU in all (seconds)."""
    if fd is None:
        return 0.0
    try:
        return int(os.pread(fd, 64, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class _Beat:
    __slots__ = ("busy", "due", "handle", "ident", "queued", "schedstat", "site")

    def __init__(self) -> None:
        self.ident = _thread.get_ident()
        self.due = 0.0
        self.site: Site | None = None
        self.busy = False  # sampled, overdue, running other code than the loop's
        self.handle: Any = None
        self.schedstat = _open_schedstat()
        self.queued = 0.0  # the thread's run-queue wait when the beat was scheduled

    def close(self) -> None:
        if self.schedstat is not None:
            with contextlib.suppress(OSError):
                os.close(self.schedstat)
            self.schedstat = None


class AsyncioInstrumentor(Instrumentor):
    library = "asyncio"
    modules = ("asyncio.base_events",)
    shown = ("event loops", ("asyncio's loop lag",))

    def apply(self, module: ModuleType) -> None:
        self.beats: dict[int, _Beat] = {}  # per loop running now
        # the loop's own code (its selector wait, its bookkeeping): asyncio's
        # files, and selectors'
        self.loop_dir = os.path.dirname(module.__file__ or "") + os.sep
        self.watching = False
        with contextlib.suppress(AttributeError):
            os.register_at_fork(after_in_child=self._forked)
        self.replace(module.BaseEventLoop, "run_forever", self._run_forever)

    def _forked(self) -> None:
        self.watching = False  # the watchdog thread is the parent's
        self.beats.clear()

    def _run_forever(self, original: Any) -> Any:
        instrumentor = self

        def run_forever(loop: Any) -> Any:
            if not instrumentor.on:
                return original(loop)
            beat = None
            try:
                beat = _Beat()
                instrumentor._schedule(loop, beat)
                instrumentor.beats[id(loop)] = beat
                if not instrumentor.watching:
                    instrumentor._start_watchdog()
            except Exception:
                failed("asyncio run_forever")
            try:
                return original(loop)
            finally:
                instrumentor.beats.pop(id(loop), None)
                if beat is not None:
                    if beat.handle is not None:
                        beat.handle.cancel()
                    beat.close()

        return run_forever

    def _schedule(self, loop: Any, beat: _Beat, queued: float | None = None) -> None:
        """The next beat; ``queued``: the thread's run-queue wait now, if read."""
        beat.due = clock() + TICK
        beat.site = None
        beat.busy = False
        beat.queued = _queued_s(beat.schedstat) if queued is None else queued
        beat.handle = loop.call_later(TICK, self._beat, loop, beat)

    def _beat(self, loop: Any, beat: _Beat) -> None:
        try:
            now = clock()
            queued = _queued_s(beat.schedstat)  # one read: this beat's end, the next's start
            if now - beat.due >= BLOCKED and self.on:
                # the part of an idle loop's lateness spent waiting for a CPU
                # is the machine's
                start = beat.due
                if not beat.busy:
                    start += max(0.0, queued - beat.queued)
                if now - start >= BLOCKED:
                    self.recorder.loop_blocked("event loop lag", start, now, beat.site)
            self._schedule(loop, beat, queued)
        except Exception:
            failed("asyncio heartbeat")

    def _start_watchdog(self) -> None:
        self.watching = True
        try:
            _thread.start_new_thread(self._watch, ())
        except Exception:
            self.watching = False
            failed("starting the asyncio watchdog")

    def _watch(self) -> None:
        sleep = time.sleep
        while self.on and self.watching:
            sleep(TICK)
            try:
                now = clock()
                frames = None
                for beat in list(self.beats.values()):
                    if beat.site is None and now - beat.due >= BLOCKED / 2:
                        if frames is None:
                            frames = sys._current_frames()
                        frame = frames.get(beat.ident)
                        if frame is not None:
                            beat.site = site_in(frame)
                            name = frame.f_code.co_filename
                            beat.busy = not (
                                name.startswith(self.loop_dir) or name.endswith("selectors.py")
                            )
            except Exception:
                failed("the asyncio watchdog")
        self.watching = False
