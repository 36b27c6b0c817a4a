"""Ranges and partial downloads: ``-r/--range`` and ``-C -/--continue-at -``.

The reference is curl, against a real nginx on loopback (Debian's, serving
static files with ranges): for each case the bytes on disk and the Range
header sent (nginx's access log) are surge's and curl's alike; where surge
differs on purpose (a server that ignores Range: curl stops with exit 33,
surge restarts from byte 0 as wget's ``-c`` does, and says so) the test says
so.  The syntax of ``-r``, Content-Range and the ``-C`` decision are tables
over surge.bulk.ranges.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from tests._nginx import free_port
from tests._nginx import nginx as running_nginx
from tests.http.raw_server import LoopbackServer, read_request

import surge
from surge.bulk.bodies import BodyFiles
from surge.bulk.ranges import ContentRange, continuation, parse_content_range, range_header
from surge.cli import main
from surge.errors import RequestError, UsageError

SURGE = [sys.executable, "-m", "surge.cli"]
SIZE = 100_000
BIG = 1024 * 1024  # served at 1 MB/s: a run stopped mid-body leaves a part
PART = 40_000


@dataclass
class Site:
    base: str
    root: Path
    log: Path
    body: bytes
    big: bytes
    coded: bytes

    def requests(self, tag: str) -> list[dict[str, str]]:
        """The access log's lines of requests whose query names ``tag``."""
        found = []
        for line in self.log.read_text().splitlines():
            uri, status, rng, coding, agent = line.split("\t")
            if f"t={tag}" in uri.split("?", 1)[-1].split("&"):
                found.append(
                    {"uri": uri, "status": status, "range": rng, "ae": coding, "agent": agent}
                )
        return found


def _curl() -> str:
    found = shutil.which("curl")
    if found is None:  # the reference: never skipped
        pytest.fail("curl is not installed (.ci/run installs it)", pytrace=False)
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("nginx-ranges")
    root = base / "root"
    (root / "slow").mkdir(parents=True)
    rng = random.Random(47)
    body = rng.randbytes(SIZE)
    big = rng.randbytes(BIG)
    (root / "f.bin").write_bytes(body)
    (root / "slow" / "big.bin").write_bytes(big)
    coded = gzip.compress(body)
    (root / "coded.gz").write_bytes(coded)
    port = free_port()
    log = base / "access.log"
    servers = f"""
    log_format ranges
        '$request_uri\\t$status\\t$http_range\\t$http_accept_encoding\\t$http_user_agent';
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        access_log {log} ranges;  # here: the http level's is off
        root {root};
        location /slow/ {{ limit_rate 1m; }}
        location ~ \\.gz$ {{ add_header Content-Encoding gzip; }}
        location /ignores/ {{ alias {root}/; max_ranges 0; }}
        location = /wrong {{
            add_header Content-Range "bytes 0-9/{SIZE}"; return 206 "0123456789";
        }}
    }}
"""
    with running_nginx(base, servers, wait_port=port):
        yield Site(f"http://127.0.0.1:{port}", root, log, body, big, coded)


def fetch(urls: list[str], **options: Any) -> list[dict[str, Any]]:
    records = list(surge.fetch_all(urls, max_time=20, **options))
    return sorted(records, key=lambda r: r["line"])


def curl(*args: str) -> int:
    done = subprocess.run([_curl(), "-sS", *args], capture_output=True, timeout=30)
    return done.returncode


def body_file(folder: Path, url: str) -> Path:
    return BodyFiles(folder).path_for(url)


