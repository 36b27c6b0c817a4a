# ruff: noqa: E501  (assertion messages name the broken claim in full)
"""Hostile round 3 of ``surge fetch``'s crawl controls, written from
docs/fetch.md ("Crawl controls", the tools table) and README.md only, not the
code: ``-r/--range`` and ``-C -`` with ``--output-dir`` (servers that ignore
Range, lie in Content-Range, answer 416, gzip, redirect; the same URL twice; a
cut-off body continued; ``--resume`` with ``-C -``), ``--auto-throttle``
(429/503 storms, hostile ``Retry-After``), ``--rate`` / ``--rate-per-host``
syntax, ``--max-host-errors`` (``--per-host``, redirects to a dead host, mixed
hosts), ``--robots obey`` against hostile robots.txt, cookie files, and the
project's rules: bad input is one line and exit 2 with nothing written lost,
a remote failure is a record (one per input line), network-controlled sizes
are bounded, no secret in what surge writes, a POST is sent at most once.

Servers are small threaded ``http.server`` ones on loopback, port 0, scripted
per test and logging what they were sent; surge runs as a child process with
a timeout; every loop is bounded.
"""

from __future__ import annotations

import contextlib
import email.utils
import gzip
import hashlib
import http.server
import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RESOLVE, needs
from tests.hostile.conftest import SURGE, run

Handler = http.server.BaseHTTPRequestHandler
Route = Callable[[Handler], None]

# --- a scripted loopback web -------------------------------------------------


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 256  # no SYN dropped under -c 100 (a connect_timeout of ours)


class Web:
    """A threaded HTTP/1.0 server: ``routes[path] = fn(handler)``; every request
    is logged as (monotonic time, method, path, lower-cased headers)."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.log: list[tuple[float, str, str, dict[str, str]]] = []
        self.stop = threading.Event()
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
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
                route = web.routes.get(path) or web.routes.get("*") or reply(200, b"ok")
                if path == "/robots.txt" and path not in web.routes:
                    route = reply(404, b"none")
                with web.lock:
                    web.inflight += 1
                    web.max_inflight = max(web.max_inflight, web.inflight)
                try:
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        route(self)
                finally:
                    with web.lock:
                        web.inflight -= 1

            do_GET = do_HEAD = do_POST = do_PUT = handle_one

            def log_message(self, *args: Any) -> None:
                pass

        self.server = Server(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def sent(self, path: str) -> list[dict[str, str]]:
        return [h for _, _, p, h in self.log if p == path]

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


def ranged(body: bytes) -> Route:
    """A server that honours ``Range: bytes=N-`` (206 / 416) as RFC 9110 says."""

    def route(h: Handler) -> None:
        rng = h.headers.get("Range")
        if not rng:
            send(h, 200, body)
            return
        spec = rng.removeprefix("bytes=")
        if not spec.endswith("-") or "," in spec:
            send(h, 200, body)  # other forms: ignored, as a server may
            return
        first = int(spec[:-1])
        if first >= len(body):
            send(h, 416, b"", (("Content-Range", f"bytes */{len(body)}"),))
            return
        part = body[first:]
        cr = f"bytes {first}-{len(body) - 1}/{len(body)}"
        send(h, 206, part, (("Content-Range", cr),))

    return route


def stalls_after(body: bytes, cut: int, web: Web, status: int = 200) -> Route:
    """Headers for the whole body, its first ``cut`` bytes, then a stall (until
    the server closes, at most 15 s)."""

    def route(h: Handler) -> None:
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[:cut])
        h.wfile.flush()
        web.stop.wait(15)

    return route


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
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Tarpit:
    """Accepts connections, reads, never answers; counts the connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            self.conns.append(c)

    def close(self) -> None:
        self.stop = True
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def tarpit() -> Iterator[Tarpit]:
    t = Tarpit()
    yield t
    t.close()


# --- running surge -------------------------------------------------------------

BASE = ["fetch", "--resolve", RESOLVE, "--max-time", "3", "-q", "--no-progress"]


def fetch(
    tmp: Path, urls: list[str], *args: str, timeout: float = 40, out_name: str = "out.jsonl"
) -> tuple[subprocess.CompletedProcess[bytes], list[dict[str, Any]]]:
    inp = tmp / "in.txt"
    inp.write_text("".join(u + "\n" for u in urls))
    out = tmp / out_name
    if out.exists():
        out.unlink()
    proc = run([*BASE, str(inp), "-o", str(out), *args], timeout=timeout)
    no_traceback(proc)
    recs = [json.loads(x) for x in out.read_bytes().splitlines()] if out.exists() else []
    recs.sort(key=lambda r: r["line"])
    return proc, recs


def no_traceback(proc: subprocess.CompletedProcess[bytes]) -> None:
    err = proc.stderr.decode(errors="replace")
    assert "Traceback" not in err, f"a traceback, not a record or one line (project rule):\n{err}"


def one_per_line(recs: list[dict[str, Any]], n: int) -> None:
    lines = sorted(r["line"] for r in recs)
    assert lines == list(range(1, n + 1)), f"one record per input line (project rule): {lines}"


def usage_error(proc: subprocess.CompletedProcess[bytes], *words: str) -> str:
    no_traceback(proc)
    err = proc.stderr.decode(errors="replace").strip()
    assert proc.returncode == 2, (
        f"bad input must be exit 2 (project rule), got {proc.returncode}: {err}"
    )
    lines = err.splitlines()
    assert len(lines) == 1, f"bad input must be ONE line (project rule), got:\n{err}"
    for w in words:
        assert w.lower() in lines[0].lower(), f"the line must name {w!r}: {lines[0]}"
    return lines[0]


def body_file(d: Path, url: str, port: int, host: str = "127.0.0.1") -> Path:
    """Where ``--output-dir d`` keeps ``url``'s body: DIR/HOST_PORT/sha256[:32]."""
    return d / f"{host}_{port}" / hashlib.sha256(url.encode()).hexdigest()[:32]


BODY = bytes(range(256)) * 40  # 10,240 bytes, every byte value


# === -r / --range ===================================================================


@pytest.mark.parametrize(
    "rng",
    ["5", "10-5", "-0", "0-1,", "a-b", " 0-1", "bytes=0-1"],
)
def test_range_bad_syntax_is_one_line_exit_2_output_kept(
    web: Web, tmp_path: Path, rng: str
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"keep": "me"}\n')
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/") + "\n")
    proc = run([*BASE, str(inp), "-o", str(out), "-r", rng], timeout=20)
    usage_error(proc)
    assert "range" in proc.stderr.decode().lower() or rng in proc.stderr.decode(), proc.stderr
    assert out.read_bytes() == b'{"keep": "me"}\n', "nothing already written is lost (project rule)"
    assert not web.log, "a usage error sends nothing"


