"""``--robots obey`` (surge.bulk.robots): RFC 9309's examples and rules for a
robots.txt that is missing, failing, redirected, looping, huge or slow, on a
real HTTP server on loopback that serves each origin's robots.txt and counts
the requests for it: exactly one robots.txt fetch per origin (the hops of one
when it redirects), however many of its inputs are in flight at once.  A
disallowed input is a ``robots_disallowed`` record and never reaches the server.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import served

import surge
from surge.bulk.robots import MAX_BYTES

SURGE = [sys.executable, "-m", "surge.cli"]
RESOLVE = "*.test:*:127.0.0.1"

# RFC 9309 section 5.1, as written there.
RFC_EXAMPLE = """\
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""
# RFC 9309 section 5.2: the longest match wins.
LONGEST_MATCH = """\
User-Agent: foobot
Allow: /example/page/
Disallow: /example/page/disallowed.gif
"""
HUGE = (
    "User-agent: *\nDisallow: /early\n"
    + "# a comment that fills the file past the limit\n" * (MAX_BYTES // 40)
    + "Disallow: /late\n"
)
# The 500 KiB limit falls inside a rule: what is left of it ("Disallow: /cu")
# is dropped, not read as a rule of its own.
_HEAD = "User-agent: *\n"
_FILLER = "# filler\n" * ((MAX_BYTES - len(_HEAD) - 13) // 9)
_PAD = "#" * (MAX_BYTES - len(_HEAD) - len(_FILLER) - 14) + "\n"
CUT = _HEAD + _FILLER + _PAD + "Disallow: /cutoff\n"
assert CUT.encode()[:MAX_BYTES].endswith(b"\nDisallow: /cu")
STATUSES = {"missing": 404, "forbidden": 403, "busy": 503, "limited": 429}


class Origins(ThreadingHTTPServer):
    """Every name's first label says what its robots.txt is (``rfc--x.test``: ``rfc``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.robots: Counter[str] = Counter()  # robots.txt requests (and hops) per host
        self.sent: dict[str, list[tuple[str, float]]] = defaultdict(list)  # other paths
        self.release = threading.Event()

    def url(self, name: str, path: str) -> str:
        return f"http://{name}.test:{self.server_address[1]}{path}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, Origins)
        host = self.headers["Host"].rsplit(":", 1)[0]
        kind = host.split(".")[0].split("--")[0]
        path = self.path
        if not (path == "/robots.txt" or path.startswith("/hop/")):
            with server.lock:
                server.sent[host].append((path, time.monotonic()))
            self._answer(200, b"ok")
            return
        with server.lock:
            server.robots[host] += 1
        if kind == "rfc":
            self._answer(200, RFC_EXAMPLE.encode())
        elif kind == "longest":
            self._answer(200, LONGEST_MATCH.encode())
        elif kind in STATUSES:
            self._answer(STATUSES[kind], b"no")
        elif kind == "hops":  # three redirects, then rules
            hop = 3 if path == "/robots.txt" else int(path.rsplit("/", 1)[1])
            if hop:
                self._answer(301 if hop % 2 else 302, b"", location=f"/hop/{hop - 1}")
            else:
                self._answer(200, b"User-agent: *\nDisallow: /private\n")
        elif kind == "loop":
            self._answer(301, b"", location="/robots.txt")
        elif kind == "huge":
            self._answer(200, HUGE.encode())
        elif kind == "cut":
            self._answer(200, CUT.encode())
        elif kind == "slow":  # answers after the client's --max-time
            server.release.wait(10)
            self._answer(200, b"User-agent: *\nAllow: /\n")
        elif kind == "delay":
            self._answer(200, b"User-agent: *\nCrawl-delay: 0.25\n")
        else:
            self._answer(404, b"")

    def _answer(self, status: int, body: bytes, location: str | None = None) -> None:
        self.send_response(status)
        if location is not None:
            self.send_header("Location", location)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client stopped reading (cut at the limit)
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origins() -> Iterator[Origins]:
    with served(Origins()) as server:
        try:
            yield server
        finally:
            server.release.set()  # the slow robots.txt: answered, its thread ends


# (host, path, sent?) for surge's own User-Agent, which only the * group names
CASES = [
    ("rfc", "/example/page.html", False),
    ("rfc", "/example/", False),
    ("rfc", "/a/b.gif", False),
    ("rfc", "/publications/x", True),
    ("rfc", "/other", True),
    ("missing", "/x", True),  # 4xx: unavailable, everything allowed
    ("missing", "/y", True),
    ("forbidden", "/x", True),
    ("busy", "/x", False),  # 5xx: unreachable, everything disallowed
    ("busy", "/y", False),
    ("limited", "/x", False),  # 429: as 5xx
    ("hops", "/private/a", False),  # the rules at the end of three redirects
    ("hops", "/public", True),
    ("loop", "/x", True),  # more than 5 redirects: unavailable, allowed
    ("huge", "/early/a", False),
    ("huge", "/late/a", True),  # past the first 500 KiB: not parsed
    ("cut", "/cux", True),  # a rule cut at 500 KiB: dropped
    ("slow", "/x", False),  # unreachable in time: disallowed
    ("slow", "/y", False),
    ("delay", "/1", True),
    ("delay", "/2", True),
    ("delay", "/3", True),
]


def _check(records: list[dict[str, Any]], origins: Origins, run: str) -> None:
    by_url = {r["url"]: r for r in records}
    assert len(by_url) == len(records) == len(CASES)
    for kind, path, sent in CASES:
        host = f"{kind}--{run}"
        record = by_url[origins.url(host, path)]
        if sent:
            assert (record["status"], record["error"]) == (200, None), record
        else:
            assert record["error"] == "robots_disallowed", record
            assert record["attempts"] == 0 and record["status"] is None
        assert (path in [p for p, _ in origins.sent[f"{host}.test"]]) is sent
    for kind in {k for k, _, _ in CASES}:
        # a loop: followed as the run's redirects are, up to 5 hops (RFC 9309), then allowed
        hops = 5 + 1 if kind == "loop" else 4 if kind == "hops" else 1
        assert origins.robots[f"{kind}--{run}.test"] == hops, kind  # one fetch per origin
    # Crawl-delay 0.25: no two of the host's requests within 0.2 s of each other
    # (the server's times; 0.05 s less than the delay, for the delivery's jitter)
    times = sorted(t for _, t in origins.sent[f"delay--{run}.test"])
    assert len(times) == 3 and all(b - a > 0.2 for a, b in itertools.pairwise(times))


def test_cli(origins: Origins, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(origins.url(f"{k}--cli", p) + "\n" for k, p, _ in CASES))
    out = tmp_path / "out.jsonl"
    args = ["--robots", "obey", "-c", "8", "--max-time", "0.5", "--resolve", RESOLVE]
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), *args, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    _check([json.loads(line) for line in out.read_text().splitlines()], origins, "cli")
    disallowed = sum(not sent for _, _, sent in CASES)
    assert f"robots_disallowed: {disallowed}" in done.stderr  # the summary counts them


def test_api(origins: Origins) -> None:
    urls = [origins.url(f"{k}--api", p) for k, p, _ in CASES]
    records = list(
        surge.fetch_all(urls, concurrency=8, max_time=0.5, resolve=[RESOLVE], robots="obey")
    )
    _check(records, origins, "api")


@pytest.mark.parametrize(
    ("agent", "host", "allowed", "disallowed"),
    [
        ("foobot/1.0", "rfc--foo", ["/example/page.html", "/example/allowed.gif"], ["/x"]),
        ("barbot", "rfc--bar", ["/x", "/a.gif", "/example/other"], ["/example/page.html"]),
        ("Mozilla/5.0 (compatible; bazbot/2)", "rfc--baz", ["/x"], ["/example/page.html"]),
        ("quxbot", "rfc--qux", ["/example/page.html", "/a.gif"], []),  # a group of no rules
        (
            "foobot",
            "longest--foo",
            ["/example/page/", "/example/page/x"],
            ["/example/page/disallowed.gif"],
        ),
    ],
)
def test_rfc_9309_groups_by_user_agent(
    origins: Origins, agent: str, host: str, allowed: list[str], disallowed: list[str]
) -> None:
    urls = [origins.url(host, p) for p in allowed + disallowed]
    records = list(
        surge.fetch_all(
            urls, concurrency=4, max_time=2, resolve=[RESOLVE], robots="obey", user_agent=agent
        )
    )
    outcome = {r["url"]: r["error"] for r in records}
    assert outcome == {
        **{origins.url(host, p): None for p in allowed},
        **{origins.url(host, p): "robots_disallowed" for p in disallowed},
    }
    assert origins.robots[f"{host}.test"] == 1


def test_ignore_asks_for_no_robots_txt(origins: Origins) -> None:
    records = list(surge.fetch_all([origins.url("busy--ignore", "/x")], resolve=[RESOLVE]))
    assert records[0]["status"] == 200
    assert origins.robots["busy--ignore.test"] == 0


def test_an_origin_that_refuses_is_unreachable_disallow_all() -> None:
    # RFC 9309 2.3.1.4: no answer at all (here, connect_refused) is "unreachable"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    urls = [f"http://refused.test:{port}/{n}" for n in range(3)]
    records = list(surge.fetch_all(urls, max_time=2, resolve=[RESOLVE], robots="obey"))
    assert [r["error"] for r in records] == ["robots_disallowed"] * 3
    assert all("unreachable (connect_refused)" in r["error_detail"] for r in records)
    assert all(r["attempts"] == 0 for r in records)


def test_a_crawl_delay_the_pacer_forgot_is_given_again() -> None:
    """The pacer forgets an idle host's Crawl-delay with its slot (its table is
    bounded); the next input of the origin gives it again, before its slot."""
    import asyncio

    from surge.bulk.pacing import HostPacer
    from surge.bulk.robots import RobotsRules, Rules

    now = [0.0]
    pacer = HostPacer(None, max_hosts=4, clock=lambda: now[0])
    robots = RobotsRules("surge", pacer, None)
    origin = ("http", "slow.example", 80)
    robots._kept[origin] = Rules(delay=2.0)  # as its robots.txt said, fetched before
    pacer.space("slow.example", 2.0)
    for n in range(20):  # other hosts, each idle soon: the sweeps forget slow.example
        now[0] += 3.0
        pacer.space(f"other{n}", 2.0)
        pacer.slot(f"other{n}")
    assert "slow.example" not in pacer._own
    assert asyncio.run(robots.refusal(None, origin, "http://slow.example/")) is None  # type: ignore[arg-type]
    assert [pacer.slot("slow.example"), pacer.slot("slow.example")] == [0.0, 2.0]


@pytest.mark.parametrize("bound", ["origins", "bytes"])
def test_the_rules_kept_are_bounded_and_a_forgotten_origin_is_asked_again(
    origins: Origins, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    """A crawl of many hosts keeps the most recently used origins' rules, three
    here (by count, or by their robots.txt bytes); one forgotten is fetched again,
    and its rules still hold."""
    from surge.bulk import robots

    if bound == "origins":
        monkeypatch.setattr(robots, "MOST_KEPT", 3)
    else:
        monkeypatch.setattr(robots, "MOST_KEPT_BYTES", 3 * len(RFC_EXAMPLE.encode()))
    hosts = [f"rfc--{bound}{n}" for n in range(6)]
    urls = [origins.url(h, "/other") for h in hosts] + [origins.url(h, "/example/") for h in hosts]
    records = list(
        surge.fetch_all(urls, concurrency=1, max_time=2, resolve=[RESOLVE], robots="obey")
    )
    assert [r["error"] for r in records] == [None] * 6 + ["robots_disallowed"] * 6
    # in order, one at a time: each origin was forgotten before it came again
    assert [origins.robots[f"{h}.test"] for h in hosts] == [2] * 6


def test_an_origin_used_again_stays_kept() -> None:
    """Least recently *used*: an origin asked for again moves to the kept end."""
    import asyncio

    from surge.bulk.pacing import HostPacer
    from surge.bulk.robots import RobotsRules, Rules

    robots = RobotsRules("surge", HostPacer(None), None)
    robots.most_kept = 2
    a, b, c = (("http", f"{n}.example", 80) for n in "abc")
    robots._keep(a, Rules())
    robots._keep(b, Rules())
    assert asyncio.run(robots.refusal(None, a, "http://a.example/")) is None  # type: ignore[arg-type]
    robots._keep(c, Rules())
    assert list(robots._kept) == [a, c]
