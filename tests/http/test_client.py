"""The HTTP client against real servers: every error class of the result-record
contract produced by a real server behaviour and classified right."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from surge.errors import ERROR_CLASSES, RequestError
from surge.http import AsyncClient
from surge.sim import SimInfo, behaviour

ClientFactory = Callable[..., AsyncClient]
ServerFactory = Callable[..., Any]


async def outcome(client: AsyncClient, url: str, **kwargs: object) -> tuple[int | None, str | None]:
    try:
        response = await client.get(url, **kwargs)  # type: ignore[arg-type]
    except RequestError as e:
        assert e.error_class in ERROR_CLASSES
        assert e.detail
        return e.status, e.error_class
    return response.status, None


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
@pytest.mark.parametrize(
    "host",
    [
        "status-200.sim",
        "status-404.sim",
        "status-500.sim",
        "gzip.sim",
        "chunked.sim",
        "gzip--chunked.sim",
        "redirect-3.sim",
        "redirect-loop.sim",
        "reset.sim",
        "close.sim",
        "garbage.sim",
        "hang.sim",
        "hang-body.sim",
        "delay-1500.sim",
        "slowbody-2000.sim",
        "big-2m.sim",
        "badcert.sim",
    ],
)
async def test_every_sim_behaviour_is_classified_as_the_sim_predicts(
    sim: SimInfo, client_for: ClientFactory, host: str, tls: bool
) -> None:
    async with client_for(max_time=1.0, body_cap=1_000_000, follow_redirects=True) as client:
        got = await outcome(client, sim.url(host, tls=tls))
    expected = behaviour(host).expected(1.0, max_redirects=10, max_body=1_000_000, tls=tls)
    assert got == expected


async def test_bodies_are_decoded_and_match_the_sim(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    async with client_for() as client:
        plain = await client.get(sim.url("big-5000.sim"))
        zipped = await client.get(sim.url("gzip--big-5000.sim"))
        chunked = await client.get(sim.url("chunked--gzip--big-5000.sim"))
    assert len(plain.body) == len(zipped.body) == len(chunked.body) == 5000
    assert zipped.header("content-encoding") == "gzip"
    assert zipped.bytes < 5000  # what crossed the wire was compressed


async def test_redirects_are_not_followed_unless_asked(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    async with client_for() as client:
        first = await client.get(sim.url("redirect-2.sim"))
        assert first.status in (301, 302) and first.header("location")
        followed = await client.get(sim.url("redirect-2.sim"), follow_redirects=True)
        assert followed.status == 200 and followed.redirects == 2
        assert "redirect-0" in followed.final_url and followed.url == followed.final_url
        assert followed.requested_url == sim.url("redirect-2.sim")
        assert len(followed.history) == 2 and all(h.status in (301, 302) for h in followed.history)
        assert followed.history[0].url == sim.url("redirect-2.sim") and first.history == []
    async with client_for(follow_redirects=True, max_redirects=1) as client:
        assert await outcome(client, sim.url("redirect-2.sim")) == (301, "too_many_redirects")


async def test_head_reads_no_body_and_leaves_the_connection_reusable(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    async with client_for(max_connections=1) as client:
        head = await client.head(sim.url("big-5000.sim"))
        assert head.status == 200 and head.body == b""
        again = await client.get(sim.url("big-5000.sim"))
        assert len(again.body) == 5000
        assert client.stats()["created"] == 1  # the same connection served both


async def test_timings_of_new_and_reused_connections(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    async with client_for() as client:
        first = (await client.get(sim.url("status-200.sim", tls=True))).timings.phases_ms()
        second = (await client.get(sim.url("status-200.sim", tls=True))).timings.phases_ms()
    assert all(first[k] is not None and first[k] >= 0 for k in first)
    assert second["dns_ms"] is None and second["connect_ms"] is None and second["tls_ms"] is None
    assert second["ttfb_ms"] is not None and second["body_ms"] is not None


async def test_dns_error_without_sending_a_query(client_for: ClientFactory) -> None:
    async with client_for() as client:
        assert await outcome(client, "http://no-such-host.invalid/") == (None, "dns_error")
        assert client.resolver.lookups == 0


async def test_connect_refused() -> None:
    with socket.socket() as s:  # a port that was free a moment ago, and is closed now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with AsyncClient() as client:
        assert await outcome(client, f"http://127.0.0.1:{port}/") == (None, "connect_refused")


async def test_connect_timeout_in_a_tls_handshake_that_never_answers(
    tiny_server: ServerFactory,
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # takes the ClientHello, answers nothing
        await asyncio.sleep(5)
        writer.close()

    async with tiny_server(silent) as port, AsyncClient(connect_timeout=0.3) as client:
        try:
            await client.get(f"https://127.0.0.1:{port}/")
        except RequestError as e:
            assert e.error_class == "connect_timeout"
            assert "TLS handshake" in e.detail
            assert e.timings.tcp_end is not None and e.timings.tls_end is None
        else:
            raise AssertionError("no error")


@pytest.mark.parametrize(
    "url",
    ["not a url", "ftp://example.com/", "http://", "http://exa mple.com/", "http://a..b/", "x:1"],
)
async def test_invalid_urls(url: str) -> None:
    async with AsyncClient() as client:
        assert await outcome(client, url) == (None, "invalid_url")


async def test_a_stale_keep_alive_connection_is_retried_once_on_a_fresh_one(
    tiny_server: ServerFactory,
) -> None:
    """The server answers the first request on each connection, then drops the
    connection when the next request arrives - what a server that timed out an
    idle keep-alive connection looks like to a client."""
    connections = 0

    async def one_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next request: hang up on it
        writer.transport.abort()

    async with tiny_server(one_per_connection) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        first = await client.get(url)
        second = await client.get(url)  # reuses, meets the drop, retries fresh
    assert first.status == second.status == 200
    # The transparent retry is no try of the caller's: ``attempts`` counts --retries.
    assert second.attempts == 1 and connections == 2


async def test_a_body_delimited_by_close_is_read_to_the_end(tiny_server: ServerFactory) -> None:
    async def http10(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"x" * 3000)
        await writer.drain()
        writer.close()

    async with tiny_server(http10) as port, AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
    assert response.status == 200 and response.body == b"x" * 3000


def answer_once(wire: bytes) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
    """A server handler: ``wire`` in answer to the first request, then the close."""

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(wire)
        await writer.drain()
        writer.close()

    return respond


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTP/1.1 200 OK\r\n\r\nhello",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nhello",
        b"HTTP/1.1 103 Early Hints\r\nContent-Length: 99\r\n\r\nHTTP/1.1 200 OK\r\n\r\nhello",
        # a transfer coding that changes nothing, framed by the close
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nhello",
    ],
)
async def test_a_body_that_ends_at_the_close_is_whole(
    tiny_server: ServerFactory, wire: bytes
) -> None:
    async with tiny_server(answer_once(wire)) as port, AsyncClient(decompress=False) as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
    assert (response.status, response.body) == (200, b"hello")


@pytest.mark.parametrize(
    "wire",
    [
        # RFC 9112 6.1: chunked, when there, is the last coding; a body coded
        # after it, or with a coding surge cannot undo, cannot be read - handed
        # over as it came it would be a wrong body with no error (curl refuses
        # all three too: exit 56, 56 and 61)
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
        b"Transfer-Encoding: identity\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: notchunked\r\n\r\nhello",
    ],
)
async def test_a_transfer_coding_that_cannot_be_undone_is_a_protocol_error(
    tiny_server: ServerFactory, wire: bytes
) -> None:
    async with tiny_server(answer_once(wire)) as port, AsyncClient(decompress=False) as client:
        with pytest.raises(RequestError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert (caught.value.error_class, caught.value.status) == ("protocol_error", 200)


async def test_a_connection_reused_after_an_interim_response_reads_the_next_one_whole(
    tiny_server: ServerFactory,
) -> None:
    """The connection keeps no state of one exchange into the next: after a 103
    and its final response, the next response on the same connection has its own
    status, head and body."""
    connections = 0
    answers = [
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nX-N: 1\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 201 Created\r\nX-N: 2\r\nContent-Length: 3\r\n\r\nbye",
    ]

    async def two(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for answer in answers:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
        await reader.read()

    async with tiny_server(two) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        first = await client.get(url)
        second = await client.get(url)
    assert connections == 1
    assert (first.status, first.header("x-n"), first.body) == (200, "1", b"hello")
    assert (second.status, second.header("x-n"), second.body) == (201, "2", b"bye")
    assert second.head.startswith(b"HTTP/1.1 201 Created\r\n")


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, CHUNKED\r\n\r\n1000\r\n",
    ],
)
async def test_a_body_cut_short_by_a_clean_close_is_a_reset(
    tiny_server: ServerFactory, head: bytes
) -> None:
    """Only a body with neither a length nor chunks ends at the close; a declared
    one that stops early is a reset, with the status that arrived."""

    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + b"x" * 3000)
        await writer.drain()
        writer.close()

    async with tiny_server(short) as port, AsyncClient() as client:
        with pytest.raises(RequestError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert caught.value.error_class == "connection_reset"
    assert caught.value.status == 200
    assert "during the body" in caught.value.detail


async def test_waiting_for_a_connection_never_times_a_request_out(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    """Six requests share one connection to a host that takes 0.2 s; max_time is
    0.5 s, the whole batch 1.2 s.  Time in surge's own queue does not count."""
    async with client_for(max_connections=1, max_time=0.5) as client:
        url = sim.url("delay-200.sim")
        results = await asyncio.gather(*(outcome(client, url) for _ in range(6)))
    assert results == [(200, None)] * 6


