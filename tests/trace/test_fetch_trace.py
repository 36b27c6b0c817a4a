"""``surge fetch --trace/--har`` end to end: the page and the HAR say what the run did."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RESOLVE
from tests.trace.conftest import surge
from tests.trace.test_recorder import record, timings_at

from surge.sim import SimInfo
from surge.testing.browser import BrowserError, Chromium
from surge.trace import TraceRecorder, write_html

#: Hosts with known fates: fine, slow, redirected, failing in each phase.
NAMES = [
    *(f"a{n}.delay-20.sim" for n in range(20)),
    "delay-300.sim",
    "redirect-2.sim",
    "status-503.sim",  # retried once (--retries 1), answering 503 again
    "reset.sim",
    "garbage.sim",
    "hang.sim",
]


def run_traced(sim: SimInfo, tmp: Path, *extra: str, tls: bool = True) -> dict[str, Path]:
    urls = [sim.url(n, tls=tls) for n in NAMES] + ["http://127.0.0.1:1/refused", "nonsense"]
    source = tmp / "urls.txt"
    source.write_text("\n".join(urls) + "\n")
    paths = {"out": tmp / "out.jsonl", "page": tmp / "trace.html", "har": tmp / "trace.har"}
    done = surge(
        "fetch", str(source), "-o", str(paths["out"]), "--trace", str(paths["page"]),
        "--har", str(paths["har"]), "--resolve", RESOLVE, "--cacert", sim.cafile,
        "--max-time", "1", "-L", "-c", "16", "--retries", "1", *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"trace   {paths['page']}" in done.stderr
    return paths


@pytest.fixture(scope="module")
def traced(sim: SimInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return run_traced(sim, tmp_path_factory.mktemp("traced"))


def test_har_has_one_valid_entry_per_request_and_hop(traced: dict[str, Path]) -> None:
    records = {r["line"]: r for r in map(json.loads, traced["out"].read_text().splitlines())}
    har = json.loads(traced["har"].read_text())["log"]
    assert har["version"] == "1.2" and har["creator"]["name"] == "surge"
    by_line: dict[int, list[dict[str, Any]]] = {}
    for entry in har["entries"]:
        by_line.setdefault(entry["_line"], []).append(entry)
    assert by_line.keys() == records.keys()
    for line, entries in by_line.items():
        r = records[line]
        assert [e["_hop"] for e in entries] == list(range(len(entries)))
        for entry in entries:
            datetime.fromisoformat(entry["startedDateTime"])
            t = entry["timings"]
            assert set(t) == {"blocked", "dns", "connect", "ssl", "send", "wait", "receive"}
            # HAR 1.2: send, wait, receive "must have non-negative values"
            assert min(t["send"], t["wait"], t["receive"], t["blocked"]) >= 0
            # time is the sum of the timings (ssl counted inside connect)
            total = sum(v for k, v in t.items() if k != "ssl" and v != -1)
            assert abs(entry["time"] - total) < 0.01
            if t["ssl"] != -1:
                assert t["connect"] >= t["ssl"]
        assert sum(e["time"] for e in entries) <= r["elapsed_ms"] + 0.01
        last = entries[-1]
        assert last.get("_error") == r["error"] and last["response"]["redirectURL"] == ""
        assert last["response"]["status"] == (r["status"] if r["error"] is None else 0)
    # a redirect chain: one entry per hop, each 3xx pointing at the next
    chain = next(es for es in by_line.values() if "redirect-2.sim" in es[0]["request"]["url"])
    assert [e["response"]["status"] for e in chain] == [302, 301, 200]
    for entry, following in itertools.pairwise(chain):
        assert entry["response"]["redirectURL"] == following["request"]["url"]
    assert chain[2]["request"]["url"].split("/")[2].startswith("redirect-0.sim")
    by_host = {
        es[-1]["request"]["url"].split("/")[2].split(":")[0]: es[-1] for es in by_line.values()
    }
    assert by_host["delay-300.sim"]["timings"]["wait"] >= 300
    hang = by_host["hang.sim"]
    assert hang["_error"] == "read_timeout" and hang["_attempts"] == 2
    # it failed waiting for a response: its last phase is wait, receive never began
    assert hang["timings"]["wait"] > 0 and hang["timings"]["receive"] == 0
    # retried: the first attempt (1 s and its back-off) is blocked time
    assert hang["timings"]["blocked"] >= 1000 and hang["time"] >= 2000
    assert by_host["a0.delay-20.sim"]["timings"]["ssl"] > 0  # a new TLS connection
    assert by_host["status-503.sim"]["_attempts"] == 2


def test_page_summary_counts_every_request(traced: dict[str, Path]) -> None:
    page = traced["page"].read_text()
    start = page.index('id="trace-data">') + len('id="trace-data">')
    data = json.loads(page[start : page.index("</script>", start)])
    records = [json.loads(x) for x in traced["out"].read_text().splitlines()]
    assert data["requests"] == len(records) == len(data["rows"])
    errors: dict[str, int] = {}
    for r in records:
        if r["error"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    assert data["errors"] == errors
    assert max(data["timeline"]["in_flight"]) > 8  # 16 at a time, waiting on 20 ms servers
    assert 1 < data["mean_in_flight"] < 16
    assert data["loop_lag"]["samples"] > 0  # the run's event loop was watched
    earlier = next(p for p in data["phases"] if p["phase"] == "earlier")
    # retried: more attempts than hops (the redirect's hops count as attempts too)
    retried = [r for r in records if r["attempts"] > 1 and r["final_url"] in (None, r["url"])]
    assert earlier["requests"] == len(retried) > 0


def test_the_page_draws_in_a_real_browser(traced: dict[str, Path], browser: Chromium) -> None:
    expression = """({
        rows: document.querySelectorAll('#waterfall .row').length,
        failed: document.querySelectorAll('#waterfall .row.failed').length,
        lines: [...document.querySelectorAll('#waterfall .row')].map(r => +r.dataset.line),
        bars: document.querySelectorAll('#waterfall .row rect').length,
        phases: document.querySelectorAll('#phase-table tr').length,
        inFlight: document.querySelectorAll('#timeline path').length,
        verdict: document.getElementById('verdict').innerText,
    })"""
    page = browser.load(traced["page"], expression=expression, screenshot=True)
    assert page.errors == []
    records = [json.loads(x) for x in traced["out"].read_text().splitlines()]
    drawn = page.value
    assert drawn["rows"] == len(records)
    assert sorted(drawn["lines"]) == sorted(r["line"] for r in records)
    assert drawn["failed"] == sum(1 for r in records if r["error"])
    assert drawn["bars"] >= 3 * len(records) - 10  # several phases per request
    assert drawn["phases"] == 1 + 8
    assert drawn["inFlight"] == 1
    assert "dominant phase" in drawn["verdict"]
    assert page.screenshot is not None and page.screenshot.startswith(b"\x89PNG")


def test_a_large_trace_is_sampled_and_still_draws(tmp_path: Path, browser: Chromium) -> None:
    recorder = TraceRecorder(rows=2000)
    for n in range(1, 50_001):
        start = recorder.clock0 + n * 0.0001
        recorder.add(record(n), start, start + 0.05, timings_at(start, 0.05))
    write_html(recorder.data(), str(tmp_path / "big.html"))
    page = browser.load(
        tmp_path / "big.html",
        expression="[document.querySelectorAll('#waterfall .row').length,"
        " document.getElementById('sample-note').textContent]",
    )
    assert page.errors == []
    rows, note = page.value
    assert rows == 2000
    assert "sample of 2,000 of the 50,000 requests" in note


def test_trace_files_that_cannot_be_written_are_usage_errors(tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:1/\n")
    done = surge("fetch", str(source), "--trace", str(tmp_path / "missing" / "t.html"))
    assert done.returncode == 2
    assert "missing/t.html: cannot write" in done.stderr
    done = surge("fetch", str(source), "--trace", str(tmp_path / "t.html"), "--trace-rows", "0")
    assert done.returncode == 2 and "--trace-rows" in done.stderr


def test_an_interrupted_run_still_writes_its_trace(sim: SimInfo, tmp_path: Path) -> None:
    urls = [sim.url(f"q{n}.delay-10.sim") for n in range(30)] + [sim.url("hang.sim")] * 5
    source = tmp_path / "urls.txt"
    source.write_text("\n".join(urls) + "\n")
    out, page, har = tmp_path / "out.jsonl", tmp_path / "t.html", tmp_path / "t.har"
    process = subprocess.Popen(
        [sys.executable, "-m", "surge.cli", "fetch", str(source), "-o", str(out),
         "--trace", str(page), "--har", str(har), "--resolve", RESOLVE, "--max-time", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        not out.exists() or len(out.read_text().splitlines()) < 30
    ):
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    written = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(written) == 30  # the hung five never finished
    text = page.read_text()
    start = text.index('id="trace-data">') + len('id="trace-data">')
    assert json.loads(text[start : text.index("</script>", start)])["requests"] == 30
    assert len(json.loads(har.read_text())["log"]["entries"]) == 30


@pytest.mark.parametrize("concurrency", [1, 8])
def test_the_page_says_whether_requests_ran_concurrently(
    sim: SimInfo, tmp_path: Path, browser: Chromium, concurrency: int
) -> None:
    """The issue's 'at a glance': one at a time is called out, concurrency is not."""
    source = tmp_path / "urls.txt"
    source.write_text("\n".join(sim.url(f"s{n}.delay-30.sim") for n in range(8)) + "\n")
    page = tmp_path / "t.html"
    done = surge("fetch", str(source), "-o", os.devnull, "--trace", str(page), "--resolve",
                 RESOLVE, "-c", str(concurrency))  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = browser.load(page, expression="document.getElementById('verdict').innerText")
    assert shown.errors == []
    assert ("one after another" in shown.value) == (concurrency == 1), shown.value


def test_a_missing_page_is_an_error_not_a_blank_pass(tmp_path: Path, browser: Chromium) -> None:
    with pytest.raises(BrowserError, match="ERR_FILE_NOT_FOUND"):
        browser.load(tmp_path / "nothing-here.html")


def test_tracing_a_cluster_run_is_a_usage_error(tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:1/\n")
    done = surge("fetch", str(source), "--cluster", "local:1", "--trace", str(tmp_path / "t.html"))
    assert done.returncode == 2 and "not available with --cluster" in done.stderr
    assert not (tmp_path / "t.html").exists()
