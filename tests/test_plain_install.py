"""A plain ``pip install`` of the checkout, no extras, in a fresh venv: the engine
and the simulated web work, and a part that needs an extra says which, in one
line, with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import RESOLVE

from surge.sim import SimInfo

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_plain_install_fetches_and_names_missing_extras(sim: SimInfo, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    surge = str(venv / "bin" / "surge")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([surge, *args], capture_output=True, text=True, timeout=120)

    assert run("--help").returncode == 0
    urls = tmp_path / "urls.txt"
    urls.write_text(sim.url("status-200.sim") + "\n" + sim.url("status-404.sim") + "\n")
    fetched = run("fetch", str(urls), "--resolve", RESOLVE, "-q")
    assert fetched.returncode == 0, fetched.stderr
    statuses = sorted(json.loads(line)["status"] for line in fetched.stdout.splitlines())
    assert statuses == [200, 404]

    listed = run("s3", "ls", "s3://bucket", "--endpoint-url", "http://127.0.0.1:9")
    assert listed.returncode == 2
    (line,) = listed.stderr.strip().splitlines()
    assert "botocore" in line and "[s3]" in line

    clustered = run("fetch", str(urls), "--resolve", RESOLVE, "--cluster", "local:1", "-q")
    assert clustered.returncode == 2
    (line,) = clustered.stderr.strip().splitlines()
    assert "[cluster]" in line

    # surge demo: the patterns whose libraries are missing (the bench extra) are
    # not run - no "done in 0.0 s" - but listed once, with the extra that adds them.
    demo = run("demo", "--sections", "fetch", "--hosts", "20", "--timeout", "1")
    assert demo.returncode == 0, demo.stderr
    skipped = [line for line in demo.stdout.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and "[bench]" in skipped[0] and "requests" in skipped[0]
    assert "done in 0.0 s" not in demo.stderr and "running requests" not in demo.stderr
    assert "Conclusion: surge answered" in demo.stdout
