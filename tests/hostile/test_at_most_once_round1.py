# ruff: noqa: E501  (case tables and assertion messages name the claim in full)
"""Hostile round 1 of "at most once", written from README.md, docs/http.md
("What is sent, and what is sent again", "HTTP/2" failures), docs/fetch.md
(``--retries``), docs/bulk.md, docs/dropins.md and docs/architecture*.md
only, not the code.

The rule: a request that is not idempotent (POST here) is sent at most once
unless the protocol proves it was not processed (HTTP/2 REFUSED_STREAM, a
GOAWAY whose last stream id is below the stream, a connection seen closed
before a byte of the request went out). Idempotent requests may be sent again
where the docs say they are: a reused keep-alive connection closed before any
byte of an answer (every front end, unasked), ``--retries`` / ``retries=``
(transient failures and 408/429/5xx), the requests adapter's ``max_retries``
(urllib3's ``Retry``).

Servers (all here, on 127.0.0.1, port 0): a threaded HTTP/1.1 server of raw
sockets and an h2c server on the ``h2`` package's state machine. Each counts
every request that arrives (method, path, the connection and the request's
place on it) - on HTTP/1.1 as soon as its head is read, or peeked at, so a
request the server could have acted on counts - and misbehaves as the case
says: closes, resets (SO_LINGER 0), cuts status lines and bodies, answers
503/429 with Retry-After, redirects 307/308, never says 100 Continue, stalls
past the read timeout, closes a keep-alive connection as it is reused (before
and after reading the request), GOAWAY below / at / above the stream,
RST_STREAM with REFUSED_STREAM, INTERNAL_ERROR, CANCEL, PROTOCOL_ERROR.

Where the docs allow more than "at most once", the test follows the docs and
says so: ``--retries`` / ``retries=`` resend a POST after a 408/429/5xx
(fetch.md: "the server answered; curl's --retry does the same") - a 500 or
503 does not prove the POST was not processed, so that is the docs' choice,
not the protocol's proof.

Every case runs through every front end the docs give: ``surge.Client``,
``surge.AsyncClient``, ``surge fetch`` (a child process, ``--retries 3``;
a JSONL input with each line's method and body, and curl's ``-X``/
``--data-binary @FILE``),
``surge.fetch_all`` (``retries=3``), the requests adapter
(``max_retries=3``), and httpx's ``HTTPTransport`` / ``AsyncHTTPTransport``
(which have no retries to enable: ``retries=`` is refused by name). Each run
is bounded (``max_time``, a thread join, a subprocess timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import httpx
import pytest
import requests

import surge
import surge.http
import surge.httpx
import surge.requests

SURGE = [sys.executable, "-m", "surge.cli"]

#: One try's bound (max_time) in every front end: the slow cases stall past it.
MAX_TIME = 2.0
#: The most any one front-end run may take before it counts as a hang.
HANG_S = 40.0
#: ``--retries`` / ``retries=`` / ``max_retries`` given where a front end has them.
RETRIES = 3
#: How long a server connection thread lives at most (every loop bounded).
CONN_LIFE_S = 30.0

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------
# What the servers saw


@dataclass
class Arrival:
    method: str
    path: str
    conn: int  # the connection's number, in accept order, from 1
    index: int  # the request's place on its connection, from 1
    unprocessed: bool = False  # the server told the client so (REFUSED_STREAM, GOAWAY below)


@dataclass
class Log:
    arrivals: list[Arrival] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    misbehaved: int = 0  # how many times the case's misbehaviour ran

    def add(self, arrival: Arrival) -> Arrival:
        with self.lock:
            self.arrivals.append(arrival)
        return arrival

    def of(self, method: str, path: str) -> list[Arrival]:
        with self.lock:
            return [a for a in self.arrivals if a.method == method and a.path == path]


def _linger0(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _rst(sock: socket.socket) -> None:
    _linger0(sock)
    with contextlib.suppress(OSError):
        sock.close()


def _fin(sock: socket.socket) -> None:
    """A clean FIN: shut the write side, drain what the client still sends
    (so no unread byte turns the close into a RST), close (bounded)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + 3
    with contextlib.suppress(OSError):
        sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                if not sock.recv(65536):
                    break
            except TimeoutError:
                continue
    with contextlib.suppress(OSError):
        sock.close()


def _hang(sock: socket.socket, stop: threading.Event) -> None:
    """Say nothing until the client goes away (bounded), reading nothing."""
    deadline = time.monotonic() + CONN_LIFE_S
    while time.monotonic() < deadline and not stop.is_set():
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            try:
                if not sock.recv(1, socket.MSG_PEEK):
                    break
            except OSError:
                break
            time.sleep(0.05)
    with contextlib.suppress(OSError):
        sock.close()