async def test_handshakes_are_paced_and_every_host_answers(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    async with client_for(max_connecting=2) as client:
        urls = [sim.url(f"h{i}--status-200.sim", tls=True) for i in range(20)]
        results = await asyncio.gather(*(outcome(client, u) for u in urls))
    assert results == [(200, None)] * 20


async def test_a_full_pool_evicts_idle_connections_of_other_hosts(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    async with client_for(max_connections=4) as client:
        for i in range(12):
            assert (await client.get(sim.url(f"h{i}--status-200.sim"))).status == 200
        stats = client.stats()
    assert stats["open"] <= 4 and stats["evicted"] == 8


async def test_custom_headers_reach_the_server(tiny_server: ServerFactory) -> None:
    seen: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        writer.close()

    async with tiny_server(echo) as port, AsyncClient(headers={"X-Trace": "abc"}) as client:
        response = await client.get(f"http://127.0.0.1:{port}/p?q=1", headers={"X-One": "1"})
    assert response.status == 204
    request = seen[0].decode()
    assert request.startswith("GET /p?q=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{port}\r\n" in request
    assert "X-Trace: abc\r\n" in request and "X-One: 1\r\n" in request


async def test_a_request_body_goes_after_its_content_length(tiny_server: ServerFactory) -> None:
    seen: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head + await reader.readexactly(11))
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        writer.close()

    async with tiny_server(echo) as port, AsyncClient(headers={"X-Trace": "abc"}) as client:
        response = await client.request("post", f"http://127.0.0.1:{port}/f", body=b"hello world")
    assert response.status == 204
    request = seen[0].decode()
    assert request.startswith("POST /f HTTP/1.1\r\n")
    assert request.endswith("X-Trace: abc\r\nContent-Length: 11\r\n\r\nhello world")


async def test_waiting_for_a_handshake_slot_does_not_count_against_max_time(
    tiny_server: ServerFactory,
) -> None:
    """The only handshake slot is held by TLS handshakes that never answer for
    longer than ``max_time``; a request queued behind them still has its whole
    ``max_time`` once it gets the slot (found in review)."""

    handshakes = 0  # TCP connections the silent server accepted
    blocked: list[asyncio.Future[Any]] = []
    seen_on_arrival: list[tuple[int, list[bool]]] = []  # when the quick request came

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal handshakes
        handshakes += 1
        await asyncio.sleep(5)  # accepts TCP, never answers the ClientHello

    async def quick(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        seen_on_arrival.append((handshakes, [request.done() for request in blocked]))
        await asyncio.sleep(0.3)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()

    async with (
        tiny_server(silent) as slow,
        tiny_server(quick) as fast,
        AsyncClient(max_connecting=1, max_time=1.0, connect_timeout=0.6, insecure=True) as client,
    ):
        # two handshakes that each hold the only slot for connect_timeout (1.2 s)
        blocked += [
            asyncio.ensure_future(client.get(f"https://localhost:{slow}/")),
            asyncio.ensure_future(client.get(f"https://127.0.0.1:{slow}/")),
        ]
        await asyncio.sleep(0.05)
        try:
            response = await client.get(f"http://127.0.0.1:{fast}/")
        finally:
            for request in blocked:
                with pytest.raises(RequestError):
                    await request
    assert (response.status, response.body) == (200, b"ok")
    # It did wait for the slot: its request reached the server only after both
    # handshakes had held the slot and given up (together longer than max_time).
    assert seen_on_arrival == [(2, [True, True])]


async def test_a_head_request_stays_a_head_after_a_303(tiny_server: ServerFactory) -> None:
    methods: list[bytes] = []

    async def see_other(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        methods.append(head.split(b" ", 1)[0])
        if len(methods) == 1:
            writer.write(b"HTTP/1.1 303 See Other\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
        await writer.drain()
        writer.close()

    async with tiny_server(see_other) as port, AsyncClient(follow_redirects=True) as client:
        response = await client.head(f"http://127.0.0.1:{port}/a")
    assert (response.status, response.redirects, methods) == (200, 1, [b"HEAD", b"HEAD"])


async def test_a_response_is_its_own_object_not_the_connections_state(
    sim: SimInfo, client_for: ClientFactory
) -> None:
    """The connection hands each exchange a WireResponse of its own: once the
    connection is back in the pool and carries the next request, the earlier
    response still holds its own status, head and body (the client no longer has
    to copy them out before giving the connection back)."""
    async with client_for(max_connections=1) as client:
        await client.get(sim.url("big-5000.sim"))  # opens the connection
        conn = client._pool.acquire_nowait(("http", "big-5000.sim", sim.http_port))
        assert conn is not None
        deadline = conn.loop.time() + 5.0
        first = conn.send(b"GET / HTTP/1.1\r\nHost: big-5000.sim\r\n\r\n", False, deadline, 5.0)
        await first.done
        assert conn.response is None  # idle: ready for the next request
        second = conn.send(b"HEAD / HTTP/1.1\r\nHost: big-5000.sim\r\n\r\n", True, deadline, 5.0)
        assert second is not first
        await second.done
        assert first.status == 200 and first.body_bytes == 5000
        assert sum(map(len, first.body)) == 5000 and first.head.startswith(b"HTTP/1.1 200")
        assert second.status == 200 and second.body == [] and second.body_bytes == 0
        assert first.keep_alive and second.keep_alive and conn.requests == 3
        await client._pool.release(conn)


@pytest.mark.parametrize("interim", [False, True], ids=["headers", "1xx heads"])
async def test_a_head_that_never_ends_is_cut_off_at_the_bound(
    tiny_server: ServerFactory, interim: bool
) -> None:
    """A server that sends header lines (or 1xx interim heads) without end: the
    request fails as protocol_error once the head passes MAX_HEAD_BYTES, long
    before max_time (before the bound, it failed as connection_reset only when
    the server gave up, having held everything it sent)."""
    from surge.http.connection import MAX_HEAD_BYTES

    sent = [0]

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        line = b"HTTP/1.1 100 Continue\r\n\r\n" if interim else b"X-Filler: " + b"a" * 990 + b"\r\n"
        if not interim:
            writer.write(b"HTTP/1.1 200 OK\r\n")
        try:
            for _ in range(50 * MAX_HEAD_BYTES // len(line)):  # bounded: 50x the limit
                writer.write(line * 16)
                sent[0] += 16 * len(line)
                await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    async with tiny_server(endless) as port, AsyncClient(max_time=60) as client:
        with pytest.raises(RequestError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert caught.value.error_class == "protocol_error"
    assert f"exceeds {MAX_HEAD_BYTES:,} bytes" in caught.value.detail
    # The client hung up: the server's writes failed before all 50x were out
    # (what it counts includes the loopback's socket buffers, some MB).
    assert sent[0] < 50 * MAX_HEAD_BYTES - 16 * 1024


async def test_an_ipv6_zone_connects_on_asyncios_loop_and_is_not_sent() -> None:
    """RFC 6874's http://[::1%25lo]:PORT/: asyncio's connect asks getaddrinfo,
    which (glibc) takes a zone's name for link-local addresses only, so the
    resolver gives the zone as its index; Host carries the address alone."""
    heads: list[bytes] = []

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(respond, "::1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, AsyncClient() as client:
        response = await client.get(f"http://[::1%25lo]:{port}/")
        with pytest.raises(RequestError, match="no network interface 'nope0'"):
            await client.get(f"http://[::1%25nope0]:{port}/")
    assert response.status == 200 and response.url == f"http://[::1%25lo]:{port}/"
    assert f"\r\nHost: [::1]:{port}\r\n".encode() in heads[0]
