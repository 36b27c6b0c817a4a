# ruff: noqa: E501  (assertion messages name the broken claim in full)
"""Hostile round 1 of HTTP/2 and TLS session resumption, written from
docs/http.md ("HTTP/2", "TLS session resumption"), docs/fetch.md, docs/trace.md,
docs/dropins.md and issue 43 only, not the code.

Servers:
- a scripted HTTP/2 server of raw frames (hyperframe + hpack, the pieces under
  the ``h2`` package), so that it can break every rule a real server keeps:
  GOAWAY anywhere, resets, floods, bad headers, lying Content-Length, windows
  that never open; cleartext with prior knowledge, or TLS with ALPN (trustme).
  It counts what it is sent (requests per path, connections, streams open at
  once) so that retries are checked at the server;
- Debian's nginx (``listen ... ssl http2`` and cleartext ``http2``, with
  ``$server_protocol``, ``$ssl_session_reused``, ``$ssl_server_name``,
  ``$ssl_client_verify`` and ``$connection`` in its access log) and hypercorn,
  with curl ``--http2`` as the reference client.

Every surge run has a bound (``max_time``, a subprocess timeout); every loop is
bounded in count.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from hpack import Decoder, Encoder
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from tests._nginx import free_port, nginx
from tests.hostile.conftest import SURGE, run

import surge
import surge.http

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# error codes (RFC 9113 7)
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
REFUSED_STREAM = 0x7
CANCEL = 0x8
ENHANCE_YOUR_CALM = 0xB

MAX_ID = 2**31 - 1


# --- a hostile HTTP/2 server of raw frames ---------------------------------------


class Request:
    def __init__(self, conn: Conn, sid: int, headers: list[tuple[str, str]]) -> None:
        self.conn = conn
        self.sid = sid
        self.headers = headers
        self.body = b""
        self.ended = False

    def header(self, name: str) -> str:
        return next((v for k, v in self.headers if k == name), "")

    @property
    def method(self) -> str:
        return self.header(":method")

    @property
    def path(self) -> str:
        return self.header(":path")


Handler = Callable[["Conn", Request], None]


class Conn:
    """One accepted connection: a reader thread, writes under a lock, the
    client's flow-control windows kept so that well-behaved bodies respect them."""

    def __init__(self, server: H2Server, sock: socket.socket, index: int) -> None:
        self.server = server
        self.sock = sock
        self.index = index  # 0 for the first connection the server accepted
        self.wlock = threading.RLock()  # held from HPACK encoding to the write: blocks go in order
        self.cv = threading.Condition()
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.decoder.max_header_list_size = 10 * 2**20
        self.decoder.max_allowed_table_size = 2**20
        self.conn_window = 65535
        self.initial_window = 65535
        self.stream_windows: dict[int, int] = {}
        self.streams: dict[int, Request] = {}
        self.open_streams: set[int] = set()
        self.max_open = 0
        self.client_settings: dict[int, int] = {}
        self.settings_acks = 0
        self.ping_acks = 0
        self.goaways_received: list[tuple[int, int]] = []
        self.rsts_received: list[tuple[int, int]] = []
        self.window_updates: list[tuple[int, int]] = []
        self.sent_goaway = False
        self.streams_after_goaway: list[int] = []
        self.closed = False
        self.refused = 0
        self.broken = False  # a write failed: the client closed on us

    # writing
    def write(self, data: bytes) -> bool:
        with self.wlock:
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                self.broken = True
                return False

    def frames(self, *frames: Frame) -> bool:
        return self.write(b"".join(f.serialize() for f in frames))

    def block(self, pairs: list[tuple[str, str]] | list[tuple[bytes, bytes]]) -> bytes:
        return bytes(self.encoder.encode(pairs))

    def headers(
        self, sid: int, pairs: list[tuple[str, str]], *, end_stream: bool = False
    ) -> HeadersFrame:
        f = HeadersFrame(sid, self.block(pairs))
        f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        return f

    def data(self, sid: int, payload: bytes, *, end_stream: bool = False) -> DataFrame:
        f = DataFrame(sid, payload)
        if end_stream:
            f.flags.add("END_STREAM")
        return f

    def goaway(self, last: int, code: int = NO_ERROR, debug: bytes = b"") -> GoAwayFrame:
        self.sent_goaway = True
        return GoAwayFrame(0, last_stream_id=last, error_code=code, additional_data=debug)

    def rst(self, sid: int, code: int) -> RstStreamFrame:
        return RstStreamFrame(sid, error_code=code)

    def send_body(self, sid: int, body: bytes, *, end_stream: bool = True) -> bool:
        """DATA within the client's windows (waits up to 10 s for them)."""
        view = memoryview(body)
        while view:
            with self.cv:
                ok = self.cv.wait_for(
                    lambda: (
                        self.closed
                        or (self.conn_window > 0 and self.stream_windows.get(sid, 0) > 0)
                    ),
                    timeout=10,
                )
                if not ok or self.closed:
                    return False
                n = min(len(view), 16384, self.conn_window, self.stream_windows[sid])
                self.conn_window -= n
                self.stream_windows[sid] -= n
            last = n == len(view) and end_stream
            if not self.frames(self.data(sid, bytes(view[:n]), end_stream=last)):
                return False
            view = view[n:]
        if not body and end_stream:
            return self.frames(self.data(sid, b"", end_stream=True))
        return True

    def respond(
        self,
        req: Request,
        status: int = 200,
        body: bytes = b"",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> bool:
        pairs = [(":status", str(status)), *headers]
        if not any(k == "content-length" for k, _ in headers):
            pairs.append(("content-length", str(len(body))))
        with self.cv:
            self.open_streams.discard(req.sid)
        with self.wlock:
            if not self.frames(self.headers(req.sid, pairs, end_stream=not body)):
                return False
        return not body or self.send_body(req.sid, body)

    def shutdown(self) -> None:
        """Close the connection (TCP FIN both ways), whatever state it is in."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    # reading
    def read_exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return out

    def serve(self) -> None:
        srv = self.server
        try:
            if self.read_exact(24) != PREFACE:
                return
            s = SettingsFrame(0, settings=dict(srv.settings))
            if not srv.no_settings:
                self.frames(s)
            if srv.on_connect:
                srv.on_connect(self)
            pending: HeadersFrame | None = None
            block = b""
            while True:
                head = self.read_exact(9)
                frame, length = Frame.parse_frame_header(memoryview(head))
                body = self.read_exact(length) if length else b""
                frame.parse_body(memoryview(body))
                self.handle(frame, pending, block)
                if isinstance(frame, HeadersFrame) and "END_HEADERS" not in frame.flags:
                    pending, block = frame, frame.data
                elif isinstance(frame, ContinuationFrame):
                    block += frame.data
                    if "END_HEADERS" in frame.flags and pending is not None:
                        self.open_request(pending, block)
                        pending, block = None, b""
        except (EOFError, OSError, ValueError):
            pass
        except Exception as e:  # the server's own bug: make it visible
            srv.errors.append(repr(e))
        finally:
            with self.cv:
                self.closed = True
                self.cv.notify_all()
            with contextlib.suppress(OSError):
                self.sock.close()

    def open_request(self, frame: HeadersFrame, block: bytes) -> None:
        srv = self.server
        pairs = [(str(k), str(v)) for k, v in self.decoder.decode(block)]
        sid = frame.stream_id
        if sid in self.streams:  # trailers of the request
            req = self.streams[sid]
        else:
            req = Request(self, sid, pairs)
            self.streams[sid] = req
            with self.cv:
                self.stream_windows[sid] = self.initial_window
                self.open_streams.add(sid)
                self.max_open = max(self.max_open, len(self.open_streams))
                srv.max_open = max(srv.max_open, len(self.open_streams))
            if self.sent_goaway:
                self.streams_after_goaway.append(sid)
            with srv.lock:
                srv.heads.append((self.index, sid, req.method, req.path))
            limit = srv.settings.get(SettingsFrame.MAX_CONCURRENT_STREAMS)
            if srv.enforce_limit and limit is not None and len(self.open_streams) > limit:
                # as nginx does: the stream over the limit is refused, unprocessed
                with self.cv:
                    self.open_streams.discard(sid)
                self.streams.pop(sid)
                self.refused += 1
                self.frames(self.rst(sid, REFUSED_STREAM))
                return
            if srv.on_headers:
                srv.on_headers(self, req)
        if "END_STREAM" in frame.flags:
            self.finish(req)

    def finish(self, req: Request) -> None:
        srv = self.server
        req.ended = True
        with srv.lock:
            srv.requests.append((self.index, req.sid, req.method, req.path, req.body))
        threading.Thread(target=self.run_handler, args=(req,), daemon=True).start()

    def run_handler(self, req: Request) -> None:
        try:
            self.server.handler(self, req)
        except Exception as e:
            self.server.errors.append(repr(e))

    def handle(self, frame: Frame, pending: HeadersFrame | None, block: bytes) -> None:
        srv = self.server
        if isinstance(frame, SettingsFrame):
            if "ACK" in frame.flags:
                self.settings_acks += 1
                with self.cv:
                    self.cv.notify_all()
                return
            for k, v in frame.settings.items():
                self.client_settings[k] = v
                if k == SettingsFrame.INITIAL_WINDOW_SIZE:
                    with self.cv:
                        delta = v - self.initial_window
                        self.initial_window = v
                        for sid in self.stream_windows:
                            self.stream_windows[sid] += delta
                        self.cv.notify_all()
            ack = SettingsFrame(0)
            ack.flags.add("ACK")
            self.frames(ack)
        elif isinstance(frame, PingFrame):
            if "ACK" in frame.flags:
                self.ping_acks += 1
            else:
                pong = PingFrame(0, frame.opaque_data)
                pong.flags.add("ACK")
                self.frames(pong)
        elif isinstance(frame, WindowUpdateFrame):
            self.window_updates.append((frame.stream_id, frame.window_increment))
            with self.cv:
                if frame.stream_id == 0:
                    self.conn_window += frame.window_increment
                elif frame.stream_id in self.stream_windows:
                    self.stream_windows[frame.stream_id] += frame.window_increment
                self.cv.notify_all()
        elif isinstance(frame, GoAwayFrame):
            self.goaways_received.append((frame.last_stream_id, frame.error_code))
        elif isinstance(frame, RstStreamFrame):
            self.rsts_received.append((frame.stream_id, frame.error_code))
            with self.cv:
                self.open_streams.discard(frame.stream_id)
        elif isinstance(frame, HeadersFrame):
            if "END_HEADERS" in frame.flags:
                self.open_request(frame, frame.data)
        elif isinstance(frame, DataFrame):
            req = self.streams.get(frame.stream_id)
            if req is not None:
                req.body += frame.data
            n = frame.flow_controlled_length
            if srv.auto_window and n:
                self.frames(
                    WindowUpdateFrame(0, window_increment=n),
                    WindowUpdateFrame(frame.stream_id, window_increment=n),
                )
            if req is not None and srv.on_data:
                srv.on_data(self, req)
            if "END_STREAM" in frame.flags and req is not None:
                self.finish(req)


class H2Server:
    """A scripted HTTP/2 server on 127.0.0.1, port 0: ``handler(conn, request)``
    runs (on a thread of its own) for each request whose END_STREAM came.
    ``tls``: a server SSLContext (its ALPN decides)."""

    def __init__(
        self,
        handler: Handler,
        *,
        settings: dict[int, int] | None = None,
        tls: ssl.SSLContext | None = None,
        auto_window: bool = True,
        on_connect: Callable[[Conn], None] | None = None,
        on_headers: Handler | None = None,
        on_data: Handler | None = None,
        no_settings: bool = False,
        enforce_limit: bool = False,
    ) -> None:
        self.handler = handler
        self.enforce_limit = enforce_limit
        self.settings = settings or {}
        self.tls = tls
        self.auto_window = auto_window
        self.on_connect = on_connect
        self.on_headers = on_headers
        self.on_data = on_data
        self.no_settings = no_settings
        self.lock = threading.Lock()
        self.conns: list[Conn] = []
        self.heads: list[tuple[int, int, str, str]] = []
        self.requests: list[tuple[int, int, str, str, bytes]] = []
        self.errors: list[str] = []
        self.max_open = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)
        self.thread.start()

    def accept_loop(self) -> None:
        while not self.stopped:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.start_conn, args=(sock,), daemon=True).start()

    def start_conn(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:
                sock.settimeout(10)
                sock = self.tls.wrap_socket(sock, server_side=True)
                sock.settimeout(None)
            except (OSError, ssl.SSLError):
                sock.close()
                return
        with self.lock:
            conn = Conn(self, sock, len(self.conns))
            self.conns.append(conn)
        conn.serve()

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    def count(self, path: str, method: str | None = None) -> int:
        """Requests for ``path`` whose HEADERS arrived (sent, processed or not)."""
        with self.lock:
            return sum(1 for _, _, m, p in self.heads if p == path and method in (None, m))

    def close(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for c in list(self.conns):
            with contextlib.suppress(OSError):
                c.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.sock.close()


@contextlib.contextmanager
def h2server(handler: Handler, **options: Any) -> Iterator[H2Server]:
    server = H2Server(handler, **options)
    try:
        yield server
    finally:
        server.close()
    assert not server.errors, f"the test server's own errors: {server.errors}"


def ok(conn: Conn, req: Request) -> None:
    conn.respond(req, 200, b"hello " + req.path.encode())


# --- the clients ------------------------------------------------------------------

ERR = {
    "connection_reset": surge.http.ReadError,
    "protocol_error": surge.http.RemoteProtocolError,
}


async def aget(
    url: str, *, method: str = "GET", content: bytes | None = None, **options: Any
) -> tuple[Any, str | None, float]:
    """(response or None, error class or None, seconds) through AsyncClient."""
    options.setdefault("http2_prior_knowledge", url.startswith("http:"))
    options.setdefault("max_time", 5)
    start = time.monotonic()
    async with surge.AsyncClient(**options) as client:
        try:
            response = await client.request(method, url, content=content)
        except surge.http.RequestError as e:
            return None, e.error_class, time.monotonic() - start
    return response, None, time.monotonic() - start


def get(url: str, **kw: Any) -> tuple[Any, str | None, float]:
    return asyncio.run(asyncio.wait_for(aget(url, **kw), 60))


def fetch_records(
    tmp: Path, urls: list[str], *args: str, timeout: float = 60
) -> tuple[subprocess.CompletedProcess[bytes], list[dict[str, Any]]]:
    inp = tmp / "in.txt"
    inp.write_text("".join(u + "\n" for u in urls))
    out = tmp / "out.jsonl"
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    proc = run(
        ["fetch", str(inp), "-o", str(out), "-q", "--no-progress", "--max-time", "5", *args],
        timeout=timeout,
    )
    no_traceback(proc)
    recs = [json.loads(x) for x in out.read_bytes().splitlines()] if out.exists() else []
    recs.sort(key=lambda r: r["line"])
    assert sorted(r["line"] for r in recs) == list(range(1, len(urls) + 1)), (
        f"one record per input line (docs/fetch.md): {[r['line'] for r in recs]}\n{proc.stderr[-2000:]!r}"
    )
    return proc, recs


def no_traceback(proc: subprocess.CompletedProcess[bytes]) -> None:
    err = proc.stderr.decode(errors="replace")
    assert "Traceback" not in err, f"a traceback, not a record (project rule):\n{err[-3000:]}"


# --- the basics: what the client says, what it gets ------------------------------


def test_prior_knowledge_speaks_h2c_and_says_so() -> None:
    with h2server(ok) as srv:
        response, error, _ = get(srv.url("/a"))
    assert error is None, error
    assert response.status_code == 200 and response.content == b"hello /a"
    assert response.http_version == "HTTP/2", (
        f'docs/http.md: response.http_version is "HTTP/2" over HTTP/2; got {response.http_version!r}'
    )


def test_client_settings_refuse_push_and_raise_windows() -> None:
    """docs/http.md: SETTINGS_ENABLE_PUSH 0; windows 16 MiB (connection) and 4
    MiB (stream); SETTINGS_MAX_HEADER_LIST_SIZE bounds the header list."""
    with h2server(ok) as srv:
        _, error, _ = get(srv.url("/"))
        assert error is None
        conn = srv.conns[0]
    s = conn.client_settings
    assert s.get(SettingsFrame.ENABLE_PUSH) == 0, f"push must be refused: SETTINGS {s}"
    assert s.get(SettingsFrame.INITIAL_WINDOW_SIZE) == 4 * 2**20, f"stream window 4 MiB: {s}"
    conn_increase = sum(n for sid, n in conn.window_updates if sid == 0)
    assert 65535 + conn_increase >= 16 * 2**20, (
        f"connection window raised to 16 MiB: WINDOW_UPDATEs {conn.window_updates[:5]}"
    )
    assert 0 < s.get(SettingsFrame.MAX_HEADER_LIST_SIZE, 0) <= 300 * 1024 + 1024, (
        f"SETTINGS_MAX_HEADER_LIST_SIZE (docs: 300 KiB) not sent: {s}"
    )


def test_server_ping_is_answered_with_its_data() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(PingFrame(0, b"12345678"))
        time.sleep(0.2)
        conn.respond(req, 200, b"x")

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"))
        acks = [c.ping_acks for c in srv.conns]
    assert error is None and response.status_code == 200
    assert acks == [1], f"a PING is answered once (RFC 9113 6.7): {acks}"


def test_prior_knowledge_to_an_http1_server_fails_bounded(tmp_path: Path) -> None:
    """docs/http.md: "A server that does not speak h2c fails the request"."""
    import http.server

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/"
        proc, recs = fetch_records(tmp_path, [url, url], "--http2-prior-knowledge")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode == 0
    for r in recs:
        assert r["status"] is None and r["error"] in ("protocol_error", "connection_reset"), (
            f"an HTTP/1.1 server under --http2-prior-knowledge fails the request: {r}"
        )


def test_silent_h2_server_is_a_bounded_read_timeout() -> None:
    """No SETTINGS, no answer: "nothing waits on a silent peer for ever"."""
    with h2server(lambda c, r: None, no_settings=True) as srv:
        _, error, took = get(srv.url("/"), max_time=2)
    assert error == "read_timeout" and took < 10, (error, took)


def test_headers_then_silence_is_read_timeout_with_status(tmp_path: Path) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", "10")]))

    with h2server(handler) as srv:
        _proc, recs = fetch_records(
            tmp_path, [srv.url("/")], "--http2-prior-knowledge", "--max-time", "2"
        )
    r = recs[0]
    assert r["error"] == "read_timeout" and r["status"] == 200, (
        f"docs/fetch.md: status is the last response whose head arrived, also when its body then stalled: {r}"
    )


# --- GOAWAY, in every position ----------------------------------------------------


def goaway_first_conn(last: int = 0, code: int = NO_ERROR) -> Handler:
    """Connection 0 answers every request with GOAWAY(last) and closes; the
    others answer."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index == 0:
            conn.frames(conn.goaway(last, code))
            time.sleep(0.05)
            conn.shutdown()
        else:
            ok(conn, req)

    return handler


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("code", [NO_ERROR, PROTOCOL_ERROR, ENHANCE_YOUR_CALM])
def test_goaway_last_stream_zero_is_sent_again_once(method: str, code: int) -> None:
    """docs/http.md: streams above the GOAWAY's last id "were not processed by
    the server (its promise, whatever the GOAWAY's error code) and are sent
    again on another connection - a POST too, once"."""
    with h2server(goaway_first_conn(0, code)) as srv:
        response, error, _ = get(srv.url("/g"), method=method, content=b"b" * 10)
        sent = srv.count("/g")
        conns = len(srv.conns)
    assert error is None, (
        f"{method} above last_stream_id 0 (code {code}) must be sent again: {error}"
    )
    assert response.status_code == 200 and response.content == b"hello /g"
    assert sent == 2 and conns == 2, f"sent {sent} times on {conns} connections; want 2 on 2"


def test_goaway_at_connect_before_any_request_then_retry() -> None:
    """A GOAWAY(0) in the server's first flight: whatever the client had sent
    was not processed; it goes again on a new connection."""

    def on_connect(conn: Conn) -> None:
        if conn.index == 0:
            conn.frames(conn.goaway(0))

    with h2server(ok, on_connect=on_connect) as srv:
        response, error, _ = get(srv.url("/c"), method="POST", content=b"x")
        sent = srv.count("/c")
    assert error is None and response.status_code == 200, error
    assert sent <= 2, f"POST sent {sent} times"


def test_goaway_between_headers_and_data_lets_the_stream_finish() -> None:
    """docs/http.md: streams up to its last stream id finish - their responses
    may come after the GOAWAY, on the same connection."""
    body = b"z" * 50_000

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", str(len(body)))]))
        conn.frames(conn.goaway(req.sid))
        conn.send_body(req.sid, body)

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"), method="POST", content=b"p")
        sent = srv.count("/")
    assert error is None, f"a stream at the GOAWAY's last id finishes: {error}"
    assert response.content == body and sent == 1


def test_a_goaway_after_each_response_teaches_its_bound_from_a_request_it_cut_unsent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that ends each connection after one response (nginx's
    keepalive_timeout 0), whose GOAWAY comes a moment after the response, and
    a client whose request, handed the slot the response freed, is slow to
    send (a busy machine, made to happen here: each request handed a freed
    slot waits 0.2 s before its HEADERS).  The GOAWAY cuts that request off
    unsent, with no stream above its last id to teach the bound: the cut
    request teaches it, so later requests open connections of their own
    rather than each meeting a GOAWAY (16 of them, then a failure)."""
    from surge.http import multiplex

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(req, 200, b"ok")
        time.sleep(0.05)
        conn.frames(conn.goaway(req.sid))
        time.sleep(0.05)
        conn.shutdown()

    handed = []
    acquire = multiplex.Multiplexer.acquire

    async def slow_after_a_freed_slot(self: Any, key: Any, *args: Any) -> Any:
        got = await acquire(self, key, *args)
        if getattr(got, "conn", None) is not None and got.conn.started:
            handed.append(got.conn.started)
            await asyncio.sleep(0.2)
        return got

    monkeypatch.setattr(multiplex.Multiplexer, "acquire", slow_after_a_freed_slot)

    async def main(url: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, per_host=2, max_time=20) as c:

            async def one(i: int) -> Any:
                try:
                    return (await c.get(f"{url}/r{i}")).status_code
                except surge.http.RequestError as e:
                    return e.error_class

            return await asyncio.gather(*(one(i) for i in range(12)))

    settings = {SettingsFrame.MAX_CONCURRENT_STREAMS: 1}
    with h2server(handler, settings=settings) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        counts = {p: srv.count(p) for p in (f"/r{i}" for i in range(12))}
    assert results == [200] * 12, results
    assert set(counts.values()) == {1}, counts
    assert len(handed) <= 2, f"{len(handed)} requests handed a slot past the server's bound"


def test_goaway_with_error_code_between_headers_and_data_is_reset_post_once() -> None:
    """docs/http.md: "A GOAWAY with an error code ends the streams up to its
    last id with connection_reset" (and a POST is not sent again)."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", "100")]))
        conn.frames(conn.goaway(req.sid, INTERNAL_ERROR))
        time.sleep(0.1)
        conn.shutdown()

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/p"), method="POST", content=b"p")
        sent = srv.count("/p")
    assert error == "connection_reset", error
    assert sent == 1, f"a POST the server processed (at the last id) is never sent again: {sent}"


def test_goaway_with_error_code_followed_by_frames_in_one_write() -> None:
    """GOAWAY(0, PROTOCOL_ERROR) and then, in the same write, a PING, a
    WINDOW_UPDATE and a HEADERS for the stream: the stream was above the last id,
    so it is unprocessed and sent again elsewhere."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index == 0:
            conn.frames(
                conn.goaway(0, PROTOCOL_ERROR),
                PingFrame(0, b"abcdefgh"),
                WindowUpdateFrame(0, window_increment=10),
                conn.headers(req.sid, [(":status", "500")], end_stream=True),
            )
            time.sleep(0.1)
            conn.shutdown()
        else:
            ok(conn, req)

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/f"), method="POST", content=b"p")
        sent = srv.count("/f")
    assert error is None and response.status_code == 200, (
        f"an unprocessed stream is sent again, whatever followed the GOAWAY: {error} {response and response.status_code}"
    )
    assert sent == 2


def test_two_goaways_with_decreasing_ids_retry_exactly_the_unprocessed() -> None:
    """RFC 9113 6.8's graceful shutdown: GOAWAY(2^31-1), then GOAWAY(first id).
    Three streams at once: the first finishes there, the two above are sent
    again on a new connection, each once."""
    barrier = threading.Event()

    def handler(conn: Conn, req: Request) -> None:
        if conn.index != 0:
            ok(conn, req)
            return
        if req.path != "/1":
            return
        # wait for the three streams (up to 3 s)
        for _ in range(60):
            if len(conn.streams) >= 3:
                break
            time.sleep(0.05)
        first = min(conn.streams)
        conn.frames(conn.goaway(MAX_ID))
        time.sleep(0.1)
        conn.frames(conn.goaway(first))
        req0 = conn.streams[first]
        conn.respond(req0, 200, b"hello " + req0.path.encode())
        time.sleep(0.2)
        barrier.set()
        conn.shutdown()

    async def main(url: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=10) as client:
            return await asyncio.gather(
                *(client.get(url + f"/{n}") for n in (1, 2, 3)), return_exceptions=True
            )

    with h2server(handler) as srv:
        base = srv.url("").rstrip("/")
        results = asyncio.run(asyncio.wait_for(main(base), 60))
        first_conn = [p for i, _, _, p in srv.heads if i == 0]
        counts = {p: srv.count(p) for p in ("/1", "/2", "/3")}
    assert len(first_conn) == 3, (
        f"three streams on the first connection: {first_conn} (the test needs it)"
    )
    bad = [r for r in results if isinstance(r, BaseException)]
    assert not bad, f"streams above the last id are sent again: {bad}"
    assert [r.content for r in results] == [b"hello /1", b"hello /2", b"hello /3"]
    processed_first = srv.heads[0][3]
    want = {p: (1 if p == processed_first else 2) for p in counts}
    assert counts == want, f"each unprocessed stream sent again exactly once: {counts}, want {want}"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_goaway_always_is_bounded(method: str) -> None:
    """A server whose every connection GOAWAYs before processing: the request
    is sent again once ("a POST too, once"), then fails with a record, not a
    loop until max_time."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.goaway(0))
        time.sleep(0.05)
        conn.shutdown()

    with h2server(handler) as srv:
        _, error, took = get(srv.url("/x"), method=method, content=b"b", max_time=20)
        sent = srv.count("/x")
    assert error is not None and took < 15, (error, took)
    assert sent == 2, f"sent again once after GOAWAY: {sent} times"


def test_graceful_goaway_drains_no_new_stream_on_that_connection() -> None:
    """docs/http.md: "A GOAWAY ends the connection gracefully": after it, the
    next request goes on another connection, none on the old one."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index == 0:
            conn.frames(conn.goaway(MAX_ID))
            time.sleep(0.05)
        ok(conn, req)

    async def main(url: str) -> list[bytes]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=5) as client:
            out = []
            for n in range(3):
                out.append((await client.get(url + f"/{n}")).content)
                await asyncio.sleep(0.1)
            return out

    with h2server(handler) as srv:
        bodies = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        after = srv.conns[0].streams_after_goaway
        conns = len(srv.conns)
    assert bodies == [b"hello /0", b"hello /1", b"hello /2"]
    assert after == [], f"streams opened after GOAWAY on its connection: {after}"
    assert conns >= 2


# --- resets ----------------------------------------------------------------------


def test_refused_stream_post_is_sent_again_exactly_once() -> None:
    def handler(conn: Conn, req: Request) -> None:
        if srv.count("/r") == 1:
            conn.frames(conn.rst(req.sid, REFUSED_STREAM))
        else:
            ok(conn, req)

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/r"), method="POST", content=b"body")
        sent = srv.count("/r")
        bodies = [b for _, _, _, p, b in srv.requests if p == "/r"]
    assert error is None and response.status_code == 200, error
    assert sent == 2, f"REFUSED_STREAM: sent again once: {sent}"
    assert bodies == [b"body", b"body"], f"the resent POST carries its body: {bodies}"


def test_refused_stream_always_post_twice_then_an_error() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.rst(req.sid, REFUSED_STREAM))

    with h2server(handler) as srv:
        _, error, took = get(srv.url("/r"), method="POST", content=b"body", max_time=10)
        sent = srv.count("/r")
    assert error is not None and took < 9, (error, took)
    assert sent == 2, f"REFUSED_STREAM is sent again the same way, once: {sent} times"


@pytest.mark.parametrize(
    ("code", "want"),
    [
        (PROTOCOL_ERROR, "protocol_error"),
        (INTERNAL_ERROR, "connection_reset"),
        (CANCEL, "connection_reset"),
        (ENHANCE_YOUR_CALM, "connection_reset"),
    ],
)
@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_other_resets_are_errors_and_never_resend(method: str, code: int, want: str) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.rst(req.sid, code))

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/r"), method=method, content=b"body")
        sent = srv.count("/r")
    assert error == want, f"RST_STREAM {code}: docs/http.md says {want}; got {error}"
    assert sent == 1, f"a {method} reset with {code} is never sent again: {sent}"


def test_reset_mid_body_keeps_status_and_is_reset(tmp_path: Path) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", "1000")]))
        conn.frames(conn.data(req.sid, b"a" * 100))
        time.sleep(0.1)
        conn.frames(conn.rst(req.sid, INTERNAL_ERROR))

    with h2server(handler) as srv:
        _proc, recs = fetch_records(
            tmp_path, [srv.url("/m")], "--http2-prior-knowledge", "-X", "POST", "-d", "a=1"
        )
        sent = srv.count("/m")
    r = recs[0]
    assert r["error"] == "connection_reset" and r["status"] == 200, r
    assert sent == 1


def test_connection_lost_fails_each_stream_and_posts_once() -> None:
    """docs/http.md: "A connection lost ... fails each of its streams"."""

    def handler(conn: Conn, req: Request) -> None:
        for _ in range(60):
            if len(conn.streams) >= 3:
                break
            time.sleep(0.05)
        time.sleep(0.1)
        conn.shutdown()

    async def main(url: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=10) as client:
            return await asyncio.gather(
                *(client.post(url + f"/{n}", content=b"x") for n in range(3)),
                return_exceptions=True,
            )

    with h2server(handler) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        counts = [srv.count(f"/{n}") for n in range(3)]
    classes = [getattr(r, "error_class", repr(r)) for r in results]
    assert classes == ["connection_reset"] * 3, classes
    assert counts == [1, 1, 1], f"a POST on a lost connection is not sent again: {counts}"


def test_complete_response_then_rst_no_error_is_delivered() -> None:
    """RFC 9113 8.1: a server may answer before the whole request came, then
    RST_STREAM(NO_ERROR) to stop the upload: "Clients MUST NOT discard
    responses as a result of receiving such a RST_STREAM"."""

    def on_headers(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", "413"), ("content-length", "4")]),
            conn.data(req.sid, b"nope", end_stream=True),
            conn.rst(req.sid, NO_ERROR),
        )

    with h2server(lambda c, r: None, on_headers=on_headers, auto_window=False) as srv:
        response, error, _ = get(srv.url("/up"), method="POST", content=b"u" * 1_000_000)
    assert error is None and response.status_code == 413 and response.content == b"nope", error


# --- bounds: header blocks --------------------------------------------------------


def continuation_flood(
    pieces: int, piece: bytes | None = None, state: dict[str, Any] | None = None
) -> Handler:
    """A response head split across ``pieces`` CONTINUATION frames (each an
    empty or ``piece`` fragment, the real block in the last); ``state["done"]``
    is set once every frame was written (True) or a write failed (False)."""

    def handler(conn: Conn, req: Request) -> None:
        try:
            flooding(conn, req)
            if state is not None:
                state["done"] = not conn.broken
        finally:
            if state is not None:
                state["event"].set()

    def flooding(conn: Conn, req: Request) -> None:
        block = conn.block([(":status", "200"), ("content-length", "2")])
        first = HeadersFrame(req.sid, b"")
        one = ContinuationFrame(req.sid, piece or b"").serialize()
        if not conn.write(first.serialize()):
            return
        for _ in range(pieces // 1024):
            if not conn.write(one * 1024):
                return
        out = [one] * (pieces % 1024)
        last = ContinuationFrame(req.sid, block)
        last.flags.add("END_HEADERS")
        out.append(last.serialize())
        out.append(conn.data(req.sid, b"ok", end_stream=True).serialize())
        conn.write(b"".join(out))

    return handler


def test_continuation_flood_is_cut_off_at_64_frames() -> None:
    """docs/http.md: "one header block may span at most 64 CONTINUATION frames
    (...: a CONTINUATION flood is cut off)"."""
    with h2server(continuation_flood(200)) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", f"200 CONTINUATION frames: {error}"


def test_endless_continuation_flood_is_cut_off_not_read_forever() -> None:
    """A flood that never ends (bounded here at 3,000,000 frames, 30 MB, more
    than loopback's socket buffers hold): the client stops reading and closes,
    well before the server is done."""
    state: dict[str, Any] = {"event": threading.Event(), "done": None}
    with h2server(continuation_flood(3_000_000, b"\x00", state)) as srv:
        _, error, took = get(srv.url("/"), max_time=20)
        state["event"].wait(20)
    assert error == "protocol_error" and took < 15, (error, took)
    assert state["done"] is False, (
        f"the client read the whole 30 MB flood instead of cutting it off: {state}"
    )


def test_continuation_within_bound_is_fine() -> None:
    """A head split over 10 CONTINUATION frames is a normal response."""

    def handler(conn: Conn, req: Request) -> None:
        block = conn.block([(":status", "200"), ("content-length", "2"), ("x-a", "b" * 500)])
        step = len(block) // 11 + 1
        parts = [block[i : i + step] for i in range(0, len(block), step)]
        frames: list[Frame] = [HeadersFrame(req.sid, parts[0])]
        for p in parts[1:]:
            frames.append(ContinuationFrame(req.sid, p))
        frames[-1].flags.add("END_HEADERS")
        frames.append(conn.data(req.sid, b"ok", end_stream=True))
        conn.frames(*frames)

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"))
    assert error is None and response.headers["x-a"] == "b" * 500, error


def test_hpack_bomb_stops_at_the_header_list_bound() -> None:
    """One 4 KB entry in the dynamic table, then referenced 400 times: a 7 KB
    block that decodes to 1.6 MB. docs/http.md: bounded at 300 KiB decoded, "so
    an HPACK bomb stops there"."""

    def handler(conn: Conn, req: Request) -> None:
        pairs = [(":status", "200"), ("content-length", "2")]
        pairs += [("x-bomb", "b" * 4000)] * 400
        block = conn.block(pairs)
        assert len(block) < 10_000, len(block)  # the bomb is small on the wire
        frames: list[Frame] = [HeadersFrame(req.sid, block[:16000])]
        frames[-1].flags.add("END_HEADERS")
        frames.append(conn.data(req.sid, b"ok", end_stream=True))
        conn.frames(*frames)

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", f"an HPACK bomb: {error}"


def literal_headers(total: int) -> Handler:
    """A head of ``total`` bytes of literal (never indexed) header fields,
    split in CONTINUATIONs of 16 KB."""

    def handler(conn: Conn, req: Request) -> None:
        enc = conn.encoder
        pairs: list[Any] = [(":status", "200"), ("content-length", "2")]
        n = total // 1000
        from hpack import HeaderTuple, NeverIndexedHeaderTuple

        pairs = [HeaderTuple(k, v) for k, v in pairs]
        pairs += [NeverIndexedHeaderTuple(f"x-h{i}", "v" * 990) for i in range(n)]
        block = bytes(enc.encode(pairs))
        parts = [block[i : i + 16384] for i in range(0, len(block), 16384)]
        frames: list[Frame] = [HeadersFrame(req.sid, parts[0])]
        frames += [ContinuationFrame(req.sid, p) for p in parts[1:]]
        frames[-1].flags.add("END_HEADERS")
        frames.append(conn.data(req.sid, b"ok", end_stream=True))
        conn.frames(*frames)

    return handler


def test_header_list_under_the_bound_arrives_whole() -> None:
    with h2server(literal_headers(200_000)) as srv:
        response, error, _ = get(srv.url("/"))
    assert error is None, f"a 200 KB head (under 300 KiB, 13 CONTINUATIONs) is fine: {error}"
    assert len([k for k in response.headers if k.startswith("x-h")]) == 200


def test_header_list_over_the_bound_is_refused() -> None:
    with h2server(literal_headers(600_000)) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", f"a 600 KB head (over 300 KiB): {error}"


# --- bounds: floods ---------------------------------------------------------------


def flood(make: Callable[[int], Frame], n: int) -> Handler:
    def handler(conn: Conn, req: Request) -> None:
        out = []
        for i in range(n):
            out.append(make(i).serialize())
            if len(out) >= 500:
                if not conn.write(b"".join(out)):
                    return
                out = []
        conn.write(b"".join(out))
        time.sleep(0.3)
        ok(conn, req)

    return handler


def ping(i: int) -> Frame:
    return PingFrame(0, i.to_bytes(8, "big"))


def settings_frame(i: int) -> Frame:
    return SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 100 + i % 7})


