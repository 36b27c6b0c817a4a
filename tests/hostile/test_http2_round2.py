"""Hostile round 2 of HTTP/2: what round 1's server found after its fixes.

The same scripted server of raw frames as round 1 (test_http2_round1's
``h2server``), breaking rules round 1 did not:

- a Content-Length that the stream's end contradicts when no DATA carries it
  (END_STREAM on the HEADERS, or on trailers), and DATA in a response that has
  no content (HEAD, 204, 304);
- 101 (Switching Protocols), which HTTP/2 does not have, before a final response;
- a response, or a reset, for a stream the client already reset;
- a graceful shutdown in two steps (GOAWAY 2^31-1, then the real one) on every
  connection, under 50 requests at once;
- a GOAWAY or REFUSED_STREAM that claims "not processed" for a stream whose
  response had begun: the response proves it was processed, so a POST must
  not go again (the at-most-once rule);
- the detail of a protocol error names what broke, not a bare stream id.

Each case is checked at the server (how often a request was sent) where that
is the claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest
from hyperframe.frame import WindowUpdateFrame
from tests.hostile.test_http2_round1 import (
    MAX_ID,
    NO_ERROR,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    Conn,
    Request,
    get,
    h2server,
    ok,
)

import surge
import surge.http


async def _attempt(
    url: str, method: str, content: bytes | None, **options: Any
) -> tuple[Any, surge.http.RequestError | None]:
    options.setdefault("http2_prior_knowledge", True)
    options.setdefault("max_time", 5)
    async with surge.AsyncClient(**options) as client:
        try:
            return await client.request(method, url, content=content), None
        except surge.http.RequestError as e:
            return None, e


def attempt(
    url: str, method: str = "GET", content: bytes | None = None, **options: Any
) -> tuple[Any, surge.http.RequestError | None]:
    """(response, None) or (None, the error) through AsyncClient."""
    return asyncio.run(asyncio.wait_for(_attempt(url, method, content, **options), 60))


# --- Content-Length where no DATA says it (RFC 9113 8.1.1) -------------------------


def test_content_length_with_end_stream_on_the_headers_is_malformed() -> None:
    """A 200 to a GET that says 5 bytes and ends on its HEADERS carries 0: curl fails it."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", "200"), ("content-length", "5")], end_stream=True)
        )

    with h2server(handler) as srv:
        _, error = attempt(srv.url("/"))
    assert error is not None and error.error_class == "protocol_error", error
    assert "content-length" in str(error).lower(), f"the detail names the field: {error}"


@pytest.mark.parametrize(("length", "body", "good"), [("10", b"abc", False), ("3", b"abc", True)])
def test_content_length_is_checked_when_trailers_end_the_stream(
    length: str, body: bytes, good: bool
) -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", "200"), ("content-length", length)]),
            conn.data(req.sid, body),
            conn.headers(req.sid, [("x-checksum", "abc")], end_stream=True),
        )

    with h2server(handler) as srv:
        response, error = attempt(srv.url("/"))
    if good:
        assert error is None and response.content == body, error
    else:
        assert error is not None and error.error_class == "protocol_error", error


def test_zero_content_length_ending_on_headers_is_fine() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", "200"), ("content-length", "0")], end_stream=True)
        )

    with h2server(handler) as srv:
        response, error = attempt(srv.url("/"))
    assert error is None and response.status_code == 200 and response.content == b"", error


