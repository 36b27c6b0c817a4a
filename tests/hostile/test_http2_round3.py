# ruff: noqa: E501  (assertion messages name the broken claim in full)
"""Hostile round 3 of HTTP/2 (and its HTTP/1.1 twin), written from docs/http.md
("HTTP/2", "What is sent, and what is sent again"), docs/fetch.md
(``--retries``, the records), docs/dropins.md and README.md only, not the code.

Two claims, tried on every front end - ``surge.AsyncClient``, ``surge.Client``
(threads), ``surge fetch`` (JSONL records), ``surge.httpx`` transports with
``http2=True`` under httpx, the requests adapter (HTTP/1.1 only, as the docs
say) - and on streamed responses:

- at most once: a request that is not idempotent is sent again only where the
  protocol proved it unprocessed (a GOAWAY above it, REFUSED_STREAM before any
  of its response) - never after its response began, after a reset, a lost
  connection, a timeout, a cancellation, nor under ``--retries`` after a read
  or write timeout or a reset once sent; a request sent again carries its
  whole body;
- a malformed response fails its own stream: places round 1 and 2 did not
  try - trailers, interim responses, a second response head, a body that
  overflows while the caller streams it - with another stream beside it on
  the same connection, which must go on.

Every count is taken at the server (HEADERS received per path).  The HTTP/2
server is round 1's scripted server of raw frames (over TLS with ALPN h2, so
the default path is the one tried); the HTTP/1.1 one is a plain socket server
here.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import trustme
import urllib3
from hyperframe.frame import SettingsFrame, WindowUpdateFrame
from tests.hostile.conftest import run
from tests.hostile.test_http2_round1 import (
    INTERNAL_ERROR,
    MAX_ID,
    NO_ERROR,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    Conn,
    H2Server,
    Request,
    h2server,
    no_traceback,
    ok,
    raw_frame,
    server_context,
)

import surge
import surge.http
import surge.httpx
import surge.requests

TIMEOUT = 5  # every client's max_time, fetch's --max-time


@dataclass(frozen=True)
class Tls:
    ca: trustme.CA
    cafile: str

    def context(self) -> ssl.SSLContext:
        return server_context(self.ca, ["h2"])


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    ca = trustme.CA()
    path = tmp_path_factory.mktemp("ca3") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return Tls(ca, str(path))


@contextlib.contextmanager
def h2(tls: Tls, handler: Callable[[Conn, Request], None], **options: Any) -> Iterator[H2Server]:
    """Round 1's scripted HTTP/2 server, over TLS (ALPN h2)."""
    with h2server(handler, tls=tls.context(), **options) as srv:
        yield srv


def base(srv: Any) -> str:
    return srv.url("").rstrip("/")


# --- the front ends ---------------------------------------------------------------
#
# A "job" is (method, path, body, delay): sent after ``delay`` seconds, all at
# once on one client.  An outcome is (status, content) or an error's name: a
# surge error class, a fetch record's error, or "httpx:<type>" /
# "requests:<type>" for a drop-in (which must raise its library's own).

Job = tuple[str, str, bytes | None, float]
Outcome = Any


def _surge_error(e: surge.http.RequestError) -> str:
    return e.error_class


def _httpx_error(e: Exception) -> str:
    assert not isinstance(e, surge.http.RequestError), (
        f"docs/dropins.md: a drop-in raises only its library's exceptions: {e!r}"
    )
    return "httpx:" + type(e).__name__


async def _async_jobs(url: str, jobs: list[Job], cafile: str, **options: Any) -> list[Outcome]:
    options.setdefault("max_time", TIMEOUT)
    async with surge.AsyncClient(cafile=cafile, **options) as client:

        async def one(job: Job) -> Outcome:
            method, path, body, delay = job
            await asyncio.sleep(delay)
            try:
                r = await client.request(method, url + path, content=body, follow_redirects=True)
            except surge.http.RequestError as e:
                return _surge_error(e)
            return r.status_code, r.content

        return list(await asyncio.gather(*(one(j) for j in jobs)))


def _sync_jobs(url: str, jobs: list[Job], cafile: str, **options: Any) -> list[Outcome]:
    options.setdefault("max_time", TIMEOUT)
    with surge.Client(cafile=cafile, **options) as client:

        def one(job: Job) -> Outcome:
            method, path, body, delay = job
            time.sleep(delay)
            try:
                r = client.request(method, url + path, content=body, follow_redirects=True)
            except surge.http.RequestError as e:
                return _surge_error(e)
            return r.status_code, r.content

        with ThreadPoolExecutor(len(jobs)) as pool:
            return list(pool.map(one, jobs))


def _httpx_async_jobs(url: str, jobs: list[Job], cafile: str, **options: Any) -> list[Outcome]:
    async def main() -> list[Outcome]:
        transport = surge.httpx.AsyncHTTPTransport(http2=True, verify=cafile)
        async with httpx.AsyncClient(
            transport=transport, timeout=TIMEOUT, follow_redirects=True
        ) as client:

            async def one(job: Job) -> Outcome:
                method, path, body, delay = job
                await asyncio.sleep(delay)
                try:
                    r = await client.request(method, url + path, content=body)
                except httpx.HTTPError as e:
                    return _httpx_error(e)
                return r.status_code, r.content

            return list(await asyncio.gather(*(one(j) for j in jobs)))

    return asyncio.run(asyncio.wait_for(main(), 60))


def _httpx_sync_jobs(url: str, jobs: list[Job], cafile: str, **options: Any) -> list[Outcome]:
    transport = surge.httpx.HTTPTransport(http2=True, verify=cafile)
    with httpx.Client(transport=transport, timeout=TIMEOUT, follow_redirects=True) as client:

        def one(job: Job) -> Outcome:
            method, path, body, delay = job
            time.sleep(delay)
            try:
                r = client.request(method, url + path, content=body)
            except httpx.HTTPError as e:
                return _httpx_error(e)
            return r.status_code, r.content

        with ThreadPoolExecutor(len(jobs)) as pool:
            return list(pool.map(one, jobs))


FETCH_TMP: list[Path] = []


def fetch_jsonl(
    tmp: Path, url: str, jobs: list[Job], *flags: str, timeout: float = 90
) -> list[dict[str, Any]]:
    """``surge fetch`` of one JSONL line per job (its method and body): the records, in input order."""
    inp = tmp / "in.jsonl"
    lines = []
    for method, path, body, _ in jobs:
        line: dict[str, Any] = {"url": url + path, "method": method}
        if body is not None:
            line["body"] = body.decode()
        lines.append(json.dumps(line) + "\n")
    inp.write_text("".join(lines))
    out = tmp / "out.jsonl"
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    proc = run(
        [
            "fetch",
            str(inp),
            "-o",
            str(out),
            "-q",
            "--no-progress",
            "--max-time",
            str(TIMEOUT),
            *flags,
        ],
        timeout=timeout,
    )
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = [json.loads(x) for x in out.read_bytes().splitlines()]
    recs.sort(key=lambda r: r["line"])
    assert [r["line"] for r in recs] == list(range(1, len(jobs) + 1)), (
        f"docs/fetch.md: exactly one record per input line: {[r['line'] for r in recs]}"
    )
    return recs


def _fetch_jobs(url: str, jobs: list[Job], cafile: str, **options: Any) -> list[Outcome]:
    flags = ["--cacert", cafile, *options.get("flags", ())]
    recs = fetch_jsonl(FETCH_TMP[-1], url, jobs, *flags)
    return [r["error"] if r["error"] else (r["status"], None) for r in recs]


FRONTS: dict[str, Callable[..., list[Outcome]]] = {
    "AsyncClient": lambda url, jobs, cafile, **o: asyncio.run(
        asyncio.wait_for(_async_jobs(url, jobs, cafile, **o), 60)
    ),
    "Client": _sync_jobs,
    "httpx-async": _httpx_async_jobs,
    "httpx": _httpx_sync_jobs,
    "fetch": _fetch_jobs,
}


@pytest.fixture(autouse=True)
def _fetch_tmp(tmp_path: Path) -> Iterator[None]:
    FETCH_TMP.append(tmp_path)
    yield
    FETCH_TMP.remove(tmp_path)


def jobs_on(front: str, url: str, jobs: list[Job], tls: Tls, **options: Any) -> list[Outcome]:
    return FRONTS[front](url, jobs, tls.cafile, **options)


def is_error(outcome: Outcome, want: str) -> bool:
    """``outcome`` is the error ``want`` (a drop-in: any of its library's errors)."""
    if isinstance(outcome, str) and outcome.startswith(("httpx:", "requests:")):
        return True
    return outcome == want


def is_ok(outcome: Outcome, status: int, content: bytes) -> bool:
    return (
        isinstance(outcome, tuple)
        and outcome[0] == status
        and (outcome[1] is None or outcome[1] == content)
    )


# --- 1. malformed responses in places round 1 and 2 left: their own stream only ------


def _hdrs(conn: Conn, sid: int, pairs: list[tuple[str, str]], end: bool = False) -> Any:
    return conn.headers(sid, pairs, end_stream=end)


MALFORMED: dict[str, Callable[[Conn, int], list[Any]]] = {
    # RFC 9113 8.1: trailers carry no pseudo-header field (8.3), names are lower case,
    # no connection-specific field; a HEADERS after the final one without END_STREAM,
    # DATA after trailers, an interim response with END_STREAM are malformed.
    "trailers-with-status": lambda c, s: [
        _hdrs(c, s, [(":status", "200")]),
        c.data(s, b"abc"),
        _hdrs(c, s, [(":status", "200"), ("x-t", "1")], end=True),
    ],
    "trailers-uppercase-name": lambda c, s: [
        _hdrs(c, s, [(":status", "200")]),
        c.data(s, b"abc"),
        c.headers(s, [(b"X-Checksum", b"abc")], end_stream=True),  # type: ignore[list-item]
    ],
    "trailers-connection-field": lambda c, s: [
        _hdrs(c, s, [(":status", "200")]),
        c.data(s, b"abc"),
        _hdrs(c, s, [("connection", "close")], end=True),
    ],
    "data-after-trailers": lambda c, s: [
        _hdrs(c, s, [(":status", "200")]),
        c.data(s, b"abc"),
        _hdrs(c, s, [("x-t", "1")]),
        c.data(s, b"more", end_stream=True),
    ],
    "second-final-head": lambda c, s: [
        _hdrs(c, s, [(":status", "200")]),
        c.data(s, b"abc"),
        _hdrs(c, s, [(":status", "500")]),
        c.data(s, b"x", end_stream=True),
    ],
    "interim-with-end-stream": lambda c, s: [
        _hdrs(c, s, [(":status", "103"), ("link", "</a>; rel=preload")], end=True),
    ],
    "interim-uppercase-name": lambda c, s: [
        c.headers(s, [(b":status", b"103"), (b"Link", b"</a>")]),  # type: ignore[list-item]
        _hdrs(c, s, [(":status", "200"), ("content-length", "3")]),
        c.data(s, b"abc", end_stream=True),
    ],
    "interim-after-final": lambda c, s: [
        _hdrs(c, s, [(":status", "200")]),
        _hdrs(c, s, [(":status", "103")]),
        c.data(s, b"abc", end_stream=True),
    ],
    "interim-with-connection-field": lambda c, s: [
        _hdrs(c, s, [(":status", "100"), ("keep-alive", "timeout=5")]),
        _hdrs(c, s, [(":status", "200"), ("content-length", "3")]),
        c.data(s, b"abc", end_stream=True),
    ],
}