@pytest.mark.parametrize("make", [ping, settings_frame], ids=["PING", "SETTINGS"])
def test_ping_and_settings_floods_fail_the_connection_calmly(make: Callable[[int], Frame]) -> None:
    """docs/http.md: more than 1,000 PING or SETTINGS frames in a second fail
    the connection (protocol_error, GOAWAY ENHANCE_YOUR_CALM); the client
    answers no more than about that many."""
    with h2server(flood(make, 20_000)) as srv:
        _, error, _took = get(srv.url("/"), max_time=10)
        time.sleep(0.3)
        conn = srv.conns[0]
    assert error == "protocol_error", error
    assert (0, ENHANCE_YOUR_CALM) in [(0, c) for _, c in conn.goaways_received], (
        f"GOAWAY ENHANCE_YOUR_CALM: {conn.goaways_received}"
    )
    answered = conn.ping_acks if make is ping else conn.settings_acks
    assert answered <= 1_100, f"the client answered {answered} of 20,000 flood frames"


def test_window_update_flood_does_not_hang_the_client() -> None:
    """WINDOW_UPDATEs need no answer: 20,000 of them (increment 1, the window
    stays legal) then the response - the client takes it or fails calmly, in
    bounded time, never a hang."""
    with h2server(flood(lambda i: WindowUpdateFrame(0, window_increment=1), 20_000)) as srv:
        _response, error, took = get(srv.url("/"), max_time=10)
    assert took < 9 and (error in (None, "protocol_error")), (error, took)


