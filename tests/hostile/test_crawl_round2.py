# ruff: noqa: E501  (assertion messages name the broken claim in full)
"""Hostile round 2 of ``surge fetch``'s crawl controls, written from
docs/fetch.md ("Crawl controls") and ``surge fetch --help`` only, not the code
nor the developers' tests: ``--robots obey`` against hostile robots.txt
answers, ``--rate``, ``--max-host-errors``, ``--fail-exit``, cookie files and
``--cookie-jar``, ``--limit-rate``; and the project's rules with them: one
record per input line, bad user input is one line and exit 2 with nothing
written lost, no secret in any file surge writes but the jar asked for, a
remote failure is a record, never a traceback.

The servers are small threaded ``http.server`` ones on loopback (port 0),
scripted per test, logging what they were sent; surge runs as a child process,
each with a timeout, every loop bounded.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RESOLVE
from tests.hostile.conftest import SURGE, run

Handler = http.server.BaseHTTPRequestHandler
Route = Callable[[Handler], None]


# --- a scripted loopback web -------------------------------------------------


class Web:
    """A threaded HTTP/1.0 server: ``routes[path] = fn(handler)``; every request
    is logged as (monotonic time, method, path with query, headers)."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.log: list[tuple[float, str, str, dict[str, str]]] = []
        self.stop = threading.Event()
        web = self

        class H(http.server.BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                web.log.append(
                    (
                        time.monotonic(),
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                    )
                )
                path = self.path.split("?", 1)[0]
                route = (
                    web.routes.get(path) or web.routes.get("*") or (lambda h: send(h, 200, b"ok"))
                )
                if path == "/robots.txt" and path not in web.routes:
                    route = lambda h: send(h, 404, b"no robots")  # noqa: E731
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    route(self)

            do_GET = do_HEAD = do_POST = handle_one

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [p for _, _, p, _ in self.log]

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def send(
    h: Handler, status: int = 200, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()
) -> None:
    h.send_response(status)
    for k, v in headers:
        h.send_header(k, v)
    if not any(k.lower() == "content-length" for k, _ in headers):
        h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


def reply(
    status: int = 200, body: bytes = b"ok", headers: tuple[tuple[str, str], ...] = ()
) -> Route:
    return lambda h: send(h, status, body, headers)


def redirect(location: str, status: int = 302) -> Route:
    return reply(status, b"", (("Location", location),))


@pytest.fixture
def web() -> Iterator[Web]:
    w = Web()
    yield w
    w.close()


@pytest.fixture
def web2() -> Iterator[Web]:
    w = Web()
    yield w
    w.close()


def dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- running surge ---------------------------------------------------------------

BASE = ["fetch", "--resolve", RESOLVE, "--max-time", "3", "-q", "--no-progress"]


def fetch(
    tmp: Path, urls: list[str], *args: str, timeout: float = 40
) -> tuple[subprocess.CompletedProcess[bytes], list[dict[str, Any]]]:
    """Run surge fetch over these input lines; (the process, its records by line)."""
    inp = tmp / "in.txt"
    inp.write_text("".join(u + "\n" for u in urls))
    out = tmp / "out.jsonl"
    if out.exists():
        out.unlink()
    proc = run([*BASE, str(inp), "-o", str(out), *args], timeout=timeout)
    no_traceback(proc)
    recs = [json.loads(x) for x in out.read_bytes().splitlines()] if out.exists() else []
    recs.sort(key=lambda r: r["line"])
    return proc, recs


def no_traceback(proc: subprocess.CompletedProcess[bytes]) -> None:
    err = proc.stderr.decode(errors="replace")
    assert "Traceback" not in err, (
        f"a traceback instead of a record or one line (project rule):\n{err}"
    )


def one_per_line(recs: list[dict[str, Any]], n: int) -> None:
    lines = sorted(r["line"] for r in recs)
    assert lines == list(range(1, n + 1)), (
        f"one record per input line (project rule): lines {lines}"
    )


def errors(recs: list[dict[str, Any]]) -> list[Any]:
    return [r["error"] for r in recs]


def usage_error(proc: subprocess.CompletedProcess[bytes], *words: str) -> str:
    no_traceback(proc)
    err = proc.stderr.decode(errors="replace").strip()
    assert proc.returncode == 2, (
        f"bad user input must be exit 2 (project rule), got {proc.returncode}: {err}"
    )
    lines = err.splitlines()
    assert len(lines) == 1, f"bad user input must be ONE line (project rule), got:\n{err}"
    for w in words:
        w = w.lstrip("-")
        assert w.lower() in lines[0].lower(), f"the line must name {w!r} (project rule): {lines[0]}"
    return lines[0]


# === robots.txt ================================================================


def robots_case(
    web: Web, tmp: Path, robots: Route, paths: list[str], *args: str
) -> list[dict[str, Any]]:
    web.routes["/robots.txt"] = robots
    proc, recs = fetch(tmp, [web.url(p) for p in paths], "--robots", "obey", "-c", "1", *args)
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, len(paths))
    return recs


def by_host(web: Web, table: dict[str, Route]) -> Route:
    """A robots.txt route answering per Host name (each name its own origin)."""
    return lambda h: table[h.headers["Host"].rsplit(":", 1)[0]](h)


def robots_table(
    web: Web, tmp: Path, table: dict[str, tuple[Route, list[tuple[str, Any]]]], *args: str
) -> list[str]:
    """One run over many origins (host names), each with its robots.txt and
    its (path, expected error) inputs; the mismatches."""
    web.routes["/robots.txt"] = by_host(web, {f"{k}.sim": v[0] for k, v in table.items()})
    cases = [(k, path, want) for k, (_, inputs) in table.items() for path, want in inputs]
    urls = [web.url(path, host=f"{k}.sim") for k, path, _ in cases]
    proc, recs = fetch(tmp, urls, "--robots", "obey", "-c", "20", *args)
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, len(urls))
    hosts = [h["host"] for _, _, p, h in web.log if p == "/robots.txt"]
    assert sorted(hosts) == sorted(set(hosts)), f"robots.txt once per origin: {hosts}"
    bad = [
        f"{k}:{path} got {r['error']} want {want}"
        for (k, path, want), r in zip(cases, recs, strict=True)
        if r["error"] != want
    ]
    sent = {(h["host"].rsplit(":", 1)[0], p) for _, _, p, h in web.log}
    bad += [
        f"{k}:{path} was SENT" for k, path, want in cases if want and (f"{k}.sim", path) in sent
    ]
    return bad


