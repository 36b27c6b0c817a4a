"""Fault injection at every point where CPython can run a signal handler.

A handler that raises (KeyboardInterrupt, a timeout's alarm) runs at the
interpreter's eval breaker: a function's entry, a loop's backward jump, the
return of a call into C.  ``interrupted_at(n, ...)`` raises ``Interrupt`` at the
n-th such point reached in the code under test, so a test can try each one in
turn (``each_point``: n = 1, 2, ... until a run ends first)."""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any


class Interrupt(BaseException):
    """What a signal handler raises: not an Exception, as KeyboardInterrupt."""


#: Where CPython checks for a pending signal: a function's entry or a
#: generator's resumption (RESUME: the tracer's "call" event), a loop's
#: backward jump, and the return of a call into C (the check ends CALL; a
#: Python callee's own entry is its check, and its return has none).
_AT = frozenset({"JUMP_BACKWARD"})
_AFTER = frozenset({"CALL", "CALL_FUNCTION_EX"})
_OPS: dict[Any, dict[int, str]] = {}


def _ops(code: Any) -> dict[int, str]:
    ops = _OPS.get(code)
    if ops is None:
        ops = _OPS[code] = {i.offset: i.opname for i in dis.get_instructions(code)}
    return ops


def interrupted_at(n: int, step: Callable[[], None], caller: Any, scope: str) -> str | None:
    """Run ``step`` with an Interrupt raised at its ``n``-th point where CPython
    could run a signal handler, counted in the code under ``scope`` (a
    directory) and in the code object ``caller``; where it was raised (None:
    the step ended first)."""
    count = 0
    raised = False
    where = None
    last: dict[int, str] = {}  # the last instruction run in each frame
    python_callee: set[int] = set()  # frames whose last call was into Python code

    def point(frame: FrameType, before: str) -> None:
        nonlocal count, raised, where
        count += 1
        if count == n:
            raised = True
            name = Path(frame.f_code.co_filename).name
            where = f"{name}:{frame.f_lineno} {frame.f_code.co_name}, {before}"
            raise Interrupt

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode" and not raised:
            op = _ops(frame.f_code).get(frame.f_lasti, "")
            after_c = last.get(id(frame)) in _AFTER and id(frame) not in python_callee
            python_callee.discard(id(frame))
            last[id(frame)] = op
            if op in _AT or after_c:
                point(frame, f"before {op}")
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_back is not None:
            python_callee.add(id(frame.f_back))
        code = frame.f_code
        if code is caller or code.co_filename.startswith(scope):
            frame.f_trace_opcodes = True
            last.pop(id(frame), None)
            if not raised:
                point(frame, "at its entry")
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        step()
    except Interrupt:
        pass
    finally:
        sys.settrace(previous)
    return where


def each_point(run: Callable[[int], str | None], limit: int) -> int:
    """``run(n)`` for n = 1, 2, ... - each run interrupts at its n-th point and
    checks what it must, and says where it raised (None: it ended first, and
    every point has been tried).  How many points were interrupted; a run
    still going at ``limit`` points fails the test (it is stuck)."""
    for n in range(1, limit):
        if run(n) is None:
            return n - 1
    raise AssertionError(f"still running after {limit} points")
