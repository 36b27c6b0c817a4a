"""Bodies framed by Content-Length, however the wire splits them.

Once a head says how long its body is, the connection hands the reads that
follow to the body as they came, counting the length down, without the parser
(connection.py, ``data_received``).  These tests send exact bytes, split
exactly, from real servers on loopback: every split a socket can make, the
end of the body inside a read and at its edge, keep-alive reuse after such a
body, the responses that have no body despite a Content-Length, and the
errors (a close mid-body, the body cap, the deadline) as they were before.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from itertools import pairwise
from typing import Any

import pytest
import uvloop

from surge.errors import RequestError
from surge.http import AsyncClient
from surge.http.connection import STREAM_HIGH_WATER

ServerFactory = Callable[..., Any]
Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter

#: A pause between the server's writes long enough for the client to read each
#: write on its own (loopback, TCP_NODELAY): the splits below are the reads.
GAP = 0.003

BODY = bytes(range(256)) * 4 + b"tail"  # 1,028 bytes, every byte value


def head_for(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra)


def pieces(wire: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``wire`` cut at the offsets ``cuts``."""
    edges = [0, *cuts, len(wire)]
    return [wire[a:b] for a, b in pairwise(edges) if b > a]


async def write_split(writer: Writer, parts: Sequence[bytes]) -> None:
    for n, part in enumerate(parts):
        if n:
            await asyncio.sleep(GAP)
        writer.write(part)
        await writer.drain()


class Served:
    """A server that answers each request on a connection with the next answer
    (a list of writes), counting the connections it accepted."""

    def __init__(self, answers: Sequence[Sequence[bytes]], close_after: bool = False) -> None:
        self.answers = list(answers)
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []

    async def __call__(self, reader: Reader, writer: Writer) -> None:
        self.connections += 1
        try:
            while self.answers:
                self.requests.append(await reader.readuntil(b"\r\n\r\n"))
                await write_split(writer, self.answers.pop(0))
            if not self.close_after:
                await reader.read()  # hold the connection until the client closes it
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        writer.close()


HEAD = head_for(BODY)
WIRE = HEAD + BODY
SPLITS = {
    "one write": [],
    "head and body apart": [len(HEAD)],
    "head split, body whole": [5, 20, len(HEAD)],
    "head with a body start": [len(HEAD) + 3, len(HEAD) + 500],
    "body ends at a read's edge": [len(HEAD), len(HEAD) + 100, len(HEAD) + 700],
    "one byte a read": list(range(1, len(WIRE))),
}


async def fetch_split(tiny_server: ServerFactory, cuts: Sequence[int]) -> None:
    """Two requests on one connection, the first answered in the given split:
    the body whole, the connection reused."""
    served = Served([pieces(WIRE, cuts), [head_for(b"next") + b"next"]])
    async with tiny_server(served) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        first = await client.get(url)
        second = await client.get(url)
    assert (first.status, first.body, first.bytes) == (200, BODY, len(BODY))
    assert second.body == b"next"
    assert served.connections == 1


@pytest.mark.parametrize("cuts", SPLITS.values(), ids=SPLITS.keys())
async def test_every_split_of_a_length_framed_body_reads_whole(
    tiny_server: ServerFactory, cuts: list[int]
) -> None:
    await fetch_split(tiny_server, cuts)


def test_every_split_reads_whole_on_uvloop() -> None:
    """uvloop's transport hands reads over in its own way (up to 256 KiB, new bytes each)."""

    @asynccontextmanager
    async def serve(handler: Callable[[Reader, Writer], Awaitable[None]]) -> AsyncIterator[int]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        async with server:
            yield server.sockets[0].getsockname()[1]

    async def every() -> None:
        for cuts in SPLITS.values():
            await fetch_split(serve, cuts)

    uvloop.run(every())


