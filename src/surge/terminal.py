"""What every ``surge`` command writes to a terminal: a usage error as one line,
a progress line rewritten in place a few times a second, and colour.

One place for all three, so that ``surge fetch``, ``surge s3 ls`` and click's own
usage errors read the same (``surge fetch: error: <file>:<line>: <problem>``),
and so that one place decides which escape codes a command may write:

- colour (SGR, ``ESC [ ... m``) only to a terminal, never under ``NO_COLOR``
  set and not empty (https://no-color.org) nor ``TERM=dumb``: :func:`colours`,
  :func:`paint`;
- no escape code at all under ``TERM=dumb`` (terminfo's ``dumb`` has no
  cursor or erase capability, only a carriage return): the progress line is
  then redrawn with ``\\r`` and spaces over what it wrote before
  (:func:`escapes`, :class:`ProgressLine`).

Nothing else in surge writes ``\\x1b[``; tests/test_terminal.py runs each
command that colours or redraws under both variables on a pseudo-terminal.
"""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn, TextIO

import click

#: Seconds between two drawings of a progress line.
REDRAW_EVERY = 0.2

#: Erase from the cursor to the end of the line (EL, ECMA-48), after a ``\\r``.
_ERASE_LINE = "\x1b[K"


def escapes() -> bool:
    """Whether this terminal takes escape codes at all: not under ``TERM=dumb``."""
    return os.environ.get("TERM") != "dumb"


def colours(stream: TextIO | None) -> bool:
    """Whether to colour what goes to ``stream``: a terminal that takes escape
    codes, and ``NO_COLOR`` unset or empty."""
    if stream is None or os.environ.get("NO_COLOR") or not escapes():
        return False
    try:
        return stream.isatty()
    except (OSError, ValueError):  # closed, or no descriptor
        return False


def paint(text: str, sgr: str, colour: bool) -> str:
    """``text`` in the colour of the SGR parameters ``sgr`` ("1" bold, "31" red...)
    when ``colour`` (:func:`colours` of its stream), else as it is."""
    return f"\x1b[{sgr}m{text}\x1b[0m" if colour else text


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
        #: Escape codes allowed (decided once, at the start): else the line is
        #: rewritten with spaces over the longest one drawn.
        self.erase = _ERASE_LINE if escapes() else None
        self.width = 0

    def due(self, force: bool = False) -> float | None:
        """Seconds since the start if it is time to redraw (or ``force``), else None."""
        now = time.perf_counter()
        if now < self.next_draw and not force:
            return None
        self.next_draw = now + REDRAW_EVERY
        return now - self.started

    def show(self, line: str) -> None:
        if self.erase is not None:
            self._draw("\r" + self.erase + line)
        else:
            self._draw("\r" + line.ljust(self.width))
        self.width = max(self.width, len(line))

    def close(self) -> None:
        if self.erase is not None:
            self._draw("\r" + self.erase)
        elif self.width:
            self._draw("\r" + " " * self.width + "\r")

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
