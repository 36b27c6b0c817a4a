"""Hostile round, class 3 (issue 33): a sync Client shared by threads runs their
requests each in its own time; bodies are bounded wherever they go; records
match curl.  Each test is a case the issue did not list; each fails today.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import shutil
import socket
import subprocess
import termios
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.hostile.conftest import run

from surge.http import Client, Request

#: How long a test waits for what should take milliseconds (a bound on a hang,
#: not a measure of speed).  A blocked callback waits 3x as long (its gate opens
#: when the test ends), so that a request it holds cannot slip through when the
#: callback's own wait runs out.
PATIENCE = 10.0


def finishes(fn: Callable[[], Any], wait: float) -> Any:
    """``fn()``'s result if it returns within ``wait`` seconds (in a daemon
    thread), else the string "still running"; an exception it raises is
    returned."""
    out: list[Any] = []

    def call() -> None:
        try:
            out.append(fn())
        except BaseException as error:
            out.append(error)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(wait)
    return out[0] if out else "still running"


# -- 1. one thread's callback holds every thread's requests ------------------------------


@pytest.fixture
def shared(raw: RawServer) -> Iterator[Client]:
    with Client() as client:
        client.get(raw.url("ok"))
        yield client


def blocked_while(
    client: Client, raw: RawServer, request: Callable[[threading.Event, threading.Event], Any]
) -> Any:
    """Start ``request(reached, gate)`` in one thread - its callback sets
    ``reached``, then waits on ``gate`` - and once the callback is waiting, a
    plain GET from another thread: its status code if it completes while the
    first request's callback still waits (else what it raised, or "still
    running").  The gate opens at the end either way."""
    reached, gate = threading.Event(), threading.Event()
    first = threading.Thread(target=lambda: request(reached, gate), daemon=True)
    first.start()
    try:
        assert reached.wait(PATIENCE), "the first request never reached its callback"
        outcome = finishes(lambda: client.get(raw.url("ok")), PATIENCE)
        return getattr(outcome, "status_code", outcome)
    finally:
        gate.set()
        first.join(PATIENCE)


def test_a_slow_request_body_iterator_does_not_hold_other_threads(
    shared: Client, raw: RawServer
) -> None:
    """Thread A uploads a body from an iterator that produces slowly (a generator
    reading a slow source); thread B makes a plain GET on the same Client.
    Expected (README: threads' "requests run at the same time ..., each
    returning as soon as its own response is in"): B's GET completes while A's
    body is still being produced.  Actual: the iterator runs on the client's one
    event-loop thread, so B waits until A's generator yields (here: until the
    test gives up, 10 s; measured 1.8 s behind a 2 s body)."""

    def upload(reached: threading.Event, gate: threading.Event) -> None:
        def body() -> Iterator[bytes]:
            yield b"first"
            reached.set()
            gate.wait(3 * PATIENCE)
            yield b"last"

        shared.post(raw.url("ok"), content=body())

    assert blocked_while(shared, raw, upload) == 200, "a GET from another thread waited"


def test_a_slow_auth_callable_does_not_hold_other_threads(shared: Client, raw: RawServer) -> None:
    """``auth=`` a callable that fetches a token (slow: an identity provider, a
    vault).  httpx and requests run it in the calling thread.  Here it runs on the
    shared loop thread: every other thread's request waits for it."""

    def with_auth(reached: threading.Event, gate: threading.Event) -> None:
        def sign(request: Request) -> None:
            reached.set()
            gate.wait(3 * PATIENCE)
            request.headers["Authorization"] = "Bearer token"

        shared.get(raw.url("ok"), auth=sign)

    assert blocked_while(shared, raw, with_auth) == 200, "a GET from another thread waited"


def reading(fd: int) -> bool:
    """True when a thread of this process is blocked in read(2) on ``fd``
    (Linux: /proc/self/task/TID/syscall is "0 0xFD ..." then)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/syscall") as f:
                fields = f.read().split()
        except OSError:
            continue
        if len(fields) > 1 and fields[0] == "0" and int(fields[1], 16) == fd:
            return True
    return False


def drained(fd: int) -> bool:
    """True when the pipe ``fd`` holds no unread byte (its next read blocks)."""
    return fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0") == b"\0\0\0\0"


def test_a_file_body_from_a_slow_pipe_does_not_hold_other_threads(
    shared: Client, raw: RawServer
) -> None:
    """``content=`` a binary file object whose reads block (a pipe fed by another
    process, a file on a slow network mount): its ``read()`` runs on the shared
    loop thread, so every other thread's request waits for each read."""
    read_end, write_end = os.pipe()
    reader = os.fdopen(read_end, "rb")

    def upload(reached: threading.Event, gate: threading.Event) -> None:
        def feed() -> None:
            os.write(write_end, b"x" * 10)
            # once a thread of this process waits in read() on the drained pipe
            # (a read that blocks), the client's other requests must go on
            # without that thread
            deadline = time.monotonic() + PATIENCE
            while not (drained(read_end) and reading(read_end)) and time.monotonic() < deadline:
                time.sleep(0.01)
            reached.set()
            gate.wait(3 * PATIENCE)
            os.close(write_end)

        threading.Thread(target=feed, daemon=True).start()
        shared.post(raw.url("ok"), content=reader)

    try:
        assert blocked_while(shared, raw, upload) == 200, "a GET from another thread waited"
    finally:
        reader.close()


