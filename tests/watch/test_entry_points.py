"""The program runs unmodified: its argv, stdin, stdout, stderr and exit status
pass through ``surge watch`` and ``python -m surge.watch``; what watch prints goes
after the program's stderr; secrets are never recorded; and no failure inside
watch reaches the program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require
from tests.watch.conftest import PROGRAMS, watch

import surge.watch
from surge.sim import SimInfo
from surge.testing import DBServer
from surge.watch import _log as watch_log
from surge.watch import recorder as recorder_module
from surge.watch._log import failures
from surge.watch.instrumentors import _dbapi, _http_client

ARGS = ["7", "two words", "--flag=x", "ünï"]


def _run(*argv: str, stdin: str = "hello\n") -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "launcher",
    [
        [sys.executable, "-m", "surge.cli", "watch", "--", sys.executable],
        [sys.executable, "-m", "surge.watch"],
    ],
    ids=["surge watch", "python -m surge.watch"],
)
def test_the_program_runs_unmodified(launcher: list[str], tmp_path: Path) -> None:
    bare = _run(sys.executable, str(PROGRAMS / "passthrough.py"), *ARGS)
    watched = _run(*launcher, str(PROGRAMS / "passthrough.py"), *ARGS)
    assert watched.returncode == bare.returncode == 7
    assert watched.stdout == bare.stdout == json.dumps(ARGS) + "\nHELLO\n"
    assert watched.stderr.startswith(bare.stderr)  # then watch's summary
    assert "surge watch:" in watched.stderr and "findings: none" in watched.stderr


def test_a_signal_that_ends_the_program_is_the_exit_status() -> None:
    done = _run(
        sys.executable,
        "-m",
        "surge.cli",
        "watch",
        "--",
        sys.executable,
        str(PROGRAMS / "passthrough.py"),
        "0",
        "--signal",
    )
    assert done.returncode == 128 + 15


def test_usage_errors_are_one_line_and_status_2(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "r.json"
    done = _run(sys.executable, "-m", "surge.cli", "watch", "--report", str(missing), "--", "true")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--report" in done.stderr
    done = _run(sys.executable, "-m", "surge.cli", "watch", "--otlp", "ftp://x", "--", "true")
    assert done.returncode == 2 and "http(s) URL" in done.stderr


def test_secrets_are_never_recorded(sim: SimInfo, mariadb_server: DBServer, tmp_path: Path) -> None:
    secret = "Zq9-s3cr3t-value"
    outputs = {
        "--trace-json": tmp_path / "trace.json",
        "--html": tmp_path / "page.html",
    }
    options = tuple(x for option, path in outputs.items() for x in (option, str(path)))
    watched = watch(
        "secrets_everywhere.py",
        str(sim.http_port),
        mariadb_server.url,
        secret,
        tmp_path=tmp_path,
        options=options,
    )
    ops = [
        op for run in [json.loads(outputs["--trace-json"].read_text())] for op in run["traceEvents"]
    ]
    whats = {op["name"] for op in ops if op.get("ph") == "X"}
    assert "GET /plain/x" in whats
    assert {"INSERT accounts", "SELECT accounts", "UPDATE accounts"} <= whats
    texts = [
        watched.process.stderr,
        (tmp_path / "report.json").read_text(),
        *(path.read_text() for path in outputs.values()),
    ]
    for text in texts:
        assert secret not in text
        assert mariadb_server.password not in text


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a fault inside watch")


@pytest.mark.parametrize(
    "target",
    [
        (recorder_module, "_bounded"),
        (recorder_module.Recorder, "who"),
        (recorder_module.Recorder, "_add"),
        (recorder_module.Recorder, "_attach"),
        (recorder_module.Overlap, "enter"),
        (_http_client, "request_line"),
        (_dbapi, "statement_and_shape"),
        (recorder_module, "call_site"),
    ],
    ids=lambda target: target[1],
)
def test_a_fault_inside_watch_never_reaches_the_program(
    target: tuple[Any, str],
    sim: SimInfo,
    mariadb_server: DBServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests = require("requests")
    pymysql = require("pymysql")
    monkeypatch.setattr(watch_log, "_logged_places", set())  # each place logs once
    monkeypatch.setattr(watch_log, "_log_lines", [])
    monkeypatch.setattr(*target, _fail)
    s = mariadb_server
    with surge.watch.recording():
        with requests.Session() as session:
            statuses = [
                session.get(f"http://127.0.0.1:{sim.http_port}/", timeout=10).status_code,
                session.get(
                    f"https://localhost:{sim.https_port}/", verify=sim.cafile, timeout=10
                ).status_code,
            ]
        conn = pymysql.connect(
            host=s.host, port=s.port, user=s.user, password=s.password, database=s.database
        )
        with conn.cursor() as cur:
            cur.execute("SELECT 41 + 1")
            answer = cur.fetchone()
        conn.close()
    assert statuses == [200, 200]
    assert answer == (42,)
    assert "a fault inside watch" in "".join(failures())  # and watch logged it


def test_a_sitecustomize_of_the_programs_own_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(  # says so in surge watch's child only
        "import os, sys\n"
        "if os.environ.get('SURGE_WATCH_DIR'):\n"
        "    sys.stderr.write('own sitecustomize\\n')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "watch", "--", sys.executable, "-c", "print('ran')"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0 and done.stdout == "ran\n"
    assert done.stderr.startswith("own sitecustomize\n")
    assert "findings: none" in done.stderr  # and the recording ran too


def test_the_recording_imports_nothing_the_program_depends_on() -> None:
    """gevent must still be able to patch first: neither the bootstrap nor the
    recording imports socket, ssl, select, threading or asyncio."""
    looked_at = ("ssl", "socket", "select", "selectors", "threading", "asyncio")
    code = f"import sys; print(sorted(m for m in {looked_at!r} if m in sys.modules))"
    bare = _run(sys.executable, "-c", code)
    watched = _run(sys.executable, "-m", "surge.cli", "watch", "--", sys.executable, "-c", code)
    assert watched.stdout == bare.stdout