RULES = b"User-agent: *\nDisallow: /private\n"
D, A = ("/private/x", "robots_disallowed"), ("/public", None)


def test_robots_body_forms(web: Web, tmp_path: Path) -> None:
    """A robots.txt as real servers send it (BOM, CRLF, gzip...) still rules:
    'Disallow: /private' disallows /private/x and allows /public."""
    forms: dict[str, tuple[bytes, tuple[tuple[str, str], ...]]] = {
        "utf8-bom": (b"\xef\xbb\xbf" + RULES, ()),
        "crlf": (RULES.replace(b"\n", b"\r\n"), ()),
        "cr-only": (RULES.replace(b"\n", b"\r"), ()),
        "gzip": (gzip.compress(RULES), (("Content-Encoding", "gzip"),)),
        "html-type": (RULES, (("Content-Type", "text/html"),)),
        "no-final-newline": (RULES.rstrip(b"\n"), ()),
        "comments": (b"# hi\n\nUser-agent: * # all\n\nDisallow: /private # no\n", ()),
        "latin1-junk": (b"# caf\xe9\n" + RULES, ()),
    }
    table = {k: (reply(200, body, hd), [D, A]) for k, (body, hd) in forms.items()}
    bad = robots_table(web, tmp_path, table)
    assert not bad, f"robots.txt body forms not read as RFC 9309 / Google's parser read them: {bad}"


def test_robots_huge_body_first_500k_rule(web: Web, tmp_path: Path) -> None:
    """A 10 MB robots.txt: the first 500 KiB are its rules, the rest dropped."""
    filler = b"# " + b"x" * 1000 + b"\n"
    body = b"User-agent: *\nDisallow: /early\n" + filler * 10_000 + b"Disallow: /late\n"
    recs = robots_case(web, tmp_path, reply(200, body), ["/early/x", "/late/x", "/ok"])
    assert errors(recs) == ["robots_disallowed", None, None], (
        f"10 MB robots.txt: rules in the first 500 KiB hold, those past it are dropped: {errors(recs)}"
    )