# -- 2. a transfer-coded bomb ------------------------------------------------------------


class RawServer:
    """A loopback server answering every request on a connection with the bytes
    given for its path's first segment, then closing."""

    def __init__(self, answers: dict[str, bytes]) -> None:
        self.answers = answers
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            # the whole request body is read before the answer
            if b"transfer-encoding: chunked" in head.lower():
                while not body.endswith(b"0\r\n\r\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    body += chunk
            name = data.split(b" ", 2)[1].decode().strip("/")
            try:
                conn.sendall(self.answers[name])
                conn.shutdown(socket.SHUT_WR)
                conn.recv(1)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


def gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(b"\0" * size) + packer.flush()


BOMB = gzip_of_zeros(64 * 1024 * 1024)  # 64 MiB decoded, ~64 KiB on the wire
SMALL = gzip.compress(b"hello world")


@pytest.fixture(scope="module")
def raw() -> Iterator[RawServer]:
    server = RawServer(
        {
            "te-bomb": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
            + chunked(BOMB),
            "ce-bomb": b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked"
            b"\r\n\r\n" + chunked(BOMB),
            "te-gzip": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n"
            + SMALL,
            "dup-length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
            "ok": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        }
    )
    try:
        yield server
    finally:
        server.close()


def test_stream_iter_bytes_is_capped_for_a_transfer_coded_bomb_too(raw: RawServer) -> None:
    """README: what ``iter_bytes()`` decodes is bounded by ``body_cap`` (a bomb is
    ``body_too_large``), and issue 32: "Decoded bodies respect the cap wherever
    they go (``stream()``)".  A Content-Encoding bomb stops at the cap
    (BodyTooLarge after 1 MiB: checked here as the control).  The same bomb as
    ``Transfer-Encoding: gzip, chunked`` streams its whole 64 MiB through
    ``iter_bytes()`` (and ``iter_raw()``), 64x the cap, from ~64 KiB on the wire."""
    from surge.http import BodyTooLarge

    def total(name: str) -> int | str:
        count = 0
        with Client(body_cap=1 << 20) as client, client.stream("GET", raw.url(name)) as response:
            try:
                for piece in response.iter_bytes():
                    count += len(piece)
            except BodyTooLarge:
                return "BodyTooLarge"
        return count

    assert total("ce-bomb") == "BodyTooLarge"
    assert total("te-bomb") == "BodyTooLarge"


@pytest.mark.parametrize("keep", ["--output-dir", "--warc"])
def test_bytes_is_the_size_on_the_wire_under_a_transfer_coding(
    raw: RawServer, tmp_path: Path, keep: str
) -> None:
    """DESIGN.md: "``bytes`` is the size on the wire, before decoding" (curl's
    size_download).  For ``Transfer-Encoding: gzip`` a plain run (and ``-i``)
    says 31, the gzip member, as curl does; the same run with ``--output-dir``
    or ``--warc`` says 11, the decoded text (with a gzip bomb: 1,310,720 bytes
    for ~200 KB received).  A record field must not change with where bodies
    are kept."""
    target = tmp_path / ("bodies" if keep == "--output-dir" else "x.warc.gz")
    done = run(["fetch", "-", "-q", keep, str(target)], stdin=raw.url("te-gzip").encode() + b"\n")
    (record,) = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert record["error"] is None
    assert record["bytes"] == len(SMALL)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_a_repeated_identical_content_length_is_read_as_curl_reads_it(raw: RawServer) -> None:
    """``Content-Length: 5`` twice.  RFC 9110 8.6 lets a recipient take the one
    value or reject the message; curl (and browsers) take it, and
    tests/http/test_conformance.py lists every difference from curl kept on
    purpose - this one is not there.  Actual: ``protocol_error`` "Duplicate
    Content-Length" where curl gets 200 "hello".  Expected: curl's reading, or
    the difference written down (then drop this test)."""
    curl = subprocess.run(
        ["curl", "-s", "--max-time", "10", raw.url("dup-length")],
        capture_output=True,
        check=False,
    )
    assert (curl.returncode, curl.stdout) == (0, b"hello")
    with Client() as client:
        response = client.get(raw.url("dup-length"))
    assert (response.status_code, response.content) == (200, b"hello")
