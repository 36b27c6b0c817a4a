"""Request bodies streamed from files and iterators: framed as curl frames them
(a file with its Content-Length, an iterator chunked), echoed byte for byte by a
real httpbin, re-sent on a 307 when they can be, and written no faster than the
server reads."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from surge.errors import StreamConsumed
from surge.http import AsyncClient, Client

TinyServer = Callable[[Any], AbstractAsyncContextManager[int]]


def curl_echo(url: str, path: Path) -> dict[str, Any]:
    """What httpbin saw of curl's upload of the same file (the reference)."""
    import json

    if shutil.which("curl") is None:
        pytest.fail("curl is needed as the reference client")
    out = subprocess.run(
        ["curl", "-sS", "--data-binary", f"@{path}", "-H", "Content-Type: text/plain", url],
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def test_a_file_is_sent_with_its_length_as_curl_sends_it(httpbin: str, tmp_path: Path) -> None:
    path = tmp_path / "body.txt"
    path.write_text("".join(f"line {i}\n" for i in range(20_000)))  # ~200 KB
    expected = curl_echo(f"{httpbin}/anything", path)
    with Client() as client, path.open("rb") as f:
        f.seek(5)  # from where the file stands, as curl's -T does not; stated
        echoed = client.post(
            f"{httpbin}/anything", content=f, headers={"Content-Type": "text/plain"}
        ).json()
    assert echoed["data"] == expected["data"][5:]
    assert echoed["headers"]["Content-Length"] == str(path.stat().st_size - 5)
    assert "Transfer-Encoding" not in echoed["headers"]


def test_iterators_are_sent_chunked(httpbin: str) -> None:
    def parts() -> Iterator[bytes]:
        for i in range(100):
            yield b"part %d;" % i

    async def aparts() -> AsyncIterator[bytes]:
        for i in range(100):
            await asyncio.sleep(0)
            yield b"part %d;" % i

    expected = "".join(f"part {i};" for i in range(100))
    with Client() as client:
        sync = client.post(f"{httpbin}/anything", content=parts()).json()
        also = client.post(f"{httpbin}/anything", content=[b"a", bytearray(b"b"), b""]).json()
    assert sync["data"] == expected
    assert sync["headers"]["Transfer-Encoding"] == "chunked"
    assert also["data"] == "ab"

    async def run() -> dict[str, Any]:
        async with AsyncClient() as client:
            response = await client.put(f"{httpbin}/anything", content=aparts())
            return response.json()  # type: ignore[no-any-return]

    echoed = asyncio.run(run())
    assert echoed["data"] == expected and echoed["method"] == "PUT"


def test_a_307_resends_a_file_and_refuses_an_iterator(httpbin: str, tmp_path: Path) -> None:
    path = tmp_path / "body.bin"
    path.write_bytes(b"0123456789" * 1000)
    moved = f"{httpbin}/redirect-to?url=/anything&status_code=307"
    with Client(follow_redirects=True) as client, path.open("rb") as f:
        again = client.post(moved, content=f).json()
        assert again["data"] == path.read_text() and again["method"] == "POST"
        with pytest.raises(StreamConsumed, match="307 redirect"):
            client.post(moved, content=iter([b"once"]))
        # A 302 after a POST is a GET without the body: nothing to send again.
        gone = client.post(
            f"{httpbin}/redirect-to?url=/anything&status_code=302", content=iter([b"x"])
        )
        assert gone.json()["method"] == "GET" and gone.json()["data"] == ""


@pytest.mark.parametrize("client", ["async", "sync"])
async def test_the_body_is_written_no_faster_than_it_is_read(
    tiny_server: TinyServer, client: str
) -> None:
    """A server that reads nothing for a while: the client stops reading the
    body's source once the socket's buffers are full (without: all 64 MiB).
    The synchronous client reads a plain generator in the calling thread, one
    chunk ahead of the socket (test_callers_code.py): the same bound holds."""
    produced = 0
    server_reading = asyncio.Event()
    seen_at_start: list[int] = []
    chunk = b"z" * 65536

    async def body() -> AsyncIterator[bytes]:
        nonlocal produced
        for _ in range(1024):  # 64 MiB
            produced += len(chunk)
            yield chunk

    def plain_body() -> Iterator[bytes]:
        nonlocal produced
        for _ in range(1024):
            produced += len(chunk)
            yield chunk

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(0.5)  # not reading: the client must wait
        seen_at_start.append(produced)
        server_reading.set()
        total = 0
        while total < 64 * 1024 * 1024:
            line = await reader.readuntil(b"\r\n")
            size = int(line.strip(), 16)
            if size == 0:
                break
            await reader.readexactly(size + 2)
            total += size
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(str(total)))
        writer.write(str(total).encode())
        await writer.drain()
        writer.close()

    async with tiny_server(handler) as port:
        url = f"http://127.0.0.1:{port}/"
        if client == "async":
            async with AsyncClient(max_time=60) as aclient:
                response = await aclient.post(url, content=body())
        else:
            with Client(max_time=60) as sclient:
                response = await asyncio.to_thread(sclient.post, url, content=plain_body())
    assert response.text == str(64 * 1024 * 1024)
    assert seen_at_start[0] < 24 * 1024 * 1024  # socket buffers' worth, not the body


def test_text_files_and_other_things_are_usage_errors(httpbin: str, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("x")
    with Client() as client, path.open() as text:
        with pytest.raises(ValueError, match="binary mode"):
            client.post(f"{httpbin}/anything", content=text)
        with pytest.raises(ValueError, match="gives bytes, not str"):
            client.post(f"{httpbin}/anything", content=iter(["text"]))
        with pytest.raises(ValueError, match="content= takes bytes"):
            client.post(f"{httpbin}/anything", content=3)
        # The client goes on: the connection the bad body was on is not reused.
        assert client.get(f"{httpbin}/get").status_code == 200


@pytest.mark.parametrize("kind", ["plain", "tempfile", "gzip", "bytesio"])
def test_every_kind_of_binary_file_is_sent_whole_with_its_length(
    httpbin: str, tmp_path: Path, kind: str
) -> None:
    """The bytes a file reads, whatever holds them: ``gzip.open``'s descriptor
    is the compressed file's, whose size is not what it reads (a Content-Length
    from it sent 1,400 of 201,000 bytes, and the server answered 200)."""
    import gzip
    import io
    import tempfile

    data = bytes(range(256)) * 40 + b"a" * 200_000
    path = tmp_path / "body.bin"
    if kind == "gzip":
        with gzip.open(path, "wb") as out:
            out.write(data)
    else:
        path.write_bytes(data)
    opener: Any = {
        "plain": lambda: path.open("rb"),
        "tempfile": lambda: _filled(tempfile.NamedTemporaryFile(dir=tmp_path), data),  # noqa: SIM115
        "gzip": lambda: gzip.open(path, "rb"),  # noqa: SIM115
        "bytesio": lambda: io.BytesIO(data),
    }[kind]
    with Client() as client, opener() as f:
        echoed = client.post(f"{httpbin}/anything", content=f).json()
    assert echoed["headers"].get("Content-Length") == str(len(data)), echoed["headers"]
    assert len(echoed["data"]) > 0 and "Transfer-Encoding" not in echoed["headers"]


def _filled(file: Any, data: bytes) -> Any:
    file.write(data)
    file.seek(0)
    return file
