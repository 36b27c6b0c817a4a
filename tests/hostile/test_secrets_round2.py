"""Hostile round 2 of the secrets rule: no secret of a run (argv, environment,
URL userinfo, secret query values, Authorization / Proxy-Authorization,
cookies, ``-u``, proxy credentials, tokens) reaches any file, report, trace,
HAR (unless ``--har-with-secrets``), WARC header or warcinfo, OTLP span, log
line, error message, stdout or stderr that surge writes; credentials never
cross an origin without ``--location-trusted``.

Each row plants a unique canary and greps every output surge wrote. The WARC
request and response records' blocks (the exchange as it went on the wire)
are the only places a canary may be.
"""

# ruff: noqa: E501  (the watched programs are sources in strings)

from __future__ import annotations

import contextlib
import gzip
import json
import os
import pty
import subprocess
import sys
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.hostile.conftest import SURGE

# --------------------------------------------------------------------------
# A loopback server that logs what it receives, redirects where asked, sets
# cookies, and answers absolute-form requests as a proxy would.


@dataclass
class Seen:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def text(self) -> str:
        heads = "\n".join(f"{k}: {v}" for k, v in self.headers)
        return f"{self.method} {self.target}\n{heads}\n" + self.body.decode("latin-1")


@dataclass
class Server:
    httpd: ThreadingHTTPServer
    seen: list[Seen] = field(default_factory=list)
    #: /r/KEY -> (what, value): so a URL that makes the server send a secret
    #: does not itself hold the secret.
    routes: dict[str, tuple[str, str]] = field(default_factory=dict)

    def route(self, what: str, value: str) -> str:
        """The URL of a resource that answers ``what`` (setcookie, redirect,
        redirect307, redirect308) with ``value``."""
        key = uuid.uuid4().hex[:8]
        self.routes[key] = (what, value)
        return f"{self.base}/r/{key}"

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base(self) -> str:
        host = self.httpd.server_address[0]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def received(self) -> str:
        return "\n\n".join(s.text() for s in self.seen)


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            server.seen.append(Seen(self.command, self.path, list(self.headers.items()), body))
            target = self.path
            if target.startswith("http://") or target.startswith("https://"):
                target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
            parsed = urllib.parse.urlsplit(target)
            status, headers = 200, [("Content-Type", "text/plain")]
            if parsed.path.startswith("/r/"):
                what, value = server.routes[parsed.path[3:]]
                if what.startswith("redirect"):
                    status = int(what[8:] or "302")
                    headers.append(("Location", value))
                if what == "setcookie":
                    headers.append(("Set-Cookie", f"sid={value}; Path=/; HttpOnly"))
            payload = b"ok\n"
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _serve

    return Handler


@contextlib.contextmanager
def serving(host: str = "127.0.0.1") -> Iterator[Server]:
    class HTTPD(ThreadingHTTPServer):
        daemon_threads = True
        address_family = (
            __import__("socket").AF_INET6 if ":" in host else __import__("socket").AF_INET
        )

    server = Server(httpd=None)  # type: ignore[arg-type]
    server.httpd = HTTPD((host, 0), _handler(server))
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.fixture
def origin_a() -> Iterator[Server]:
    with serving() as s:
        yield s


@pytest.fixture
def origin_b() -> Iterator[Server]:
    with serving() as s:
        yield s


def canary(tag: str) -> str:
    return f"CANARY{tag}{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------
# Reading every output back.


def warc_parts(path: Path) -> dict[str, str]:
    """The WARC's record headers (all), and the blocks other than request and
    response (warcinfo, metadata, ...)."""
    out = {"warc record headers": "", "warc non-exchange blocks": ""}
    for file in sorted(path.parent.glob(path.name.split(".")[0] + "*")):
        if not file.is_file():
            continue
        try:
            with gzip.open(file) as packed:
                raw = packed.read()
        except OSError:
            raw = file.read_bytes()
        for rec in raw.split(b"WARC/1.")[1:]:
            head, _, block = rec.partition(b"\r\n\r\n")
            head_text = head.decode("latin-1")
            out["warc record headers"] += head_text + "\n"
            kind = ""
            for line in head_text.splitlines():
                if line.lower().startswith("warc-type:"):
                    kind = line.split(":", 1)[1].strip()
            if kind not in ("request", "response"):
                out["warc non-exchange blocks"] += block.decode("latin-1") + "\n"
    return out


def read_outputs(directory: Path, stdout: bytes, stderr: bytes) -> dict[str, str]:
    found: dict[str, str] = {
        "stdout": stdout.decode("latin-1"),
        "stderr": stderr.decode("latin-1"),
    }
    found["(file names)"] = "\n".join(
        str(f.relative_to(directory)) for f in sorted(directory.rglob("*"))
    )
    for file in sorted(directory.rglob("*")):
        if not file.is_file() or file.name.startswith("input"):
            continue
        if ".warc" in file.name:
            for name, text in warc_parts(file).items():
                found[f"{file.name}: {name}"] = found.get(f"{file.name}: {name}", "") + text
            continue
        raw = file.read_bytes()
        with contextlib.suppress(OSError):
            raw = gzip.decompress(raw)
        text = raw.decode("latin-1")
        name = str(file.relative_to(directory))
        if name.endswith(".jsonl"):
            # a record's fields one by one, so a leak names its field
            for line in text.splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    found[name] = found.get(name, "") + line + "\n"
                    continue
                if not isinstance(record, dict):
                    found[name] = found.get(name, "") + line + "\n"
                    continue
                for key, value in record.items():
                    field_name = f"{name}:{key}"
                    found[field_name] = found.get(field_name, "") + json.dumps(value) + "\n"
            continue
        found[name] = text
    return found


def leaks(outputs: dict[str, str], secret: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Where ``secret`` appears (in any form: as given, percent-encoded,
    base64 of user:secret is the caller's), with an excerpt."""
    forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    hits: dict[str, str] = {}
    for name, text in outputs.items():
        if any(s in name for s in skip):
            continue
        for form in forms:
            at = text.find(form)
            if at >= 0:
                hits[name] = text[max(0, at - 80) : at + len(form) + 40].replace("\n", "\\n")
                break
    return hits


def run(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    tty_stderr: bool = False,
    timeout: float = 90,
) -> tuple[int, bytes, bytes]:
    base = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    base.update(env or {})
    if not tty_stderr:
        done = subprocess.run(
            [*SURGE, *args],
            env=base,
            input=stdin,
            capture_output=True,
            timeout=timeout,
            cwd=cwd,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*SURGE, *args],
        env=base,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=cwd,
    )
    os.close(slave)
    err = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            err.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, _ = proc.communicate(stdin, timeout=timeout)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, out, bytes(err)


def assert_absent(outputs: dict[str, str], secret: str, skip: tuple[str, ...] = ()) -> None:
    hits = leaks(outputs, secret, skip)
    report = os.environ.get("SURGE_HOSTILE_REPORT")
    if report and hits:  # for the hostile round's write-up: where each leaked
        with open(report, "a") as f:
            f.write(
                json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "hits": hits}) + "\n"
            )
    assert not hits, f"secret {secret!r} written to: " + json.dumps(hits)


# --------------------------------------------------------------------------
# surge fetch: every output, one row per hostile input.

#: Each row: (id, a builder of (input lines, extra argv, env) from the canary and
#: the two servers, sinks to skip).
FetchRow = tuple[str, Any, tuple[str, ...]]


def _a(a: Server, path: str = "/ok") -> str:
    return a.base + path