def test_window_update_overflow_is_a_protocol_error() -> None:
    """RFC 9113 6.9.1: a window over 2^31-1 is a FLOW_CONTROL_ERROR: the
    connection breaks the protocol, so its stream fails (docs/http.md:
    protocol_error), never an exception of another kind."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            WindowUpdateFrame(0, window_increment=MAX_ID),
            WindowUpdateFrame(0, window_increment=MAX_ID),
        )
        time.sleep(0.2)
        ok(conn, req)

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/"), method="POST", content=b"x")
    assert error == "protocol_error", error


def test_push_promise_is_a_protocol_error() -> None:
    """The client refused push (SETTINGS_ENABLE_PUSH 0): a PUSH_PROMISE is a
    protocol error (RFC 9113 8.4), never a pushed response taken."""

    def handler(conn: Conn, req: Request) -> None:
        pp = PushPromiseFrame(
            req.sid,
            promised_stream_id=2,
            data=conn.block(
                [(":method", "GET"), (":scheme", "http"), (":path", "/pushed"), (":authority", "x")]
            ),
        )
        pp.flags.add("END_HEADERS")
        conn.frames(pp, conn.headers(2, [(":status", "200")], end_stream=True))
        ok(conn, req)

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", error


# --- bounds: the response head's fields -------------------------------------------


def head_of(pairs: list[tuple[str, str]], body: bytes = b"ok") -> Handler:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.headers(req.sid, pairs), conn.data(req.sid, body, end_stream=True))

    return handler


@pytest.mark.parametrize(
    "field",
    [
        ("connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("keep-alive", "timeout=5"),
        ("upgrade", "h2c"),
    ],
    ids=lambda f: f[0],
)
def test_connection_specific_response_field_is_protocol_error(
    field: tuple[str, str], tmp_path: Path
) -> None:
    with h2server(head_of([(":status", "200"), field, ("content-length", "2")])) as srv:
        _proc, recs = fetch_records(tmp_path, [srv.url("/")], "--http2-prior-knowledge")
    assert recs[0]["error"] == "protocol_error", (
        f"docs/http.md: a response with {field[0]} is a protocol_error: {recs[0]}"
    )


@pytest.mark.parametrize(
    "pairs",
    [
        [("content-length", "2")],  # no :status
        [(":status", "200"), (":status", "200"), ("content-length", "2")],
        [("content-length", "2"), (":status", "200")],  # pseudo after a regular field
        [(":status", "200"), (":path", "/"), ("content-length", "2")],  # a request's pseudo
        [(":status", "200"), (":foo", "bar"), ("content-length", "2")],  # unknown pseudo
        [(":status", "2x0"), ("content-length", "2")],
        [(":status", "20"), ("content-length", "2")],
    ],
    ids=[
        "missing",
        "twice",
        "after-regular",
        "request-pseudo",
        "unknown",
        "not-digits",
        "two-digits",
    ],
)
def test_bad_pseudo_headers_are_protocol_errors(pairs: list[tuple[str, str]]) -> None:
    with h2server(head_of(pairs)) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", (
        f"docs/http.md: invalid or misplaced pseudo-headers are a protocol_error: {pairs}: {error}"
    )


def test_uppercase_field_name_is_protocol_error() -> None:
    """RFC 9113 8.2.1: a field name with uppercase letters makes the message malformed."""
    with h2server(head_of([(":status", "200"), ("X-Upper", "1"), ("content-length", "2")])) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", error


def test_more_data_than_content_length_is_protocol_error(tmp_path: Path) -> None:
    with h2server(head_of([(":status", "200"), ("content-length", "3")], b"abcdef")) as srv:
        _proc, recs = fetch_records(tmp_path, [srv.url("/")], "--http2-prior-knowledge")
    assert recs[0]["error"] == "protocol_error", recs[0]


def test_less_data_than_content_length_is_not_a_success(tmp_path: Path) -> None:
    """The issue: "Content-Length against the DATA received" - a stream that
    ends short of its Content-Length is malformed (RFC 9113 8.1.1), not a
    truncated 200."""
    with h2server(head_of([(":status", "200"), ("content-length", "10")], b"abc")) as srv:
        _proc, recs = fetch_records(tmp_path, [srv.url("/")], "--http2-prior-knowledge")
    assert recs[0]["error"] in ("protocol_error", "connection_reset"), recs[0]


def test_more_data_than_content_length_over_several_frames() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", "200"), ("content-length", "5")]),
            conn.data(req.sid, b"abc"),
            conn.data(req.sid, b"def"),
            conn.data(req.sid, b"", end_stream=True),
        )

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", error


def test_trailers_are_ignored_and_body_kept() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", "200"), ("content-type", "text/plain")]),
            conn.data(req.sid, b"body-with-trailers"),
            conn.headers(req.sid, [("x-checksum", "abc"), ("grpc-status", "0")], end_stream=True),
        )

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"))
    assert error is None, error
    assert response.status_code == 200 and response.content == b"body-with-trailers"
    assert "x-checksum" not in response.headers, "docs/http.md: trailers are ignored"


@pytest.mark.parametrize("count", [1, 50])
def test_interim_responses_are_skipped(count: int) -> None:
    def handler(conn: Conn, req: Request) -> None:
        frames: list[Frame] = []
        for _ in range(count):
            frames.append(
                conn.headers(req.sid, [(":status", "103"), ("link", "</a.css>; rel=preload")])
            )
        frames.append(conn.headers(req.sid, [(":status", "100")]))
        frames.append(conn.headers(req.sid, [(":status", "201"), ("content-length", "4")]))
        frames.append(conn.data(req.sid, b"done", end_stream=True))
        conn.frames(*frames)

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"), method="POST", content=b"x")
    assert error is None and response.status_code == 201 and response.content == b"done", error


def test_data_before_headers_is_protocol_error() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.data(req.sid, b"early", end_stream=True))

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/"))
    assert error == "protocol_error", error


def test_oversized_frame_is_protocol_error() -> None:
    """A DATA frame of 20,000 bytes over the client's SETTINGS_MAX_FRAME_SIZE (16,384 unless it said more)."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.client_settings.get(SettingsFrame.MAX_FRAME_SIZE, 16384) > 20000:
            conn.respond(req, 200, b"skip")
            return
        conn.frames(
            conn.headers(req.sid, [(":status", "200")]),
            conn.data(req.sid, b"f" * 20000, end_stream=True),
        )

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"))
    if response is not None and response.content == b"skip":
        pytest.skip("the client allows frames over 20,000 bytes")
    assert error == "protocol_error", error


def test_garbage_instead_of_frames_is_protocol_error() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with h2server(handler) as srv:
        _, error, took = get(srv.url("/"))
    assert error == "protocol_error" and took < 5, (error, took)


# --- flow control and bodies ------------------------------------------------------


def test_zero_window_that_never_opens_is_a_bounded_write_timeout(tmp_path: Path) -> None:
    """SETTINGS_INITIAL_WINDOW_SIZE 0 and no WINDOW_UPDATE ever: the POST's body
    can never go. docs: "a stalled upload is write_timeout", within --max-time.
    (The body is over the default 65,535-byte window: a client may send that
    much before the server's SETTINGS arrive, RFC 9113 6.9.2, and the 5,000
    bytes first tried here all went before them - a read_timeout, rightly.)"""
    body = tmp_path / "body.bin"
    body.write_bytes(b"x" * 200_000)
    with h2server(
        lambda c, r: None, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0}, auto_window=False
    ) as srv:
        start = time.monotonic()
        proc, recs = fetch_records(
            tmp_path,
            [srv.url("/up")],
            "--http2-prior-knowledge",
            "--max-time",
            "3",
            "--data-binary",
            "@" + str(body),
        )
        took = time.monotonic() - start
    assert recs[0]["error"] == "write_timeout", recs[0]
    assert took < 30 and proc.returncode == 0


def test_zero_window_does_not_block_a_get() -> None:
    """HEADERS are not flow-controlled: a GET goes through a server's zero window."""
    with h2server(ok, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0}, auto_window=False) as srv:
        response, error, _ = get(srv.url("/g"))
    assert error is None and response.content == b"hello /g", error


def test_server_that_stops_reading_the_upload_is_write_timeout() -> None:
    """The default 65,535-byte window, never updated: a 2 MB POST stalls after 64 KB."""
    with h2server(lambda c, r: None, auto_window=False) as srv:
        _, error, took = get(srv.url("/up"), method="POST", content=b"u" * 2_000_000, max_time=3)
        got = sum(len(r.body) for c in srv.conns for r in c.streams.values())
    assert got <= 65535, f"the client sent {got} bytes past the window"
    assert error == "write_timeout" and took < 10, (error, took)


