"""Fixtures for the simulated web's tests: one server per session, on a thread,
and a small client made of ``http.client`` and raw sockets (nothing of surge's)."""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.request
from collections.abc import Iterator

import pytest

from surge.sim import SimInfo, patch_getaddrinfo

#: Every wait in these tests is bounded by this (seconds), unless a test says less.
TIMEOUT = 3.0


class SimClient:
    """Requests to the simulated web by host name, over 127.0.0.1 only."""

    def __init__(self, info: SimInfo) -> None:
        self.info = info
        self.sockets: list[socket.socket] = []

    def get(
        self,
        host: str,
        path: str = "/",
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        timeout: float = TIMEOUT,
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """One request on the plain port; the response and its (undecoded) body."""
        connection = http.client.HTTPConnection("127.0.0.1", self.info.http_port, timeout=timeout)
        try:
            connection.request(
                method, path, headers={"Host": f"{host}:{self.info.http_port}", **(headers or {})}
            )
            response = connection.getresponse()
            return response, response.read()
        finally:
            connection.close()

    def send(
        self, request: bytes, *, timeout: float = TIMEOUT, tls_port: bool = False
    ) -> socket.socket:
        """A plain socket to the simulated web that has sent ``request``."""
        port = self.info.https_port if tls_port else self.info.http_port
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sockets.append(sock)  # closed when the test ends
        sock.sendall(request)
        return sock

    @staticmethod
    def request(host: str, path: str = "/", headers: str = "", method: str = "GET") -> bytes:
        return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode()

    @staticmethod
    def read_until_close(sock: socket.socket) -> bytes:
        """Everything the server sends until it closes (socket.timeout if it does not)."""
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
        return b"".join(chunks)


def urlopen(
    url: str, *, context: ssl.SSLContext | None = None, timeout: float = TIMEOUT
) -> http.client.HTTPResponse:
    """urllib's urlopen, but never through a proxy from the environment: these
    tests contact 127.0.0.1 and nothing else."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    response: http.client.HTTPResponse = opener.open(url, timeout=timeout)
    return response


@pytest.fixture
def client(sim: SimInfo) -> Iterator[SimClient]:
    client = SimClient(sim)
    yield client
    for sock in client.sockets:
        sock.close()


@pytest.fixture
def sim_urlopen() -> Iterator[object]:
    """:func:`urlopen`, with ``*.sim`` resolving to 127.0.0.1 for the duration of a test."""
    unpatch = patch_getaddrinfo()
    try:
        yield urlopen
    finally:
        unpatch()
