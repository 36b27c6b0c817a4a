"""benchmarks/db.py and benchmarks/django_cycle.py still run, measure every approach,
and their round-trip counts (the server's own) say what docs/architecture.md
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
    args = ["--only", "mariadb", "--queries", "50", "--connects", "2", "--repeat", "1"]
    approaches = run_benchmark("db.py", args, tmp_path)["mariadb"]["approaches"]
    trips = {name: a["round_trips"] for name, a in approaches.items()}
    assert trips["one reused connection"] == 1
    assert trips["SQLAlchemy QueuePool"] == 2  # the query and a ROLLBACK
    assert trips["SQLAlchemy engine (QueuePool)"] == 2
    assert trips["SQLAlchemy engine, pool_pre_ping"] == 3  # and a ping
    assert trips["DBUtils PooledDB"] == 3  # ping, query, rollback
    # the query only; one ping in the counting pass if surge's connection idled >= 1 s
    assert 1 <= trips["surge.db.pool"] <= 1.01
    assert 2 <= trips["surge.db.pool, autocommit off"] <= 2.01  # and its ROLLBACK
    assert 1 <= trips["surge.db.sqlalchemy engine"] <= 1.01


@pytest.mark.slow
def test_django_benchmark_smoke_run(tmp_path: Path, postgresql_server: object) -> None:
    """benchmarks/django_cycle.py runs every peer, and surge's backend costs a request
    cycle no more round trips than Django's persistent connection or its pool,
    and no login."""
    args = ["--only", "postgresql", "--requests", "100", "--repeat", "1", "--threads", "1"]
    peers = run_benchmark("django_cycle.py", args, tmp_path)["postgresql"]["1 threads"]
    surge, pool = peers["surge"], peers["Django pool (psycopg_pool)"]
    assert surge["logins"] == 0 and peers["Django, CONN_MAX_AGE=0"]["logins"] == 1
    # 9 reads in 10 run 2 statements, 1 write in 10 runs 4 (BEGIN, INSERT, UPDATE,
    # COMMIT): 2.2; one ping allowed for a connection that idled >= 1 s.
    assert surge["round_trips"] <= pool["round_trips"] + 0.01
    assert surge["round_trips"] <= peers["Django, CONN_MAX_AGE=60"]["round_trips"] + 0.01