class _Server:
    """Accepts on 127.0.0.1:0 in a thread; each connection in a thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, log: Log | None = None) -> None:
        self.log = log or Log()
        self.stop = threading.Event()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(64)
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.conns = 0
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        deadline = time.monotonic() + 300
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.conns += 1
            thread = threading.Thread(target=self._serve, args=(sock, self.conns), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket, conn: int) -> None:
        try:
            sock.settimeout(CONN_LIFE_S)
            self.serve(sock, conn)
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def serve(self, sock: socket.socket, conn: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop.set()
        self.acceptor.join(5)
        with contextlib.suppress(OSError):
            self.listener.close()
        for thread in self.threads:
            thread.join(5)


# --------------------------------------------------------------------------
# HTTP/1.1


def _read_head(sock: socket.socket, buf: bytearray) -> bytes | None:
    while b"\r\n\r\n" not in buf:
        if len(buf) > 65536:
            raise ValueError("head too long")
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    end = buf.index(b"\r\n\r\n") + 4
    head = bytes(buf[:end])
    del buf[:end]
    return head


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    path = target.split("?", 1)[0]
    if path.startswith("http://"):
        path = "/" + path.split("/", 3)[3]
    return method, path, headers


def _read_body(sock: socket.socket, buf: bytearray, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        for _ in range(1 << 20):  # chunks at most (each read is bounded by the socket's timeout)
            while b"\r\n" not in buf:
                if len(buf) > 65536:
                    raise ValueError("chunk size line too long")
                chunk = sock.recv(65536)
                if not chunk:
                    raise ValueError("eof in chunked body")
                buf += chunk
            line_end = buf.index(b"\r\n")
            size = int(bytes(buf[:line_end]).split(b";")[0], 16)
            del buf[: line_end + 2]
            while len(buf) < size + 2:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ValueError("eof in chunk")
                buf += chunk
            body += buf[:size]
            del buf[: size + 2]
            if size == 0:
                return bytes(body)
        raise ValueError("too many chunks")
    length = int(headers.get("content-length", "0") or 0)
    while len(buf) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("eof in body")
        buf += chunk
    body = bytes(buf[:length])
    del buf[:length]
    return body


def _response(
    status: int,
    body: bytes = b"ok",
    headers: tuple[tuple[str, str], ...] = (),
    version: str = "HTTP/1.1",
) -> bytes:
    reason = {
        200: "OK",
        408: "Request Timeout",
        413: "Content Too Large",
        303: "See Other",
        307: "Temporary Redirect",
        308: "Permanent Redirect",
        429: "Too Many Requests",
        500: "Internal Server Error",
        503: "Service Unavailable",
    }.get(status, "X")
    lines = [
        f"{version} {status} {reason}",
        f"Content-Length: {len(body)}",
        *(f"{n}: {v}" for n, v in headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


#: What the HTTP/1.1 server does with one request (after its head was read,
#: unless the name starts with ``peek``: then before reading it). The
#: vocabulary of the case table.
H1_ACTIONS = {
    "ok",
    "ok_close",  # 200 with Connection: close, then FIN
    "ok_close_header_kept_open",  # 200 with Connection: close, but the socket stays open for more
    "ok_http10",  # HTTP/1.0 200 without keep-alive, socket kept open
    "ok_idle_close",  # 200 keep-alive, then FIN after 50 ms idle
    "fin_head",  # head read, body not: FIN
    "rst_head",
    "fin_body",  # whole request read: FIN
    "rst_body",
    "partial_status",  # "HTTP/1.1 2", FIN
    "partial_status_rst",
    "partial_head",  # status line and a header, no blank line, FIN
    "cut_body",  # Content-Length 100, 10 bytes, FIN
    "cut_body_rst",
    "cut_chunked",  # one chunk, no last chunk, FIN
    "garbage",  # not HTTP, FIN
    "status_503_ra0",
    "status_503_ra1",
    "status_429_ra0",
    "status_500",
    "redirect_307",  # to /t2
    "redirect_308",
    "redirect_303",
    "hang",  # whole request read, no answer
    "hang_head",  # head read, body never read, no answer (no 100 Continue)
    "head_then_hang",  # status and headers of a 100-byte body, then silence
    "continue_then_fin",  # 100 Continue, body read, FIN
    "continue_then_ok",
    "interim_then_fin",  # 103 Early Hints, FIN
    "peek_rst",  # before reading the request: its bytes are there, RST
    "peek_fin",  # before reading: FIN (shutdown), the bytes left unread
    "ok_idle_408",  # 200 keep-alive; after 50 ms idle an unasked 408 with Connection: close, FIN, the next request still read
    "ok_then_halfclose",  # 200 keep-alive, FIN at once, yet the next request is still read (then closed)
    "ok_extra_bytes",  # 200 with Content-Length 2 and 5 bytes more: junk left on a keep-alive connection
    "early_413_close",  # head read: 413 and Connection: close before the body, then closed
    "rst_mid_body",  # head and part of the body read: RST
}


class H1Server(_Server):
    """``decide(arrival, log) -> action`` for each request (see H1_ACTIONS)."""

    def __init__(self, decide: Callable[[Arrival, Log], str], **where: Any) -> None:
        self.decide = decide
        super().__init__(**where)

    def serve(self, sock: socket.socket, conn: int) -> None:
        buf = bytearray()
        for index in range(1, 50):
            if not buf:
                # the request's bytes before reading them (the peek actions)
                readable, _, _ = select.select([sock], [], [], CONN_LIFE_S)
                if not readable or self.stop.is_set():
                    return
                peeked = sock.recv(65536, socket.MSG_PEEK)
                if not peeked:
                    return
                if b"\r\n\r\n" in peeked:
                    method, path, _ = _parse_head(peeked[: peeked.index(b"\r\n\r\n") + 4])
                    probe = Arrival(method, path, conn, index)
                    action = self.decide(probe, self.log)
                    if action.startswith("peek"):
                        self.log.add(probe)
                        self.log.misbehaved += 1
                        if action == "peek_rst":
                            _rst(sock)
                        else:
                            with contextlib.suppress(OSError):
                                sock.shutdown(socket.SHUT_WR)
                            time.sleep(1.0)
                            _rst(sock)  # the bytes were never read
                        return
            head = _read_head(sock, buf)
            if head is None:
                return
            method, path, headers = _parse_head(head)
            arrival = self.log.add(Arrival(method, path, conn, index))
            action = self.decide(arrival, self.log)
            assert action in H1_ACTIONS, action
            if action != "ok":
                self.log.misbehaved += 1
            if action == "fin_head":
                return _fin(sock)
            if action == "early_413_close":
                sock.sendall(_response(413, b"too large", (("Connection", "close"),)))
                time.sleep(0.2)
                return _rst(sock)
            if action == "rst_mid_body":
                want = min(int(headers.get("content-length", "0") or 0) // 2, 1 << 20)
                deadline = time.monotonic() + 5
                while len(buf) < want and time.monotonic() < deadline:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                return _rst(sock)
            if action == "rst_head":
                return _rst(sock)
            if action == "hang_head":
                return _hang(sock, self.stop)
            if action in {"continue_then_fin", "continue_then_ok"}:
                sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            _read_body(sock, buf, headers)
            if action == "ok":
                sock.sendall(_response(200))
                continue
            if action == "continue_then_ok":
                sock.sendall(_response(200))
                continue
            if action == "ok_idle_close":
                sock.sendall(_response(200))
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable:
                    continue
                return _fin(sock)
            if action == "ok_idle_408":
                sock.sendall(_response(200))
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable:
                    continue
                sock.sendall(_response(408, b"", (("Connection", "close"),)))
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                head = _read_head(sock, buf)
                if head is not None:
                    method, path, _ = _parse_head(head)
                    self.log.add(Arrival(method, path, conn, index + 1))
                time.sleep(0.1)
                return _rst(sock)
            if action == "ok_then_halfclose":
                sock.sendall(_response(200))
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                head = _read_head(sock, buf)
                if head is not None:
                    method, path, _ = _parse_head(head)
                    self.log.add(Arrival(method, path, conn, index + 1))
                time.sleep(0.1)
                return _rst(sock)
            if action == "ok_extra_bytes":
                sock.sendall(_response(200) + b"JUNK!")
                continue
            if action == "ok_close":
                sock.sendall(_response(200, headers=(("Connection", "close"),)))
                return _fin(sock)
            if action == "ok_close_header_kept_open":
                sock.sendall(_response(200, headers=(("Connection", "close"),)))
                continue
            if action == "ok_http10":
                sock.sendall(_response(200, version="HTTP/1.0"))
                continue
            if action in {"fin_body", "continue_then_fin"}:
                return _fin(sock)
            if action == "rst_body":
                return _rst(sock)
            if action == "partial_status":
                sock.sendall(b"HTTP/1.1 2")
                return _fin(sock)
            if action == "partial_status_rst":
                sock.sendall(b"HTTP/1.1 2")
                time.sleep(0.05)
                return _rst(sock)
            if action == "partial_head":
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n")
                return _fin(sock)
            if action in {"cut_body", "cut_body_rst"}:
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                time.sleep(0.05)
                return _fin(sock) if action == "cut_body" else _rst(sock)
            if action == "cut_chunked":
                sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
                time.sleep(0.05)
                return _fin(sock)
            if action == "garbage":
                sock.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
                return _fin(sock)
            if action.startswith("status_"):
                _, code, *rest = action.split("_")
                extra = (("Retry-After", rest[0][2:]),) if rest else ()
                sock.sendall(_response(int(code), b"busy", extra))
                continue
            if action.startswith("redirect_"):
                code = int(action.split("_")[1])
                sock.sendall(_response(code, b"", (("Location", "/t2"),)))
                continue
            if action == "hang":
                return _hang(sock, self.stop)
            if action == "head_then_hang":
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                return _hang(sock, self.stop)
            if action == "interim_then_fin":
                sock.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n")
                return _fin(sock)
            raise AssertionError(action)
        return None


# --------------------------------------------------------------------------
# HTTP/2 in cleartext (prior knowledge), on the h2 package's state machine

E = h2.errors.ErrorCodes

H2_ACTIONS = {
    "ok",
    "status_503_ra0",
    "status_429_ra0",
    "redirect_307",
    "refused",  # RST_STREAM REFUSED_STREAM once the request is whole
    "refused_early",  # ... as soon as its HEADERS arrive, before its body
    "rst_internal",
    "rst_cancel",
    "rst_protocol",
    "headers_then_refused",  # a 200's HEADERS, then REFUSED_STREAM: it was processed
    "data_then_rst_internal",  # HEADERS (content-length 100), 10 bytes, INTERNAL_ERROR
    "goaway_below",  # GOAWAY last id = stream - 2 (NO_ERROR), then TCP close
    "goaway_below_error",  # ... with INTERNAL_ERROR
    "goaway_below_early",  # ... as soon as the HEADERS arrive
    "goaway_at_close",  # GOAWAY last id = stream, then TCP close without an answer
    "goaway_at_then_ok",  # GOAWAY last id = stream, then the answer, then close
    "goaway_above_error",  # GOAWAY last id = stream + 100, INTERNAL_ERROR, close
    "headers_then_goaway_below",  # a 200's HEADERS, then GOAWAY below: it was processed
    "tcp_fin",  # the request whole: TCP FIN, no frame
    "tcp_rst",
    "headers_then_fin",  # a 200's HEADERS (content-length 100), then TCP FIN
    "hang",
    "goaway_max_then_fin",  # GOAWAY last id 2^31-1 (a graceful shutdown's first), then TCP FIN, no answer
    "interim_then_refused",  # a 103's HEADERS, then REFUSED_STREAM: its response had begun
    "interim_then_goaway_below",  # a 103's HEADERS, then GOAWAY below it, close
    "ok_then_goaway_idle",  # answered, then GOAWAY last id = it; the connection kept open 3 s, new streams ignored
    "ok_then_mute",  # answered, then never another byte on this connection: PINGs unanswered, requests counted, unanswered
    "batch_goaway_mid",  # hold the stream; once 3 are held (or 1 s): GOAWAY last id = the middle one, TCP close
}


class H2Server(_Server):
    """``decide(arrival, log) -> action`` for each stream (see H2_ACTIONS)."""

    def __init__(
        self, decide: Callable[[Arrival, Log], str], *, early_preface: bool = False
    ) -> None:
        self.decide = decide
        self.early_preface = early_preface
        self.batch: dict[int, Arrival] = {}  # streams held by batch_goaway_mid
        self.batch_t0 = 0.0
        self.batch_last = 0
        super().__init__()

    def serve(self, sock: socket.socket, conn: int) -> None:
        h2c = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        if not self.early_preface:
            # the server's preface after the client's: a SETTINGS that comes
            # first is test_h2c_server_preface_first's case, not this file's
            readable, _, _ = select.select([sock], [], [], CONN_LIFE_S)
            if not readable:
                return
        h2c.initiate_connection()
        # wide windows: the server acknowledges what it takes, and a body it
        # ignores (a refused stream's) never stalls the next
        h2c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
        h2c.increment_flow_control_window(1 << 30)
        sock.sendall(h2c.data_to_send())
        if self.early_preface:
            time.sleep(0.3)  # a server busy a moment after its SETTINGS went out
        streams: dict[int, tuple[Arrival, str]] = {}
        index = 0
        muted = False  # ok_then_mute: nothing more goes out
        deadline = time.monotonic() + CONN_LIFE_S
        while time.monotonic() < deadline and not self.stop.is_set():
            readable, _, _ = select.select([sock], [], [], 0.2)
            if not readable:
                continue
            data = sock.recv(65536)
            if not data:
                return
            try:
                events = h2c.receive_data(data)
            except h2.exceptions.ProtocolError:
                return
            done: list[tuple[int, str]] = []  # (stream, action) acted on in this read
            for event in events:
                if muted:
                    if isinstance(event, h2.events.RequestReceived):
                        headers = dict(event.headers)
                        index += 1
                        self.log.add(
                            Arrival(headers[":method"], headers[":path"].split("?")[0], conn, index)
                        )
                    continue
                if isinstance(event, h2.events.RequestReceived):
                    headers = dict(event.headers)
                    index += 1
                    arrival = self.log.add(
                        Arrival(headers[":method"], headers[":path"].split("?")[0], conn, index)
                    )
                    action = self.decide(arrival, self.log)
                    assert action in H2_ACTIONS, action
                    if action != "ok":
                        self.log.misbehaved += 1
                    streams[event.stream_id] = (arrival, action)
                    if action.endswith("_early"):
                        if self.act(sock, h2c, event.stream_id, arrival, action):
                            return
                        streams.pop(event.stream_id)
                    elif event.stream_ended is not None:
                        streams.pop(event.stream_id)
                        done.append((event.stream_id, action))
                        if self.act(sock, h2c, event.stream_id, arrival, action):
                            return
                elif isinstance(event, h2.events.DataReceived):
                    with contextlib.suppress(Exception):
                        h2c.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id in streams:
                    arrival, action = streams.pop(event.stream_id)
                    done.append((event.stream_id, action))
                    if self.act(sock, h2c, event.stream_id, arrival, action):
                        return
            out = h2c.data_to_send()
            if not muted:
                sock.sendall(out)
            muted = muted or any(action == "ok_then_mute" for _, action in done)
            if self.batch and (len(self.batch) >= 3 or time.monotonic() - self.batch_t0 > 1.0):
                return self.goaway_mid(sock, h2c)

    def goaway_mid(self, sock: socket.socket, h2c: h2.connection.H2Connection) -> None:
        """GOAWAY with the middle held stream as the last: those above it are
        unprocessed (and marked so), those at or below it were processed."""
        sids = sorted(self.batch)
        last = sids[len(sids) // 2]
        for sid in sids:
            if sid > last:
                self.batch[sid].unprocessed = True
        self.batch_last = last
        h2c.close_connection(last_stream_id=last)
        sock.sendall(h2c.data_to_send())
        time.sleep(0.05)
        _fin(sock)

    @staticmethod
    def _respond(
        h2c: h2.connection.H2Connection,
        sid: int,
        status: int,
        body: bytes = b"ok",
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        h2c.send_headers(
            sid, [(":status", str(status)), ("content-length", str(len(body))), *extra]
        )
        h2c.send_data(sid, body, end_stream=True)

    def act(
        self,
        sock: socket.socket,
        h2c: h2.connection.H2Connection,
        sid: int,
        arrival: Arrival,
        action: str,
    ) -> bool:
        """Do ``action`` to stream ``sid``; True when the connection is done."""
        if action in {"ok", "ok_then_mute"}:
            self._respond(h2c, sid, 200)
            return False
        if action == "goaway_max_then_fin":
            h2c.close_connection(last_stream_id=(1 << 31) - 1)
            sock.sendall(h2c.data_to_send())
            time.sleep(0.05)
            _fin(sock)
            return True
        if action in {"interim_then_refused", "interim_then_goaway_below"}:
            h2c.send_headers(sid, [(":status", "103"), ("link", "</a>; rel=preload")])
            if action == "interim_then_refused":
                h2c.reset_stream(sid, E.REFUSED_STREAM)
                return False
            h2c.close_connection(last_stream_id=max(sid - 2, 0))
            sock.sendall(h2c.data_to_send())
            time.sleep(0.05)
            _fin(sock)
            return True
        if action == "ok_then_goaway_idle":
            self._respond(h2c, sid, 200)
            h2c.close_connection(last_stream_id=sid)
            sock.sendall(h2c.data_to_send())
            deadline = time.monotonic() + 3
            sock.settimeout(0.2)
            while time.monotonic() < deadline and not self.stop.is_set():
                try:
                    if not sock.recv(65536):
                        break  # the client closed it: it heard the GOAWAY
                except TimeoutError:
                    continue
                except OSError:
                    break
            _fin(sock)
            return True
        if action == "batch_goaway_mid":
            if not self.batch:
                self.batch_t0 = time.monotonic()
            self.batch[sid] = arrival
            return False
        if action.startswith("status_"):
            _, code, *rest = action.split("_")
            self._respond(
                h2c, sid, int(code), b"busy", (("retry-after", rest[0][2:]),) if rest else ()
            )
            return False
        if action == "redirect_307":
            self._respond(h2c, sid, 307, b"", (("location", "/t2"),))
            return False
        if action in {"refused", "refused_early"}:
            arrival.unprocessed = True
            h2c.reset_stream(sid, E.REFUSED_STREAM)
            return False
        if action in {"rst_internal", "rst_cancel", "rst_protocol"}:
            code = {
                "rst_internal": E.INTERNAL_ERROR,
                "rst_cancel": E.CANCEL,
                "rst_protocol": E.PROTOCOL_ERROR,
            }[action]
            h2c.reset_stream(sid, code)
            return False
        if action == "headers_then_refused":
            h2c.send_headers(sid, [(":status", "200"), ("content-length", "100")])
            h2c.reset_stream(sid, E.REFUSED_STREAM)
            return False
        if action == "data_then_rst_internal":
            h2c.send_headers(sid, [(":status", "200"), ("content-length", "100")])
            h2c.send_data(sid, b"0123456789")
            h2c.reset_stream(sid, E.INTERNAL_ERROR)
            return False
        if action in {"goaway_below", "goaway_below_error", "goaway_below_early"}:
            arrival.unprocessed = True
            code = E.INTERNAL_ERROR if action == "goaway_below_error" else E.NO_ERROR
            h2c.close_connection(error_code=code, last_stream_id=max(sid - 2, 0))
            sock.sendall(h2c.data_to_send())
            _fin(sock)
            return True
        if action == "goaway_at_close":
            h2c.close_connection(last_stream_id=sid)
            sock.sendall(h2c.data_to_send())
            time.sleep(0.05)
            _fin(sock)
            return True
        if action == "goaway_at_then_ok":
            self._respond(h2c, sid, 200)
            answer = h2c.data_to_send()
            h2c.close_connection(last_stream_id=sid)
            sock.sendall(h2c.data_to_send())  # the GOAWAY first,
            time.sleep(0.05)
            sock.sendall(answer)  # then the promised stream's answer
            time.sleep(0.2)
            _fin(sock)
            return True
        if action == "goaway_above_error":
            h2c.close_connection(error_code=E.INTERNAL_ERROR, last_stream_id=sid + 100)
            sock.sendall(h2c.data_to_send())
            time.sleep(0.05)
            _fin(sock)
            return True
        if action == "headers_then_goaway_below":
            h2c.send_headers(sid, [(":status", "200"), ("content-length", "100")])
            h2c.close_connection(last_stream_id=max(sid - 2, 0))
            sock.sendall(h2c.data_to_send())
            time.sleep(0.05)
            _fin(sock)
            return True
        if action == "tcp_fin":
            _fin(sock)
            return True
        if action == "tcp_rst":
            _rst(sock)
            return True
        if action == "headers_then_fin":
            h2c.send_headers(sid, [(":status", "200"), ("content-length", "100")])
            sock.sendall(h2c.data_to_send())
            time.sleep(0.05)
            _fin(sock)
            return True
        if action == "hang":
            sock.sendall(h2c.data_to_send())
            _hang(sock, self.stop)
            return True
        raise AssertionError(action)


# --------------------------------------------------------------------------
# The case table


@dataclass(frozen=True)
class Case:
    name: str
    proto: str  # "h1" or "h2"
    first: str  # the action for the first arrival of the target (/t)
    again: str = "ok"  # for every later arrival of /t
    warm: str | None = (
        None  # a GET /warm first on the same client (a keep-alive connection to reuse)
    )
    reused_only: bool = False  # ``first`` only when /t arrives on a reused connection (else "ok")
    t2: str = "ok"  # what /t2 (a redirect's target) does
    wait_s: float = 0.0  # between the warm request and the target
    body: bytes = b"marker-body"
    headers: tuple[tuple[str, str], ...] = ()
    proof: bool = False  # the protocol proves the first try was not processed: one resend allowed
    redirect: bool = False  # follow redirects
    # The POST's outcome: "ok", a status, or error classes (surge's names).
    post: Any = ("connection_reset",)
    # The retried POST the docs allow for ``--retries`` (fetch, fetch_all): a
    # status answered (fetch.md: "A request that is not idempotent (POST,
    # PATCH) is retried after such a status (the server answered; curl's
    # --retry does the same)").
    post_retried_on_status: bool = False
    # GET: expected arrivals of /t by retry family, when the docs promise them
    # ("none": Client, AsyncClient, httpx; "fetch": --retries 3 / retries=3;
    # "urllib3": the adapter's max_retries=3). Missing: GET not run.
    get: tuple[tuple[str, int], ...] = ()
    get_outcome: Any = None  # the GET's outcome where it is run (None: not checked)
    method: str = "POST"  # the request that is not idempotent: POST, PATCH, any other token
    # The idempotent methods Case.get is checked with. PUT, DELETE and OPTIONS
    # are idempotent here as http.md says (RFC 9110 9.2.2: resent once after a
    # stale keep-alive connection); the docs give no way to mark a PUT or
    # DELETE as not idempotent, so none is tested as such.
    idem: tuple[str, ...] = ("GET",)
    proxy: bool = False  # the server is a forward proxy: /warm to origin-a.test, /t to origin-b.test through it


R = RETRIES
RESET = ("connection_reset",)
RESET_OR_PROTO = ("connection_reset", "protocol_error")
TIMEOUTS = ("read_timeout", "write_timeout")
BIG = b"x" * (
    8 * 1024 * 1024
)  # fills the socket buffers: a server that reads nothing stalls the upload

# one case a line: the table
# fmt: off
CASES = [
    # --- HTTP/1.1, a fresh connection (the first request on a connection is never resent unasked)
    Case("h1_fin_after_head", "h1", "fin_head", "fin_head", get=(("none", 1), ("fetch", R + 1), ("urllib3", R + 1))),
    Case("h1_rst_after_head", "h1", "rst_head", "rst_head"),
    Case("h1_fin_after_body", "h1", "fin_body", "fin_body", get=(("none", 1), ("fetch", R + 1), ("urllib3", R + 1))),
    Case("h1_rst_after_body", "h1", "rst_body", "rst_body", get=(("none", 1), ("fetch", R + 1), ("urllib3", R + 1))),
    Case("h1_partial_status_fin", "h1", "partial_status", "partial_status", post=RESET_OR_PROTO),
    Case("h1_partial_status_rst", "h1", "partial_status_rst", "partial_status_rst", post=RESET_OR_PROTO),
    Case("h1_partial_head_fin", "h1", "partial_head", "partial_head", post=RESET_OR_PROTO),
    Case("h1_cut_body_fin", "h1", "cut_body", "cut_body", post=RESET_OR_PROTO),
    Case("h1_cut_body_rst", "h1", "cut_body_rst", "cut_body_rst", post=RESET_OR_PROTO),
    Case("h1_cut_chunked_fin", "h1", "cut_chunked", "cut_chunked", post=RESET_OR_PROTO),
    Case("h1_garbage_answer", "h1", "garbage", "garbage", post=("protocol_error",)),
    Case("h1_interim_103_then_fin", "h1", "interim_then_fin", "interim_then_fin", post=RESET_OR_PROTO),
    Case("h1_hang_past_read_timeout", "h1", "hang", "hang", post=("read_timeout",)),
    Case("h1_head_then_hang", "h1", "head_then_hang", "head_then_hang", post=("read_timeout",)),
    Case("h1_503_retry_after_0", "h1", "status_503_ra0", "status_503_ra0", post=503, post_retried_on_status=True, get=(("none", 1), ("fetch", R + 1), ("urllib3", R + 1)), get_outcome=503),
    Case("h1_503_retry_after_1", "h1", "status_503_ra1", "ok", post=503, post_retried_on_status=True),
    Case("h1_429_retry_after_0", "h1", "status_429_ra0", "status_429_ra0", post=429, post_retried_on_status=True),
    Case("h1_500", "h1", "status_500", "status_500", post=500, post_retried_on_status=True),
    Case("h1_307_then_t2_fin", "h1", "redirect_307", "redirect_307", t2="fin_body", redirect=True),
    Case("h1_308_then_t2_rst", "h1", "redirect_308", "redirect_308", t2="rst_body", redirect=True),
    Case("h1_307_then_t2_hang", "h1", "redirect_307", "redirect_307", t2="hang", redirect=True, post=("read_timeout",)),
    Case("h1_303_then_get_ok", "h1", "redirect_303", "redirect_303", redirect=True, post="ok"),
    Case("h1_expect_100_never_continue", "h1", "hang_head", "hang_head", headers=(("Expect", "100-continue"),), post=TIMEOUTS),
    Case("h1_big_body_never_read", "h1", "hang_head", "hang_head", body=BIG, post=TIMEOUTS),
    Case("h1_big_body_fin_after_head", "h1", "fin_head", "fin_head", body=BIG, post=(*RESET_OR_PROTO, "write_timeout")),
    Case("h1_continue_then_fin", "h1", "continue_then_fin", "continue_then_fin", headers=(("Expect", "100-continue"),), post=RESET_OR_PROTO),
    Case("h1_continue_then_ok", "h1", "continue_then_ok", headers=(("Expect", "100-continue"),), post="ok"),
    # --- HTTP/1.1, the stale keep-alive race: a reused connection the server closes as it is reused
    Case("h1_idle_closed_before_reuse", "h1", "ok", warm="ok_idle_close", wait_s=0.4, proof=True, post="ok", get=(("none", 1), ("fetch", 1), ("urllib3", 1)), get_outcome="ok"),
    Case("h1_reused_fin_after_head", "h1", "fin_head", warm="ok", reused_only=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok"),
    Case("h1_reused_fin_after_body", "h1", "fin_body", warm="ok", reused_only=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok", idem=("GET", "PUT", "DELETE", "OPTIONS")),
    Case("h1_reused_rst_after_head", "h1", "rst_head", warm="ok", reused_only=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok"),
    Case("h1_reused_rst_after_body", "h1", "rst_body", warm="ok", reused_only=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok"),
    Case("h1_reused_peek_rst_unread", "h1", "peek_rst", warm="ok", reused_only=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok"),
    Case("h1_reused_peek_fin_unread", "h1", "peek_fin", warm="ok", reused_only=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok"),
    Case("h1_reused_fin_body_every_conn", "h1", "fin_body", "fin_body", warm="ok"),
    Case("h1_reused_partial_status", "h1", "partial_status", warm="ok", reused_only=True, post=RESET_OR_PROTO),
    Case("h1_reused_hang", "h1", "hang", warm="ok", reused_only=True, post=("read_timeout",)),
    Case("h1_reused_503", "h1", "status_503_ra0", "status_503_ra0", warm="ok", post=503, post_retried_on_status=True),
    Case("h1_connection_close_kept_open", "h1", "fin_body", warm="ok_close_header_kept_open", reused_only=True, post="ok"),
    Case("h1_http10_kept_open", "h1", "fin_body", warm="ok_http10", reused_only=True, post="ok"),
    # --- h2c (prior knowledge)
    Case("h2_refused_once", "h2", "refused", "ok", proof=True, post="ok", get=(("none", 2), ("fetch", 2)), get_outcome="ok"),
    Case("h2_refused_always", "h2", "refused", "refused", proof=True, post=RESET_OR_PROTO),
    Case("h2_refused_before_body", "h2", "refused_early", "ok", body=b"y" * 200_000, proof=True, post="ok"),
    Case("h2_rst_internal_error", "h2", "rst_internal", "rst_internal", get=(("none", 1), ("fetch", R + 1))),
    Case("h2_rst_cancel", "h2", "rst_cancel", "rst_cancel"),
    Case("h2_rst_protocol_error", "h2", "rst_protocol", "rst_protocol", post=("protocol_error",)),
    Case("h2_headers_then_refused", "h2", "headers_then_refused", "headers_then_refused"),
    Case("h2_data_then_rst_internal", "h2", "data_then_rst_internal", "data_then_rst_internal"),
    Case("h2_goaway_below", "h2", "goaway_below", "ok", proof=True, post="ok", get=(("none", 2), ("fetch", 2)), get_outcome="ok"),
    Case("h2_goaway_below_internal_error", "h2", "goaway_below_error", "ok", proof=True, post="ok"),
    Case("h2_goaway_below_before_body", "h2", "goaway_below_early", "ok", body=b"y" * 200_000, proof=True, post="ok"),
    Case("h2_goaway_below_every_conn", "h2", "goaway_below", "goaway_below", proof=True, post=RESET_OR_PROTO),
    Case("h2_goaway_at_stream_then_close", "h2", "goaway_at_close", "goaway_at_close"),
    Case("h2_goaway_at_stream_then_answer", "h2", "goaway_at_then_ok", "goaway_at_then_ok", post="ok"),
    Case("h2_goaway_above_internal_error", "h2", "goaway_above_error", "goaway_above_error"),
    Case("h2_headers_then_goaway_below", "h2", "headers_then_goaway_below", "headers_then_goaway_below"),
    Case("h2_tcp_fin_after_request", "h2", "tcp_fin", "tcp_fin", get=(("none", 1), ("fetch", R + 1))),
    Case("h2_tcp_rst_after_request", "h2", "tcp_rst", "tcp_rst"),
    Case("h2_headers_then_fin", "h2", "headers_then_fin", "headers_then_fin", post=RESET_OR_PROTO),
    Case("h2_hang_past_read_timeout", "h2", "hang", "hang", post=("read_timeout",)),
    Case("h2_503_retry_after_0", "h2", "status_503_ra0", "status_503_ra0", post=503, post_retried_on_status=True, get=(("none", 1), ("fetch", R + 1)), get_outcome=503),
    Case("h2_429_retry_after_0", "h2", "status_429_ra0", "status_429_ra0", post=429, post_retried_on_status=True),
    Case("h2_307_then_t2_tcp_fin", "h2", "redirect_307", "redirect_307", t2="tcp_fin", redirect=True),
    Case("h2_307_then_t2_rst_internal", "h2", "redirect_307", "redirect_307", t2="rst_internal", redirect=True),
    # h2c on a reused connection: a GET /warm on stream 1, the target on stream 3
    Case("h2_reused_goaway_below", "h2", "goaway_below", "ok", warm="ok", reused_only=True, proof=True, post="ok"),
    Case("h2_reused_refused", "h2", "refused", "ok", warm="ok", reused_only=True, proof=True, post="ok"),
    Case("h2_reused_tcp_fin", "h2", "tcp_fin", warm="ok", reused_only=True),
    Case("h2_reused_tcp_rst", "h2", "tcp_rst", warm="ok", reused_only=True),
    Case("h2_reused_rst_cancel", "h2", "rst_cancel", warm="ok", reused_only=True),
    Case("h2_reused_goaway_at_then_close", "h2", "goaway_at_close", warm="ok", reused_only=True),
    # --- more of the race, other methods that are not idempotent
    Case("h1_fin_right_after_response", "h1", "ok", warm="ok_then_halfclose", post=("ok", *RESET)),
    Case("h1_idle_408_before_reuse", "h1", "ok", warm="ok_idle_408", wait_s=0.4, post=("ok", 408), get=(("none", 1), ("fetch", 1), ("urllib3", 1)), get_outcome="ok"),
    Case("h1_junk_after_warm_response", "h1", "ok", warm="ok_extra_bytes", post=("ok", "protocol_error", "connection_reset")),
    Case("h1_early_413_big_body", "h1", "early_413_close", "early_413_close", body=BIG, post=(413, "connection_reset", "write_timeout")),
    Case("h1_reused_rst_mid_big_body", "h1", "rst_mid_body", warm="ok", reused_only=True, body=BIG, post=(*RESET, "write_timeout")),
    Case("h1_reused_expect_fin_after_head", "h1", "fin_head", warm="ok", reused_only=True, headers=(("Expect", "100-continue"),), post=RESET_OR_PROTO),
    Case("h1_reused_big_body_fin_after_head", "h1", "fin_head", warm="ok", reused_only=True, body=BIG, post=(*RESET_OR_PROTO, "write_timeout")),
    Case("h1_patch_reused_fin_after_body", "h1", "fin_body", warm="ok", reused_only=True, method="PATCH"),
    Case("h1_patch_fin_after_body", "h1", "fin_body", "fin_body", method="PATCH"),
    Case("h1_purge_reused_rst_after_body", "h1", "rst_body", warm="ok", reused_only=True, method="PURGE"),
    Case("h1_patch_hang", "h1", "hang", "hang", method="PATCH", post=("read_timeout",)),
    Case("h2_patch_tcp_fin_after_request", "h2", "tcp_fin", "tcp_fin", method="PATCH"),
    Case("h2_patch_rst_internal_error", "h2", "rst_internal", "rst_internal", method="PATCH"),
    Case("h2_patch_goaway_at_stream_then_close", "h2", "goaway_at_close", "goaway_at_close", method="PATCH"),
    # --- through a forward proxy (the case's server): one keep-alive connection to it carries every origin's requests
    Case("h1_proxy_fin_after_body", "h1", "fin_body", "fin_body", proxy=True, get=(("none", 1), ("fetch", R + 1), ("urllib3", R + 1))),
    Case("h1_proxy_reused_fin_after_body", "h1", "fin_body", warm="ok", reused_only=True, proxy=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok"),
    Case("h1_proxy_reused_rst_after_head", "h1", "rst_head", warm="ok", reused_only=True, proxy=True),
    Case("h1_proxy_reused_peek_rst_unread", "h1", "peek_rst", warm="ok", reused_only=True, proxy=True, get=(("none", 2), ("fetch", 2), ("urllib3", 2)), get_outcome="ok"),
    Case("h1_proxy_idle_closed_before_reuse", "h1", "ok", warm="ok_idle_close", wait_s=0.4, proxy=True, proof=True, post="ok"),
    Case("h1_proxy_reused_hang", "h1", "hang", warm="ok", reused_only=True, proxy=True, post=("read_timeout",)),
    Case("h2_goaway_max_then_fin", "h2", "goaway_max_then_fin", "goaway_max_then_fin"),
    Case("h2_interim_103_then_refused", "h2", "interim_then_refused", "interim_then_refused"),
    Case("h2_interim_103_then_goaway_below", "h2", "interim_then_goaway_below", "interim_then_goaway_below"),
    Case("h2_idle_goaway_then_kept_open", "h2", "ok", warm="ok_then_goaway_idle", wait_s=0.3, post="ok"),
    # http.md: a connection idle 10 s is PINGed first; no answer in 2 s: closed, the request (not yet sent) goes on a new one
    Case("h2_idle_10s_ping_never_answered", "h2", "ok", warm="ok_then_mute", wait_s=10.5, post="ok"),
    Case("h2_purge_reused_tcp_fin", "h2", "tcp_fin", warm="ok", reused_only=True, method="PURGE"),
]
# fmt: on

FRONT_ENDS = ["client", "async", "cli", "cli_d", "fetch_all", "requests", "httpx", "httpx_async"]
#: Which retry family each front end is in (see Case.get).
FAMILY = {
    "client": "none",
    "async": "none",
    "httpx": "none",
    "httpx_async": "none",
    "cli": "fetch",
    "cli_d": "fetch",
    "fetch_all": "fetch",
    "requests": "urllib3",
}


def decider(case: Case) -> Callable[[Arrival, Log], str]:
    def decide(arrival: Arrival, log: Log) -> str:
        if arrival.path == "/warm":
            return case.warm or "ok"
        if arrival.path == "/t2":
            return case.t2
        if arrival.path != "/t":
            return "ok"
        if case.reused_only and arrival.index < 2:
            return "ok"
        earlier = [a for a in log.of(arrival.method, "/t") if a is not arrival]
        return case.again if earlier else case.first

    return decide


@contextlib.contextmanager
def server_for(case: Case) -> Iterator[_Server]:
    server: _Server = H1Server(decider(case)) if case.proto == "h1" else H2Server(decider(case))
    try:
        yield server
    finally:
        server.close()


# --------------------------------------------------------------------------
# The front ends: each sends [warm GET], then the target; an Outcome per request


@dataclass
class Outcome:
    status: int | None = None
    error: str | None = None  # surge's error class (surge's own front ends)
    exc: str | None = None  # the exception's type, as raised


@dataclass(frozen=True)
class Send:
    method: str
    url: str
    body: bytes | None
    headers: tuple[tuple[str, str], ...]
    wait_s: float  # before sending it
    proxy: str | None = (
        None  # the case's server as the forward proxy (the URL's origin is then made up)
    )


def _surge_options(case: Case, proxy: str | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {"max_time": MAX_TIME, "connect_timeout": MAX_TIME}
    if case.proto == "h2":
        options["http2_prior_knowledge"] = True
    if proxy is not None:
        options["proxy"] = proxy
    return options


def _caught(exc: BaseException) -> Outcome:
    return Outcome(
        error=getattr(exc, "error_class", None),
        exc=f"{type(exc).__module__}.{type(exc).__qualname__}",
    )


def run_client(case: Case, sends: list[Send]) -> list[Outcome]:
    out = []
    with surge.Client(
        follow_redirects=case.redirect, **_surge_options(case, sends[0].proxy)
    ) as client:
        for send in sends:
            time.sleep(send.wait_s)
            try:
                response = client.request(
                    send.method, send.url, content=send.body, headers=list(send.headers)
                )
                out.append(Outcome(status=response.status_code))
            except surge.http.RequestError as exc:
                out.append(_caught(exc))
    return out


def run_async(case: Case, sends: list[Send]) -> list[Outcome]:
    async def main() -> list[Outcome]:
        out = []
        async with surge.AsyncClient(
            follow_redirects=case.redirect, **_surge_options(case, sends[0].proxy)
        ) as client:
            for send in sends:
                await asyncio.sleep(send.wait_s)
                try:
                    response = await client.request(
                        send.method, send.url, content=send.body, headers=list(send.headers)
                    )
                    out.append(Outcome(status=response.status_code))
                except surge.http.RequestError as exc:
                    out.append(_caught(exc))
        return out

    return asyncio.run(main())


def _items(sends: list[Send]) -> list[dict[str, Any]]:
    items = []
    for send in sends:
        item: dict[str, Any] = {"url": send.url, "method": send.method}
        if send.body is not None:
            item["body"] = send.body.decode()
        if send.headers:
            item["headers"] = [list(h) for h in send.headers]
        items.append(item)
    return items


def _record_outcomes(records: list[dict[str, Any]]) -> list[Outcome]:
    records.sort(key=lambda r: r["line"])
    return [
        Outcome(status=r["status"] if r["error"] is None else None, error=r["error"], exc=None)
        for r in records
    ]


def run_cli(case: Case, sends: list[Send], tmp: str) -> list[Outcome]:
    path = os.path.join(tmp, "in.jsonl")
    with open(path, "w") as f:
        for item in _items(sends):
            f.write(json.dumps(item) + "\n")
    args = [
        *SURGE,
        "fetch",
        path,
        "-c",
        "1",
        "--retries",
        str(RETRIES),
        "--max-time",
        str(MAX_TIME),
        "--connect-timeout",
        str(MAX_TIME),
        "-q",
        "--no-progress",
        "--max-input-line",
        "32M",
    ]
    if case.redirect:
        args.append("-L")
    if case.proto == "h2":
        args.append("--http2-prior-knowledge")
    if sends[0].proxy is not None:
        args += ["-x", sends[0].proxy]
    if any(s.wait_s for s in sends):
        args += ["--rate-per-host", str(1 / max(s.wait_s for s in sends))]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = subprocess.run(args, capture_output=True, timeout=HANG_S, env=env)
    assert proc.returncode == 0, (
        f"surge fetch exit {proc.returncode}: {proc.stderr.decode()[-2000:]}"
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(records) == len(sends), proc.stdout
    return _record_outcomes(records)


def run_cli_d(case: Case, sends: list[Send], tmp: str) -> list[Outcome]:
    """``surge fetch URLS -X METHOD --data-binary @FILE -H ...``: curl's way, one
    method and body for every line (a warm-up is sent with the target's)."""
    target = sends[-1]
    urls = os.path.join(tmp, "urls.txt")
    with open(urls, "w") as f:
        f.write("".join(s.url + "\n" for s in sends))
    args = [
        *SURGE,
        "fetch",
        urls,
        "-c",
        "1",
        "--retries",
        str(RETRIES),
        "--max-time",
        str(MAX_TIME),
        "--connect-timeout",
        str(MAX_TIME),
        "-q",
        "--no-progress",
        "-X",
        target.method,
    ]
    if target.body is not None:
        body = os.path.join(tmp, "body.bin")
        with open(body, "wb") as f:
            f.write(target.body)
        args += ["--data-binary", "@" + body]
    for name, value in target.headers:
        args += ["-H", f"{name}: {value}"]
    if case.redirect:
        args.append("-L")
    if case.proto == "h2":
        args.append("--http2-prior-knowledge")
    if sends[0].proxy is not None:
        args += ["-x", sends[0].proxy]
    if any(s.wait_s for s in sends):
        args += ["--rate-per-host", str(1 / max(s.wait_s for s in sends))]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = subprocess.run(args, capture_output=True, timeout=HANG_S, env=env)
    assert proc.returncode == 0, (
        f"surge fetch exit {proc.returncode}: {proc.stderr.decode()[-2000:]}"
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(records) == len(sends), proc.stdout
    return _record_outcomes(records)


def run_fetch_all(case: Case, sends: list[Send]) -> list[Outcome]:
    options = _surge_options(case, sends[0].proxy)
    if any(s.wait_s for s in sends):
        options["rate_per_host"] = 1 / max(s.wait_s for s in sends)
    # fetch_all's documented inputs are URLs, with one method, body and headers
    # for all of them (a warm-up is then sent with the target's method: /warm
    # is counted apart)
    target = sends[-1]
    if target.body is not None:
        options["data"] = target.body
    records = list(
        surge.fetch_all(
            [s.url for s in sends],
            concurrency=1,
            retries=RETRIES,
            retry_backoff=0.01,
            follow_redirects=case.redirect,
            method=target.method,
            headers=list(target.headers),
            **options,
        )
    )
    assert len(records) == len(sends)
    return _record_outcomes(records)


def run_requests(case: Case, sends: list[Send]) -> list[Outcome]:
    out = []
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", surge.requests.Adapter(max_retries=RETRIES))
    if sends[0].proxy is not None:
        session.proxies = {"http": sends[0].proxy}
    try:
        for send in sends:
            time.sleep(send.wait_s)
            try:
                response = session.request(
                    send.method,
                    send.url,
                    data=send.body,
                    headers=dict(send.headers),
                    timeout=MAX_TIME,
                    allow_redirects=case.redirect,
                )
                out.append(Outcome(status=response.status_code))
            except requests.RequestException as exc:
                out.append(_caught(exc))
    finally:
        session.close()
    return out


#: httpx's default keepalive_expiry (5 s) would drop the connection a 10 s idle case reuses
LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=60)


def run_httpx(case: Case, sends: list[Send]) -> list[Outcome]:
    out = []
    extra: dict[str, Any] = {"http2_prior_knowledge": True} if case.proto == "h2" else {}
    if sends[0].proxy is not None:
        extra["proxy"] = sends[0].proxy
    with httpx.Client(
        transport=surge.httpx.HTTPTransport(trust_env=False, limits=LIMITS, **extra),
        timeout=MAX_TIME,
        follow_redirects=case.redirect,
    ) as client:
        for send in sends:
            time.sleep(send.wait_s)
            try:
                response = client.request(
                    send.method, send.url, content=send.body, headers=list(send.headers)
                )
                out.append(Outcome(status=response.status_code))
            except httpx.HTTPError as exc:
                out.append(_caught(exc))
    return out


def run_httpx_async(case: Case, sends: list[Send]) -> list[Outcome]:
    extra: dict[str, Any] = {"http2_prior_knowledge": True} if case.proto == "h2" else {}
    if sends[0].proxy is not None:
        extra["proxy"] = sends[0].proxy

    async def main() -> list[Outcome]:
        out = []
        transport = surge.httpx.AsyncHTTPTransport(trust_env=False, limits=LIMITS, **extra)
        async with httpx.AsyncClient(
            transport=transport, timeout=MAX_TIME, follow_redirects=case.redirect
        ) as client:
            for send in sends:
                await asyncio.sleep(send.wait_s)
                try:
                    response = await client.request(
                        send.method, send.url, content=send.body, headers=list(send.headers)
                    )
                    out.append(Outcome(status=response.status_code))
                except httpx.HTTPError as exc:
                    out.append(_caught(exc))
        return out

    return asyncio.run(main())


def drive(front: str, case: Case, sends: list[Send], tmp: str) -> list[Outcome]:
    """The front end's outcomes, or a failure if it hangs past HANG_S."""
    runner: Callable[[], list[Outcome]] = {
        "client": lambda: run_client(case, sends),
        "async": lambda: run_async(case, sends),
        "cli": lambda: run_cli(case, sends, tmp),
        "cli_d": lambda: run_cli_d(case, sends, tmp),
        "fetch_all": lambda: run_fetch_all(case, sends),
        "requests": lambda: run_requests(case, sends),
        "httpx": lambda: run_httpx(case, sends),
        "httpx_async": lambda: run_httpx_async(case, sends),
    }[front]
    pool = ThreadPoolExecutor(1)
    future = pool.submit(runner)
    try:
        return future.result(timeout=HANG_S)
    except FutureTimeout:
        pytest.fail(f"{front}: no outcome within {HANG_S} s (a hang)")
    finally:
        pool.shutdown(wait=False)


def _sends(server: _Server, case: Case, method: str) -> list[Send]:
    sends = []
    proxy = server.url("") if case.proxy else None
    warm_url = "http://origin-a.test/warm" if proxy else server.url("/warm")
    url = "http://origin-b.test/t" if proxy else server.url("/t")
    if case.warm is not None:
        sends.append(Send("GET", warm_url, None, (), 0.0, proxy))
    body = case.body if method != "GET" else None
    headers = case.headers if method != "GET" else ()
    sends.append(Send(method, url, body, headers, case.wait_s, proxy))
    return sends


def _check_outcome(front: str, expected: Any, got: Outcome, what: str) -> None:
    """``expected``: "ok" (a 200), a status, an error class, or a tuple of
    these alternatives. A drop-in's error is any exception of its library
    (the docs map surge's classes onto them only in part)."""
    alternatives = expected if isinstance(expected, tuple) else (expected,)
    dropin = front in {"requests", "httpx", "httpx_async"}
    statuses = {200 if a == "ok" else a for a in alternatives if a == "ok" or isinstance(a, int)}
    errors = {a for a in alternatives if isinstance(a, str) and a != "ok"}
    if got.status is not None:
        assert got.status in statuses, f"{what}: expected {alternatives}, got status {got.status}"
        return
    if (
        front == "requests"
        and got.exc is not None
        and got.exc.endswith("RetryError")
        and statuses - {200}
    ):
        return  # urllib3's Retry with raise_on_status: a status retried to the end
    assert got.exc is not None or got.error is not None, f"{what}: no status and no error: {got}"
    assert errors, f"{what}: expected {alternatives}, got the error {got}"
    if dropin:
        library = "requests" if front == "requests" else "httpx"
        assert got.exc is not None and got.exc.startswith(library + "."), (
            f"{what}: a drop-in raises only its library's exceptions, got {got.exc}"
        )
    else:
        assert got.error in errors, f"{what}: expected error class in {alternatives}, got {got}"


#: Front ends for a case that waits long before its request (h2's 10 s idle
#: before a PING): the in-process client and the command line - the PING
#: before reuse is the multiplexer's, under every front end alike - so the
#: file stays a few minutes of CI.
SLOW_FRONTS = ("client", "cli")


def post_params(proto: str) -> list[Any]:
    """The POST table's cases of ``proto`` ("h1", "h2"), each through each
    front end that speaks it (tests/hostile/test_at_most_once_round1_h2.py
    runs h2's: a file per protocol, so that the two run side by side)."""
    return [
        pytest.param(case, front, id=f"{case.name}-{front}")
        for case in CASES
        if case.proto == proto
        for front in FRONT_ENDS
        if not (case.proto == "h2" and front == "requests")
        and (case.wait_s < 5 or front in SLOW_FRONTS)
    ]


@pytest.mark.parametrize(("case", "front"), post_params("h1"))
def test_post_is_sent_at_most_once(case: Case, front: str, tmp_path: Any) -> None:
    check_post_at_most_once(case, front, tmp_path)


def check_post_at_most_once(case: Case, front: str, tmp_path: Any) -> None:
    with server_for(case) as server:
        outcomes = drive(front, case, _sends(server, case, case.method), str(tmp_path))
        time.sleep(0.05)  # a resend in flight reaches the server
        posts = server.log.of(case.method, "/t")
        log = server.log
    what = f"{case.name} via {front}: {case.method} /t arrivals {[(a.conn, a.index, a.unprocessed) for a in posts]}, outcomes {outcomes}"
    assert log.misbehaved >= 1 or case.first == "ok", (
        f"{what}: the server's misbehaviour never ran (the case tested nothing)"
    )
    if case.warm is not None:
        assert outcomes[0].status == 200, f"{what}: the warm-up request failed"
    processed = [a for a in posts if not a.unprocessed]
    if case.post_retried_on_status and FAMILY[front] == "fetch":
        # fetch.md: --retries retries a POST after a 408/429/5xx ("the server answered")
        assert len(posts) <= RETRIES + 1, what
    elif case.proof:
        assert len(processed) <= 1, f"{what}: a POST processed twice"
        # http.md: a refused / above-GOAWAY stream is "sent again ... once"
        assert len(posts) <= 2, f"{what}: a POST proved unprocessed is sent again once, not more"
    else:
        assert len(posts) <= 1, f"{what}: a POST the server may have processed was sent again"
    if case.t2 != "ok":
        assert len(server.log.of(case.method, "/t2")) <= 1, (
            f"{what}: the redirected request was sent again: {server.log.of(case.method, '/t2')}"
        )
    expected = case.post
    if case.post_retried_on_status and FAMILY[front] == "fetch" and case.again == "ok":
        expected = "ok"  # the retry the docs allow was answered
    _check_outcome(front, expected, outcomes[-1], what)


GET_PARAMS = [
    pytest.param(case, front, method, id=f"{case.name}-{front}-{method}")
    for case in CASES
    if case.get
    for method in case.idem
    for front in FRONT_ENDS
    if front != "cli_d"
    and FAMILY[front] in dict(case.get)
    and not (case.proto == "h2" and front == "requests")
]


@pytest.mark.parametrize(("case", "front", "method"), GET_PARAMS)
def test_idempotent_get_is_retried_as_documented(
    case: Case, front: str, method: str, tmp_path: Any
) -> None:
    expected = dict(case.get)[FAMILY[front]]
    with server_for(case) as server:
        outcomes = drive(front, case, _sends(server, case, method), str(tmp_path))
        time.sleep(0.05)
        gets = server.log.of(method, "/t")
    what = f"{case.name} via {front}: {method} /t arrivals {[(a.conn, a.index, a.unprocessed) for a in gets]}, outcomes {outcomes}"
    assert len(gets) == expected, f"{what}: expected {expected} arrivals"
    if case.get_outcome is not None:
        _check_outcome(front, case.get_outcome, outcomes[-1], what)
    else:
        assert outcomes[-1].status is None, f"{what}: expected an error"


@pytest.mark.parametrize("front", ["client", "async", "fetch_all", "httpx"])
def test_h2c_server_preface_first(front: str, tmp_path: Any) -> None:
    """A server may send its SETTINGS as soon as it accepts (RFC 9113 3.4:
    the server's preface need not wait for the client's). Found while
    writing this file: surge's h2c client then often fails the request with
    ``connection_reset`` ("the connection closed after its handshake"),
    closing the connection without sending its own preface or the request
    (the server reads EOF first). Ten plain GETs, one server each (its
    SETTINGS sent on accept, then a 0.3 s pause), must all get their 200.
    fetch_all (retries=3) may hide it by retrying the GET."""
    case = Case("h2c_preface_first", "h2", "ok")
    results = []
    for _ in range(10):
        server = H2Server(decider(case), early_preface=True)
        try:
            outcomes = drive(
                front, case, [Send("GET", server.url("/t"), None, (), 0.0)], str(tmp_path)
            )
            results.append(
                (
                    outcomes[-1].status,
                    outcomes[-1].error or outcomes[-1].exc,
                    len(server.log.of("GET", "/t")),
                )
            )
        finally:
            server.close()
    assert all(status == 200 for status, _, _ in results), (
        f"{front}: (status, error, arrivals) per try: {results}"
    )


CONCURRENT_FRONTS = ["client", "async", "cli", "fetch_all", "httpx", "httpx_async"]


@pytest.mark.parametrize("front", CONCURRENT_FRONTS)
def test_h2_goaway_mid_batch_resends_only_streams_above_it(front: str, tmp_path: Any) -> None:
    """Three POSTs at once on one h2c connection (/a, /b, /c); the server
    holds them, then GOAWAY with the middle stream as the last, and closes.
    http.md: streams up to the last id were processed (connection_reset, not
    sent again); those above it were not (sent again on another connection,
    once, and answered there)."""

    def decide(arrival: Arrival, log: Log) -> str:
        return "batch_goaway_mid" if arrival.conn == 1 else "ok"

    server = H2Server(decide)
    case = Case("h2_goaway_mid_batch", "h2", "ok")
    sends = [
        Send("POST", server.url(p), b"marker-" + p.encode(), (), 0.0) for p in ("/a", "/b", "/c")
    ]
    try:
        outcomes = _concurrent(front, case, sends, tmp=str(tmp_path))
        time.sleep(0.05)
        log = server.log
        last = server.batch_last
    finally:
        server.close()
    by_path = {p: log.of("POST", p) for p in ("/a", "/b", "/c")}
    what = f"{front}: GOAWAY last id {last}; arrivals {{path: [(conn, unprocessed)]}} { ({p: [(a.conn, a.unprocessed) for a in v] for p, v in by_path.items()}) }; outcomes {outcomes}"
    assert last, f"{what}: the server held no stream"
    for path, arrivals in by_path.items():
        processed = [a for a in arrivals if not a.unprocessed]
        assert len(processed) <= 1, f"{what}: POST {path} processed twice"
        assert len(arrivals) <= 2, f"{what}: POST {path} sent more than twice"
        first_unprocessed = bool(arrivals) and arrivals[0].unprocessed
        if first_unprocessed:
            assert len(arrivals) == 2, f"{what}: POST {path} above the GOAWAY was not sent again"
    for path, outcome in zip(("/a", "/b", "/c"), outcomes, strict=True):
        arrivals = by_path[path]
        if arrivals and not arrivals[0].unprocessed:
            _check_outcome(front, RESET, outcome, f"{what}: POST {path} (at or below the last id)")
        else:
            _check_outcome(front, "ok", outcome, f"{what}: POST {path} (above the last id)")


def _concurrent(front: str, case: Case, sends: list[Send], tmp: str = "") -> list[Outcome]:
    """The three requests at once through one client of the front end."""

    def one_sync(client: Any, send: Send, errors: tuple[type[BaseException], ...]) -> Outcome:
        try:
            return Outcome(
                status=client.request(send.method, send.url, content=send.body).status_code
            )
        except errors as exc:
            return _caught(exc)

    def run() -> list[Outcome]:
        if front == "client":
            with surge.Client(**_surge_options(case)) as client, ThreadPoolExecutor(3) as pool:
                return list(
                    pool.map(lambda s: one_sync(client, s, (surge.http.RequestError,)), sends)
                )
        if front == "httpx":
            transport = surge.httpx.HTTPTransport(trust_env=False, http2_prior_knowledge=True)
            with (
                httpx.Client(transport=transport, timeout=MAX_TIME) as client,
                ThreadPoolExecutor(3) as pool,
            ):
                return list(pool.map(lambda s: one_sync(client, s, (httpx.HTTPError,)), sends))
        if front in {"async", "httpx_async"}:

            async def main() -> list[Outcome]:
                async def one(
                    client: Any, send: Send, errors: tuple[type[BaseException], ...]
                ) -> Outcome:
                    try:
                        return Outcome(
                            status=(
                                await client.request(send.method, send.url, content=send.body)
                            ).status_code
                        )
                    except errors as exc:
                        return _caught(exc)

                if front == "async":
                    async with surge.AsyncClient(**_surge_options(case)) as client:
                        return list(
                            await asyncio.gather(
                                *(one(client, s, (surge.http.RequestError,)) for s in sends)
                            )
                        )
                transport = surge.httpx.AsyncHTTPTransport(
                    trust_env=False, http2_prior_knowledge=True
                )
                async with httpx.AsyncClient(transport=transport, timeout=MAX_TIME) as client:
                    return list(
                        await asyncio.gather(*(one(client, s, (httpx.HTTPError,)) for s in sends))
                    )

            return asyncio.run(main())
        if front == "fetch_all":
            records = list(
                surge.fetch_all(
                    [s.url for s in sends],
                    concurrency=3,
                    retries=RETRIES,
                    retry_backoff=0.01,
                    method="POST",
                    data=b"marker",
                    **_surge_options(case),
                )
            )
            return _record_outcomes(records)
        path = os.path.join(tmp, "in.jsonl")
        with open(path, "w") as f:
            for item in _items(sends):
                f.write(json.dumps(item) + "\n")
        args = [
            *SURGE,
            "fetch",
            path,
            "-c",
            "3",
            "--retries",
            str(RETRIES),
            "--max-time",
            str(MAX_TIME),
            "-q",
            "--no-progress",
            "--http2-prior-knowledge",
        ]
        proc = subprocess.run(args, capture_output=True, timeout=HANG_S)
        assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()[
            -2000:
        ]
        return _record_outcomes(
            [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        )

    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(run).result(timeout=HANG_S)
    except FutureTimeout:
        pytest.fail(f"{front}: no outcome within {HANG_S} s (a hang)")
    finally:
        pool.shutdown(wait=False)


@pytest.mark.parametrize("front", ["client", "async", "cli", "fetch_all", "requests", "httpx"])
@pytest.mark.parametrize("first", ["fin_body", "rst_body", "fin_head"])
def test_second_address_is_no_resend(front: str, first: str, tmp_path: Any) -> None:
    """A name with two addresses (``resolve`` HOST:PORT:ADDR,ADDR, curl's
    form; Happy Eyeballs, architecture-rules.md): the first, 127.0.0.1,
    connects and then drops the POST it read; 127.0.0.2, same port, would
    answer. The POST was sent on a connection that connected: it is no
    connect failure, and going to the next address would be a resend."""
    log = Log()
    a = H1Server(lambda arrival, log: first if arrival.path == "/t" else "ok", log=log)
    b = H1Server(lambda arrival, log: "ok", host="127.0.0.2", port=a.port, log=log)
    resolve = [f"amo.test:{a.port}:127.0.0.1,127.0.0.2"]
    url = f"http://amo.test:{a.port}/t"
    body = b"marker-two-addresses"
    try:
        outcome = _two_addresses(front, url, body, resolve, str(tmp_path))
        time.sleep(0.05)
    finally:
        a.close()
        b.close()
    posts = log.of("POST", "/t")
    what = f"{front}, 127.0.0.1 does {first}: POST arrivals (server conn, index) {[(a.conn, a.index) for a in posts]} (b saw {b.conns} connections), outcome {outcome}"
    assert len(posts) <= 1, f"{what}: the POST was sent again, to the next address"
    _check_outcome(front, RESET_OR_PROTO, outcome, what)


def _two_addresses(front: str, url: str, body: bytes, resolve: list[str], tmp: str) -> Outcome:
    def run() -> Outcome:
        options: dict[str, Any] = {"max_time": MAX_TIME, "resolve": resolve}
        if front == "client":
            with surge.Client(**options) as client:
                try:
                    return Outcome(status=client.post(url, content=body).status_code)
                except surge.http.RequestError as exc:
                    return _caught(exc)
        if front == "async":

            async def main() -> Outcome:
                async with surge.AsyncClient(**options) as client:
                    try:
                        return Outcome(status=(await client.post(url, content=body)).status_code)
                    except surge.http.RequestError as exc:
                        return _caught(exc)

            return asyncio.run(main())
        if front == "fetch_all":
            records = list(
                surge.fetch_all(
                    [url], retries=RETRIES, retry_backoff=0.01, method="POST", data=body, **options
                )
            )
            return _record_outcomes(records)[0]
        if front == "requests":
            session = requests.Session()
            session.trust_env = False
            session.mount("http://", surge.requests.Adapter(max_retries=RETRIES, resolve=resolve))
            try:
                return Outcome(status=session.post(url, data=body, timeout=MAX_TIME).status_code)
            except requests.RequestException as exc:
                return _caught(exc)
            finally:
                session.close()
        if front == "httpx":
            transport = surge.httpx.HTTPTransport(trust_env=False, resolve=resolve)
            with httpx.Client(transport=transport, timeout=MAX_TIME) as client:
                try:
                    return Outcome(status=client.post(url, content=body).status_code)
                except httpx.HTTPError as exc:
                    return _caught(exc)
        urls = os.path.join(tmp, "urls.txt")
        with open(urls, "w") as f:
            f.write(url + "\n")
        args = [
            *SURGE,
            "fetch",
            urls,
            "--retries",
            str(RETRIES),
            "--max-time",
            str(MAX_TIME),
            "-q",
            "--no-progress",
            "-X",
            "POST",
            "--data-binary",
            body.decode(),
            "--resolve",
            resolve[0],
        ]
        proc = subprocess.run(args, capture_output=True, timeout=HANG_S)
        assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()[
            -2000:
        ]
        return _record_outcomes(
            [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        )[0]

    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(run).result(timeout=HANG_S)
    except FutureTimeout:
        pytest.fail(f"{front}: no outcome within {HANG_S} s (a hang)")
    finally:
        pool.shutdown(wait=False)
