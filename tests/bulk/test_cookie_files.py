"""``-b FILE|NAME=VALUE`` and ``--cookie-jar FILE`` (surge.bulk.cookiefile): the
Netscape cookie files curl reads and writes, with curl itself as the reference
- a jar surge writes, curl sends; a jar curl writes, surge sends - against a
real HTTP server on loopback that sets cookies and notes the Cookie header of
every request.  The jar is shared by the run's inputs, kept by the client's
rules, and written when the run ends, a run stopped by SIGINT too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.conftest import needs

import surge

SURGE = [sys.executable, "-m", "surge.cli"]
RESOLVE = "*.test:*:127.0.0.1"

needs_curl = needs("curl")


class Cookies(ThreadingHTTPServer):
    """``/set``: sets a persistent, a session, an HttpOnly and a Secure cookie
    (the last refused over http); ``/hang``: never answers; anything else: 200.
    Every request's (host, path, Cookie header) is noted."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str, str | None]] = []
        self.hanging = threading.Event()
        self.release = threading.Event()

    def url(self, host: str, path: str) -> str:
        return f"http://{host}.test:{self.server_address[1]}{path}"

    def cookie(self, host: str, path: str) -> str | None:
        found = [c for h, p, c in self.seen if h == f"{host}.test" and p == path]
        assert len(found) == 1, (host, path, self.seen)
        return found[0]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, Cookies)
        host = self.headers["Host"].rsplit(":", 1)[0]
        server.seen.append((host, self.path, self.headers.get("Cookie")))
        if self.path == "/hang":
            server.hanging.set()
            server.release.wait(30)
        self.send_response(200)
        if self.path == "/set":
            self.send_header("Set-Cookie", "kept=1; Path=/; Max-Age=3600")
            self.send_header("Set-Cookie", "session=2; Path=/")
            self.send_header("Set-Cookie", "private=3; Path=/; Max-Age=3600; HttpOnly")
            self.send_header("Set-Cookie", "secret=4; Path=/; Secure")  # over http: refused
        self.send_header("Content-Length", "2")
        self.end_headers()
        with contextlib.suppress(OSError):  # a stopped client is gone
            self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[Cookies]:
    cookies = Cookies()
    thread = threading.Thread(target=cookies.serve_forever, daemon=True)
    thread.start()
    try:
        yield cookies
    finally:
        cookies.release.set()
        cookies.shutdown()
        cookies.server_close()


def _surge(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SURGE, "fetch", *args, "--resolve", RESOLVE, "-q"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _curl(server: Cookies, host: str, *args: str) -> None:
    port = server.server_address[1]
    done = subprocess.run(
        ["curl", "-s", "-o", os.devnull, "--resolve", f"{host}.test:{port}:127.0.0.1", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def _names(header: str | None) -> set[str]:
    return {part.split("=")[0].strip() for part in (header or "").split(";") if part.strip()}


@needs_curl
def test_a_jar_surge_writes_is_one_curl_sends(server: Cookies, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(server.url("w", "/set") + "\n")
    jar = tmp_path / "jar.txt"
    done = _surge(str(urls), "--cookie-jar", str(jar), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 0, done.stderr
    text = jar.read_text()
    assert text.startswith("# Netscape HTTP Cookie File\n")
    assert "#HttpOnly_w.test\tFALSE\t/\tFALSE\t" in text  # the HttpOnly flag kept
    assert "\tsession\t2\n" in text and "secret" not in text  # Secure over http: refused
    _curl(server, "w", "-b", str(jar), server.url("w", "/echo"))
    assert _names(server.cookie("w", "/echo")) == {"kept", "session", "private"}


@needs_curl
def test_a_jar_curl_writes_is_one_surge_sends(server: Cookies, tmp_path: Path) -> None:
    jar = tmp_path / "curl-jar.txt"
    _curl(server, "r", "-c", str(jar), server.url("r", "/set"))
    urls = tmp_path / "urls.txt"
    urls.write_text(server.url("r", "/echo") + "\n" + server.url("other", "/echo") + "\n")
    done = _surge(str(urls), "-b", str(jar), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 0, done.stderr
    # curl's session cookie (expiry 0) and its #HttpOnly_ line are read as curl means them
    assert _names(server.cookie("r", "/echo")) == {"kept", "session", "private"}
    assert server.cookie("other", "/echo") is None  # another host's: not sent


def test_the_run_shares_one_jar_and_writes_it_back(server: Cookies, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(server.url("s", "/set") + "\n" + server.url("s", "/after") + "\n")
    jar = tmp_path / "jar.txt"  # not there yet: -b FILE --cookie-jar FILE starts a session
    args = ["-b", str(jar), "--cookie-jar", str(jar), "-c", "1"]
    done = _surge(str(urls), *args, "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 0, done.stderr
    assert _names(server.cookie("s", "/after")) == {"kept", "session", "private"}
    urls.write_text(server.url("s", "/again") + "\n")
    done = _surge(str(urls), *args, "-o", str(tmp_path / "out2.jsonl"))
    assert done.returncode == 0, done.stderr
    assert _names(server.cookie("s", "/again")) == {"kept", "session", "private"}


def test_a_stopped_run_still_writes_its_jar(server: Cookies, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(server.url("i", "/set") + "\n" + server.url("i", "/hang") + "\n")
    jar = tmp_path / "jar.txt"
    args = ["--cookie-jar", str(jar), "-c", "1", "--resolve", RESOLVE, "-q"]
    child = subprocess.Popen(
        [*SURGE, "fetch", str(urls), *args, "-o", str(tmp_path / "out.jsonl")],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.hanging.wait(30)
        child.send_signal(signal.SIGINT)
        assert child.wait(30) == 130
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    assert "\tkept\t1\n" in jar.read_text()


def test_a_name_value_is_a_cookie_header_for_each_inputs_own_host(
    server: Cookies, tmp_path: Path
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(server.url("h", "/nv") + "\n")
    done = _surge(str(urls), "-b", "a=1; b=2", "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 0, done.stderr
    assert server.cookie("h", "/nv") == "a=1; b=2"


def test_the_api_fills_the_callers_jar(server: Cookies) -> None:
    from http.cookiejar import CookieJar

    jar = CookieJar()
    records = list(surge.fetch_all([server.url("api", "/set")], cookies=jar, resolve=[RESOLVE]))
    assert records[0]["status"] == 200
    assert {c.name for c in jar} == {"kept", "session", "private"}


@pytest.mark.parametrize("content", ["not a cookie file\n", "\x00\x01"])
def test_a_bad_cookie_file_is_one_line_and_exit_2(tmp_path: Path, content: str) -> None:
    jar = tmp_path / "jar.txt"
    jar.write_text(content)
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:1/\n")
    done = _surge(str(urls), "-b", str(jar))
    assert done.returncode == 2
    # as curl, no "# Netscape HTTP Cookie File" line is needed: the first line is
    # a cookie line, and this one is not - named by its file and line
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"{jar}:1: a cookie line is 7 tab-separated fields" in done.stderr