@pytest.mark.parametrize(("method", "status"), [("HEAD", "200"), ("GET", "204"), ("GET", "304")])
def test_data_in_a_response_without_content_is_malformed(method: str, status: str) -> None:
    """RFC 9110 6.4.1: a response to HEAD, a 204 and a 304 have no content; DATA
    in one is not a body to keep (curl: an error)."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", status)]),
            conn.data(req.sid, b"smuggled", end_stream=True),
        )

    with h2server(handler) as srv:
        response, error = attempt(srv.url("/"), method)
    assert error is not None and error.error_class == "protocol_error", (
        f"{method} answered {status} with DATA: {response and response.content!r}"
    )


def test_data_in_a_204_fails_its_stream_only() -> None:
    """The malformed 204 is a stream error: the next request uses the same connection."""

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/204":
            conn.frames(
                conn.headers(req.sid, [(":status", "204")]),
                conn.data(req.sid, b"x", end_stream=True),
            )
        else:
            ok(conn, req)

    async def main(base: str) -> tuple[Any, Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=5) as client:
            try:
                await client.get(base + "/204")
                first: Any = None
            except surge.http.RequestError as e:
                first = e
            return first, await client.get(base + "/after")

    with h2server(handler) as srv:
        first, after = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        conns = len(srv.conns)
    assert first is not None and first.error_class == "protocol_error", first
    assert after.status_code == 200 and conns == 1, (after, conns)


@pytest.mark.parametrize("fields", [[], [("x-note", "plain")]], ids=["bare", "with-field"])
def test_status_101_before_a_final_response_is_malformed(fields: list[tuple[str, str]]) -> None:
    """RFC 9113 8.6: HTTP/2 removed 101; a 101 is not an interim response to skip."""

    def handler(conn: Conn, req: Request) -> None:
        conn.frames(
            conn.headers(req.sid, [(":status", "101"), *fields]),
            conn.headers(req.sid, [(":status", "200"), ("content-length", "2")]),
            conn.data(req.sid, b"ok", end_stream=True),
        )

    with h2server(handler) as srv:
        response, error = attempt(srv.url("/"))
    assert error is not None and error.error_class == "protocol_error", (
        f"a 101 over HTTP/2 was skipped: {response}"
    )


# --- frames for a stream the client reset ------------------------------------------


@pytest.mark.parametrize("late", ["headers", "headers+data", "rst"])
def test_frames_after_the_clients_reset_leave_the_connection_up(late: str) -> None:
    """The client gives up on a stream (its timeout: RST_STREAM CANCEL); the
    server answers it anyway, after.  RFC 9113 5.4.2 / 6.4: frames on a stream
    the client reset are ignored - the connection, and the next request on it,
    carry on."""
    answered = threading.Event()

    def handler(conn: Conn, req: Request) -> None:
        if req.path != "/slow":
            ok(conn, req)
            return
        for _ in range(100):  # until the client's RST_STREAM came (up to 5 s)
            if any(sid == req.sid for sid, _ in conn.rsts_received):
                break
            time.sleep(0.05)
        pairs = [(":status", "200"), ("content-length", "4")]
        if late == "headers":
            conn.frames(conn.headers(req.sid, pairs))
        elif late == "headers+data":
            conn.frames(conn.headers(req.sid, pairs), conn.data(req.sid, b"late", end_stream=True))
        else:
            conn.frames(conn.rst(req.sid, PROTOCOL_ERROR))
        answered.set()

    async def main(base: str) -> tuple[Any, Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=5) as client:
            try:
                await client.get(base + "/slow", timeout=0.3)
                slow: Any = None
            except surge.http.RequestError as e:
                slow = e
            for _ in range(100):
                if answered.is_set():
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.1)  # the late frames read
            return slow, await client.get(base + "/next")

    with h2server(handler) as srv:
        slow, after = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        conns = len(srv.conns)
        rsts = [r for c in srv.conns for r in c.rsts_received]
    assert slow is not None, "the slow request timed out"
    assert answered.is_set() and rsts, "the server saw the client's RST_STREAM first"
    assert after.status_code == 200 and after.content == b"hello /next"
    assert conns == 1, f"late frames on a reset stream ended the connection: {conns} connections"


# --- GOAWAY in two steps -----------------------------------------------------------


@pytest.mark.parametrize("last", ["highest", "first"])
def test_two_step_goaway_on_every_connection_loses_no_request(last: str) -> None:
    """RFC 9113 6.8's graceful shutdown on every connection: GOAWAY(2^31-1) at
    the first request, then, 0.1 s later, GOAWAY(the highest stream seen, or
    the first); the streams up to it are answered, the connection closed.  50 GETs at once: each
    one is answered - requests cut off unsent go on new connections, as many
    as it takes while each connection makes progress."""

    def on_headers(conn: Conn, req: Request) -> None:
        with conn.cv:
            first = not getattr(conn, "noticed", False)
            conn.noticed = True  # type: ignore[attr-defined]
        if not first:
            return

        def shutdown() -> None:
            conn.frames(conn.goaway(MAX_ID))
            time.sleep(0.1)
            cut = max(conn.streams) if last == "highest" else min(conn.streams)
            conn.last = cut  # type: ignore[attr-defined]
            conn.frames(conn.goaway(cut))
            for _ in range(40):  # the answers written (handlers below)
                if all(
                    r.sid > cut or getattr(r, "done", False) for r in list(conn.streams.values())
                ):
                    break
                time.sleep(0.05)
            time.sleep(0.1)
            conn.shutdown()

        threading.Thread(target=shutdown, daemon=True).start()

    def handler(conn: Conn, req: Request) -> None:
        for _ in range(40):
            if hasattr(conn, "last"):
                break
            time.sleep(0.01)
        if req.sid <= getattr(conn, "last", MAX_ID):
            ok(conn, req)
        req.done = True  # type: ignore[attr-defined]

    async def main(base: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=20) as client:
            return await asyncio.gather(
                *(client.get(f"{base}/{n}") for n in range(50)), return_exceptions=True
            )

    with h2server(handler, on_headers=on_headers) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 90))
        conns = len(srv.conns)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, f"{len(failed)} of 50 lost over {conns} connections: {failed[:3]}"
    assert [r.content for r in results] == [f"hello /{n}".encode() for n in range(50)]


# --- "not processed" claims that the response contradicts -----------------------------


def _head_then(after: str) -> Any:
    """The response's HEADERS (and maybe some DATA), then ``after``: a GOAWAY(0)
    or a REFUSED_STREAM, each claiming the stream was not processed."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0:
            ok(conn, req)
            return
        pairs = [(":status", "200"), ("content-length", "100")]
        frames = [conn.headers(req.sid, pairs)]
        if after.endswith("+data"):
            frames.append(conn.data(req.sid, b"x" * 10))
        if after.startswith("goaway"):
            frames.append(conn.goaway(0, NO_ERROR))
        else:
            frames.append(conn.rst(req.sid, REFUSED_STREAM))
        conn.frames(*frames)
        if after.startswith("goaway"):
            time.sleep(0.1)
            conn.shutdown()

    return handler