def test_robots_slow_drip_is_unreachable(web: Web, tmp_path: Path) -> None:
    """A robots.txt still arriving at --max-time: unreachable, disallow all."""

    def drip(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        h.wfile.write(b"User-agent: *\n")
        for _ in range(100):  # at most 10 s
            if web.stop.wait(0.1):
                return
            h.wfile.write(b"#")
            h.wfile.flush()

    t0 = time.monotonic()
    recs = robots_case(web, tmp_path, drip, ["/a", "/b"], "--max-time", "1")
    assert errors(recs) == ["robots_disallowed"] * 2, (
        f"robots.txt still arriving at --max-time is 'unreachable': disallow all: {errors(recs)}"
    )
    assert time.monotonic() - t0 < 9, "the slow robots.txt must be cut at --max-time"


def test_robots_content_length_lie_no_crash(web: Web, tmp_path: Path) -> None:
    """robots.txt says 10000 bytes, sends 40 and closes: a record per input, no crash."""
    recs = robots_case(
        web, tmp_path, reply(200, RULES, (("Content-Length", "10000"),)), ["/private/x", "/b"]
    )
    # the docs' table: a cut answer is "no answer" (reset) -> disallow all; or, at
    # most, its rules.  Never "allow /private".
    assert recs[0]["error"] == "robots_disallowed", (
        f"a robots.txt cut short must not allow what it disallows (RFC 9309 table): {errors(recs)}"
    )


def test_robots_status_table(web: Web, tmp_path: Path) -> None:
    """The docs' RFC 9309 table, each with a body that would disallow all."""
    body = b"User-agent: *\nDisallow: /\n"
    table = {}
    for status, want in [(401, None), (403, None), (404, None), (410, None), (429, "robots_disallowed"),
                         (500, "robots_disallowed"), (503, "robots_disallowed")]:  # fmt: skip
        table[f"s{status}"] = (reply(status, body), [("/a", want), ("/b", want)])
    bad = robots_table(web, tmp_path, table)
    assert not bad, (
        f"robots.txt status not as the docs' table (4xx allow all, 429/5xx disallow all): {bad}"
    )


def test_robots_redirect_to_other_origin(web: Web, web2: Web, tmp_path: Path) -> None:
    """robots.txt 301 to another origin: that origin's file rules."""
    web2.routes["/elsewhere.txt"] = reply(200, RULES)
    recs = robots_case(
        web, tmp_path, redirect(web2.url("/elsewhere.txt"), 301), ["/private/x", "/ok"]
    )
    assert errors(recs) == ["robots_disallowed", None], (
        f"a robots.txt redirected to another origin is followed (docs: 'to any origin'): {errors(recs)}"
    )


def test_robots_redirect_loop_allows_all(web: Web, tmp_path: Path) -> None:
    web.routes["/loop"] = redirect("/robots.txt")
    recs = robots_case(web, tmp_path, redirect("/loop"), ["/a"])
    assert errors(recs) == [None] and recs[0]["status"] == 200, (
        f"a robots.txt redirect loop means allow all (docs' table): {recs[0]}"
    )
    assert web.paths().count("/robots.txt") + web.paths().count("/loop") <= 7, (
        f"robots.txt redirects are followed up to 5 hops only: {web.paths()}"
    )


@pytest.mark.parametrize("hops, expect", [(5, "robots_disallowed"), (6, None)])
def test_robots_redirect_hops(web: Web, tmp_path: Path, hops: int, expect: str | None) -> None:
    for i in range(1, hops):
        web.routes[f"/r{i}"] = redirect(f"/r{i + 1}")
    web.routes[f"/r{hops}"] = reply(200, b"User-agent: *\nDisallow: /\n")
    recs = robots_case(web, tmp_path, redirect("/r1"), ["/a"])
    assert errors(recs) == [expect], (
        f"robots.txt: {hops} redirect hops must give {expect} (up to 5 followed)"
    )


def test_robots_redirect_without_location(web: Web, tmp_path: Path) -> None:
    recs = robots_case(web, tmp_path, reply(302, b"", ()), ["/a"])
    assert errors(recs) == [None], (
        f"robots.txt 3xx with no Location: allow all (docs' table): {errors(recs)}"
    )


def test_robots_path_matching(web: Web, tmp_path: Path) -> None:
    """RFC 9309 matching of the URL's escaped path and query: percent-encoding,
    ``*`` and ``$``."""
    rules = [
        ("/caf%C3%A9", ["/caf\u00e9", "/caf%C3%A9", "/caf%c3%a9/x"], ["/cafe"]),
        ("/caf\u00e9", ["/caf%C3%A9"], ["/cafe"]),
        ("/a%3Cb", ["/a%3Cb", "/a%3cb"], ["/ab"]),
        ("/*.pdf$", ["/x.pdf", "/d/y.pdf"], ["/x.pdfa", "/x.pdf/z"]),
        ("/p*q", ["/pq", "/pXXq", "/pa/bq/c"], ["/p", "/qp"]),
        ("/search?q=", ["/search?q=1"], ["/search", "/searchx"]),
    ]
    table = {}
    for i, (rule, dis, allow) in enumerate(rules):
        body = f"User-agent: *\nDisallow: {rule}\n".encode()
        table[f"m{i}"] = (
            reply(200, body),
            [(p, "robots_disallowed") for p in dis] + [(p, None) for p in allow],
        )
    bad = robots_table(web, tmp_path, table)
    assert not bad, f"RFC 9309 path matching (m<i> = rule i of {[r for r, _, _ in rules]}): {bad}"


GROUPS = b"User-agent: mybot\nDisallow: /\n\nUser-agent: otherbot\nAllow: /\n\nUser-agent: *\nDisallow: /star\n"


@pytest.mark.parametrize(
    "ua_args, expect",
    [
        ([], [None, "robots_disallowed"]),
        (["-A", "mybot/1.0"], ["robots_disallowed", "robots_disallowed"]),
        (
            ["-A", "Mozilla/5.0 (compatible; MyBot/2.1; +http://x.test/bot)"],
            ["robots_disallowed"] * 2,
        ),
        (["-H", "User-Agent: MYBOT"], ["robots_disallowed", "robots_disallowed"]),
        (["-A", "otherbot"], [None, None]),
        (["-A", "yourbot"], [None, "robots_disallowed"]),
    ],
)
def test_robots_user_agent_groups(
    web: Web, tmp_path: Path, ua_args: list[str], expect: list[Any]
) -> None:
    recs = robots_case(web, tmp_path, reply(200, GROUPS), ["/page", "/star/x"], *ua_args)
    assert errors(recs) == expect, (
        f"robots.txt group for UA {ua_args}: {errors(recs)}, want {expect}"
    )
    sent = [h.get("user-agent") for _, _, p, h in web.log if p == "/robots.txt"]
    if ua_args:
        assert sent and sent[0] == ua_args[1].removeprefix("User-Agent: "), (
            f"robots.txt is fetched with the User-Agent the requests carry: {sent}"
        )


def test_robots_once_per_origin_under_concurrency(web: Web, tmp_path: Path) -> None:
    """40 inputs over two host names of one server at -c 1000: robots.txt once per origin."""

    def slow_robots(h: Handler) -> None:
        web.stop.wait(0.3)
        send(h, 200, RULES)

    web.routes["/robots.txt"] = slow_robots
    urls = [web.url(f"/p{i}", host=f"h{i % 2}.sim") for i in range(38)]
    urls += [web.url("/private/1", host="h0.sim"), web.url("/private/2", host="h1.sim")]
    proc, recs = fetch(tmp_path, urls, "--robots", "obey", "-c", "1000")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 40)
    hosts = sorted(h["host"] for _, _, p, h in web.log if p == "/robots.txt")
    assert hosts == [f"h0.sim:{web.port}", f"h1.sim:{web.port}"], (
        f"robots.txt fetched once per origin, the others waiting for it: {hosts}"
    )
    assert errors(recs)[-2:] == ["robots_disallowed"] * 2


def test_robots_unreachable_detail_has_no_userinfo(tmp_path: Path) -> None:
    """An unreachable robots.txt's record names the origin, never its password."""
    port = dead_port()
    urls = [f"http://alice:hunter2pw@127.0.0.1:{port}/x?token=tok3nsecret"]
    proc, recs = fetch(tmp_path, urls, "--robots", "obey")
    one_per_line(recs, 1)
    assert recs[0]["error"] == "robots_disallowed"
    text = (tmp_path / "out.jsonl").read_text() + proc.stderr.decode()
    assert "hunter2pw" not in text, (
        f"userinfo password reached the record (no secret in records): {recs[0]}"
    )
    assert "tok3nsecret" not in text, (
        f"a query token reached the record (no secret in records): {recs[0]}"
    )


def test_robots_crawl_delay_spacing(web: Web, tmp_path: Path) -> None:
    """Crawl-delay: 0.4 spaces the host's requests, from the robots.txt request on."""
    web.routes["/robots.txt"] = reply(200, b"User-agent: *\nCrawl-delay: 0.4\nDisallow: /private\n")
    proc, recs = fetch(
        tmp_path, [web.url(f"/p{i}") for i in range(3)], "--robots", "obey", "-c", "50"
    )
    assert proc.returncode == 0
    one_per_line(recs, 3)
    times = [t for t, _, _, _ in web.log]
    assert len(times) == 4, web.paths()
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.4 - 0.05, (
        f"Crawl-delay 0.4: requests (robots.txt included) at least 0.4 s apart: {gaps}"
    )