@pytest.mark.parametrize("rng", ["0-499", "-500", "0-1,5-9"])
def test_range_header_as_curl_sends_it(web: Web, tmp_path: Path, rng: str) -> None:
    web.routes["/"] = ranged(BODY)
    c = subprocess.run(
        ["curl", "-s", "-o", os.devnull, "-r", rng, web.url("/")], timeout=10, check=False
    )
    assert c.returncode == 0
    proc, _recs = fetch(tmp_path, [web.url("/")], "-r", rng)
    assert proc.returncode == 0, proc.stderr
    curl_h, surge_h = web.log[0][3], web.log[1][3]
    assert surge_h.get("range") == curl_h.get("range") == f"bytes={rng}", (curl_h, surge_h)
    assert surge_h.get("accept-encoding") == "identity", (
        f"-r asks for Accept-Encoding: identity (docs): {surge_h}"
    )


def test_range_ignored_by_server_saves_whole_body(web: Web, tmp_path: Path) -> None:
    web.routes["/"] = reply(200, BODY)
    d = tmp_path / "d"
    proc, recs = fetch(tmp_path, [web.url("/")], "-r", "0-9", "--output-dir", str(d))
    assert proc.returncode == 0, proc.stderr
    r = recs[0]
    assert r["status"] == 200 and r["error"] is None, r
    assert Path(r["body_path"]).read_bytes() == BODY, (
        "a server that ignores Range: the whole body is saved (docs)"
    )


def test_range_206_saved_as_it_came_even_if_longer(web: Web, tmp_path: Path) -> None:
    # asked 0-9, the server answers 206 with 0-99: saved as it came (as curl saves it)
    web.routes["/"] = reply(206, BODY[:100], (("Content-Range", f"bytes 0-99/{len(BODY)}"),))
    d = tmp_path / "d"
    proc, recs = fetch(tmp_path, [web.url("/")], "-r", "0-9", "--output-dir", str(d))
    assert proc.returncode == 0, proc.stderr
    assert recs[0]["status"] == 206, recs[0]
    assert Path(recs[0]["body_path"]).read_bytes() == BODY[:100]


def test_range_multipart_saved_raw(web: Web, tmp_path: Path) -> None:
    mp = (
        b"--XX\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\nab\r\n"
        b"--XX\r\nContent-Type: text/plain\r\nContent-Range: bytes 5-9/10\r\n\r\nfghij\r\n--XX--\r\n"
    )
    web.routes["/"] = reply(206, mp, (("Content-Type", "multipart/byteranges; boundary=XX"),))
    d = tmp_path / "d"
    proc, recs = fetch(tmp_path, [web.url("/")], "-r", "0-1,5-9", "--output-dir", str(d))
    assert proc.returncode == 0, proc.stderr
    assert Path(recs[0]["body_path"]).read_bytes() == mp, (
        "several ranges: the multipart body as it came (docs)"
    )


def test_range_206_gzip_not_decoded(web: Web, tmp_path: Path) -> None:
    z = gzip.compress(BODY)
    web.routes["/"] = reply(
        206, z[:50], (("Content-Encoding", "gzip"), ("Content-Range", f"bytes 0-49/{len(z)}"))
    )
    d = tmp_path / "d"
    proc, recs = fetch(tmp_path, [web.url("/")], "-r", "0-49", "--output-dir", str(d))
    assert proc.returncode == 0, proc.stderr
    r = recs[0]
    assert r["status"] == 206, r
    assert r["error"] is None, f"a 206's body is never decoded (docs), so no decode error: {r}"
    assert Path(r["body_path"]).read_bytes() == z[:50], "A 206's body is never decoded (docs)"


@pytest.mark.parametrize(
    "args, word",
    [
        (["-r", "0-1", "-C", "-", "--output-dir", "D"], "-r"),
        (["-r", "0-1", "-H", "Range: bytes=0-1"], "range"),
        (["-C", "-", "--output-dir", "D", "-H", "range: bytes=0-1"], "range"),
        (["-C", "100", "--output-dir", "D"], "-C"),
        (["-C", "-"], "output-dir"),
        (["-C", "", "--output-dir", "D"], "-C"),
    ],
)
def test_range_continue_conflicts_refused(
    web: Web, tmp_path: Path, args: list[str], word: str
) -> None:
    args = [str(tmp_path / "D") if a == "D" else a for a in args]
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/") + "\n")
    proc = run([*BASE, str(inp), "-o", str(tmp_path / "o.jsonl"), *args], timeout=20)
    line = usage_error(proc)
    assert word.lstrip("-").lower() in line.lower() or "continue" in line.lower(), line
    assert not web.log


# === -C - =================================================================


def continue_run(
    web: Web, tmp: Path, url: str, partial: bytes | None, *args: str
) -> tuple[subprocess.CompletedProcess[bytes], dict[str, Any], Path]:
    d = tmp / "d"
    f = body_file(d, url, web.port)
    if partial is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(partial)
    proc, recs = fetch(tmp, [url], "-C", "-", "--output-dir", str(d), *args)
    one_per_line(recs, 1)
    return proc, recs[0], f


def test_continue_no_file_is_new_without_range(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = ranged(BODY)
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), None)
    assert proc.returncode == 0, proc.stderr
    assert "range" not in web.log[0][3], "no Range when there is no file (docs, as curl's -C -)"
    assert r["continued"] == "new" and r["continue_from"] == 0, r
    assert f.read_bytes() == BODY and r["body_path"] == str(f), r
    assert r["body_sha256"] == hashlib.sha256(BODY).hexdigest()


def test_continue_appends_206(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = ranged(BODY)
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), BODY[:1000])
    assert proc.returncode == 0, proc.stderr
    assert web.log[0][3].get("range") == "bytes=1000-", web.log[0][3]
    assert r["continued"] == "appended" and r["continue_from"] == 1000, r
    assert f.read_bytes() == BODY
    assert r["body_sha256"] == hashlib.sha256(BODY).hexdigest(), "the whole file's sha256 (docs)"


def test_continue_server_ignores_range_restarts(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = reply(200, BODY)
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), b"X" * 3000)
    assert proc.returncode == 0, proc.stderr
    assert r["continued"] == "restarted", r
    assert f.read_bytes() == BODY, "another 2xx: rewritten from byte 0 (docs)"


def test_continue_server_ignores_range_gzip_restarts_decoded(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = reply(200, gzip.compress(BODY), (("Content-Encoding", "gzip"),))
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), b"X" * 3000)
    assert proc.returncode == 0, proc.stderr
    assert r["continued"] == "restarted", r
    assert f.read_bytes() == BODY, (
        "a restarted body is the whole body, decoded (docs: the file holds it decoded)"
    )


