"""Streamed responses (``client.stream(...)``): the body read as it arrives, with
curl as the reference for the bytes, and memory bounded by the read-ahead, not
by the body."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import subprocess
import zlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from surge.errors import BodyTooLarge, ResponseNotRead, StreamConsumed
from surge.http import AsyncClient, Client
from surge.http.connection import STREAM_HIGH_WATER
from surge.http.decoding import STEP

TinyServer = Callable[[Any], AbstractAsyncContextManager[int]]


def curl_bytes(url: str) -> bytes:
    if shutil.which("curl") is None:
        pytest.fail("curl is needed as the reference client")
    return subprocess.run(
        ["curl", "-sS", "--compressed", url], capture_output=True, timeout=30, check=True
    ).stdout


async def test_streamed_bytes_are_curls(httpbin: str) -> None:
    url = f"{httpbin}/stream-bytes/100000?seed=7&chunk_size=4096"
    expected = curl_bytes(url)
    async with AsyncClient() as client, client.stream("GET", url) as response:
        assert response.status_code == 200
        with pytest.raises(ResponseNotRead):
            _ = response.content
        chunks = [chunk async for chunk in response.aiter_bytes()]
        with pytest.raises(StreamConsumed):
            _ = [chunk async for chunk in response.aiter_bytes()]
    assert len(expected) == 100_000
    assert b"".join(chunks) == expected
    assert len(chunks) > 1  # it came in pieces, not as one body


async def test_lines_and_text(httpbin: str) -> None:
    async with AsyncClient() as client:
        async with client.stream("GET", f"{httpbin}/stream/25") as response:
            lines = [line async for line in response.aiter_lines()]
        async with client.stream("GET", f"{httpbin}/encoding/utf8") as response:
            text = "".join([piece async for piece in response.aiter_text()])
    assert [json.loads(line)["id"] for line in lines] == list(range(25))
    assert text == curl_bytes(f"{httpbin}/encoding/utf8").decode("utf-8")


async def test_gzip_decoded_and_raw(httpbin: str) -> None:
    async with AsyncClient() as client:
        async with client.stream("GET", f"{httpbin}/gzip") as response:
            decoded = b"".join([c async for c in response.aiter_bytes()])
        async with client.stream("GET", f"{httpbin}/gzip") as response:
            raw = b"".join([c async for c in response.aiter_raw()])
    assert json.loads(decoded)["gzipped"] is True
    assert raw[:2] == b"\x1f\x8b" and gzip.decompress(raw) == decoded


async def test_a_read_body_gives_the_connection_back_and_an_unread_one_closes_it(
    httpbin: str,
) -> None:
    async with AsyncClient() as client:
        async with client.stream("GET", f"{httpbin}/bytes/1000") as response:
            assert len(await response.aread()) == 1000
            assert response.content == response.body and response.is_closed
        await client.get(f"{httpbin}/get")
        assert client.stats()["created"] == 1  # the streamed one's connection, reused
        # /drip sends a byte every 0.2 s: the block ends with the body unfinished.
        async with client.stream("GET", f"{httpbin}/drip?duration=1&numbytes=5") as response:
            first = await anext(response.aiter_raw())
            assert first == b"*"
        assert response.is_closed  # left unfinished: closed, not pooled
        await client.get(f"{httpbin}/get")
        assert client.stats()["created"] == 2


async def test_redirects_are_followed_and_only_the_last_is_streamed(httpbin: str) -> None:
    async with (
        AsyncClient(follow_redirects=True) as client,
        client.stream("GET", f"{httpbin}/redirect/3") as response,
    ):
        body = await response.aread()
    assert response.status_code == 200 and response.redirects == 3
    assert json.loads(body)["url"].endswith("/get")


async def test_a_slow_reader_holds_the_read_ahead_not_the_body(tiny_server: TinyServer) -> None:
    """8 MiB read slowly: the connection stops reading past the high-water mark,
    so what waits unread stays near it (without: the whole body)."""
    size = 8 * 1024 * 1024

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for _ in range(size // 65536):
            writer.write(b"x" * 65536)
            await writer.drain()
        writer.close()

    held = []
    async with (
        tiny_server(handler) as port,
        AsyncClient(body_cap=1024 * 1024) as client,
        client.stream("GET", f"http://127.0.0.1:{port}/") as response,
    ):
        assert response._stream is not None
        wire = response._stream.wire
        total = 0
        async for chunk in response.aiter_raw():
            total += len(chunk)
            held.append(wire.buffered)
            await asyncio.sleep(0.002)
    assert total == size  # past the 1 MiB body cap: it is a read-whole cap
    # One socket read (at most 256 KiB on asyncio) may land past the mark.
    assert max(held) <= STREAM_HIGH_WATER + 256 * 1024


async def test_read_whole_is_capped(tiny_server: TinyServer) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" + b"y" * 200_000)
        await writer.drain()
        writer.close()

    async with (
        tiny_server(handler) as port,
        AsyncClient(body_cap=100_000) as client,
        client.stream("GET", f"http://127.0.0.1:{port}/") as response,
    ):
        with pytest.raises(BodyTooLarge):
            await response.aread()


async def test_a_bomb_streams_in_bounded_pieces(tiny_server: TinyServer) -> None:
    """64 MiB of zeros in ~64 KiB of gzip: every decoded piece is at most STEP
    (under a body cap that lets the 64 MiB through)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    bomb = compressor.compress(bytes(64 * 1024 * 1024)) + compressor.flush()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
            % (len(bomb), bomb)
        )
        await writer.drain()
        writer.close()

    async with (
        tiny_server(handler) as port,
        AsyncClient(body_cap=64 * 1024 * 1024) as client,
        client.stream("GET", f"http://127.0.0.1:{port}/") as response,
    ):
        sizes = [len(piece) async for piece in response.aiter_bytes()]
    assert sum(sizes) == 64 * 1024 * 1024
    assert max(sizes) <= STEP


def test_the_sync_client_streams(httpbin: str) -> None:
    with Client() as client:
        with client.stream("GET", f"{httpbin}/stream/5") as response:
            lines = response.iter_lines()
            first = next(lines)
            # Another request inside the block: the loop is free between steps.
            assert client.get(f"{httpbin}/get").status_code == 200
            rest = list(lines)
        assert json.loads(first)["id"] == 0 and len(rest) == 4
        with client.stream("GET", f"{httpbin}/bytes/5000?seed=3") as response:
            body = response.read()
        assert body == curl_bytes(f"{httpbin}/bytes/5000?seed=3")
        assert list(response.iter_bytes()) == [body]  # read: iterates what was read
