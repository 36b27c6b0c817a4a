"""Run a function in a forked child, bounded: what the fork tests share."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable


def run_in_child(body: Callable[[], object], within: float = 30.0) -> str | None:
    """Run ``body`` in a forked child: None if it returned within ``within``
    seconds, else what it raised, or "hung" (the child is then killed: a
    deadlocked child fails a test, never hangs it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        status = 0
        try:
            body()
        except BaseException as error:
            os.write(write, repr(error).encode()[:4000])
            status = 1
        finally:
            os._exit(status)
    os.close(write)
    deadline = time.monotonic() + within
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return "hung"
        time.sleep(0.01)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    return None if os.waitstatus_to_exitcode(done[1]) == 0 else message or "failed"
