"""benchmarks/db.py and benchmarks/django_cycle.py still run and measure every
approach, and the server's own counts say what docs/architecture-rules.md (db/)
says; times are not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(script: str, args: list[str], tmp_path: Path) -> dict[str, Any]:
    """Run ``benchmarks/<script>`` with ``args``; the results of its JSON file."""
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())["results"]
    return results


@pytest.mark.slow
def test_db_benchmark_smoke_run(tmp_path: Path, mariadb_server: object) -> None:
    # (mariadb_server: skips or fails, per the conftest rule, where MariaDB is missing)
    args = ["--only", "mariadb", "--queries", "50", "--repeat", "1"]
    results = run_benchmark("db.py", args, tmp_path)
    expected = {
        "one reused connection",
        "reset floor",
        "surge.db.pool",
        "surge.db.pool, reset none",
        "SQLAlchemy QueuePool",
    }
    for mode in ("autocommit off", "autocommit on"):
        for query in ("write-up", "SELECT 1"):
            section = results[f"mariadb, {mode}, {query}"]
            assert set(section) == expected
            assert section["surge.db.pool"]["leaves"] == "nothing"
            assert all(a["wall_us_median"] > 0 for a in section.values())


@pytest.mark.slow
def test_django_benchmark_smoke_run(tmp_path: Path, postgresql_server: object) -> None:
    """benchmarks/django_cycle.py runs every peer, and surge's backend costs a request
    cycle no more round trips than Django's persistent connection or its pool,
    and no login."""
    args = ["--only", "postgresql", "--requests", "100", "--repeat", "1", "--threads", "1"]
    peers = run_benchmark("django_cycle.py", args, tmp_path)["postgresql"]["1 threads"]
    surge = peers["surge"]
    assert surge["logins"] == 0 and peers["Django, CONN_MAX_AGE=0"]["logins"] == 1
    # the server's count of commands: a persistent connection's and Django's pool's
    # plus, for surge, each request's session reset (DISCARD ALL and Django's time
    # zone, pipelined: written, not waited for) - two commands, no more
    for peer in ("Django pool (psycopg_pool)", "Django, CONN_MAX_AGE=60"):
        assert surge["server_commands"] <= peers[peer]["server_commands"] + 2 + 0.01