def test_robots_request_goes_through_rate(web: Web, tmp_path: Path) -> None:
    """The robots.txt request is paced by --rate like any other."""
    web.routes["/robots.txt"] = reply(200, b"User-agent: *\nAllow: /\n")
    _proc, recs = fetch(
        tmp_path, [web.url(f"/p{i}") for i in range(3)], "--robots", "obey", "--rate", "5/s"
    )
    one_per_line(recs, 3)
    times = [t for t, _, _, _ in web.log]
    assert len(times) == 4
    span = times[-1] - times[0]
    assert span >= 3 / 5 - 0.1, (
        f"--rate 5/s over 4 requests (robots.txt counted): span {span:.3f} s < 0.5 s"
    )


# === --rate ======================================================================


@pytest.mark.parametrize("value", ["0", "-1", "5/x", "", "nan/s", "5/s/s"])
def test_rate_bad_values(tmp_path: Path, value: str) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"keep": 1}\n')
    (tmp_path / "in.txt").write_text("http://127.0.0.1:1/\n")
    proc = run([*BASE, str(tmp_path / "in.txt"), "-o", str(out), "--rate", value], timeout=30)
    usage_error(proc, "--rate")
    assert out.read_text() == '{"keep": 1}\n', "a usage error must lose nothing already written"


def test_rate_smooth_across_many_hosts_at_c1000(web: Web, tmp_path: Path) -> None:
    """--rate 20/s, -c 1000, 30 inputs over 10 host names: no burst at start;
    any window T holds at most (T + 0.1) x N + 1 requests."""
    n = 20
    urls = [web.url(f"/r{i}", host=f"h{i % 10}.sim") for i in range(30)]
    _proc, recs = fetch(tmp_path, urls, "--rate", f"{n}/s", "-c", "1000")
    one_per_line(recs, 30)
    times = sorted(t for t, _, _, _ in web.log)
    assert len(times) == 30
    worst = []
    for i, a in enumerate(times):
        for j in range(i, len(times)):
            t = times[j] - a
            if (j - i + 1) > (t + 0.1) * n + 1:
                worst.append((j - i + 1, round(t, 3)))
    assert not worst, f"--rate {n}/s broke the docs' bound (count, window s): {worst[:5]}"


@pytest.mark.parametrize("spec", ["600/m", "36000"])
def test_rate_units(web: Web, tmp_path: Path, spec: str) -> None:
    """600/m = 36000/h = 36000 (N/h without a unit, as curl) = 10/s."""
    proc, recs = fetch(tmp_path, [web.url(f"/u{i}") for i in range(4)], "--rate", spec)
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 4)
    times = sorted(t for t, _, _, _ in web.log)
    span = times[-1] - times[0]
    assert span >= 3 / 10 - 0.1, f"--rate {spec} is 10/s: 4 requests over {span:.3f} s"


# === --max-host-errors ========================================================


@pytest.mark.parametrize("value", ["-1", "1.5"])
def test_max_host_errors_bad_values(tmp_path: Path, value: str) -> None:
    (tmp_path / "in.txt").write_text("http://127.0.0.1:1/\n")
    proc = run([*BASE, str(tmp_path / "in.txt"), "--max-host-errors", value], timeout=30)
    usage_error(proc, "--max-host-errors")


def test_max_host_errors_retries_count_each_try(tmp_path: Path) -> None:
    """Each try counts; a try is not retried once its origin is over the limit."""
    port = dead_port()
    urls = [f"http://127.0.0.1:{port}/{i}" for i in range(6)]
    _proc, recs = fetch(tmp_path, urls, "--max-host-errors", "2", "--retries", "5", "-c", "1")
    one_per_line(recs, 6)
    assert recs[0]["error"] == "connect_refused" and recs[0]["attempts"] == 2, (
        f"--max-host-errors 2 --retries 5: the first input stops after 2 tries: {recs[0]}"
    )
    assert errors(recs)[1:] == ["host_skipped"] * 5 and all(r["attempts"] == 0 for r in recs[1:])


def test_max_host_errors_reset_by_any_answer(web: Web, tmp_path: Path) -> None:
    """read_timeout counts, a 404 resets: hang ok hang ok hang hang | skipped."""

    def hang(h: Handler) -> None:
        web.stop.wait(5)

    web.routes["/hang"] = hang
    web.routes["/nf"] = reply(404, b"nope")
    seq = ["/hang", "/nf", "/hang", "/nf", "/hang", "/hang", "/nf", "/nf", "/hang"]
    _proc, recs = fetch(
        tmp_path,
        [web.url(p) for p in seq],
        "--max-host-errors",
        "2",
        "-c",
        "1",
        "--max-time",
        "0.5",
    )
    one_per_line(recs, len(seq))
    want = ["read_timeout", None, "read_timeout", None, "read_timeout", "read_timeout"] + [
        "host_skipped"
    ] * 3
    assert errors(recs) == want, (
        f"--max-host-errors 2: N in a row, reset by any answer: {errors(recs)}"
    )
    assert recs[1]["status"] == 404
    assert len(web.log) == 6, f"an origin over the limit is sent nothing: {web.paths()}"