def malformed_beside_good(kind: str) -> Callable[[Conn, Request], None]:
    def handler(conn: Conn, req: Request) -> None:
        if req.path.startswith("/bad"):
            conn.frames(*MALFORMED[kind](conn, req.sid))
        else:
            time.sleep(0.5)  # the bad one is answered meanwhile
            ok(conn, req)

    return handler


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_response_in_a_new_place_fails_its_own_stream_only(kind: str, tls: Tls) -> None:
    """docs/http.md: "misplaced pseudo-header fields, upper-case field names,
    connection-specific fields ... is malformed (RFC 9113 8.1.1): that request
    is a protocol_error and its stream is reset, while the other requests on
    the connection go on"; and a request after it uses the same connection."""

    async def main(url: str) -> list[Outcome]:
        async with surge.AsyncClient(cafile=tls.cafile, max_time=TIMEOUT) as client:

            async def one(path: str, delay: float) -> Outcome:
                await asyncio.sleep(delay)
                try:
                    r = await client.get(url + path)
                    return r.status_code, r.content
                except surge.http.RequestError as e:
                    return e.error_class

            first = await asyncio.gather(one("/good", 0), one("/bad", 0.2))
            return [*first, await one("/after", 0)]

    with h2(tls, malformed_beside_good(kind)) as srv:
        results = asyncio.run(asyncio.wait_for(main(base(srv)), 60))
        conns = len(srv.conns)
    assert results == [(200, b"hello /good"), "protocol_error", (200, b"hello /after")], (
        f"{kind}: [good, bad, after] = {results}"
    )
    assert conns == 1, f"{kind}: a malformed response ended the connection: {conns} connections"


@pytest.mark.parametrize("front", ["Client", "httpx-async", "httpx", "fetch"])
@pytest.mark.parametrize(
    "kind", ["trailers-with-status", "data-after-trailers", "interim-after-final"]
)
def test_a_malformed_response_fails_its_own_stream_on_every_front_end(
    front: str, kind: str, tls: Tls
) -> None:
    with h2(tls, malformed_beside_good(kind)) as srv:
        results = jobs_on(
            front, base(srv), [("GET", "/good", None, 0), ("GET", "/bad", None, 0.2)], tls
        )
        conns = len(srv.conns)
    good, bad = results
    assert is_ok(good, 200, b"hello /good"), f"{front} {kind}: the good stream beside it: {good}"
    assert is_error(bad, "protocol_error"), f"{front} {kind}: the malformed one: {bad}"
    assert conns == 1, f"{front} {kind}: {conns} connections"


# --- 2. a streamed response cut while the caller reads it --------------------------

STREAM_BODY = 200_000


def cut_stream(cut: str) -> Callable[[Conn, Request], None]:
    """Connection 0: HEADERS (content-length 200000), 50,000 bytes, then ``cut``;
    any later connection answers whole (a resend would show)."""
    total = STREAM_BODY

    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0:
            conn.respond(req, 200, b"r" * total)
            return
        length = 60_000 if cut == "overflow" else total
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", str(length))]))
        conn.send_body(req.sid, b"s" * 50_000, end_stream=False)
        time.sleep(0.4)
        cut_now(conn, req.sid, cut, b"s" * 20_000)

    return handler


def cut_now(conn: Conn, sid: int, cut: str, overflow: bytes) -> None:
    """Stream ``sid``, its response begun, cut as ``cut`` ("overflow": the
    ``overflow`` bytes past its Content-Length, and its end)."""
    if cut == "refused":
        conn.frames(conn.rst(sid, REFUSED_STREAM))
    elif cut == "internal":
        conn.frames(conn.rst(sid, INTERNAL_ERROR))
    elif cut.startswith("goaway"):
        conn.frames(
            conn.goaway(0, NO_ERROR) if cut == "goaway0" else conn.goaway(sid, INTERNAL_ERROR)
        )
        time.sleep(0.1)
        conn.shutdown()
    elif cut == "drop":
        conn.shutdown()
    elif cut == "overflow":
        conn.send_body(sid, overflow, end_stream=True)


CUTS = {
    "refused": "connection_reset",
    "internal": "connection_reset",
    "goaway0": "connection_reset",
    "goaway-error": "connection_reset",
    "drop": "connection_reset",
    "overflow": "protocol_error",
}


def _stream_async(url: str, method: str, cafile: str) -> tuple[bytes, Outcome]:
    async def main() -> tuple[bytes, Outcome]:
        got = b""
        async with surge.AsyncClient(cafile=cafile, max_time=TIMEOUT) as client:
            try:
                async with client.stream(
                    method, url, content=b"pay" if method != "GET" else None
                ) as r:
                    async for chunk in r.aiter_bytes():
                        got += chunk
            except surge.http.RequestError as e:
                return got, e.error_class
        return got, "no error"

    return asyncio.run(asyncio.wait_for(main(), 60))


def _stream_sync(url: str, method: str, cafile: str) -> tuple[bytes, Outcome]:
    got = b""
    with surge.Client(cafile=cafile, max_time=TIMEOUT) as client:
        try:
            with client.stream(method, url, content=b"pay" if method != "GET" else None) as r:
                for chunk in r.iter_bytes():
                    got += chunk
        except surge.http.RequestError as e:
            return got, e.error_class
    return got, "no error"


def _stream_httpx(url: str, method: str, cafile: str) -> tuple[bytes, Outcome]:
    got = b""
    transport = surge.httpx.HTTPTransport(http2=True, verify=cafile)
    with httpx.Client(transport=transport, timeout=TIMEOUT) as client:
        try:
            with client.stream(method, url, content=b"pay" if method != "GET" else None) as r:
                for chunk in r.iter_bytes():
                    got += chunk
        except httpx.HTTPError as e:
            return got, _httpx_error(e)
    return got, "no error"


STREAMERS = {"AsyncClient": _stream_async, "Client": _stream_sync, "httpx": _stream_httpx}


@pytest.mark.parametrize("front", sorted(STREAMERS))
@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("cut", sorted(CUTS))
def test_a_streamed_body_cut_midway_raises_and_is_never_sent_again(
    front: str, method: str, cut: str, tls: Tls
) -> None:
    """docs/http.md: "A stream whose response had begun (a status ... or DATA)
    was processed, whatever a later GOAWAY or REFUSED_STREAM claims: it ends
    with connection_reset"; more DATA than Content-Length is a protocol_error.
    Read as a stream: the iteration raises (never a short body that looks
    whole), yields only what the one response sent, and the request went once."""
    with h2(tls, cut_stream(cut)) as srv:
        got, outcome = STREAMERS[front](srv.url("/s"), method, tls.cafile)
        sent = srv.count("/s")
    assert sent == 1, f"{front} {method} cut by {cut}: sent {sent} times"
    assert is_error(outcome, CUTS[cut]), (
        f"{front} {method} cut by {cut}: docs say {CUTS[cut]}; got {outcome} after {len(got)} bytes"
    )
    assert set(got) <= {ord("s")} and len(got) <= 60_000, (
        f"{front} {method} cut by {cut}: the stream gave bytes of another response: {len(got)} bytes, {set(got)}"
    )


# --- 3. concurrent POSTs on one connection, one of them cut ------------------------


def one_cut_among_many(cut: str) -> Callable[[Conn, Request], None]:
    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0 or req.path != "/p2":
            time.sleep(0.3)
            ok(conn, req)
            return
        conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", "1000")]))
        conn.frames(conn.data(req.sid, b"x" * 100))
        time.sleep(0.1)
        cut_now(conn, req.sid, cut, b"x" * 2000)

    return handler


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
@pytest.mark.parametrize(
    ("cut", "want"),
    [
        ("internal", "connection_reset"),
        ("refused", "connection_reset"),
        ("overflow", "protocol_error"),
    ],
)
def test_one_post_cut_mid_body_among_four_on_one_connection(
    front: str, cut: str, want: str, tls: Tls
) -> None:
    with h2(tls, one_cut_among_many(cut)) as srv:
        jobs = [("POST", f"/p{n}", b"body%d" % n, 0.1 if n else 0) for n in range(4)]
        results = jobs_on(front, base(srv), jobs, tls)
        counts = [srv.count(f"/p{n}") for n in range(4)]
        conns = len(srv.conns)
    assert counts == [1, 1, 1, 1], f"{front} {cut}: each POST once: {counts}"
    assert is_error(results[2], want), f"{front} {cut}: the cut POST: {results[2]}"
    for n in (0, 1, 3):
        assert is_ok(results[n], 200, f"hello /p{n}".encode()), (
            f"{front} {cut}: a POST beside the cut one: {results[n]}"
        )
    assert conns == 1, f"{front} {cut}: {conns} connections"


# --- 4. processed, then the connection goes: never sent again -----------------------


