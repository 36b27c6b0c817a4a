"""HTTP/2 failures and bounds, against a hostile server built on the ``h2``
package (cleartext h2c, prior knowledge): GOAWAY and REFUSED_STREAM are sent
again (a POST too, exactly once: counted at the server), any other reset is
an error and a POST is not sent again, and the attack classes - a
CONTINUATION flood, an HPACK bomb, a body past its Content-Length,
connection-specific response headers - end the request with a bounded error.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import hyperframe.frame
import pytest
from hypothesis import given
from hypothesis import strategies as st

from surge.errors import RequestError
from surge.http import AsyncClient, http2, multiplex
from surge.http import client as client_module
from surge.http.connection import MAX_HEAD_BYTES

Behaviour = Callable[["Exchange"], None]


class Exchange:
    """One request the hostile server received, and the means to answer it."""

    def __init__(self, server: Server, conn: Any, index: int, stream_id: int, headers: Any) -> None:
        self.server = server
        self.conn = conn  # the server side's h2 connection
        self.index = index  # which TCP connection (0: the first)
        self.stream_id = stream_id
        self.headers = dict(headers)
        self.path = self.headers[b":path"].decode()
        self.body = b""
        self.raw: list[bytes] = []  # raw bytes to write after h2's
        self.hang_up = False  # close the TCP connection once written

    def respond(
        self, status: int = 200, body: bytes = b"ok", headers: list[tuple[bytes, bytes]] = ()
    ) -> None:
        fields = [(b":status", str(status).encode()), *headers]
        if not any(name == b"content-length" for name, _ in headers):
            fields.append((b"content-length", str(len(body)).encode()))
        self.conn.send_headers(self.stream_id, fields, end_stream=not body)
        size = self.conn.max_outbound_frame_size
        for at in range(0, len(body), size):  # (within the window: bodies here are small)
            piece = body[at : at + size]
            self.conn.send_data(self.stream_id, piece, end_stream=at + size >= len(body))


class Server:
    """An h2c server on 127.0.0.1 answering with ``behaviour``; it counts what
    it received (``received``: request bodies, or paths, and how often)."""

    def __init__(self, behaviour: Behaviour, batch: int = 1) -> None:
        self.behaviour = behaviour
        self.batch = batch  # on the first connection, answer once this many have come
        self.received: Counter[bytes] = Counter()
        self.connections = 0
        self.pings = 0  # PINGs received (h2 answers each)
        #: Connections that stop reading (and so answering) once they answered
        #: one request: a server gone silent, its TCP connection still open.
        self.silent_after_one: set[int] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.connections
        self.connections += 1
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        exchanges: dict[int, Exchange] = {}
        ready: list[Exchange] = []
        try:
            while data := await reader.read(65536):
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    break
                for event in events:
                    if isinstance(event, h2.events.PingReceived):
                        self.pings += 1
                    if isinstance(event, h2.events.RequestReceived):
                        exchanges[event.stream_id] = Exchange(
                            self, conn, index, event.stream_id, event.headers
                        )
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                        exchanges[event.stream_id].body += event.data
                    elif isinstance(event, h2.events.StreamEnded):
                        exchange = exchanges[event.stream_id]
                        self.received[exchange.body or exchange.path.encode()] += 1
                        ready.append(exchange)
                if ready and (index > 0 or len(ready) >= self.batch):
                    for exchange in ready:
                        self.behaviour(exchange)
                    ready.clear()
                writer.write(conn.data_to_send())
                for exchange in exchanges.values():
                    for raw in exchange.raw:
                        writer.write(raw)
                    exchange.raw.clear()
                await writer.drain()
                if any(exchange.hang_up for exchange in exchanges.values()):
                    break
                if index in self.silent_after_one and self.received:
                    await asyncio.sleep(3600)  # gone silent: reads nothing, answers nothing
        except (ConnectionError, KeyError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def hostile(behaviour: Behaviour, batch: int = 1) -> AsyncIterator[tuple[Server, str]]:
    server = Server(behaviour, batch)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        listener.close()


def h2c(**options: Any) -> AsyncClient:
    options.setdefault("max_time", 5.0)
    return AsyncClient(http2_prior_knowledge=True, **options)


# -- sent again: the server said it did not process it ----------------------------------


def goaway_after_first(exchange: Exchange) -> None:
    """On the first connection: GOAWAY with the lowest stream id as the last
    processed, and only that one answered; later connections answer all."""
    if exchange.index == 0:
        first = min(exchange.conn.streams)
        if exchange.stream_id == first:
            exchange.respond(body=b"first")
            goaway = hyperframe.frame.GoAwayFrame(0)
            goaway.last_stream_id = first
            exchange.raw.append(goaway.serialize())
        return
    exchange.respond(body=exchange.body)


async def test_goaway_streams_above_the_last_are_sent_again_once() -> None:
    bodies = [b"post-%d" % n for n in range(3)]
    async with hostile(goaway_after_first, batch=3) as (server, url), h2c() as client:
        responses = await asyncio.gather(*(client.post(url + "/p", content=b) for b in bodies))
    assert all(r.status_code == 200 for r in responses)
    # One POST was processed on the first connection; the two above the
    # GOAWAY's last stream id came again on a second one, once each.
    assert sorted(server.received.values()) == [1, 2, 2]
    # on one connection or two: the GOAWAY taught that the server processes one
    # stream a connection, until a connection's streams end without a GOAWAY
    assert server.connections in (2, 3)


def goaway_then_answer(code: int) -> Behaviour:
    """On the first connection, as nginx with ``keepalive_timeout 0`` does: a
    GOAWAY with the lowest stream id as the last, and only then that stream's
    response, on the same connection; later connections answer all."""

    def behaviour(exchange: Exchange) -> None:
        if exchange.index == 0:
            first = min(exchange.conn.streams)
            if exchange.stream_id == first:
                goaway = hyperframe.frame.GoAwayFrame(0)
                goaway.last_stream_id = first
                goaway.error_code = code
                exchange.raw.append(exchange.conn.data_to_send() + goaway.serialize())
                exchange.respond(body=b"first")
                exchange.raw.append(exchange.conn.data_to_send())
            return
        exchange.respond(body=exchange.body)

    return behaviour


async def test_a_response_after_a_goaway_that_promised_it_arrives() -> None:
    """h2 alone refuses every frame after a GOAWAY (python-hyper/h2 #1181): the
    response the GOAWAY promised was a protocol error."""
    bodies = [b"post-%d" % n for n in range(3)]
    behaviour = goaway_then_answer(h2.errors.ErrorCodes.NO_ERROR)
    async with hostile(behaviour, batch=3) as (server, url), h2c() as client:
        responses = await asyncio.gather(*(client.post(url + "/p", content=b) for b in bodies))
    assert [r.status_code for r in responses] == [200] * 3
    contents = [r.content for r in responses]
    assert contents.count(b"first") == 1 and len(set(contents) & set(bodies)) == 2, contents
    assert sorted(server.received.values()) == [1, 2, 2]  # the two above the last id: again
    assert server.connections in (2, 3)  # (as in the test above)


async def test_a_goaway_with_an_error_ends_the_rest_and_resends_the_unprocessed() -> None:
    """A GOAWAY with an error code and frames after it in the same read: the
    streams above its last id are sent again (not processed, whatever the
    code), the one at it ends with ``connection_reset`` (no protocol error)."""
    bodies = [b"post-%d" % n for n in range(3)]
    behaviour = goaway_then_answer(h2.errors.ErrorCodes.INTERNAL_ERROR)
    async with hostile(behaviour, batch=3) as (server, url), h2c() as client:
        outcomes = await asyncio.gather(
            *(client.post(url + "/p", content=b) for b in bodies), return_exceptions=True
        )
    errors = [o for o in outcomes if isinstance(o, RequestError)]
    assert len(errors) == 1 and errors[0].error_class == "connection_reset", outcomes
    assert "GOAWAY (INTERNAL_ERROR)" in errors[0].detail
    assert sorted(o.status_code for o in outcomes if not isinstance(o, BaseException)) == [200, 200]
    assert sorted(server.received.values()) == [1, 2, 2]
    # on one connection or two: the GOAWAY taught that the server processes one
    # stream a connection, until a connection's streams end without a GOAWAY
    assert server.connections in (2, 3)


def echo(exchange: Exchange) -> None:
    exchange.respond(body=exchange.body or exchange.path.encode())


@pytest.fixture
def ping_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reuse of an idle HTTP/2 connection pings first (not after 10 s)."""
    monkeypatch.setattr(multiplex, "PING_IDLE_S", 0.0)
    monkeypatch.setattr(multiplex, "PING_TIMEOUT_S", 0.3)


@pytest.mark.usefixtures("ping_at_once")
async def test_an_idle_connection_whose_server_went_silent_is_replaced_before_a_post() -> None:
    """The first connection stops reading after one answer: the PING of its
    reuse gets no ACK, so the POST goes on a new connection - sent once, never
    on the dead one (where it would have waited for its deadline)."""
    async with hostile(echo) as (server, url), h2c(max_time=3.0) as client:
        server.silent_after_one.add(0)
        first = await client.get(url + "/one")
        await asyncio.sleep(0.05)  # idle in the pool
        second = await client.post(url + "/p", content=b"posted")
    assert (first.content, second.content) == (b"/one", b"posted")
    assert server.connections == 2
    assert server.received[b"posted"] == 1


@pytest.mark.usefixtures("ping_at_once")
async def test_an_idle_connection_that_answers_the_ping_is_reused() -> None:
    async with hostile(echo) as (server, url), h2c() as client:
        for n in range(3):
            await client.get(url + f"/{n}")
            await asyncio.sleep(0.02)
    assert server.connections == 1
    assert server.pings == 2  # the two reuses, not the first request


async def test_a_connection_idle_briefly_is_reused_without_a_ping() -> None:
    async with hostile(echo) as (server, url), h2c() as client:
        for n in range(3):
            await client.get(url + f"/{n}")
    assert (server.connections, server.pings) == (1, 0)


def refuse_first(exchange: Exchange) -> None:
    if exchange.server.received[exchange.body] == 1:
        exchange.conn.reset_stream(exchange.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
    else:
        exchange.respond(body=b"served")


async def test_a_refused_stream_is_sent_again_once() -> None:
    async with hostile(refuse_first) as (server, url), h2c() as client:
        response = await client.post(url + "/p", content=b"once")
    assert response.content == b"served"
    assert server.received[b"once"] == 2


def refuse_always(exchange: Exchange) -> None:
    exchange.conn.reset_stream(exchange.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)


async def test_a_stream_refused_twice_is_an_error() -> None:
    async with hostile(refuse_always) as (server, url), h2c() as client:
        with pytest.raises(RequestError) as caught:
            await client.post(url + "/p", content=b"twice")
    assert caught.value.error_class == "connection_reset"
    assert "REFUSED_STREAM" in caught.value.detail
    assert server.received[b"twice"] == 1 + client_module.UNPROCESSED_RETRIES  # once more


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (h2.errors.ErrorCodes.INTERNAL_ERROR, "connection_reset"),
        (h2.errors.ErrorCodes.CANCEL, "connection_reset"),
        (h2.errors.ErrorCodes.PROTOCOL_ERROR, "protocol_error"),
    ],
)
async def test_other_resets_are_errors_and_a_post_is_not_sent_again(
    code: int, error_class: str
) -> None:
    def reset(exchange: Exchange) -> None:
        exchange.conn.reset_stream(exchange.stream_id, code)

    async with hostile(reset) as (server, url), h2c() as client:
        with pytest.raises(RequestError) as caught:
            await client.post(url + "/p", content=b"post")
    assert caught.value.error_class == error_class
    assert server.received[b"post"] == 1