FETCH_ROWS: list[FetchRow] = [
    # userinfo, in every shape
    ("userinfo-password", lambda c, a, b: ([_a(a).replace("//", f"//bob:{c}@")], [], {}), ()),
    ("userinfo-user-only-token", lambda c, a, b: ([_a(a).replace("//", f"//{c}@")], [], {}), ()),
    (
        "userinfo-token-as-user-empty-password",
        lambda c, a, b: ([_a(a).replace("//", f"//{c}:@")], [], {}),
        (),
    ),
    (
        "userinfo-percent-encoded-at-and-colon",
        lambda c, a, b: ([_a(a).replace("//", f"//bo%40b:{c}%3Ax%40y@")], [], {}),
        (),
    ),
    (
        "userinfo-percent-encoded-canary-chars",
        lambda c, a, b: (
            [_a(a).replace("//", "//bob:" + "".join(f"%{ord(ch):02X}" for ch in c) + "@")],
            [],
            {},
        ),
        (),
    ),
    (
        "userinfo-raw-at-inside-password",
        lambda c, a, b: ([_a(a).replace("//", f"//bob:p@{c}@")], [], {}),
        (),
    ),
    (
        "userinfo-colon-inside-password",
        lambda c, a, b: ([_a(a).replace("//", f"//bob:x:{c}:y@")], [], {}),
        (),
    ),
    (
        "userinfo-uppercase-scheme",
        lambda c, a, b: ([_a(a).replace("http://", f"HTTP://bob:{c}@")], [], {}),
        (),
    ),
    (
        "userinfo-with-template",
        lambda c, a, b: (
            [f"127.0.0.1:{a.port}"],
            ["--template", f"http://bob:{c}@{{}}/ok"],
            {},
        ),
        (),
    ),
    (
        "userinfo-csv-input",
        lambda c, a, b: (
            ["rank,url", "1," + _a(a).replace("//", f"//bob:{c}@")],
            [],
            {},
        ),
        (),
    ),
    (
        "userinfo-jsonl-input",
        lambda c, a, b: (
            [json.dumps({"url": _a(a).replace("//", f"//bob:{c}@")})],
            [],
            {},
        ),
        (),
    ),
    # query values the docs name, in shapes a parser may miss
    ("query-access_token", lambda c, a, b: ([_a(a, f"/ok?access_token={c}")], [], {}), ("warc",)),
    (
        "query-X-Amz-Signature",
        lambda c, a, b: ([_a(a, f"/ok?X-Amz-Signature={c}")], [], {}),
        ("warc",),
    ),
    (
        "query-X-Amz-Security-Token-mixed-case",
        lambda c, a, b: ([_a(a, f"/ok?x-AMZ-security-TOKEN={c}&x=1")], [], {}),
        ("warc",),
    ),
    ("query-api-key-dash", lambda c, a, b: ([_a(a, f"/ok?api-key={c}")], [], {}), ("warc",)),
    ("query-client_secret", lambda c, a, b: ([_a(a, f"/ok?client_secret={c}")], [], {}), ("warc",)),
    ("query-Password", lambda c, a, b: ([_a(a, f"/ok?Password={c}")], [], {}), ("warc",)),
    ("query-sig", lambda c, a, b: ([_a(a, f"/ok?a=1&sig={c}")], [], {}), ("warc",)),
    ("query-code-oauth", lambda c, a, b: ([_a(a, f"/cb?code={c}&state=s")], [], {}), ("warc",)),
    (
        "query-repeated-second-value",
        lambda c, a, b: ([_a(a, f"/ok?token=first&token={c}")], [], {}),
        ("warc",),
    ),
    (
        "query-percent-encoded-name",
        lambda c, a, b: ([_a(a, f"/ok?access%5Ftoken={c}")], [], {}),
        ("warc",),
    ),
    (
        "query-plus-encoded-name",
        lambda c, a, b: ([_a(a, f"/ok?api+key={c}")], [], {}),
        ("warc",),
    ),
    (
        "query-semicolon-separated",
        lambda c, a, b: ([_a(a, f"/ok?a=1;token={c}")], [], {}),
        ("warc",),
    ),
    (
        "query-value-with-equals",
        lambda c, a, b: ([_a(a, f"/ok?token=abc={c}")], [], {}),
        ("warc",),
    ),
    (
        "query-after-fragment-like-hash-encoded",
        lambda c, a, b: ([_a(a, f"/ok?x=%23&token={c}")], [], {}),
        ("warc",),
    ),
    (
        "fragment-access_token",
        lambda c, a, b: ([_a(a, f"/ok#access_token={c}&token_type=bearer")], [], {}),
        (),
    ),
    (
        "query-secret-in-jsonl",
        lambda c, a, b: ([json.dumps({"url": _a(a, f"/ok?token={c}")})], [], {}),
        ("warc",),
    ),
    # headers and cookies the user gives
    (
        "header-authorization-bearer",
        lambda c, a, b: ([_a(a)], ["-H", f"Authorization: Bearer {c}"], {}),
        (),
    ),
    (
        "header-authorization-lowercase-name",
        lambda c, a, b: ([_a(a)], ["-H", f"authorization: Bearer {c}"], {}),
        (),
    ),
    ("header-cookie", lambda c, a, b: ([_a(a)], ["-H", f"Cookie: a=1; sid={c}"], {}), ()),
    (
        "header-proxy-authorization",
        lambda c, a, b: ([_a(a)], ["-H", f"Proxy-Authorization: Basic {c}"], {}),
        (),
    ),
    ("user-flag", lambda c, a, b: ([_a(a)], ["-u", f"bob:{c}"], {}), ()),
    ("user-flag-token-only", lambda c, a, b: ([_a(a)], ["-u", f"{c}:"], {}), ()),
    (
        "jsonl-headers-authorization",
        lambda c, a, b: (
            [json.dumps({"url": _a(a), "headers": {"Authorization": f"Bearer {c}"}})],
            [],
            {},
        ),
        (),
    ),
    (
        "jsonl-headers-pairs-cookie",
        lambda c, a, b: (
            [json.dumps({"url": _a(a), "headers": [["Cookie", f"sid={c}"]]})],
            [],
            {},
        ),
        (),
    ),
    (
        "jsonl-headers-x-api-key",
        lambda c, a, b: (
            [json.dumps({"url": _a(a), "headers": {"X-Api-Key": c}})],
            [],
            {},
        ),
        (),
    ),
    # what the server sends
    ("server-set-cookie", lambda c, a, b: ([a.route("setcookie", c)], [], {}), ()),
    (
        "server-set-cookie-with-include-headers",
        lambda c, a, b: ([a.route("setcookie", c)], ["-i"], {}),
        (),
    ),
    (
        "redirect-location-with-userinfo",
        lambda c, a, b: (
            [a.route("redirect", b.base.replace("//", f"//eve:{c}@") + "/ok")],
            ["-L"],
            {},
        ),
        (),
    ),
    (
        "redirect-location-with-userinfo-not-followed",
        lambda c, a, b: (
            [a.route("redirect", b.base.replace("//", f"//eve:{c}@") + "/ok")],
            [],
            {},
        ),
        (),
    ),
    (
        "redirect-location-with-secret-query",
        lambda c, a, b: (
            [a.route("redirect", f"/ok?access_token={c}")],
            ["-L"],
            {},
        ),
        ("warc",),
    ),
    (
        "redirect-location-with-userinfo-include-headers",
        lambda c, a, b: (
            [a.route("redirect", b.base.replace("//", f"//eve:{c}@") + "/ok")],
            ["-i"],
            {},
        ),
        (),
    ),
    # proxies
    (
        "proxy-flag-credentials",
        lambda c, a, b: (
            ["http://example.test/ok"],
            ["-x", b.base.replace("//", f"//pu:{c}@")],
            {},
        ),
        (),
    ),
    (
        "proxy-flag-credentials-no-scheme",
        lambda c, a, b: (
            ["http://example.test/ok"],
            ["-x", f"pu:{c}@127.0.0.1:{b.port}"],
            {},
        ),
        (),
    ),
    (
        "proxy-env-http_proxy",
        lambda c, a, b: (
            ["http://example.test/ok"],
            [],
            {"http_proxy": b.base.replace("//", f"//pu:{c}@")},
        ),
        (),
    ),
    (
        "proxy-env-HTTP_PROXY-uppercase",
        lambda c, a, b: (
            ["http://example.test/ok"],
            [],
            {"HTTP_PROXY": b.base.replace("//", f"//pu:{c}@")},
        ),
        (),
    ),
    (
        "proxy-env-all_proxy",
        lambda c, a, b: (
            ["http://example.test/ok"],
            [],
            {"all_proxy": b.base.replace("//", f"//pu:{c}@")},
        ),
        (),
    ),
    (
        "proxy-refused-with-credentials",
        lambda c, a, b: (["http://example.test/ok"], ["-x", f"http://pu:{c}@127.0.0.1:1"], {}),
        (),
    ),
    (
        "proxy-socks5-refused-with-credentials",
        lambda c, a, b: (["http://example.test/ok"], ["-x", f"socks5h://pu:{c}@127.0.0.1:1"], {}),
        (),
    ),
    # failures: the error detail of a URL carrying secrets
    (
        "error-connect-refused-userinfo",
        lambda c, a, b: ([f"http://bob:{c}@127.0.0.1:1/"], [], {}),
        (),
    ),
    (
        "error-connect-refused-query",
        lambda c, a, b: ([f"http://127.0.0.1:1/?token={c}"], [], {}),
        (),
    ),
    (
        "error-invalid-url-space-userinfo",
        lambda c, a, b: ([f"http://bob:{c}@exa mple.test/"], [], {}),
        (),
    ),
    (
        "error-invalid-url-bad-port-userinfo",
        lambda c, a, b: ([f"http://bob:{c}@127.0.0.1:99999/"], [], {}),
        (),
    ),
    (
        "error-invalid-url-empty-host-userinfo",
        lambda c, a, b: ([f"http://bob:{c}@/"], [], {}),
        (),
    ),
    (
        "error-invalid-url-ftp-scheme-userinfo",
        lambda c, a, b: ([f"ftp://bob:{c}@127.0.0.1/"], [], {}),
        (),
    ),
    (
        "error-invalid-url-bad-ipv6-userinfo",
        lambda c, a, b: ([f"http://bob:{c}@[::1/"], [], {}),
        (),
    ),
    (
        "error-invalid-url-query-secret",
        lambda c, a, b: ([f"http://exa mple.test/?access_token={c}"], [], {}),
        (),
    ),
    (
        "error-dns-userinfo",
        lambda c, a, b: (
            [f"http://bob:{c}@nxdomain-{uuid.uuid4().hex[:6]}.invalid/"],
            ["--dns-servers", "127.0.0.1:1", "--dns-timeout", "0.5"],
            {},
        ),
        (),
    ),
    (
        "error-too-long-line-userinfo",
        lambda c, a, b: (
            [f"http://bob:{c}@127.0.0.1:{a.port}/" + "x" * 300],
            ["--max-input-line", "200"],
            {},
        ),
        (),
    ),
    (
        "error-jsonl-broken-line-with-secret",
        lambda c, a, b: (
            [
                json.dumps({"url": _a(a)}),
                '{"url": "' + _a(a) + '", "headers": {"Authorization": "Bearer ' + c + '"',
            ],
            ["--input-format", "jsonl"],
            {},
        ),
        (),
    ),
    (
        "error-jsonl-bad-headers-type-with-secret",
        lambda c, a, b: (
            [json.dumps({"url": _a(a), "headers": f"Authorization: Bearer {c}"})],
            ["--input-format", "jsonl"],
            {},
        ),
        (),
    ),
    (
        "usage-error-header-control-char",
        lambda c, a, b: ([_a(a)], ["-H", f"Authorization: Bearer {c}\x01"], {}),
        (),
    ),
    (
        "usage-error-header-not-latin1",
        lambda c, a, b: ([_a(a)], ["-H", f"Authorization: Bearer {c}\u2603"], {}),
        (),
    ),
    (
        "usage-error-bad-proxy-scheme",
        lambda c, a, b: ([_a(a)], ["-x", f"gopher://pu:{c}@127.0.0.1:1"], {}),
        (),
    ),
    (
        "usage-error-bad-proxy-port",
        lambda c, a, b: ([_a(a)], ["-x", f"http://pu:{c}@127.0.0.1:notaport"], {}),
        (),
    ),
    (
        "usage-error-bad-env-proxy",
        lambda c, a, b: ([_a(a)], [], {"http_proxy": f"gopher://pu:{c}@127.0.0.1:1"}),
        (),
    ),
    (
        "usage-error-data-file-missing-beside-user",
        lambda c, a, b: ([_a(a)], ["-u", f"bob:{c}", "-d", "@/nonexistent/x"], {}),
        (),
    ),
    (
        "usage-error-user-and-bad-header",
        lambda c, a, b: ([_a(a)], ["-u", f"bob:{c}", "-H", "Bad Name: x"], {}),
        (),
    ),
    # --output-dir's paths, --har-with-secrets (which still never keeps userinfo
    # nor the proxy's credentials)
    (
        "output-dir-userinfo",
        lambda c, a, b: (
            [_a(a).replace("//", f"//bob:{c}@")],
            ["--output-dir", "{out}/bodies"],
            {},
        ),
        (),
    ),
    (
        "har-with-secrets-userinfo",
        lambda c, a, b: ([_a(a).replace("//", f"//bob:{c}@")], ["--har-with-secrets"], {}),
        (),
    ),
    (
        "har-with-secrets-redirect-location-userinfo",
        lambda c, a, b: (
            [a.route("redirect", b.base.replace("//", f"//eve:{c}@") + "/ok")],
            ["--har-with-secrets", "-L"],
            {},
        ),
        (),
    ),
    (
        "har-with-secrets-proxy-credentials",
        lambda c, a, b: (
            ["http://example.test/ok"],
            ["--har-with-secrets", "-x", b.base.replace("//", f"//pu:{c}@")],
            {},
        ),
        (),
    ),
    (
        "har-with-secrets-env-proxy-credentials",
        lambda c, a, b: (
            ["http://example.test/ok"],
            ["--har-with-secrets", "-i"],
            {"http_proxy": b.base.replace("//", f"//pu:{c}@")},
        ),
        (),
    ),
    (
        "include-headers-har-redirect-location-userinfo-followed",
        lambda c, a, b: (
            [a.route("redirect", b.base.replace("//", f"//eve:{c}@") + "/ok")],
            ["-i", "-L"],
            {},
        ),
        (),
    ),
    (
        "retries-userinfo-refused",
        lambda c, a, b: ([f"http://bob:{c}@127.0.0.1:1/"], ["--retries", "2"], {}),
        (),
    ),
    (
        "include-headers-redirect-location-secret-query-not-followed",
        lambda c, a, b: ([a.route("redirect", f"/ok?access_token={c}")], ["-i"], {}),
        ("warc",),
    ),
    (
        "error-csv-broken-quote-with-userinfo",
        lambda c, a, b: (
            ["rank,url", "1," + _a(a), '2,"' + _a(a).replace("//", f"//bob:{c}@") + ",x"],
            ["--input-format", "csv"],
            {},
        ),
        (),
    ),
    (
        "cluster-local-header-and-userinfo",
        lambda c, a, b: (
            [_a(a).replace("//", f"//bob:{c}@").replace("bob:", "b:"), "http://127.0.0.1:1/"],
            ["--cluster", "local:1", "-H", f"Authorization: Bearer {c}"],
            {},
        ),
        ("records.jsonl:url", "records.jsonl:input"),
    ),
]