def _interim_then_goaway(conn: Conn, req: Request) -> None:
    if conn.index > 0:
        ok(conn, req)
        return
    conn.frames(
        conn.headers(req.sid, [(":status", "103"), ("link", "</a.css>; rel=preload")]),
        conn.goaway(0, NO_ERROR),
    )
    time.sleep(0.1)
    conn.shutdown()


@pytest.mark.parametrize("method", ["POST", "PATCH"])
@pytest.mark.parametrize("after", ["goaway", "goaway+data", "refused", "refused+data", "interim"])
def test_a_begun_response_proves_the_request_was_processed(method: str, after: str) -> None:
    """docs/http.md: a request is sent again only where the server said it did
    not process it.  A response that began (a status line, interim or final)
    says it did: a GOAWAY(0) or REFUSED_STREAM after it does not make the POST
    safe to send again (it would be sent twice)."""
    handler = _interim_then_goaway if after == "interim" else _head_then(after)
    with h2server(handler) as srv:
        response, error = attempt(srv.url("/p"), method, b"pay once")
        sent = srv.count("/p")
    assert sent == 1, f"{method} sent {sent} times after '{after}' followed a response head"
    assert error is not None and response is None, "an answer cut short is an error"
    assert not error.unprocessed, error


def test_goaway_zero_before_any_response_still_resends_the_post() -> None:
    """The other side of the rule: GOAWAY(0) with nothing of a response - the
    server's promise stands - and the POST goes again, once."""

    def handler(conn: Conn, req: Request) -> None:
        if conn.index > 0:
            ok(conn, req)
            return
        conn.frames(conn.goaway(0, NO_ERROR))
        time.sleep(0.1)
        conn.shutdown()

    with h2server(handler) as srv:
        response, error = attempt(srv.url("/p"), "POST", b"x")
        sent = srv.count("/p")
    assert error is None and response.content == b"hello /p", error
    assert sent == 2, sent