def test_window_opened_late_completes_the_upload() -> None:
    """A window of 0 opened 0.5 s later by WINDOW_UPDATEs: the upload completes."""
    body = os.urandom(300_000)

    def on_headers(conn: Conn, req: Request) -> None:
        def later() -> None:
            time.sleep(0.5)
            conn.frames(
                WindowUpdateFrame(req.sid, window_increment=1_000_000),
                WindowUpdateFrame(0, window_increment=1_000_000),
            )

        threading.Thread(target=later, daemon=True).start()

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(req, 200, hashlib.sha256(req.body).hexdigest().encode())

    with h2server(
        handler, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0}, on_headers=on_headers
    ) as srv:
        response, error, _ = get(srv.url("/up"), method="POST", content=body)
    assert error is None and response.content == hashlib.sha256(body).hexdigest().encode(), error


def test_large_body_arrives_whole_through_the_windows() -> None:
    """12 MB, sent only as the client's windows allow: the client must keep
    acknowledging DATA (docs: "at once for a body read whole")."""
    body = os.urandom(12 * 2**20)

    with h2server(lambda c, r: c.respond(r, 200, body)) as srv:
        response, error, _ = get(srv.url("/big"), max_time=30, body_cap=64 * 2**20)
    assert error is None, error
    assert hashlib.sha256(response.content).digest() == hashlib.sha256(body).digest()


def test_body_over_the_cap_is_body_too_large(tmp_path: Path) -> None:
    body = b"y" * 500_000
    with h2server(lambda c, r: c.respond(r, 200, body)) as srv:
        _proc, recs = fetch_records(
            tmp_path, [srv.url("/")], "--http2-prior-knowledge", "--max-filesize", "100K"
        )
    assert recs[0]["error"] == "body_too_large" and recs[0]["status"] == 200, recs[0]


def test_gzip_bomb_over_http2_is_body_too_large() -> None:
    """docs/http.md: "The body cap is the client's, as for HTTP/1.1"."""
    bomb = gzip.compress(b"\0" * (50 * 2**20), 9)

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(
            req, 200, bomb, (("content-encoding", "gzip"), ("content-length", str(len(bomb))))
        )

    with h2server(handler) as srv:
        _, error, _ = get(srv.url("/"), body_cap=2**20)
    assert error == "body_too_large", error


def test_slow_reader_holds_back_its_own_stream_only() -> None:
    """docs/http.md: "a slow reader holds back its own stream only, never the
    connection's others". A streamed 8 MB body left unread; a second request on
    the same connection completes meanwhile; then the first is read whole."""
    big = os.urandom(8 * 2**20)

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(req, 200, big if req.path == "/big" else b"small")

    async def main(url: str) -> tuple[bytes, bytes]:
        async with surge.AsyncClient(
            http2_prior_knowledge=True, max_time=30, body_cap=64 * 2**20
        ) as client:
            async with client.stream("GET", url + "/big") as streamed:
                await asyncio.sleep(0.5)
                small = await asyncio.wait_for(client.get(url + "/small"), 10)
                data = b"".join([c async for c in streamed.aiter_bytes()])
            return small.content, data

    with h2server(handler) as srv:
        small, data = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        conns = len(srv.conns)
    assert small == b"small" and data == big
    assert conns == 1, f"one connection per origin: {conns}"


# --- the pool: streams, not connections -------------------------------------------


def delayed(seconds: float) -> Handler:
    def handler(conn: Conn, req: Request) -> None:
        time.sleep(seconds)
        ok(conn, req)

    return handler


def concurrent(url: str, n: int, *, warm: bool = True, **options: Any) -> list[Any]:
    """``n`` GETs at once on one AsyncClient; first one request alone (``warm``),
    so that the server's SETTINGS have arrived (docs/http.md: 100 streams "until
    its SETTINGS arrive")."""

    async def main() -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=30, **options) as client:
            if warm:
                await client.get(f"{url}/warm")
            return await asyncio.gather(
                *(client.get(f"{url}/{i}") for i in range(n)), return_exceptions=True
            )

    return asyncio.run(asyncio.wait_for(main(), 90))


@pytest.mark.parametrize("per_host", [1, None])
def test_max_concurrent_streams_one_with_twenty_requests(per_host: int | None) -> None:
    """SETTINGS_MAX_CONCURRENT_STREAMS 1 and 20 requests at once: all complete,
    each processed once. With per_host=1, one connection and never 2 streams
    open; without, the server refuses (REFUSED_STREAM, as nginx does) any
    stream over its limit - the client may open more connections, whose first
    flight is sent before their SETTINGS arrive (docs: 100 until then)."""

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/warm":
            with conn.cv:
                conn.max_open = 0
        delayed(0.05)(conn, req)

    limit = {SettingsFrame.MAX_CONCURRENT_STREAMS: 1}
    with h2server(handler, settings=limit, enforce_limit=per_host is None) as srv:
        results = concurrent(srv.url("").rstrip("/"), 20, per_host=per_host)
        processed = [sum(1 for _, _, _, p, _ in srv.requests if p == f"/{i}") for i in range(20)]
        per_conn = [c.max_open for c in srv.conns]
        refused = [c.refused for c in srv.conns]
        conns = len(srv.conns)
    bad = [r for r in results if isinstance(r, BaseException)]
    assert not bad, (
        f"all 20 complete: {len(bad)} failed, {bad[:2]} (streams refused per connection: {refused}; peak open {per_conn})"
    )
    assert [r.content for r in results] == [f"hello /{i}".encode() for i in range(20)]
    assert processed == [1] * 20, f"each processed once: {processed}"
    if per_host == 1:
        assert max(per_conn) <= 1, f"SETTINGS_MAX_CONCURRENT_STREAMS 1 exceeded: {per_conn}"
        assert conns == 1, f"--per-host 1: one connection, {conns} opened"


def test_one_connection_carries_many_streams() -> None:
    """docs/http.md: "Requests to an origin share one connection, as streams"."""
    with h2server(delayed(0.2)) as srv:
        results = concurrent(srv.url("").rstrip("/"), 50, warm=False)
        conns = len(srv.conns)
        peak = srv.max_open
    assert all(not isinstance(r, BaseException) for r in results)
    assert conns == 1, f"50 requests at once to one h2 origin opened {conns} connections"
    assert peak >= 40, f"they should run as concurrent streams: peak {peak}"


def test_max_concurrent_streams_lowered_mid_connection() -> None:
    """After the first request, the server lowers its limit to 2 (SETTINGS):
    once the client acknowledged it, no more than 2 streams are open at once."""
    marks: dict[str, Any] = {}

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/warm":
            conn.frames(SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 2}))
            time.sleep(0.3)
            marks["acks"] = conn.settings_acks
            with conn.cv:
                conn.max_open = 0
            ok(conn, req)
            return
        time.sleep(0.05)
        ok(conn, req)

    async def main(url: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=30, per_host=1) as client:
            await client.get(url + "/warm")
            return await asyncio.gather(
                *(client.get(f"{url}/{i}") for i in range(20)), return_exceptions=True
            )

    with h2server(handler) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        peak = srv.conns[0].max_open
        conns = len(srv.conns)
    assert marks["acks"] >= 2, "the client acknowledged the new SETTINGS"
    assert all(not isinstance(r, BaseException) for r in results), results
    assert conns == 1 and peak <= 2, (
        f"peak {peak} streams on {conns} connections after MAX_CONCURRENT_STREAMS 2"
    )


def test_max_concurrent_streams_zero_then_raised() -> None:
    """After a first request the limit drops to 0 for 0.5 s, then rises to 10:
    the requests wait, then all complete, never more than the limit open."""

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/warm":
            conn.frames(SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 0}))
            time.sleep(0.2)
            with conn.cv:
                conn.max_open = 0
            ok(conn, req)

            def later() -> None:
                time.sleep(0.5)
                with conn.cv:
                    conn.max_open = 0
                conn.frames(SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 10}))

            threading.Thread(target=later, daemon=True).start()
            return
        time.sleep(0.02)
        ok(conn, req)

    with h2server(handler) as srv:
        results = concurrent(srv.url("").rstrip("/"), 15, per_host=1)
        peak = srv.conns[0].max_open
        conns = len(srv.conns)
    assert all(not isinstance(r, BaseException) for r in results), results
    assert conns == 1 and peak <= 10, f"peak {peak} on {conns} connections"


def test_threads_sharing_a_sync_client_share_one_connection() -> None:
    """docs/http.md: "Threads that share a sync Client share its HTTP/2 connections"."""
    from concurrent.futures import ThreadPoolExecutor

    with h2server(delayed(0.05)) as srv:
        base = srv.url("").rstrip("/")
        with (
            surge.Client(http2_prior_knowledge=True, max_time=20) as client,
            ThreadPoolExecutor(16) as pool,
        ):
            responses = list(pool.map(lambda i: client.get(f"{base}/{i}"), range(80)))
        conns = len(srv.conns)
        counts = [srv.count(f"/{i}") for i in range(80)]
    assert [r.content for r in responses] == [f"hello /{i}".encode() for i in range(80)]
    assert {r.http_version for r in responses} == {"HTTP/2"}
    assert counts == [1] * 80
    assert conns == 1, f"16 threads, one client, one h2 origin: {conns} connections"


# --- TLS and ALPN -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def cafile(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def server_context(ca: trustme.CA, alpn: list[str] | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1", "a.test", "b.test").configure_cert(ctx)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def test_tls_alpn_h2_record_says_h2(ca: trustme.CA, cafile: str, tmp_path: Path) -> None:
    with h2server(ok, tls=server_context(ca, ["h2"])) as srv:
        _proc, recs = fetch_records(tmp_path, [srv.url("/t")], "--cacert", cafile, "-i")
    r = recs[0]
    assert r["status"] == 200 and r["error"] is None, r
    assert (r["tls"] or {}).get("alpn") == "h2", f"docs: a record's tls.alpn is h2: {r['tls']}"


def test_tls_h2_reset_over_alpn_is_an_error_class(ca: trustme.CA, cafile: str) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.rst(req.sid, PROTOCOL_ERROR))

    with h2server(handler, tls=server_context(ca, ["h2"])) as srv:
        _, error, _ = get(srv.url("/"), cafile=cafile, method="POST", content=b"x")
        sent = srv.count("/")
    assert error == "protocol_error" and sent == 1, (error, sent)


def test_tls_goaway_over_alpn_is_retried(ca: trustme.CA, cafile: str) -> None:
    with h2server(goaway_first_conn(0), tls=server_context(ca, ["h2"])) as srv:
        response, error, _ = get(srv.url("/g"), cafile=cafile, method="POST", content=b"x")
        sent = srv.count("/g")
    assert error is None and response.http_version == "HTTP/2" and sent == 2, (error, sent)


def test_http2_false_offers_http11_alone(ca: trustme.CA, cafile: str) -> None:
    """docs/http.md: http2=False: "ALPN offers http/1.1 alone". A server that
    would pick h2 sees no h2 offered (it picks nothing: the handshake goes on)."""
    seen: list[Any] = []
    ctx = server_context(ca, None)

    def pick(sock: ssl.SSLSocket, protocols: list[str]) -> None:
        return None

    ctx.set_alpn_protocols(["h2", "http/1.1"])
    ctx.set_servername_callback(lambda s, n, c: None)

    raw = socket.socket()
    raw.bind(("127.0.0.1", 0))
    raw.listen(4)
    port = raw.getsockname()[1]

    def serve() -> None:
        with contextlib.suppress(OSError):
            c, _ = raw.accept()
            s = ctx.wrap_socket(c, server_side=True)
            seen.append(s.selected_alpn_protocol())
            s.recv(65536)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            s.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        response, error, _ = get(f"https://127.0.0.1:{port}/", cafile=cafile, http2=False)
    finally:
        raw.close()
    assert error is None and response.http_version == "HTTP/1.1", error
    assert seen == ["http/1.1"], f"ALPN chosen from the client's offer: {seen}"


def test_server_picks_h2_then_speaks_http11_fails_bounded(ca: trustme.CA, cafile: str) -> None:
    raw = socket.socket()
    raw.bind(("127.0.0.1", 0))
    raw.listen(4)
    port = raw.getsockname()[1]
    ctx = server_context(ca, ["h2"])

    def serve() -> None:
        with contextlib.suppress(OSError):
            c, _ = raw.accept()
            s = ctx.wrap_socket(c, server_side=True)
            s.recv(65536)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            time.sleep(8)
            s.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        _, error, took = get(f"https://127.0.0.1:{port}/", cafile=cafile, max_time=6)
    finally:
        raw.close()
    assert error == "protocol_error" and took < 5, (
        f"h2 by ALPN, then HTTP/1.1 bytes: a protocol_error at once: {error} after {took:.1f} s"
    )


# --- real servers: nginx ----------------------------------------------------------

BIG = bytes(range(256)) * 8192  # 2 MiB


class Nginx:
    def __init__(self, base: Path, cafile: str, ports: dict[str, int]) -> None:
        self.base = base
        self.cafile = cafile
        self.ports = ports
        self.log = base / "access.log"

    def url(self, kind: str, path: str = "/small", host: str = "localhost") -> str:
        scheme = "http" if kind.startswith("h2c") else "https"
        return f"{scheme}://{host}:{self.ports[kind]}{path}"

    def lines(self) -> list[dict[str, str]]:
        """The access log: one dict per request."""
        keys = [
            "port",
            "proto",
            "reused",
            "sni",
            "verify",
            "conn",
            "method",
            "uri",
            "status",
            "tls",
        ]
        out = []
        for line in self.log.read_text().splitlines():
            out.append(dict(zip(keys, line.split("|"), strict=True)))
        return out

    def since(self, mark: int) -> list[dict[str, str]]:
        return self.lines()[mark:]

    def mark(self) -> int:
        return len(self.lines())


@pytest.fixture(scope="module")
def ngx(ca: trustme.CA, cafile: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    base = tmp_path_factory.mktemp("nginx")
    cert = ca.issue_cert("localhost", "127.0.0.1", "a.test", "b.test")
    cert.private_key_and_cert_chain_pem.write_to_path(str(base / "server.pem"))
    (base / "www").mkdir()
    (base / "www" / "small").write_bytes(b"small body\n")
    (base / "www" / "big").write_bytes(BIG)
    kinds = [
        "tls",
        "h2c",
        "tls_ka0",
        "h2c_ka0",
        "tls_mcs1",
        "h2c_mcs1",
        "tls_client_cert",
        "tls_h1_ka0",
        "tls_kr5",
        "tls_idle1",
        "tls12_ka0",
        "tls_stateful_ka0",
    ]
    ports = {k: free_port() for k in kinds}
    pem = base / "server.pem"

    def block(kind: str, listen: str, extra: str = "") -> str:
        return f"""
    server {{
        listen 127.0.0.1:{ports[kind]} {listen};
        server_name localhost a.test b.test;
        root {base / "www"};
        access_log {base / "access.log"} h2;
        {extra}
        location = /echo {{ return 200 "$request_method $request_uri\\n"; }}
        location = /slow {{ echo_sleep 0; return 200 "slow\\n"; }}
    }}"""

    tls = f"ssl_certificate {pem}; ssl_certificate_key {pem};"
    servers = """
    log_format h2 '$server_port|$server_protocol|$ssl_session_reused|$ssl_server_name|$ssl_client_verify|$connection|$request_method|$request_uri|$status|$ssl_protocol';
    ssl_session_cache shared:SSL:1m;
    ssl_session_timeout 10m;
    http2_max_concurrent_streams 128;
    """
    servers += block("tls", "ssl http2", tls)
    servers += block("h2c", "http2")
    servers += block("tls_ka0", "ssl http2", tls + " keepalive_timeout 0;")
    servers += block("h2c_ka0", "http2", "keepalive_timeout 0;")
    servers += block("tls_mcs1", "ssl http2", tls + " http2_max_concurrent_streams 1;")
    servers += block(
        "tls_client_cert",
        "ssl http2",
        tls + f" ssl_verify_client optional; ssl_client_certificate {cafile}; keepalive_timeout 0;",
    )
    servers += block("tls_h1_ka0", "ssl", tls + " keepalive_timeout 0;")
    servers += block("h2c_mcs1", "http2", "http2_max_concurrent_streams 1;")
    servers += block("tls_kr5", "ssl http2", tls + " keepalive_requests 5;")
    servers += block("tls_idle1", "ssl http2", tls + " keepalive_timeout 1s;")
    servers += block("tls12_ka0", "ssl http2", tls + " ssl_protocols TLSv1.2; keepalive_timeout 0;")
    servers += block(
        "tls_stateful_ka0", "ssl http2", tls + " ssl_session_tickets off; keepalive_timeout 0;"
    )
    servers = servers.replace("echo_sleep 0; ", "")
    with nginx(base, servers, wait_port=ports["tls_h1_ka0"]):
        for port in ports.values():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                    break
                time.sleep(0.05)
        yield Nginx(base, cafile, ports)


RESOLVE_TEST = ["a.test:*:127.0.0.1", "b.test:*:127.0.0.1"]


def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["curl", "-sS", "--max-time", "20", *args], capture_output=True, timeout=60, check=False
    )