@pytest.mark.parametrize("cr", [f"bytes */{len(BODY)}", None])
def test_continue_416_complete_untouched_and_fail_exit_0(
    web: Web, tmp_path: Path, cr: str | None
) -> None:
    web.routes["/f"] = reply(416, b"", (("Content-Range", cr),) if cr else ())
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), BODY, "--fail-exit")
    assert r["continued"] == "complete" and r["error"] is None, r
    assert f.read_bytes() == BODY
    assert proc.returncode == 0, (
        f"a 416 that found a -C - file complete is done: --fail-exit exits 0 (docs), got {proc.returncode}: {proc.stderr!r}"
    )


@pytest.mark.parametrize(
    "status, headers, body",
    [
        (206, (("Content-Range", "bytes 0-9/10240"),), BODY[:10]),  # starts elsewhere
        (206, (("Content-Range", "bytes 500-10239/10240"),), BODY[500:]),  # starts before N
        (206, (("Content-Range", "garbage"),), b"zz"),
        (206, (), b"zz"),  # no Content-Range at all
        (206, (("Content-Range", "bytes 1000-1001/10240"), ("Content-Encoding", "gzip")), b"zz"),
        (206, (("Content-Type", "multipart/byteranges; boundary=X"),), b"--X--\r\n"),
        (416, (("Content-Range", "bytes */5000"),), b""),  # another size
        (416, (("Content-Range", "bytes */-1"),), b""),
    ],
    ids=[
        "206-at-0",
        "206-before-N",
        "206-garbage-range",
        "206-no-range",
        "206-gzip",
        "206-multipart",
        "416-other-size",
        "416-negative-size",
    ],
)
def test_continue_lying_answers_leave_file_protocol_error(
    web: Web, tmp_path: Path, status: int, headers: tuple[tuple[str, str], ...], body: bytes
) -> None:
    web.routes["/f"] = reply(status, body, headers)
    partial = BODY[:1000]
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), partial)
    assert proc.returncode == 0, proc.stderr
    assert f.read_bytes() == partial, f"left as it is (docs), for {status} {headers}"
    assert r["error"] == "protocol_error" and r["continued"] is None, (
        f"a 206 starting elsewhere / not one range / coded, a 416 naming another size: protocol_error (docs); got error={r['error']} continued={r['continued']}"
    )


@pytest.mark.parametrize("status", [404, 500, 302])
def test_continue_other_status_leaves_file(web: Web, tmp_path: Path, status: int) -> None:
    web.routes["/f"] = reply(status, b"nope page", (("Location", "/elsewhere"),))
    partial = BODY[:1000]
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), partial)
    assert proc.returncode == 0, proc.stderr
    assert f.read_bytes() == partial, "any other status: left as it is, nothing saved (docs)"
    assert r["status"] == status and r["continued"] is None and r["body_path"] is None, r


def test_continue_redirect_followed_appends_under_input_name(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = reply(302, b"", (("Location", "/real"),))
    web.routes["/real"] = ranged(BODY)
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), BODY[:4000], "-L")
    assert proc.returncode == 0, proc.stderr
    real = web.sent("/real")
    assert real and real[0].get("range") == "bytes=4000-", real
    assert r["continued"] == "appended", r
    assert f.read_bytes() == BODY


def test_continue_same_url_twice_second_finds_complete(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = ranged(BODY)
    d = tmp_path / "d"
    url = web.url("/f")
    proc, recs = fetch(tmp_path, [url, url], "-C", "-", "--output-dir", str(d), "-c", "10")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 2)
    assert sorted(r["continued"] for r in recs) == ["complete", "new"], recs
    assert body_file(d, url, web.port).read_bytes() == BODY


