"""``surge fetch --fail-exit``: exit 22 when any record has an error class or a
status >= 400, with one line saying how many; exit 0 otherwise, and without the
flag whatever the records say (remote failures are data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import RESOLVE

from surge.sim import SimInfo

SURGE = [sys.executable, "-m", "surge.cli"]


@pytest.mark.parametrize(
    ("hosts", "flag", "status", "line"),
    [
        (["status-200", "status-204"], True, 0, None),
        (["status-200", "status-404"], True, 22, "1 of 2 records failed: 0 with an error, 1 with"),
        (["status-200", "status-503", "ftp://x/"], True, 22, "2 of 3 records failed: 1 with"),
        (["status-500", "ftp://x/"], False, 0, None),
    ],
)
def test_fail_exit(
    sim: SimInfo, tmp_path: Path, hosts: list[str], flag: bool, status: int, line: str | None
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(
        "".join(h + "\n" if ":" in h else f"http://{h}.sim:{sim.http_port}/\n" for h in hosts)
    )
    out = tmp_path / "out.jsonl"
    args = [*SURGE, "fetch", str(urls), "--resolve", RESOLVE, "--max-time", "5", "-o", str(out)]
    done = subprocess.run(
        [*args, "-q"] + (["--fail-exit"] if flag else []),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == status, done.stderr
    assert len(out.read_text().splitlines()) == len(hosts)
    if line is None:
        assert done.stderr == ""
    else:  # the one line, even under -q: it is why the status is not 0
        assert done.stderr.startswith("surge fetch: " + line), done.stderr
        assert done.stderr.count("\n") == 1
