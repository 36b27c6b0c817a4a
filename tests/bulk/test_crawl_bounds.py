"""Crawl-sized bounds of ``--max-host-errors`` and ``--rate``, the sizes the
issue names scaled to what a CI run can afford.

- A tarpit (accepts, never answers) among 1,000 hosts of the simulated web,
  200 of the inputs its own: with ``--max-host-errors 3`` the tarpit is sent
  3 + C - 1 tries at most (C: the concurrency, the most of its tries that can
  be in flight at once), exactly 3 with C = 1, and each of its other inputs is
  a ``host_skipped`` record sent nothing; the 1,000 answering hosts are
  untouched.  The counts are the tarpit's own (connections it accepted) and
  the records'.  The same bound holds for inputs that wait before their
  request goes out - for one of the host's ``--per-host P`` connections (C =
  P), in a pacer, in the ``--auto-throttle`` window: the budget is asked again
  at the last moment, so none still waiting is sent once it is spent.
- ``--rate 400/s`` over 800 inputs, 2 s, stands for the issue's ``--rate
  200/s`` over 2,000 (10 s): the property - no window of T seconds holds more
  than T x N + 1 + L x N requests, L being the lateness allowed (see
  test_rate.py) - does not depend on the run's length once it spans more than
  one window, and the interval is half as long (2.5 ms), so the pacer is held
  to a finer grain.  L is 0.25 s here, not test_rate's 0.1 s: on this 2-core
  box under a load average of 8-15, benchmarks/crawl.py saw the server's stamps
  bunch after stalls of ~0.2 s (benchmarks/README.md, "Crawl controls").  A
  burst - a bucket of saved slots - still puts all 800 in one window, and a
  pacer that runs fast fails the span: from the server's stamps, first to last
  request >= (inputs - 1) / N - L.  The issue's "total within 5% of 10 s" is a
  wall-clock upper bound, which a test does not assert on a shared machine:
  benchmarks/crawl.py measures it, beside curl.  curl's ``--rate`` is the
  reference, held to the same bounds.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.bulk.test_host_budget import Tarpit
from tests.bulk.test_rate import Stamped, most_in_a_window
from tests.conftest import RESOLVE, needs

import surge
from surge.sim import SimInfo

SURGE = [sys.executable, "-m", "surge.cli"]
LIMIT = 3
SIM_HOSTS = 1_000
TARPIT_EVERY = 5  # a tarpit input after every 5th host: 200 of them
MAX_TIME = 0.3
RATE = 400  # a second
RATE_INPUTS = 800
LATE_S = 0.25  # L above


@pytest.fixture(scope="module")
def tarpit() -> Iterator[Tarpit]:
    pit = Tarpit()
    try:
        yield pit
    finally:
        pit.close()


@pytest.fixture(scope="module")
def stamped() -> Iterator[Stamped]:
    server = Stamped()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _crawl(sim: SimInfo, tarpit: Tarpit, run: str) -> list[str]:
    urls = []
    for n in range(SIM_HOSTS):
        urls.append(f"http://{run}{n}--status-200.sim:{sim.http_port}/")
        if n % TARPIT_EVERY == 0:
            urls.append(f"http://127.0.0.1:{tarpit.port}/{run}/{n}")
    return urls


def _tries(pit: list[dict[str, Any]], accepted: int, most: int) -> int:
    """The tarpit's tries, checked against what it accepted and what was skipped:
    LIMIT <= tries <= connections accepted <= ``most``."""
    kinds = Counter(r["error"] for r in pit)
    assert set(kinds) == {"read_timeout", "host_skipped"}
    tries = kinds["read_timeout"]
    # A connection a try, none reused (none ever finished); and one more for
    # each input whose connection was being opened as the budget went over: not
    # written on.
    assert LIMIT <= tries <= accepted <= most
    assert kinds["host_skipped"] == len(pit) - tries
    skipped = [r for r in pit if r["error"] == "host_skipped"]
    # sent nothing (its connection may have been opened, as the budget went over)
    assert all(r["attempts"] == 0 and r["timings"]["ttfb_ms"] is None for r in skipped)
    assert sum(r["timings"]["connect_ms"] is not None for r in skipped) == accepted - tries
    return tries


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_tarpit_among_1000_hosts_costs_3_tries(
    sim: SimInfo, tarpit: Tarpit, concurrency: int
) -> None:
    before = tarpit.accepted
    urls = _crawl(sim, tarpit, f"c{concurrency}x")
    records = list(
        surge.fetch_all(
            urls,
            concurrency=concurrency,
            max_time=MAX_TIME,
            resolve=[RESOLVE],
            max_host_errors=LIMIT,
        )
    )
    assert sorted(r["line"] for r in records) == list(range(1, len(urls) + 1))
    pit = [r for r in records if f":{tarpit.port}/" in r["url"]]
    others = [r for r in records if f":{tarpit.port}/" not in r["url"]]
    assert len(pit) == SIM_HOSTS // TARPIT_EVERY and len(others) == SIM_HOSTS
    assert Counter((r["status"], r["error"]) for r in others) == {(200, None): SIM_HOSTS}
    tries = _tries(pit, tarpit.accepted - before, LIMIT + concurrency - 1)
    if concurrency == 1:
        assert tries == LIMIT


# Each way an input waits before its request goes out, and the most of the
# tarpit's tries in flight at once behind it (C in the bound N + C - 1): the
# host's connections (--per-host P: P), its pacer's and the run's slots (at
# 10/s against a try of MAX_TIME: 3 or 4, and 1 more for a late timer), its
# --auto-throttle window (a timeout halves it to 1: 1, as --per-host 1).
WAITS = [
    pytest.param({"per_host": 1}, 1, id="per-host-1"),
    pytest.param({"per_host": 2}, 2, id="per-host-2"),
    pytest.param({"rate_per_host": 10.0}, 5, id="rate-per-host"),
    pytest.param({"rate": 10.0}, 5, id="rate"),
    pytest.param({"auto_throttle": True}, 1, id="auto-throttle"),
]


@pytest.mark.parametrize(("waits", "in_flight"), WAITS)
def test_inputs_waiting_behind_a_tarpit_are_not_sent(
    tarpit: Tarpit, waits: dict[str, Any], in_flight: int
) -> None:
    """12 inputs of the tarpit, all in the engine at once (-c 20), each held
    back by one of the waits: once it goes over, none still waiting is sent."""
    before = tarpit.accepted
    run = "-".join(f"{k}{v}" for k, v in waits.items())
    urls = [f"http://127.0.0.1:{tarpit.port}/{run}/{n}" for n in range(12)]
    records = list(
        surge.fetch_all(urls, concurrency=20, max_time=MAX_TIME, max_host_errors=LIMIT, **waits)
    )
    _tries(records, tarpit.accepted - before, LIMIT + in_flight - 1)


def _rate_urls(server: Stamped, run: str) -> list[str]:
    return [server.url(run, n, "127.0.0.1" if n % 3 else "localhost") for n in range(RATE_INPUTS)]


def _check_paced(stamps: list[float]) -> None:
    assert len(stamps) == RATE_INPUTS
    for window in (1.0, 0.1):
        assert most_in_a_window(stamps, window) <= (window + LATE_S) * RATE + 1, window
    assert max(stamps) - min(stamps) >= (RATE_INPUTS - 1) / RATE - LATE_S  # never faster


def _paced_run(client: str, urls: list[str], tmp_path: Path) -> list[str]:
    """The command that fetches ``urls`` at RATE: surge fetch, or curl (the reference)."""
    if client == "curl":
        config = tmp_path / "curl.cfg"
        config.write_text("".join(f'url = "{u}"\noutput = "/dev/null"\n' for u in urls))
        return ["curl", "-s", "--rate", f"{RATE}/s", "-K", str(config)]
    inputs = tmp_path / "urls.txt"
    inputs.write_text("\n".join(urls) + "\n")
    return [*SURGE, "fetch", str(inputs), "--rate", f"{RATE}/s", "-c", "50", "-o", "/dev/null"]


@pytest.mark.parametrize(
    "client",
    [
        "surge",
        pytest.param("curl", marks=needs("curl")),
    ],
)
def test_rate_400_over_800_inputs(stamped: Stamped, tmp_path: Path, client: str) -> None:
    command = _paced_run(client, _rate_urls(stamped, client), tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    _check_paced(stamped.stamps[client])