FETCH_ROWS += [
    (
        "redirect-scheme-relative-location-with-userinfo",
        lambda c, a, b: ([a.route("redirect", f"//eve:{c}@127.0.0.1:{b.port}/ok")], ["-L"], {}),
        (),
    ),
    (
        "redirect-scheme-relative-location-with-userinfo-har-with-secrets",
        lambda c, a, b: (
            [a.route("redirect", f"//eve:{c}@127.0.0.1:{b.port}/ok")],
            ["-L", "--har-with-secrets", "-i"],
            {},
        ),
        ("records.jsonl:headers",),
    ),
]


def _fetch_case(
    tmp_path: Path,
    a: Server,
    b: Server,
    builder: Any,
    tag: str,
    *,
    extra: list[str] | None = None,
    tty: bool = False,
) -> tuple[str, dict[str, str]]:
    secret = canary(tag)
    lines, argv, env = builder(secret, a, b)
    out = tmp_path / "out"
    out.mkdir()
    ext = ".csv" if any(line.startswith("rank,") for line in lines) else ".txt"
    if lines and lines[0].startswith("{"):
        ext = ".jsonl"
    source = out / f"input{ext}"
    source.write_text("\n".join(lines) + "\n")
    # -o inside out/, so read_outputs sees it.
    args = [
        "fetch",
        str(source),
        "-o",
        str(out / "records.jsonl"),
        "--har",
        str(out / "run.har"),
        "--trace",
        str(out / "run.html"),
        "--warc",
        str(out / "run.warc.gz"),
        "--max-time",
        "5",
        "--connect-timeout",
        "3",
        *(arg.replace("{out}", str(out)) for arg in argv),
        *(extra or []),
    ]
    if "--cluster" in argv:  # --trace and --har are not available with --cluster
        for flag in ("--har", "--trace", "--warc"):
            at = args.index(flag)
            del args[at : at + 2]
    code, stdout, stderr = run(args, env=env, tty_stderr=tty, cwd=out)
    outputs = read_outputs(out, stdout, stderr)
    outputs["(exit status)"] = str(code)
    return secret, outputs


