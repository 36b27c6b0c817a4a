"""``surge trace``: an httpstat-like breakdown whose phases agree with curl's ``-w``."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
from tests.conftest import RESOLVE
from tests.trace.conftest import surge

from surge.sim import SimInfo

#: Server think time and body trickle the simulated host adds: phases big enough
#: to compare two clients by, on loopback where connects take microseconds.
HOST = "delay-150--slowbody-200.sim"


def curl_w(sim: SimInfo, url: str, *extra: str) -> dict[str, float]:
    """curl's timers (seconds) for one request."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.fail("curl is needed to check surge's phases against it")
    host, port = url.split("/")[2].split(":")
    done = subprocess.run(
        [curl, "-s", "-o", "/dev/null", "--cacert", sim.cafile, "--resolve",
         f"{host}:{port}:127.0.0.1", "-w", "%{json}", *extra, url],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    timers: dict[str, float] = json.loads(done.stdout)
    return timers


def surge_trace(sim: SimInfo, *args: str) -> list[dict[str, Any]]:
    done = surge("trace", "--json", "--resolve", RESOLVE, "--cacert", sim.cafile, *args)
    assert done.returncode in (0, 1), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def phases_of_curl(t: dict[str, float], tls: bool) -> dict[str, float]:
    """curl's cumulative timers as surge's phases (surge.http.timings' table), ms."""
    connect_end = t["time_appconnect"] if tls else t["time_connect"]
    return {
        "connect_ms": 1000 * (t["time_connect"] - t["time_namelookup"]),
        "tls_ms": 1000 * (t["time_appconnect"] - t["time_connect"]) if tls else 0.0,
        "ttfb_ms": 1000 * (t["time_starttransfer"] - t["time_pretransfer"]),
        "body_ms": 1000 * (t["time_total"] - t["time_starttransfer"]),
        "setup_ms": 1000 * connect_end,
    }


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
def test_phases_agree_with_curl(sim: SimInfo, tls: bool) -> None:
    url = sim.url(HOST, tls=tls)
    # Twice each, new connections both times; compare the second (warm) runs, so
    # that neither client's one-time start-up (loading libraries, the CA store)
    # is what the comparison measures.
    ours = surge_trace(sim, "--no-reuse", "-n", "2", url)[-1]
    curl_w(sim, url)
    theirs = phases_of_curl(curl_w(sim, url), tls)
    assert ours["error"] is None and ours["status"] == 200 and ours["new_connection"]
    mine = ours["timings"]
    # The server's 150 ms and 200 ms, seen by both within 25 ms + 10%.
    for phase in ("ttfb_ms", "body_ms"):
        assert abs(mine[phase] - theirs[phase]) <= 25 + 0.1 * theirs[phase], (phase, mine, theirs)
    assert mine["ttfb_ms"] >= 145 and mine["body_ms"] >= 185  # the server's delays, ~
    # Connecting (and the TLS handshake) on loopback: a few ms for both.
    assert mine["connect_ms"] is not None and mine["connect_ms"] < theirs["connect_ms"] + 20
    if tls:
        assert mine["tls_ms"] is not None and 0 < mine["tls_ms"] < theirs["tls_ms"] + 30
    else:
        assert mine["tls_ms"] is None and ours["curl"]["time_appconnect"] == 0
    # curl's own cumulative timers, as surge reports them
    c = ours["curl"]
    assert c["time_namelookup"] <= c["time_connect"] <= c["time_pretransfer"]
    assert c["time_pretransfer"] <= c["time_starttransfer"] <= c["time_total"]
    theirs_total = curl_w(sim, url)["time_total"]
    assert abs(c["time_total"] - theirs_total) <= 0.03 + 0.1 * theirs_total


def test_redirect_timers_follow_curls_rules(sim: SimInfo) -> None:
    """Under -L curl adds each hop's timers together and reports the hops before
    the last as time_redirect; surge's --json does the same."""
    url = sim.url("redirect-2--delay-100.sim", tls=True)
    surge_trace(sim, "-L", url)  # the first run to a name pays for its certificate
    ours = surge_trace(sim, "-L", url)[-1]
    hosts = [f"redirect-{n}--delay-100.sim" for n in range(3)]
    port = url.split("/")[2].split(":")[1]
    extra = [arg for h in hosts for arg in ("--resolve", f"{h}:{port}:127.0.0.1")]
    curl_w(sim, url, "-L", *extra)
    theirs = curl_w(sim, url, "-L", *extra)
    assert ours["status"] == 200 and ours["final_url"].startswith("https://redirect-0-")
    mine = ours["curl"]
    # three hops of 100 ms each: two before the last, all three in the total
    assert mine["time_redirect"] >= 0.2 and mine["time_total"] >= 0.3
    for timer in ("time_redirect", "time_starttransfer", "time_total"):
        assert abs(mine[timer] - theirs[timer]) <= 0.03 + 0.1 * theirs[timer], (timer, mine, theirs)
    assert mine["time_total"] - mine["time_redirect"] < 0.2  # the last hop alone


def test_a_second_request_reuses_the_connection(sim: SimInfo) -> None:
    first, second = surge_trace(sim, "-n", "2", sim.url("delay-5.sim", tls=True))
    assert first["new_connection"] and not second["new_connection"]
    port = sim.https_port
    assert first["remote"] == second["remote"] == f"127.0.0.1:{port}"
    assert first["tls"]["version"].startswith("TLSv1.") and first["tls"]["alpn"] == "http/1.1"
    assert second["timings"]["tls_ms"] is None and second["timings"]["connect_ms"] is None


def test_the_terminal_picture(sim: SimInfo) -> None:
    done = surge("trace", "--resolve", RESOLVE, "--cacert", sim.cafile, sim.url(HOST, tls=True))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "HTTP/1.1 200 OK" in out and "X-Sim-Host: " + HOST in out
    for label in ("DNS Lookup", "TCP Connection", "TLS Handshake", "Server Processing"):
        assert label in out
    for mark in ("namelookup:", "connect:", "pretransfer:", "starttransfer:", "total:"):
        assert mark in out
    assert "\x1b[" not in out  # no colours when stdout is not a terminal


def test_failures_say_their_class_and_exit_1(sim: SimInfo) -> None:
    done = surge(
        "trace", "--resolve", RESOLVE, "--max-time", "0.5", sim.url("hang.sim"),
        "http://127.0.0.1:1/",
    )  # fmt: skip
    assert done.returncode == 1
    assert "FAILED: read_timeout" in done.stdout and "FAILED: connect_refused" in done.stdout
    hang, refused = surge_trace(
        sim, "--max-time", "0.5", sim.url("hang.sim"), "http://127.0.0.1:1/"
    )
    assert hang["error"] == "read_timeout" and refused["error"] == "connect_refused"
    assert 0.5 <= hang["curl"]["time_total"] < 1.5
    assert hang["curl"]["time_starttransfer"] == 0  # as curl: never started


def test_a_request_that_fails_before_connecting_used_no_connection() -> None:
    """A lookup that fails opened no connection and reused none."""
    done = surge("trace", "http://nowhere.invalid/", "not a url")
    assert done.returncode == 1
    assert "(no connection)" in done.stdout and "reused connection" not in done.stdout
    lines = surge("trace", "--json", "http://nowhere.invalid/").stdout.splitlines()
    assert json.loads(lines[0])["new_connection"] is None


def test_usage_errors_exit_2(sim: SimInfo) -> None:
    assert surge("trace").returncode == 2
    done = surge("trace", "--cacert", "/nonexistent/ca.pem", sim.url("a.sim", tls=True))
    assert done.returncode == 2 and "cannot load CA certificates" in done.stderr
    done = surge("trace", "-H", "no colon", sim.url("a.sim"))
    assert done.returncode == 2 and "expected 'Name: value'" in done.stderr
