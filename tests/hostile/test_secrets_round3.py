"""Hostile round 3 of the secrets rule and of "a record is done only when every
sink holds it".

Secrets: cases rounds 1 and 2 left out - ``-b`` cookies (a NAME=VALUE, a
cookie file, a jar that carries a server's cookie on), secrets in the error
detail of every error class the simulated web makes, redirect targets in the
shapes a URL parser forgives (backslashes, a fragment, an encoded name, a
loop), proxies for HTTPS (CONNECT), a form body, ``surge trace -L`` across
origins, the Python API's exceptions and logs (surge.http, surge.db), and
``surge s3`` (SSE-C keys, an endpoint's userinfo, a presigned URL fetched).

Sinks: SIGINT and SIGKILL at a random point, and a file size limit
(RLIMIT_FSIZE), while JSONL, WARC and HAR are written at once with redirects
followed (several WARC exchanges per record); then ``--resume``.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import random
import resource
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RESOLVE
from tests.hostile.conftest import SURGE
from tests.hostile.test_fetch_round2 import lines_of, warc_lines
from tests.hostile.test_secrets_round2 import (
    Server,
    _fetch_case,
    assert_absent,
    canary,
    origin_a,
    origin_b,
    read_outputs,
    run,
)

from surge.sim import SimInfo

__all__ = ["origin_a", "origin_b"]  # round 2's servers, as fixtures here too


# --------------------------------------------------------------------------
# surge fetch: new rows through round 2's every-sink harness (-o, --har,
# --trace, --warc).


def _loop(a: Server, tail: str) -> str:
    """A resource redirecting to itself with ``tail`` appended (a loop)."""
    url = a.route("redirect", "")
    a.routes[url.rsplit("/", 1)[1]] = ("redirect", url + tail)
    return url


def _loop_userinfo(a: Server, secret: str) -> str:
    """A resource redirecting to itself, with userinfo in its Location."""
    url = a.route("redirect", "")
    a.routes[url.rsplit("/", 1)[1]] = ("redirect", url.replace("//", f"//eve:{secret}@"))
    return url


FetchRow = tuple[str, Any, tuple[str, ...]]

ROWS: list[FetchRow] = [
    # -b: "a Cookie header instead, sent as -H 'Cookie: ...'" (fetch.md)
    ("cookie-flag-name-value", lambda c, a, b: ([a.base + "/ok"], ["-b", f"sid={c}"], {}), ()),
    (
        "cookie-flag-name-value-include-headers-har-sanitised",
        lambda c, a, b: ([a.base + "/ok", a.base + "/again"], ["-b", f"sid={c}", "-i"], {}),
        (),
    ),
    (
        "cookie-jar-carries-a-server-cookie-to-the-next-request",
        lambda c, a, b: (
            [a.route("setcookie", c), a.base + "/next"],
            ["-c", "1", "--cookie-jar", "{out}/../jar.txt"],
            {},
        ),
        (),
    ),
    # redirect targets in forgiving shapes
    (
        "redirect-location-backslashes-userinfo",
        lambda c, a, b: (
            [a.route("redirect", f"http:\\\\eve:{c}@127.0.0.1:{b.port}\\ok")],
            ["-L"],
            {},
        ),
        (),
    ),
    (
        "redirect-location-uppercase-scheme-userinfo",
        lambda c, a, b: (
            [a.route("redirect", f"HTTP://eve:{c}@127.0.0.1:{b.port}/ok")],
            ["-L"],
            {},
        ),
        (),
    ),
    (
        "redirect-location-fragment-token",
        lambda c, a, b: ([a.route("redirect", f"/ok#access_token={c}&x=1")], ["-L", "-i"], {}),
        (),
    ),
    (
        "redirect-location-encoded-name",
        lambda c, a, b: ([a.route("redirect", f"/ok?access%5Ftoken={c}")], ["-L", "-i"], {}),
        ("warc",),
    ),
    (
        "redirect-location-semicolon-sig",
        lambda c, a, b: ([a.route("redirect", f"/ok?a=1;X-Amz-Signature={c}")], ["-L"], {}),
        ("warc",),
    ),
    (
        "redirect-loop-with-token-too-many-redirects",
        lambda c, a, b: ([_loop(a, f"?access_token={c}")], ["-L", "--max-redirs", "2"], {}),
        ("warc",),
    ),
    (
        "redirect-loop-to-userinfo-too-many-redirects",
        lambda c, a, b: (
            [_loop_userinfo(a, c)],
            ["-L", "--max-redirs", "1"],
            {},
        ),
        (),
    ),
    # https to a plain-HTTP port: tls_error's detail
    (
        "tls-error-userinfo-and-token",
        lambda c, a, b: ([f"https://bob:{c}@127.0.0.1:{a.port}/?token={c}"], [], {}),
        (),
    ),
    # a form body naming a secret (argv: -d)
    (
        "form-body-password",
        lambda c, a, b: ([a.base + "/login"], ["-d", f"password={c}"], {}),
        ("warc",),
    ),
    # a header whose name says it is a secret
    (
        "header-x-api-key",
        lambda c, a, b: ([a.base + "/ok"], ["-H", f"X-Api-Key: {c}"], {}),
        ("warc",),
    ),
]


def _proxied(c: str, b: Server) -> str:
    return b.base.replace("//", f"//pu:{c}@")


# proxies: for https, a CONNECT the proxy refuses (501); credentials percent-encoded
ROWS += [
    (
        "proxy-flag-credentials-https-connect-refused",
        lambda c, a, b: (["https://example.test/ok"], ["-x", _proxied(c, b)], {}),
        (),
    ),
    (
        "proxy-env-https_proxy-credentials-connect-refused",
        lambda c, a, b: (["https://example.test/ok"], [], {"https_proxy": _proxied(c, b)}),
        (),
    ),
    (
        "proxy-flag-percent-encoded-credentials",
        lambda c, a, b: (
            ["http://example.test/ok"],
            ["-x", _proxied("".join(f"%{ord(x):02X}" for x in c), b)],
            {},
        ),
        (),
    ),
]


# a Location that is no valid URL: the record names the problem, not the secret
ROWS += [
    (
        f"redirect-invalid-location-{name}",
        lambda c, a, b, shape=shape: (
            [a.route("redirect", shape.format(c=c, p=b.port))],
            ["-L"],
            {},
        ),
        ("warc",) if "token" in name else (),  # a WARC keeps the query sent
    )
    for name, shape in [
        ("space-in-host-userinfo", "http://eve:{c}@exa mple.test/ok"),
        ("bad-port-userinfo", "http://eve:{c}@127.0.0.1:99999/ok"),
        ("bad-ipv6-token", "http://[::1/ok?access_token={c}"),
        ("ftp-scheme-userinfo", "ftp://eve:{c}@127.0.0.1:{p}/ok"),
        ("control-char-token", "http://127.0.0.1:{p}/ok?token={c}\x7f\x01"),
    ]
]


@pytest.mark.parametrize(("builder", "skip"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_fetch_outputs_hold_no_secret_round3(
    tmp_path: Path, origin_a: Server, origin_b: Server, builder: Any, skip: tuple[str, ...]
) -> None:
    secret, outputs = _fetch_case(tmp_path, origin_a, origin_b, builder, "g")
    outputs.pop("(file names)", None)
    assert_absent(outputs, secret, skip)


def reports_of(tmp_path: Path, lines: list[str], argv: list[str]) -> dict[str, str]:
    """``surge fetch`` of ``lines`` with -o, --har and --trace in one directory
    (exit status 0 asserted); every report it wrote, read back."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "input.txt").write_text("".join(f"{line}\n" for line in lines))
    sinks = [
        "-o",
        str(out / "r.jsonl"),
        "--har",
        str(out / "r.har"),
        "--trace",
        str(out / "r.html"),
    ]
    code, stdout, stderr = run(["fetch", str(out / "input.txt"), *sinks, *argv])
    assert code == 0, stderr
    return read_outputs(out, stdout, stderr)