def curl_head(*args: str) -> tuple[str, dict[str, str], bytes]:
    """(status line's version, lower-cased headers, body) from curl."""
    proc = curl("-D", "-", *args)
    assert proc.returncode == 0, proc.stderr
    head, _, body = proc.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0].split(" ")[0], headers, body


@pytest.mark.parametrize("kind", ["tls", "h2c"])
def test_nginx_h2_matches_curl(ngx: Nginx, kind: str) -> None:
    url = ngx.url(kind, "/big")
    pk = ["--http2-prior-knowledge"] if kind == "h2c" else ["--http2"]
    version, want, body = curl_head(*pk, "--cacert", ngx.cafile, url)
    assert version == "HTTP/2" and body == BIG, "the reference: curl speaks h2 to this nginx"
    mark = ngx.mark()
    response, error, _ = get(url, cafile=ngx.cafile, max_time=20)
    assert error is None, error
    assert response.http_version == "HTTP/2"
    assert response.status_code == 200 and response.content == BIG
    for name in ("content-length", "content-type", "etag", "last-modified", "accept-ranges"):
        assert response.headers.get(name) == want.get(name), (
            name,
            response.headers.get(name),
            want.get(name),
        )
    time.sleep(0.1)
    assert [x["proto"] for x in ngx.since(mark)] == ["HTTP/2.0"]


@pytest.mark.parametrize("flag", [[], ["--http1.1"]])
def test_nginx_fetch_records_alpn_and_protocol(ngx: Nginx, flag: list[str], tmp_path: Path) -> None:
    urls = [ngx.url("tls", f"/echo?n={i}") for i in range(10)]
    mark = ngx.mark()
    proc, recs = fetch_records(tmp_path, urls, "--cacert", ngx.cafile, "-c", "10", *flag)
    assert proc.returncode == 0
    want_alpn, want_proto = ("http/1.1", "HTTP/1.1") if flag else ("h2", "HTTP/2.0")
    assert [r["status"] for r in recs] == [200] * 10, recs[0]
    assert {r["tls"]["alpn"] for r in recs} == {want_alpn}, [r["tls"] for r in recs[:2]]
    time.sleep(0.1)
    seen = ngx.since(mark)
    assert {x["proto"] for x in seen} == {want_proto}
    if not flag:
        assert len({x["conn"] for x in seen}) == 1, (
            f"one connection carries the origin's requests: {seen}"
        )


def test_nginx_http2_false_client(ngx: Nginx) -> None:
    response, error, _ = get(ngx.url("tls"), cafile=ngx.cafile, http2=False)
    assert error is None and response.http_version == "HTTP/1.1", error


@pytest.mark.parametrize("kind", ["tls_ka0", "h2c_ka0"])
def test_nginx_keepalive_0_many_sequential(ngx: Nginx, kind: str) -> None:
    """nginx keepalive_timeout 0: a GOAWAY with every response; 60 requests
    one after another on one client all succeed, each processed once."""

    async def main() -> list[Any]:
        out = []
        async with surge.AsyncClient(
            http2_prior_knowledge=kind.startswith("h2c"), cafile=ngx.cafile, max_time=10
        ) as client:
            for i in range(60):
                try:
                    out.append((await client.get(ngx.url(kind, f"/echo?s={i}"))).status_code)
                except surge.http.RequestError as e:
                    out.append(e.error_class)
        return out

    mark = ngx.mark()
    results = asyncio.run(asyncio.wait_for(main(), 120))
    time.sleep(0.2)
    seen = ngx.since(mark)
    assert results == [200] * 60, results
    uris = sorted(x["uri"] for x in seen)
    assert uris == sorted(f"/echo?s={i}" for i in range(60))


@pytest.mark.parametrize("kind", ["tls_ka0", "h2c_ka0"])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_nginx_keepalive_0_many_concurrent(
    ngx: Nginx, kind: str, method: str, tmp_path: Path
) -> None:
    """100 at once through `surge fetch -c 50` to a server that GOAWAYs after
    each response: every one succeeds; each (a POST too) processed exactly once.
    docs/http.md: streams above the GOAWAY's last id "are sent again on another
    connection", and a request none of whose bytes were written may always go
    again. (curl 7.88 --parallel is no reference here: it got 2-3 of 100.)"""
    urls = [ngx.url(kind, f"/echo?c={i}&m={method}") for i in range(100)]
    pk = ["--http2-prior-knowledge"] if kind.startswith("h2c") else []
    data = ["-d", "a=1"] if method == "POST" else []
    mark = ngx.mark()
    _proc, recs = fetch_records(
        tmp_path, urls, "--cacert", ngx.cafile, "-c", "50", *pk, *data, "--max-time", "15"
    )
    time.sleep(0.3)
    seen = ngx.since(mark)
    counts: dict[str, int] = {}
    for x in seen:
        counts[x["uri"]] = counts.get(x["uri"], 0) + 1
    assert set(counts.values()) <= {1}, (
        f"processed twice: {[k for k, v in counts.items() if v != 1]}"
    )
    errors = [(r["error"], r["error_detail"]) for r in recs if r["status"] != 200]
    assert not errors, f"{len(errors)} of 100 failed: {errors[:3]}"
    assert sorted(counts) == sorted(f"/echo?c={i}&m={method}" for i in range(100))


@pytest.mark.parametrize("kind", ["tls_mcs1", "h2c_mcs1"])
def test_nginx_max_concurrent_streams_1_twenty_at_once(ngx: Nginx, kind: str) -> None:
    """nginx http2_max_concurrent_streams 1 (it refuses streams over the
    limit): 20 requests at once on one client all complete, each logged once."""

    async def main() -> list[Any]:
        async with surge.AsyncClient(
            cafile=ngx.cafile, max_time=20, http2_prior_knowledge=kind.startswith("h2c")
        ) as client:
            await client.get(ngx.url(kind, "/echo?warm"))
            return await asyncio.gather(
                *(client.get(ngx.url(kind, f"/echo?m={i}")) for i in range(20)),
                return_exceptions=True,
            )

    mark = ngx.mark()
    results = asyncio.run(asyncio.wait_for(main(), 90))
    time.sleep(0.2)
    seen = [x["uri"] for x in ngx.since(mark)]
    bad = [r for r in results if isinstance(r, BaseException)]
    assert not bad, f"{len(bad)} of 20 failed: {bad[:2]}"
    assert sorted(seen) == sorted(["/echo?warm"] + [f"/echo?m={i}" for i in range(20)])


def test_nginx_sync_client_threads_share_connections(ngx: Nginx) -> None:
    from concurrent.futures import ThreadPoolExecutor

    mark = ngx.mark()
    with surge.Client(cafile=ngx.cafile, max_time=20) as client, ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(lambda i: client.get(ngx.url("tls", f"/echo?t={i}")), range(60)))
    time.sleep(0.2)
    seen = ngx.since(mark)
    assert {r.http_version for r in responses} == {"HTTP/2"}
    assert len({x["conn"] for x in seen}) == 1, (
        f"threads share the client's h2 connection: {len({x['conn'] for x in seen})} connections"
    )


# --- TLS session resumption, checked at nginx ($ssl_session_reused) ---------------


def sequential(urls: list[str], **options: Any) -> list[Any]:
    """GET each URL in turn on one AsyncClient: (status or error class, tls resumed)."""

    async def main() -> list[Any]:
        out = []
        async with surge.AsyncClient(max_time=10, **options) as client:
            for url in urls:
                try:
                    r = await client.get(url)
                    out.append(
                        (
                            r.status_code,
                            r.connection.tls_info().get("resumed") if r.connection else None,
                        )
                    )
                except surge.http.RequestError as e:
                    out.append((e.error_class, None))
        return out

    return asyncio.run(asyncio.wait_for(main(), 120))


@pytest.mark.parametrize("kind", ["tls_ka0", "tls_h1_ka0", "tls12_ka0"])
def test_resumption_third_and_later_resume(ngx: Nginx, kind: str) -> None:
    """docs/http.md: "The first connection to an origin only marks it seen; the
    second keeps its session; the third and later resume" - checked at nginx."""
    mark = ngx.mark()
    results = sequential([ngx.url(kind, f"/echo?r={i}") for i in range(10)], cafile=ngx.cafile)
    time.sleep(0.2)
    seen = ngx.since(mark)
    assert [s for s, _ in results] == [200] * 10, results
    reused = [x["reused"] for x in seen]
    assert reused[2:] == ["r"] * 8, f"nginx's $ssl_session_reused per request: {reused}"
    assert [bool(r) for _, r in results] == [x == "r" for x in reused], (
        f"tls_info()['resumed'] says what nginx saw: {[r for _, r in results]} vs {reused}"
    )


def test_fetch_records_tls_resumed_match_nginx(ngx: Nginx, tmp_path: Path) -> None:
    urls = [ngx.url("tls_ka0", f"/echo?f={i}") for i in range(8)]
    mark = ngx.mark()
    _proc, recs = fetch_records(tmp_path, urls, "--cacert", ngx.cafile, "-c", "1")
    time.sleep(0.2)
    seen = {x["uri"]: x["reused"] for x in ngx.since(mark)}
    assert all(r["status"] == 200 for r in recs), recs[0]
    mine = [bool(r["tls"]["resumed"]) for r in recs]
    theirs = [seen[f"/echo?f={i}"] == "r" for i in range(8)]
    assert mine == theirs, f"records' tls.resumed {mine} vs nginx {theirs}"
    assert sum(theirs) >= 6, theirs


def test_no_session_crosses_sni_names(ngx: Nginx) -> None:
    """docs/http.md: "A session is offered only to the same SNI name and port".
    a.test and b.test are one nginx server block (one ticket key), so a session
    offered across names would be taken: nginx's log would say r."""
    urls = [ngx.url("tls_ka0", f"/echo?sni={i}", host="a.test") for i in range(4)]
    urls += [ngx.url("tls_ka0", "/echo?sni=b", host="b.test")]
    urls += [ngx.url("tls_ka0", "/echo?sni=ip", host="127.0.0.1")]
    mark = ngx.mark()
    results = sequential(urls, cafile=ngx.cafile, resolve=RESOLVE_TEST)
    time.sleep(0.2)
    seen = {x["uri"]: (x["sni"], x["reused"]) for x in ngx.since(mark)}
    assert [s for s, _ in results] == [200] * 6, results
    assert seen["/echo?sni=3"] == ("a.test", "r"), f"a.test itself resumes by its 4th: {seen}"
    assert seen["/echo?sni=b"] == ("b.test", "."), (
        f"b.test was offered a.test's session: {seen['/echo?sni=b']}"
    )
    assert seen["/echo?sni=ip"][1] == ".", (
        f"a bare IP (no SNI) was offered a named host's session: {seen['/echo?sni=ip']}"
    )


def test_no_session_crosses_client_certificates(ngx: Nginx, ca: trustme.CA, tmp_path: Path) -> None:
    """docs/http.md: never shared across the client certificate. A client with a
    certificate resumes; then a client without one must do a full handshake -
    a resumed session would carry the first client's verified identity."""
    leaf = ca.issue_cert("client@example.test")
    pem = tmp_path / "client.pem"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(pem))
    url = ngx.url("tls_client_cert", "/echo?cc={}")
    mark = ngx.mark()
    with_cert = sequential(
        [url.format(f"a{i}") for i in range(4)], cafile=ngx.cafile, cert=str(pem)
    )
    without = sequential([url.format(f"b{i}") for i in range(2)], cafile=ngx.cafile)
    time.sleep(0.2)
    seen = {x["uri"]: (x["verify"], x["reused"]) for x in ngx.since(mark)}
    assert [s for s, _ in with_cert + without] == [200] * 6
    assert seen["/echo?cc=a3"] == ("SUCCESS", "r"), f"the certificate client resumes: {seen}"
    assert seen["/echo?cc=b0"] == ("NONE", "."), (
        f"a client without a certificate got a session: {seen['/echo?cc=b0']}"
    )


def test_no_session_crosses_verification_settings(ngx: Nginx) -> None:
    """insecure=True, then cafile=: the verifying client does a full handshake
    (and verifies)."""
    url = ngx.url("tls_ka0", "/echo?v={}")
    mark = ngx.mark()
    a = sequential([url.format(f"i{i}") for i in range(4)], insecure=True)
    b = sequential([url.format("c0")], cafile=ngx.cafile)
    time.sleep(0.2)
    seen = {x["uri"]: x["reused"] for x in ngx.since(mark)}
    assert [s for s, _ in a + b] == [200] * 5
    assert seen["/echo?v=i3"] == "r" and seen["/echo?v=c0"] == ".", seen


def test_no_session_crosses_alpn_offers(ngx: Nginx) -> None:
    url = ngx.url("tls_ka0", "/echo?al={}")
    mark = ngx.mark()
    a = sequential([url.format(f"h2-{i}") for i in range(4)], cafile=ngx.cafile)
    b = sequential([url.format("h1")], cafile=ngx.cafile, http2=False)
    time.sleep(0.2)
    seen = {x["uri"]: (x["proto"], x["reused"]) for x in ngx.since(mark)}
    assert [s for s, _ in a + b] == [200] * 5
    assert seen["/echo?al=h2-3"] == ("HTTP/2.0", "r") and seen["/echo?al=h1"] == (
        "HTTP/1.1",
        ".",
    ), seen


def test_resumed_connection_still_verifies_the_name(ngx: Nginx) -> None:
    """A session of 'localhost' must not make a connection to a name the
    certificate does not hold succeed: bad.test (resolved to nginx) fails
    with tls_error, resumed or not."""
    urls = [ngx.url("tls_ka0", f"/echo?n={i}") for i in range(4)]
    urls += [ngx.url("tls_ka0", "/echo?n=bad", host="bad.test")]
    results = sequential(urls, cafile=ngx.cafile, resolve=["bad.test:*:127.0.0.1"])
    assert [s for s, _ in results[:4]] == [200] * 4
    assert results[4][0] == "tls_error", results[4]


# --- real servers: hypercorn ------------------------------------------------------