def processed_then(how: str, n: int) -> Callable[[Conn, Request], None]:
    """Each request read whole; once ``n`` are in, the connection goes as ``how``."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0:
            ok(conn, req)
            return
        for _ in range(100):
            if sum(1 for r in list(conn.streams.values()) if r.ended) >= n:
                break
            time.sleep(0.05)
        if req.sid != max(conn.streams):
            return
        time.sleep(0.1)
        end_connection(conn, how, max(conn.streams))

    return handler


def end_connection(conn: Conn, how: str, last: int, answer: Request | None = None) -> None:
    """Connection ``conn`` ends as ``how`` ("plain-close": no more than a FIN),
    a GOAWAY naming ``last``; ``answer``: answered after that GOAWAY."""
    if how == "goaway-max-then-close":
        conn.frames(conn.goaway(MAX_ID, NO_ERROR))
    elif how == "goaway-last-then-close":
        conn.frames(conn.goaway(last, NO_ERROR))
    elif how == "breaking-frame":
        conn.write(raw_frame(0x8, 0, 0, (0).to_bytes(4, "big")))  # WINDOW_UPDATE 0
        time.sleep(0.3)
    elif how == "goaway-protocol-error":
        conn.frames(conn.goaway(last, PROTOCOL_ERROR))
    if answer is not None:
        ok(conn, answer)
    time.sleep(0.1)
    conn.shutdown()


HOW = {
    "goaway-max-then-close": "connection_reset",
    "goaway-last-then-close": "connection_reset",
    "plain-close": "connection_reset",
    "breaking-frame": "protocol_error",
    "goaway-protocol-error": "connection_reset",
}


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
@pytest.mark.parametrize("how", sorted(HOW))
def test_posts_processed_then_the_connection_goes_are_sent_once(
    front: str, how: str, tls: Tls
) -> None:
    """docs/http.md: streams up to a GOAWAY's last id were processed; "A
    connection lost, or one that breaks the protocol, fails each of its streams
    (connection_reset, protocol_error)", "a request that is not idempotent is
    then never sent again"; "A GOAWAY with an error code ends the streams up
    to its last id with connection_reset"."""
    with h2(tls, processed_then(how, 3)) as srv:
        jobs = [("POST", f"/q{n}", b"q", 0.1 if n else 0) for n in range(3)]
        results = jobs_on(front, base(srv), jobs, tls)
        counts = [srv.count(f"/q{n}") for n in range(3)]
    assert counts == [1, 1, 1], f"{front} {how}: POSTs the server had sent again: {counts}"
    for r in results:
        assert is_error(r, HOW[how]), f"{front} {how}: docs say {HOW[how]}: {results}"


def goaway_between(conn: Conn, req: Request) -> None:
    """Four POSTs on connection 0: GOAWAY(the second-lowest id), the two at or
    below it answered, the connection closed; later connections answer all."""
    if conn.index > 0:
        ok(conn, req)
        return
    for _ in range(100):
        if sum(1 for r in list(conn.streams.values()) if r.ended) >= 4:
            break
        time.sleep(0.05)
    sids = sorted(conn.streams)
    if req.sid != sids[-1]:
        return
    last = sids[1]
    conn.frames(conn.goaway(last, NO_ERROR))
    for sid in sids[:2]:
        conn.respond(conn.streams[sid], 200, b"hello " + conn.streams[sid].path.encode())
    time.sleep(0.2)
    conn.shutdown()


@pytest.mark.parametrize("front", ["Client", "httpx", "fetch"])
def test_goaway_among_four_posts_resends_exactly_those_above_it(front: str, tls: Tls) -> None:
    """docs/http.md: "streams up to its last stream id finish ... and those
    above it were not processed ... and are sent again on another connection -
    a POST too, once", with the whole body."""
    with h2(tls, goaway_between) as srv:
        jobs = [("POST", f"/g{n}", b"body-%d" % n, 0.1 if n else 0) for n in range(4)]
        results = jobs_on(front, base(srv), jobs, tls)
        first = sorted((sid, p) for i, sid, _, p in srv.heads if i == 0)
        counts = {f"/g{n}": srv.count(f"/g{n}") for n in range(4)}
        later = {p: b for i, _, _, p, b in srv.requests if i > 0}
    assert len(first) == 4, f"the test needs four streams on connection 0: {first}"
    kept = {p for _, p in first[:2]}
    want = {p: 1 if p in kept else 2 for p in counts}
    assert counts == want, f"{front}: sent {counts}; want {want}"
    assert all(is_ok(r, 200, f"hello /g{n}".encode()) for n, r in enumerate(results)), results
    for p, body in later.items():
        assert body == b"body-" + p[2:].encode(), (
            f"{front}: {p} sent again without its body: {body!r}"
        )


# --- 5. an upload cut while it waits for window: the resend carries the whole body ---

UPLOAD = bytes(range(256)) * 1200  # 307,200 bytes: more than the 65,535 of a first window


def give_window_back(conn: Conn, req: Request) -> None:
    """WINDOW_UPDATEs (connection and stream) for the bytes of ``req`` not yet acknowledged."""
    n = len(req.body) - getattr(req, "acked", 0)
    req.acked = len(req.body)  # type: ignore[attr-defined]
    if n:
        conn.frames(
            WindowUpdateFrame(0, window_increment=n),
            WindowUpdateFrame(req.sid, window_increment=n),
        )


def upload_cut(cut: str) -> Any:
    """Windows are the server's to open (auto_window off): connection 0 takes
    the first window's bytes, then ``cut``; later connections open windows as
    the bytes come and answer with the body's length."""

    def on_data(conn: Conn, req: Request) -> None:
        cut_sid = getattr(conn, "cut_sid", None)
        if conn.index > 0 or (cut_sid is not None and req.sid != cut_sid):
            give_window_back(conn, req)
            return
        if cut_sid is None and len(req.body) >= 60_000:
            conn.cut_sid = req.sid  # type: ignore[attr-defined]
            if cut == "goaway0":
                conn.frames(conn.goaway(0, NO_ERROR))
                time.sleep(0.1)
                conn.shutdown()
            else:  # refused, and the connection's window given back for a resend on it
                conn.frames(
                    conn.rst(req.sid, REFUSED_STREAM),
                    WindowUpdateFrame(0, window_increment=65_535),
                )

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(req, 200, str(len(req.body)).encode())

    return handler, on_data


def _bytesio_body() -> Any:
    return io.BytesIO(UPLOAD)


def _iter_body() -> Any:
    return (UPLOAD[i : i + 10_000] for i in range(0, len(UPLOAD), 10_000))


@pytest.mark.parametrize("front", ["AsyncClient", "Client"])
@pytest.mark.parametrize("body", ["bytes", "file", "bytesio", "iterator"])
@pytest.mark.parametrize("cut", ["goaway0", "refused"])
def test_an_upload_cut_before_any_answer_is_sent_again_whole_or_not_at_all(
    front: str, body: str, cut: str, tls: Tls, tmp_path: Path
) -> None:
    """docs/http.md: a stream above a GOAWAY's last id, or reset with
    REFUSED_STREAM, was not processed and is sent again, once.  Its body is
    the whole body again: a server must never get (and act on) a POST whose
    body is its tail, or its first bytes twice.  An iterator cannot be read
    again (docs: a 307/308 "refuses an iterator with StreamConsumed"): then an
    error, never a short body."""
    handler, on_data = upload_cut(cut)

    path = tmp_path / "upload.bin"
    path.write_bytes(UPLOAD)
    files: list[Any] = []

    def content() -> Any:
        if body == "file":  # a binary file on disk, as docs/http.md's example puts one
            files.append(path.open("rb"))
            return files[-1]
        return {"bytes": lambda: UPLOAD, "bytesio": _bytesio_body, "iterator": _iter_body}[body]()

    async def a(url: str) -> Outcome:
        async with surge.AsyncClient(cafile=tls.cafile, max_time=10) as client:
            try:
                r = await client.post(url, content=content())
            except surge.http.RequestError as e:
                return e.error_class
            return r.status_code, r.content

    def s(url: str) -> Outcome:
        with surge.Client(cafile=tls.cafile, max_time=10) as client:
            try:
                r = client.post(url, content=content())
            except surge.http.RequestError as e:
                return e.error_class
            except Exception as e:  # StreamConsumed, or what the client names it
                return type(e).__name__
            return r.status_code, r.content

    with h2(tls, handler, on_data=on_data, auto_window=False) as srv:
        if front == "AsyncClient":
            try:
                outcome = asyncio.run(asyncio.wait_for(a(srv.url("/u")), 60))
            except Exception as e:
                outcome = type(e).__name__
        else:
            outcome = s(srv.url("/u"))
        for f in files:
            f.close()
        sent = srv.count("/u")
        whole = [(i, len(b), b == UPLOAD) for i, _, _, p, b in srv.requests if p == "/u"]
    assert sent <= 2, f"{front} {body} {cut}: sent {sent} times (once more at most)"
    assert all(good for _, _, good in whole), (
        f"{front} {body} {cut}: the server got a body that is not the body: {whole}"
    )
    if body != "iterator":
        assert outcome == (200, str(len(UPLOAD)).encode()), (
            f"{front} {body} {cut}: an unprocessed POST is sent again whole: {outcome}"
        )
        assert sent == 2


# --- 6. 307/308 over HTTP/2: the redirected POST, then a failure --------------------


def redirect_then(cut: str, code: int = 307) -> Callable[[Conn, Request], None]:
    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/a":
            conn.respond(req, code, b"", headers=(("location", "/b"),))
            return
        first_b = conn.server.count("/b") == 1
        if not first_b or cut == "none":
            conn.respond(req, 200, b"b got " + req.body)
            return
        if cut == "refused":
            conn.frames(conn.rst(req.sid, REFUSED_STREAM))
        elif cut == "internal":
            conn.frames(conn.rst(req.sid, INTERNAL_ERROR))
        elif cut == "goaway0":
            conn.frames(conn.goaway(req.sid - 2, NO_ERROR))
            time.sleep(0.1)
            conn.shutdown()
        elif cut == "drop":
            time.sleep(0.1)
            conn.shutdown()
        elif cut == "status-head-then-refused":
            conn.frames(
                conn.headers(req.sid, [(":status", "200"), ("content-length", "10")]),
                conn.rst(req.sid, REFUSED_STREAM),
            )

    return handler


REDIRECT_CUTS = {
    "refused": ((1, 2), True),
    "goaway0": ((1, 2), True),
    "internal": ((1, 1), False),
    "drop": ((1, 1), False),
    "status-head-then-refused": ((1, 1), False),
}


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
@pytest.mark.parametrize("cut", sorted(REDIRECT_CUTS))
@pytest.mark.parametrize("code", [307, 308])
def test_a_post_redirected_by_307_or_308_then_cut_is_sent_at_most_as_the_protocol_allows(
    front: str, cut: str, code: int, tls: Tls
) -> None:
    """docs/fetch.md: "307/308 keep both" method and body; then docs/http.md's
    rules for the hop: REFUSED_STREAM or a GOAWAY below it - the hop goes
    again, with the body; a reset, a lost connection, a begun response - an
    error, the hop not sent again, and never the first request again."""
    (want_a, want_b), success = REDIRECT_CUTS[cut]
    options = {"flags": ["-L"]} if front == "fetch" else {}
    with h2(tls, redirect_then(cut, code)) as srv:
        results = jobs_on(front, base(srv), [("POST", "/a", b"pay=1", 0)], tls, **options)
        counts = (srv.count("/a"), srv.count("/b"))
        bodies = [b for _, _, _, p, b in srv.requests if p == "/b"]
    assert counts == (want_a, want_b), (
        f"{front} {code} {cut}: (/a, /b) sent {counts}; want {(want_a, want_b)}"
    )
    assert all(b == b"pay=1" for b in bodies), (
        f"{front} {code}: the redirected POST's bodies {bodies}"
    )
    if success:
        assert is_ok(results[0], 200, b"b got pay=1"), f"{front} {code} {cut}: {results[0]}"
    else:
        assert not is_ok(results[0], 200, b"b got pay=1") and not isinstance(results[0], tuple), (
            f"{front} {code} {cut}: an error, not a response: {results[0]}"
        )


