"""The read (idle) timeout: how long a server may stay silent once a request is
sent - no byte of its answer, or none of the request's body taken - apart
from the request's whole ``max_time``.  Servers on loopback sockets that go
quiet at each point of an exchange; the whole limit is far away (60 s), so an
answer within it can only be the read timeout's."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from surge.errors import RequestError, WriteTimeout
from surge.http import AsyncClient, Client, Timeout
from surge.http.connection import STREAM_HIGH_WATER

READ = 0.3


@contextmanager
def silent_after(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A server that reads one request, calls ``answer`` with the socket, then
    holds the connection open without a word until the test ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            with suppress(OSError):  # the client gave up and closed: as it should
                conn.recv(65536)
                answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        for conn in held:
            conn.close()


def nothing(conn: socket.socket) -> None:
    pass


def half_a_head(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Len")


def part_of_the_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)


@pytest.mark.parametrize("answer", [nothing, half_a_head, part_of_the_body])
def test_a_silent_server_is_a_read_timeout(answer: Callable[[socket.socket], None]) -> None:
    async def get(port: int) -> RequestError:
        async with AsyncClient(read_timeout=READ, max_time=60) as client:
            with pytest.raises(RequestError) as caught:
                await client.get(f"http://127.0.0.1:{port}/")
            return caught.value

    with silent_after(answer) as port:
        error = asyncio.run(get(port))
    assert error.error_class == "read_timeout"
    assert "read timeout" in error.detail
    assert isinstance(error, TimeoutError)


def test_a_request_s_timeout_sets_its_own_read_limit() -> None:
    async def get(port: int) -> RequestError:
        async with AsyncClient(max_time=60) as client:  # no read timeout of its own
            with pytest.raises(RequestError) as caught:
                await client.get(f"http://127.0.0.1:{port}/", timeout=Timeout(60, read=READ))
            return caught.value

    with silent_after(part_of_the_body) as port:
        error = asyncio.run(get(port))
    assert error.error_class == "read_timeout" and "read timeout" in error.detail
    assert error.status == 200  # the head had come


def test_a_server_that_takes_no_body_is_a_write_timeout() -> None:
    """An upload the server stops reading: the socket's buffers fill, and
    nothing moves for the read timeout - while the request is still being
    written: ``write_timeout`` (httpx's WriteTimeout), not a read's."""

    async def put(port: int) -> RequestError:
        async def body() -> Iterator[bytes]:  # type: ignore[misc]
            for _ in range(4096):  # 256 MiB at most: far past any socket buffer
                yield b"x" * 65536

        async with AsyncClient(read_timeout=READ, max_time=60) as client:
            with pytest.raises(RequestError) as caught:
                await client.put(f"http://127.0.0.1:{port}/", content=body())
            return caught.value

    with silent_after(nothing) as port:
        error = asyncio.run(put(port))
    assert error.error_class == "write_timeout"
    assert isinstance(error, WriteTimeout) and isinstance(error, TimeoutError)
    assert "took none of the request body" in error.detail


#: Larger than the socket buffers of both ends on loopback: most of it waits.
UPLOAD = 64 << 20


@pytest.mark.parametrize("limit", ["read", "max_time"])
def test_an_upload_still_being_written_when_any_timeout_passes_is_a_write_timeout(
    limit: str,
) -> None:
    """Bytes, not a stream, and either limit: the body is still going out
    when the time runs out, so what passed is the time to write it."""

    async def post(port: int) -> RequestError:
        options = {"read_timeout": READ, "max_time": 60} if limit == "read" else {"max_time": READ}
        async with AsyncClient(**options) as client:  # type: ignore[arg-type]
            with pytest.raises(RequestError) as caught:
                await client.post(f"http://127.0.0.1:{port}/", body=b"x" * UPLOAD)
            return caught.value

    with silent_after(nothing) as port:
        error = asyncio.run(post(port))
    assert error.error_class == "write_timeout", error.detail
    assert "waiting for the response" not in error.detail


def test_a_write_timeout_is_each_librarys_own_exception() -> None:
    """The drop-ins: httpx's WriteTimeout; requests' ConnectionError (urllib3's
    "Connection aborted." for a socket timeout while sending), as stock
    httpx and requests raise for the same server."""
    import httpx
    import requests

    import surge.httpx
    import surge.requests

    url = "http://127.0.0.1:{}/"
    body = b"x" * UPLOAD
    timeout = httpx.Timeout(10, write=READ)
    for transport in (None, surge.httpx.HTTPTransport()):
        with (
            silent_after(nothing) as port,
            httpx.Client(transport=transport) as client,
            pytest.raises(httpx.WriteTimeout),
        ):
            client.post(url.format(port), content=body, timeout=timeout)
    for adapter in (None, surge.requests.Adapter()):
        with silent_after(nothing) as port, requests.Session() as session:
            if adapter is not None:
                session.mount("http://", adapter)
            with pytest.raises(requests.ConnectionError) as caught:
                session.post(url.format(port), data=body, timeout=(10, READ))
            assert type(caught.value) is requests.ConnectionError


def test_a_trickled_body_of_known_length_times_out_and_a_kept_alive_one_does_not() -> None:
    """A byte every few tenths of a second is never silence.  A body whose
    length the server declared has no reason to trickle: under LOW_SPEED for a
    read timeout's window it is a read_timeout.  A body of unknown length may
    (S3's CompleteMultipartUpload sends a space every few seconds while it
    works, after its 200 head): it lives."""

    def trickled(chunked: bool) -> Callable[[socket.socket], None]:
        def answer(conn: socket.socket) -> None:
            framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: 105"
            conn.sendall(b"HTTP/1.1 200 OK\r\n%s\r\n\r\n" % framing)
            for _ in range(5):
                conn.sendall(b"1\r\n \r\n" if chunked else b" ")
                time.sleep(READ / 2)
            rest = b"x" * 100
            conn.sendall(b"64\r\n%s\r\n0\r\n\r\n" % rest if chunked else rest)

        return answer

    async def get(port: int) -> bytes:
        async with AsyncClient(read_timeout=READ, max_time=60) as client:
            response = await client.get(f"http://127.0.0.1:{port}/")
            return response.content

    with silent_after(trickled(chunked=False)) as port, pytest.raises(RequestError) as caught:
        asyncio.run(get(port))
    assert caught.value.error_class == "read_timeout" and "bytes/s" in caught.value.detail
    with silent_after(trickled(chunked=True)) as port:
        assert asyncio.run(get(port)) == b" " * 5 + b"x" * 100


def test_a_reader_s_pause_is_not_the_server_s_silence() -> None:
    """A streamed body its reader leaves unread - the socket paused by surge
    itself - does not time out however long the reader waits, nor does its
    rate count against the server."""
    size = 4 * STREAM_HIGH_WATER

    def all_at_once(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)

    async def get(port: int) -> bytes:
        async with (
            AsyncClient(read_timeout=READ, max_time=60) as client,
            client.stream("GET", f"http://127.0.0.1:{port}/") as response,
        ):
            await asyncio.sleep(5 * READ)  # the reader dawdles
            return await response.aread()

    with silent_after(all_at_once) as port:
        assert asyncio.run(get(port)) == b"x" * size


def answer_the_whole_body(conn: socket.socket) -> None:
    """Read the rest of a chunked request body to its end (the server waits
    for it, silent), then answer."""
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        more = conn.recv(65536)
        if not more:
            return
        data += more
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.mark.parametrize("client", ["async", "sync"])
def test_a_body_source_s_pause_is_not_the_server_s_silence(client: str) -> None:
    """A request body whose source pauses (a generator waiting on its own
    input) while the server waits for it: the wait is the caller's, as a
    reader's pause is, and the read timeout's clock stands still meanwhile
    (before: "no data from the server" after READ s, the server blameless)."""
    pause = 5 * READ

    async def slow() -> AsyncIterator[bytes]:
        yield b"a"
        await asyncio.sleep(pause)
        yield b"b"

    def slow_sync() -> Iterator[bytes]:
        yield b"a"
        time.sleep(pause)
        yield b"b"

    async def post(port: int) -> bytes:
        url = f"http://127.0.0.1:{port}/"
        if client == "async":
            async with AsyncClient(read_timeout=READ, max_time=60) as aclient:
                return (await aclient.post(url, content=slow())).content
        with Client(read_timeout=READ, max_time=60) as sclient:
            response = await asyncio.to_thread(sclient.post, url, content=slow_sync())
            return response.content

    with silent_after(answer_the_whole_body) as port:
        assert asyncio.run(post(port)) == b"ok"


def test_read_timeout_must_be_positive() -> None:
    from surge.errors import UsageError

    with pytest.raises(UsageError):
        AsyncClient(read_timeout=0)
    with pytest.raises(UsageError):
        Timeout(read=-1)