HYPERCORN_APP = """
import hashlib

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/big":
        out = bytes(range(256)) * 8192
    elif path == "/echo":
        out = (scope["method"] + " " + hashlib.sha256(body).hexdigest() + " " + scope["http_version"]).encode()
    else:
        out = b"hyper " + path.encode()
    headers = [(b"content-type", b"application/octet-stream"), (b"x-served", b"hypercorn"),
               (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    half = len(out) // 2
    await send({"type": "http.response.body", "body": out[:half], "more_body": True})
    await send({"type": "http.response.body", "body": out[half:]})
"""


@pytest.fixture(scope="module")
def hyper(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("hypercorn")
    (base / "h2app.py").write_text(HYPERCORN_APP)
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(base / "cert.pem"))
    cert.private_key_pem.write_to_path(str(base / "key.pem"))
    tls_port, plain_port = free_port(), free_port()
    cmd = [
        sys.executable,
        "-m",
        "hypercorn",
        "--certfile",
        str(base / "cert.pem"),
        "--keyfile",
        str(base / "key.pem"),
        "--bind",
        f"127.0.0.1:{tls_port}",
        "--insecure-bind",
        f"127.0.0.1:{plain_port}",
        "h2app:app",
    ]
    proc = subprocess.Popen(cmd, cwd=base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", plain_port), 1),
                socket.create_connection(("127.0.0.1", tls_port), 1),
            ):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read() if proc.stderr else b""
                pytest.fail(f"hypercorn did not start: {err[-2000:]!r}", pytrace=False)
            time.sleep(0.1)
        yield {"tls": f"https://localhost:{tls_port}", "plain": f"http://127.0.0.1:{plain_port}"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("kind", ["tls", "plain"])
def test_hypercorn_matches_curl(hyper: dict[str, Any], cafile: str, kind: str) -> None:
    url = hyper[kind] + "/big"
    flag = "--http2" if kind == "tls" else "--http2-prior-knowledge"
    version, want, body = curl_head(flag, "--cacert", cafile, url)
    assert version == "HTTP/2" and body == BIG, version
    response, error, _ = get(url, cafile=cafile, max_time=20)
    assert error is None, error
    assert response.http_version == "HTTP/2" and response.content == BIG
    for name in ("content-length", "content-type", "x-served"):
        assert response.headers.get(name) == want.get(name), name


def test_hypercorn_large_upload_and_many_streams(hyper: dict[str, Any], cafile: str) -> None:
    """A 3 MB POST through hypercorn's 64 KB windows, beside 30 GETs at once, on h2."""
    body = os.urandom(3 * 2**20)

    async def main() -> tuple[Any, list[Any]]:
        async with surge.AsyncClient(cafile=cafile, max_time=30) as client:
            up = client.post(hyper["tls"] + "/echo", content=body)
            gets = [client.get(hyper["tls"] + f"/g{i}") for i in range(30)]
            results = await asyncio.gather(up, *gets, return_exceptions=True)
            return results[0], list(results[1:])

    up, gets = asyncio.run(asyncio.wait_for(main(), 90))
    assert not isinstance(up, BaseException), up
    assert up.content.decode() == f"POST {hashlib.sha256(body).hexdigest()} 2", up.content
    bad = [g for g in gets if isinstance(g, BaseException)]
    assert not bad, bad[:2]
    assert [g.content for g in gets] == [f"hyper /g{i}".encode() for i in range(30)]


def test_hypercorn_fetch_prior_knowledge(hyper: dict[str, Any], tmp_path: Path) -> None:
    urls = [hyper["plain"] + f"/p{i}" for i in range(20)]
    proc, recs = fetch_records(tmp_path, urls, "--http2-prior-knowledge", "-c", "20")
    assert proc.returncode == 0
    assert [r["status"] for r in recs] == [200] * 20, recs[0]
    assert [r["bytes"] for r in recs] == [len(f"hyper /p{i}") for i in range(20)]


# --- the drop-ins: httpx transports with http2=True -------------------------------


def test_httpx_transport_http2_true_speaks_h2(ngx: Nginx) -> None:
    import httpx

    import surge.httpx

    with httpx.Client(transport=surge.httpx.HTTPTransport(http2=True, verify=ngx.cafile)) as client:
        r = client.get(ngx.url("tls", "/big"))
    assert r.status_code == 200 and r.content == BIG
    assert r.http_version == "HTTP/2", (
        f"docs/http.md: HTTPTransport(http2=True) mirrors httpx's flag: {r.http_version}"
    )
    with httpx.Client(transport=surge.httpx.HTTPTransport(verify=ngx.cafile)) as client:
        r = client.get(ngx.url("tls"))
    assert r.http_version == "HTTP/1.1", "off by default, as in httpx"


def test_httpx_async_transport_http2_true(ngx: Nginx) -> None:
    import httpx

    import surge.httpx

    async def main() -> list[str]:
        transport = surge.httpx.AsyncHTTPTransport(http2=True, verify=ngx.cafile)
        async with httpx.AsyncClient(transport=transport) as client:
            rs = await asyncio.gather(
                *(client.get(ngx.url("tls", f"/echo?x={i}")) for i in range(20))
            )
        return [r.http_version for r in rs]

    mark = ngx.mark()
    versions = asyncio.run(asyncio.wait_for(main(), 60))
    time.sleep(0.2)
    seen = ngx.since(mark)
    assert versions == ["HTTP/2"] * 20
    assert len({x["conn"] for x in seen}) == 1, "the transport's h2 streams share a connection"


def test_httpx_transport_h2_reset_is_an_httpx_exception(ca: trustme.CA, cafile: str) -> None:
    """docs/dropins.md: "A drop-in raises only its library's exceptions"."""
    import httpx

    import surge.httpx

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.rst(req.sid, INTERNAL_ERROR))

    with h2server(handler, tls=server_context(ca, ["h2"])) as srv:
        transport = surge.httpx.HTTPTransport(http2=True, verify=cafile)
        with httpx.Client(transport=transport) as client, pytest.raises(httpx.HTTPError) as info:
            client.post(srv.url("/"), content=b"x")
        sent = srv.count("/")
    assert not isinstance(info.value, surge.http.RequestError)
    assert sent == 1


def test_httpx_transport_goaway_retried(ca: trustme.CA, cafile: str) -> None:
    import httpx

    import surge.httpx

    with h2server(goaway_first_conn(0), tls=server_context(ca, ["h2"])) as srv:
        with httpx.Client(transport=surge.httpx.HTTPTransport(http2=True, verify=cafile)) as client:
            r = client.post(srv.url("/g"), content=b"x")
        sent = srv.count("/g")
    assert r.status_code == 200 and r.http_version == "HTTP/2" and sent == 2


# --- HAR, surge trace -------------------------------------------------------------


def har_entries(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["log"]["entries"])


def test_har_http2_entries_share_one_connection(ngx: Nginx, tmp_path: Path) -> None:
    urls = [ngx.url("tls", f"/echo?h={i}") for i in range(12)]
    har = tmp_path / "run.har"
    mark = ngx.mark()
    _proc, _recs = fetch_records(
        tmp_path, urls, "--cacert", ngx.cafile, "-c", "12", "--har", str(har)
    )
    time.sleep(0.2)
    nginx_conns = {x["conn"] for x in ngx.since(mark)}
    entries = har_entries(har)
    assert len(entries) == 12
    assert {e["response"]["httpVersion"] for e in entries} == {"HTTP/2.0"}, {
        e["response"]["httpVersion"] for e in entries
    }
    assert {e["request"]["httpVersion"] for e in entries} == {"HTTP/2.0"}
    ids = {e.get("connection") for e in entries}
    assert len(ids) == len(nginx_conns) == 1, (
        f"HAR connection ids {ids}, nginx connections {nginx_conns}"
    )


def test_har_keepalive_0_each_entry_its_own_connection(ngx: Nginx, tmp_path: Path) -> None:
    urls = [ngx.url("tls_ka0", f"/echo?k={i}") for i in range(6)]
    har = tmp_path / "ka0.har"
    _proc, recs = fetch_records(
        tmp_path, urls, "--cacert", ngx.cafile, "-c", "1", "--har", str(har)
    )
    entries = har_entries(har)
    assert all(r["status"] == 200 for r in recs)
    ids = [e.get("connection") for e in entries]
    assert len(set(ids)) == 6, f"one connection per request (keepalive_timeout 0): {ids}"
    assert {e["response"]["httpVersion"] for e in entries} == {"HTTP/2.0"}


def test_har_http11_flag(ngx: Nginx, tmp_path: Path) -> None:
    har = tmp_path / "h1.har"
    _proc, _recs = fetch_records(
        tmp_path, [ngx.url("tls")], "--cacert", ngx.cafile, "--http1.1", "--har", str(har)
    )
    assert har_entries(har)[0]["response"]["httpVersion"] == "HTTP/1.1"


def test_har_failed_h2_stream_has_error_class(tmp_path: Path) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.rst(req.sid, PROTOCOL_ERROR))

    har = tmp_path / "fail.har"
    with h2server(handler) as srv:
        _proc, recs = fetch_records(
            tmp_path, [srv.url("/")], "--http2-prior-knowledge", "--har", str(har)
        )
    e = har_entries(har)[0]
    assert recs[0]["error"] == "protocol_error"
    assert e["response"]["status"] == 0 and e.get("_error") == "protocol_error", e["response"]


def test_trace_over_tls_says_http2(ngx: Nginx) -> None:
    proc = run(
        ["trace", "--cacert", ngx.cafile, "--no-headers", "-n", "2", ngx.url("tls")], timeout=60
    )
    no_traceback(proc)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    assert "ALPN h2" in out and "HTTP/2 200" in out, out


def test_trace_json_over_tls_has_alpn(ngx: Nginx) -> None:
    proc = run(["trace", "--cacert", ngx.cafile, "--json", ngx.url("tls")], timeout=60)
    no_traceback(proc)
    line = json.loads(proc.stdout.decode().splitlines()[0])
    assert (line.get("tls") or {}).get("alpn") == "h2", line.get("tls")


def test_trace_takes_http11(ngx: Nginx) -> None:
    """Issue 43: HTTP/2 "everywhere surge speaks HTTP ... surge trace", with
    "--http1.1 / http2=False to turn it off"."""
    proc = run(
        ["trace", "--cacert", ngx.cafile, "--no-headers", "--http1.1", ngx.url("tls")], timeout=60
    )
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "ALPN http/1.1" in proc.stdout.decode(), proc.stdout.decode()


def test_trace_h2_failure_is_one_line_exit_1(tmp_path: Path, ca: trustme.CA, cafile: str) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.goaway(req.sid, PROTOCOL_ERROR))
        time.sleep(0.05)
        conn.shutdown()

    with h2server(handler, tls=server_context(ca, ["h2"])) as srv:
        proc = run(["trace", "--cacert", cafile, "--max-time", "5", srv.url("/")], timeout=60)
    no_traceback(proc)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)


def test_nginx_keepalive_requests_5_many_concurrent(ngx: Nginx, tmp_path: Path) -> None:
    """nginx keepalive_requests 5 (each connection serves 5 streams, then
    GOAWAY): 100 GETs at -c 50 all succeed, each processed once."""
    urls = [ngx.url("tls_kr5", f"/echo?kr={i}") for i in range(100)]
    mark = ngx.mark()
    _proc, recs = fetch_records(
        tmp_path, urls, "--cacert", ngx.cafile, "-c", "50", "--max-time", "15"
    )
    time.sleep(0.3)
    seen = [x["uri"] for x in ngx.since(mark)]
    errors = [(r["error"], r["error_detail"]) for r in recs if r["status"] != 200]
    assert not errors, f"{len(errors)} of 100 failed: {errors[:2]}"
    assert sorted(seen) == sorted(urls_path for urls_path in (f"/echo?kr={i}" for i in range(100)))


def test_nginx_idle_goaway_then_next_requests_succeed(ngx: Nginx) -> None:
    """nginx keepalive_timeout 1s: an idle h2 connection gets a GOAWAY and is
    closed; the next GET and POST (2 s later) go on a new connection."""

    async def main() -> list[Any]:
        async with surge.AsyncClient(cafile=ngx.cafile, max_time=10) as client:
            first = await client.get(ngx.url("tls_idle1", "/echo?i=0"))
            await asyncio.sleep(2.0)
            out = [first.status_code]
            for method in ("GET", "POST"):
                try:
                    out.append(
                        (
                            await client.request(method, ngx.url("tls_idle1", f"/echo?i={method}"))
                        ).status_code
                    )
                except surge.http.RequestError as e:
                    out.append(e.error_class)
            return out

    assert asyncio.run(asyncio.wait_for(main(), 60)) == [200, 200, 200]


def test_idle_goaway_and_close_then_post_succeeds() -> None:
    """The hostile version: after each response, 0.2 s later, GOAWAY(last) and
    a close. The next POST, 1 s later, goes on a new connection, once."""

    def handler(conn: Conn, req: Request) -> None:
        ok(conn, req)
        time.sleep(0.2)
        conn.frames(conn.goaway(req.sid))
        conn.shutdown()

    async def main(url: str) -> list[Any]:
        out = []
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=5) as client:
            for i in range(3):
                try:
                    out.append((await client.post(url + f"/{i}", content=b"x")).status_code)
                except surge.http.RequestError as e:
                    out.append(e.error_class)
                await asyncio.sleep(1.0)
        return out

    with h2server(handler) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        counts = [srv.count(f"/{i}") for i in range(3)]
    assert results == [200, 200, 200] and counts == [1, 1, 1], (results, counts)


def test_idle_close_without_goaway_then_get_succeeds() -> None:
    """A server that closes an idle h2 connection without a GOAWAY (TCP FIN):
    the next GET goes on a new connection."""

    def handler(conn: Conn, req: Request) -> None:
        ok(conn, req)
        time.sleep(0.2)
        conn.shutdown()

    async def main(url: str) -> list[Any]:
        out = []
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=5) as client:
            for i in range(3):
                try:
                    out.append((await client.get(url + f"/{i}")).status_code)
                except surge.http.RequestError as e:
                    out.append(e.error_class)
                await asyncio.sleep(1.0)
        return out

    with h2server(handler) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
    assert results == [200, 200, 200], results


# --- more of HTTP/2's semantics: HEAD, 304, redirects, repeated fields ------------


def test_head_with_content_length_and_no_data_is_fine() -> None:
    """RFC 9110 9.3.2: a HEAD's Content-Length is the GET's; no DATA follows."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(
                req.sid, [(":status", "200"), ("content-length", "12345")], end_stream=True
            )
        )

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"), method="HEAD")
    assert error is None and response.status_code == 200 and response.content == b"", error


def test_304_with_content_length_and_no_data_is_fine() -> None:
    """RFC 9110 8.6: a 304's Content-Length describes the selected representation."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(
                req.sid,
                [(":status", "304"), ("content-length", "12345"), ("etag", '"x"')],
                end_stream=True,
            )
        )

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"))
    assert error is None and response.status_code == 304, error


def test_status_101_over_h2_is_protocol_error() -> None:
    """RFC 9113 8.6: HTTP/2 has no 101 (Switching Protocols)."""
    with h2server(head_of([(":status", "101")], b"")) as srv:
        _, error, took = get(srv.url("/"), max_time=4)
    assert error == "protocol_error", (error, took)


def test_repeated_fields_and_no_pseudo_in_headers(tmp_path: Path) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.respond(
            req,
            200,
            b"c",
            (("set-cookie", "a=1"), ("set-cookie", "b=2"), ("x-dup", "1"), ("x-dup", "2")),
        )

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"))
        _proc, recs = fetch_records(tmp_path, [srv.url("/")], "--http2-prior-knowledge", "-i")
    assert error is None
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert response.headers.get_list("x-dup") == ["1", "2"]
    names = [k for k, _ in recs[0]["headers"]]
    assert not any(n.startswith(":") for n in names), f"pseudo-headers are not headers: {names}"
    assert names.count("x-dup") == 2