# --- details --------------------------------------------------------------------------


def test_data_before_headers_names_what_broke() -> None:
    def handler(conn: Conn, req: Request) -> None:
        conn.frames(conn.data(req.sid, b"early", end_stream=True))

    with h2server(handler) as srv:
        _, error = attempt(srv.url("/"))
    assert error is not None and error.error_class == "protocol_error", error
    detail = str(error)
    words = detail.split("HTTP/2:", 1)[-1].strip().split(" ", 1)[0].rstrip(".,;")
    assert not words.isdigit(), f"the detail is a bare stream id: {detail!r}"
    assert "data" in detail.lower(), f"the detail says DATA came first: {detail!r}"


def test_get_still_works_beside_the_round() -> None:
    """The harness itself: an ordinary exchange passes."""
    with h2server(ok) as srv:
        response, error, _ = get(srv.url("/x"))
    assert error is None and response.content == b"hello /x"


@pytest.mark.parametrize("late", ["headers+data", "data", "rst", "window"])
def test_late_frames_for_a_reset_stream_h2_has_forgotten(late: str) -> None:
    """The late answer comes after the client opened another stream (when h2
    lets go of the reset one): it is still a stream the client closed, not a
    new stream the server opens ("Max inbound streams is 0" ended the
    connection and every request on it)."""
    gap_seen = threading.Event()

    def on_headers(conn: Conn, req: Request) -> None:
        if req.path == "/gap":
            gap_seen.set()

    def handler(conn: Conn, req: Request) -> None:
        if req.path == "/slow":
            gap_seen.wait(5)
            frames = {
                "headers+data": [
                    conn.headers(req.sid, [(":status", "200"), ("content-length", "4")]),
                    conn.data(req.sid, b"late", end_stream=True),
                ],
                "data": [conn.data(req.sid, b"late", end_stream=True)],
                "rst": [conn.rst(req.sid, PROTOCOL_ERROR)],
                "window": [WindowUpdateFrame(req.sid, window_increment=1000)],
            }[late]
            conn.frames(*frames)
            return
        if req.path == "/gap":
            time.sleep(0.2)  # after the late answer
        ok(conn, req)

    async def main(base: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=5) as client:
            with contextlib.suppress(surge.http.RequestError):
                await client.get(base + "/slow", timeout=0.3)
            gap = await client.get(base + "/gap")
            return [gap, await client.get(base + "/next")]

    with h2server(handler, on_headers=on_headers) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        conns = len(srv.conns)
    assert [r.content for r in results] == [b"hello /gap", b"hello /next"]
    assert conns == 1, f"a late answer to a reset stream ended the connection: {conns}"


def test_late_data_on_reset_streams_gives_the_connection_window_back() -> None:
    """20 streams the client reset, each answered late with 1 MiB: 20 MiB, past
    the connection's 16 MiB window.  DATA on a closed stream still counts
    against the connection's window (RFC 9113 6.9): unless the client gives it
    back, the server can send nothing more, and the next request waits for
    ever."""
    size = 2**20

    def handler(conn: Conn, req: Request) -> None:
        if req.path.startswith("/slow"):
            for _ in range(100):  # until the client's RST_STREAM came
                if any(sid == req.sid for sid, _ in conn.rsts_received):
                    break
                time.sleep(0.05)
            with conn.cv:  # the stream's window as the client set it (reset or not)
                conn.stream_windows[req.sid] = max(conn.stream_windows.get(req.sid, 0), size)
            conn.frames(conn.headers(req.sid, [(":status", "200")]))
            conn.send_body(req.sid, b"z" * size)
            return
        ok(conn, req)

    async def main(base: str) -> Any:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=20) as client:

            async def slow(n: int) -> None:
                with contextlib.suppress(surge.http.RequestError):
                    await client.get(f"{base}/slow{n}", timeout=0.3)

            await asyncio.gather(*(slow(n) for n in range(20)))
            await asyncio.sleep(1.0)  # the late bodies come
            return await client.get(base + "/next", timeout=10)

    with h2server(handler, auto_window=False) as srv:
        after = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 90))
        conns = len(srv.conns)
    assert after.content == b"hello /next" and conns == 1, (after, conns)
