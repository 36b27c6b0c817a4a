"""surge: bulk network I/O for Python that is fast by default and shows where the time goes.

>>> import surge
>>> urls = ["https://httpbin.org/get", "https://httpbin.org/status/404", "not a URL"]
>>> records = list(surge.fetch_all(urls, concurrency=500, max_time=10))  # as they complete
>>> sorted((r["line"], r["status"], r["error"]) for r in records)
[(1, 200, None), (2, 404, None), (3, None, 'invalid_url')]
>>> response = surge.get("https://httpbin.org/get", params={"q": "x"})
>>> response.raise_for_status().json()["args"]
{'q': 'x'}

``surge.fetch`` (async iterator), ``surge.fetch_all`` (plain iterator),
``surge.fetch_on_cluster`` (a plain iterator over a Dask cluster's shards) and
the one-request functions ``surge.get``, ``post``, ``put``, ``patch``,
``delete``, ``head`` and ``request``, and the clients ``surge.Client`` and
``surge.AsyncClient`` (surge.http) are loaded on first use,
so ``import surge`` stays cheap; so are the subpackages (``surge.http``,
``surge.trace``, ...), as attributes of ``surge``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from surge._version import __version__

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, __getattr__ loads them
    from surge.bulk.cluster import fetch_on_cluster
    from surge.bulk.engine import FetchOptions, fetch, fetch_all
    from surge.http.client import AsyncClient
    from surge.http.sync import Client, delete, get, head, patch, post, put, request

__all__ = [
    "AsyncClient",
    "Client",
    "FetchOptions",
    "__version__",
    "delete",
    "fetch",
    "fetch_all",
    "fetch_on_cluster",
    "get",
    "head",
    "patch",
    "post",
    "put",
    "request",
]

_ONE_REQUEST = frozenset({"get", "post", "put", "patch", "delete", "head", "request"})


#: Subpackages reachable as ``surge.http`` etc. after a bare ``import surge``.
_SUBPACKAGES = frozenset(
    {"bulk", "db", "doctor", "errors", "http", "pool", "s3", "sim", "testing", "trace"}
)


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"surge.{name}")
    if name in ("fetch", "fetch_all", "FetchOptions"):
        from surge.bulk import engine

        return getattr(engine, name)
    if name in _ONE_REQUEST or name == "Client":
        from surge.http import sync

        return getattr(sync, name)
    if name == "AsyncClient":
        from surge.http import client

        return client.AsyncClient
    if name == "fetch_on_cluster":
        from surge.bulk import cluster

        return cluster.fetch_on_cluster
    raise AttributeError(f"module 'surge' has no attribute {name!r}")


def __dir__() -> list[str]:
    # dir(surge) and help(surge) list the lazily loaded functions too (pydoc
    # reads them through getattr, which loads them).
    return sorted(set(globals()) | set(__all__))
