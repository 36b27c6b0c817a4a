"""watch's own log: what went wrong inside watch, never shown to the program.

Every hook runs the program's call first and records around it; whatever
fails in the recording is caught, written here once per place, and the
program goes on as if watch were not there.
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from surge.trace.redact import safe_text

P = ParamSpec("P")
R = TypeVar("R")

#: Where watch writes what went wrong inside it (set by the session; stderr is the
#: program's, so nothing is ever printed there).
_log_path: str | None = None
_log_lines: list[str] = []
#: Failures logged at most (a hook that fails on every call logs once per place).
MAX_LOGGED = 200
_logged_places: set[str] = set()


def set_log(path: str | None) -> None:
    global _log_path
    _log_path = path


def failures() -> list[str]:
    """What watch logged about itself in this process (each a line or a traceback)."""
    return list(_log_lines)


def failed(where: str) -> None:
    """Log the exception being handled, as raised inside watch at ``where``; never
    raises.  Called from ``except Exception`` around watch's own code only."""
    try:
        if where in _logged_places or len(_logged_places) >= MAX_LOGGED:
            return
        _logged_places.add(where)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        text = f"{stamp} pid {os.getpid()} surge watch: error in {where}:\n" + (
            traceback.format_exc()
        )
        text = safe_text(text)  # a message may quote a URL: never its userinfo or token
        _log_lines.append(text)
        if _log_path is not None:
            with open(_log_path, "a", encoding="utf-8") as log:
                log.write(text)
    except Exception:
        pass


def guarded(method: Callable[P, R]) -> Callable[P, R | None]:
    """``method`` that never raises: a failure is logged (:func:`failed`) and
    ``None`` returned.  Every method a hook calls on the recorder is guarded, so
    that no fault in the recording can reach the program."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return method(*args, **kwargs)
        except Exception:
            failed(f"recorder.{method.__name__}")
            return None

    return call