@pytest.mark.parametrize(
    ("builder", "skip"), [r[1:] for r in FETCH_ROWS], ids=[r[0] for r in FETCH_ROWS]
)
def test_fetch_outputs_hold_no_secret(
    tmp_path: Path, origin_a: Server, origin_b: Server, builder: Any, skip: tuple[str, ...]
) -> None:
    secret, outputs = _fetch_case(tmp_path, origin_a, origin_b, builder, "f")
    assert_absent(outputs, secret, skip)


#: Rows again with stderr on a terminal (progress lines) and -i on.
TTY_ROWS = [
    r
    for r in FETCH_ROWS
    if r[0]
    in {
        "userinfo-password",
        "proxy-flag-credentials",
        "proxy-refused-with-credentials",
        "error-connect-refused-userinfo",
        "error-dns-userinfo",
        "query-access_token",
    }
]


@pytest.mark.parametrize(
    ("builder", "skip"), [r[1:] for r in TTY_ROWS], ids=[r[0] for r in TTY_ROWS]
)
def test_fetch_progress_on_a_terminal_holds_no_secret(
    tmp_path: Path, origin_a: Server, origin_b: Server, builder: Any, skip: tuple[str, ...]
) -> None:
    secret, outputs = _fetch_case(tmp_path, origin_a, origin_b, builder, "t", tty=True)
    assert_absent(outputs, secret, skip)


def test_fetch_ipv6_userinfo_holds_no_secret(tmp_path: Path, origin_b: Server) -> None:
    with serving("::1") as a6:
        secret, outputs = _fetch_case(
            tmp_path,
            a6,
            origin_b,
            lambda c, a, b: ([a.base.replace("//", f"//bob:{c}@") + "/ok"], [], {}),
            "6",
        )
        assert a6.seen, "the request did not reach the IPv6 server"
    assert_absent(outputs, secret)


# --------------------------------------------------------------------------
# Credentials across origins: a redirect to another port (another origin) must
# not carry them, unless --location-trusted.

CROSS_ROWS: list[tuple[str, Any]] = [
    ("header-authorization", lambda c, a: ([], ["-H", f"Authorization: Bearer {c}"])),
    ("header-authorization-lowercase", lambda c, a: ([], ["-H", f"authorization: Bearer {c}"])),
    ("header-cookie", lambda c, a: ([], ["-H", f"Cookie: sid={c}"])),
    ("header-proxy-authorization", lambda c, a: ([], ["-H", f"Proxy-Authorization: Basic {c}"])),
    ("user-flag", lambda c, a: ([], ["-u", f"bob:{c}"])),
    ("url-userinfo", lambda c, a: (["userinfo"], [])),
    ("jsonl-headers-authorization", lambda c, a: (["jsonl-auth"], [])),
    ("jsonl-headers-cookie-pairs", lambda c, a: (["jsonl-cookie"], [])),
    (
        "header-authorization-307-post",
        lambda c, a: (["307"], ["-H", f"Authorization: Bearer {c}", "-d", "x=1"]),
    ),
    (
        "header-authorization-scheme-relative-location",
        lambda c, a: (["schemerel"], ["-H", f"Authorization: Bearer {c}"]),
    ),
    ("user-flag-scheme-relative-location", lambda c, a: (["schemerel"], ["-u", f"bob:{c}"])),
    ("header-authorization-308", lambda c, a: (["308"], ["-H", f"Authorization: Bearer {c}"])),
    (
        "header-authorization-two-hops-back",
        lambda c, a: (["back"], ["-H", f"Authorization: Bearer {c}"]),
    ),
    (
        "user-flag-via-redirect-with-userinfo-target",
        lambda c, a: (["target-userinfo"], ["-u", f"bob:{c}"]),
    ),
]


@pytest.mark.parametrize("builder", [r[1] for r in CROSS_ROWS], ids=[r[0] for r in CROSS_ROWS])
def test_credentials_do_not_cross_an_origin(
    tmp_path: Path, origin_a: Server, origin_b: Server, builder: Any
) -> None:
    import base64

    secret = canary("x")
    flags, argv = builder(secret, origin_a)
    code = "302"
    if "307" in flags:
        code = "307"
    if "308" in flags:
        code = "308"
    target = origin_b.base + "/landed"
    if "back" in flags:
        # A -> B -> A: B must not get it (coming back to A may, as curl does).
        target = origin_b.route("redirect", origin_a.base + "/home")
    if "schemerel" in flags:
        target = f"//127.0.0.1:{origin_b.port}/landed"
    if "target-userinfo" in flags:
        target = origin_b.base.replace("//", "//other:pw@") + "/landed"
    url = origin_a.route("redirect" + code, target)
    if "userinfo" in flags:
        url = url.replace("//", f"//bob:{secret}@", 1)
    lines = [url]
    if "jsonl-auth" in flags:
        lines = [json.dumps({"url": url, "headers": {"Authorization": f"Bearer {secret}"}})]
    if "jsonl-cookie" in flags:
        lines = [json.dumps({"url": url, "headers": [["Cookie", f"sid={secret}"]]})]
    source = tmp_path / ("input.jsonl" if lines[0].startswith("{") else "input.txt")
    source.write_text("\n".join(lines) + "\n")
    rc, _stdout, stderr = run(
        ["fetch", str(source), "-L", "--max-time", "5", "-o", str(tmp_path / "r.jsonl"), *argv]
    )
    sent_a = origin_a.received()
    sent_b = origin_b.received()
    b64 = [base64.b64encode(f"bob:{secret}".encode()).decode()]
    assert origin_b.seen, f"the redirect was not followed: rc={rc} {stderr[-400:]!r}"
    assert any(s in sent_a for s in [secret, *b64]), "the credential did not even reach its origin"
    for form in [secret, *b64]:
        assert form not in sent_b, f"credential crossed to the other origin:\n{sent_b[:1500]}"


