"""httpx's ``AsyncClient`` with a connection limit and a semaphore around ``gather``.

The pattern (httpx's docs on ``Limits``, and the semaphore recipe that goes with
``asyncio.gather``)::

    limits = httpx.Limits(max_connections=concurrency)
    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=timeout,
                                 follow_redirects=True) as client:
        async def fetch(url):
            async with semaphore:
                return await client.get(url)
        results = await asyncio.gather(*(fetch(u) for u in urls))

``timeout`` is httpx's: connect, read, write and pool-wait each, not a total.
``follow_redirects=True`` because httpx does not follow redirects by default and
every other peer does (a 301 is not the page).  Plain asyncio loop (httpx runs on
anyio, whose asyncio backend resolves with ``socket.getaddrinfo``).
"""

from __future__ import annotations

import asyncio
import ssl
import time

import httpx

from ._common import Outcome, classify, emit, finished, ssl_context, use_sim_dns


async def _main(
    urls: list[str], concurrency: int, timeout: float, verify: ssl.SSLContext | bool
) -> list[Outcome]:
    semaphore = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(
        limits=limits, timeout=timeout, verify=verify, follow_redirects=True
    ) as client:

        async def fetch(url: str) -> Outcome:
            async with semaphore:
                started = time.perf_counter()
                try:
                    response = await client.get(url)
                except Exception as exc:
                    return emit(finished(url, started, error=classify(exc)))
                return emit(finished(url, started, status=response.status_code))

        return await asyncio.gather(*(fetch(url) for url in urls))


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls``, ``concurrency`` at a time; one outcome per URL, in order."""
    use_sim_dns()
    context = ssl_context(cafile)
    return asyncio.run(_main(urls, concurrency, timeout, context if context is not None else True))
