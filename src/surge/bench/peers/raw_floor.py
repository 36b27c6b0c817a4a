"""The floor: the least a Python client on uvloop can do per request - a reference, not a tool.

Not a peer that anyone uses: ~80 lines of asyncio ``Protocol`` on uvloop with
httptools (llhttp) and nothing else - no pool (a new connection per hop, the
sim's hosts are all different anyway), no resolver (``*.sim`` is 127.0.0.1, any
other name is refused), no body decoding, no per-phase timings, no record
building, no ``Accept-Encoding`` (so no decompression either); one
``asyncio.timeout`` per URL around every hop (a slow connect counts as a read
timeout), redirects followed up to 10 hops; a body delimited by the close is a
reset (httptools has no way to finish one; the simulated web sends none).
The issue that set surge's targets measured such a client ("~100 lines,
uvloop + httptools") as the fastest Python can go; the benchmark
runs it beside the real peers so that a target below what this reaches on the
machine at hand shows as such, in the same run.  It is never counted as "the
best peer".
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

import httptools

from ._common import Outcome, classify, emit, finished, ssl_context

MAX_HOPS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class TooManyRedirects(Exception):
    """More than :data:`MAX_HOPS` redirects (``classify`` knows the name)."""


class _Exchange(asyncio.Protocol):
    """One request and its response on a connection of its own."""

    def __init__(self, done: asyncio.Future[int]) -> None:
        self.done = done
        self.parser = httptools.HttpResponseParser(self)
        self.location: bytes | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(e)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 8 and name.lower() == b"location":
            self.location = value

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200 and not self.done.done():  # a 1xx head is not the response
            self.done.set_result(status)

    def connection_lost(self, exc: Exception | None) -> None:
        # httptools cannot be told the stream ended, so a body delimited by the
        # close counts as a reset here (the simulated web never sends one).
        if not self.done.done():
            self._fail(exc or ConnectionResetError("connection closed before the response"))

    def _fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()


async def _get(loop: asyncio.AbstractEventLoop, url: str, tls: ssl.SSLContext | None) -> int:
    for _ in range(MAX_HOPS + 1):
        parts = urlsplit(url)
        host = parts.hostname or ""
        if not host.endswith(".sim"):
            raise ConnectionRefusedError(f"{host}: the floor only talks to *.sim")
        https = parts.scheme == "https"
        done: asyncio.Future[int] = loop.create_future()
        transport, exchange = await loop.create_connection(
            functools.partial(_Exchange, done),
            "127.0.0.1",
            parts.port or (443 if https else 80),
            ssl=(tls or ssl.create_default_context()) if https else None,
            server_hostname=host if https else None,
        )
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        transport.write(
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode()
        )
        try:
            status = await done
        finally:
            transport.abort()
        if status not in _REDIRECTS or exchange.location is None:
            return status
        url = urljoin(url, exchange.location.decode("latin-1"))
    raise TooManyRedirects(f"more than {MAX_HOPS} redirects")


async def _main(
    urls: list[str], concurrency: int, timeout: float, tls: ssl.SSLContext | None
) -> list[Outcome]:
    loop = asyncio.get_running_loop()
    outcomes: list[Outcome | None] = [None] * len(urls)
    indexes = iter(range(len(urls)))

    async def worker() -> None:
        for index in indexes:
            url = urls[index]
            started = time.perf_counter()
            try:
                async with asyncio.timeout(timeout):
                    outcome = finished(url, started, status=await _get(loop, url, tls))
            except Exception as exc:
                outcome = finished(url, started, error=classify(exc))
            outcomes[index] = emit(outcome)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(urls)))))
    return [outcome for outcome in outcomes if outcome is not None]


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` with ``concurrency`` workers; one outcome per URL, in order."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_main(urls, concurrency, timeout, ssl_context(cafile)))