def test_fetch_cookie_file_values_are_not_recorded(tmp_path: Path, origin_a: Server) -> None:
    """-b FILE (Netscape): the cookie goes to the server, never to a report."""
    secret = canary("k")
    jar = tmp_path / "cookies.txt"
    jar.write_text(f"# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsid\t{secret}\n")
    outputs = reports_of(
        tmp_path, [origin_a.base + "/ok", origin_a.base + "/two"], ["-b", str(jar), "-i"]
    )
    assert secret in origin_a.received(), "the cookie file's cookie was not sent"
    assert_absent(outputs, secret)


def test_fetch_bad_cookie_file_line_is_named_not_quoted(tmp_path: Path, origin_a: Server) -> None:
    """A cookie file with a broken line: one line naming the file and line
    (fetch.md), not the cookie's value."""
    secret = canary("q")
    jar = tmp_path / "cookies.txt"
    jar.write_text(f"# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tsid={secret}\n")
    (tmp_path / "in.txt").write_text(origin_a.base + "/ok\n")
    code, stdout, stderr = run(
        ["fetch", str(tmp_path / "in.txt"), "-b", str(jar), "-o", str(tmp_path / "r.jsonl")]
    )
    assert code == 2, stderr
    assert_absent({"stdout": stdout.decode(), "stderr": stderr.decode()}, secret)