def test_redirects_over_h2_stay_on_the_connection() -> None:
    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/from":
            conn.respond(req, 303, b"", (("location", "/to"),))
        else:
            conn.respond(req, 200, f"{req.method} {req.path} {len(req.body)}".encode())

    with h2server(handler) as srv:
        response, error, _ = get(
            srv.url("/from"), method="POST", content=b"abc", follow_redirects=True
        )
        conns = len(srv.conns)
    assert error is None and response.content == b"GET /to 0", (
        error,
        response and response.content,
    )
    assert conns == 1 and len(response.history) == 1


def test_gzip_body_over_h2_decoded_and_bytes_on_the_wire(tmp_path: Path) -> None:
    plain = b"surge " * 10_000
    packed = gzip.compress(plain)

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(
            req, 200, packed, (("content-encoding", "gzip"), ("content-length", str(len(packed))))
        )

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/"))
        _proc, recs = fetch_records(tmp_path, [srv.url("/")], "--http2-prior-knowledge")
    assert error is None and response.content == plain
    assert recs[0]["bytes"] == len(packed), recs[0]


def test_initial_window_shrunk_mid_upload_then_reopened() -> None:
    """SETTINGS_INITIAL_WINDOW_SIZE dropped to 0 mid-upload (the stream's window
    goes negative, RFC 9113 6.9.2), then WINDOW_UPDATEs: the upload completes."""
    body = os.urandom(400_000)

    def on_headers(conn: Conn, req: Request) -> None:
        def later() -> None:
            conn.frames(SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0}))
            time.sleep(0.5)
            conn.frames(
                WindowUpdateFrame(req.sid, window_increment=2_000_000),
                WindowUpdateFrame(0, window_increment=2_000_000),
            )

        threading.Thread(target=later, daemon=True).start()

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(req, 200, hashlib.sha256(req.body).hexdigest().encode())

    with h2server(handler, on_headers=on_headers, auto_window=False) as srv:
        response, error, _ = get(srv.url("/up"), method="POST", content=body, max_time=10)
    assert error is None and response.content == hashlib.sha256(body).hexdigest().encode(), error


def test_fetch_api_takes_http2_prior_knowledge() -> None:
    """docs/http.md: "the same keyword for surge.fetch"."""
    with h2server(ok) as srv:
        records = list(
            surge.fetch_all(
                [srv.url(f"/{i}") for i in range(5)], http2_prior_knowledge=True, max_time=5
            )
        )
        heads = len(srv.heads)
    assert sorted(r["status"] for r in records) == [200] * 5
    assert heads == 5


def test_fetch_mixed_hostile_batch_one_record_each(tmp_path: Path) -> None:
    """One run over many failure kinds on one h2c server: one record per
    input, each with its class, exit 0, no traceback."""
    routes: dict[str, Callable[[Conn, Request], None]] = {
        "/ok": ok,
        "/rst-proto": lambda c, r: c.frames(c.rst(r.sid, PROTOCOL_ERROR)),
        "/rst-internal": lambda c, r: c.frames(c.rst(r.sid, INTERNAL_ERROR)),
        "/conn-header": head_of(
            [(":status", "200"), ("connection", "close"), ("content-length", "2")]
        ),
        "/no-status": head_of([("content-length", "2")]),
        "/too-long": head_of([(":status", "200"), ("content-length", "1")], b"xyz"),
        "/silent": lambda c, r: None,
        "/big": lambda c, r: c.respond(r, 200, b"b" * 300_000),
    }
    want = {
        "/ok": None,
        "/rst-proto": "protocol_error",
        "/rst-internal": "connection_reset",
        "/conn-header": "protocol_error",
        "/no-status": "protocol_error",
        "/too-long": "protocol_error",
        "/silent": "read_timeout",
        "/big": "body_too_large",
    }

    def handler(conn: Conn, req: Request) -> None:
        routes[req.path](conn, req)

    with h2server(handler) as srv:
        # an origin each (a host name each): one stream's failure cannot end another's connection
        urls = [srv.url(p, host=f"h{i}.test") for i, p in enumerate(routes)]
        proc, recs = fetch_records(
            tmp_path,
            urls,
            "--http2-prior-knowledge",
            "--max-time",
            "3",
            "--max-filesize",
            "100K",
            "-c",
            "8",
            "--resolve",
            "*.test:*:127.0.0.1",
        )
    assert proc.returncode == 0, proc.stderr
    got = {r["url"].rsplit("/", 1)[1]: r["error"] for r in recs}
    assert got == {p[1:]: e for p, e in want.items()}, got


@pytest.mark.parametrize(
    "bad",
    [
        [(":status", "200"), ("connection", "close"), ("content-length", "2")],
        [("content-length", "2")],
        [(":status", "200"), ("content-length", "1")],
        # the rest of RFC 9113 8.1.1's and 8.3's class, as h2 checks them
        [(":status", "200"), ("Content-Type", "text/plain")],
        [("content-type", "text/plain"), (":status", "200")],
        [(":status", "200"), (":status", "204")],
        [(":status", "200"), (":path", "/")],
        [(":status", "200"), ("transfer-encoding", "chunked")],
        [(":status", "200"), ("content-length", "10")],
        [(":status", "200"), ("content-length", "3"), ("content-length", "4")],
        [(":status", "200"), ("content-length", "abc")],
    ],
    ids=[
        "connection-header",
        "no-status",
        "more-data-than-content-length",
        "uppercase-name",
        "pseudo-after-regular",
        "two-statuses",
        "request-pseudo-header",
        "transfer-encoding",
        "less-data-than-content-length",
        "conflicting-content-lengths",
        "content-length-not-digits",
    ],
)
def test_a_malformed_response_fails_its_own_stream_only(bad: list[tuple[str, str]]) -> None:
    """RFC 9113 8.1.1: a malformed response is a *stream* error (PROTOCOL_ERROR):
    docs/http.md names the response a protocol_error, and the other requests
    on the connection are no business of it - a good response beside it, on
    the same connection, arrives."""

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/bad":
            head_of(bad, b"xyz")(conn, req)
        else:
            time.sleep(0.5)
            ok(conn, req)

    async def main(url: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=5) as client:
            good = asyncio.ensure_future(client.get(url + "/good"))
            await asyncio.sleep(0.2)
            results = await asyncio.gather(client.get(url + "/bad"), good, return_exceptions=True)
        return [getattr(r, "error_class", None) or r.status_code for r in results]

    with h2server(handler) as srv:  # the reference: curl -Z multiplexes both, gets the good one
        ref = curl(
            "-Z",
            "--http2-prior-knowledge",
            "-w",
            "%{http_code}\n",
            "-o",
            "/dev/null",
            srv.url("/good"),
            "-o",
            "/dev/null",
            srv.url("/bad"),
        )
        assert len(srv.conns) == 1 and sorted(ref.stdout.decode().split()) == ["000", "200"], (
            ref.stdout
        )
    with h2server(handler) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        conns = {i for i, _, _, _ in srv.heads}
    assert conns == {0}, "both streams on one connection (the test needs it)"
    assert results == ["protocol_error", 200], (
        f"[bad, good]: {results} (curl: the good one is a 200)"
    )


def test_malformed_responses_give_the_connection_window_back() -> None:
    """The DATA of a stream found malformed counts against the connection's
    receive window, as any DATA: its bytes must be acknowledged though no
    reader takes them.  1,100 responses of 16 KiB past their Content-Length
    outweigh the client's 16 MiB connection window: if they were kept, the
    good response after them, on the same connection, could never come."""
    frame = b"x" * 16384

    def handler(conn: Conn, req: Request) -> None:
        if req.path.startswith("/bad"):
            pairs = [(":status", "200"), ("content-length", "1")]
            conn.frames(conn.headers(req.sid, pairs), conn.data(req.sid, frame, end_stream=True))
        else:
            conn.respond(req, 200, frame)

    async def main(url: str) -> tuple[list[str], int]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=10) as client:
            gate = asyncio.Semaphore(50)

            async def bad(i: int) -> str:
                async with gate:
                    try:
                        await client.get(f"{url}/bad{i}")
                        return "200"
                    except surge.http.RequestError as e:
                        return e.error_class

            errors = await asyncio.gather(*(bad(i) for i in range(1100)))
            good = await client.get(url + "/good")
        return sorted(set(errors)), len(good.content)

    with h2server(handler) as srv:
        errors, size = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 120))
        conns = len(srv.conns)
    assert errors == ["protocol_error"]
    assert (size, conns) == (16384, 1)


# --- stream slots: cancelled and timed-out streams give theirs back ---------------


def hang_or_ok(conn: Conn, req: Request) -> None:
    if req.path.startswith("/hang"):
        return  # never answers
    if req.path.startswith("/slow"):
        time.sleep(1.0)
    ok(conn, req)


def test_timed_out_streams_free_their_slots() -> None:
    """SETTINGS_MAX_CONCURRENT_STREAMS 1: three requests that time out
    (read_timeout, max_time 1), then one that the server answers - on the one
    connection, so each timed-out stream must have been reset to free the slot."""

    async def main(url: str) -> list[Any]:
        out = []
        async with surge.AsyncClient(http2_prior_knowledge=True, per_host=1) as client:
            await client.get(url + "/warm", timeout=5)
            for i in range(3):
                try:
                    await client.get(url + f"/hang{i}", timeout=1)
                    out.append(200)
                except surge.http.RequestError as e:
                    out.append(e.error_class)
            try:
                out.append((await client.get(url + "/after", timeout=5)).status_code)
            except surge.http.RequestError as e:
                out.append(e.error_class)
        return out

    with h2server(hang_or_ok, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 1}) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        rsts = [(c.index, sid, code) for c in srv.conns for sid, code in c.rsts_received]
    assert results == ["read_timeout"] * 3 + [200], f"{results}; RST_STREAMs the server got: {rsts}"


def test_cancelled_tasks_free_their_slots_and_reset_their_streams() -> None:
    """asyncio tasks cancelled while their requests wait on the server: each
    stream is reset (RST_STREAM CANCEL, RFC 9113 8.7), and a request after
    them, on a connection of 2 slots, is answered."""

    async def main(url: str) -> Any:
        async with surge.AsyncClient(http2_prior_knowledge=True, per_host=1, max_time=10) as client:
            await client.get(url + "/warm")
            for i in range(4):
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(client.get(url + f"/hang{i}"), 0.3)
            await asyncio.sleep(0.2)
            return (await asyncio.wait_for(client.get(url + "/after"), 5)).status_code

    with h2server(hang_or_ok, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 2}) as srv:
        status = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        rsts = [code for c in srv.conns for _, code in c.rsts_received]
        conns = len(srv.conns)
    assert status == 200
    assert conns == 1, f"per_host=1: {conns} connections"
    assert rsts.count(CANCEL) == 4, f"each cancelled stream reset with CANCEL: {rsts}"


def test_cancelling_one_request_leaves_the_others_on_the_connection() -> None:
    async def main(url: str) -> Any:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=10) as client:
            slow = asyncio.ensure_future(client.get(url + "/slow"))
            await asyncio.sleep(0.1)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(client.get(url + "/hang"), 0.2)
            return (await slow).status_code

    with h2server(hang_or_ok) as srv:
        status = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        conns = len(srv.conns)
    assert status == 200 and conns == 1


def test_stream_closed_unread_leaves_the_others_on_the_connection() -> None:
    """A streamed response left unread at the end of its ``with`` block: the
    other stream in flight on the connection still completes."""
    big = b"q" * (6 * 2**20)

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/big":
            conn.respond(req, 200, big)
        else:
            hang_or_ok(conn, req)

    async def main(url: str) -> Any:
        async with surge.AsyncClient(
            http2_prior_knowledge=True, max_time=10, body_cap=64 * 2**20
        ) as client:
            slow = asyncio.ensure_future(client.get(url + "/slow"))
            await asyncio.sleep(0.1)
            async with client.stream("GET", url + "/big") as r:
                assert r.status_code == 200
            after = await client.get(url + "/after")
            return (await slow).status_code, after.status_code

    with h2server(handler) as srv:
        statuses = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
    assert statuses == (200, 200), statuses


def test_sync_client_close_from_another_thread_ends_h2_requests() -> None:
    """docs/http.md: "close() from any thread ends the requests in flight"."""
    outcome: dict[str, Any] = {}

    with h2server(hang_or_ok) as srv:
        client = surge.Client(http2_prior_knowledge=True, max_time=30)

        def worker() -> None:
            start = time.monotonic()
            try:
                client.get(srv.url("/hang"))
                outcome["result"] = "answered"
            except surge.http.RequestError as e:
                outcome["result"] = e.error_class
            except Exception as e:
                outcome["result"] = repr(e)
            outcome["took"] = time.monotonic() - start

        t = threading.Thread(target=worker, daemon=True)
        t.start()
        time.sleep(0.7)
        client.close()
        t.join(15)
    assert not t.is_alive(), "a request still waiting 15 s after close()"
    assert outcome["took"] < 10 and outcome["result"] != "answered", outcome