# --------------------------------------------------------------------------
# surge trace: stdout (the response head, the URL line), --json, errors.

TRACE_ROWS: list[tuple[str, Any]] = [
    ("url-userinfo", lambda c, a, b: ([a.base.replace("//", f"//bob:{c}@") + "/ok"], [])),
    (
        "url-userinfo-json",
        lambda c, a, b: ([a.base.replace("//", f"//bob:{c}@") + "/ok"], ["--json"]),
    ),
    ("url-query-token", lambda c, a, b: ([a.base + f"/ok?access_token={c}"], [])),
    ("url-query-token-json", lambda c, a, b: ([a.base + f"/ok?access_token={c}"], ["--json"])),
    ("url-fragment-token", lambda c, a, b: ([a.base + f"/ok#access_token={c}"], ["--json"])),
    (
        "header-authorization",
        lambda c, a, b: ([a.base + "/ok"], ["-H", f"Authorization: Bearer {c}"]),
    ),
    (
        "header-authorization-json",
        lambda c, a, b: ([a.base + "/ok"], ["--json", "-H", f"Authorization: Bearer {c}"]),
    ),
    ("server-set-cookie", lambda c, a, b: ([a.route("setcookie", c)], [])),
    ("server-set-cookie-json", lambda c, a, b: ([a.route("setcookie", c)], ["--json"])),
    (
        "redirect-location-userinfo",
        lambda c, a, b: (
            [a.route("redirect", b.base.replace("//", f"//eve:{c}@") + "/ok")],
            [],
        ),
    ),
    (
        "redirect-location-userinfo-followed-json",
        lambda c, a, b: (
            [a.route("redirect", b.base.replace("//", f"//eve:{c}@") + "/ok")],
            ["-L", "--json"],
        ),
    ),
    (
        "redirect-location-token-followed",
        lambda c, a, b: ([a.route("redirect", f"/ok?token={c}")], ["-L"]),
    ),
    ("refused-userinfo", lambda c, a, b: ([f"http://bob:{c}@127.0.0.1:1/"], [])),
    ("refused-userinfo-json", lambda c, a, b: ([f"http://bob:{c}@127.0.0.1:1/"], ["--json"])),
    ("invalid-url-userinfo", lambda c, a, b: ([f"http://bob:{c}@exa mple.test/"], [])),
    ("invalid-port-userinfo", lambda c, a, b: ([f"http://bob:{c}@127.0.0.1:99999/"], [])),
    (
        "usage-error-header-control-char",
        lambda c, a, b: ([a.base + "/ok"], ["-H", f"Authorization: {c}\x01"]),
    ),
    ("usage-error-not-http-userinfo", lambda c, a, b: ([f"ftp://bob:{c}@127.0.0.1/"], [])),
    ("server-www-authenticate-not-a-secret-control", lambda c, a, b: ([a.base + "/ok"], ["-u"])),
]
# The last row is a usage error: -u is not one of surge trace's flags; its
# value (none here) must not be echoed - a control that the table runs.
TRACE_ROWS[-1] = (
    "unknown-flag-user-echoed",
    lambda c, a, b: ([a.base + "/ok"], ["--user", f"bob:{c}"]),
)


@pytest.mark.parametrize("builder", [r[1] for r in TRACE_ROWS], ids=[r[0] for r in TRACE_ROWS])
def test_trace_output_holds_no_secret(
    tmp_path: Path, origin_a: Server, origin_b: Server, builder: Any
) -> None:
    secret = canary("r")
    urls, argv = builder(secret, origin_a, origin_b)
    _code, stdout, stderr = run(["trace", "--max-time", "5", *argv, *urls])
    outputs = read_outputs(tmp_path, stdout, stderr)
    assert_absent(outputs, secret)


# --------------------------------------------------------------------------
# surge doctor, with secrets in the environment.

DOCTOR_ENV = [
    ("aws-secret", lambda c: {"AWS_SECRET_ACCESS_KEY": c, "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE"}),
    ("aws-session-token", lambda c: {"AWS_SESSION_TOKEN": c}),
    ("pgpassword", lambda c: {"PGPASSWORD": c}),
    ("database-url", lambda c: {"DATABASE_URL": f"postgresql://u:{c}@127.0.0.1:1/db"}),
    ("http-proxy-creds", lambda c: {"HTTP_PROXY": f"http://u:{c}@127.0.0.1:1"}),
    ("https-proxy-creds", lambda c: {"https_proxy": f"http://u:{c}@127.0.0.1:1"}),
    ("all-proxy-creds", lambda c: {"ALL_PROXY": f"socks5://u:{c}@127.0.0.1:1"}),
    ("pip-index-url-creds", lambda c: {"PIP_INDEX_URL": f"https://u:{c}@pypi.example/simple"}),
    ("requests-ca-bundle-path", lambda c: {"REQUESTS_CA_BUNDLE": f"/nonexistent/{c}.pem"}),
    ("ssl-cert-file-path", lambda c: {"SSL_CERT_FILE": f"/nonexistent/{c}.pem"}),
    ("pythonpath-entry", lambda c: {"PYTHONPATH": os.environ.get("PYTHONPATH", "") + f":/tmp/{c}"}),
]


