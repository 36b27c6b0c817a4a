"""surge itself, run as the other peers are: its bulk engine in a process of its own.

The same as ``surge fetch URLS -c CONCURRENCY --max-time TIMEOUT -L
--resolve '*.sim:*:127.0.0.1'``: redirects are followed (as requests, aiohttp
and httpx do by default), ``*.sim`` goes to loopback through surge's own
resolver overrides, and the timeout is a total per request that starts when the
request starts its own network work.
"""

from __future__ import annotations

from ._common import Outcome, emit


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` with surge's engine; one outcome per URL, in order."""
    from surge.bulk.engine import FetchOptions, as_items
    from surge.bulk.engine import run as run_engine
    from surge.loops import new_event_loop

    opts = FetchOptions(
        concurrency=concurrency,
        max_time=timeout,
        connect_timeout=min(timeout, 10.0),
        follow_redirects=True,
        resolve=["*.sim:*:127.0.0.1"],
        cafile=cafile,
    )
    outcomes: list[Outcome | None] = [None] * len(urls)

    async def main() -> None:
        async with opts.client() as client:
            async for record in run_engine(client, as_items(urls), opts):
                error = record["error"]
                # An outcome is a status or an error, never both (a head that arrived
                # before a stalled body counts as the error, as for every peer).
                outcome = Outcome(
                    record["url"],
                    record["status"] if error is None else None,
                    error,
                    record["elapsed_ms"],
                )
                outcomes[record["line"] - 1] = emit(outcome)

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return [o for o in outcomes if o is not None]
