"""surge: bulk network I/O for Python that is fast by default and shows where the time goes.

    import surge
    for record in surge.fetch_all(["https://example.com/", ...], concurrency=500):
        print(record["url"], record["status"], record["error"])

``surge.fetch`` (async iterator), ``surge.fetch_all`` (plain iterator) and
``surge.fetch_on_cluster`` (a plain iterator over a Dask cluster's shards) are
loaded on first use, so ``import surge`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from surge._version import __version__

__all__ = ["__version__", "fetch", "fetch_all", "fetch_on_cluster"]


def __getattr__(name: str) -> Any:
    if name in ("fetch", "fetch_all"):
        from surge.bulk import engine

        return getattr(engine, name)
    if name == "fetch_on_cluster":
        from surge.bulk import cluster

        return cluster.fetch_on_cluster
    raise AttributeError(f"module 'surge' has no attribute {name!r}")