def test_continue_after_read_timeout(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = stalls_after(BODY, 4096, web)
    d = tmp_path / "d"
    url = web.url("/f")
    _, recs = fetch(tmp_path, [url], "-C", "-", "--output-dir", str(d), "--max-time", "1")
    assert recs[0]["error"] == "read_timeout", recs[0]
    f = body_file(d, url, web.port)
    assert f.exists() and f.read_bytes() == BODY[:4096], (
        "a transfer that fails leaves the bytes that arrived (docs)"
    )
    web.routes["/f"] = ranged(BODY)
    _proc, recs = fetch(tmp_path, [url], "-C", "-", "--output-dir", str(d))
    assert recs[0]["continued"] == "appended" and recs[0]["continue_from"] == 4096, recs[0]
    assert f.read_bytes() == BODY


def wait_for(pred: Callable[[], bool], limit: float = 10) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_continue_sigint_mid_body_then_resume(web: Web, tmp_path: Path) -> None:
    """-o OUT --resume -C -: the inputs recorded are skipped, the one cut off
    by a signal continues from its part (docs)."""
    web.routes["/a"] = ranged(BODY)
    web.routes["/b"] = stalls_after(BODY, 5000, web)
    d = tmp_path / "d"
    ua, ub = web.url("/a"), web.url("/b")
    inp = tmp_path / "in.txt"
    inp.write_text(f"{ua}\n{ub}\n")
    out = tmp_path / "out.jsonl"
    args = [*BASE, str(inp), "-o", str(out), "-C", "-", "--output-dir", str(d), "-c", "1"]
    args[args.index("--max-time") + 1] = "20"
    p = subprocess.Popen([*SURGE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fb = body_file(d, ub, web.port)
    try:
        got = wait_for(lambda: fb.exists() and fb.stat().st_size >= 5000)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
    assert got, "the partial body was never on disk while its transfer ran"
    assert p.returncode == 130, (p.returncode, err)
    assert fb.read_bytes() == BODY[:5000], (
        "a run stopped by a signal leaves the bytes that arrived (docs)"
    )
    web.routes["/b"] = ranged(BODY)
    n_a = len(web.sent("/a"))
    proc = run(
        [*BASE, str(inp), "-o", str(out), "-C", "-", "--output-dir", str(d), "--resume"], timeout=30
    )
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(x) for x in out.read_bytes().splitlines()]
    one_per_line(recs, 2)
    assert len(web.sent("/a")) == n_a, "the inputs recorded are skipped (docs)"
    rb = next(r for r in recs if r["line"] == 2)
    assert rb["continued"] == "appended" and rb["continue_from"] == 5000, rb
    assert fb.read_bytes() == BODY


def test_continue_max_filesize_cuts_back_to_start(web: Web, tmp_path: Path) -> None:
    big = os.urandom(300_000)
    web.routes["/f"] = ranged(big)
    _proc, r, f = continue_run(web, tmp_path, web.url("/f"), big[:1000], "--max-filesize", "100K")
    assert r["error"] == "body_too_large", r
    assert f.read_bytes() == big[:1000], (
        "a body past --max-filesize is cut back to where its transfer began (docs)"
    )


def test_continue_file_locked_by_other_run(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = stalls_after(BODY, 100, web)
    d = tmp_path / "d"
    url = web.url("/f")
    inp = tmp_path / "in.txt"
    inp.write_text(url + "\n")
    a = [*BASE, str(inp), "-o", str(tmp_path / "a.jsonl"), "-C", "-", "--output-dir", str(d)]
    a[a.index("--max-time") + 1] = "20"
    p = subprocess.Popen([*SURGE, *a], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: len(web.log) >= 1)
        proc = run(
            [*BASE, str(inp), "-o", str(tmp_path / "b.jsonl"), "-C", "-", "--output-dir", str(d)],
            timeout=30,
        )
    finally:
        p.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.communicate(timeout=10)
        if p.poll() is None:
            p.kill()
    line = usage_error(proc)
    assert str(p.pid) in line, f"stops with one line naming the holder's pid (docs): {line}"


# === --auto-throttle ===========================================================


def by_host(table: dict[str, Route]) -> Route:
    return lambda h: table[h.headers["Host"].rsplit(":", 1)[0]](h)


def first_then(first: Route, then: Route) -> Route:
    """``first`` for the first request of this route, ``then`` after."""
    n = [0]
    lock = threading.Lock()

    def route(h: Handler) -> None:
        with lock:
            n[0] += 1
            k = n[0]
        (first if k == 1 else then)(h)

    return route


def starts(web: Web, host: str) -> list[float]:
    return [t for t, _, p, h in web.log if h["host"].startswith(host + ":") and p != "/robots.txt"]


def test_auto_throttle_retry_after_seconds_holds_every_input(web: Web, tmp_path: Path) -> None:
    web.routes["/"] = first_then(reply(429, b"slow down", (("Retry-After", "1"),)), reply(200))
    urls = [web.url("/", "h.sim")] * 4
    proc, recs = fetch(tmp_path, urls, "--auto-throttle", "-c", "10")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 4)
    t = starts(web, "h.sim")
    assert len(t) == 4, t
    assert min(t[1:]) - t[0] >= 0.9, (
        f"a Retry-After holds the host back for every one of its inputs (docs): starts {[round(x - t[0], 2) for x in t]}"
    )


def test_auto_throttle_retry_after_http_date(web: Web, tmp_path: Path) -> None:
    def dated(h: Handler) -> None:  # 2 s on from now, to the second: a wait in (1, 2]
        when = email.utils.formatdate(time.time() + 2, usegmt=True)
        send(h, 503, b"", (("Retry-After", when),))

    web.routes["/"] = first_then(dated, reply(200))
    urls = [web.url("/", "h.sim")] * 3
    proc, _recs = fetch(tmp_path, urls, "--auto-throttle", "-c", "10")
    assert proc.returncode == 0, proc.stderr
    t = starts(web, "h.sim")
    assert len(t) == 3 and min(t[1:]) - t[0] >= 0.9, (
        f"an HTTP-date Retry-After holds the host (docs): {[round(x - t[0], 2) for x in t]}"
    )


HOSTILE_RETRY_AFTER = [
    "-5",
    "99999999999999999999999",
    "garbage",
    "1e309",
    "nan",
    "inf",
    "Thu, 01 Jan 2099 00:00:00 GMT",
    "Mon, 01 Jan 1990 00:00:00 GMT",
    "9" * 4000,
    "0x10",
    " 1 ",
    "",
]


def test_auto_throttle_hostile_retry_after_many_hosts_bounded(web: Web, tmp_path: Path) -> None:
    table = {
        f"h{i}.sim": first_then(reply(429, b"", (("Retry-After", v),)), reply(200))
        for i, v in enumerate(HOSTILE_RETRY_AFTER)
    }
    web.routes["/"] = by_host(table)
    urls = [web.url("/", host) for _ in range(3) for host in table]
    t0 = time.monotonic()
    proc, recs = fetch(
        tmp_path, urls, "--auto-throttle", "--max-time", "1", "-c", "100", timeout=40
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, len(urls))
    late = {}
    for host, v in zip(table, HOSTILE_RETRY_AFTER, strict=True):
        t = starts(web, host)
        mine = [
            (r["status"], r["error"], r["attempts"])
            for r, u in zip(recs, urls, strict=True)
            if host in u
        ]
        assert len(t) == 3, f"Retry-After {v[:30]!r}: 3 inputs, {len(t)} requests; records {mine}"
        if t[-1] - t[0] > 1 + 0.25 + 1.5:
            late[v[:30]] = round(t[-1] - t[0], 2)
    assert not late, f"a Retry-After holds a host at most --max-time (docs): {late}"
    assert wall < 20, wall


def test_auto_throttle_503_storm_doubles_delay_other_host_goes_on(web: Web, tmp_path: Path) -> None:
    web.routes["/"] = by_host({"storm.sim": reply(503, b"busy"), "calm.sim": reply(200)})
    urls = [web.url("/", "storm.sim")] * 4 + [web.url("/", "calm.sim")] * 4
    proc, recs = fetch(tmp_path, urls, "--auto-throttle", "-c", "20")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 8)
    t = starts(web, "storm.sim")
    gaps = [b - a for a, b in itertools.pairwise(t)]
    assert len(t) == 4 and gaps[0] >= 0.2 and gaps[1] >= 0.4 and gaps[2] >= 0.8, (
        f"a 503 doubles the delay (at least 0.25 s) and holds the host (docs): gaps {[round(g, 2) for g in gaps]}"
    )
    calm = starts(web, "calm.sim")
    assert max(calm) < t[-1], "other hosts go on while one is held"


class Held:
    """A route's own count of requests in flight, let go of before its answer
    is sent: the server's count ends after the send, so on a busy box the next
    request (sent once this answer arrived) can start before it does."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, h: Handler) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.wait_s)
        with self.lock:
            self.now -= 1
        send(h, 200, b"ok")


def test_auto_throttle_window_capped_by_per_host(web: Web, tmp_path: Path) -> None:
    web.routes["/"] = held = Held(0.08)
    urls = [web.url(f"/?{i}", "w.sim") for i in range(16)]
    proc, recs = fetch(tmp_path, urls, "--auto-throttle", "--per-host", "2", "-c", "50")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 16)
    assert held.most <= 2, f"the window never passes --per-host (docs): {held.most}"


def test_auto_throttle_window_default_cap_8(web: Web, tmp_path: Path) -> None:
    web.routes["/"] = held = Held(0.1)
    urls = [web.url(f"/?{i}", "w.sim") for i in range(40)]
    proc, recs = fetch(tmp_path, urls, "--auto-throttle", "-c", "100")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 40)
    assert 3 <= held.most <= 8, (
        f"a host whose latency does not grow grows to the cap, 8 (docs): max in flight {held.most}"
    )


# === a POST is sent at most once =================================================


def reset(h: Handler) -> None:
    import struct

    n = int(h.headers.get("Content-Length") or 0)
    h.rfile.read(n)
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.connection.close()


@pytest.mark.parametrize(
    "route, extra, sent",
    [
        # a status: the server answered; --retries is the caller's explicit
        # choice, and curl's --retry 3 sends it 4 times too (docs/fetch.md)
        (reply(503, b"", (("Retry-After", "0"),)), [], 4),
        (reply(429, b"", (("Retry-After", "0"),)), ["--auto-throttle"], 4),
        # a reset once sent: the server may have acted on it: once (curl too)
        (reset, [], 1),
    ],
    ids=["503", "429-throttle", "reset"],
)
def test_post_retries_as_documented(
    web: Web, tmp_path: Path, route: Route, extra: list[str], sent: int
) -> None:
    web.routes["/p"] = route
    proc, recs = fetch(
        tmp_path, [web.url("/p")], "-X", "POST", "-d", "a=1", "--retries", "3", *extra
    )
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 1)
    posts = [m for _, m, p, _ in web.log if p == "/p"]
    web.log.clear()
    subprocess.run(
        ["curl", "-s", "-o", os.devnull, "--retry", "3", "--retry-delay", "0", "-d", "a=1",
         web.url("/p")],
        timeout=30,
        check=False,
    )  # fmt: skip
    assert len(web.sent("/p")) == sent, "curl's reference"
    assert posts == ["POST"] * sent, f"POST sent {len(posts)} times, {sent} expected"


# === --rate, --rate-per-host, --limit-rate, --max-host-errors syntax ==============


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--rate", "0/s"),
        ("--rate", "inf/s"),
        ("--rate", "1e400/s"),
        ("--rate", "/s"),
        ("--rate", "5/0s"),
        ("--rate-per-host", "0"),
        ("--rate-per-host", "nan"),
        ("--rate-per-host", "inf"),
        ("--rate-per-host", ""),
        ("--max-host-errors", "0"),
        ("--limit-rate", "nan"),
    ],
)
def test_pacing_bad_values_one_line_exit_2_output_kept(
    web: Web, tmp_path: Path, flag: str, value: str
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"precious\n")
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/") + "\n")
    proc = run([*BASE, str(inp), "-o", str(out), flag, value], timeout=20)
    usage_error(proc, flag.lstrip("-"))
    assert out.read_bytes() == b"precious\n"
    assert not web.log


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--rate", "1000000000/s"),
        ("--rate-per-host", "1e12"),
        ("--limit-rate", "999999G"),
    ],
)
def test_pacing_huge_values_run(web: Web, tmp_path: Path, flag: str, value: str) -> None:
    proc, recs = fetch(tmp_path, [web.url("/")], flag, value, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert recs[0]["status"] == 200, recs


# === --max-host-errors =======================================================


def test_max_host_errors_per_host_1_sends_exactly_n(tarpit: Tarpit, tmp_path: Path) -> None:
    urls = [f"http://127.0.0.1:{tarpit.port}/{i}" for i in range(5)]
    proc, recs = fetch(
        tmp_path, urls, "--max-host-errors", "2", "--per-host", "1", "-c", "20", "--max-time", "0.5"
    )
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 5)
    errs = sorted(str(r["error"]) for r in recs)
    assert errs == ["host_skipped"] * 3 + ["read_timeout"] * 2, (
        f"--max-host-errors 2 with --per-host 1: its remaining inputs become host_skipped (docs): {errs}"
    )
    assert all(r["attempts"] == 0 for r in recs if r["error"] == "host_skipped")
    assert tarpit.accepted == 2, (
        f"at most N + C - 1 requests, C the most in flight at once (--per-host 1): sent {tarpit.accepted}"
    )


def test_max_host_errors_with_auto_throttle_window(tarpit: Tarpit, tmp_path: Path) -> None:
    urls = [f"http://127.0.0.1:{tarpit.port}/{i}" for i in range(8)]
    proc, recs = fetch(
        tmp_path, urls, "--max-host-errors", "2", "--auto-throttle", "-c", "20", "--max-time", "0.7"
    )
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 8)
    assert sum(r["error"] == "host_skipped" for r in recs) == 6, [r["error"] for r in recs]
    assert tarpit.accepted == 2, f"window 1, so N requests: sent {tarpit.accepted}"


def test_max_host_errors_mixed_hosts(web: Web, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{dead_port()}/"
    urls = [u for i in range(5) for u in (dead + str(i), web.url(f"/{i}"))]
    proc, recs = fetch(tmp_path, urls, "--max-host-errors", "2", "-c", "1")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 10)
    assert [r["error"] for r in recs[1::2]] == [None] * 5, "a live host is never skipped"
    assert [r["error"] for r in recs[0::2]] == ["connect_refused"] * 2 + ["host_skipped"] * 3


def test_max_host_errors_redirect_to_dead_host_not_counted_against_live_origin(
    web: Web, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{dead_port()}/gone"
    web.routes["/r"] = reply(302, b"", (("Location", dead),))
    urls = [web.url("/r")] * 3 + [web.url("/ok")] * 2
    proc, recs = fetch(tmp_path, urls, "--max-host-errors", "1", "-c", "1", "-L")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 5)
    assert [r["status"] for r in recs[3:]] == [200, 200], (
        "the input's origin answered (a 302): 'A response of any status from the origin resets its count' (docs); "
        f"got {[(r['status'], r['error']) for r in recs]}"
    )
    assert len(web.sent("/r")) == 3


# === --robots obey ==========================================================


def test_robots_5xx_then_200_stays_disallowed(web: Web, tmp_path: Path) -> None:
    web.routes["/robots.txt"] = first_then(reply(503, b"down"), reply(200, b"User-agent: *\n"))
    urls = [web.url(f"/{i}") for i in range(4)]
    proc, recs = fetch(tmp_path, urls, "--robots", "obey", "-c", "4")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 4)
    assert [r["error"] for r in recs] == ["robots_disallowed"] * 4, (
        "5xx: disallow all, for the run (docs)"
    )
    assert len(web.sent("/robots.txt")) == 1
    assert len(web.log) == 1, "disallowed inputs are sent nothing"


def test_robots_binary_body_no_crash(web: Web, tmp_path: Path) -> None:
    junk = bytes(range(256)) * 50 + b"\x00\nUser-agent: *\nDisallow: /x\n\xff\xfe\x00"
    web.routes["/robots.txt"] = reply(200, junk, (("Content-Type", "application/octet-stream"),))
    proc, recs = fetch(tmp_path, [web.url("/x"), web.url("/y")], "--robots", "obey", "-c", "1")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 2)
    assert recs[1]["error"] is None, recs[1]


def test_robots_gzip_bomb_bounded(web: Web, tmp_path: Path) -> None:
    bomb = gzip.compress(b"User-agent: *\nDisallow: /p\n" + b"#" * 30_000_000, 1)
    web.routes["/robots.txt"] = reply(200, bomb, (("Content-Encoding", "gzip"),))
    t0 = time.monotonic()
    proc, recs = fetch(tmp_path, [web.url("/p"), web.url("/q")], "--robots", "obey", "-c", "1")
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 2)
    assert recs[0]["error"] == "robots_disallowed" and recs[1]["error"] is None, (
        f"the first 500 KiB are parsed (docs): {[r['error'] for r in recs]}"
    )
    assert time.monotonic() - t0 < 15


def test_robots_endless_body_bounded(web: Web, tmp_path: Path) -> None:
    def endless(h: Handler) -> None:
        h.send_response(200)
        h.end_headers()
        h.wfile.write(b"User-agent: *\nDisallow: /p\n")
        for _ in range(20000):  # bounded: at most ~1.3 GB or the client goes
            if web.stop.is_set():
                return
            h.wfile.write(b"# filler\n" * 7000)

    web.routes["/robots.txt"] = endless
    t0 = time.monotonic()
    proc, recs = fetch(
        tmp_path, [web.url("/p"), web.url("/q")], "--robots", "obey", "--max-time", "2"
    )
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 2)
    assert time.monotonic() - t0 < 15, "a robots.txt that never ends is bounded"


@pytest.mark.parametrize(
    "cred, secret",
    [
        (["-H", "Authorization: Bearer SECRETTK"], "SECRETTK"),
        (["-u", "user:SECRETPW"], "Basic dXNlcjpTRUNSRVRQVw=="),
        (["-b", "sid=SECRETCK"], "SECRETCK"),
    ],
    ids=["authorization", "user", "cookie-header"],
)
def test_robots_redirect_elsewhere_drops_credentials(
    web: Web, web2: Web, tmp_path: Path, cred: list[str], secret: str
) -> None:
    web.routes["/robots.txt"] = reply(301, b"", (("Location", web2.url("/robots.txt")),))
    web2.routes["/robots.txt"] = reply(502, b"bad gateway")
    proc, recs = fetch(tmp_path, [web.url("/x")], "--robots", "obey", *cred)
    assert proc.returncode == 0, proc.stderr
    assert recs[0]["error"] == "robots_disallowed", "3xx followed; a 5xx there: disallow all (docs)"
    leaked = [h for h in web2.sent("/robots.txt") if secret in json.dumps(h)]
    assert not leaked, (
        f"credentials go only to the origin of each input URL: a redirect elsewhere drops them, as curl does (docs) - the robots.txt redirect to another port carried {cred[0]}: {leaked}"
    )


CRAWL_DELAYS = ["-5", "nan", "inf", "1e400", "abc", "0.0000001", "", "1" * 5000]


def test_robots_crawl_delay_garbage_no_stall(web: Web, tmp_path: Path) -> None:
    table = {
        f"d{i}.sim": reply(200, f"User-agent: *\nCrawl-delay: {v}\n".encode())
        for i, v in enumerate(CRAWL_DELAYS)
    }
    web.routes["/robots.txt"] = by_host(table)
    urls = [web.url(p, host) for host in table for p in ("/a", "/b")]
    t0 = time.monotonic()
    proc, recs = fetch(tmp_path, urls, "--robots", "obey", "-c", "50", timeout=20)
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, len(urls))
    spans = {
        v[:20]: max(starts(web, h)) - min(starts(web, h))
        for h, v in zip(table, CRAWL_DELAYS, strict=True)
    }
    slow = {v: round(x, 2) for v, x in spans.items() if x > 3}
    assert not slow, f"a garbage Crawl-delay held its host: {slow}"
    assert time.monotonic() - t0 < 10


def test_robots_crawl_delay_absurd_is_bounded(web: Web, tmp_path: Path) -> None:
    """Crawl-delay: 86400 (a day) from a remote robots.txt: every size the
    network controls is bounded (project rule) - as Retry-After is (at most
    --max-time) and the auto-throttle delay (at most 60 s)."""
    web.routes["/robots.txt"] = reply(200, b"User-agent: *\nCrawl-delay: 86400\n")
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/a") + "\n" + web.url("/b") + "\n")
    out = tmp_path / "out.jsonl"
    try:
        # kept to --max-time (3 s; docs/fetch.md): the robots.txt, then 2 inputs
        # 3 s apart - about 6 s, never a day
        proc = run([*BASE, str(inp), "-o", str(out), "--robots", "obey"], timeout=20)
        finished = True
    except subprocess.TimeoutExpired:
        finished = False
        proc = None
    n = len(out.read_bytes().splitlines()) if out.exists() else 0
    assert finished, (
        f"a remote Crawl-delay of a day holds a 2-input run for ever (20 s: {n} records "
        "written); the run is unbounded"
    )
    assert proc is not None and proc.returncode == 0


# === cookie files ==============================================================

NETSCAPE = "# Netscape HTTP Cookie File\n"


@needs("wget")
def test_cookie_file_as_wget_writes_it(web: Web, tmp_path: Path) -> None:
    """docs: "-b FILE reads a cookie file in the Netscape format curl and wget
    write (curl -c, wget --save-cookies ...)"."""
    web.routes["/set"] = reply(200, b"ok", (("Set-Cookie", "w=1; Max-Age=3600"),))
    jar = tmp_path / "wget.txt"
    subprocess.run(
        [
            "wget",
            "-q",
            "-O",
            os.devnull,
            "--save-cookies",
            str(jar),
            "--keep-session-cookies",
            web.url("/set"),
        ],
        timeout=10,
        check=False,
    )
    assert jar.exists()
    proc, _recs = fetch(tmp_path, [web.url("/next")], "-b", str(jar))
    assert proc.returncode == 0, (
        f"wget's --save-cookies file refused: {proc.stderr!r} (file starts {jar.read_text()[:40]!r})"
    )
    assert web.sent("/next")[0].get("cookie") == "w=1"


def test_cookie_file_without_header_as_curl_reads_it(web: Web, tmp_path: Path) -> None:
    jar = tmp_path / "cj.txt"
    jar.write_text("127.0.0.1\tFALSE\t/\tFALSE\t0\tk\tv\n")
    subprocess.run(
        ["curl", "-s", "-o", os.devnull, "-b", str(jar), web.url("/curl")], timeout=10, check=False
    )
    assert web.sent("/curl")[0].get("cookie") == "k=v", (
        "curl reads a Netscape file without its header"
    )
    proc, _recs = fetch(tmp_path, [web.url("/surge")], "-b", str(jar))
    assert proc.returncode == 0, f"curl sends k=v from this file; surge: {proc.stderr!r}"
    assert web.sent("/surge")[0].get("cookie") == "k=v"


def test_cookie_jar_is_a_directory(web: Web, tmp_path: Path) -> None:
    jar = tmp_path / "jar"
    jar.mkdir()
    web.routes["/"] = reply(200, b"ok", (("Set-Cookie", "a=1"),))
    proc, _recs = fetch(tmp_path, [web.url("/")], "--cookie-jar", str(jar))
    usage_error(proc, str(jar))
    assert jar.is_dir()


def test_cookie_jar_is_input_by_symlink(web: Web, tmp_path: Path) -> None:
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/") + "\n")
    link = tmp_path / "link.txt"
    link.symlink_to(inp)
    proc = run(
        [*BASE, str(inp), "-o", str(tmp_path / "o.jsonl"), "--cookie-jar", str(link)], timeout=20
    )
    usage_error(proc)
    assert inp.read_text() == web.url("/") + "\n", "an output is never an input, by any name (docs)"
    assert not web.log


def test_cookie_jar_is_data_file(web: Web, tmp_path: Path) -> None:
    data = tmp_path / "data.txt"
    data.write_text("a=1")
    inp = tmp_path / "in.txt"
    inp.write_text(web.url("/") + "\n")
    proc = run(
        [
            *BASE,
            str(inp),
            "-o",
            str(tmp_path / "o.jsonl"),
            "-d",
            f"@{data}",
            "--cookie-jar",
            str(data),
        ],
        timeout=20,
    )
    usage_error(proc)
    assert data.read_text() == "a=1"


def test_cookie_secure_not_sent_over_http_as_curl(web: Web, tmp_path: Path) -> None:
    jar = tmp_path / "cj.txt"
    jar.write_text(
        NETSCAPE + "a.sim\tFALSE\t/\tTRUE\t0\tsec\t1\na.sim\tFALSE\t/\tFALSE\t0\tplain\t2\n"
    )
    url = web.url("/c", "a.sim")
    subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            os.devnull,
            "-b",
            str(jar),
            "--resolve",
            f"a.sim:{web.port}:127.0.0.1",
            url,
        ],
        timeout=10,
        check=False,
    )
    proc, _recs = fetch(tmp_path, [url], "-b", str(jar))
    assert proc.returncode == 0, proc.stderr
    curl_c, surge_c = web.log[0][3].get("cookie"), web.log[1][3].get("cookie")
    assert surge_c == curl_c == "plain=2", (
        f"a Secure cookie over http: curl {curl_c!r}, surge {surge_c!r}"
    )