# -- -r's syntax, Content-Range, the -C decision: tables ---------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["0-499", "500-", "-500", "0-0", "0-1,5-9", "5-9,0-1", "-1", "0-", "9223372036854775807-"],
)
def test_a_range_curl_takes_is_sent_as_given(spec: str) -> None:
    assert range_header(spec) == f"bytes={spec}"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "empty"),
        ("5", "'5' has no dash (5- for byte 5 on)"),
        ("-", "'-' names no byte"),
        ("10-5", "the last byte comes before the first"),
        ("-0", "the last 0 bytes are no byte"),
        ("abc", "'abc' has no dash"),
        ("a-9", "'a' is not a byte position"),
        ("0-1,,5-9", "an empty range between commas"),
        ("0-1,", "an empty range between commas"),
        (" 0-1", "' 0' is not a byte position"),
        ("0x10-20", "'0x10' is not a byte position"),
        ("1-2-3", "'2-3' is not a byte position"),
        ("bytes=0-1", "'bytes=0' is not a byte position"),
        ("9223372036854775808-", "past the largest byte position"),
        ("0-٣", "is not a byte position"),  # a digit to str.isdigit, not to HTTP
    ],
)
def test_a_bad_range_is_one_usage_error_naming_it(spec: str, problem: str) -> None:
    with pytest.raises(UsageError) as raised:
        range_header(spec)
    message = str(raised.value)
    assert problem in message and "\n" not in message, message


#: RFC 9110's range-set of byte ranges (int-range / suffix-range), ours bounded:
#: first <= last, a suffix of at least one byte.
_RANGE_SET = re.compile(r"(?:[0-9]+-[0-9]*|-[0-9]+)(?:,(?:[0-9]+-[0-9]*|-[0-9]+))*")


def _grammar(spec: str) -> bool:
    if not _RANGE_SET.fullmatch(spec):
        return False
    for piece in spec.split(","):
        first, _, last = piece.partition("-")
        if not first and int(last) == 0:
            return False
        if first and last and int(last) < int(first):
            return False
        if max(int(first or 0), int(last or 0)) > 2**63 - 1:
            return False
    return True


@given(st.text(alphabet="0123456789-, x", max_size=20))
def test_a_range_is_taken_exactly_when_it_is_the_grammar(spec: str) -> None:
    try:
        header = range_header(spec)
    except UsageError as e:
        assert not _grammar(spec) and "\n" not in str(e)
    else:
        assert _grammar(spec) and header == f"bytes={spec}"


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("bytes 0-499/1234", ContentRange(0, 499, 1234)),
        ("bytes 500-999/*", ContentRange(500, 999, None)),
        ("BYTES 1-1/2", ContentRange(1, 1, 2)),
        ("bytes */1234", ContentRange(None, None, 1234)),
        (" bytes 0-0/1 ", ContentRange(0, 0, 1)),
        (None, None),
        ("", None),
        ("bytes 5-4/10", None),  # last before first
        ("bytes 0-10/10", None),  # past the length it states
        ("bytes */*", None),
        ("bytes 0-/10", None),
        ("items 0-1/2", None),
        ("bytes=0-1/2", None),
        ("0-1/2", None),
    ],
)
def test_content_range(value: str | None, parsed: ContentRange | None) -> None:
    assert parse_content_range(value) == parsed


@pytest.mark.parametrize(
    ("offset", "status", "content_range", "coding", "outcome"),
    [
        (100, 206, "bytes 100-199/200", None, "appended"),
        (100, 206, "bytes 100-149/200", "identity", "appended"),  # a part of the rest: fine
        (0, 200, None, None, "new"),
        (0, 206, "bytes 0-9/10", None, "new"),
        (100, 200, None, None, "restarted"),  # the server ignored Range
        (100, 200, None, "gzip", "restarted"),  # decoded as a whole body is
        (100, 204, None, None, "restarted"),
        (200, 416, "bytes */200", None, "complete"),
        (200, 416, None, None, "complete"),  # curl: no error, whatever it says
        (100, 404, None, None, None),
        (0, 404, None, None, None),
        (0, 416, "bytes */0", None, None),  # no Range was sent: only a status
        (100, 301, None, None, None),
        (100, 500, None, None, None),
    ],
)
def test_what_continuing_does_with_each_answer(
    offset: int, status: int, content_range: str | None, coding: str | None, outcome: str | None
) -> None:
    assert continuation(offset, status, content_range, coding) == outcome


