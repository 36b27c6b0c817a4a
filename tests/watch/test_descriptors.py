"""fd-exhaustion: a program that keeps its streamed responses open runs out of
descriptors under ``ulimit -n 64``; the finding names EMFILE, the limit and how
many were open.  Its twin, which closes each response (4 at a time, so that no
machine's load makes it serial-requests), gets no finding at all."""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.watch.conftest import watch
from tests.watch.test_findings import _data

from surge.sim import SimInfo
from surge.watch.findings import analyse
from surge.watch.instrument import error_class, set_exhaustion_sink
from surge.watch.recorder import Recorder

LIMIT = 64
REQUESTS = 100


def _watch_limited(sim: SimInfo, tmp_path: Path, *args: str) -> tuple[str, dict[str, Any]]:
    """The program watched, run by a Python under ``ulimit -n LIMIT`` (a shell
    that sets the limit, then runs Python: the program's process has it)."""
    limited = tmp_path / "python-limited"
    limited.write_text(f'#!/bin/sh\nulimit -n {LIMIT} && exec "{sys.executable}" "$@"\n')
    limited.chmod(0o755)
    watched = watch(
        "requests_leak.py",
        str(sim.http_port),
        str(REQUESTS),
        *args,
        tmp_path=tmp_path,
        python=str(limited),
    )
    return watched.process.stdout, watched.report


@pytest.mark.skipif(sys.platform == "win32", reason="ulimit is POSIX's")
def test_fd_exhaustion(sim: SimInfo, tmp_path: Path) -> None:
    stdout, report = _watch_limited(sim, tmp_path)
    errors = int(stdout.split()[-1])
    assert errors > 0  # the program did run out
    [finding] = [f for f in report["findings"] if f["id"] == "fd-exhaustion"]
    evidence = finding["evidence"]
    assert evidence["errno"] == "EMFILE"
    assert evidence["limit"] == LIMIT
    assert evidence["failed_calls"] >= errors  # each failed request: one socket at least
    assert LIMIT - 8 <= evidence["peak_open"] <= LIMIT
    assert evidence["peak_sockets"] >= REQUESTS - errors - 8
    assert f"limit of {LIMIT}" in finding["message"] and "EMFILE" in finding["message"]


@pytest.mark.skipif(sys.platform == "win32", reason="ulimit is POSIX's")
def test_fd_exhaustion_twin_closes(sim: SimInfo, tmp_path: Path) -> None:
    stdout, report = _watch_limited(sim, tmp_path, "closed")
    assert stdout == "errors: 0\n"
    assert report["findings"] == []


@pytest.mark.parametrize(("exhausted", "found"), [(0, []), (1, ["fd-exhaustion"])])
def test_rule_threshold(exhausted: int, found: list[str]) -> None:
    data = _data(
        descriptors={
            "exhausted": exhausted,
            "errnos": ["EMFILE"],
            "limit": 64,
            "peak_open": 64,
            "peak_sockets": 60,
        }
    )
    assert [f.id for f in analyse(data)] == found


def test_one_error_counted_once_however_often_seen() -> None:
    """The socket's creation sees the OSError, then the library's error wraps it
    and the request's instrumentor sees it again: one failed call."""
    rec = Recorder()
    set_exhaustion_sink(rec.fd_exhausted)
    try:
        for _ in range(3):
            error = OSError(errno.EMFILE, "Too many open files")
            rec.fd_exhausted(error)
            try:
                try:
                    raise error
                except OSError as cause:
                    raise ConnectionError("wrapped") from cause
            except ConnectionError as wrapped:
                assert error_class(wrapped) == "ConnectionError"
        error_class(OSError(errno.ECONNREFUSED, "refused"))  # not exhaustion
    finally:
        set_exhaustion_sink(None)
    descriptors = rec.data()["descriptors"]
    assert descriptors["exhausted"] == 3 and descriptors["errnos"] == ["EMFILE"]
