"""What every ``surge`` command writes to stderr: a usage error as one line, and a
progress line rewritten in place a few times a second.

One place for both, so that ``surge fetch``, ``surge s3 ls`` and click's own
usage errors read the same: ``surge fetch: error: <file>:<line>: <problem>``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn, TextIO

import click

#: Seconds between two drawings of a progress line.
REDRAW_EVERY = 0.2


def error_line(command: str, message: str) -> str:
    """``surge fetch: error: ...``: the one line of a usage error."""
    return f"{command}: error: {message}"


def tell(line: str) -> None:
    """One line to stderr.  A stderr that cannot be written (a full disk, a
    closed pipe) is not an error of the run: the line is lost, and /dev/null
    takes stderr's place, so that what Python flushes at exit does not fail
    (it would turn the exit status into 120)."""
    try:
        click.echo(line, err=True)
    except OSError:
        _silence_stderr()


def _silence_stderr() -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:  # pragma: no cover - no descriptor left even for that
        return
    try:
        os.dup2(null, sys.stderr.fileno() if sys.stderr is not None else 2)
    except (OSError, ValueError):  # pragma: no cover - a stderr without a descriptor
        pass
    finally:
        os.close(null)


def die(command: str, message: str) -> NoReturn:
    """Print the usage error's one line and exit with status 2."""
    tell(error_line(command, message))
    sys.exit(2)


class ProgressLine:
    """One line on stderr (or ``stream``), redrawn at most every REDRAW_EVERY s."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = time.perf_counter()
        self.next_draw = 0.0

    def due(self, force: bool = False) -> float | None:
        """Seconds since the start if it is time to redraw (or ``force``), else None."""
        now = time.perf_counter()
        if now < self.next_draw and not force:
            return None
        self.next_draw = now + REDRAW_EVERY
        return now - self.started

    def show(self, line: str) -> None:
        self._draw("\r\x1b[K" + line)

    def close(self) -> None:
        self._draw("\r\x1b[K")

    def _draw(self, text: str) -> None:
        """Progress is no output of the run: a stderr that fails (a closed
        terminal) is given up on, as :func:`tell` gives it up."""
        if self.next_draw == float("inf"):
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.next_draw = float("inf")  # never due again
            if self.stream is sys.stderr:
                _silence_stderr()