@pytest.mark.parametrize("how", ["name-value", "name-value-307"])
def test_cookie_flag_does_not_cross_an_origin(
    tmp_path: Path, origin_a: Server, origin_b: Server, how: str
) -> None:
    """-b NAME=VALUE is a Cookie header (fetch.md): a credential, for the
    input's origin only."""
    secret = canary("o")
    code = "307" if how.endswith("307") else "302"
    url = origin_a.route("redirect" + code, origin_b.base + "/landed")
    (tmp_path / "in.txt").write_text(url + "\n")
    rc, _out, stderr = run(
        [
            "fetch",
            str(tmp_path / "in.txt"),
            "-L",
            "-b",
            f"sid={secret}",
            "-o",
            str(tmp_path / "r.jsonl"),
        ]
    )
    assert origin_b.seen, f"not followed: {rc} {stderr[-300:]!r}"
    assert secret in origin_a.received()
    assert secret not in origin_b.received(), origin_b.received()[:800]


@pytest.mark.parametrize("header", ["Authorization: Bearer {c}", "Cookie: sid={c}"])
def test_trace_follow_does_not_carry_credentials_across_an_origin(
    origin_a: Server, origin_b: Server, header: str
) -> None:
    """surge trace -L follows as fetch does (http.md: the client follows
    fetch's credential rules)."""
    secret = canary("l")
    url = origin_a.route("redirect", origin_b.base + "/landed")
    rc, _out, stderr = run(["trace", "-L", "--max-time", "5", "-H", header.format(c=secret), url])
    assert origin_b.seen, f"not followed: {rc} {stderr[-300:]!r}"
    assert secret in origin_a.received()
    assert secret not in origin_b.received(), origin_b.received()[:800]


# --------------------------------------------------------------------------
# Every error class of the simulated web, with secrets in the URL.

#: (id, sim name or full-URL builder, extra argv)
SIM_ERRORS: list[tuple[str, str, list[str]]] = [
    ("garbage-protocol-error", "garbage", []),
    ("reset", "reset", []),
    ("close", "close", []),
    ("hang-read-timeout", "hang", ["--max-time", "1"]),
    ("hang-body-read-timeout", "hang-body", ["--max-time", "1"]),
    ("redirect-loop", "redirect-loop", ["-L", "--max-redirs", "2"]),
    ("body-too-large", "big-64k", ["--max-filesize", "1k"]),
    ("status-500-retried", "status-500", ["--retries", "1"]),
    ("badcert-tls-error", "https:badcert", []),
    ("redirect-chain-followed-include-headers", "redirect-3", ["-L", "-i"]),
]


@pytest.mark.parametrize(
    ("name", "argv"), [r[1:] for r in SIM_ERRORS], ids=[r[0] for r in SIM_ERRORS]
)
def test_fetch_error_details_hold_no_secret(
    sim: SimInfo, tmp_path: Path, name: str, argv: list[str]
) -> None:
    secret = canary("e")
    if name.startswith("https:"):
        base = f"https://bob:{secret}@{name[6:]}.sim:{sim.https_port}"
    else:
        base = f"http://bob:{secret}@{name}.sim:{sim.http_port}"
    url = f"{base}/p?access_token={secret}&x=1#id_token={secret}"
    outputs = reports_of(tmp_path, [url], ["--resolve", RESOLVE, "--max-time", "3", *argv])
    assert_absent(outputs, secret)


# --------------------------------------------------------------------------
# The Python API: surge.http's exceptions and surge's logs.