def test_cookie_domain_and_host_only_across_hosts(web: Web, tmp_path: Path) -> None:
    web.routes["/set"] = reply(
        200, b"", (("Set-Cookie", "dom=1; Domain=a.sim; Path=/"), ("Set-Cookie", "host=1; Path=/"))
    )
    urls = [
        web.url("/set", "x.a.sim"),
        web.url("/1", "x.a.sim"),
        web.url("/2", "y.a.sim"),
        web.url("/3", "b.sim"),
    ]
    jar = tmp_path / "jar.txt"
    proc, _recs = fetch(tmp_path, urls, "-c", "1", "--cookie-jar", str(jar))
    assert proc.returncode == 0, proc.stderr
    got = {p: h.get("cookie") for _, _, p, h in web.log}
    assert got["/1"] in ("dom=1; host=1", "host=1; dom=1"), got
    assert got["/2"] == "dom=1", f"a Domain cookie goes to the domain, a host cookie stays: {got}"
    assert got["/3"] is None, f"no cookie to another domain: {got}"


def test_cookie_header_sent_is_bounded(web: Web, tmp_path: Path) -> None:
    many = tuple(("Set-Cookie", f"c{i}={'v' * 200}; Path=/") for i in range(300))
    web.routes["/set"] = reply(200, b"", many)
    proc, recs = fetch(
        tmp_path,
        [web.url("/set"), web.url("/next")],
        "-c",
        "1",
        "--cookie-jar",
        str(tmp_path / "j.txt"),
    )
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 2)
    sent = [h.get("cookie", "") for _, _, p, h in web.log if p == "/next"]
    assert sent, f"the second request never arrived: {recs[1]}"
    assert len(sent[0]) <= 8190, (
        f"a Cookie header the network grew: {len(sent[0])} bytes (curl caps its Cookie header at 8190 and 150 cookies; project rule: sizes the network controls are bounded)"
    )