def test_max_host_errors_in_flight_bound(tmp_path: Path) -> None:
    """A tarpit at -c 4, N 2: at most N + C - 1 = 5 requests sent."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(100)
    port = lst.getsockname()[1]
    conns: list[socket.socket] = []
    seen = [0]
    done = threading.Event()

    def tarpit() -> None:
        lst.settimeout(0.1)
        for _ in range(300):  # at most 30 s
            if done.is_set():
                return
            try:
                c, _ = lst.accept()
            except TimeoutError:
                continue
            c.settimeout(1)
            try:
                if c.recv(65536):
                    seen[0] += 1
            except OSError:
                pass
            conns.append(c)

    t = threading.Thread(target=tarpit, daemon=True)
    t.start()
    try:
        urls = [f"http://127.0.0.1:{port}/{i}" for i in range(20)]
        _proc, recs = fetch(
            tmp_path, urls, "--max-host-errors", "2", "-c", "4", "--max-time", "0.5"
        )
    finally:
        done.set()
        t.join(5)
        for c in conns:
            c.close()
        lst.close()
    one_per_line(recs, 20)
    sent = [r for r in recs if r["error"] != "host_skipped"]
    assert len(sent) <= 5 and seen[0] <= 5, (
        f"a tarpit origin is sent at most N + C - 1 = 5 requests: records {len(sent)}, server saw {seen[0]}"
    )
    assert all(r["error"] == "read_timeout" for r in sent)


def test_max_host_errors_per_origin_port_and_name(web: Web, tmp_path: Path) -> None:
    """Origins are scheme, host, port: a dead port of 127.0.0.1 skips neither
    another port of it nor another name of that port."""
    port = dead_port()
    dead = [f"http://127.0.0.1:{port}/d{i}" for i in range(4)]
    live = [web.url("/l1"), web.url("/l2", host="localhost"), web.url("/l3", host="x.sim")]
    _proc, recs = fetch(tmp_path, [*dead, *live], "--max-host-errors", "1", "-c", "1")
    one_per_line(recs, 7)
    assert errors(recs) == ["connect_refused"] + ["host_skipped"] * 3 + [None] * 3, errors(recs)


def test_max_host_errors_duplicate_lines(tmp_path: Path) -> None:
    """The same URL on 5 lines: 5 records, still."""
    port = dead_port()
    _proc, recs = fetch(
        tmp_path, [f"http://127.0.0.1:{port}/same"] * 5, "--max-host-errors", "1", "-c", "1"
    )
    one_per_line(recs, 5)
    assert errors(recs) == ["connect_refused"] + ["host_skipped"] * 4


def test_max_host_errors_skip_detail_has_no_userinfo(tmp_path: Path) -> None:
    port = dead_port()
    urls = [f"http://bob:s3cretpass@127.0.0.1:{port}/{i}?api_key=K3YVALUE" for i in range(3)]
    proc, recs = fetch(tmp_path, urls, "--max-host-errors", "1", "-c", "1")
    one_per_line(recs, 3)
    text = (tmp_path / "out.jsonl").read_text() + proc.stderr.decode()
    assert "s3cretpass" not in text and "K3YVALUE" not in text, (
        f"a secret of the URL reached a record (host_skipped detail?): {[r['error_detail'] for r in recs]}"
    )


# === --fail-exit ================================================================

FAIL_LINE = re.compile(
    r"^surge fetch: (\d+) of (\d+) records failed: (\d+) with an error, (\d+) with a status >= 400 "
    r"\(--fail-exit: exit 22\)$"
)


def test_fail_exit_all_ok_is_0_and_silent(web: Web, tmp_path: Path) -> None:
    web.routes["/moved"] = redirect("/x", 301)
    proc, _recs = fetch(tmp_path, [web.url("/a"), web.url("/moved")], "--fail-exit")
    assert proc.returncode == 0, (
        f"--fail-exit with no failed record (a 301 is not >= 400) exits 0: {proc.stderr}"
    )
    assert proc.stderr.strip() == b"", f"-q and nothing failed: nothing on stderr: {proc.stderr!r}"


def test_fail_exit_counts_line(web: Web, tmp_path: Path) -> None:
    web.routes["/nf"] = reply(404)
    web.routes["/boom"] = reply(500)
    web.routes["/robots.txt"] = reply(200, RULES)
    urls = [
        web.url("/a"),
        web.url("/nf"),
        web.url("/boom"),
        web.url("/private/z"),
        "http://[bad",
        f"http://127.0.0.1:{dead_port()}/",
    ]
    proc, recs = fetch(tmp_path, urls, "--fail-exit", "--robots", "obey")
    one_per_line(recs, 6)
    assert proc.returncode == 22, f"--fail-exit with failed records exits 22: {proc.returncode}"
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1, f"--fail-exit: one line on stderr even under -q: {lines}"
    m = FAIL_LINE.match(lines[0])
    assert m, f"--fail-exit line not in the documented form: {lines[0]}"
    assert m.groups() == ("5", "6", "3", "2"), (
        f"--fail-exit counts: {lines[0]} (records {errors(recs)})"
    )


def test_fail_exit_usage_error_wins(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("http://127.0.0.1:1/\n")
    proc = run([*BASE, str(tmp_path / "in.txt"), "--fail-exit", "--rate", "nope"], timeout=30)
    usage_error(proc)


def test_fail_exit_sigint_130_wins(web: Web, tmp_path: Path) -> None:
    """Interrupted after a 404 was written: 130, not 22."""
    web.routes["/nf"] = reply(404)

    def slow(h: Handler) -> None:
        web.stop.wait(10)
        send(h, 200, b"late")

    web.routes["/slow"] = slow
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/nf") + "\n" + "".join(web.url(f"/slow?{i}") + "\n" for i in range(5)))
    out = tmp_path / "out.jsonl"
    jar = tmp_path / "jar.txt"
    p = subprocess.Popen(
        [
            *SURGE,
            *BASE,
            str(inp),
            "-o",
            str(out),
            "--fail-exit",
            "-c",
            "1",
            "--max-time",
            "20",
            "--cookie-jar",
            str(jar),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: any(pth.startswith("/slow") for pth in web.paths()), 20)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "Traceback" not in err.decode(errors="replace"), err
    assert p.returncode == 130, (
        f"SIGINT exits 130, before --fail-exit's 22 (docs): {p.returncode} {err!r}"
    )


def wait_for(cond: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.02)


# === cookie files ===============================================================

HEADER = "# Netscape HTTP Cookie File\n"


def cookie_file(tmp: Path, lines: list[str], name: str = "cookies.txt", end: str = "\n") -> Path:
    p = tmp / name
    p.write_bytes((HEADER + "".join(line + "\n" for line in lines)).replace("\n", end).encode())
    return p


def cookies_sent(web: Web) -> dict[str, str | None]:
    return {p: h.get("cookie") for _, _, p, h in web.log}


def test_cookie_file_rules(web: Web, tmp_path: Path) -> None:
    """#HttpOnly_, expiry 0, expired, domain vs host-only, path, Secure over http."""
    future = str(int(time.time()) + 86400)
    f = cookie_file(
        tmp_path,
        [
            f"#HttpOnly_a.example.sim\tFALSE\t/\tFALSE\t{future}\thonly\tH1",
            "a.example.sim\tFALSE\t/\tFALSE\t0\tsess\tS1",
            "a.example.sim\tFALSE\t/\tFALSE\t1000\texpired\tE1",
            f".example.sim\tTRUE\t/\tFALSE\t{future}\tdom\tD1",
            f"a.example.sim\tFALSE\t/admin\tFALSE\t{future}\tadm\tA1",
            f"a.example.sim\tFALSE\t/\tTRUE\t{future}\tsec\tX1",
        ],
    )
    urls = [
        web.url("/one", "a.example.sim"),
        web.url("/admin/x", "a.example.sim"),
        web.url("/two", "b.example.sim"),
        web.url("/three", "example.sim"),
    ]
    proc, recs = fetch(tmp_path, urls, "-b", str(f), "-c", "1")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 4)
    got = {p: sorted((c or "").split("; ")) if c else [] for p, c in cookies_sent(web).items()}
    assert got["/one"] == ["dom=D1", "honly=H1", "sess=S1"], (
        f"a.example.sim/: #HttpOnly_ and session cookies sent; expired, /admin, Secure-over-http not: {got['/one']}"
    )
    assert got["/admin/x"] == ["adm=A1", "dom=D1", "honly=H1", "sess=S1"], (
        f"/admin path cookie: {got['/admin/x']}"
    )
    assert got["/two"] == ["dom=D1"], f"b.example.sim gets only the domain cookie: {got['/two']}"
    assert got["/three"] == ["dom=D1"], f"example.sim gets only the domain cookie: {got['/three']}"