@pytest.mark.parametrize(
    ("offset", "status", "content_range", "coding", "said"),
    [
        (100, 206, "bytes 0-99/200", None, "the 206 sent bytes 0-99"),
        (100, 206, "bytes 101-199/200", None, "the 206 sent bytes 101-199"),
        (100, 206, None, None, "not one range"),
        (100, 206, "bytes */200", None, "not one range"),
        (100, 206, "bytes 100-199/200", "gzip", "gzip-coded"),
        (100, 416, "bytes */150", None, "the server's body 150"),
    ],
)
def test_an_answer_that_does_not_fit_the_partial_file_is_a_protocol_error(
    offset: int, status: int, content_range: str | None, coding: str | None, said: str
) -> None:
    with pytest.raises(RequestError) as raised:
        continuation(offset, status, content_range, coding)
    assert raised.value.error_class == "protocol_error" and raised.value.status == status
    assert said in raised.value.detail


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-r", "10-5"], "--range '10-5': '10-5': the last byte comes before the first"),
        (["-r", "5"], "'5' has no dash (5- for byte 5 on)"),
        (["--range", ""], "--range is empty"),
        (["-C", "-"], "-C - (--continue-at) needs --output-dir"),
        (["-C", "100", "--output-dir", "D"], "--continue-at 100: only '-'"),
        (["-C", "x", "--output-dir", "D"], "--continue-at must be '-'"),
        (["-C", "-", "-r", "0-1", "--output-dir", "D"], "cannot be combined"),
        (["-r", "0-1", "-H", "Range: bytes=2-3"], "both name a range"),
        (["-C", "-", "--output-dir", "D", "-H", "range: bytes=2-"], "both name a range"),
    ],
)
def test_bad_range_flags_are_one_line_and_exit_2(
    args: list[str], said: str, tmp_path: Path
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/\n")
    args = [str(tmp_path / a) if a == "D" else a for a in args]
    result = CliRunner().invoke(main, ["fetch", str(urls), "-q", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], result.stderr
    assert not (tmp_path / "D").exists()


# -- -r against nginx, curl the reference -------------------------------------------------------

_BOUNDARY = re.compile(rb"\d{20}")


@pytest.mark.parametrize("spec", ["0-499", "99500-", "-500", "0-1,5-9", "99999-99999"])
def test_a_range_is_what_curl_gets(site: Site, tmp_path: Path, spec: str) -> None:
    tag = f"r{spec}"
    ours, theirs = f"{site.base}/f.bin?t=s{tag}", f"{site.base}/f.bin?t=c{tag}"
    assert curl("-r", spec, "-o", str(tmp_path / "curl.out"), theirs) == 0
    [record] = fetch([ours], byte_range=spec, output_dir=str(tmp_path / "bodies"))
    assert record["status"] == 206 and record["error"] is None, record
    saved = Path(record["body_path"]).read_bytes()
    expected = (tmp_path / "curl.out").read_bytes()
    if "," in spec:  # multipart/byteranges: nginx numbers its boundaries per response
        saved, expected = _BOUNDARY.sub(b"B", saved), _BOUNDARY.sub(b"B", expected)
        assert b"Content-Range: bytes 5-9/100000" in saved
    assert saved == expected
    [sent] = site.requests(f"s{tag}")
    [curls] = site.requests(f"c{tag}")
    assert sent["range"] == curls["range"] == f"bytes={spec}"
    # the offsets are of the body as stored: surge, which otherwise asks for
    # gzip and the rest, asks for none (curl asks nothing of it)
    assert sent["ae"] == "identity" and curls["ae"] == "-"


def test_a_server_that_ignores_range_sends_the_body_whole(site: Site, tmp_path: Path) -> None:
    [record] = fetch(
        [f"{site.base}/ignores/f.bin?t=ign-r"], byte_range="0-499", output_dir=str(tmp_path)
    )
    assert record["status"] == 200 and record["bytes"] == SIZE
    assert Path(record["body_path"]).read_bytes() == site.body  # as curl -r -o saves it


def test_an_accept_encoding_of_the_users_is_sent_as_given(site: Site) -> None:
    fetch([f"{site.base}/f.bin?t=ae-user"], byte_range="0-9", headers={"Accept-Encoding": "br"})
    [sent] = site.requests("ae-user")
    assert (sent["range"], sent["ae"]) == ("bytes=0-9", "br")


# -- -C - against nginx, curl the reference ----------------------------------------------------


def _partial_pair(site: Site, tmp_path: Path, path: str, tag: str, size: int) -> tuple[str, Path]:
    """The URL surge continues (its partial file written: ``size`` bytes of
    the body) and curl's partial file (the same bytes)."""
    url = f"{site.base}{path}?t=s{tag}"
    ours = body_file(tmp_path / "bodies", url)
    ours.parent.mkdir(parents=True)
    whole = site.body if "slow" not in path else site.big
    ours.write_bytes(whole[:size])
    theirs = tmp_path / "curl.out"
    theirs.write_bytes(whole[:size])
    return url, theirs


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_continuing_appends_the_rest_as_curl_does(site: Site, tmp_path: Path) -> None:
    url, theirs = _partial_pair(site, tmp_path, "/f.bin", "c-append", PART)
    assert curl("-C", "-", "-o", str(theirs), f"{site.base}/f.bin?t=cc-append") == 0
    [record] = fetch([url], continue_at="-", output_dir=str(tmp_path / "bodies"))
    assert (record["status"], record["error"], record["bytes"]) == (206, None, SIZE - PART)
    assert (record["continue_from"], record["continued"]) == (PART, "appended")
    saved = Path(record["body_path"]).read_bytes()
    assert saved == theirs.read_bytes() == site.body
    assert record["body_sha256"] == _digest(site.body)  # of the whole file
    [sent] = site.requests("sc-append")
    [curls] = site.requests("cc-append")
    assert sent["range"] == curls["range"] == f"bytes={PART}-"
    assert sent["ae"] == "identity"


def test_no_partial_file_is_fetched_whole_without_a_range(site: Site, tmp_path: Path) -> None:
    [record] = fetch(
        [f"{site.base}/f.bin?t=c-new"], continue_at="-", output_dir=str(tmp_path / "bodies")
    )
    assert (record["status"], record["continue_from"], record["continued"]) == (200, 0, "new")
    assert Path(record["body_path"]).read_bytes() == site.body
    [sent] = site.requests("c-new")
    assert sent["range"] == "-"  # none, as curl -C - sends none for a file not there


def test_a_complete_file_is_done_as_curl_finds_it(site: Site, tmp_path: Path) -> None:
    url, theirs = _partial_pair(site, tmp_path, "/f.bin", "c-done", SIZE)
    before = os.stat(body_file(tmp_path / "bodies", url))
    # curl: 416, exit 0, the file as it was
    assert curl("-C", "-", "-o", str(theirs), f"{site.base}/f.bin?t=cc-done") == 0
    assert theirs.read_bytes() == site.body
    [record] = fetch([url], continue_at="-", output_dir=str(tmp_path / "bodies"))
    assert (record["status"], record["error"], record["continued"]) == (416, None, "complete")
    assert record["body_sha256"] == _digest(site.body)
    after = os.stat(record["body_path"])
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert [r["range"] for r in site.requests("sc-done")] == [f"bytes={SIZE}-"]


def test_a_server_that_ignores_range_restarts_from_byte_0(site: Site, tmp_path: Path) -> None:
    url, theirs = _partial_pair(site, tmp_path, "/ignores/f.bin", "c-ign", PART)
    # curl refuses (33: "HTTP server doesn't seem to support byte ranges"), the part kept
    assert curl("-C", "-", "-o", str(theirs), f"{site.base}/ignores/f.bin?t=cc-ign") == 33
    assert theirs.read_bytes() == site.body[:PART]
    [record] = fetch([url], continue_at="-", output_dir=str(tmp_path / "bodies"))
    assert (record["status"], record["continue_from"], record["continued"]) == (
        200,
        PART,
        "restarted",
    )
    assert Path(record["body_path"]).read_bytes() == site.body  # rewritten, not appended
    assert record["body_sha256"] == _digest(site.body)


def test_a_range_that_does_not_start_at_the_file_end_leaves_it(site: Site, tmp_path: Path) -> None:
    url, theirs = _partial_pair(site, tmp_path, "/wrong", "c-wrong", PART)
    assert curl("-C", "-", "-o", str(theirs), f"{site.base}/wrong?t=cc-wrong") == 33
    [record] = fetch([url], continue_at="-", output_dir=str(tmp_path / "bodies"))
    assert (record["status"], record["error"]) == (206, "protocol_error"), record
    assert "the 206 sent bytes 0-9" in record["error_detail"]
    assert record["body_path"] is None and record["continued"] is None
    assert body_file(tmp_path / "bodies", url).read_bytes() == site.body[:PART]
    assert theirs.read_bytes() == site.body[:PART]  # curl's too


def test_a_coded_part_is_not_appended_to_a_decoded_file(site: Site, tmp_path: Path) -> None:
    """nginx sends a static .gz's 206 with its Content-Encoding: a part of the
    gzip stream, not of the decoded file the first run saved."""
    url, _ = _partial_pair(site, tmp_path, "/coded.gz", "c-coded", PART)
    [record] = fetch([url], continue_at="-", output_dir=str(tmp_path / "bodies"))
    assert (record["status"], record["error"]) == (206, "protocol_error"), record
    assert "gzip-coded" in record["error_detail"]
    assert body_file(tmp_path / "bodies", url).read_bytes() == site.body[:PART]
    # and with no partial file, the whole body is decoded as --output-dir saves it
    [whole] = fetch(
        [f"{site.base}/coded.gz?t=c-coded-new"], continue_at="-", output_dir=str(tmp_path / "b2")
    )
    assert whole["continued"] == "new" and Path(whole["body_path"]).read_bytes() == site.body


def test_a_status_that_is_not_the_body_writes_nothing(site: Site, tmp_path: Path) -> None:
    url = f"{site.base}/missing?t=c-404"
    partial = body_file(tmp_path / "bodies", url)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"part")
    gone = f"{site.base}/gone?t=c-404"
    record, _ = fetch([url, gone], continue_at="-", output_dir=str(tmp_path / "bodies"))
    assert (record["status"], record["continued"], record["body_path"]) == (404, None, None)
    assert partial.read_bytes() == b"part"
    # no file is left for an answer that was not the body (a later -C would continue it)
    assert not body_file(tmp_path / "bodies", gone).exists()


def test_the_same_url_twice_takes_turns(site: Site, tmp_path: Path) -> None:
    url, _ = _partial_pair(site, tmp_path, "/f.bin", "c-twice", PART)
    records = fetch([url, url], continue_at="-", output_dir=str(tmp_path / "bodies"))
    assert sorted((r["status"], r["continued"]) for r in records) == [
        (206, "appended"),
        (416, "complete"),
    ]
    assert body_file(tmp_path / "bodies", url).read_bytes() == site.body


# -- a run stopped mid-body, continued, with --resume --------------------------------------------


def test_a_stopped_run_leaves_a_part_the_next_continues(site: Site, tmp_path: Path) -> None:
    url = f"{site.base}/slow/big.bin?t=c-stop"
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{site.base}/f.bin?t=c-stop-first\n{url}\n")
    out = tmp_path / "records.jsonl"
    bodies = tmp_path / "bodies"
    partial = body_file(bodies, url)
    args = [*SURGE, "fetch", str(urls), "-q", "-c", "1", "--output-dir", str(bodies)]
    args += ["-C", "-", "-o", str(out), "--max-time", "20"]
    run = subprocess.Popen([*args], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not (partial.exists() and partial.stat().st_size >= 64 * 1024):
            assert run.poll() is None, run.stderr.read() if run.stderr else ""
            assert time.monotonic() < deadline, "no part of the body arrived"
            time.sleep(0.01)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=20)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=10)
    assert run.returncode == 143, err
    kept = partial.read_bytes()
    assert 0 < len(kept) < BIG and site.big.startswith(kept)  # a part, whole writes only
    [first] = [json.loads(line) for line in out.read_text().splitlines()]
    assert first["line"] == 1  # the one finished before the stop
    done = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in records] == [1, 2]  # line 1 not fetched again
    last = records[1]
    assert (last["status"], last["continue_from"], last["continued"]) == (
        206,
        len(kept),
        "appended",
    )
    assert partial.read_bytes() == site.big and last["body_sha256"] == _digest(site.big)
    assert [r["range"] for r in site.requests("c-stop")] == ["-", f"bytes={len(kept)}-"]