def test_cookie_file_huge_loads(web: Web, tmp_path: Path) -> None:
    jar = tmp_path / "big.txt"
    with jar.open("w") as f:
        f.write(NETSCAPE)
        for i in range(5_000):
            f.write(f"h{i}.example\tFALSE\t/\tFALSE\t0\tn{i}\tv{i}\n")
        f.write("127.0.0.1\tFALSE\t/\tFALSE\t0\tmine\t1\n")
    t0 = time.monotonic()
    proc, _recs = fetch(tmp_path, [web.url("/")], "-b", str(jar), timeout=40)
    assert proc.returncode == 0, proc.stderr
    assert web.log[0][3].get("cookie") == "mine=1"
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(
    "line",
    [
        "127.0.0.1\tFALSE\t/\tFALSE\t0\tn\t" + "v" * 1_000_000,
        "127.0.0.1\tFALSE\t/\tFALSE\t99999999999999999999999\tn\tv",
        "127.0.0.1\tFALSE\t/\tFALSE\t0\tn\x00x\tv",
    ],
    ids=["1MB-value", "huge-expiry", "nul"],
)
def test_cookie_file_hostile_line_no_crash(web: Web, tmp_path: Path, line: str) -> None:
    jar = tmp_path / "cj.txt"
    jar.write_text(NETSCAPE + line + "\n")
    proc, recs = fetch(tmp_path, [web.url("/")], "-b", str(jar), timeout=30)
    if proc.returncode == 2:
        usage_error(proc)
    else:
        assert proc.returncode == 0, proc.stderr
        one_per_line(recs, 1)
        sent = web.log[0][3].get("cookie", "") if web.log else ""
        assert len(sent) < 100_000, "a 1 MB cookie value sent as is"