@pytest.mark.parametrize(
    "extra",
    [b"GARBAGE", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n"],
    ids=["garbage", "a status line", "a whole head"],
)
@pytest.mark.parametrize(
    "cuts",
    [[len(HEAD) + 10], []],
    ids=["in the body's last read", "in the read of its head"],
)
async def test_bytes_after_the_body_end_the_connection(
    tiny_server: ServerFactory, extra: bytes, cuts: list[int]
) -> None:
    """Bytes past the length: the response is whole, and the connection is
    not reused (nobody asked for those bytes).  In a later read than the head
    the fast path refuses them; in the head's read llhttp completes the
    response and starts parsing the rest as another, which on_message_begin
    refuses.  Before, bytes that looked like a response left the connection
    in the pool: the next request on it failed as protocol_error or, after a
    whole head, waited for its body until the deadline."""
    answers = [pieces(WIRE + extra, cuts), [head_for(b"next") + b"next"]]
    served = Served(answers)
    async with tiny_server(served) as port, AsyncClient(max_time=10) as client:
        url = f"http://127.0.0.1:{port}/"
        first = await client.get(url)
        second = await client.get(url)
    assert (first.status, first.body) == (200, BODY)
    assert second.body == b"next"
    assert served.connections == 2


async def test_a_length_with_thousands_of_leading_zeros_is_read(
    tiny_server: ServerFactory,
) -> None:
    """llhttp takes ``Content-Length: 000...01028`` (5,000 zeros); the fast path
    must too, not raise int()'s digit limit out of data_received."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: " + b"0" * 5000 + b"1028\r\n\r\n"
    answers = [pieces(head + BODY, [len(head) + 10]), [head_for(b"next") + b"next"]]
    served = Served(answers)
    async with tiny_server(served) as port, AsyncClient(max_time=10) as client:
        url = f"http://127.0.0.1:{port}/"
        first = await client.get(url)
        second = await client.get(url)
    assert (first.status, first.body) == (200, BODY)
    assert second.body == b"next"
    assert served.connections == 1


async def test_three_large_bodies_in_a_row_on_one_connection(tiny_server: ServerFactory) -> None:
    bodies = [bytes([n]) * (3 * 1024 * 1024 + n) for n in (1, 2, 3)]
    answers = []
    for body in bodies:
        wire = head_for(body, b"X-N: %d\r\n" % len(body)) + body
        answers.append([wire[i : i + 100_000] for i in range(0, len(wire), 100_000)])
    served = Served(answers)
    async with tiny_server(served) as port, AsyncClient(max_connections=1) as client:
        url = f"http://127.0.0.1:{port}/"
        got = [await client.get(url) for _ in bodies]
        assert client.stats()["created"] == 1
    assert [r.body for r in got] == bodies
    assert [r.header("x-n") for r in got] == [str(len(b)) for b in bodies]
    assert served.connections == 1


async def test_a_length_framed_body_is_counted_down_outside_the_parser(
    tiny_server: ServerFactory,
) -> None:
    """After the read that ends the head, the connection knows how much body is
    left and takes the reads that follow as body (the fast path is on)."""
    go_on = asyncio.Event()

    async def respond(reader: Reader, writer: Writer) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + BODY[:100])
        await writer.drain()
        await go_on.wait()
        await write_split(writer, pieces(BODY[100:], [300]))
        await reader.read()

    async with (
        tiny_server(respond) as port,
        AsyncClient() as client,
        client.stream("GET", f"http://127.0.0.1:{port}/") as response,
    ):
        stream = response._stream
        assert stream is not None
        conn = stream.conn
        chunks = await stream.wire.next_chunks()
        assert b"".join(chunks) == BODY[:100]
        assert conn._body_left == len(BODY) - 100
        go_on.set()
        rest = [chunk async for chunk in response.aiter_raw()]
        assert conn._body_left == 0 and conn.response is None
    assert b"".join(chunks + rest) == BODY


@pytest.mark.parametrize(
    ("method", "status"),
    [("HEAD", 200), ("GET", 204), ("GET", 304)],
)
async def test_no_body_despite_a_content_length(
    tiny_server: ServerFactory, method: str, status: int
) -> None:
    """HEAD, 204 and 304 have no body whatever their Content-Length says: the
    response ends at its head, and the connection carries the next one."""
    reason = {200: b"OK", 204: b"No Content", 304: b"Not Modified"}[status]
    answers = [
        [b"HTTP/1.1 %d %s\r\nContent-Length: 5000\r\n\r\n" % (status, reason)],
        pieces(WIRE, [len(HEAD), len(HEAD) + 300]),
    ]
    served = Served(answers)
    async with tiny_server(served) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        first = await client.request(method, url)
        second = await client.get(url)
    assert (first.status, first.body) == (status, b"")
    assert (second.status, second.body) == (200, BODY)
    assert served.connections == 1


async def test_a_chunked_body_in_pieces_is_whole(tiny_server: ServerFactory) -> None:
    chunked = (
        b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (BODY[:300], BODY[300:])) + b"0\r\n\r\n"
    )
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    served = Served([pieces(wire, [50, 60, 400, 900]), [head_for(b"next") + b"next"]])
    async with tiny_server(served) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        first = await client.get(url)
        second = await client.get(url)
    assert (first.body, second.body, served.connections) == (BODY, b"next", 1)


@pytest.mark.parametrize(
    "head",
    [
        # a length and a Transfer-Encoding: llhttp refuses it
        b"HTTP/1.1 200 OK\r\nContent-Length: 1028\r\nTransfer-Encoding: chunked\r\n\r\n",
        # a length that is no plain decimal, or twice (read as one: RFC 9112 6.3)
        b"HTTP/1.1 200 OK\r\nContent-Length: +1028\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1028\r\nContent-Length: 1028\r\n\r\n",
    ],
)
async def test_framing_the_parser_keeps(tiny_server: ServerFactory, head: bytes) -> None:
    """Heads whose framing is not one plain Content-Length stay the parser's:
    the outcome is whatever llhttp makes of them, as before."""
    body = BODY
    if b"chunked" in head:
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    served = Served([pieces(head + body, [len(head), len(head) + 200])], close_after=True)
    async with tiny_server(served) as port, AsyncClient() as client:
        try:
            response = await client.get(f"http://127.0.0.1:{port}/")
        except RequestError as e:
            outcome: tuple[Any, ...] = (e.error_class,)
        else:
            outcome = (response.status, response.body)
    expected = {
        b"chunked": ("protocol_error",),
        b"+1028": ("protocol_error",),
        b"1028\r\nContent-Length": (200, BODY),
    }
    assert outcome == next(v for k, v in expected.items() if k in head)


#: Heads that say one length more than once (RFC 9112 6.3 rule 5: read as that
#: length, as curl reads them) or two lengths (an error), and what each gives.
REPEATED_LENGTHS = {
    "twice": (b"Content-Length: 1028\r\nContent-Length: 1028\r\n", BODY),
    "a list": (b"Content-Length: 1028, 1028\r\n", BODY),
    "apart, a zero ahead": (b"Content-Length: 1028\r\nX-A: b\r\nContent-Length: 01028\r\n", BODY),
    "a list and a line": (b"Content-Length: 1028,1028\r\nContent-Length: 1028\r\n", BODY),
    "after a 1xx": (b"Content-Length: 1028\r\nContent-Length: 1028\r\n", BODY),
    "two lengths": (b"Content-Length: 1028\r\nContent-Length: 1029\r\n", "protocol_error"),
    "a list of two": (b"Content-Length: 1028, 5\r\n", "protocol_error"),
    "not a number": (b"Content-Length: 1028, x\r\n", "protocol_error"),
    "and chunked": (
        b"Content-Length: 1028\r\nContent-Length: 1028\r\nTransfer-Encoding: chunked\r\n",
        "protocol_error",
    ),
    "past 2^63 - 1": (
        b"Content-Length: 9223372036854775808, 9223372036854775808\r\n",
        "protocol_error",
    ),
}


@pytest.mark.parametrize("split", ["one write", "one byte a read"])
@pytest.mark.parametrize("name", REPEATED_LENGTHS)
async def test_one_length_said_again_is_read_once_and_two_are_refused(
    tiny_server: ServerFactory, name: str, split: str
) -> None:
    """llhttp refuses a second Content-Length at its first digit, maybe before
    its head has all come: the head is read again once whole, however the
    reads cut it, and the connection goes on to carry the next response."""
    lines, expected = REPEATED_LENGTHS[name]
    wire = b"HTTP/1.1 200 OK\r\n" + lines + b"\r\n" + BODY
    if name == "after a 1xx":
        wire = b"HTTP/1.1 100 Continue\r\n\r\n" + wire
    cuts = list(range(1, len(wire) - len(BODY) + 10)) if split == "one byte a read" else []
    served = Served([pieces(wire, cuts), [head_for(b"next") + b"next"]])
    async with tiny_server(served) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        try:
            response = await client.get(url)
        except RequestError as e:
            assert (e.error_class, e.status) == (expected, 200)  # the head was read
            return
        assert (response.status, response.body, response.bytes) == (200, expected, len(BODY))
        assert response.headers.get_list("content-length")[0].startswith("1028")  # as it came
        assert (await client.get(url)).body == b"next"
    assert served.connections == 1


async def test_one_length_said_again_on_a_head_and_a_stream(tiny_server: ServerFactory) -> None:
    """The same head answering HEAD (no body follows) and a streamed GET."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1028\r\nContent-Length: 1028\r\n\r\n"
    served = Served([[head], pieces(head + BODY, [40, len(head) + 3]), [head_for(b"x") + b"x"]])
    async with tiny_server(served) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        assert (await client.head(url)).status == 200
        async with client.stream("GET", url) as response:
            assert await response.aread() == BODY
        assert (await client.get(url)).body == b"x"
    assert served.connections == 1


@pytest.mark.parametrize("abort", [False, True], ids=["close", "reset"])
async def test_a_connection_lost_mid_body_is_a_reset(
    tiny_server: ServerFactory, abort: bool
) -> None:
    """The server goes away with part of a length-framed body sent, in reads
    after the head's: connection_reset, with the status that arrived."""

    async def short(reader: Reader, writer: Writer) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await write_split(writer, pieces(WIRE[:-10], [len(HEAD), len(HEAD) + 100]))
        if abort:
            writer.transport.abort()
        else:
            writer.close()

    async with tiny_server(short) as port, AsyncClient() as client:
        with pytest.raises(RequestError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert caught.value.error_class == "connection_reset"
    assert caught.value.status == 200
    assert "during the body" in caught.value.detail


async def test_the_body_cap_applies_to_a_length_framed_body(tiny_server: ServerFactory) -> None:
    size = 1024 * 1024
    body = b"z" * size
    wire = head_for(body) + body
    served = Served([[wire[i : i + 50_000] for i in range(0, len(wire), 50_000)]])
    async with tiny_server(served) as port, AsyncClient(body_cap=200_000) as client:
        with pytest.raises(RequestError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert caught.value.error_class == "body_too_large"
    assert "200,000-byte cap" in caught.value.detail


async def test_the_deadline_covers_a_length_framed_body(tiny_server: ServerFactory) -> None:
    async def stalls(reader: Reader, writer: Writer) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await write_split(writer, [HEAD, BODY[:100]])
        await reader.read()

    async with tiny_server(stalls) as port, AsyncClient(max_time=0.3) as client:
        with pytest.raises(RequestError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert caught.value.error_class == "read_timeout"
    assert caught.value.status == 200


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_gzip_body_in_pieces_is_decoded(tiny_server: ServerFactory, stream: bool) -> None:
    plain = b"".join(b"line %d\n" % n for n in range(20_000))
    packed = gzip.compress(plain)
    wire = head_for(packed, b"Content-Encoding: gzip\r\n") + packed
    served = Served([[wire[i : i + 7_000] for i in range(0, len(wire), 7_000)]])
    async with tiny_server(served) as port, AsyncClient() as client:
        url = f"http://127.0.0.1:{port}/"
        if stream:
            async with client.stream("GET", url) as response:
                got = b"".join([piece async for piece in response.aiter_bytes()])
        else:
            got = (await client.get(url)).content
    assert got == plain


async def test_a_large_streamed_body_read_slowly_is_intact(tiny_server: ServerFactory) -> None:
    """32 MiB of varied bytes read with pauses: reading stops past the read-ahead
    and resumes, and every byte arrives in order (sha256); the connection then
    carries the next request."""
    size = 32 * 1024 * 1024 + 12_345
    block = hashlib.sha256(b"seed").digest() * 4096  # 128 KiB, not one repeated byte
    body = (block * (size // len(block) + 1))[:size]
    wire = head_for(body) + body

    async def respond(reader: Reader, writer: Writer) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for i in range(0, len(wire), 1_000_003):  # odd sizes: every edge falls mid-read
            writer.write(wire[i : i + 1_000_003])
            await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head_for(b"next") + b"next")
        await writer.drain()
        await reader.read()

    digest = hashlib.sha256()
    held = []
    async with tiny_server(respond) as port, AsyncClient(body_cap=1024 * 1024) as client:
        url = f"http://127.0.0.1:{port}/"
        async with client.stream("GET", url) as response:
            assert response._stream is not None
            wire_response = response._stream.wire
            n = 0
            async for chunk in response.aiter_raw():
                digest.update(chunk)
                held.append(wire_response.buffered)
                n += 1
                if n % 16 == 0:
                    await asyncio.sleep(0.001)
        assert (await client.get(url)).body == b"next"
        assert client.stats()["created"] == 1
    assert digest.hexdigest() == hashlib.sha256(body).hexdigest()
    assert max(held) <= STREAM_HIGH_WATER + 256 * 1024
