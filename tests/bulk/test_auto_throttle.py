"""``--auto-throttle`` (surge.bulk.throttle): each host's window of requests in
flight and the delay between its requests adapt to its latency and its 429/503
answers, AIMD.

The counts are the server's: a real HTTP server on loopback counts, per host,
the requests it is handling at once (from the request's arrival, before any
queue of the host's own) and stamps each arrival.  Asserted: a host that
answers fast grows to the cap and never past it; a host that serves one
request at a time (its latency grows with the load) stays low; a host that
answers 429 gets one request at a time, each further apart than the last -
and, without the option, all at once.  Times are only lower bounds on the
server's gaps (a slow machine makes them longer, never shorter).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.conftest import served

import surge
from surge.bulk.throttle import DEFAULT_CAP, MAX_DELAY_S, MIN_BACKOFF_S, AutoThrottle, Ticket
from surge.http.timings import Timings

SURGE = [sys.executable, "-m", "surge.cli"]
RESOLVE = "*.test:*:127.0.0.1"
FAST_S = 0.2  # a fast host's time per request, in parallel: long beside a round trip
SERVICE_S = 0.05  # the other hosts' (so that requests overlap)
SERIAL_S = 0.2  # a slow host's time per request, one at a time
REFUSED = 3  # a busy host's first answers: 429


class Hosts(ThreadingHTTPServer):
    """A name's first label says how its host behaves (``fast--x.test``: fast)."""

    daemon_threads = True
    request_queue_size = 128  # a burst of connections is not held back by the backlog

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.serial = threading.Lock()  # the slow hosts' one worker
        self.in_flight: dict[str, int] = defaultdict(int)
        self.most: dict[str, int] = defaultdict(int)  # the most in flight at once
        self.seen: dict[str, list[int]] = defaultdict(list)  # in flight as each arrived
        self.arrivals: dict[str, list[float]] = defaultdict(list)

    def urls(self, name: str, n: int) -> list[str]:
        return [f"http://{name}.test:{self.server_address[1]}/{i}" for i in range(n)]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, Hosts)
        host = self.headers["Host"].rsplit(":", 1)[0]
        kind = host.split("--")[0]
        with server.lock:
            server.arrivals[host].append(time.monotonic())
            nth = len(server.arrivals[host])
            server.in_flight[host] += 1
            server.most[host] = max(server.most[host], server.in_flight[host])
            server.seen[host].append(server.in_flight[host])
        try:
            status, headers = 200, {}
            if kind == "slow":
                with server.serial:
                    time.sleep(SERIAL_S)
            else:
                time.sleep(FAST_S if kind == "fast" else SERVICE_S)
            if kind == "busy" and nth <= REFUSED:
                status = 429
            elif kind == "after" and nth == 1:
                status, headers = 503, {"Retry-After": "1"}
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        finally:  # in flight until its answer is written
            with server.lock:
                server.in_flight[host] -= 1

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    with served(Hosts()) as server:
        yield server


def _fetch(urls: list[str], **options: Any) -> list[dict[str, Any]]:
    return list(surge.fetch_all(urls, resolve=[RESOLVE], max_time=10, **options))


def test_a_fast_host_grows_to_the_cap_and_never_past_it(hosts: Hosts) -> None:
    # slow start: 1, 2, 4, 8, 12 a round trip; then 3 round trips at the cap
    cap = 12
    records = _fetch(hosts.urls("fast--api", 64), concurrency=64, per_host=cap, auto_throttle=True)
    assert [r["status"] for r in records] == [200] * 64
    assert hosts.most["fast--api.test"] == cap


def test_the_cap_is_8_without_per_host(hosts: Hosts) -> None:
    records = _fetch(hosts.urls("fast--eight", 48), concurrency=64, auto_throttle=True)
    assert len(records) == 48
    assert hosts.most["fast--eight.test"] == DEFAULT_CAP