# === secrets with -C - / -r, and --fail-exit ===================================


def test_continue_secrets_not_written(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = reply(
        206, b"zz", (("Content-Range", "bytes 0-1/2"), ("Set-Cookie", "sid=SECRETSC"))
    )
    d = tmp_path / "d"
    url = f"http://user:SECRETPW@127.0.0.1:{web.port}/f?token=SECRETQ"
    f = body_file(d, url, web.port)
    f.parent.mkdir(parents=True)
    f.write_bytes(b"abc")
    proc, recs = fetch(
        tmp_path,
        [url],
        "-C",
        "-",
        "--output-dir",
        str(d),
        "-i",
        "-b",
        "sid=SECRETCK",
        "-H",
        "Authorization: Bearer SECRETTK",
        "--har",
        str(tmp_path / "h.har"),
        "--trace",
        str(tmp_path / "t.html"),
    )
    assert proc.returncode == 0, proc.stderr
    assert recs[0]["error"] == "protocol_error", recs[0]
    blobs = {
        p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "in.txt"
    }
    blobs["stderr"] = proc.stderr
    leaks = [
        (n, s)
        for n, b in blobs.items()
        for s in ("SECRETPW", "SECRETCK", "SECRETTK", "SECRETSC", "SECRETQ")
        if s.encode() in b
    ]
    assert not leaks, f"no secret in any file surge writes (project rule): {leaks}"


def test_fail_exit_range_and_continue(web: Web, tmp_path: Path) -> None:
    web.routes["/r"] = ranged(BODY)
    proc, recs = fetch(tmp_path, [web.url("/r")], "-r", "5-", "--fail-exit")
    assert recs[0]["status"] == 206 and proc.returncode == 0, (recs, proc.stderr)
    web.routes["/f"] = reply(206, b"zz", (("Content-Range", "bytes 0-1/2"),))
    proc, r, _f = continue_run(web, tmp_path, web.url("/f"), b"abc", "--fail-exit")
    assert r["error"] == "protocol_error"
    assert proc.returncode == 22, proc.returncode
    assert b"--fail-exit" in proc.stderr


def test_continue_retry_goes_on_from_previous_try(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = first_then(stalls_after(BODY, 4096, web), ranged(BODY))
    proc, r, f = continue_run(
        web, tmp_path, web.url("/f"), None, "--retries", "1", "--max-time", "1"
    )
    assert proc.returncode == 0, proc.stderr
    tries = web.sent("/f")
    assert len(tries) == 2 and tries[1].get("range") == "bytes=4096-", (
        f"a retry under --retries continues from what the try before it left (docs): {[h.get('range') for h in tries]}"
    )
    assert f.read_bytes() == BODY and r["attempts"] == 2, r


def test_continue_body_path_symlink_to_input_refused(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = ranged(BODY)
    url = web.url("/f")
    inp = tmp_path / "in.txt"
    inp.write_text(url + "\n")
    d = tmp_path / "d"
    f = body_file(d, url, web.port)
    f.parent.mkdir(parents=True)
    f.symlink_to(inp)
    proc = run(
        [*BASE, str(inp), "-o", str(tmp_path / "o.jsonl"), "-C", "-", "--output-dir", str(d)],
        timeout=20,
    )
    no_traceback(proc)
    assert inp.read_text() == url + "\n", (
        "an output is never an input, by any name - a link, a body's path (docs): the input was written through the body's symlink"
    )
    usage_error(proc)


def test_max_host_errors_with_rate_per_host(tarpit: Tarpit, tmp_path: Path) -> None:
    urls = [f"http://127.0.0.1:{tarpit.port}/{i}" for i in range(5)]
    proc, recs = fetch(
        tmp_path, urls, "--max-host-errors", "2", "--rate-per-host", "2", "--max-time", "0.3"
    )
    assert proc.returncode == 0, proc.stderr
    one_per_line(recs, 5)
    skipped = sum(r["error"] == "host_skipped" for r in recs)
    # starts at 0, 0.5, 1.0...; the failures at 0.3 and 0.8: inputs 3-5 wait past the 2nd
    assert skipped == 3 and tarpit.accepted == 2, (
        f"--max-host-errors 2: the inputs after the 2nd failure are host_skipped; {skipped} skipped, {tarpit.accepted} sent"
    )


def test_range_sent_on_each_redirect_hop_as_curl(web: Web, tmp_path: Path) -> None:
    web.routes["/a"] = reply(302, b"", (("Location", "/b"),))
    web.routes["/b"] = reply(206, BODY[:10], (("Content-Range", f"bytes 0-9/{len(BODY)}"),))
    subprocess.run(
        ["curl", "-s", "-L", "-o", os.devnull, "-r", "0-9", web.url("/a")], timeout=10, check=False
    )
    curl_b = web.sent("/b")[0].get("range")
    web.log.clear()
    proc, recs = fetch(tmp_path, [web.url("/a")], "-r", "0-9", "-L")
    assert proc.returncode == 0, proc.stderr
    assert web.sent("/b")[0].get("range") == curl_b == "bytes=0-9", (curl_b, web.sent("/b"))
    assert recs[0]["status"] == 206


def test_continue_empty_partial_as_curl(web: Web, tmp_path: Path) -> None:
    web.routes["/f"] = ranged(BODY)
    cf = tmp_path / "curl.out"
    cf.write_bytes(b"")
    subprocess.run(["curl", "-s", "-C", "-", "-o", str(cf), web.url("/f")], timeout=10, check=False)
    curl_range = web.log[0][3].get("range")
    web.log.clear()
    proc, r, f = continue_run(web, tmp_path, web.url("/f"), b"")
    assert proc.returncode == 0, proc.stderr
    assert web.log[0][3].get("range") == curl_range, (curl_range, web.log[0][3])
    assert f.read_bytes() == BODY and r["continue_from"] == 0, r


def test_cookie_jar_keeps_loaded_cookies_of_other_hosts_as_curl(web: Web, tmp_path: Path) -> None:
    src = tmp_path / "in.cookies"
    src.write_text(NETSCAPE + "other.example\tFALSE\t/\tFALSE\t0\tkeep\tme\n")
    web.routes["/"] = reply(200, b"ok", (("Set-Cookie", "new=1"),))
    cj = tmp_path / "curl.jar"
    subprocess.run(
        ["curl", "-s", "-o", os.devnull, "-b", str(src), "-c", str(cj), web.url("/")],
        timeout=10,
        check=False,
    )
    assert "keep\tme" in cj.read_text()
    jar = tmp_path / "surge.jar"
    proc, _ = fetch(tmp_path, [web.url("/")], "-b", str(src), "--cookie-jar", str(jar))
    assert proc.returncode == 0, proc.stderr
    text = jar.read_text()
    assert "keep\tme" in text and "new\t1" in text, (
        f"curl's -c keeps what -b loaded and what was set: {text!r}"
    )