@pytest.mark.parametrize("json_flag", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("make_env", [r[1] for r in DOCTOR_ENV], ids=[r[0] for r in DOCTOR_ENV])
def test_doctor_output_holds_no_secret(tmp_path: Path, make_env: Any, json_flag: bool) -> None:
    secret = canary("d")
    env = make_env(secret)
    if "PYTHONPATH" not in env:
        env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    flags = ["--json"] if json_flag else []
    _code, stdout, stderr = run(["doctor", *flags], env=env, timeout=180)
    outputs = read_outputs(tmp_path, stdout, stderr)
    assert_absent(outputs, secret)


# --------------------------------------------------------------------------
# surge watch: a watched program full of secrets; every output it writes.


@dataclass
class Collector:
    """A fake OTLP/HTTP collector: keeps the raw bodies it is sent."""

    server: Server

    def bodies(self) -> str:
        out = []
        for seen in self.server.seen:
            raw = seen.body
            with contextlib.suppress(OSError):
                raw = gzip.decompress(raw)
            out.append(raw.decode("latin-1"))
        return "\n".join(out)


WATCH_PROGRAM_HTTP = """
import sys, urllib.request, urllib.error
base = sys.argv[1]
secret = sys.argv[2]
def get(url, headers=None):
    try:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5).read()
    except Exception:
        pass
mode = sys.argv[3]
if mode == 'query':
    get(base + '/ok?access_token=' + secret + '&X-Amz-Signature=' + secret)
elif mode == 'fragment':
    get(base + '/ok#access_token=' + secret)
elif mode == 'auth':
    get(base + '/ok', {'Authorization': 'Bearer ' + secret, 'Cookie': 'sid=' + secret})
elif mode == 'route':  # base is a URL that answers with the secret
    get(base)
elif mode == 'aiohttp-userinfo':
    import asyncio, aiohttp
    async def main():
        async with aiohttp.ClientSession() as session:
            try:
                async with session.get(base.replace('//', '//bob:' + secret + '@') + '/ok?api_key=' + secret,
                                       headers={'Authorization': 'Bearer ' + secret}) as r:
                    await r.read()
            except Exception:
                pass
            try:
                async with session.get('http://bob:' + secret + '@127.0.0.1:1/') as r:
                    await r.read()
            except Exception:
                pass
    asyncio.run(main())
elif mode == 'requests-route':
    import requests
    try:
        requests.get(base, timeout=5)
    except Exception:
        pass
elif mode == 'refused-query':
    get('http://127.0.0.1:1/?token=' + secret)
elif mode == 'exception':
    try:
        raise RuntimeError('boom ' + secret)
    except RuntimeError:
        get(base + '/ok')
    raise SystemExit(0)
elif mode == 'requests-userinfo':
    import requests
    try:
        requests.get(base.replace('//', '//bob:' + secret + '@') + '/ok?sig=' + secret, timeout=5)
    except Exception:
        pass
elif mode == 'requests-auth':
    import requests
    requests.get(base + '/ok', auth=('bob', secret), cookies={'sid': secret}, timeout=5)
elif mode == 'requests-refused-userinfo':
    import requests
    try:
        requests.get('http://bob:' + secret + '@127.0.0.1:1/', timeout=5)
    except Exception:
        pass
elif mode == 'httpx-userinfo':
    import httpx
    try:
        httpx.get(base.replace('//', '//bob:' + secret + '@') + '/ok', timeout=5)
    except Exception:
        pass
elif mode == 'urllib3-proxy-creds':
    import urllib3
    proxy = urllib3.ProxyManager(base.replace('//', '//pu:' + secret + '@'))
    try:
        proxy.request('GET', 'http://example.test/ok', timeout=5)
    except Exception:
        pass
elif mode == 'requests-env-proxy':
    import requests
    try:
        requests.get('http://example.test/ok', timeout=5)
    except Exception:
        pass
elif mode == 'nothing':
    get(base + '/ok')
"""

WATCH_ROWS: list[tuple[str, Any]] = [
    # (cmd builder from (python, prog, base, secret) -> argv, env)
    ("argv-secret", lambda py, p, srv, c: ([py, p, srv.base, c, "nothing"], {})),
    (
        "argv-secret-sh-c",
        lambda py, p, srv, c: (["sh", "-c", f"{py} {p} {srv.base} {c} nothing"], {}),
    ),
    (
        "argv-secret-env-prefix",
        lambda py, p, srv, c: (["env", f"PGPASSWORD={c}", py, p, srv.base, "x", "nothing"], {}),
    ),
    (
        "env-aws-secret",
        lambda py, p, srv, c: ([py, p, srv.base, "x", "nothing"], {"AWS_SECRET_ACCESS_KEY": c}),
    ),
    (
        "env-pgpassword",
        lambda py, p, srv, c: ([py, p, srv.base, "x", "nothing"], {"PGPASSWORD": c}),
    ),
    (
        "env-proxy-creds",
        lambda py, p, srv, c: (
            [py, p, srv.base, "x", "requests-env-proxy"],
            {
                "HTTP_PROXY": srv.base.replace("//", f"//pu:{c}@"),
                "http_proxy": srv.base.replace("//", f"//pu:{c}@"),
            },
        ),
    ),
    ("http-query-secret", lambda py, p, srv, c: ([py, p, srv.base, c, "query"], {})),
    ("http-fragment-secret", lambda py, p, srv, c: ([py, p, srv.base, c, "fragment"], {})),
    ("http-auth-and-cookie-headers", lambda py, p, srv, c: ([py, p, srv.base, c, "auth"], {})),
    (
        "http-set-cookie",
        lambda py, p, srv, c: ([py, p, srv.route("setcookie", c), "x", "route"], {}),
    ),
    (
        "http-redirect-location-userinfo",
        lambda py, p, srv, c: (
            [
                py,
                p,
                srv.route("redirect", srv.base.replace("//", f"//eve:{c}@") + "/ok"),
                "x",
                "route",
            ],
            {},
        ),
    ),
    (
        "http-redirect-location-query",
        lambda py, p, srv, c: ([py, p, srv.route("redirect", f"/ok?token={c}"), "x", "route"], {}),
    ),
    ("http-refused-query", lambda py, p, srv, c: ([py, p, srv.base, c, "refused-query"], {})),
    ("exception-message", lambda py, p, srv, c: ([py, p, srv.base, c, "exception"], {})),
    ("requests-userinfo", lambda py, p, srv, c: ([py, p, srv.base, c, "requests-userinfo"], {})),
    ("requests-auth-cookies", lambda py, p, srv, c: ([py, p, srv.base, c, "requests-auth"], {})),
    (
        "requests-refused-userinfo",
        lambda py, p, srv, c: ([py, p, srv.base, c, "requests-refused-userinfo"], {}),
    ),
    ("httpx-userinfo", lambda py, p, srv, c: ([py, p, srv.base, c, "httpx-userinfo"], {})),
    (
        "urllib3-proxy-creds",
        lambda py, p, srv, c: ([py, p, srv.base, c, "urllib3-proxy-creds"], {}),
    ),
    (
        "requests-redirect-location-userinfo",
        lambda py, p, srv, c: (
            [
                py,
                p,
                srv.route("redirect", srv.base.replace("//", f"//eve:{c}@") + "/ok"),
                "x",
                "requests-route",
            ],
            {},
        ),
    ),
    (
        "requests-redirect-location-query",
        lambda py, p, srv, c: (
            [py, p, srv.route("redirect", f"/ok?X-Amz-Signature={c}"), "x", "requests-route"],
            {},
        ),
    ),
    (
        "aiohttp-userinfo-and-auth",
        lambda py, p, srv, c: ([py, p, srv.base, c, "aiohttp-userinfo"], {}),
    ),
    ("python-m-surge-watch-argv", None),
]


def _watch(
    tmp_path: Path, argv: list[str], env: dict[str, str], *, module: bool = False
) -> dict[str, str]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    with serving() as collector_server:
        collector = Collector(collector_server)
        otlp = ["--otlp", collector_server.base]
        if module:
            cmd = [sys.executable, "-m", "surge.watch", *argv]
            base_env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
            base_env.update(env)
            done = subprocess.run(
                cmd, env=base_env, capture_output=True, timeout=120, check=False, cwd=out
            )
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        else:
            code, stdout, stderr = run(
                [
                    "watch",
                    "--report",
                    str(out / "watch.json"),
                    "--html",
                    str(out / "watch.html"),
                    "--trace-json",
                    str(out / "trace.json"),
                    "--log",
                    str(out / "watch.log"),
                    *otlp,
                    "--",
                    *argv,
                ],
                env=env,
                cwd=out,
                timeout=120,
            )
        outputs = read_outputs(out, stdout, stderr)
        outputs["otlp bodies"] = collector.bodies()
    outputs["(exit status)"] = str(code)
    return outputs


@pytest.mark.parametrize("builder", [r[1] for r in WATCH_ROWS], ids=[r[0] for r in WATCH_ROWS])
def test_watch_outputs_hold_no_secret(tmp_path: Path, origin_a: Server, builder: Any) -> None:
    secret = canary("w")
    prog = tmp_path / "prog.py"
    prog.write_text(WATCH_PROGRAM_HTTP)
    if builder is None:
        outputs = _watch(tmp_path, [str(prog), origin_a.base, secret, "nothing"], {}, module=True)
    else:
        argv, env = builder(sys.executable, str(prog), origin_a, secret)
        outputs = _watch(tmp_path, argv, env)
    assert_absent(outputs, secret)


DB_PROGRAM = """
import sys
kind, host, port, user, password, db, secret, mode = sys.argv[1:9]
if kind == 'mysql':
    import pymysql
    try:
        if mode == 'wrong-password':
            pymysql.connect(host=host, port=int(port), user=user, password=secret, database=db)
        elif mode == 'dsn-values':
            conn = pymysql.connect(host=host, port=int(port), user=user, password=password, database=db)
            cur = conn.cursor()
            cur.execute("SELECT %s", (secret,))
            cur.execute("SELECT '" + secret + "' AS password")
            cur.execute("CREATE TEMPORARY TABLE t_s (v TEXT)")
            cur.execute("INSERT INTO t_s VALUES ('" + secret + "')")
            try:
                cur.execute("SELECT * FROM no_such_table WHERE v = '" + secret + "'")
            except Exception:
                pass
            conn.close()
        elif mode == 'sqlalchemy-url-wrong-password':
            import sqlalchemy
            engine = sqlalchemy.create_engine(f"mysql+pymysql://{user}:{secret}@{host}:{port}/{db}")
            with engine.connect() as c:
                c.execute(sqlalchemy.text("SELECT 1"))
        elif mode == 'sqlalchemy-url-bind-values':
            import sqlalchemy
            engine = sqlalchemy.create_engine(f"mysql+pymysql://{user}:{password}@{host}:{port}/{db}")
            with engine.connect() as c:
                c.execute(sqlalchemy.text("SELECT :v"), {"v": secret})
                c.execute(sqlalchemy.text("SELECT * FROM nope WHERE a = :v"), {"v": secret})
        elif mode == 'bad-db-name':
            pymysql.connect(host=host, port=int(port), user=user, password=password, database=secret)
    except Exception:
        pass
else:
    import psycopg
    try:
        if mode == 'wrong-password':
            psycopg.connect(f"host={host} port={port} user={user} password={secret} dbname={db}").close()
        elif mode == 'dsn-values':
            conn = psycopg.connect(f"postgresql://{user}:{password}@{host}:{port}/{db}?application_name={secret}")
            cur = conn.cursor()
            cur.execute("SELECT %s", (secret,))
            cur.execute("SELECT '" + secret + "' AS password")
            try:
                cur.execute("SELECT * FROM no_such_table WHERE v = '" + secret + "'")
            except Exception:
                pass
            conn.close()
        elif mode == 'url-wrong-password':
            psycopg.connect(f"postgresql://{user}:{secret}@{host}:{port}/{db}").close()
        elif mode == 'bad-db-name':
            psycopg.connect(host=host, port=port, user=user, password=password, dbname=secret).close()
    except Exception:
        pass
"""

DB_ROWS = [
    ("mysql", "wrong-password"),
    ("mysql", "dsn-values"),
    ("mysql", "bad-db-name"),
    ("mysql", "sqlalchemy-url-wrong-password"),
    ("mysql", "sqlalchemy-url-bind-values"),
    ("postgresql", "wrong-password"),
    ("postgresql", "url-wrong-password"),
    ("postgresql", "dsn-values"),
    ("postgresql", "bad-db-name"),
]


@pytest.mark.parametrize(("kind", "mode"), DB_ROWS, ids=[f"{k}-{m}" for k, m in DB_ROWS])
def test_watch_db_outputs_hold_no_secret(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str, mode: str
) -> None:
    server = request.getfixturevalue("mariadb_server" if kind == "mysql" else "postgresql_server")
    secret = canary("db").lower()
    prog = tmp_path / "db.py"
    prog.write_text(DB_PROGRAM)
    argv = [
        sys.executable,
        str(prog),
        kind,
        server.host,
        str(server.port),
        server.user,
        server.password,
        server.database,
        secret,
        mode,
    ]
    outputs = _watch(tmp_path, argv, {})
    assert_absent(outputs, secret)


def test_watch_db_server_password_not_recorded(tmp_path: Path, postgresql_server: Any) -> None:
    """The real password of a successful connect (in a URL DSN) is not recorded."""
    server = postgresql_server
    prog = tmp_path / "db.py"
    prog.write_text(DB_PROGRAM)
    argv = [
        sys.executable,
        str(prog),
        "postgresql",
        server.host,
        str(server.port),
        server.user,
        server.password,
        server.database,
        "harmless",
        "dsn-values",
    ]
    if len(server.password) < 6:
        pytest.skip("the fixture's password is too short to grep for")
    outputs = _watch(tmp_path, argv, {})
    assert_absent(outputs, server.password)


# --------------------------------------------------------------------------
# surge s3 against MinIO: credentials in the environment, errors, proxies.


S3_ROWS: list[tuple[str, Any]] = [
    (
        "ls-wrong-secret",
        lambda c, env, b: (["s3", "ls", "s3://nosuchbucket-x/"], {"AWS_SECRET_ACCESS_KEY": c}),
    ),
    ("ls-buckets-wrong-secret", lambda c, env, b: (["s3", "ls"], {"AWS_SECRET_ACCESS_KEY": c})),
    ("ls-session-token", lambda c, env, b: (["s3", "ls", f"s3://{b}/"], {"AWS_SESSION_TOKEN": c})),
    (
        "ls-session-token-debug",
        lambda c, env, b: (["s3", "ls", "--debug", f"s3://{b}/"], {"AWS_SESSION_TOKEN": c}),
    ),
    (
        "ls-ok-debug-secret-key",
        lambda c, env, b: (["s3", "ls", "--debug", f"s3://{b}/"], {}),
    ),
    (
        "ls-wrong-secret-debug",
        lambda c, env, b: (["s3", "ls", "--debug", f"s3://{b}/"], {"AWS_SECRET_ACCESS_KEY": c}),
    ),
    (
        "ls-wrong-access-key",
        lambda c, env, b: (["s3", "ls", f"s3://{b}/"], {"AWS_ACCESS_KEY_ID": c}),
    ),
    (
        "ls-endpoint-userinfo",
        lambda c, env, b: (
            ["s3", "ls", f"s3://{b}/"],
            {"AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"].replace("//", f"//u:{c}@")},
        ),
    ),
    (
        "ls-endpoint-flag-userinfo-refused",
        lambda c, env, b: (
            ["s3", "ls", "--endpoint-url", f"http://u:{c}@127.0.0.1:1", f"s3://{b}/"],
            {},
        ),
    ),
    (
        "ls-proxy-flag-creds-refused",
        lambda c, env, b: (
            [
                "s3",
                "ls",
                "-x",
                f"http://pu:{c}@127.0.0.1:1",
                f"s3://{b}/",
                "--connect-timeout",
                "2",
            ],
            {},
        ),
    ),
    (
        "ls-proxy-env-creds-refused",
        lambda c, env, b: (
            ["s3", "ls", f"s3://{b}/", "--connect-timeout", "2"],
            {
                "https_proxy": f"http://pu:{c}@127.0.0.1:1",
                "all_proxy": f"http://pu:{c}@127.0.0.1:1",
            },
        ),
    ),
    (
        "cp-wrong-secret",
        lambda c, env, b: (
            ["s3", "cp", f"s3://{b}/k1", "out/k1.bin"],
            {"AWS_SECRET_ACCESS_KEY": c},
        ),
    ),
    (
        "cp-missing-key-session-token",
        lambda c, env, b: (
            ["s3", "cp", f"s3://{b}/nope", "out/nope.bin"],
            {"AWS_SESSION_TOKEN": c},
        ),
    ),
    (
        "cp-upload-wrong-secret",
        lambda c, env, b: (
            ["s3", "cp", "up.txt", f"s3://{b}/up.txt"],
            {"AWS_SECRET_ACCESS_KEY": c},
        ),
    ),
    (
        "cp-recursive-wrong-secret",
        lambda c, env, b: (["s3", "cp", "-r", f"s3://{b}/", "out/"], {"AWS_SECRET_ACCESS_KEY": c}),
    ),
    (
        "sync-wrong-secret",
        lambda c, env, b: (["s3", "sync", f"s3://{b}/", "out/"], {"AWS_SECRET_ACCESS_KEY": c}),
    ),
    (
        "ls-profile-file-secret",
        lambda c, env, b: (["s3", "ls", "--profile", "p", f"s3://{b}/"], {"__profile__": c}),
    ),
]