def test_fetch_retries_do_not_redo_a_redirect_chain_whose_last_hop_was_reset(
    tls: Tls,
) -> None:
    """docs/fetch.md: under --retries a POST is "never [retried] after ... a
    reset once sent": the POST to /a answered 307, the POST to /b reset - no
    try sends /a or /b again."""
    with h2(tls, redirect_then("internal")) as srv:
        results = jobs_on(
            "fetch", base(srv), [("POST", "/a", b"pay=1", 0)], tls, flags=["-L", "--retries", "2"]
        )
        counts = (srv.count("/a"), srv.count("/b"))
    assert counts == (1, 1), f"--retries 2: (/a, /b) sent {counts}"
    assert results == ["connection_reset"], results


# --- 7. surge fetch --retries with a POST over HTTP/2 -------------------------------


def retry_case(case: str) -> tuple[Callable[[Conn, Request], None], dict[str, Any]]:
    def handler(conn: Conn, req: Request) -> None:
        if case == "rst-internal":
            conn.frames(conn.rst(req.sid, INTERNAL_ERROR))
        elif case == "rst-protocol":
            conn.frames(conn.rst(req.sid, PROTOCOL_ERROR))
        elif case == "head-then-rst":
            conn.frames(
                conn.headers(req.sid, [(":status", "200"), ("content-length", "9")]),
                conn.rst(req.sid, INTERNAL_ERROR),
            )
        elif case == "head-then-stall":
            conn.frames(conn.headers(req.sid, [(":status", "200"), ("content-length", "9")]))
        elif case == "silent":
            pass
        elif case == "drop-after-read":
            time.sleep(0.1)
            conn.shutdown()
        elif case == "breaking-frame":
            conn.write(raw_frame(0x8, 0, 0, (0).to_bytes(4, "big")))
        elif case == "goaway-error-at-its-id":
            conn.frames(conn.goaway(req.sid, INTERNAL_ERROR))
            time.sleep(0.1)
            conn.shutdown()
        elif case == "status-503":
            conn.respond(req, 503, b"busy")

    options: dict[str, Any] = {}
    if case == "zero-window":
        options = {"settings": {SettingsFrame.INITIAL_WINDOW_SIZE: 0}, "auto_window": False}
    return handler, options


RETRY_CASES = {
    # case: (the record's error, times sent)
    "rst-internal": ("connection_reset", 1),
    "rst-protocol": ("protocol_error", 1),
    "head-then-rst": ("connection_reset", 1),
    "head-then-stall": ("read_timeout", 1),
    "silent": ("read_timeout", 1),
    "drop-after-read": ("connection_reset", 1),
    "breaking-frame": ("protocol_error", 1),
    "goaway-error-at-its-id": ("connection_reset", 1),
    "zero-window": ("write_timeout", 1),
    "status-503": (None, 3),  # the server answered: retried (docs/fetch.md)
}


@pytest.mark.parametrize("method", ["POST", "PATCH"])
@pytest.mark.parametrize("case", sorted(RETRY_CASES))
def test_fetch_retries_never_resend_a_post_the_server_may_have_acted_on(
    case: str, method: str, tls: Tls
) -> None:
    """docs/fetch.md: "A request that is not idempotent (POST, PATCH) is
    retried after such a status (the server answered) or a failure to
    connect, never after a read or write timeout or a reset once sent"."""
    handler, options = retry_case(case)
    want_error, want_sent = RETRY_CASES[case]
    body: bytes | None = b"x" * 100
    flags = ["--cacert", tls.cafile, "--retries", "2", "--max-time", "2"]
    if case == "zero-window":  # past the 65,535 bytes a client may send before SETTINGS come
        data = FETCH_TMP[-1] / "body.bin"
        data.write_bytes(b"x" * 200_000)
        body, flags = None, [*flags, "--data-binary", f"@{data}"]
    with h2(tls, handler, **options) as srv:
        recs = fetch_jsonl(FETCH_TMP[-1], base(srv), [(method, "/r", body, 0)], *flags)
        sent = srv.count("/r")
    r = recs[0]
    assert sent == want_sent, (
        f"{method} {case} --retries 2: sent {sent} times; want {want_sent}: {r}"
    )
    assert r["error"] == want_error, f"{method} {case}: {r['error']} ({r['error_detail']})"
    assert r["attempts"] == want_sent, f"{method} {case}: attempts {r['attempts']}"
    if case.startswith("head-then"):
        assert r["status"] == 200, f"docs/fetch.md: status is the last head that arrived: {r}"


# --- 8. the client's own timeouts and cancellations racing the server ---------------


def late_after_client_reset(late: str) -> Callable[[Conn, Request], None]:
    """Waits for the client's RST_STREAM (its timeout or cancel), then answers
    it with REFUSED_STREAM, or a GOAWAY(0) and the connection's end - too late
    to mean anything; others answered."""

    def handler(conn: Conn, req: Request) -> None:
        if req.path != "/slow":
            ok(conn, req)
            return
        for _ in range(100):
            if any(sid == req.sid for sid, _ in conn.rsts_received):
                break
            time.sleep(0.05)
        if late == "refused":
            conn.frames(conn.rst(req.sid, REFUSED_STREAM))
        else:
            conn.frames(conn.goaway(0, NO_ERROR))
            time.sleep(0.1)
            conn.shutdown()

    return handler


@pytest.mark.parametrize("late", ["refused", "goaway0"])
@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_a_not_processed_claim_after_the_client_gave_up_sends_nothing_again(
    how: str, late: str, tls: Tls
) -> None:
    """docs/http.md: "A late answer to a stream the client reset (its timeout,
    a cancellation) is ignored": a REFUSED_STREAM or GOAWAY(0) that comes
    after the client gave up must not revive the POST (the caller has its
    error already)."""

    async def main(url: str) -> tuple[Any, Any]:
        async with surge.AsyncClient(cafile=tls.cafile, max_time=TIMEOUT) as client:
            first: Any
            try:
                if how == "timeout":
                    await client.post(url + "/slow", content=b"once", timeout=0.3)
                else:
                    await asyncio.wait_for(client.post(url + "/slow", content=b"once"), 0.3)
                first = "answered"
            except (TimeoutError, surge.http.RequestError) as e:
                first = type(e).__name__
            await asyncio.sleep(1.0)  # the late answer read
            after = await client.get(url + "/after")
            return first, after.status_code

    with h2(tls, late_after_client_reset(late)) as srv:
        first, after = asyncio.run(asyncio.wait_for(main(base(srv)), 60))
        sent = srv.count("/slow")
        conns = len(srv.conns)
        rsts = [r for c in srv.conns for r in c.rsts_received]
    assert first != "answered" and rsts, (first, rsts)
    assert sent == 1, f"{how}, then {late}: a POST the client gave up on was sent {sent} times"
    assert after == 200 and conns == (1 if late == "refused" else 2), (after, conns)


def test_sync_client_post_timeout_then_late_refused_stream_sends_once(tls: Tls) -> None:
    with (
        h2(tls, late_after_client_reset("refused")) as srv,
        surge.Client(cafile=tls.cafile, max_time=TIMEOUT) as client,
    ):
        with pytest.raises(surge.http.RequestError):
            client.post(srv.url("/slow"), content=b"once", timeout=0.3)
        time.sleep(1.0)
        assert client.get(srv.url("/after")).status_code == 200
        sent = srv.count("/slow")
    assert sent == 1, f"sent {sent} times"


def test_a_cancelled_upload_waiting_for_window_is_not_sent_again(tls: Tls) -> None:
    """A large POST held by a window the server keeps shut, cancelled by its
    caller; the server then opens the window wide and answers everything: the
    cancelled stream sends no more DATA, and nothing sends it again."""
    opened = threading.Event()

    def handler(conn: Conn, req: Request) -> None:
        ok(conn, req)

    def on_headers(conn: Conn, req: Request) -> None:
        if req.path == "/after" and not opened.is_set():
            opened.set()
            conn.frames(WindowUpdateFrame(0, window_increment=10 * 2**20))

    async def main(url: str) -> int:
        async with surge.AsyncClient(cafile=tls.cafile, max_time=10) as client:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(client.post(url + "/up", content=UPLOAD), 0.5)
            await asyncio.sleep(0.2)
            r = await client.get(url + "/after")
            await asyncio.sleep(0.5)
            return r.status_code

    with h2(tls, handler, on_headers=on_headers, auto_window=False) as srv:
        status = asyncio.run(asyncio.wait_for(main(base(srv)), 60))
        sent = srv.count("/up")
        ended = [p for _, _, _, p, _ in srv.requests if p == "/up"]
        up = next(r for c in srv.conns for r in c.streams.values() if r.path == "/up")
    assert status == 200
    assert sent == 1 and not ended, f"the cancelled upload: sent {sent}, completed {ended}"
    assert len(up.body) <= 65_535, f"DATA after the cancel: {len(up.body)} bytes"


# --- 9. HTTP/1.1: a reused keep-alive connection, the server gone mid-exchange -------


