"""``--rate N/U`` (surge.bulk.pacing): at most N requests per unit across the
run, smooth - a slot every 1/N s, never a burst - as curl's ``--rate``.

The times are the server's: a real HTTP server on loopback stamps each request
as it arrives.  The tolerance stated and asserted: any window of T seconds
holds at most T x N + 1 + L x N requests.  T x N + 1 slots fit in a closed
window; a request starts at its slot or later, never earlier, but one that
starts late (a busy event loop wakes it late, the server's thread takes it
late) can land in the window of the requests after it: L is the lateness
allowed, 0.1 s here, for a loaded machine.  A burst - what a bucket of saved
tokens would send - puts all 60 in one window.  curl's ``--rate`` on the same
server is held to the same bound.  No assertion on the total time.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.conftest import needs, require, served

import surge
from surge.bulk.pacing import HostPacer, parse_rate

SURGE = [sys.executable, "-m", "surge.cli"]
RATE = 50  # a second
INPUTS = 60
LATE_S = 0.1  # L above


class Stamped(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Stamp)
        self.stamps: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()

    def url(self, run: str, n: int, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.server_address[1]}/{run}/{n}"


class _Stamp(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a crawl's hosts mostly are
    # The response in one write: as two (head, then body), Nagle holds the body
    # for the client's delayed ACK, ~40 ms a request to a client that sends one
    # request at a time (curl -K), which then cannot keep to the rate.
    wbufsize = -1

    def do_GET(self) -> None:
        now = time.monotonic()
        server = self.server
        assert isinstance(server, Stamped)
        with server.lock:
            server.stamps[self.path.split("/")[1]].append(now)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def stamped() -> Iterator[Stamped]:
    with served(Stamped()) as server:
        yield server


def most_in_a_window(stamps: list[float], window: float) -> int:
    """The most requests any window of ``window`` seconds (closed) holds."""
    stamps = sorted(stamps)
    most, first = 0, 0
    for last, t in enumerate(stamps):
        while t - stamps[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most


def check_paced(stamps: list[float], rate: float) -> None:
    assert len(stamps) == INPUTS
    for window in (1.0, 0.1):  # the second the rate names, and a tenth: no burst
        assert most_in_a_window(stamps, window) <= (window + LATE_S) * rate + 1, window


def _urls(server: Stamped, run: str) -> list[str]:
    # one origin and several: the run's rate is over every host
    return [server.url(run, n, "127.0.0.1" if n % 3 else "localhost") for n in range(INPUTS)]


def test_cli(stamped: Stamped, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("\n".join(_urls(stamped, "cli")) + "\n")
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), "--rate", f"{RATE}/s", "-c", "20", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == INPUTS
    check_paced(stamped.stamps["cli"], RATE)


def test_api_with_per_host_rate_too(stamped: Stamped) -> None:
    records = list(
        surge.fetch_all(_urls(stamped, "api"), concurrency=20, rate=RATE, rate_per_host=40)
    )
    assert {r["status"] for r in records} == {200}
    check_paced(stamped.stamps["api"], RATE)


@needs("curl")
def test_curl_the_reference_meets_the_same_bound(stamped: Stamped, tmp_path: Path) -> None:
    config = tmp_path / "curl.cfg"
    config.write_text(
        "".join(f'url = "{u}"\noutput = "/dev/null"\n' for u in _urls(stamped, "curl"))
    )
    done = subprocess.run(
        ["curl", "-s", "--rate", f"{RATE}/s", "-K", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    check_paced(stamped.stamps["curl"], RATE)


@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("50/s", 50.0),
        ("120/m", 2.0),
        ("7200/h", 2.0),
        ("7200", 2.0),
        ("86400/d", 1.0),
        ("2.5/S", 2.5),
    ],
)
def test_parse_rate(text: str, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize("text", ["", "0/s", "-1/s", "x/s", "5/w", "inf/s", "nan/s", "5/"])
def test_a_bad_rate_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a rate"):
        parse_rate(text)


def test_a_bad_rate_is_one_line_and_exit_2(tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:1/\n")
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), "--rate", "5/w"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--rate '5/w': not a rate" in done.stderr


def test_an_idle_pacer_saves_no_burst() -> None:
    now = [0.0]
    pacer = HostPacer(10, clock=lambda: now[0])
    assert pacer.slot("") == 0.0
    now[0] = 100.0  # idle for a long time: no slots saved up
    waits = [pacer.slot("") for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    pacer.space("slow", 2.0)  # a host of its own interval (Crawl-delay)
    assert [pacer.slot("slow"), pacer.slot("slow")] == pytest.approx([0.0, 2.0])


def test_a_cluster_splits_the_rate_between_its_workers(stamped: Stamped) -> None:
    """Each worker's engine paces at N / W (surge.bulk.cluster.rate_share): W
    pacers of N / W, each at most (T + L) x N / W + 1 in a window, so
    (T + L) x N + W in all."""
    distributed = require("distributed")
    from surge.bulk.cluster import local_cluster

    workers = 2
    with local_cluster(workers, 2) as cluster, distributed.Client(cluster) as client:
        records = list(
            surge.fetch_on_cluster(client, _urls(stamped, "cluster"), shard_size=10, rate=RATE)
        )
    assert sorted(r["line"] for r in records) == list(range(1, INPUTS + 1))
    stamps = stamped.stamps["cluster"]
    assert len(stamps) == INPUTS
    for window in (1.0, 0.1):
        assert most_in_a_window(stamps, window) <= (window + LATE_S) * RATE + workers, window


def test_the_pacers_own_intervals_are_forgotten_with_their_hosts() -> None:
    """Crawl-delays (space()) of 1,000 hosts met once each: the table of the
    hosts' own intervals stays bounded as the slots' does, and a host with a
    wait still ahead keeps its interval through the sweeps."""
    now = [0.0]
    pacer = HostPacer(None, max_hosts=100, clock=lambda: now[0])
    pacer.space("kept", 50.0)
    assert [pacer.slot("kept"), pacer.slot("kept")] == [0.0, 50.0]  # its slot: 100 s on
    for i in range(1000):
        pacer.space(f"host{i}", 0.5)
        pacer.slot(f"host{i}")
        now[0] += 0.01  # each host's slot passes before long
    assert len(pacer._own) <= 201 and len(pacer) <= 201
    assert pacer.slot("kept") == pytest.approx(100.0 - now[0])
    assert pacer.slot("kept") == pytest.approx(150.0 - now[0])  # still 50 s apart


def test_waiters_a_stalled_loop_wakes_together_go_an_interval_apart() -> None:
    """Ten waiters hold slots 50 ms apart; the loop then stalls past all of them.
    They start an interval apart from the stall's end, not at once (a burst of
    ten requests, which a pacer that only keeps slots would send)."""
    import asyncio

    interval = 0.05
    pacer = HostPacer(1 / interval)
    starts: list[float] = []

    async def one() -> None:
        await pacer.wait("")
        starts.append(time.monotonic())

    async def main() -> None:
        waiters = [asyncio.ensure_future(one()) for _ in range(10)]
        await asyncio.sleep(0)  # every waiter took its slot (0, 50, ... 450 ms)
        time.sleep(0.6)  # the loop stalls past them all
        await asyncio.gather(*waiters)

    asyncio.run(main())
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 10
    assert min(gaps) >= interval - 0.002, gaps  # the timers' granularity aside