@pytest.mark.parametrize("builder", [r[1] for r in S3_ROWS], ids=[r[0] for r in S3_ROWS])
def test_s3_outputs_hold_no_secret(
    tmp_path: Path, s3_env: dict[str, str], bucket: Any, builder: Any
) -> None:
    name = bucket({"k1": b"hello", "k2": b"world"})
    secret = canary("s")
    argv, extra = builder(secret, s3_env, name)
    env = dict(s3_env)
    if "__profile__" in extra:
        creds = tmp_path / "credentials"
        creds.write_text(
            f"[p]\naws_access_key_id = {s3_env['AWS_ACCESS_KEY_ID']}\n"
            f"aws_secret_access_key = {extra.pop('__profile__')}\n"
        )
        env["AWS_SHARED_CREDENTIALS_FILE"] = str(creds)
        env.pop("AWS_ACCESS_KEY_ID")
        env.pop("AWS_SECRET_ACCESS_KEY")
    env.update(extra)
    work = tmp_path / "work"
    work.mkdir()
    (work / "out").mkdir()
    (work / "up.txt").write_text("upload\n")
    _code, stdout, stderr = run(argv, env=env, cwd=work, timeout=120)
    outputs = read_outputs(work / "out", stdout, stderr)
    assert_absent(outputs, secret)