class H1Server:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 (port 0): the first request of
    each connection is answered (200, kept alive); on the second, ``drop``
    says what it does before closing: "head" (reads the head only), "part"
    (the head and a part of the body), "interim" (reads it whole, sends a 100
    Continue), "read" (reads it whole, sends nothing), "partial" (reads it
    whole, sends a head and part of its body), "redirect" (answers /a with a
    307 to /b on the same connection, then /b is read whole and dropped);
    "idle-close": each answered, and the connection closed 0.2 s after - a
    server's keep-alive timeout; "503": /x is answered 503, always."""

    def __init__(self, drop: str, drop_at: int = 1) -> None:
        self.drop = drop
        self.drop_at = drop_at  # which request of a connection is dropped (0: its first)
        self.heads: list[tuple[int, str, str]] = []
        self.bodies: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        self.conns = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def count(self, path: str) -> int:
        with self.lock:
            return sum(1 for _, _, p in self.heads if p == path)

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                index = self.conns
                self.conns += 1
            threading.Thread(target=self.serve, args=(sock, index), daemon=True).start()

    def close(self) -> None:
        self.sock.close()

    @staticmethod
    def fill(sock: socket.socket, buf: bytes, enough: Callable[[bytes], bool]) -> bytes | None:
        """``buf`` and what ``sock`` sends until ``enough(buf)``; None at its end first."""
        for _ in range(100_000):
            if enough(buf):
                return buf
            data = sock.recv(65536)
            if not data:
                return None
            buf += data
        return None

    def read_head(self, sock: socket.socket, buf: bytes) -> tuple[bytes, bytes] | None:
        full = self.fill(sock, buf, lambda b: b"\r\n\r\n" in b)
        if full is None:
            return None
        head, _, rest = full.partition(b"\r\n\r\n")
        return head, rest

    def read_body(self, sock: socket.socket, head: bytes, buf: bytes) -> tuple[bytes, bytes] | None:
        fields = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        if fields.get(b"transfer-encoding", b"").lower() != b"chunked":
            length = int(fields.get(b"content-length", b"0"))
            full = self.fill(sock, buf, lambda b: len(b) >= length)
            return None if full is None else (full[:length], full[length:])
        body = b""
        for _ in range(100_000):
            got = self.fill(sock, buf, lambda b: b"\r\n" in b)
            if got is None:
                return None
            size_line, _, buf = got.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            got = self.fill(sock, buf, lambda b: len(b) >= size + 2)  # noqa: B023 (called at once)
            if got is None:
                return None
            if size == 0:
                return body, got[2:]
            body, buf = body + got[:size], got[size + 2 :]
        return None

    def serve(self, sock: socket.socket, index: int) -> None:
        sock.settimeout(15)
        with sock, contextlib.suppress(OSError):
            buf = b""
            for n in range(3):
                got = self.read_head(sock, buf)
                if got is None:
                    return
                head, buf = got
                method, path = (x.decode() for x in head.split(b" ", 2)[:2])
                with self.lock:
                    self.heads.append((index, method, path))
                if path.startswith("http://"):  # absolute form: we are the proxy
                    path = path[path.index("/", len("http://")) :]
                dropping = n >= self.drop_at and not (self.drop == "redirect" and path == "/a")
                if dropping and self.drop == "head":
                    sock.shutdown(socket.SHUT_RDWR)
                    return
                if dropping and self.drop == "part":
                    self.fill(sock, buf, lambda b: len(b) >= 10_000)
                    sock.shutdown(socket.SHUT_RDWR)
                    return
                body_rest = self.read_body(sock, head, buf)
                if body_rest is None:
                    return
                body, buf = body_rest
                with self.lock:
                    self.bodies.append((path, body))
                if dropping:
                    if self.drop == "interim":
                        sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    elif self.drop == "partial":
                        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"p" * 10)
                    time.sleep(0.1)
                    sock.shutdown(socket.SHUT_RDWR)
                    return
                if self.drop == "503" and path == "/x":
                    sock.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"
                    )
                elif path == "/a":
                    sock.sendall(
                        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n"
                    )
                else:
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                if self.drop == "idle-close":
                    time.sleep(0.2)
                    sock.shutdown(socket.SHUT_RDWR)
                    return


@pytest.fixture
def h1(request: pytest.FixtureRequest) -> Iterator[Callable[..., H1Server]]:
    servers: list[H1Server] = []

    def make(drop: str, drop_at: int = 1) -> H1Server:
        servers.append(H1Server(drop, drop_at))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


H1_BIG = b"b" * 1_000_000


def _h1_steps(method: str, drop: str) -> list[tuple[str, str, bytes | None]]:
    body = H1_BIG if drop in ("head", "part") else b"data=1"
    target = "/a" if drop == "redirect" else "/x"
    return [("GET", "/warm", None), (method, target, body)]


def h1_front(
    front: str,
    srv: H1Server,
    steps: list[tuple[str, str, bytes | None]],
    tmp: Path,
    proxy: str | None = None,
) -> list[Outcome]:
    """The steps one after another on one client (so the second reuses the
    first's connection); ``proxy``: through this forward proxy (the steps'
    URLs are then on an origin it never reaches: it is ``srv`` itself)."""
    out: list[Outcome] = []
    origin = "http://origin.test" if proxy else srv.url("")
    surge_proxy = {"proxy": proxy} if proxy else {}
    if front == "AsyncClient":

        async def main() -> None:
            async with surge.AsyncClient(max_time=TIMEOUT, **surge_proxy) as client:
                for method, path, body in steps:
                    try:
                        r = await client.request(
                            method, origin + path, content=body, follow_redirects=True
                        )
                        out.append((r.status_code, r.content))
                    except surge.http.RequestError as e:
                        out.append(e.error_class)

        asyncio.run(asyncio.wait_for(main(), 60))
    elif front == "Client":
        with surge.Client(max_time=TIMEOUT, **surge_proxy) as client:
            for method, path, body in steps:
                try:
                    r = client.request(method, origin + path, content=body, follow_redirects=True)
                    out.append((r.status_code, r.content))
                except surge.http.RequestError as e:
                    out.append(e.error_class)
    elif front == "httpx":
        with httpx.Client(
            transport=surge.httpx.HTTPTransport(proxy=proxy), timeout=TIMEOUT, follow_redirects=True
        ) as c:
            for method, path, body in steps:
                try:
                    r = c.request(method, origin + path, content=body)
                    out.append((r.status_code, r.content))
                except httpx.HTTPError as e:
                    out.append(_httpx_error(e))
    elif front == "httpx-async":

        async def amain() -> None:
            transport = surge.httpx.AsyncHTTPTransport(proxy=proxy)
            async with httpx.AsyncClient(
                transport=transport, timeout=TIMEOUT, follow_redirects=True
            ) as c:
                for method, path, body in steps:
                    try:
                        r = await c.request(method, origin + path, content=body)
                        out.append((r.status_code, r.content))
                    except httpx.HTTPError as e:
                        out.append(_httpx_error(e))

        asyncio.run(asyncio.wait_for(amain(), 60))
    elif front == "requests":
        with requests.Session() as session:
            session.mount("http://", surge.requests.Adapter())
            session.trust_env = False
            if proxy:
                session.proxies = {"http": proxy}
            for method, path, body in steps:
                try:
                    r = session.request(method, origin + path, data=body, timeout=TIMEOUT)
                    out.append((r.status_code, r.content))
                except requests.RequestException as e:
                    assert not isinstance(e, surge.http.RequestError), repr(e)
                    out.append("requests:" + type(e).__name__)
    else:  # fetch, one at a time (-c 1); a large body goes as --data-binary @FILE
        jobs = [(m, p, b, 0.0) for m, p, b in steps]
        flags = ["-c", "1", "-L", *(["-x", proxy] if proxy else [])]
        if any(b is not None and len(b) > 10_000 for _, _, b, _ in jobs):
            data = tmp / "body.bin"
            data.write_bytes(H1_BIG)
            jobs = [(m, p, None, 0.0) for m, p, _, _ in jobs]
            flags += ["--data-binary", f"@{data}"]
        recs = fetch_jsonl(tmp, origin, jobs, *flags)
        out = [r["error"] if r["error"] else (r["status"], None) for r in recs]
    return out


H1_DROPS = ["head", "part", "interim", "partial", "redirect"]


@pytest.mark.parametrize(
    "front", ["AsyncClient", "Client", "httpx", "httpx-async", "requests", "fetch"]
)
@pytest.mark.parametrize("method", ["POST", "PATCH"])
@pytest.mark.parametrize("drop", H1_DROPS)
def test_http11_a_post_the_server_dropped_midway_on_a_reused_connection_is_sent_once(
    front: str, method: str, drop: str, h1: Callable[..., H1Server], tmp_path: Path
) -> None:
    """docs/http.md "At most once": on a reused keep-alive connection, "A POST,
    a PATCH, or any other method, once a byte of it went out, is never sent
    again unasked ... the caller gets the error (connection_reset)" - here the
    server read the head only, or a part of a large body, or the whole and
    sent a 100 Continue, or a part of an answer, or it was the POST a 307
    redirected (and its body re-sent: docs/fetch.md "307/308 keep both")."""
    srv = h1(drop)
    steps = _h1_steps(method, drop)
    results = h1_front(front, srv, steps, tmp_path)
    target = "/b" if drop == "redirect" else "/x"
    sent = srv.count(target)
    assert is_ok(results[0], 200, b"ok"), f"the warm-up: {results[0]}"
    assert sent == 1, f"{front} {method} dropped at {drop}: {target} sent {sent} times"
    if drop == "redirect":
        assert srv.count("/a") == 1
    assert not isinstance(results[1], tuple) or results[1][0] != 200, (
        f"{front} {method} dropped at {drop}: a success out of a dropped exchange: {results[1]}"
    )
    assert is_error(results[1], "connection_reset"), (
        f"{front} {method} dropped at {drop}: docs say connection_reset; got {results[1]}"
    )


def _stock_or_surge_session(adapter: Any) -> requests.Session:
    session = requests.Session()
    session.mount("http://", adapter)
    return session


RETRY_CONFIGS: dict[str, Callable[[], Any]] = {
    "int-3": lambda: 3,
    "Retry-total-3": lambda: urllib3.Retry(total=3),
    "Retry-read-0": lambda: urllib3.Retry(total=3, read=0),
    "Retry-any-method": lambda: urllib3.Retry(total=3, allowed_methods=None),
}


@pytest.mark.parametrize("config", sorted(RETRY_CONFIGS))
@pytest.mark.parametrize("drop", ["head", "interim"])
def test_requests_adapter_max_retries_resends_a_post_as_httpadapter_does(
    config: str, drop: str, h1: Callable[..., H1Server]
) -> None:
    """docs/dropins.md: the adapter "takes max_retries as HTTPAdapter does";
    "A POST or PATCH whose answer was lost is never sent again unasked, as in
    httpx and requests".  The reference: requests' own HTTPAdapter on the same
    server, with the same max_retries; the server counts both."""
    counts = {}
    for name, make in (
        ("stock", lambda: requests.adapters.HTTPAdapter(max_retries=RETRY_CONFIGS[config]())),
        ("surge", lambda: surge.requests.Adapter(max_retries=RETRY_CONFIGS[config]())),
    ):
        srv = h1(drop)
        with _stock_or_surge_session(make()) as session:
            assert session.get(srv.url("/warm"), timeout=TIMEOUT).status_code == 200
            with contextlib.suppress(requests.RequestException):
                session.post(srv.url("/x"), data=b"data=1", timeout=TIMEOUT)
        counts[name] = srv.count("/x")
    assert counts["surge"] == counts["stock"], (
        f"max_retries={config}, dropped at {drop}: POST sent {counts} (stock HTTPAdapter is the reference)"
    )


