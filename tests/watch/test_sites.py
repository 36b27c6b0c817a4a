"""The line to fix: each finding names where in the program's own code its calls
were made (file, line, function, count), in every output, from one frame walk
per call (not a stack per operation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pymysql
import requests
from tests.watch.conftest import PROGRAMS, watch
from tests.watch.test_causes import _pymysql

from surge.sim import SimInfo
from surge.testing.servers import DBServer
from surge.watch import export, recording
from surge.watch.recorder import call_site


def _fetch_each(url: str, cafile: str, n: int) -> None:
    for _ in range(n):
        with requests.Session() as session:  # a session per call: a handshake each
            session.get(url, verify=cafile, timeout=10).raise_for_status()


def _line_of(path: Path, text: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_call_site_is_the_innermost_frame_of_the_program() -> None:
    def inner() -> Any:
        return json.loads("1", object_hook=None) and call_site()

    site = call_site()
    assert site is not None and site[0] == __file__
    site = inner()
    assert site is not None
    assert site[0] == __file__ and site[2].endswith("inner")  # co_qualname from 3.11


def test_tls_per_request_names_its_site_in_process(sim: SimInfo) -> None:
    url = f"https://localhost:{sim.https_port}/x"
    with recording() as rec:
        _fetch_each(url, sim.cafile, 12)
    finding = next(f for f in rec.findings() if f.id == "tls-per-request")
    line = _line_of(Path(__file__), "session.get(url, verify=cafile")
    assert finding.sites == [
        {"file": __file__, "line": line, "function": "_fetch_each", "count": 12}
    ]
    ops = [op for op in rec.operations() if op["kind"] == "http"]
    assert {(op["site"]["file"], op["site"]["line"]) for op in ops} == {(__file__, line)}


def test_every_output_names_the_site(mariadb_server: DBServer, tmp_path: Path) -> None:
    program = PROGRAMS / "mysql_connect_per_query.py"
    html, trace = tmp_path / "w.html", tmp_path / "t.json"
    run = watch(
        program.name,
        mariadb_server.url,
        "20",
        tmp_path=tmp_path,
        options=("--html", str(html), "--trace-json", str(trace)),
    )
    line = _line_of(program, "conn = pymysql.connect(")
    finding = run.finding("connect-per-query")
    assert finding["sites"] == [
        {"file": str(program), "line": line, "function": "<module>", "count": 20}
    ]
    assert f"mysql_connect_per_query.py:{line} in <module> (20 calls)" in run.process.stderr
    page = html.read_text()
    assert f'href="{program.as_uri()}#L{line}"' in page
    events = json.loads(trace.read_text())["traceEvents"]
    connects = [e for e in events if e.get("cat") == "db.connect"]
    assert len(connects) == 20
    assert {(e["args"]["site"]["file"], e["args"]["site"]["line"]) for e in connects} == {
        (str(program), line)
    }


def test_the_page_counts_connects_queries_and_requests_apart(
    mariadb_server: DBServer, sim: SimInfo, tmp_path: Path
) -> None:
    with recording() as rec:
        for i in range(3):
            conn = pymysql.connect(**_pymysql(mariadb_server))
            with conn.cursor() as cur:
                cur.execute("SELECT %s", (i,))
            conn.close()
        requests.get(f"http://127.0.0.1:{sim.http_port}/x", timeout=10)
    data = rec.data()
    page = export.trace_page_data([data], "prog")
    assert page["headline"] == "1 HTTP request, 3 database connects, 3 queries"
    assert "TCP connect" not in page["labels"]["connect"]
    export.write_html([data], "prog", str(tmp_path / "w.html"))
    assert "1 HTTP request, 3 database connects, 3 queries" in (tmp_path / "w.html").read_text()