# -- bounds --------------------------------------------------------------------------------


def continuation_flood(exchange: Exchange) -> None:
    """A HEADERS frame without END_HEADERS, then CONTINUATION frames, without end."""
    headers = hyperframe.frame.HeadersFrame(exchange.stream_id)
    headers.data = exchange.conn.encoder.encode([(b":status", b"200")])
    exchange.raw.append(headers.serialize())
    for _ in range(200):  # 200 x 16 KiB: 3.2 MB of one header block
        frame = hyperframe.frame.ContinuationFrame(exchange.stream_id)
        frame.data = b"\x00" * 16384
        exchange.raw.append(frame.serialize())


def hpack_bomb(exchange: Exchange) -> None:
    """A few bytes on the wire that decode to more than the header list bound:
    one large field, indexed once, then referenced again and again."""
    exchange.respond(headers=[(b"x-bomb", b"a" * 4000)] * (MAX_HEAD_BYTES // 4000 + 10))


def long_body(exchange: Exchange) -> None:
    exchange.respond(body=b"0123456789", headers=[(b"content-length", b"5")])


def connection_header(exchange: Exchange) -> None:
    exchange.respond(headers=[(b"connection", b"keep-alive")])


def bad_pseudo_header(exchange: Exchange) -> None:
    exchange.respond(headers=[(b":path", b"/nope")])


@pytest.mark.parametrize(
    "behaviour",
    [continuation_flood, hpack_bomb, long_body, connection_header, bad_pseudo_header],
)
async def test_a_hostile_response_is_a_protocol_error(behaviour: Behaviour) -> None:
    async with hostile(behaviour) as (_, url), h2c() as client:
        with pytest.raises(RequestError) as caught:
            await client.get(url + "/x")
    assert caught.value.error_class == "protocol_error"


def informational_and_trailers(exchange: Exchange) -> None:
    conn = exchange.conn
    conn.send_headers(exchange.stream_id, [(b":status", b"103"), (b"link", b"</a>")])
    conn.send_headers(exchange.stream_id, [(b":status", b"200")])
    conn.send_data(exchange.stream_id, b"body")
    conn.send_headers(exchange.stream_id, [(b"x-trailer", b"t")], end_stream=True)


async def test_1xx_is_skipped_and_trailers_are_ignored() -> None:
    async with hostile(informational_and_trailers) as (_, url), h2c() as client:
        response = await client.get(url + "/x")
    assert (response.status_code, response.content) == (200, b"body")
    assert response.http_version == "HTTP/2"
    assert "x-trailer" not in response.headers


def big_body(exchange: Exchange) -> None:
    exchange.respond(body=b"x" * 200_000)


async def test_the_body_cap_holds() -> None:
    async with hostile(big_body) as (_, url), h2c(body_cap=100_000) as client:
        with pytest.raises(RequestError) as caught:
            await client.get(url + "/x")
    assert caught.value.error_class == "body_too_large"


def silent(exchange: Exchange) -> None:
    """Never answers."""


@pytest.mark.parametrize("options", [{"max_time": 0.3}, {"read_timeout": 0.3}])
async def test_a_silent_stream_times_out(options: dict[str, float]) -> None:
    async with hostile(silent) as (_, url), h2c(**options) as client:
        with pytest.raises(RequestError) as caught:
            await client.get(url + "/x")
    assert caught.value.error_class == "read_timeout"


async def test_origins_that_failed_are_not_kept() -> None:
    """A crawl meets most hosts once: nothing of a failed one stays behind."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with AsyncClient() as client:
        for _ in range(3):
            with pytest.raises(RequestError):
                await client.get(f"https://127.0.0.1:{port}/")
        assert client._mux.origins == {}


def hang_up_mid_body(exchange: Exchange) -> None:
    conn = exchange.conn
    conn.send_headers(exchange.stream_id, [(b":status", b"200"), (b"content-length", b"100")])
    conn.send_data(exchange.stream_id, b"x" * 10)
    exchange.hang_up = True


async def test_a_connection_lost_mid_body_is_connection_reset() -> None:
    async with hostile(hang_up_mid_body) as (server, url), h2c() as client:
        with pytest.raises(RequestError) as caught:
            await client.post(url + "/p", content=b"lost")
    assert caught.value.error_class == "connection_reset"
    assert server.received[b"lost"] == 1  # a POST whose answer had begun: not sent again


def ping_flood(exchange: Exchange) -> None:
    """More PINGs than any server needs, each of which the client must answer
    (and no response: only the flood's bound ends the request early)."""
    for n in range(5000):
        ping = hyperframe.frame.PingFrame(0)
        ping.opaque_data = n.to_bytes(8, "big")
        exchange.raw.append(ping.serialize())


def a_few_pings(exchange: Exchange) -> None:
    for n in range(50):
        ping = hyperframe.frame.PingFrame(0)
        ping.opaque_data = n.to_bytes(8, "big")
        exchange.raw.append(ping.serialize())
    exchange.respond()


async def test_a_ping_flood_is_a_protocol_error() -> None:
    async with hostile(ping_flood) as (_, url), h2c() as client:
        with pytest.raises(RequestError) as caught:
            await client.get(url + "/x")
    assert caught.value.error_class == "protocol_error"
    assert "PING" in caught.value.detail


async def test_a_few_pings_are_answered() -> None:
    async with hostile(a_few_pings) as (_, url), h2c() as client:
        assert (await client.get(url + "/x")).content == b"ok"


@given(data=st.binary(max_size=40), pad=st.one_of(st.none(), st.integers(0, 30)))
def test_a_data_frames_repr_is_hyperframes(data: bytes, pad: int | None) -> None:
    """surge.http.http2 replaces hyperframe's DATA repr (for its cost): same text."""
    frame = hyperframe.frame.DataFrame(1, data)
    if pad is not None:
        frame.flags.add("PADDED")
        frame.pad_length = pad
    assert repr(frame).endswith(http2._DEFAULT_DATA_REPR(frame))
    assert frame._body_repr() == http2._DEFAULT_DATA_REPR(frame)
