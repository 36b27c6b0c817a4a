"""The outputs of one run: the JSON report's schema, the Chrome trace (its
structure as the Trace Event Format defines it: Perfetto's own reader,
trace_processor_shell, is downloaded by the perfetto package from a site this
project's machines cannot reach, so it is not run here), surge trace's page
with the findings, and OTLP spans read back from a real Jaeger through its
query API."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.watch.conftest import Watched, watch

from surge.sim import SimInfo
from surge.testing.jaeger import JaegerServer

REQUESTS = 20
#: Each request's wait on the server (ms): 20 of them are 6 s of network, most of
#: the wall time even where a loaded machine takes 3-4 s to start Python and
#: import requests (at 50 ms, 1 s of network, serial-requests came and went
#: with the load).
DELAY_MS = 300


@pytest.fixture(scope="module")
def loop(sim: SimInfo, tmp_path_factory: pytest.TempPathFactory) -> tuple[Watched, dict[str, Path]]:
    """One watched run, whose outputs the tests below each read."""
    tmp_path = tmp_path_factory.mktemp("loop")
    paths = {"--trace-json": tmp_path / "trace.json", "--html": tmp_path / "page.html"}
    options = tuple(x for option, path in paths.items() for x in (option, str(path)))
    watched = watch(
        "requests_loop.py",
        str(sim.http_port),
        str(REQUESTS),
        str(DELAY_MS),
        tmp_path=tmp_path,
        options=options,
    )
    return watched, paths


def test_report_schema(loop: tuple[Watched, dict[str, Path]]) -> None:
    report = loop[0].report
    assert report["schema"] == 1
    assert report["wall_s"] > 0
    assert report["operations"] == 2 * REQUESTS  # a request and its TCP connect, each
    [finding] = report["findings"]
    assert set(finding) == {"id", "severity", "message", "evidence", "fix", "sites"}
    assert finding["id"] == "serial-requests" and finding["severity"] == "warn"


def _slices(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [event for event in trace["traceEvents"] if event["ph"] == "X"]


def test_chrome_trace(loop: tuple[Watched, dict[str, Path]]) -> None:
    trace = json.loads(loop[1]["--trace-json"].read_text())
    slices = _slices(trace)
    assert len(slices) == loop[0].report["operations"]
    assert sorted({s["cat"] for s in slices}) == ["http", "tcp"]
    assert all(s["dur"] >= 0 and s["ts"] >= 0 for s in slices)
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"process_name", "thread_name"}


def test_html_page(loop: tuple[Watched, dict[str, Path]]) -> None:
    page = loop[1]["--html"].read_text()
    assert "<title>surge watch</title>" in page
    assert 'id="findings"' in page and "serial-requests" in page
    data = page.split('id="trace-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)["requests"] == REQUESTS  # surge trace's waterfall, a row each


def test_otlp_spans_read_back_from_jaeger(
    sim: SimInfo, jaeger: JaegerServer, tmp_path: Path
) -> None:
    watched = watch(
        "requests_loop.py",
        str(sim.http_port),
        str(REQUESTS),
        tmp_path=tmp_path,
        options=("--otlp", jaeger.otlp_url),
    )
    assert "--otlp" not in watched.process.stderr  # no line saying it failed
    deadline = time.monotonic() + 30
    traces: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not traces:
        traces = jaeger.traces("surge-watch")
        time.sleep(0.2)
    [trace] = traces
    spans = trace["spans"]
    assert len(spans) == watched.report["operations"] + 1  # and the run's root span
    http = [s for s in spans if s["operationName"] == "GET /page"]
    assert len(http) == REQUESTS
    tags = {t["key"]: t["value"] for t in http[0]["tags"]}
    assert tags["http.request.method"] == "GET"
    assert tags["http.response.status_code"] == 200
    assert tags["surge.library"] == "urllib3"
    assert str(tags["server.address"]).endswith(".sim")


def test_a_host_asked_by_two_processes_is_one_row(sim: SimInfo, tmp_path: Path) -> None:
    """The program and its Python child ask the same loopback host: the summary's
    per-host table has it once, with both processes' requests; its time is the
    union of theirs on the shared clock, never more than their sum."""
    n = 12
    watched = watch("requests_parent_and_child.py", str(sim.http_port), str(n), tmp_path=tmp_path)
    assert watched.process.stdout == f"parent ok: {n}\nchild ok: {n}\n"
    peer = f"127.0.0.1:{sim.http_port}"
    processes = watched.report["processes"]
    assert [run["hosts"][peer]["requests"] for run in processes] == [n, n]
    lines = watched.process.stderr.splitlines()
    table = lines[lines.index("per host (HTTP):") + 1 :]
    rows = [line.split() for line in table if line.split()[:1] == [peer]]
    assert len(rows) == 1, watched.process.stderr
    [[_, requests, connects, *_, time_s, _]] = rows
    assert int(requests) == 2 * n
    assert int(connects) == sum(run["hosts"][peer]["connects"] for run in processes) == 2
    assert float(time_s) <= sum(run["hosts"][peer]["time_s"] for run in processes) + 0.001
