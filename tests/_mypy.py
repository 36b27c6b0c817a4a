"""mypy --strict on a caller's file, as a user's project runs it (surge ships
py.typed): what it reports, for tests that check what type checkers see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def mypy_errors(tmp_path: Path, source: str) -> list[str]:
    """The error lines of mypy --strict on ``source`` (``caller.py`` in ``tmp_path``)."""
    caller = tmp_path / "caller.py"
    caller.write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(caller)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    return [line for line in done.stdout.splitlines() if ": error:" in line]