# -- a retry continues what the try before it left ------------------------------------------------


class _CutOnce(LoopbackServer):
    """Answers the first request (no Range) with a 200 of ``body`` cut off by a
    reset once the client's file holds ``part`` bytes; a ``Range: bytes=N-``
    with the 206 of the rest."""

    def __init__(self, body: bytes, part: int, file: Path) -> None:
        self.body, self.part, self.file = body, part, file
        self.ranges: list[str | None] = []
        super().__init__()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            got = read_request(sock)
            if got is None:
                return
            asked = re.search(rb"\r\nrange: bytes=(\d+)-", got[0], re.IGNORECASE)
            self.ranges.append(None if asked is None else asked[1].decode())
            size = len(self.body)
            if asked is None:
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                sock.sendall(self.body[: self.part])
                deadline = time.monotonic() + 10
                while not (self.file.exists() and self.file.stat().st_size >= self.part):
                    if time.monotonic() > deadline:
                        return
                    time.sleep(0.005)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return  # closed with a reset
            first = int(asked[1])
            sock.sendall(
                b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (first, size - 1, size, size - first, self.body[first:])
            )


def test_a_retry_continues_from_what_the_try_before_left(site: Site, tmp_path: Path) -> None:
    bodies = tmp_path / "bodies"
    server = _CutOnce(site.body, PART, Path())
    try:
        url = f"http://127.0.0.1:{server.port}/cut"
        server.file = body_file(bodies, url)
        [record] = fetch([url], continue_at="-", output_dir=str(bodies), retries=1)
    finally:
        server.close()
    assert server.ranges == [None, str(PART)]
    assert (record["status"], record["error"], record["attempts"]) == (206, None, 2), record
    assert (record["continue_from"], record["continued"]) == (PART, "appended")
    assert Path(record["body_path"]).read_bytes() == site.body