def test_fetch_sigint_with_h2_streams_in_flight(tmp_path: Path) -> None:
    """docs/fetch.md: exit 130 when interrupted; a record per input written
    before is kept; no traceback."""
    import signal

    with h2server(hang_or_ok) as srv:
        inp = tmp_path / "in.txt"
        inp.write_text(
            "".join(srv.url(f"/hang{i}") + "\n" for i in range(20)) + srv.url("/ok") + "\n"
        )
        proc = subprocess.Popen(
            [
                *SURGE,
                "fetch",
                str(inp),
                "-o",
                str(tmp_path / "o.jsonl"),
                "-q",
                "--no-progress",
                "--http2-prior-knowledge",
                "--max-time",
                "60",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while len(srv.heads) < 21 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("surge fetch still running 15 s after SIGINT with h2 streams in flight")
    assert proc.returncode == 130, (proc.returncode, err[-500:])
    assert b"Traceback" not in err, err[-2000:]


# --- phases: a request that rode another's connection did not connect ------------


def test_multiplexed_records_have_one_handshake(ngx: Nginx, tmp_path: Path) -> None:
    """docs/fetch.md: "a reused connection has no dns/connect/tls"; the HAR's
    connect and ssl are -1 "when a reused connection skipped them". Twelve
    requests at once on one h2 connection: one handshake."""
    urls = [ngx.url("tls", f"/echo?ph={i}") for i in range(12)]
    har = tmp_path / "ph.har"
    mark = ngx.mark()
    _proc, recs = fetch_records(
        tmp_path, urls, "--cacert", ngx.cafile, "-c", "12", "--har", str(har)
    )
    time.sleep(0.2)
    conns = {x["conn"] for x in ngx.since(mark)}
    assert len(conns) == 1
    with_tls = [r["timings"]["tls_ms"] for r in recs if r["timings"]["tls_ms"] is not None]
    assert len(with_tls) == 1, (
        f"one TLS handshake on one connection; {len(with_tls)} records claim one: {with_tls}"
    )
    ssl = [e["timings"]["ssl"] for e in har_entries(har) if e["timings"]["ssl"] != -1]
    assert len(ssl) == 1, f"HAR: {len(ssl)} entries with an ssl time on one connection"


def test_resumption_with_single_use_sessions(ngx: Nginx) -> None:
    """nginx without tickets (TLS 1.3 stateful sessions, which OpenSSL takes
    once): docs/http.md: "a server that takes each ticket only once refuses it,
    and the full handshake that follows keeps a new one" - so from the third
    connection on, every other one at least resumes, and nothing fails."""
    mark = ngx.mark()
    results = sequential(
        [ngx.url("tls_stateful_ka0", f"/echo?su={i}") for i in range(12)], cafile=ngx.cafile
    )
    time.sleep(0.2)
    reused = [x["reused"] for x in ngx.since(mark)]
    assert [s for s, _ in results] == [200] * 12, results
    assert reused[2:].count("r") >= 5, f"$ssl_session_reused: {reused}"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_user_transfer_encoding_header_over_h2(method: str) -> None:
    """A user's ``Transfer-Encoding: chunked`` header (which HTTP/1.1 surge
    sends as given) has no meaning in HTTP/2 (RFC 9113 8.2.2): curl drops it
    and gets its answer. surge must send the request (or refuse the header at
    once as a usage error), never sit on it until max_time."""
    with h2server(ok) as srv:  # the reference: curl
        flags = ["-X", "POST", "--data-binary", "abc"] if method == "POST" else []
        ref = curl(
            "--http2-prior-knowledge", "-H", "Transfer-Encoding: chunked", *flags, srv.url("/te")
        )
        assert ref.stdout == b"hello /te", ref
    with h2server(ok) as srv:
        start = time.monotonic()
        try:
            response, error, took = get(
                srv.url("/te"),
                method=method,
                content=b"abc" if method == "POST" else None,
                headers={"Transfer-Encoding": "chunked"},
                max_time=4,
            )
        except ValueError:  # InvalidHeader, a usage error: acceptable
            return
        sent = srv.count("/te")
    assert error is None and response.status_code == 200, (
        f"{error} after {took:.1f} s; the server got its HEADERS {sent} time(s), and never the end of the stream"
    )
    assert time.monotonic() - start < 3


# --- your own ssl_context, the requests adapter -----------------------------------


@pytest.mark.parametrize(
    ("alpn", "want"), [(["http/1.1"], "HTTP/1.1"), (["h2"], "HTTP/2"), (None, "HTTP/1.1")]
)
def test_own_ssl_context_alpn_decides(ngx: Nginx, alpn: list[str] | None, want: str) -> None:
    """docs/http.md: "A ssl_context= of your own is used as it is: its ALPN decides"."""
    ctx = ssl.create_default_context(cafile=ngx.cafile)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    response, error, _ = get(ngx.url("tls"), ssl_context=ctx)
    assert error is None and response.http_version == want, (
        error,
        response and response.http_version,
    )


def test_own_plain_ssl_context_does_not_resume(ngx: Nginx) -> None:
    """docs/http.md: "Any other ssl.SSLContext is used as it is, and does not resume"."""
    ctx = ssl.create_default_context(cafile=ngx.cafile)
    mark = ngx.mark()
    results = sequential([ngx.url("tls_ka0", f"/echo?own={i}") for i in range(5)], ssl_context=ctx)
    time.sleep(0.2)
    reused = [x["reused"] for x in ngx.since(mark)]
    assert [s for s, _ in results] == [200] * 5
    assert reused == ["."] * 5, reused


def test_make_ssl_context_resumes(ngx: Nginx) -> None:
    ctx = surge.http.make_ssl_context(cafile=ngx.cafile)
    mark = ngx.mark()
    results = sequential([ngx.url("tls_ka0", f"/echo?mk={i}") for i in range(5)], ssl_context=ctx)
    time.sleep(0.2)
    reused = [x["reused"] for x in ngx.since(mark)]
    assert [s for s, _ in results] == [200] * 5
    assert reused[2:] == ["r"] * 3, reused


def test_requests_adapter_speaks_http11(ngx: Nginx) -> None:
    """docs/http.md: "The requests adapter (surge.requests) speaks HTTP/1.1"."""
    import requests

    import surge.requests

    mark = ngx.mark()
    with requests.Session() as session:
        session.mount("https://", surge.requests.Adapter())
        r = session.get(ngx.url("tls", "/echo?rq"), verify=ngx.cafile, timeout=10)
    time.sleep(0.2)
    assert r.status_code == 200
    assert [x["proto"] for x in ngx.since(mark)] == ["HTTP/1.1"]


# --- frames a client must ignore, and frames that break the protocol --------------


def raw_frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big") + payload


def before_response(raw: bytes) -> Handler:
    def handler(conn: Conn, req: Request) -> None:
        conn.write(raw)
        time.sleep(0.1)
        ok(conn, req)

    return handler


IGNORED = {
    "unknown-frame-type": raw_frame(0xFA, 0, 0, b"whatever"),
    "unknown-frame-on-stream": raw_frame(0xFB, 0xFF, 1, b"x" * 100),
    "unknown-setting": raw_frame(0x4, 0, 0, (0xABCD).to_bytes(2, "big") + (7).to_bytes(4, "big")),
    "priority": raw_frame(0x2, 0, 1, (3).to_bytes(4, "big") + b"\x10"),
    "priority-update": raw_frame(0x10, 0, 0, (1).to_bytes(4, "big") + b"u=1"),
    "altsvc": raw_frame(0xA, 0, 0, (0).to_bytes(2, "big") + b'h3=":443"'),
}


@pytest.mark.parametrize("name", sorted(IGNORED))
def test_frames_to_ignore_are_ignored(name: str) -> None:
    """RFC 9113 4.1/5.5: unknown frame types and settings are ignored."""
    with h2server(before_response(IGNORED[name])) as srv:
        response, error, _ = get(srv.url("/i"))
    assert error is None and response.content == b"hello /i", f"{name}: {error}"


BREAKING = {
    "window-update-zero": raw_frame(0x8, 0, 0, (0).to_bytes(4, "big")),
    "settings-enable-push-2": raw_frame(0x4, 0, 0, (2).to_bytes(2, "big") + (2).to_bytes(4, "big")),
    "settings-window-too-big": raw_frame(
        0x4, 0, 0, (4).to_bytes(2, "big") + (2**31).to_bytes(4, "big")
    ),
    "settings-frame-size-tiny": raw_frame(
        0x4, 0, 0, (5).to_bytes(2, "big") + (100).to_bytes(4, "big")
    ),
    "settings-bad-length": raw_frame(0x4, 0, 0, b"\x00\x01\x00"),
    "ping-bad-length": raw_frame(0x6, 0, 0, b"1234567"),
    "ping-on-stream": raw_frame(0x6, 0, 1, b"12345678"),
    "data-on-stream-0": raw_frame(0x0, 1, 0, b"xx"),
    "rst-on-stream-0": raw_frame(0x3, 0, 0, (2).to_bytes(4, "big")),
    "goaway-on-stream": raw_frame(0x7, 0, 1, (0).to_bytes(4, "big") + (0).to_bytes(4, "big")),
    "continuation-alone": raw_frame(0x9, 4, 1, b"\x88"),
}


@pytest.mark.parametrize("name", sorted(BREAKING))
def test_frames_that_break_the_protocol(name: str) -> None:
    """docs/http.md: a connection "that breaks the protocol fails each of its
    streams (... protocol_error)" - at once, not at max_time."""
    with h2server(before_response(BREAKING[name])) as srv:
        _, error, took = get(srv.url("/b"), max_time=5)
    assert error == "protocol_error" and took < 4, f"{name}: {error} after {took:.1f} s"


def test_padding_counts_in_flow_control() -> None:
    """A body of 40,000 one-byte DATA frames, each with 255 bytes of padding
    (RFC 9113 6.1: padding is flow-controlled): 10 MB of window for 40 KB of
    body. A client that acknowledged the data but not the padding would run its
    stream's 4 MiB window out and stall."""
    frames = 40_000

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", str(frames))]))
        one = raw_frame(
            0x0, 0x8, req.sid, b"\xff" + b"p" + b"\x00" * 255
        )  # PADDED, pad 255, 1 byte
        cost = len(one) - 9
        sent = 0
        while sent < frames:
            with conn.cv:
                ok_ = conn.cv.wait_for(
                    lambda: (
                        conn.closed
                        or (conn.conn_window >= cost and conn.stream_windows[req.sid] >= cost)
                    ),
                    timeout=5,
                )
                if not ok_ or conn.closed:
                    return
                n = min(
                    frames - sent,
                    conn.conn_window // cost,
                    conn.stream_windows[req.sid] // cost,
                    256,
                )
                conn.conn_window -= n * cost
                conn.stream_windows[req.sid] -= n * cost
            if not conn.write(one * n):
                return
            sent += n
        conn.frames(conn.data(req.sid, b"", end_stream=True))

    with h2server(handler) as srv:
        response, error, _ = get(srv.url("/pad"), max_time=30)
    assert error is None and response.content == b"p" * frames, error


# --- through a proxy: h2 inside a CONNECT tunnel; the proxy itself in HTTP/1.1 ----


class Proxy:
    """A forward proxy: CONNECT tunnels to anywhere on loopback; an
    absolute-form request is answered by the proxy itself ("via proxy").
    Records each request line it was sent."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c: socket.socket) -> None:
        with contextlib.suppress(OSError), c:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = c.recv(4096)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode(errors="replace")
            self.lines.append(line)
            if not line.startswith("CONNECT "):
                c.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nvia proxy"
                )
                return
            _host, _, port = line.split()[1].rpartition(":")
            up = socket.create_connection(("127.0.0.1", int(port)), 5)
            c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                up.sendall(rest)

            def pipe(a: socket.socket, b: socket.socket) -> None:
                with contextlib.suppress(OSError):
                    while data := a.recv(65536):
                        b.sendall(data)
                with contextlib.suppress(OSError):
                    b.shutdown(socket.SHUT_WR)

            t = threading.Thread(target=pipe, args=(up, c), daemon=True)
            t.start()
            pipe(c, up)
            t.join(30)
            up.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    p = Proxy()
    yield p
    p.close()


def test_h2_through_a_connect_tunnel(ngx: Nginx, proxy: Proxy, tmp_path: Path) -> None:
    """docs/http.md: "a tunnel (CONNECT) to an https:// origin may carry
    HTTP/2"; one origin, one tunnel, its requests as streams."""
    urls = [ngx.url("tls", f"/echo?px={i}") for i in range(10)]
    mark = ngx.mark()
    _proc, recs = fetch_records(
        tmp_path, urls, "--cacert", ngx.cafile, "-c", "10", "-x", f"http://127.0.0.1:{proxy.port}"
    )
    time.sleep(0.2)
    seen = ngx.since(mark)
    assert [r["status"] for r in recs] == [200] * 10, recs[0]
    assert {r["tls"]["alpn"] for r in recs} == {"h2"}
    assert {x["proto"] for x in seen} == {"HTTP/2.0"}
    connects = [x for x in proxy.lines if x.startswith("CONNECT ")]
    assert len(connects) == 1, f"one tunnel for one h2 origin: {proxy.lines}"


def test_prior_knowledge_through_a_proxy_speaks_http11_to_it(proxy: Proxy, tmp_path: Path) -> None:
    """docs/http.md: "the proxy itself is always spoken to in HTTP/1.1" - an
    http:// URL under --http2-prior-knowledge through a proxy is an HTTP/1.1
    request to the proxy, not an h2 preface."""
    _proc, recs = fetch_records(
        tmp_path,
        ["http://origin.test:8080/pk"],
        "--http2-prior-knowledge",
        "-x",
        f"http://127.0.0.1:{proxy.port}",
    )
    assert proxy.lines and proxy.lines[0].startswith("GET http://origin.test:8080/pk HTTP/1.1"), (
        proxy.lines
    )
    assert recs[0]["status"] == 200, recs[0]


# --- the first connection to an origin: the others wait to learn what it speaks ---


def test_many_at_once_to_an_h2_origin_open_one_connection(ngx: Nginx, tmp_path: Path) -> None:
    urls = [ngx.url("tls", f"/echo?w={i}") for i in range(200)]
    mark = ngx.mark()
    _proc, recs = fetch_records(tmp_path, urls, "--cacert", ngx.cafile, "-c", "100")
    time.sleep(0.3)
    conns = {x["conn"] for x in ngx.since(mark)}
    assert [r["status"] for r in recs] == [200] * 200
    assert len(conns) <= 2, f"200 requests, -c 100, one h2 origin: {len(conns)} connections"


def test_many_at_once_to_an_http11_tls_origin_fall_back(ngx: Nginx, tmp_path: Path) -> None:
    """An origin that answers ALPN with http/1.1 (and closes after each
    response): the requests that waited go to the pool, and all complete."""
    urls = [ngx.url("tls_h1_ka0", f"/echo?h1={i}") for i in range(40)]
    _proc, recs = fetch_records(
        tmp_path, urls, "--cacert", ngx.cafile, "-c", "20", "--max-time", "15"
    )
    assert [r["status"] for r in recs] == [200] * 40, [
        (r["error"], r["error_detail"]) for r in recs if r["error"]
    ][:3]
    assert {r["tls"]["alpn"] for r in recs} == {"http/1.1"}


def test_first_h2_connection_dies_at_once(ca: trustme.CA, cafile: str) -> None:
    """The first connection completes TLS (ALPN h2), sends its SETTINGS and
    closes before reading a request; the requests waiting on it end, each a 200 (sent on a later
    connection) or a connection_reset, in bounded time - none hangs."""

    def on_connect(conn: Conn) -> None:
        if conn.index == 0:
            conn.shutdown()

    async def main(url: str) -> list[Any]:
        async with surge.AsyncClient(cafile=cafile, max_time=10) as client:
            return await asyncio.gather(
                *(client.get(url + f"/{i}") for i in range(10)), return_exceptions=True
            )

    with h2server(
        ok, tls=server_context(ca, ["h2"]), on_connect=on_connect, no_settings=True
    ) as srv:
        start = time.monotonic()
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        took = time.monotonic() - start
    outcomes = [
        getattr(r, "error_class", None) or getattr(r, "status_code", repr(r)) for r in results
    ]
    assert set(outcomes) <= {200, "connection_reset"} and took < 9, (outcomes, took)


# --- read timeouts are per stream: connection traffic is not the response ---------


@pytest.mark.parametrize(
    "chatter",
    [
        lambda i: PingFrame(0, i.to_bytes(8, "big")),
        lambda i: WindowUpdateFrame(0, window_increment=1),
        lambda i: SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 100}),
    ],
    ids=["PING", "WINDOW_UPDATE", "SETTINGS"],
)
def test_connection_chatter_does_not_feed_a_silent_stream(chatter: Callable[[int], Frame]) -> None:
    """A server that never answers the request but sends a frame on the
    connection every 0.3 s: docs/http.md's read timeout is "the longest the
    server may stay silent" about the response; the request is a
    read_timeout near its read timeout (1 s), not at max_time (20 s)."""
    stop = threading.Event()

    def handler(conn: Conn, req: Request) -> None:
        for i in range(100):
            if stop.wait(0.3) or not conn.frames(chatter(i)):
                return

    with h2server(handler) as srv:
        try:
            _, error, took = get(srv.url("/"), max_time=20, read_timeout=1)
        finally:
            stop.set()
    assert error == "read_timeout" and took < 6, f"{error} after {took:.1f} s"


def test_a_busy_stream_does_not_feed_an_idle_one() -> None:
    """Stream A trickles its body (a DATA frame each 0.3 s); stream B, on the
    same connection, is never answered: B is a read_timeout near 1 s, A a 200."""
    stop = threading.Event()

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/idle":
            return
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", "12")]))
        for _ in range(12):
            if stop.wait(0.3):
                return
            conn.frames(conn.data(req.sid, b"t"))
        conn.frames(conn.data(req.sid, b"", end_stream=True))

    async def main(url: str) -> list[Any]:
        async with surge.AsyncClient(
            http2_prior_knowledge=True, max_time=20, read_timeout=1
        ) as client:

            async def timed(path: str) -> Any:
                start = time.monotonic()
                try:
                    r = await client.get(url + path)
                    return r.status_code, round(time.monotonic() - start, 1)
                except surge.http.RequestError as e:
                    return e.error_class, round(time.monotonic() - start, 1)

            return await asyncio.gather(timed("/busy"), timed("/idle"))

    with h2server(handler) as srv:
        try:
            busy, idle = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        finally:
            stop.set()
        conns = len(srv.conns)
    assert conns == 1
    assert busy[0] == 200, busy
    assert idle[0] == "read_timeout" and idle[1] < 3, f"the idle stream: {idle}"