def test_a_host_that_serves_one_at_a_time_stays_low(hosts: Hosts) -> None:
    # Its latency grows with each request sent to it at once (it queues them):
    # the window halves at a latency over twice its least (+ 50 ms): a queue of
    # 2 ahead, then stays between 1 and 3.  The slow start overshoots: the first
    # request that finds 2 ahead enters at W = 3 and answers 3 answers later,
    # each +1 - so 6; on a loaded machine, whose least latency is itself late
    # (by 0.1 s), the queue seen is 3 ahead: 8, half the cap of 16.
    records = _fetch(hosts.urls("slow--api", 16), concurrency=64, per_host=16, auto_throttle=True)
    assert [r["status"] for r in records] == [200] * 16
    assert hosts.most["slow--api.test"] <= 8


def test_without_it_a_host_gets_what_the_run_sends(hosts: Hosts) -> None:
    records = _fetch(hosts.urls("slow--off", 8) + hosts.urls("busy--off", 8), concurrency=16)
    assert len(records) == 16
    assert hosts.most["slow--off.test"] == 8  # every input at once
    assert hosts.most["busy--off.test"] == 8  # 429s or not


def test_cli_a_host_answering_429_is_sent_one_request_at_a_time_later_each_time(
    hosts: Hosts, tmp_path: Path
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(u + "\n" for u in hosts.urls("busy--cli", 6)))
    out = tmp_path / "out.jsonl"
    args = ["--auto-throttle", "-c", "8", "--resolve", RESOLVE, "--max-time", "10"]
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), *args, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["status"] for r in records) == [200] * (6 - REFUSED) + [429] * REFUSED
    host = "busy--cli.test"
    # while it refused: one at a time (later, good answers grow the window again)
    assert hosts.seen[host][: REFUSED + 1] == [1] * (REFUSED + 1)
    # After the k-th 429 the next request waits MIN_BACKOFF x 2^(k-1) at least
    # (less 0.05 s for the delivery's jitter): 0.25, 0.5, 1.0 s.
    gaps = [b - a for a, b in itertools.pairwise(hosts.arrivals[host])]
    for k in range(REFUSED):
        assert gaps[k] > MIN_BACKOFF_S * 2**k - 0.05, gaps
    assert "held back" in done.stderr and "--auto-throttle" in done.stderr  # the summary


def test_retry_after_holds_the_host_for_every_input(hosts: Hosts) -> None:
    records = _fetch(hosts.urls("after--api", 4), concurrency=4, auto_throttle=True)
    assert sorted(r["status"] for r in records) == [200, 200, 200, 503]
    first, *later = hosts.arrivals["after--api.test"]
    # Retry-After: 1, for the host, not the one request: none of the others
    # came within the second (the 503's own try ended before they started)
    assert all(t - first > 0.95 for t in later), later


def test_not_with_a_cluster_and_not_a_bool(tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://a.test/\n")
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), "--auto-throttle", "--cluster", "tcp://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("--auto-throttle (auto_throttle=) is not available with --cluster yet")
    )
    with pytest.raises(surge.errors.UsageError, match="auto-throttle must be True or False"):
        list(surge.fetch_all(["http://a.test/"], auto_throttle="yes"))  # type: ignore[arg-type]


# -- the model, driven by hand: no network, no clock ------------------------------------


def _timed(latency: float) -> Timings:
    t = Timings(0.0)
    t.sent, t.first_byte = 1.0, 1.0 + latency
    return t


async def _drive(events: list[tuple[int | None, float, str | None]], cap: int) -> AutoThrottle:
    throttle = AutoThrottle(cap)
    for status, latency, error in events:
        ticket = await throttle.acquire("h")
        ticket.end(status, _timed(latency), error)
    return throttle