@pytest.mark.parametrize("front", ["requests", "httpx"])
def test_drop_in_streamed_post_response_cut_midway_raises_and_sends_once(
    front: str, h1: Callable[..., H1Server]
) -> None:
    """A streamed response (requests' stream=True + iter_content, httpx's
    stream + iter_bytes) to a POST on a reused connection, cut after 10 of its
    100 bytes: the library's own exception, while iterating, and one POST."""
    srv = h1("partial")
    got = b""
    raised: Any = None
    if front == "requests":
        with _stock_or_surge_session(surge.requests.Adapter()) as session:
            assert session.get(srv.url("/warm"), timeout=TIMEOUT).status_code == 200
            try:
                r = session.post(srv.url("/x"), data=b"d=1", timeout=TIMEOUT, stream=True)
                for chunk in r.iter_content(4):
                    got += chunk
            except requests.RequestException as e:
                raised = e
    else:
        with httpx.Client(transport=surge.httpx.HTTPTransport(), timeout=TIMEOUT) as c:
            assert c.get(srv.url("/warm")).status_code == 200
            try:
                with c.stream("POST", srv.url("/x"), content=b"d=1") as r:
                    for chunk in r.iter_bytes():
                        got += chunk
            except httpx.HTTPError as e:
                raised = e
    assert raised is not None and not isinstance(raised, surge.http.RequestError), (
        f"{front}: a cut stream raises the library's own error: {raised!r} after {got!r}"
    )
    assert got == b"p" * len(got) and len(got) <= 10, got
    assert srv.count("/x") == 1


@pytest.mark.parametrize("front", ["AsyncClient", "Client"])
@pytest.mark.parametrize("body", ["file", "bytesio"])
@pytest.mark.parametrize("code", [307, 308])
def test_a_307_or_308_resends_a_binary_file_body_whole(
    front: str, body: str, code: int, tls: Tls, tmp_path: Path
) -> None:
    """docs/http.md: "a 307/308 re-sends a file" (a binary file is a streamed
    body): the hop carries the whole body again, from its first byte."""
    path = tmp_path / "upload.bin"
    path.write_bytes(UPLOAD)

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/a":
            conn.respond(req, code, b"", headers=(("location", "/b"),))
        else:
            conn.respond(req, 200, str(len(req.body)).encode())

    def content() -> Any:
        return path.open("rb") if body == "file" else io.BytesIO(UPLOAD)

    with h2(tls, handler) as srv:
        f = content()
        try:
            if front == "AsyncClient":

                async def main() -> Outcome:
                    async with surge.AsyncClient(cafile=tls.cafile, max_time=10) as client:
                        try:
                            r = await client.post(srv.url("/a"), content=f, follow_redirects=True)
                        except surge.http.RequestError as e:
                            return e.error_class
                        return r.status_code, r.content

                outcome = asyncio.run(asyncio.wait_for(main(), 60))
            else:
                with surge.Client(cafile=tls.cafile, max_time=10) as client:
                    try:
                        r = client.post(srv.url("/a"), content=f, follow_redirects=True)
                        outcome = (r.status_code, r.content)
                    except surge.http.RequestError as e:
                        outcome = e.error_class
        except Exception as e:  # StreamConsumed, or what the client names it
            outcome = type(e).__name__
        finally:
            f.close()
        bodies = [b == UPLOAD for _, _, _, p, b in srv.requests]
    assert outcome == (200, str(len(UPLOAD)).encode()), f"{front} {body} {code}: {outcome}"
    assert bodies == [True, True], f"{front} {body} {code}: whole bodies at /a, /b: {bodies}"


def complete_then(after: str, trailers: bool) -> Callable[[Conn, Request], None]:
    """Connection 0: the whole response (its end on DATA, or on trailers),
    then, in the same write, ``after``; later connections answer otherwise."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0:
            conn.respond(req, 200, b"again")
            return
        frames = [conn.headers(req.sid, [(":status", "200"), ("content-length", "4")])]
        if trailers:
            frames += [
                conn.data(req.sid, b"done"),
                conn.headers(req.sid, [("x-t", "1")], end_stream=True),
            ]
        else:
            frames.append(conn.data(req.sid, b"done", end_stream=True))
        if after == "goaway0":
            frames.append(conn.goaway(0, NO_ERROR))
        elif after == "goaway0-error":
            frames.append(conn.goaway(0, INTERNAL_ERROR))
        elif after == "rst-refused":
            frames.append(conn.rst(req.sid, REFUSED_STREAM))
        elif after == "rst-internal":
            frames.append(conn.rst(req.sid, INTERNAL_ERROR))
        conn.frames(*frames)
        if after.startswith("goaway") or after == "drop":
            time.sleep(0.1)
            conn.shutdown()

    return handler


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
@pytest.mark.parametrize("trailers", [False, True], ids=["data-end", "trailers-end"])
@pytest.mark.parametrize(
    "after", ["goaway0", "goaway0-error", "rst-refused", "rst-internal", "drop"]
)
def test_a_response_complete_before_the_cut_is_kept_and_the_post_sent_once(
    front: str, trailers: bool, after: str, tls: Tls
) -> None:
    """The response ended (END_STREAM) before a GOAWAY(0), a reset or the
    connection's end: the stream is closed (RFC 9113 5.1), its answer whole.
    docs/http.md: a begun response proves the request processed "whatever a
    later GOAWAY or REFUSED_STREAM claims"; a complete one is the answer - the
    caller gets it, and the POST is never sent again."""
    with h2(tls, complete_then(after, trailers)) as srv:
        results = jobs_on(front, base(srv), [("POST", "/c", b"once", 0)], tls)
        sent = srv.count("/c")
    assert sent == 1, f"{front} {after} after a complete response: POST sent {sent} times"
    assert is_ok(results[0], 200, b"done"), (
        f"{front} {after} after a complete response ({'trailers' if trailers else 'DATA'} ended it): {results[0]}"
    )


# --- 10. more at-most-once edges -------------------------------------------------------


def _interim_then_refused(conn: Conn, req: Request) -> None:
    if conn.index > 0 or conn.server.count(req.path) > 1:
        ok(conn, req)
        return
    conn.frames(conn.headers(req.sid, [(":status", "100")]), conn.rst(req.sid, REFUSED_STREAM))


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
def test_an_interim_response_then_refused_stream_is_not_sent_again(front: str, tls: Tls) -> None:
    """docs/http.md: "A stream whose response had begun (a status, interim or
    final, or DATA) was processed, whatever a later ... REFUSED_STREAM claims:
    it ends with connection_reset"."""
    with h2(tls, _interim_then_refused) as srv:
        results = jobs_on(front, base(srv), [("POST", "/i", b"once", 0)], tls)
        sent = srv.count("/i")
    assert sent == 1, f"{front}: a POST whose 100 came, then REFUSED_STREAM, sent {sent} times"
    assert is_error(results[0], "connection_reset"), f"{front}: {results[0]}"


def graceful_goaway_mid_upload() -> Any:
    """Windows are the server's to open: at 60,000 bytes of the first upload,
    GOAWAY(its own id, NO_ERROR) - the stream is at the last id, so it is to
    finish - then every window opened as bytes come."""

    def on_data(conn: Conn, req: Request) -> None:
        if conn.index == 0 and not conn.sent_goaway and len(req.body) >= 60_000:
            conn.frames(conn.goaway(req.sid, NO_ERROR))
        if conn.sent_goaway or conn.index > 0:
            give_window_back(conn, req)

    def handler(conn: Conn, req: Request) -> None:
        conn.respond(req, 200, str(len(req.body)).encode())

    return handler, on_data


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
def test_a_graceful_goaway_at_the_uploading_stream_lets_its_upload_finish(
    front: str, tls: Tls
) -> None:
    """docs/http.md: "A GOAWAY ends the connection gracefully: streams up to its
    last stream id finish".  A stream at the last id whose body is still going
    out (it waits for window) finishes sending it on that connection, and is
    answered: not cut off, not a write_timeout, not sent again."""
    handler, on_data = graceful_goaway_mid_upload()
    options: dict[str, Any] = {}
    body: bytes | None = UPLOAD
    if front == "fetch":
        data = FETCH_TMP[-1] / "body.bin"
        data.write_bytes(UPLOAD)
        body, options = None, {"flags": ["--data-binary", f"@{data}"]}
    with h2(tls, handler, on_data=on_data, auto_window=False) as srv:
        results = jobs_on(front, base(srv), [("POST", "/u", body, 0)], tls, **options)
        sent = srv.count("/u")
        got = [(i, len(b)) for i, _, _, p, b in srv.requests if p == "/u"]
    assert sent == 1, f"{front}: the upload at the GOAWAY's last id was sent {sent} times: {got}"
    assert is_ok(results[0], 200, str(len(UPLOAD)).encode()), (
        f"{front}: {results[0]}; the server got {got}"
    )


