"""Tracing requests made with a client of one's own: TraceRecorder.add_response
and add_error, against the simulated web, down to the page in a real browser."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.conftest import RESOLVE

import surge
from surge.http import AsyncClient, Client, RequestError
from surge.sim import SimInfo
from surge.testing.browser import Chromium
from surge.trace import TraceRecorder, write_html
from surge.trace.phases import PHASES


def phases_of(row: list[Any]) -> list[str]:
    """A data() row's phases, in order."""
    return [PHASES[p] for p in row[8][::2]]


def row_of(data: dict[str, Any], line: int) -> list[Any]:
    return next(r for r in data["rows"] if r[0] == line)


async def traced_requests(sim: SimInfo, recorder: TraceRecorder) -> None:
    async with AsyncClient(
        resolve=[RESOLVE], cafile=sim.cafile, max_time=1, follow_redirects=True
    ) as client:
        for host in ["delay-20.sim", "delay-20.sim", "redirect-2.sim", "reset.sim", "hang.sim"]:
            try:
                response = recorder.add_response(await client.get(sim.url(host, tls=True)))
                assert response.status == 200  # add_response gives the response back
            except RequestError as error:
                recorder.add_error(error)


async def test_a_clients_requests_are_rows_with_their_phases(sim: SimInfo) -> None:
    recorder = TraceRecorder(title="one client")
    await traced_requests(sim, recorder)
    data = recorder.data()
    assert data["requests"] == len(data["rows"]) == 5
    assert data["statuses"] == {"200": 3}
    assert data["errors"] == {"connection_reset": 1, "read_timeout": 1}
    # rows as the engine's: [line, url, status, error, detail, bytes, attempts, start, parts]
    first, again, redirected, reset, hang = (row_of(data, n) for n in range(1, 6))
    assert first[1] == sim.url("delay-20.sim", tls=True) and first[2:4] == [200, None]
    assert first[5] > 0 and first[6] == 1
    # a new TLS connection, then the same connection reused: no dns, connect, tls
    assert [p for p in phases_of(first) if p != "queued"] == [
        "dns", "connect", "tls", "send", "wait", "receive"
    ]  # fmt: skip
    assert [p for p in phases_of(again) if p != "queued"] == ["send", "wait", "receive"]
    wait_ms = sum(ms for p, ms in zip(again[8][::2], again[8][1::2], strict=True) if p == 6)
    # delay-20: the server's 20 ms are waiting time (the sim's timer runs on
    # uvloop's millisecond clock, cached per loop turn: it may fire up to ~1 ms early)
    assert wait_ms >= 18
    # three hops in one row: the redirects' own phases, each on a new connection
    assert phases_of(redirected).count("wait") == 3 and phases_of(redirected).count("tls") == 3
    # failures end in the phase they failed in
    assert reset[2:4] == [None, "connection_reset"] and reset[4]
    assert hang[3] == "read_timeout" and phases_of(hang)[-1] == "wait"
    assert "receive" not in phases_of(hang)
    # rows follow one another: each starts after the one before it ended
    ends = [r[7] + sum(r[8][1::2]) for r in (first, again, redirected, reset)]
    starts = [r[7] for r in (again, redirected, reset, hang)]
    assert all(s >= e - 0.05 for s, e in zip(starts, ends, strict=True))
    tls = next(p for p in data["phases"] if p["phase"] == "tls")
    assert tls["requests"] == 4  # first, the redirect's three hops as one row, reset, hang


def test_the_sync_client_and_overlapping_requests(sim: SimInfo) -> None:
    recorder = TraceRecorder()
    with Client(resolve=[RESOLVE], max_time=5) as client:
        recorder.add_response(client.get(sim.url("status-404.sim")))
        try:
            client.get("http://127.0.0.1:1/")
        except RequestError as error:
            recorder.add_error(error)

    async def together() -> None:
        async with AsyncClient(resolve=[RESOLVE]) as client:
            urls = [sim.url(f"a{n}.delay-100.sim") for n in range(4)]
            for response in await asyncio.gather(*map(client.get, urls)):
                recorder.add_response(response)

    asyncio.run(together())
    data = recorder.data()
    assert data["statuses"] == {"404": 1, "200": 4} and data["errors"] == {"connect_refused": 1}
    assert phases_of(row_of(data, 2))[-1] == "connect"  # refused: it ended connecting
    assert max(data["timeline"]["in_flight"]) > 2  # the gathered four overlapped


def test_the_page_of_a_clients_trace_draws(sim: SimInfo, tmp_path: Path, browser: Chromium) -> None:
    recorder = TraceRecorder(title="one client")
    asyncio.run(traced_requests(sim, recorder))
    write_html(recorder.data(), str(tmp_path / "client.html"))
    page = browser.load(
        tmp_path / "client.html",
        expression="""({
            rows: document.querySelectorAll('#waterfall .row').length,
            failed: document.querySelectorAll('#waterfall .row.failed').length,
            phases: document.querySelectorAll('#phase-table tr').length,
        })""",
    )
    assert page.errors == []
    assert page.value == {"rows": 5, "failed": 2, "phases": 1 + len(PHASES)}


async def test_a_response_and_the_engines_record_give_the_same_row(sim: SimInfo) -> None:
    """The engine's records and a client's responses go through one add(): the
    same request gives the same row, timings aside."""
    url = sim.url("redirect-1.sim", tls=True)
    by_engine, by_client = TraceRecorder(), TraceRecorder()
    options: dict[str, Any] = {"resolve": [RESOLVE], "cafile": sim.cafile}
    records = surge.fetch([url], follow_redirects=True, trace=by_engine, **options)
    assert [r["status"] async for r in records] == [200]
    async with AsyncClient(follow_redirects=True, **options) as client:
        by_client.add_response(await client.get(url))
    engine_row, client_row = by_engine.data()["rows"][0], by_client.data()["rows"][0]
    assert engine_row[:7] == client_row[:7]
    assert [p for p in phases_of(engine_row) if p != "queued"] == [
        p for p in phases_of(client_row) if p != "queued"
    ]
