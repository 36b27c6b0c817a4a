"""aiohttp with every default and ``asyncio.gather`` over the whole list: the tutorial pattern.

The pattern (the write-up's 58 s for 1,000 sites, and most tutorials)::

    async def fetch(session, url):
        async with session.get(url) as response:
            return await response.read()

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        results = await asyncio.gather(*[fetch(session, u) for u in urls],
                                       return_exceptions=True)

Reproduced faithfully, flaws included: the session's default ``TCPConnector``
allows 100 connections whatever ``concurrency`` says, every request starts at
once, and the ``total`` timeout starts counting when the request is *issued*, so a
request that waits for one of the 100 slots behind slow and hanging hosts times
out before it ever connects.  Those are the hosts this pattern loses.  aiohttp
raises the same ``TimeoutError`` for them as for a server that never answers; a
trace hook (observation only) tells the two apart, and a request that timed out
before it had a connection is reported as ``connect_timeout``.  Plain asyncio
loop; DNS through the default ThreadedResolver (``socket.getaddrinfo`` in a thread).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from types import SimpleNamespace

import aiohttp

from ._common import Outcome, classify, emit, finished, ssl_context, use_sim_dns


async def _fetch(session: aiohttp.ClientSession, url: str, tls: ssl.SSLContext | bool) -> Outcome:
    started = time.perf_counter()
    state: dict[str, bool] = {}
    try:
        async with session.get(url, ssl=tls, trace_request_ctx=state) as response:
            await response.read()
            return emit(finished(url, started, status=response.status))
    except Exception as exc:
        error = classify(exc)
        if error == "read_timeout" and not state.get("connected"):
            error = "connect_timeout"  # it timed out waiting for a connector slot
        return emit(finished(url, started, error=error))


async def _connected(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    context.trace_request_ctx["connected"] = True


def _connection_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(_connected)
    trace.on_connection_reuseconn.append(_connected)
    return trace


async def _main(urls: list[str], timeout: float, tls: ssl.SSLContext | bool) -> list[Outcome]:
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout), trace_configs=[_connection_trace()]
    ) as session:
        return await asyncio.gather(*[_fetch(session, url, tls) for url in urls])


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch every URL at once behind aiohttp's defaults; one outcome per URL, in order."""
    del concurrency  # the tutorial pattern has none of its own: the connector's 100 rules
    use_sim_dns()
    context = ssl_context(cafile)
    return asyncio.run(_main(urls, timeout, context if context is not None else True))
