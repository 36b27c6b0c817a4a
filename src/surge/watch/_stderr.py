"""Whether the program left its last stderr line open (``print(..., end="",
file=sys.stderr)``, a progress line), so that watch's summary starts on a line
of its own instead of being glued to it.

``sys.stderr`` is wrapped, at the start, in :class:`LastWritten`: every
attribute is the stream's own, and ``write``/``writelines`` pass the text on
unchanged and note its last character.  Writes that go around ``sys.stderr``
(``sys.stderr.buffer``, ``os.write(2, ...)``, a child that is not Python) are
not seen: for those the summary starts where the cursor is, as before.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable
from typing import Any

#: Characters after which the cursor is at the start of a line.
LINE_START = ("\n", "\r")


class LastWritten:
    """A text stream, with the last character written through it remembered."""

    def __init__(self, stream: Any) -> None:
        object.__setattr__(self, "_surge_stream", stream)
        object.__setattr__(self, "_surge_last", "\n")

    def write(self, text: str) -> int:
        written: int = self._surge_stream.write(text)
        if text:
            object.__setattr__(self, "_surge_last", text[-1])
        return written

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def open_line(self) -> bool:
        return self._surge_last not in LINE_START

    def __getattr__(self, name: str) -> Any:
        return getattr(self._surge_stream, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._surge_stream, name, value)

    def __iter__(self) -> Any:
        return iter(self._surge_stream)

    def __enter__(self) -> Any:
        return self._surge_stream.__enter__()

    def __exit__(self, *exc: object) -> Any:
        return self._surge_stream.__exit__(*exc)


def track() -> None:
    """Wrap ``sys.stderr`` (once) so that :func:`open_line` can tell."""
    if sys.stderr is not None and not isinstance(sys.stderr, LastWritten):
        sys.stderr = LastWritten(sys.stderr)


def open_line() -> bool:
    """Whether the last character the program wrote to ``sys.stderr`` left a line
    open (``sys.stderr`` replaced since by the program: not known, no)."""
    stream = sys.stderr
    return isinstance(stream, LastWritten) and stream.open_line()


def identity(fd: int = 2) -> list[int] | None:
    """Which file descriptor ``fd`` is (device, inode): a child's stderr is watch's
    own only if they match."""
    with contextlib.suppress(OSError):
        status = os.fstat(fd)
        return [status.st_dev, status.st_ino]
    return None