@contextlib.contextmanager
def all_logs() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: (id, "http" or "db", the URL from (secret, a closed port))
API_ROWS: list[tuple[str, str, Callable[[str, int], str]]] = [
    ("http-userinfo-refused", "http", lambda c, p: f"http://bob:{c}@127.0.0.1:{p}/"),
    ("http-token-refused", "http", lambda c, p: f"http://127.0.0.1:{p}/?access_token={c}"),
    ("http-userinfo-invalid-host", "http", lambda c, p: f"http://bob:{c}@exa mple.test/"),
    ("http-userinfo-bad-port", "http", lambda c, p: f"http://bob:{c}@127.0.0.1:99999/"),
    ("db-mysql-refused", "db", lambda c, p: f"mysql://app:{c}@127.0.0.1:{p}/db"),
    ("db-postgresql-refused", "db", lambda c, p: f"postgresql://app:{c}@127.0.0.1:{p}/db"),
    ("db-mysql-query-password", "db", lambda c, p: f"mysql://app@127.0.0.1:{p}/db?password={c}"),
    (
        "db-postgresql-query-password",
        "db",
        lambda c, p: f"postgresql://app@127.0.0.1:{p}/db?password={c}",
    ),
    (
        "db-postgresql-percent-encoded",
        "db",
        lambda c, p: f"postgresql://app:{c}%40x@127.0.0.1:{p}/db",
    ),
    ("db-mysql-bad-option", "db", lambda c, p: f"mysql://app:{c}@127.0.0.1:{p}/db?nosuchoption=1"),
    ("db-mysql-bad-port", "db", lambda c, p: f"mysql://app:{c}@127.0.0.1:notaport/db"),
    ("db-postgresql-bad-port", "db", lambda c, p: f"postgresql://app:{c}@127.0.0.1:notaport/db"),
    ("db-mysql-bad-ipv6", "db", lambda c, p: f"mysql://app:{c}@[::1/db"),
    ("db-unknown-scheme", "db", lambda c, p: f"mysqlx://app:{c}@127.0.0.1:{p}/db"),
    ("db-mysql-no-host", "db", lambda c, p: f"mysql://app:{c}@/db"),
]


def _http_api(url: str, texts: dict[str, str]) -> None:
    import surge
    from surge.http import RequestError

    try:
        with surge.Client(max_time=3) as client:
            client.get(url)
    except (RequestError, ValueError) as error:
        texts["str(error)"] = str(error)
        texts["repr(error)"] = repr(error)
        texts["args"] = repr(error.args)
        texts["error.request"] = repr(getattr(error, "request", None))
    records = list(surge.fetch_all([url], concurrency=1, max_time=3))
    texts["fetch_all record"] = json.dumps(records, default=str)


def _db_api(url: str, texts: dict[str, str]) -> None:
    import surge.db

    pool = None
    try:
        pool = surge.db.pool(url, max_size=1)
        texts["repr(pool)"] = repr(pool)
        texts["str(pool)"] = str(pool)
        with pool.connection():
            pass
    except Exception as error:  # any error: its text is the point
        texts["str(error)"] = str(error)
        texts["repr(error)"] = repr(error)
        chain, seen = error.__cause__ or error.__context__, 0
        while chain is not None and seen < 5:
            texts[f"cause {seen}"] = repr(chain)
            chain, seen = chain.__cause__ or chain.__context__, seen + 1
    finally:
        if pool is not None:
            with contextlib.suppress(Exception):
                texts["stats"] = json.dumps(pool.stats(), default=str)
                pool.close()


@pytest.mark.parametrize(("kind", "make"), [r[1:] for r in API_ROWS], ids=[r[0] for r in API_ROWS])
def test_python_api_errors_reprs_and_logs_hold_no_secret(
    kind: str, make: Callable[[str, int], str]
) -> None:
    """surge.http's exceptions and records, surge.db's pools and errors, and
    every log line of either (DEBUG on)."""
    secret = canary("h")
    texts: dict[str, str] = {}
    with all_logs() as logs:
        (_http_api if kind == "http" else _db_api)(make(secret, _closed_port()), texts)
    texts["logs"] = logs.getvalue()
    assert len(texts) > 1, "neither a result nor an error came out"
    assert_absent(texts, secret)


#: (id, how a surge logger is given the secret URL): the message, its
#: arguments, an exception's text (exc_info, .exception(), a chain).
LOG_ROWS: list[tuple[str, Callable[[logging.Logger, str], None]]] = [
    ("message", lambda log, url: log.warning(f"fetching {url}")),
    ("arguments", lambda log, url: log.warning("fetching %s", url)),
    ("exc-info", lambda log, url: log.warning("failed", exc_info=ValueError(f"bad {url}"))),
    ("exception", lambda log, url: _logged_exception(log, url)),
    ("chained", lambda log, url: _logged_exception(log, url, chained=True)),
]


