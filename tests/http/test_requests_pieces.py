"""``iter_content`` on surge's requests adapter gives the pieces stock requests
gives: a chunked body's chunks as they came, each cut to ``chunk_size`` and
never joined (urllib3's read_chunked); any other body ``chunk_size`` bytes at a
time.  Compared piece by piece with stock requests, on bodies sent at once and
trickled, plain and gzip-coded, streamed and not.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import time
from collections.abc import Iterator

import pytest
import requests
from tests.http.raw_server import LoopbackServer, read_request

import surge.requests

SIZES = (7, 5000, 100, 4096, 4097, 1, 9000)
BODY = b"".join(bytes([65 + n % 26]) * size for n, size in enumerate(SIZES))


def _chunked(pieces: list[bytes]) -> list[bytes]:
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]


def _pieces(body: bytes) -> list[bytes]:
    out, at = [], 0
    for size in SIZES:
        out.append(body[at : at + size])
        at += size
    if at < len(body):
        out.append(body[at:])
    return [p for p in out if p]


GZIPPED = gzip.compress(BODY)

#: name -> (head, the parts of the rest, sent one by one)
SHAPES: dict[str, tuple[bytes, list[bytes]]] = {
    "chunked": (b"Transfer-Encoding: chunked", _chunked(_pieces(BODY))),
    "chunked-gzip": (
        b"Transfer-Encoding: chunked\r\nContent-Encoding: gzip",
        _chunked(_pieces(GZIPPED)),
    ),
    "length": (b"Content-Length: %d" % len(BODY), _pieces(BODY)),
    "close": (b"Connection: close", _pieces(BODY)),
}


class Server(LoopbackServer):
    """Answers ``/SHAPE/burst`` with all its parts at once, ``/SHAPE/trickle``
    with a pause between parts; one request per connection."""

    def url(self, shape: str, pace: str) -> str:
        return f"http://127.0.0.1:{self.port}/{shape}/{pace}"

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(20)
        with sock, contextlib.suppress(OSError):
            request = read_request(sock)
            if request is None:
                return
            _, shape, pace = request[0].split(b" ", 2)[1].decode().split("/")
            head, parts = SHAPES[shape]
            start = b"HTTP/1.1 200 OK\r\n%s\r\n\r\n" % head
            if pace == "burst":
                sock.sendall(start + b"".join(parts))
            else:
                sock.sendall(start)
                for part in parts:
                    time.sleep(0.02)
                    sock.sendall(part)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)  # until the client closes


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    served = Server()
    yield served
    served.close()


def _sizes(session: requests.Session, url: str, stream: bool, size: int | None) -> list[int]:
    with session.get(url, stream=stream, timeout=10) as response:
        return [len(piece) for piece in response.iter_content(size)]


@pytest.mark.parametrize("size", [4096, 1000, 1, None])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("pace", ["burst", "trickle"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_iter_content_gives_the_pieces_stock_requests_gives(
    server: Server, shape: str, pace: str, stream: bool, size: int | None
) -> None:
    url = server.url(shape, pace)
    with requests.Session() as stock:
        expected = _sizes(stock, url, stream, size)
    with requests.Session() as session:
        session.mount("http://", surge.requests.Adapter())
        got = _sizes(session, url, stream, size)
    assert sum(got) == len(BODY)
    assert got == expected
