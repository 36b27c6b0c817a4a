"""What every ``surge`` command writes to stderr: a usage error as one line, and a
progress line rewritten in place a few times a second.

One place for both, so that ``surge fetch``, ``surge s3 ls`` and click's own
usage errors read the same: ``surge fetch: error: <file>:<line>: <problem>``.
"""

from __future__ import annotations

import sys
import time
from typing import NoReturn, TextIO

import click

#: Seconds between two drawings of a progress line.
REDRAW_EVERY = 0.2


def error_line(command: str, message: str) -> str:
    """``surge fetch: error: ...``: the one line of a usage error."""
    return f"{command}: error: {message}"


def die(command: str, message: str) -> NoReturn:
    """Print the usage error's one line and exit with status 2."""
    click.echo(error_line(command, message), err=True)
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
        self.stream.write("\r\x1b[K" + line)
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r\x1b[K")
        self.stream.flush()