def _logged_exception(log: logging.Logger, url: str, chained: bool = False) -> None:
    try:
        try:
            raise OSError(f"refused: {url}")
        except OSError as error:
            if chained:
                raise RuntimeError("then") from error
            raise
    except Exception:
        log.exception("request failed")


@pytest.mark.parametrize("how", [r[1] for r in LOG_ROWS], ids=[r[0] for r in LOG_ROWS])
def test_a_surge_log_record_holds_no_secret_whatever_it_carries(
    how: Callable[[logging.Logger, str], None],
) -> None:
    """A handler the application attaches writes what the record carries:
    the message and also its traceback, formatted by the handler's own
    Formatter; the secret is in neither."""
    from surge._log import logger

    secret = canary("l")
    url = f"http://bob:{secret}@127.0.0.1:1/p?access_token={secret}"
    with all_logs() as logs:
        how(logger("surge.http"), url)
    text = logs.getvalue()
    assert "127.0.0.1" in text, text
    assert_absent({"logs": text}, secret)


# --------------------------------------------------------------------------
# surge s3: SSE-C keys, an --endpoint-url with userinfo, a presigned URL.


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
@pytest.mark.parametrize("direction", ["upload", "download"])
def test_s3_sse_c_key_is_never_written(
    tmp_path: Path, s3_env: dict[str, str], bucket: Any, direction: str, debug: bool
) -> None:
    """s3.md: the SSE-C key headers are left out of anything surge writes
    (as Authorization is). MinIO refuses SSE-C over plain HTTP: the error
    must still not hold the key."""
    name = bucket({"k1": b"hello"})
    key = canary("sse").ljust(32, "Z")[:32]
    (tmp_path / "up.txt").write_text("data")
    src, dst = (
        (str(tmp_path / "up.txt"), f"s3://{name}/up.txt")
        if direction == "upload"
        else (f"s3://{name}/k1", str(tmp_path / "k1.bin"))
    )
    args = ["s3", "cp", src, dst, "--sse-c", "AES256", "--sse-c-key", key]
    if debug:
        args.append("--debug")
    _code, stdout, stderr = run(args, env=s3_env)
    texts = read_outputs(tmp_path, stdout, stderr)
    texts.pop("up.txt", None)
    b64 = base64.b64encode(key.encode()).decode()
    assert_absent(texts, key)
    assert_absent(texts, b64)


def test_s3_endpoint_flag_userinfo_is_never_written(
    tmp_path: Path, s3_env: dict[str, str], bucket: Any
) -> None:
    name = bucket({"k1": b"hello"})
    secret = canary("u")
    endpoint = s3_env["AWS_ENDPOINT_URL"].replace("//", f"//u:{secret}@")
    env = {k: v for k, v in s3_env.items() if k != "AWS_ENDPOINT_URL"}
    texts: dict[str, str] = {}
    for args in (
        ["s3", "ls", f"s3://{name}/", "--debug"],
        ["s3", "presign", f"s3://{name}/k1"],
        ["s3", "cp", f"s3://{name}/nope", str(tmp_path / "nope.bin")],
    ):
        code, stdout, stderr = run([*args, "--endpoint-url", endpoint], env=env)
        texts[f"{args[1]} stdout"] = stdout.decode(errors="replace")
        texts[f"{args[1]} stderr ({code})"] = stderr.decode(errors="replace")
    assert_absent(texts, secret)


def test_a_presigned_url_fetched_keeps_its_signature_out_of_every_report(
    tmp_path: Path, s3_env: dict[str, str], bucket: Any
) -> None:
    """trace.md: X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token are
    secret parameters: REDACTED in records, HAR and trace page."""
    name = bucket({"k1": b"hello"})
    env = dict(s3_env, AWS_SESSION_TOKEN=canary("tok"))
    code, stdout, stderr = run(["s3", "presign", f"s3://{name}/k1"], env=env)
    assert code == 0, stderr
    url = stdout.decode().strip()
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    secrets = [query["X-Amz-Signature"], query["X-Amz-Credential"]]
    if "X-Amz-Security-Token" in query:
        secrets.append(query["X-Amz-Security-Token"])
    texts = reports_of(tmp_path, [url], ["-i"])
    for secret in secrets:
        assert_absent(texts, secret)


# --------------------------------------------------------------------------
# Every sink at once (JSONL + WARC + HAR, redirects followed), interrupted.