def test_s3_ls_real_secret_key_with_debug_not_printed(
    tmp_path: Path, s3_env: dict[str, str], bucket: Any
) -> None:
    name = bucket({"k1": b"x"})
    code, stdout, stderr = run(
        ["s3", "ls", "--debug", "-r", f"s3://{name}/"], env=s3_env, cwd=tmp_path
    )
    assert code == 0, stderr
    assert_absent(read_outputs(tmp_path, stdout, stderr), s3_env["AWS_SECRET_ACCESS_KEY"])


def test_watch_otlp_url_password_not_written(tmp_path: Path, origin_a: Server) -> None:
    secret = canary("o")
    prog = tmp_path / "prog.py"
    prog.write_text(WATCH_PROGRAM_HTTP)
    out = tmp_path / "out"
    out.mkdir()
    _code, stdout, stderr = run(
        [
            "watch",
            "--report",
            str(out / "watch.json"),
            "--log",
            str(out / "watch.log"),
            "--otlp",
            f"http://u:{secret}@127.0.0.1:1/",
            "--",
            sys.executable,
            str(prog),
            origin_a.base,
            "x",
            "nothing",
        ],
        cwd=out,
    )
    assert_absent(read_outputs(out, stdout, stderr), secret)


@pytest.mark.parametrize(
    "argv",
    [["-H", "Authorization: Bearer {c}"], ["-u", "bob:{c}"], ["-H", "Cookie: sid={c}"]],
    ids=["authorization", "user", "cookie"],
)
def test_credentials_do_not_follow_a_redirect_to_another_host_name_same_port(
    tmp_path: Path, origin_a: Server, argv: list[str]
) -> None:
    """127.0.0.1 -> localhost on the same port: another origin by its host name."""
    import base64

    secret = canary("h")
    url = origin_a.route("redirect", f"http://localhost:{origin_a.port}/landed")
    source = tmp_path / "input.txt"
    source.write_text(url + "\n")
    args = [a.format(c=secret) for a in argv]
    run(["fetch", str(source), "-L", "--max-time", "5", "-o", str(tmp_path / "r.jsonl"), *args])
    landed = [s for s in origin_a.seen if s.target.startswith("/landed")]
    assert landed, "the redirect was not followed"
    forms = [secret, base64.b64encode(f"bob:{secret}".encode()).decode()]
    first = origin_a.seen[0].text()
    assert any(f in first for f in forms), "the credential did not reach its origin"
    for form in forms:
        assert form not in landed[0].text(), f"crossed to localhost:\n{landed[0].text()}"


def test_resume_refusal_does_not_quote_the_file(tmp_path: Path, origin_a: Server) -> None:
    """--resume on a file that is not surge's records: the refusal must not
    quote what the file holds (say, the credentials file given by mistake)."""
    secret = canary("m")
    out = tmp_path / "out"
    out.mkdir()
    target = out / "records.jsonl"
    target.write_text(f"aws_secret_access_key = {secret}\n")
    source = tmp_path / "input.txt"
    source.write_text(origin_a.base + "/ok\n")
    _code, stdout, stderr = run(["fetch", str(source), "-o", str(target), "--resume"])
    outputs = {"stdout": stdout.decode("latin-1"), "stderr": stderr.decode("latin-1")}
    assert_absent(outputs, secret)


WATCH_BOTO = """
import sys, urllib.request, boto3
from botocore.config import Config
endpoint, access, secret_key, bucket, secret, mode = sys.argv[1:7]
if mode == 'session-token':
    c = boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=access,
                     aws_secret_access_key=secret_key, aws_session_token=secret,
                     region_name='us-east-1', config=Config(s3={'addressing_style': 'path'}))
    try:
        c.list_objects_v2(Bucket=bucket)
    except Exception:
        pass
elif mode == 'wrong-secret':
    c = boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=access,
                     aws_secret_access_key=secret, region_name='us-east-1',
                     config=Config(s3={'addressing_style': 'path'}))
    try:
        c.get_object(Bucket=bucket, Key='k1')
    except Exception:
        pass
elif mode == 'presigned':
    c = boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=access,
                     aws_secret_access_key=secret_key, aws_session_token=secret,
                     region_name='us-east-1', config=Config(s3={'addressing_style': 'path'}))
    url = c.generate_presigned_url('get_object', Params={'Bucket': bucket, 'Key': 'k1'})
    try:
        urllib.request.urlopen(url, timeout=5).read()
    except Exception:
        pass
"""


@pytest.mark.parametrize("mode", ["session-token", "wrong-secret", "presigned"])
def test_watch_boto3_holds_no_secret(
    tmp_path: Path, s3_env: dict[str, str], bucket: Any, minio: Any, mode: str
) -> None:
    name = bucket({"k1": b"hello"})
    secret = canary("b")
    prog = tmp_path / "boto.py"
    prog.write_text(WATCH_BOTO)
    argv = [
        sys.executable,
        str(prog),
        minio.endpoint_url,
        minio.access_key,
        minio.secret_key,
        name,
        secret,
        mode,
    ]
    env = {
        k: v
        for k, v in s3_env.items()
        if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")
    }
    outputs = _watch(tmp_path, argv, env)
    assert_absent(outputs, secret)
    # the real secret key of the server, given in argv, neither
    assert_absent(outputs, minio.secret_key)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_url_userinfo_is_not_sent_to_a_proxy_in_the_request_target(
    tmp_path: Path, origin_b: Server, how: str
) -> None:
    """Through an HTTP proxy the request target is absolute: the URL's
    userinfo is not part of it (curl sends Basic auth instead, never
    ``GET http://user:pw@host/``)."""
    secret = canary("p")
    source = tmp_path / "input.txt"
    source.write_text(f"http://bob:{secret}@example.test/ok\n")
    env = {"http_proxy": origin_b.base} if how == "env" else {}
    flags = ["-x", origin_b.base] if how == "flag" else []
    run(["fetch", str(source), "--max-time", "5", "-o", str(tmp_path / "r.jsonl"), *flags], env=env)
    assert origin_b.seen, "the proxy got no request"
    targets = [s.target for s in origin_b.seen]
    assert not any(secret in t for t in targets), targets
