"""``--max-host-errors N`` (surge.bulk.hostbudget): a host that accepts and never
answers (a tarpit), among hosts of the simulated web, costs N timeouts, not one
per input; its other inputs are ``host_skipped`` records, sent nothing.

The tarpit counts the connections it accepts: each try to it is one (no
connection to it is ever reused: none ever finishes).  The rule asserted: it
is sent at most N + C - 1 tries, C being the most of its requests in flight at
once (here the concurrency, since nothing else bounds it), exactly N with C = 1,
and each try it was sent is a ``read_timeout`` record.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RESOLVE

import surge
from surge.bulk.hostbudget import CONNECTION_FAILURES, HostBudget
from surge.sim import SimInfo

SURGE = [sys.executable, "-m", "surge.cli"]
LIMIT = 3
TARPIT_INPUTS = 20
SIM_INPUTS = 40


class Tarpit:
    """A loopback socket that accepts every connection, reads nothing, answers nothing."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self._done.set()
        self._thread.join(5)
        self.sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def tarpit() -> Iterator[Tarpit]:
    pit = Tarpit()
    try:
        yield pit
    finally:
        pit.close()


def _inputs(sim: SimInfo, tarpit: Tarpit) -> list[str]:
    """Sim hosts (each its own origin) with the tarpit's inputs among them."""
    urls = []
    for n in range(SIM_INPUTS):
        urls.append(f"http://x{n}--status-200.sim:{sim.http_port}/")
        if n % 2 == 0:
            urls.append(f"http://127.0.0.1:{tarpit.port}/{n}")
    assert len(urls) == SIM_INPUTS + TARPIT_INPUTS
    return urls


def _check(records: list[dict[str, Any]], tarpit: Tarpit, concurrency: int) -> None:
    assert sorted(r["line"] for r in records) == list(range(1, SIM_INPUTS + TARPIT_INPUTS + 1))
    pit = [r for r in records if f":{tarpit.port}/" in r["url"]]
    others = [r for r in records if f":{tarpit.port}/" not in r["url"]]
    assert {(r["status"], r["error"]) for r in others} == {(200, None)}
    kinds = Counter(r["error"] for r in pit)
    assert set(kinds) <= {"read_timeout", "host_skipped"}
    tries = kinds["read_timeout"]
    assert tarpit.accepted == tries  # each try it was sent: one connection, one timeout
    if concurrency == 1:
        assert tries == LIMIT
    else:
        assert LIMIT <= tries <= LIMIT + concurrency - 1
    assert kinds["host_skipped"] == TARPIT_INPUTS - tries
    for r in pit:
        if r["error"] == "host_skipped":
            assert r["attempts"] == 0 and r["status"] is None and r["timings"]["connect_ms"] is None
            assert f"--max-host-errors {LIMIT}" in r["error_detail"]


def test_cli_a_tarpit_costs_n_timeouts(sim: SimInfo, tarpit: Tarpit, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("\n".join(_inputs(sim, tarpit)) + "\n")
    out = tmp_path / "out.jsonl"
    args = ["--resolve", RESOLVE, "--max-time", "0.3", "-c", "1", "--max-host-errors", str(LIMIT)]
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), *args, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    _check([json.loads(line) for line in out.read_text().splitlines()], tarpit, 1)
    assert f"host_skipped: {TARPIT_INPUTS - LIMIT}" in done.stderr  # the summary counts them


def test_api_in_flight_tries_end_but_no_new_one_starts(sim: SimInfo, tarpit: Tarpit) -> None:
    records = list(
        surge.fetch_all(
            _inputs(sim, tarpit),
            concurrency=8,
            max_time=0.3,
            resolve=[RESOLVE],
            max_host_errors=LIMIT,
        )
    )
    _check(records, tarpit, 8)


def test_off_every_input_is_tried(sim: SimInfo, tarpit: Tarpit) -> None:
    records = list(
        surge.fetch_all(_inputs(sim, tarpit)[:9], concurrency=8, max_time=0.3, resolve=[RESOLVE])
    )
    assert tarpit.accepted == 3 == sum(r["error"] == "read_timeout" for r in records)


@pytest.mark.parametrize(
    ("events", "skipped"),
    [
        (["read_timeout"] * 2, False),
        (["read_timeout"] * 3, True),
        (["dns_error", "connect_refused", "tls_error"], True),
        (["connect_timeout", "read_timeout", "answer", "read_timeout", "read_timeout"], False),
        (["read_timeout", "answer", "read_timeout", "read_timeout", "read_timeout"], True),
        # not connection-level: the host answered, or the fault is the input's
        (["connection_reset", "protocol_error", "invalid_url", "body_too_large"] * 2, False),
    ],
)
def test_the_count(events: list[str], skipped: bool) -> None:
    budget = HostBudget(LIMIT)
    origin = ("http", "a.example", 80)
    for event in events:
        if event == "answer":
            budget.answered(origin)
        else:
            budget.failed(origin, event)
    assert budget.skipped(origin) is skipped
    assert not budget.skipped(("https", "a.example", 443))  # per origin
    assert len(budget) <= 1  # nothing kept for an origin that never failed
    assert {
        "dns_error",
        "connect_refused",
        "connect_timeout",
        "tls_error",
        "read_timeout",
    } == CONNECTION_FAILURES


def test_each_try_counts_and_an_origin_over_is_not_retried(sim: SimInfo, tarpit: Tarpit) -> None:
    urls = [f"http://127.0.0.1:{tarpit.port}/{n}" for n in range(4)]
    records = list(
        surge.fetch_all(
            urls,
            concurrency=1,
            max_time=0.3,
            retries=5,
            retry_backoff=0.01,
            max_host_errors=LIMIT,
        )
    )
    by_line = {r["line"]: r for r in records}
    assert (by_line[1]["error"], by_line[1]["attempts"]) == ("read_timeout", LIMIT)
    assert [by_line[n]["error"] for n in (2, 3, 4)] == ["host_skipped"] * 3
    assert tarpit.accepted == LIMIT
