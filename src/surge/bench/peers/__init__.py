"""Peer clients: how people fetch many URLs from Python today, for surge to be measured against.

Each peer reproduces one pattern from a write-up or from its library's own docs,
faithfully, defaults and flaws included, and reports one :class:`Outcome` per URL
so that the caller can count the hosts it lost against
:func:`surge.sim.behaviour`'s expectations.  Every peer module exposes::

    run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None)
        -> list[Outcome]

and :func:`surge.bench.peers.runner.run_peer` runs one in a fresh process of its
own (measuring its wall time and CPU, under a hard time limit): grequests
monkey-patches the standard library when it is imported, and no two peers should
share warmed-up state.

This module imports nothing heavy: a child process imports it before its peer, and
grequests must monkey-patch before ``ssl`` is imported.
"""

from __future__ import annotations

from ._common import ERROR_CLASSES, Outcome

#: Peer name -> (module in this package, distributions it needs), in the order a
#: table lists them (``raw_floor`` is a reference, not a peer: :data:`REFERENCES`).
#: Two modules are not named after their library so that they
#: can never shadow it (``import grequests`` from a file named grequests.py).
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "requests_seq": ("requests_seq", ("requests",)),
    "requests_threads": ("requests_threads", ("requests",)),
    "multiprocessing_pool": ("multiprocessing_pool", ("requests",)),
    "grequests": ("grequests_map", ("grequests", "gevent", "requests")),
    "aiohttp_gather": ("aiohttp_gather", ("aiohttp",)),
    "aiohttp_bounded": ("aiohttp_bounded", ("aiohttp",)),
    "httpx_async": ("httpx_async", ("httpx",)),
    "pycurl_multi": ("pycurl_multi", ("pycurl",)),
    "pyreqwest": ("pyreqwest_async", ("pyreqwest",)),
    "raw_floor": ("raw_floor", ("httptools", "uvloop")),
    "surge": ("surge_fetch", ("httptools",)),
}

#: Rows that measure the machine, not a way people fetch: never "the best peer".
REFERENCES: frozenset[str] = frozenset({"raw_floor"})

__all__ = ["ERROR_CLASSES", "PEERS", "REFERENCES", "Outcome"]
