"""Smaller promises: an unreachable ``--otlp`` collector costs one line, not a
run of retries; the summary starts on a line of its own after an open stderr
line, in both front ends; and requests awaited one by one from a coroutine are
told to gather, not to use threads; and ``surge watch --help`` lists every
library an instrumentor records."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.watch.conftest import PROGRAMS, watch

from surge.sim import SimInfo
from surge.watch.instrumentors import REGISTRY, instrumentors
from surge.watch.recorder import Recorder

FRONT_ENDS = {
    "surge watch": [sys.executable, "-m", "surge.cli", "watch", "--", sys.executable],
    "python -m surge.watch": [sys.executable, "-m", "surge.watch"],
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_otlp_collector_not_there(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    process = subprocess.run(
        [sys.executable, "-m", "surge.cli", "watch", "--otlp", url, "--", sys.executable, "-c", ""],
        capture_output=True,
        text=True,
        timeout=30,  # the exporter's retries took ~20 s
    )
    assert process.returncode == 0, process.stderr
    lines = [line for line in process.stderr.splitlines() if "otlp" in line.lower()]
    assert lines == [
        f"surge watch: --otlp {url}: RuntimeError: the OTLP collector at {url}/v1/traces "
        "cannot be reached: Connection refused"
    ]
    assert "retrying" not in process.stderr and "Transient" not in process.stderr


@pytest.mark.parametrize("front", FRONT_ENDS)
@pytest.mark.parametrize("ending", [(), ("closed",)], ids=["open", "closed"])
def test_summary_starts_on_its_own_line(front: str, ending: tuple[str, ...]) -> None:
    process = subprocess.run(
        [*FRONT_ENDS[front], str(PROGRAMS / "stderr_open_line.py"), *ending],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode == 0, process.stderr
    # the program's stderr as it wrote it, then the summary: a newline added if open
    assert process.stderr.startswith("progress 50%\nsurge watch: python"), process.stderr


def test_serial_awaits_are_told_to_gather(sim: SimInfo, tmp_path: Path) -> None:
    """Requests awaited one by one from a coroutine: the fix is asyncio's
    (gather, a Semaphore), not a thread pool."""
    watched = watch("aiohttp_awaited_loop.py", str(sim.http_port), "60", tmp_path=tmp_path)
    assert watched.process.stdout == "ok: 60\n"
    fix = watched.finding("serial-requests")["fix"]
    assert "asyncio.gather" in fix and "asyncio.Semaphore" in fix
    assert "ThreadPoolExecutor" not in fix


def test_help_lists_what_the_instrumentors_record() -> None:
    """The help is drawn from the instrumentors' registry: every instrumentor
    applied is there, says what it records, and each name is in the help."""
    made = instrumentors(Recorder())
    assert [type(i) for i in made] == list(REGISTRY)
    text = subprocess.run(
        [sys.executable, "-m", "surge.cli", "watch", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    flat = " ".join(text.split())
    for kind in REGISTRY:
        group, names = kind.shown
        assert group and names, kind.__name__
        for name in names:
            assert name in flat, (kind.__name__, name)
    assert "asyncpg" in flat and "redis-py" in flat
