"""pyreqwest (Rust: reqwest + hyper + rustls on tokio): one async client, bounded gather.

The pattern (pyreqwest's README, with its ``max_connections`` bound and the
usual semaphore so that a request's timeout starts when it may run)::

    client = (ClientBuilder().max_connections(concurrency)
              .timeout(timedelta(seconds=timeout)).build())
    semaphore = asyncio.Semaphore(concurrency)
    async with client:
        async def fetch(url):
            async with semaphore:
                response = await client.get(url).build().send()
                return response.status, await response.bytes()
        results = await asyncio.gather(*(fetch(u) for u in urls))

``timeout`` is reqwest's total per request (connect to last body byte),
redirects followed (reqwest's default: up to 10).  reqwest resolves names in
Rust, never through Python, so the client gets a static ``resolve`` entry for
each ``*.sim`` host the URLs and their redirects reach; other names use DNS.  TLS:
the simulated web's CA is added with ``add_root_certificate_pem``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from pyreqwest.client import Client, ClientBuilder
from pyreqwest.exceptions import DecodeError, PoolTimeoutError, RedirectError, RequestTimeoutError

from ._common import Outcome, classify, emit, finished, sim_names


def _error_class(exc: Exception) -> str:
    """surge's class for a pyreqwest exception.

    pyreqwest's own classes are coarse: any failure before the response head is a
    ``ConnectError``, a reset after the request was sent included, and a total
    timeout that strikes while waiting for the head is a ``ConnectTimeoutError``.
    The chain of Rust causes it carries (in ``details`` and the message) says which
    phase failed (``client error (Connect)`` vs ``(SendRequest)``) and why.
    """
    message = str(exc).lower()
    if isinstance(exc, RedirectError):
        return "too_many_redirects"
    if isinstance(exc, PoolTimeoutError):
        return "connect_timeout"
    if isinstance(exc, RequestTimeoutError):
        return "connect_timeout" if "client error (connect)" in message else "read_timeout"
    if any(word in message for word in ("certificate", "tls", "handshake")):
        return "tls_error"
    if "refused" in message:
        return "connect_refused"
    if "dns error" in message or "failed to lookup" in message:
        return "dns_error"
    if any(w in message for w in ("reset by peer", "closed before", "broken pipe", "incomplete")):
        return "connection_reset"
    if isinstance(exc, DecodeError) or "invalid" in message or "parse" in message:
        return "protocol_error"
    return classify(exc)


def _client(urls: list[str], concurrency: int, timeout: float, cafile: str | None) -> Client:
    builder = ClientBuilder().max_connections(concurrency).timeout(timedelta(seconds=timeout))
    for host, port in sim_names(urls):
        builder = builder.resolve(host, "127.0.0.1", port)
    if cafile is not None:
        with open(cafile, "rb") as ca:
            builder = builder.add_root_certificate_pem(ca.read())
    return builder.build()


async def _main(
    urls: list[str], concurrency: int, timeout: float, cafile: str | None
) -> list[Outcome]:
    semaphore = asyncio.Semaphore(concurrency)
    async with _client(urls, concurrency, timeout, cafile) as client:

        async def fetch(url: str) -> Outcome:
            async with semaphore:
                started = time.perf_counter()
                try:
                    response = await client.get(url).build().send()
                    await response.bytes()
                except Exception as exc:
                    return emit(finished(url, started, error=_error_class(exc)))
                return emit(finished(url, started, status=response.status))

        return await asyncio.gather(*(fetch(url) for url in urls))


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls``, ``concurrency`` at a time; one outcome per URL, in order."""
    return asyncio.run(_main(urls, concurrency, timeout, cafile))