def test_a_rest_past_the_cap_leaves_the_part_as_it_was(site: Site, tmp_path: Path) -> None:
    url, _ = _partial_pair(site, tmp_path, "/f.bin", "c-cap", PART)
    [record] = fetch([url], continue_at="-", output_dir=str(tmp_path / "bodies"), body_cap=1000)
    assert (record["status"], record["error"]) == (206, "body_too_large"), record
    assert body_file(tmp_path / "bodies", url).read_bytes() == site.body[:PART]


def test_a_complete_file_is_no_failure_under_fail_exit(site: Site, tmp_path: Path) -> None:
    """The 416 of a complete file is done, not failed - where curl 7.88's
    ``-f -C -`` exits 22 ("The requested URL returned error: 416"), as its
    ``-C -`` alone exits 0: a re-run over finished files is no failure."""
    url, theirs = _partial_pair(site, tmp_path, "/f.bin", "c-fail", SIZE)
    assert curl("-f", "-C", "-", "-o", str(theirs), f"{site.base}/f.bin?t=cc-fail") == 22
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{url}\n{site.base}/missing?t=c-fail\n")
    args = [*SURGE, "fetch", str(urls), "--output-dir", str(tmp_path / "bodies"), "-C", "-"]
    done = subprocess.run([*args, "--fail-exit"], capture_output=True, text=True, timeout=60)
    # the 404 fails the run, the 416 of the complete file does not
    assert done.returncode == 22, done.stderr
    assert "1 of 2 records failed: 0 with an error, 1 with a status >= 400" in done.stderr
