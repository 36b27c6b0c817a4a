"""What the crawl controls did is in ``surge fetch``'s summary and on its
``--trace`` page: the ``robots_disallowed`` and ``host_skipped`` records among
the error classes, and the requests held back - by ``--rate``, per host
(``--rate-per-host``, a Crawl-delay, Retry-After, ``--auto-throttle``'s delay)
and by ``--auto-throttle``'s window - with how many waited and how long.

One run of the command against a real HTTP server on loopback (a host whose
robots.txt disallows a path, a host that answers) and a dead port; the summary's
counts are held to the records written.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.conftest import served

from surge.bulk.summary import Summary

SURGE = [sys.executable, "-m", "surge.cli"]
RESOLVE = "*.test:*:127.0.0.1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"User-agent: *\nDisallow: /private\n" if self.path == "/robots.txt" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    with served(httpd):
        yield httpd


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# (the run's options, its inputs: (host, path) each; the error classes it makes;
# what held requests back, with the least count of each)
RUNS = {
    # 4 tries to a.test at 20/s and its robots.txt: the 4 tries are let go
    # together once robots.txt is in, so 3 of them at least wait for the
    # host's slots, and for the run's at 10/s (taken after the host's); the
    # first waits too unless robots.txt took longer than a slot (a loaded box)
    "robots": (
        ["--robots", "obey", "--rate-per-host", "20", "--rate", "10/s"],
        [("a", f"/{n}") for n in range(4)] + [("a", f"/private/{n}") for n in range(2)],
        {"robots_disallowed": 2},
        {"per host": 3, "--rate": 3},
    ),
    # the dead host: 1 refused try, then skipped, those waiting for its window
    # included; a.test's 3 inputs at --per-host 1 wait for its window
    "budget": (
        ["--max-host-errors", "1", "--auto-throttle", "--per-host", "1"],
        [("dead", f"/{n}") for n in range(3)] + [("a", f"/{n}") for n in range(3)],
        {"connect_refused": 1, "host_skipped": 2},
        {"--auto-throttle": 3},
    ),
}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_summary_and_the_trace_show_what_the_crawl_controls_did(
    server: ThreadingHTTPServer, tmp_path: Path, run: str
) -> None:
    options, inputs, classes, least_held = RUNS[run]
    ports = {"a": server.server_address[1], "dead": _closed_port()}
    source = tmp_path / "urls.txt"
    source.write_text("".join(f"http://{h}.test:{ports[h]}{path}\n" for h, path in inputs))
    out, page = tmp_path / "out.jsonl", tmp_path / "trace.html"
    args = [*options, "-c", "4", "--resolve", RESOLVE, "--max-time", "5"]
    args += ["-o", str(out), "--trace", str(page)]
    done = subprocess.run(
        [*SURGE, "fetch", str(source), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    errors = Counter(r["error"] for r in records if r["error"])
    assert errors == classes
    lines = done.stderr.splitlines()
    shown = next(line for line in lines if line.startswith("  errors  "))
    for name, n in classes.items():
        assert f"{name}: {n}" in shown
    held = next(line for line in lines if line.startswith("  held back  "))
    counted = dict(re.findall(r"(--rate|per host|--auto-throttle): ([\d,]+) waited", held))
    for name, least in least_held.items():
        assert int(counted[name]) >= least, held
    text = page.read_text()  # the page says it, and counts the classes
    assert "queued includes the pacing" in text and held.strip() in text
    assert all(f'"{name}":{n}' in text for name, n in classes.items())


def test_held_back_adds_up_merged_and_is_in_the_json() -> None:
    one, two = Summary(), Summary()
    one.hold("--rate", 3, 1.5)
    one.hold("per host", 0, 0.0)  # nothing waited: not shown
    two.hold("--rate", 2, 0.5)
    two.hold("--auto-throttle", 1, 0.25)
    one.merge(two)
    assert one.as_dict(1.0)["held"] == {
        "--rate": {"requests": 5, "s": 2.0},
        "--auto-throttle": {"requests": 1, "s": 0.25},
    }
    assert one.held_line() == ("held back  --rate: 5 waited 2.0 s  --auto-throttle: 1 waited 0.2 s")
    assert "held back" not in Summary().render(1.0)
