"""The report survives how a program ends: each ending, in both front ends
(``surge watch -- CMD`` and ``python -m surge.watch``), beside the same program
run bare (stdout byte for byte, with Python's buffering on, and the exit status);
signals sent to ``surge watch`` itself; and ``surge watch`` killed by SIGKILL
taking its program with it."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.watch.conftest import PROGRAMS

PROGRAM = str(PROGRAMS / "endings.py")
TIMEOUT = 60
#: Python's buffering as a user has it (the suite may set PYTHONUNBUFFERED): a
#: signal or os._exit loses what is buffered, watched or not.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}

ENDINGS = [
    # how, exit status, ended_by, partial
    ("exit", 0, None, False),
    ("exception", 1, "uncaught ValueError", False),
    ("sigterm", 143, "SIGTERM", True),
    ("sighup", 129, "SIGHUP", True),
    ("sigint", 130, "KeyboardInterrupt", True),
    ("os-exit", 3, "os._exit(3)", True),
]
FRONT_ENDS = {
    "surge watch": [sys.executable, "-m", "surge.cli", "watch"],
    "python -m surge.watch": [sys.executable, "-m", "surge.watch"],
}


def _front(front: str, tmp_path: Path) -> list[str]:
    outputs = ["--report", str(tmp_path / "r.json"), "--html", str(tmp_path / "p.html")]
    program = [PROGRAM] if front == "python -m surge.watch" else ["--", sys.executable, PROGRAM]
    return [*FRONT_ENDS[front], *outputs, *program]


def _status(returncode: int) -> int:
    """As a shell says it: 128 + N for a signal N."""
    return returncode if returncode >= 0 else 128 - returncode


def _same(stdout: str) -> str:
    return re.sub(r"\d+", "N", stdout)  # the pid the program prints


def _check(tmp_path: Path, stderr: str, ended_by: str | None, partial: bool) -> dict[str, Any]:
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["partial"] is partial, stderr
    [process] = report["processes"]
    assert process["ended_by"] == ended_by and process["partial"] is partial
    assert report["operations"] >= 1  # the TCP connect made before the end
    assert ("partial:" in stderr) is partial, stderr
    page = (tmp_path / "p.html").read_text()
    assert ('class="partial"' in page) is partial
    return report


def _default_signals() -> None:
    """In the child, before exec: the signals the endings use at their default
    action.  A runner started under nohup (SIGHUP ignored) or with SIGINT
    ignored passes that on, and the program would never end."""
    for sent in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sent, signal.SIG_DFL)


@pytest.mark.parametrize("front", FRONT_ENDS)
@pytest.mark.parametrize(("how", "status", "ended_by", "partial"), ENDINGS)
def test_endings(
    front: str, how: str, status: int, ended_by: str | None, partial: bool, tmp_path: Path
) -> None:
    bare = subprocess.run(
        [sys.executable, PROGRAM, how],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=TIMEOUT,
        preexec_fn=_default_signals,
    )
    watched = subprocess.run(
        [*_front(front, tmp_path), how],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=TIMEOUT,
        preexec_fn=_default_signals,
    )
    assert _status(bare.returncode) == status, bare.stderr
    assert _status(watched.returncode) == status, watched.stderr
    assert _same(watched.stdout) == _same(bare.stdout)
    _check(tmp_path, watched.stderr, ended_by, partial)


def _started(command: list[str]) -> tuple[subprocess.Popen[str], int]:
    """``command`` started, once its program has connected: (watch, the program's pid)."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=_default_signals,
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
    assert ready, "the program did not start"
    line = process.stdout.readline()
    assert line.startswith("connected "), line
    return process, int(line.split()[1])


@pytest.mark.parametrize(
    ("sent", "status", "ended_by"),
    [
        (signal.SIGTERM, 143, "SIGTERM"),
        (signal.SIGHUP, 129, "SIGHUP"),
        (signal.SIGINT, 130, "KeyboardInterrupt"),
    ],
)
def test_signal_sent_to_watch(
    sent: signal.Signals, status: int, ended_by: str, tmp_path: Path
) -> None:
    process, _ = _started([*_front("surge watch", tmp_path), "wait"])
    process.send_signal(sent)
    _, stderr = process.communicate(timeout=TIMEOUT)
    assert process.returncode == status, stderr
    _check(tmp_path, stderr, ended_by, True)


def _gone(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` ends within ``timeout`` (waited on through a pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_watch_killed_takes_its_program(tmp_path: Path) -> None:
    process, pid = _started([*_front("surge watch", tmp_path), "wait"])
    process.kill()
    process.communicate(timeout=TIMEOUT)
    assert _gone(pid, TIMEOUT), f"the program {pid} outlived surge watch"
    assert not (tmp_path / "r.json").exists()  # nobody left to write it