def test_an_idle_connection_whose_pings_go_unanswered_carries_no_post(
    tls: Tls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/http.md "Idle connections": idle 10 s or more, the connection is
    asked with a PING; "without an answer within 2 s it is closed and the
    request - not yet sent, so a POST too - goes on a new connection".  The
    server here is alive but ignores PINGs on its first connection (and would
    process anything sent on it): the POST must not be sent there at all."""
    original = Conn.handle

    def handle(self: Conn, frame: Any, pending: Any, block: bytes) -> None:
        from hyperframe.frame import PingFrame

        if isinstance(frame, PingFrame) and "ACK" not in frame.flags and self.index == 0:
            return  # no answer
        original(self, frame, pending, block)

    monkeypatch.setattr(Conn, "handle", handle)

    async def main(url: str) -> Any:
        async with surge.AsyncClient(cafile=tls.cafile, max_time=10) as client:
            assert (await client.get(url + "/warm")).status_code == 200
            await asyncio.sleep(10.5)
            r = await client.post(url + "/p", content=b"once")
            return r.status_code, r.content

    with h2(tls, ok) as srv:
        outcome = asyncio.run(asyncio.wait_for(main(base(srv)), 60))
        where = [i for i, _, _, p in srv.heads if p == "/p"]
    assert outcome == (200, b"hello /p"), outcome
    assert where == [1], f"the POST went on connections {where}: want only the new one (1)"


# --- 11. the class at once: a seeded mix of fates on one connection ------------------


class Fates:
    """N POSTs on connection 0, each given a fate by a seeded plan: answered,
    refused (REFUSED_STREAM: not processed), reset (INTERNAL_ERROR: processed),
    or held until a GOAWAY whose last id falls among the held - those at or
    below it then answered, those above it left unprocessed.  Later
    connections answer all.  ``processed[path]`` counts the times the server
    acted on a path; at most once is: every count <= 1."""

    def __init__(self, seed: int, n: int) -> None:
        import random

        rnd = random.Random(seed)
        self.n = n
        self.plan = {
            f"/m{k}": rnd.choice(["ok", "refused", "reset", "held", "held"]) for k in range(n)
        }
        self.processed: dict[str, int] = dict.fromkeys(self.plan, 0)
        self.lock = threading.Lock()
        self.last: int | None = None
        self.held: list[Request] = []
        self.started = False

    def act(self, path: str) -> None:
        with self.lock:
            self.processed[path] += 1

    def handler(self, conn: Conn, req: Request) -> None:
        if conn.index > 0 or conn.server.count(req.path) > 1:
            if conn.index == 0 and self.last is not None and req.sid > self.last:
                return  # opened after the GOAWAY: ignored, unprocessed
            self.act(req.path)
            ok(conn, req)
            return
        fate = self.plan[req.path]
        with self.lock:
            if not self.started:
                self.started = True
                threading.Thread(target=self.shutdown, args=(conn,), daemon=True).start()
        if fate == "ok":
            self.act(req.path)
            ok(conn, req)
        elif fate == "refused":
            conn.frames(conn.rst(req.sid, REFUSED_STREAM))
        elif fate == "reset":
            self.act(req.path)
            conn.frames(conn.rst(req.sid, INTERNAL_ERROR))
        else:
            with self.lock:
                self.held.append(req)

    def shutdown(self, conn: Conn) -> None:
        for _ in range(100):  # every path's first HEADERS in (up to 5 s)
            with conn.server.lock:
                seen = {p for i, _, _, p in conn.server.heads if i == 0}
            if len(seen) >= self.n:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        with self.lock:
            held = sorted(self.held, key=lambda r: r.sid)
        self.last = held[len(held) // 2].sid if held else max(conn.streams)
        conn.frames(conn.goaway(self.last, NO_ERROR))
        for req in held:
            if req.sid <= self.last:
                self.act(req.path)
                ok(conn, req)
        time.sleep(0.2)
        conn.shutdown()


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_seeded_mix_of_fates_on_one_connection_keeps_every_post_at_most_once(
    front: str, seed: int, tls: Tls
) -> None:
    """docs/http.md's rules together: REFUSED_STREAM and streams above a
    GOAWAY's last id are sent again (once); a reset stream is an error and not
    sent again; streams at or below the last id finish.  Each POST is acted on
    at most once, and each one the server answered is its caller's answer."""
    fates = Fates(seed, 16)
    with h2(tls, fates.handler) as srv:
        jobs = [("POST", f"/m{k}", b"k%d" % k, 0.05 if k else 0) for k in range(16)]
        results = jobs_on(front, base(srv), jobs, tls)
    twice = {p: c for p, c in fates.processed.items() if c > 1}
    assert not twice, (
        f"{front} seed {seed}: POSTs the server acted on more than once: {twice}; plan {fates.plan}"
    )
    for k, r in enumerate(results):
        path = f"/m{k}"
        fate = fates.plan[path]
        if fate == "reset":
            assert is_error(r, "connection_reset"), f"{front} seed {seed} {path} ({fate}): {r}"
        else:
            assert fates.processed[path] == 1 and is_ok(r, 200, f"hello {path}".encode()), (
                f"{front} seed {seed} {path} ({fate}): {r}; acted on {fates.processed[path]} times"
            )


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx", "requests", "fetch"])
@pytest.mark.parametrize("drop", ["head", "interim", "partial", "redirect"])
def test_http11_through_a_forward_proxy_a_dropped_post_is_sent_once(
    front: str, drop: str, h1: Callable[..., H1Server], tmp_path: Path
) -> None:
    """The same rule on a reused connection to a forward proxy (an http://
    origin through ``proxy=`` / ``-x``): the proxy read the POST and went away
    - it may have passed it on - so it is never sent again."""
    srv = h1(drop)
    results = h1_front(front, srv, _h1_steps("POST", drop), tmp_path, proxy=srv.url(""))
    target = "http://origin.test" + ("/b" if drop == "redirect" else "/x")
    sent = srv.count(target)
    assert is_ok(results[0], 200, b"ok"), (
        f"{front}: the warm-up through the proxy: {results[0]}; heads {srv.heads}"
    )
    assert sent == 1, f"{front} via proxy, dropped at {drop}: sent {sent} times; heads {srv.heads}"
    assert is_error(results[1], "connection_reset"), (
        f"{front} via proxy, dropped at {drop}: {results[1]}"
    )


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx", "httpx-async", "requests"])
def test_http11_a_post_after_the_server_closed_the_idle_connection_is_answered(
    front: str,
) -> None:
    """docs/http.md: a request that met a reused keep-alive connection the
    server had closed is sent once more "if no byte of it had been written";
    the pool checks a connection on checkout (DESIGN: "a health check on
    checkout").  The server closed it well before (its FIN is in): the POST
    goes on a new connection, once, and is answered - not an error for a
    request the server never saw."""
    srv = H1Server("idle-close")
    try:
        steps: list[tuple[str, str, bytes | None]] = [
            ("GET", "/warm", None),
            ("POST", "/x", b"d=1"),
        ]
        results = _h1_two_with_pause(front, srv, steps)  # the server's FIN comes meanwhile
        assert is_ok(results[0], 200, b"ok"), results
    finally:
        srv.close()
    assert results[1] == (200, b"ok"), f"{front}: the POST after an idle close: {results[1]}"
    assert srv.count("/x") == 1 and srv.conns >= 2


def _h1_two_with_pause(
    front: str, srv: H1Server, steps: list[tuple[str, str, bytes | None]]
) -> list[Outcome]:
    """``steps`` on one client, 0.6 s apart."""
    out: list[Outcome] = []
    if front in ("AsyncClient", "httpx-async"):

        async def main() -> None:
            client: Any
            if front == "AsyncClient":
                client = surge.AsyncClient(max_time=TIMEOUT)
            else:
                client = httpx.AsyncClient(
                    transport=surge.httpx.AsyncHTTPTransport(), timeout=TIMEOUT
                )
            async with client:
                for i, (method, path, body) in enumerate(steps):
                    await asyncio.sleep(0.6 if i else 0)
                    try:
                        r = await client.request(method, srv.url(path), content=body)
                        out.append((r.status_code, r.content))
                    except (surge.http.RequestError, httpx.HTTPError) as e:
                        out.append(getattr(e, "error_class", None) or type(e).__name__)

        asyncio.run(asyncio.wait_for(main(), 60))
        return out
    sync: Any
    if front == "requests":
        sync = requests.Session()
        sync.trust_env = False
        sync.mount("http://", surge.requests.Adapter())
    elif front == "Client":
        sync = surge.Client(max_time=TIMEOUT)
    else:
        sync = httpx.Client(transport=surge.httpx.HTTPTransport(), timeout=TIMEOUT)
    with sync:
        for i, (method, path, body) in enumerate(steps):
            time.sleep(0.6 if i else 0)
            try:
                if front == "requests":
                    r = sync.request(method, srv.url(path), data=body, timeout=TIMEOUT)
                else:
                    r = sync.request(method, srv.url(path), content=body)
                out.append((r.status_code, r.content))
            except (surge.http.RequestError, httpx.HTTPError, requests.RequestException) as e:
                out.append(getattr(e, "error_class", None) or type(e).__name__)
    return out


# --- 12. requests waiting for a stream slot when their connection fails ----------------


def first_fails(how: str) -> Callable[[Conn, Request], None]:
    """SETTINGS_MAX_CONCURRENT_STREAMS 1: connection 0's one stream is met by
    ``how``; requests queued behind it were never sent there."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0 or req.sid > 1:
            time.sleep(0.05)
            ok(conn, req)
            return
        time.sleep(0.3)  # the others queue meanwhile
        graceful = how == "goaway-last-then-close"
        end_connection(conn, how, req.sid, answer=req if graceful else None)

    return handler


FIRST_FAILS = {
    "breaking-frame": "protocol_error",
    "goaway-protocol-error": "connection_reset",
    "plain-close": "connection_reset",
    "goaway-last-then-close": None,  # its one stream answered after the GOAWAY
}


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx-async", "fetch"])
@pytest.mark.parametrize("how", sorted(FIRST_FAILS))
def test_posts_queued_for_a_slot_on_a_failed_connection_go_on_a_new_one(
    front: str, how: str, tls: Tls
) -> None:
    """docs/http.md: a connection that is lost or breaks the protocol "fails
    each of its streams"; requests waiting for a stream slot had none: they
    were never sent ("A request whose stream slot was given but that never
    went out ... is not a resend: it goes when a slot is free").  They go on a
    new connection and are answered; the one stream sent fails as the docs
    say, and nothing is sent twice."""
    settings = {SettingsFrame.MAX_CONCURRENT_STREAMS: 1}
    options: dict[str, Any] = (
        {"flags": ["--per-host", "1"]} if front == "fetch" else {"per_host": 1}
    )
    if front == "httpx-async":
        options = {}
    with h2(tls, first_fails(how), settings=settings) as srv:
        jobs = [("POST", f"/w{n}", b"w%d" % n, 0.1 if n else 0) for n in range(3)]
        results = jobs_on(front, base(srv), jobs, tls, **options)
        counts = [srv.count(f"/w{n}") for n in range(3)]
        first = [p for i, sid, _, p in srv.heads if i == 0 and sid == 1]
    assert first == ["/w0"], f"the test needs /w0 first on connection 0: {srv.heads}"
    assert counts == [1, 1, 1], f"{front} {how}: sent {counts}"
    want = FIRST_FAILS[how]
    if want is None:
        assert is_ok(results[0], 200, b"hello /w0"), results
    else:
        assert is_error(results[0], want), f"{front} {how}: the one sent: {results[0]}"
    for n in (1, 2):
        assert is_ok(results[n], 200, f"hello /w{n}".encode()), (
            f"{front} {how}: a POST that waited for a slot, never sent: {results[n]}"
        )


# --- 13. an idempotent PUT dropped on a reused HTTP/1.1 connection: again only whole ----


def _put_body(kind: str) -> Any:
    if kind == "bytes":
        return H1_BIG
    if kind == "bytesio":
        return io.BytesIO(H1_BIG)
    return (H1_BIG[i : i + 100_000] for i in range(0, len(H1_BIG), 100_000))


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx", "requests"])
@pytest.mark.parametrize("kind", ["bytes", "bytesio", "iterator"])
def test_http11_a_put_sent_again_carries_its_whole_body_or_is_not_sent_again(
    front: str, kind: str, tmp_path: Path
) -> None:
    """docs/http.md: an idempotent request (PUT) that met a reused connection
    the server closed "is sent once more".  A body that cannot be read again
    (an iterator) cannot be: a PUT with an empty or partial body would
    overwrite the resource with it.  Every PUT the server gets has the body."""
    srv = H1Server("read")
    try:
        steps: list[tuple[str, str, Any]] = [("GET", "/warm", None), ("PUT", "/x", _put_body(kind))]
        results = h1_front(front, srv, steps, tmp_path)
    finally:
        srv.close()
    puts = [(len(b), b == H1_BIG) for p, b in srv.bodies if p == "/x"]
    assert all(good for _, good in puts), f"{front} {kind}: a PUT with another body: {puts}"
    assert 1 <= len(puts) <= 2, puts
    if kind != "iterator":
        assert results[1] == (200, b"ok") and len(puts) == 2, (
            f"{front} {kind}: a PUT is sent once more, whole: {results[1]}, the server got {puts}"
        )


@pytest.mark.parametrize(
    "retry",
    [
        {"total": 2, "status_forcelist": [503]},
        {"total": 2, "status_forcelist": [503], "allowed_methods": None},
        {"total": 2, "status_forcelist": [503], "allowed_methods": None, "raise_on_status": False},
        {
            "total": 2,
            "status_forcelist": [503],
            "allowed_methods": ["POST"],
            "respect_retry_after_header": False,
        },
    ],
    ids=["post-not-allowed", "any-method", "any-method-no-raise", "post-allowed"],
)
def test_requests_adapter_status_retries_of_a_post_match_httpadapter(
    retry: dict[str, Any], h1: Callable[..., H1Server]
) -> None:
    """docs/dropins.md: max_retries as HTTPAdapter takes it - urllib3's Retry
    with status_forcelist, allowed_methods, raise_on_status and its
    RetryError.  A POST answered 503: as many sends, and the same outcome,
    as requests' own adapter."""
    seen = {}
    for name, adapter in (
        ("stock", requests.adapters.HTTPAdapter),
        ("surge", surge.requests.Adapter),
    ):
        srv = h1("503")
        with _stock_or_surge_session(
            adapter(max_retries=urllib3.Retry(backoff_factor=0, **retry))
        ) as session:
            try:
                r = session.post(srv.url("/x"), data=b"d=1", timeout=TIMEOUT)
                outcome: Any = r.status_code
            except requests.RequestException as e:
                outcome = type(e).__name__
        seen[name] = (srv.count("/x"), outcome)
    assert seen["surge"] == seen["stock"], f"Retry({retry}): (sends, outcome) {seen}"


def test_a_slow_streamed_body_goes_on_beside_a_malformed_response(tls: Tls) -> None:
    """A body streamed in pieces (the reader slow) on the connection where
    another thread's response is malformed (trailers with :status): the
    stream goes on to its end; the malformed one alone fails."""
    piece = b"z" * 16_384

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/bad":
            conn.frames(*MALFORMED["trailers-with-status"](conn, req.sid))
            return
        conn.frames(
            conn.headers(req.sid, [(":status", "200"), ("content-length", str(40 * len(piece)))])
        )
        for k in range(40):
            conn.send_body(req.sid, piece, end_stream=k == 39)
            time.sleep(0.01)

    with h2(tls, handler) as srv, surge.Client(cafile=tls.cafile, max_time=10) as client:

        def stream() -> int:
            n = 0
            with client.stream("GET", srv.url("/big")) as r:
                for chunk in r.iter_bytes():
                    n += len(chunk)
                    time.sleep(0.005)
            return n

        def bad() -> Any:
            time.sleep(0.1)
            try:
                return client.get(srv.url("/bad")).status_code
            except surge.http.RequestError as e:
                return e.error_class

        with ThreadPoolExecutor(2) as pool:
            big, malformed = pool.submit(stream), pool.submit(bad)
            results = (big.result(timeout=60), malformed.result(timeout=60))
        conns = len(srv.conns)
    assert results == (40 * len(piece), "protocol_error"), results
    assert conns == 1, conns


def test_a_goaway_that_raises_its_last_id_does_not_take_back_its_promise(tls: Tls) -> None:
    """RFC 9113 6.8: a GOAWAY's last id "MUST NOT increase"; docs/http.md:
    streams above it "were not processed by the server (its promise)".
    GOAWAY(0), then GOAWAY(2^31-1), then the connection's end: the POST was
    promised unprocessed, and goes again, once, on another connection."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0:
            ok(conn, req)
            return
        conn.frames(conn.goaway(0, NO_ERROR), conn.goaway(MAX_ID, NO_ERROR))
        time.sleep(0.1)
        conn.shutdown()

    with h2(tls, handler) as srv:
        results = jobs_on("AsyncClient", base(srv), [("POST", "/g", b"g", 0)], tls)
        sent = srv.count("/g")
    assert sent <= 2, f"POST sent {sent} times"
    assert results == [(200, b"hello /g")] and sent == 2, (
        f"the first GOAWAY's promise: sent again once; got {results}, sent {sent}"
    )


def _hang(conn: Conn, req: Request) -> None:
    if req.path == "/hang":
        return  # never answered
    if req.path == "/big":
        conn.respond(req, 200, b"y" * 500_000)
        return
    ok(conn, req)


@pytest.mark.parametrize("front", ["AsyncClient", "Client"])
def test_a_post_in_flight_when_its_client_closes_is_not_sent_again(front: str, tls: Tls) -> None:
    """docs/http.md: "close() from any thread ends the requests in flight": a
    POST the server holds ends with an error, and nothing sends it again."""
    with h2(tls, _hang) as srv:
        if front == "Client":
            client = surge.Client(cafile=tls.cafile, max_time=10)
            with ThreadPoolExecutor(1) as pool:
                done = pool.submit(client.post, srv.url("/hang"), content=b"once")
                time.sleep(0.5)
                client.close()
                with pytest.raises(Exception) as caught:
                    done.result(timeout=10)
            error: Any = caught.value
        else:

            async def main() -> Any:
                aclient = surge.AsyncClient(cafile=tls.cafile, max_time=10)
                task = asyncio.ensure_future(aclient.post(srv.url("/hang"), content=b"once"))
                await asyncio.sleep(0.5)
                await aclient.aclose()
                try:
                    await asyncio.wait_for(task, 10)
                except BaseException as e:  # an error or a cancellation: not an answer
                    return e
                return "answered"

            error = asyncio.run(asyncio.wait_for(main(), 60))
        time.sleep(0.5)
        sent = srv.count("/hang")
    assert error != "answered", error
    assert sent == 1, f"{front}: a POST in flight at close() sent {sent} times"


@pytest.mark.parametrize("front", ["AsyncClient", "Client"])
def test_a_streamed_post_left_early_is_not_sent_again_and_the_connection_goes_on(
    front: str, tls: Tls
) -> None:
    """A streamed response to a POST, left after its first piece (the ``with``
    block ends, the body unread: its stream is closed): the POST is not sent
    again, and the next request goes on the same connection."""
    with h2(tls, _hang) as srv:
        if front == "Client":
            with surge.Client(cafile=tls.cafile, max_time=10) as client:
                with client.stream("POST", srv.url("/big"), content=b"once") as r:
                    next(iter(r.iter_bytes()))
                after = client.get(srv.url("/after")).status_code
        else:

            async def main() -> int:
                async with surge.AsyncClient(cafile=tls.cafile, max_time=10) as client:
                    async with client.stream("POST", srv.url("/big"), content=b"once") as r:
                        async for _ in r.aiter_bytes():
                            break
                    return (await client.get(srv.url("/after"))).status_code

            after = asyncio.run(asyncio.wait_for(main(), 60))
        time.sleep(0.3)
        sent = srv.count("/big")
        conns = len(srv.conns)
    assert (after, sent, conns) == (200, 1, 1), (after, sent, conns)


@pytest.mark.parametrize("front", ["AsyncClient", "Client", "httpx", "requests", "fetch"])
@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("drop", ["head", "read", "partial"])
def test_http11_the_first_request_on_a_new_connection_is_never_sent_again(
    front: str, method: str, drop: str, h1: Callable[..., H1Server], tmp_path: Path
) -> None:
    """docs/http.md: "Nor is the first request on any connection (a new one,
    or a CONNECT-ed tunnel's first)" sent again - not a GET either: the
    connection was not one gone stale."""
    srv = h1(drop, 0)
    body = b"d=1" if method == "POST" else None
    results = h1_front(front, srv, [(method, "/x", body)], tmp_path)
    sent = srv.count("/x")
    assert sent == 1, f"{front} {method}, dropped at {drop} on a new connection: sent {sent} times"
    assert is_error(results[0], "connection_reset"), f"{front} {method} {drop}: {results[0]}"


@pytest.mark.parametrize("drop", ["head", "part", "interim", "partial"])
def test_http11_fetch_retries_never_resend_a_post_dropped_midway(
    drop: str, h1: Callable[..., H1Server], tmp_path: Path
) -> None:
    """docs/fetch.md: under --retries a POST is "never [retried] after ... a
    reset once sent" - however much of it, or of its answer, went."""
    srv = h1(drop)
    steps = _h1_steps("POST", drop)
    jobs = [(m, p, None if b is not None and len(b) > 10_000 else b, 0.0) for m, p, b in steps]
    flags = ["-c", "1", "--retries", "2"]
    if drop in ("head", "part"):
        data = tmp_path / "body.bin"
        data.write_bytes(H1_BIG)
        flags += ["--data-binary", f"@{data}"]
    recs = fetch_jsonl(tmp_path, srv.url(""), jobs, *flags)
    r = recs[1]
    assert srv.count("/x") == 1, (
        f"--retries 2, dropped at {drop}: sent {srv.count('/x')} times: {r}"
    )
    assert (r["error"], r["attempts"]) == ("connection_reset", 1), r
