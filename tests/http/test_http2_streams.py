"""The work of a new HTTP/2 stream does not grow with the streams in flight
(STYLE.md: no hidden O(N) per request, httpcore #1035's lesson), and a
connection keeps no state for streams it is done with.

h2 counts the open streams by walking every stream it holds, on each new
one, and drops closed streams only as that walk meets them: surge's
``_H2Connection`` counts by size (exact only at the server's limit) and drops
each stream as the client lets go of it.  The scripted server of raw frames is
the hostile round's (tests/hostile/test_http2_round1.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import h2.connection
import pytest
from hyperframe.frame import SettingsFrame
from tests.hostile.test_http2_round1 import Conn, Request, h2server, ok

import surge
from surge.http import http2

IN_FLIGHT = 300


def record_connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ``_H2Connection`` (h2's state) made while the test runs."""
    made: list[Any] = []
    init = http2._H2Connection.__init__

    def recorded(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(http2._H2Connection, "__init__", recorded)
    return made


def held_until(n: int) -> tuple[Any, threading.Event]:
    """A handler that answers nothing (but ``/warm``) until ``n`` requests are
    in, then all."""
    go = threading.Event()
    count = [0]
    lock = threading.Lock()

    def handler(conn: Conn, req: Request) -> None:
        if req.path != "/warm":
            with lock:
                count[0] += 1
                if count[0] >= n:
                    go.set()
            go.wait(20)
        ok(conn, req)

    return handler, go


def test_a_new_stream_does_not_walk_the_streams_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    visits = [0]
    walk = h2.connection.H2Connection._open_streams

    def counted(self: Any, remainder: int) -> int:
        visits[0] += len(self.streams)
        return walk(self, remainder)

    monkeypatch.setattr(h2.connection.H2Connection, "_open_streams", counted)
    made = record_connections(monkeypatch)
    handler, go = held_until(IN_FLIGHT)

    async def main(base: str) -> list[Any]:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=30) as client:
            await client.get(base + "/warm")  # the server's SETTINGS known
            return await asyncio.gather(*(client.get(f"{base}/{n}") for n in range(IN_FLIGHT)))

    settings = {SettingsFrame.MAX_CONCURRENT_STREAMS: 1000}
    with h2server(handler, settings=settings) as srv:
        results = asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
        conns = len(srv.conns)
        most = srv.max_open
    assert go.is_set() and most >= IN_FLIGHT and conns == 1, (most, conns)
    assert [r.content for r in results] == [f"hello /{n}".encode() for n in range(IN_FLIGHT)]
    # h2's own walk: ~IN_FLIGHT^2 / 2 (45,000) stream visits for these requests
    assert visits[0] <= IN_FLIGHT, f"{visits[0]:,} streams walked for {IN_FLIGHT} new ones"
    assert made and all(not conn.streams for conn in made), (
        f"streams kept after their exchanges: {[len(c.streams) for c in made]}"
    )


def test_paths_stay_out_of_the_hpack_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's ``:path`` goes as a never-indexed literal: hpack's table
    holds the fields that repeat (it is searched entry by entry for each field
    encoded), not one path per request."""
    made = record_connections(monkeypatch)

    async def main(base: str) -> None:
        async with surge.AsyncClient(http2_prior_knowledge=True, max_time=10) as client:
            for n in range(40):
                await client.get(f"{base}/item/{n}?q={n}", headers={"x-repeat": "same"})

    with h2server(ok) as srv:
        asyncio.run(asyncio.wait_for(main(srv.url("").rstrip("/")), 60))
    (conn,) = made
    entries = list(conn.encoder.header_table.dynamic_entries)
    assert not [value for name, value in entries if name == b":path"], entries
    assert (b"x-repeat", b"same") in entries, "the fields that repeat are indexed"
    assert len(entries) < 10, entries
