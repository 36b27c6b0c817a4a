"""The recording inside a process that ``surge watch -- CMD`` started: begun by
the bootstrap ``sitecustomize`` before the program's first line, ended at exit
(``atexit``: after the program's own exit handlers and its non-daemon threads),
when the data goes to ``$SURGE_WATCH_DIR/<pid>.json`` for ``surge watch`` to read.

Every Python process the command starts with the environment it inherits is
recorded, each to its own file.  SIGTERM, SIGHUP and ``os._exit`` write the
file too, marked partial (:mod:`surge.watch._endings`), unless ``surge watch``
itself is gone (killed: nobody would read it).  A process killed by SIGKILL
writes nothing.

A forked child (``os.fork``, multiprocessing's fork and forkserver workers,
ProcessPoolExecutor's) records afresh from the fork and writes its file at its
``os._exit`` - how those workers always end, once their work is done - or at
its exit.  At the fork it leaves a ``<pid>.lost`` marker (its parent's pid)
that its file replaces: a child that dies of a signal (``Pool.terminate``'s
SIGTERM) writes nothing, and the marker left says so in the summary.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from surge.watch import _stderr
from surge.watch._endings import Endings
from surge.watch.instrument import failed, set_log
from surge.watch.session import Recording

#: The environment ``surge watch`` sets for its command.
DIR_VARIABLE = "SURGE_WATCH_DIR"
LOG_VARIABLE = "SURGE_WATCH_LOG"
PATH_VARIABLE = "SURGE_WATCH_PATH"
#: surge watch's own pid: a forced ending writes nothing once it is gone.
WATCHER_VARIABLE = "SURGE_WATCH_PID"
#: A forked child's marker, ``<pid>.lost`` holding its parent's pid, until its
#: recording is written.
LOST_SUFFIX = ".lost"


def _watcher() -> tuple[int | None, bool]:
    """surge watch's pid, and whether it is this process's parent."""
    try:
        pid = int(os.environ[WATCHER_VARIABLE])
    except (KeyError, ValueError):
        return None, False
    return pid, os.getppid() == pid


def _gone(watcher: int | None, direct: bool) -> bool:
    """Whether surge watch has died (a child of its: the parent changed, as soon as
    it died; deeper: its pid is gone)."""
    if watcher is None:
        return False
    if direct:
        return os.getppid() != watcher
    try:
        os.kill(watcher, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def start() -> None:
    directory = os.environ.get(DIR_VARIABLE)
    if not directory:
        return
    set_log(os.environ.get(LOG_VARIABLE) or os.path.join(directory, "watch.log"))
    try:
        recording = Recording().start()
    except Exception:
        failed("starting the recording")
        return
    started_pid = os.getpid()
    watcher, direct = _watcher()
    if not direct:
        # a process the command started in turn: killed (SIGKILL) before it
        # hands back, it is named (the command's own ending is said anyway)
        _mark(directory)
    # One descriptor held back for the data file: a program that ran out of them
    # (the fd-exhaustion finding) must still be able to hand its recording over.
    reserve = [os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))]
    try:
        _stderr.track()
    except Exception:
        failed("following stderr")

    def write(ended_by: str | None, *, forced: bool = False, suffix: str = "") -> None:
        try:
            # (a forked child's parent is not surge watch, whatever it was to the first)
            if forced and _gone(watcher, direct and os.getpid() == started_pid):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)  # only if empty: another process may still write
                return
            while reserve:  # for what stopping imports (surge doctor), then the file
                with contextlib.suppress(OSError):
                    os.close(reserve.pop())
            recording.stop(ended_by, forced=forced)
            data = recording.data()
            pid = os.getpid()
            if pid != started_pid:
                data["forked_from"] = started_pid
            data["stderr_open_line"] = _stderr.open_line()
            data["stderr_id"] = _stderr.identity()
            # (a process that execs writes "<pid>.exec.json": the program it
            # becomes has the same pid, and writes "<pid>.json")
            path = os.path.join(directory, f"{pid}{suffix}.json")
            with open(path + ".part", "w", encoding="utf-8") as out:
                json.dump(data, out, separators=(",", ":"))
            os.replace(path + ".part", path)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, f"{pid}{LOST_SUFFIX}"))
        except Exception:
            failed("writing the recording")

    def forked() -> None:
        """In a forked child: the marker its recording replaces (left, it says
        a process handed nothing back) - but for subprocess's child, which
        runs a ``preexec_fn`` only to exec the command next (a Python command
        records itself; another has nothing to hand back)."""
        endings.forked()
        caller = sys._getframe(1).f_code
        launcher = sys.modules.get("subprocess")  # (calling: loaded)
        if caller.co_name == "_execute_child" and caller.co_filename == getattr(
            launcher, "__file__", None
        ):
            return
        _mark(directory)

    endings = Endings(lambda ended_by: write(ended_by, forced=True))

    def finish() -> None:
        if endings.done and os.getpid() == started_pid:
            return  # written at a forced ending already
        write(endings.uncaught)

    atexit.register(finish)
    try:
        endings.install()
    except Exception:
        failed("hooking the process's endings")
    with contextlib.suppress(AttributeError):
        os.register_at_fork(after_in_child=forked)
    _hand_over_at_exec(directory, lambda: write("exec", forced=True, suffix=".exec"))


def _mark(directory: str) -> None:
    """This process's marker, ``<pid>.lost`` holding its parent's pid, that its
    recording replaces: left, it says a process handed nothing back."""
    try:
        marker = os.path.join(directory, f"{os.getpid()}{LOST_SUFFIX}")
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, str(os.getppid()).encode())
        finally:
            os.close(fd)
    except Exception:
        failed("marking a process")


def _hand_over_at_exec(directory: str, hand_over: Callable[[], None]) -> None:
    """``os.execv`` and ``os.execve`` (which every ``os.exec*`` function ends
    in) hand the recording over first (``hand_over``: what the process did
    before it became another program), and take a forked child's marker away:
    the program it becomes hands back its own recording, or has none to."""

    def handing_over(real: Callable[..., Any]) -> Callable[..., Any]:
        def exec_(*args: Any, **kwargs: Any) -> Any:
            hand_over()
            pid = os.getpid()
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, f"{pid}{LOST_SUFFIX}"))
            try:
                return real(*args, **kwargs)
            except BaseException:
                # no exec: the process goes on, and hands its recording over at
                # its exit, as if this had not been written
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, f"{pid}.exec.json"))
                raise

        exec_.__wrapped__ = real  # type: ignore[attr-defined]
        exec_.__name__ = real.__name__
        return exec_

    for name in ("execv", "execve"):
        real = getattr(os, name, None)
        if real is not None and not hasattr(real, "__wrapped__"):
            setattr(os, name, handing_over(real))