FBASE = ["fetch", "--resolve", RESOLVE, "--max-time", "5", "-q"]


def _slow_redirecting(sim: SimInfo, n: int, seed: int) -> tuple[bytes, dict[int, int]]:
    """Inputs, and how many responses (hops) each input line makes."""
    rnd = random.Random(seed)
    lines, hops = [], {}
    for i in range(n):
        r = rnd.choice([0, 1, 2])
        part = f"x{i}.delay-{rnd.randrange(30, 250)}--big-{rnd.choice([2, 5])}k"
        if r:
            part += f"--redirect-{r}"
        lines.append(f"http://{part}.sim:{sim.http_port}/\n".encode())
        hops[i + 1] = r + 1
    return b"".join(lines), hops


def _sink_args(tmp: Path) -> list[str]:
    return [
        "-o",
        str(tmp / "out.jsonl"),
        "--warc",
        str(tmp / "w.warc.gz"),
        "--har",
        str(tmp / "run.har"),
        "-L",
        "-c",
        "3",
    ]


def _check_every_sink(tmp: Path, n: int, hops: dict[int, int]) -> None:
    want = Counter(range(1, n + 1))
    got = lines_of(tmp / "out.jsonl")
    assert got == want, f"records: missing {sorted(want - got)}, twice {sorted(got - want)}"
    in_warc = warc_lines(str(tmp / "w*.warc.gz"))
    want_warc = Counter({line: h for line, h in hops.items()})
    bad = {k: (in_warc.get(k, 0), v) for k, v in want_warc.items() if in_warc.get(k, 0) != v}
    assert not bad, f"WARC responses per input line (got, want): {bad}"
    har = json.loads((tmp / "run.har").read_text())
    assert isinstance(har["log"]["entries"], list)


def _resume(tmp: Path, src: Path, tries: int = 4) -> subprocess.CompletedProcess[bytes]:
    done = None
    for _ in range(tries):
        done = subprocess.run(
            [*SURGE, *FBASE, str(src), *_sink_args(tmp), "--resume"],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if done.returncode == 0:
            return done
    assert done is not None
    return done


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["INT", "KILL"])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_signal_mid_run_with_every_sink_then_resume(
    sim: SimInfo, tmp_path: Path, sig: signal.Signals, seed: int
) -> None:
    n = 36
    data, hops = _slow_redirecting(sim, n, seed)
    src = tmp_path / "in.txt"
    src.write_bytes(data)
    child = subprocess.Popen(
        [*SURGE, *FBASE, str(src), *_sink_args(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait = random.Random(seed * 31 + int(sig)).uniform(0.8, 2.5)
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=wait)
        if child.returncode is None:
            child.send_signal(sig)
        _o, err = child.communicate(timeout=60)
    finally:
        if child.returncode is None:
            child.kill()
            child.wait(timeout=10)
    assert child.returncode != 0, "the run ended before the signal: not a test"
    if sig == signal.SIGINT:
        assert child.returncode == 130, (child.returncode, err[-400:])
        assert b"Traceback" not in err, err[-1500:]
    done = _resume(tmp_path, src)
    assert done.returncode == 0, done.stderr[-800:]
    _check_every_sink(tmp_path, n, hops)


@pytest.mark.parametrize("limit_kib", [24, 48, 96])
def test_a_file_size_limit_with_every_sink_then_resume(
    sim: SimInfo, tmp_path: Path, limit_kib: int
) -> None:
    """RLIMIT_FSIZE (what ``ulimit -f`` sets) stops a write with EFBIG (Python
    ignores SIGXFSZ): one line naming the file, exit 2 (fetch.md), then a
    --resume without the limit leaves each input once in every sink."""
    n = 40
    data, hops = _slow_redirecting(sim, n, limit_kib)
    src = tmp_path / "in.txt"
    src.write_bytes(data)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_kib * 1024, limit_kib * 1024))

    first = subprocess.run(
        [*SURGE, *FBASE, str(src), *_sink_args(tmp_path)],
        capture_output=True,
        timeout=120,
        check=False,
        preexec_fn=limit,
    )
    assert first.returncode == 2, first.stderr[-800:]
    text = first.stderr.decode(errors="replace").strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text[-1500:]
    done = _resume(tmp_path, src)
    assert done.returncode == 0, done.stderr[-800:]
    _check_every_sink(tmp_path, n, hops)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
