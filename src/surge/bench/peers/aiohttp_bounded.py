"""aiohttp done right: a fixed set of workers, a connector sized to match, per-request timeouts.

The pattern (aiohttp's docs on limiting connections, the worker-queue recipe of
asyncio's ``Queue`` docs)::

    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=8)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker():
            while (url := next_url()) is not None:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                    await r.read()
        await asyncio.gather(*(worker() for _ in range(concurrency)))

No request is issued before a worker (and so a connection slot) is free for it,
so its timeout never counts a wait in a queue: the fix for what
:mod:`aiohttp_gather` loses.  On uvloop when it is importable.

DNS: uvloop resolves in libuv and never calls ``socket.getaddrinfo``, so the
connector gets aiohttp's own ThreadedResolver bound to a shim that does what
asyncio's loop does -- ``socket.getaddrinfo`` in the default executor -- where
:func:`surge.sim.patch_getaddrinfo` sees it.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from ._common import Outcome, classify, emit, finished, ssl_context, use_sim_dns

#: At most this many connections to one host (a polite crawler's bound).
LIMIT_PER_HOST = 8


class _ExecutorGetaddrinfo:
    """The two loop methods aiohttp's ThreadedResolver calls, answered as asyncio's
    default loop answers them (``socket.getaddrinfo`` on a thread), also on uvloop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    async def getaddrinfo(
        self,
        host: str,
        port: int,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[Any]:
        call = functools.partial(socket.getaddrinfo, host, port, family, type, proto, flags)
        return await self._loop.run_in_executor(None, call)

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int = 0) -> tuple[str, str]:
        return await self._loop.getnameinfo(sockaddr, flags)


def _resolver() -> aiohttp.ThreadedResolver:
    resolver = aiohttp.ThreadedResolver()
    resolver._loop = _ExecutorGetaddrinfo(asyncio.get_running_loop())  # type: ignore[assignment]
    return resolver


async def _main(
    urls: list[str], concurrency: int, timeout: float, tls: ssl.SSLContext | bool
) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(urls)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(urls)):
        queue.put_nowait(index)
    per_request = aiohttp.ClientTimeout(total=timeout)
    connector = aiohttp.TCPConnector(
        limit=concurrency, limit_per_host=LIMIT_PER_HOST, resolver=_resolver(), ssl=tls
    )
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                url = urls[index]
                started = time.perf_counter()
                try:
                    async with session.get(url, timeout=per_request) as response:
                        await response.read()
                        outcome = finished(url, started, status=response.status)
                except Exception as exc:
                    outcome = finished(url, started, error=classify(exc))
                outcomes[index] = emit(outcome)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(urls)))))
    return [outcome for outcome in outcomes if outcome is not None]


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` with ``concurrency`` workers; one outcome per URL, in order."""
    use_sim_dns()
    context = ssl_context(cafile)
    tls: ssl.SSLContext | bool = context if context is not None else True
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(_main(urls, concurrency, timeout, tls))