def test_cookie_file_crlf(web: Web, tmp_path: Path) -> None:
    """A cookie file saved with CRLF line ends (as curl reads it): value without \\r."""
    f = cookie_file(tmp_path, ["127.0.0.1\tFALSE\t/\tFALSE\t0\tsid\tV1"], end="\r\n")
    proc, _recs = fetch(tmp_path, [web.url("/a")], "-b", str(f))
    assert proc.returncode == 0, f"a CRLF cookie file is a cookie file: {proc.stderr!r}"
    assert cookies_sent(web)["/a"] == "sid=V1", f"CRLF cookie file: sent {cookies_sent(web)}"


@pytest.mark.parametrize(
    "bad",
    [
        "127.0.0.1 FALSE / FALSE 0 sid V1",  # spaces, not tabs
        "127.0.0.1\tFALSE\t/\tFALSE\t0\tsid",  # 6 fields
        "127.0.0.1\tFALSE\t/\tFALSE\tsoon\tsid\tV1",  # expiry not a number
    ],
)
def test_cookie_file_malformed_line(tmp_path: Path, bad: str) -> None:
    """A malformed line: one line naming the file and the line, exit 2; the
    output already there is kept; the secret value on it is not printed."""
    f = cookie_file(
        tmp_path, ["127.0.0.1\tFALSE\t/\tFALSE\t0\tok\tfine", bad.replace("V1", "PRIVATEV")]
    )
    out = tmp_path / "out.jsonl"
    out.write_text('{"keep": 1}\n')
    (tmp_path / "in.txt").write_text("http://127.0.0.1:1/\n")
    proc = run([*BASE, str(tmp_path / "in.txt"), "-o", str(out), "-b", str(f)], timeout=30)
    err = proc.stderr.decode(errors="replace").strip()
    problems = []
    if proc.returncode != 2:
        problems.append(f"exit {proc.returncode}, not 2")
    if "Traceback" in err:
        problems.append("a traceback on stderr")
    if len(err.splitlines()) != 1:
        problems.append(f"{len(err.splitlines())} lines on stderr, not one")
    last = err.splitlines()[-1] if err else ""
    if "cookies.txt" not in last:
        problems.append("the file is not named")
    if not re.search(r"(line |:)3\b", last):
        problems.append("the line number (3) is not named")
    if "PRIVATEV" in err:
        problems.append("the cookie's value is printed (a secret in an error message)")
    assert out.read_text() == '{"keep": 1}\n', "a usage error must lose nothing already written"
    assert not problems, (
        f"a malformed cookie file line must be one line naming file and line, exit 2: {problems}\n{err}"
    )