@pytest.mark.parametrize(
    ("events", "window", "delay"),
    [
        ([], None, None),
        ([(200, 0.01, None)] * 3, 4.0, None),  # slow start: +1 an answer
        ([(200, 0.01, None)] * 20, 8.0, None),  # ... to the cap, not past it
        ([(200, 0.01, None)] * 7 + [(429, 0.01, None)], 4.0, MIN_BACKOFF_S),  # halved
        ([(429, 0.01, None)] * 3, 1.0, 4 * MIN_BACKOFF_S),  # each 429 doubles the delay
        ([(503, 0.01, None)] * 20, 1.0, 60.0),  # ... up to MAX_DELAY_S
        ([(429, 0.0, None), (200, 0.0, None)], 2.0, MIN_BACKOFF_S / 2),  # halfway back
        ([(None, 0.0, "read_timeout")], 1.0, 0.0),  # a timeout halves, no back-off
        ([(None, 0.0, "connect_refused")] * 3, 1.0, 0.0),  # a dead host: --max-host-errors'
        ([(404, 0.01, None)] * 5, 1.0, None),  # an error page never grows it
        ([(200, 0.1, None), (200, 0.1, None), (200, 0.3, None)], 1.5, None),  # a queue: halved
        ([(200, 0.1, None), (200, 0.1, None), (200, 0.24, None)], 4.0, None),  # under 2x + 50 ms
    ],
)
async def test_the_model(
    events: list[tuple[int | None, float, str | None]], window: float | None, delay: float | None
) -> None:
    throttle = await _drive(events, cap=8)
    assert throttle.window("h") == (None if not events else window)
    if delay is not None:
        assert throttle._hosts["h"].delay == pytest.approx(delay)


async def test_one_halving_per_round() -> None:
    # Four requests in flight when the host says 429 four times: news of one load, one halving.
    throttle = await _drive([(200, 0.01, None)] * 7, cap=8)
    tickets = [await throttle.acquire("h") for _ in range(8)]
    for ticket in tickets[:4]:
        ticket.end(429, _timed(0.01), None)
    assert throttle.window("h") == 4.0
    for ticket in tickets[4:]:
        ticket.end()


async def test_a_waiter_cancelled_gives_its_place_back() -> None:
    import asyncio

    throttle = AutoThrottle(1)
    held = await throttle.acquire("h")
    waiting = asyncio.ensure_future(throttle.acquire("h"))
    await asyncio.sleep(0)
    waiting.cancel()
    held.end(200, _timed(0.01))
    with pytest.raises(asyncio.CancelledError):
        await waiting
    again = await asyncio.wait_for(throttle.acquire("h"), 1)  # the place is free
    again.end()


async def test_the_table_forgets_idle_hosts() -> None:
    throttle = AutoThrottle(4, max_hosts=10)
    busy = await throttle.acquire("busy")
    for n in range(100):
        (await throttle.acquire(f"h{n}")).end(200, _timed(0.01))
        assert len(throttle) <= 11
    assert throttle.window("busy") == 1.0  # a host in flight is kept
    busy.end()


_EVENTS = st.sampled_from(
    [
        (200, 0.01, None),
        (200, 0.5, None),
        (404, 0.01, None),
        (429, 0.01, None),
        (503, 0.0, None),
        (None, 0.0, "read_timeout"),
        (None, 0.0, "connect_refused"),
        (None, 0.0, None),  # ended without news (cancelled)
    ]
)


@given(
    st.integers(1, 6),
    st.lists(st.tuples(st.booleans(), st.integers(0, 7), _EVENTS), max_size=80),
)
async def test_the_bounds_hold_whatever_the_host_answers(
    cap: int, steps: list[tuple[bool, int, tuple[int | None, float, str | None]]]
) -> None:
    """Random starts and ends: the window stays in [1, cap], the delay in [0,
    MAX_DELAY_S], no more than the window's whole part is let in at once past
    what was in flight, and every request ends up let in."""
    import asyncio

    throttle = AutoThrottle(cap)
    held: list[Ticket] = []
    waiting: list[asyncio.Task[Ticket]] = []
    for start, pick, (status, latency, error) in steps:
        if start or not held:
            waiting.append(asyncio.ensure_future(throttle.acquire("h")))
        else:
            held.pop(pick % len(held)).end(status, _timed(latency), error)
        await asyncio.sleep(0)
        held += [task.result() for task in waiting if task.done()]
        waiting = [task for task in waiting if not task.done()]
        entry = throttle._hosts["h"]
        assert 1.0 <= entry.window <= cap
        assert 0.0 <= entry.delay <= MAX_DELAY_S
        assert entry.in_flight == len(held) <= cap
        assert not waiting or len(held) >= int(entry.window)  # none waits for room there is
    while held or waiting:  # all end: every waiter gets in
        if held:
            held.pop().end(200, _timed(0.01))
        await asyncio.sleep(0)
        held += [task.result() for task in waiting if task.done()]
        waiting = [task for task in waiting if not task.done()]
    assert not steps or throttle._hosts["h"].in_flight == 0