@pytest.mark.parametrize(
    "content", [b'{"cookies": []}\n', b"\x00\x01\x02binary", b"<html>no</html>\n"]
)
def test_cookie_file_not_a_cookie_file(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "cookies.txt"
    f.write_bytes(content)
    (tmp_path / "in.txt").write_text("http://127.0.0.1:1/\n")
    proc = run([*BASE, str(tmp_path / "in.txt"), "-b", str(f)], timeout=30)
    usage_error(proc, "cookies.txt")


def test_cookie_file_missing_without_jar(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("http://127.0.0.1:1/\n")
    proc = run([*BASE, str(tmp_path / "in.txt"), "-b", str(tmp_path / "nope.txt")], timeout=30)
    usage_error(proc, "nope.txt")


@pytest.mark.parametrize("which", ["output", "input", "har"])
def test_cookie_jar_clashing_path_refused(tmp_path: Path, which: str) -> None:
    """--cookie-jar the same file as the output, the input or the HAR: refused,
    exit 2, the file untouched."""
    inp = tmp_path / "in.txt"
    inp.write_text("http://127.0.0.1:1/\n")
    out = tmp_path / "out.jsonl"
    har = tmp_path / "x.har"
    target = {"output": out, "input": inp, "har": har}[which]
    if which != "input":
        target.write_text("OLD\n")
    before = target.read_bytes()
    proc = run(
        [*BASE, str(inp), "-o", str(out), "--har", str(har), "--cookie-jar", str(target)],
        timeout=30,
    )
    usage_error(proc)
    assert target.read_bytes() == before, f"the {which} file was overwritten by --cookie-jar"


def test_cookie_jar_curl_roundtrip(web: Web, tmp_path: Path) -> None:
    """curl -c writes a jar (HttpOnly, session), surge -b reads it; surge
    --cookie-jar writes one curl -b reads."""
    web.routes["/set"] = reply(
        200,
        b"ok",
        (("Set-Cookie", "a=1; Path=/; HttpOnly"), ("Set-Cookie", "b=2; Path=/; Max-Age=3600")),
    )
    curl_jar = tmp_path / "curl.txt"
    subprocess.run(
        ["curl", "-s", "-o", os.devnull, "-c", str(curl_jar), web.url("/set")],
        check=True,
        timeout=20,
    )
    assert "#HttpOnly_" in curl_jar.read_text()
    surge_jar = tmp_path / "surge.txt"
    proc, _recs = fetch(
        tmp_path, [web.url("/check")], "-b", str(curl_jar), "--cookie-jar", str(surge_jar)
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted((cookies_sent(web)["/check"] or "").split("; ")) == ["a=1", "b=2"], (
        f"surge -b of curl's jar (#HttpOnly_ included): sent {cookies_sent(web)['/check']}"
    )
    web.log.clear()
    subprocess.run(
        ["curl", "-s", "-o", os.devnull, "-b", str(surge_jar), web.url("/again")],
        check=True,
        timeout=20,
    )
    assert sorted((cookies_sent(web)["/again"] or "").split("; ")) == ["a=1", "b=2"], (
        f"curl -b of surge's --cookie-jar: sent {cookies_sent(web)['/again']}\n{surge_jar.read_text()}"
    )


def test_cookie_header_not_to_other_port_on_redirect(web: Web, web2: Web, tmp_path: Path) -> None:
    """-b NAME=VALUE goes to the input's own origin only: not to another port
    of the same host after -L."""
    web.routes["/go"] = redirect(web2.url("/land"))
    _proc, recs = fetch(tmp_path, [web.url("/go")], "-b", "sid=XSECRET", "-L")
    assert recs[0]["status"] == 200
    assert cookies_sent(web)["/go"] == "sid=XSECRET"
    assert cookies_sent(web2).get("/land") is None, (
        f"-b NAME=VALUE crossed to another origin (port) on a redirect: {cookies_sent(web2)}"
    )


def test_cookie_file_host_only_not_to_other_host_on_redirect(web: Web, tmp_path: Path) -> None:
    future = str(int(time.time()) + 86400)
    f = cookie_file(tmp_path, [f"a.example.sim\tFALSE\t/\tFALSE\t{future}\thost\tHSECRET"])
    web.routes["/go"] = redirect(web.url("/land", "evil.sim"))
    _proc, recs = fetch(tmp_path, [web.url("/go", "a.example.sim")], "-b", str(f), "-L")
    assert recs[0]["status"] == 200
    assert cookies_sent(web)["/land"] is None, (
        f"a host-only cookie went to another host: {cookies_sent(web)}"
    )


def test_cookie_secrets_not_in_outputs(web: Web, tmp_path: Path) -> None:
    """Cookie values (from -b FILE and from Set-Cookie) in no file surge writes
    but the jar: records, --trace, --har, stderr."""
    web.routes["/set"] = reply(200, b"ok", (("Set-Cookie", "sess=SETCOOKIESECRET; Path=/"),))
    f = cookie_file(tmp_path, ["127.0.0.1\tFALSE\t/\tFALSE\t0\tfilec\tFILECOOKIESECRET"])
    jar = tmp_path / "jar.txt"
    trace = tmp_path / "t.html"
    har = tmp_path / "x.har"
    proc, recs = fetch(
        tmp_path,
        [web.url("/set"), web.url("/after"), f"http://127.0.0.1:{dead_port()}/dead"],
        "-b", str(f), "--cookie-jar", str(jar), "--trace", str(trace), "--har", str(har), "-c", "1",
    )  # fmt: skip
    one_per_line(recs, 3)
    assert "SETCOOKIESECRET" in (cookies_sent(web)["/after"] or ""), (
        "the jar carries a Set-Cookie on"
    )
    assert "FILECOOKIESECRET" in jar.read_text() and "SETCOOKIESECRET" in jar.read_text()
    for name, data in [
        ("records", (tmp_path / "out.jsonl").read_bytes()),
        ("--trace", trace.read_bytes()),
        ("--har", har.read_bytes()),
        ("stderr", proc.stderr),
    ]:
        for secret in (b"SETCOOKIESECRET", b"FILECOOKIESECRET"):
            assert secret not in data, (
                f"a cookie value reached {name} (no secret in files surge writes)"
            )


def test_cookie_jar_written_on_sigint(web: Web, tmp_path: Path) -> None:
    web.routes["/set"] = reply(200, b"ok", (("Set-Cookie", "sig=INTVAL; Path=/"),))

    def slow(h: Handler) -> None:
        web.stop.wait(10)
        send(h, 200, b"late")

    web.routes["/slow"] = slow
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/set") + "\n" + web.url("/slow") + "\n")
    jar = tmp_path / "jar.txt"
    p = subprocess.Popen(
        [
            *SURGE,
            *BASE,
            str(inp),
            "-o",
            str(tmp_path / "o.jsonl"),
            "-c",
            "1",
            "--max-time",
            "20",
            "--cookie-jar",
            str(jar),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: "/slow" in web.paths(), 20)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert jar.exists() and "INTVAL" in jar.read_text(), (
        "--cookie-jar must be written when the run is stopped by SIGINT"
    )
    assert not [x for x in tmp_path.iterdir() if x.name.startswith("jar.txt") and x != jar], (
        f"a temporary jar left behind: {list(tmp_path.iterdir())}"
    )


def test_cookie_jar_kill9_keeps_old_jar(web: Web, tmp_path: Path) -> None:
    """-b jar --cookie-jar jar, SIGKILL mid-run: the old jar intact (atomic write)."""
    web.routes["/set"] = reply(200, b"ok", (("Set-Cookie", "new=NEWVAL; Path=/"),))

    def slow(h: Handler) -> None:
        web.stop.wait(10)
        send(h, 200, b"late")

    web.routes["/slow"] = slow
    jar = cookie_file(tmp_path, ["127.0.0.1\tFALSE\t/\tFALSE\t0\told\tOLDVAL"], name="jar.txt")
    before = jar.read_bytes()
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/set") + "\n" + web.url("/slow") + "\n")
    p = subprocess.Popen(
        [
            *SURGE,
            *BASE,
            str(inp),
            "-o",
            str(tmp_path / "o.jsonl"),
            "-c",
            "1",
            "--max-time",
            "20",
            "-b",
            str(jar),
            "--cookie-jar",
            str(jar),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: "/slow" in web.paths(), 20)
        p.kill()
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert jar.read_bytes() == before, "SIGKILL mid-run must leave the old cookie jar intact"


# === --limit-rate ================================================================


@pytest.mark.parametrize("value", ["0", "-5", "1X"])
def test_limit_rate_bad_values(tmp_path: Path, value: str) -> None:
    (tmp_path / "in.txt").write_text("http://127.0.0.1:1/\n")
    proc = run([*BASE, str(tmp_path / "in.txt"), "--limit-rate", value], timeout=30)
    usage_error(proc, "--limit-rate")


def test_limit_rate_slows_body(web: Web, tmp_path: Path) -> None:
    """--limit-rate 200K over a 400 KiB body: at least (400 - 64) / 200 s, less slack."""
    body = os.urandom(400 * 1024)
    web.routes["/big"] = reply(200, body)
    t0 = time.monotonic()
    _proc, recs = fetch(tmp_path, [web.url("/big")], "--limit-rate", "200K", "--max-time", "20")
    took = time.monotonic() - t0
    assert recs[0]["status"] == 200 and recs[0]["bytes"] == len(body), recs[0]
    assert took >= 1.0, f"--limit-rate 200K read a 400 KiB body in {took:.2f} s (< 1 s)"


@pytest.mark.parametrize("limit", ["1", "10K"])
def test_limit_rate_tiny_bounded_by_max_time(web: Web, tmp_path: Path, limit: str) -> None:
    """--limit-rate 1 (or 10K) on a 1 MiB body, --max-time 1: a read_timeout
    record at about 1 s (docs: --max-time still bounds each try), as curl's 28."""
    web.routes["/big"] = reply(200, b"z" * (1 << 20))
    try:
        _proc, recs = fetch(
            tmp_path, [web.url("/big")], "--limit-rate", limit, "--max-time", "1", timeout=8
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"--max-time 1 does not bound a try at --limit-rate {limit}: surge still running after 8 s (curl: exit 28 at 1 s)"
        )
    one_per_line(recs, 1)
    assert recs[0]["error"] == "read_timeout", (
        f"--limit-rate {limit}, 1 MiB, --max-time 1: {recs[0]}"
    )


def test_cookie_public_suffix_domain_refused(web: Web, tmp_path: Path) -> None:
    """Set-Cookie with Domain=co.uk (a public suffix) is refused: not sent to
    another site under co.uk, not written to the jar."""
    web.routes["/set"] = reply(
        200, b"ok", (("Set-Cookie", "sup=SUPERCOOKIE; Domain=co.uk; Path=/"),)
    )
    jar = tmp_path / "jar.txt"
    urls = [web.url("/set", "shop.co.uk"), web.url("/other", "victim.co.uk")]
    _proc, recs = fetch(
        tmp_path, urls, "--resolve", "*.co.uk:*:127.0.0.1", "--cookie-jar", str(jar), "-c", "1"
    )
    one_per_line(recs, 2)
    assert recs[1]["status"] == 200, recs[1]
    assert cookies_sent(web).get("/other") is None, (
        f"a Domain=co.uk cookie crossed sites: {cookies_sent(web)}"
    )
    assert "SUPERCOOKIE" not in jar.read_text(), "a public-suffix Domain cookie was kept in the jar"


def test_cookie_set_on_redirect_hop_goes_on(web: Web, tmp_path: Path) -> None:
    """A Set-Cookie on a 302 is in the jar for the next hop and the jar file
    (curl -b FILE -c FILE -L)."""
    web.routes["/login"] = reply(
        302, b"", (("Location", "/home"), ("Set-Cookie", "sid=HOPVAL; Path=/"))
    )
    jar = tmp_path / "jar.txt"
    _proc, recs = fetch(tmp_path, [web.url("/login")], "-L", "--cookie-jar", str(jar))
    assert recs[0]["status"] == 200, recs[0]
    assert cookies_sent(web).get("/home") == "sid=HOPVAL", (
        f"a cookie set by a redirect hop must go with the next hop (jar rules, as curl): {cookies_sent(web)}"
    )
    assert "HOPVAL" in jar.read_text(), "a cookie set by a redirect hop must be in --cookie-jar"


def test_cookie_header_value_not_in_outputs(web: Web, tmp_path: Path) -> None:
    """-b NAME=VALUE: the value in no record, --har, --trace, stderr."""
    trace, har = tmp_path / "t.html", tmp_path / "x.har"
    port = dead_port()
    proc, recs = fetch(
        tmp_path,
        [web.url("/a"), f"http://127.0.0.1:{port}/dead"],
        "-b", "sid=HDRCOOKIESECRET; other=SECONDSECRET", "--trace", str(trace), "--har", str(har),
    )  # fmt: skip
    one_per_line(recs, 2)
    assert cookies_sent(web)["/a"] == "sid=HDRCOOKIESECRET; other=SECONDSECRET"
    for name, data in [
        ("records", (tmp_path / "out.jsonl").read_bytes()),
        ("--trace", trace.read_bytes()),
        ("--har", har.read_bytes()),
        ("stderr", proc.stderr),
    ]:
        for secret in (b"HDRCOOKIESECRET", b"SECONDSECRET"):
            assert secret not in data, (
                f"a -b NAME=VALUE cookie value reached {name} (no secret in files)"
            )


def test_fail_exit_host_skipped_and_disallowed_count(tmp_path: Path) -> None:
    """host_skipped records are errors for --fail-exit too."""
    port = dead_port()
    proc, recs = fetch(
        tmp_path,
        [f"http://127.0.0.1:{port}/{i}" for i in range(3)],
        "--max-host-errors",
        "1",
        "-c",
        "1",
        "--fail-exit",
    )
    one_per_line(recs, 3)
    assert proc.returncode == 22, proc.stderr
    lines = proc.stderr.decode().strip().splitlines()
    assert (
        len(lines) == 1
        and FAIL_LINE.match(lines[0])
        and FAIL_LINE.match(lines[0]).groups() == ("3", "3", "3", "0")
    ), (  # type: ignore[union-attr]
        f"--fail-exit line for 1 connect_refused + 2 host_skipped: {lines}"
    )
