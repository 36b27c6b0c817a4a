"""surge.pool: one O(1) pool core with thread and asyncio front-ends.

    from surge.pool import Pool, AsyncPool, KeyedPool, AsyncKeyedPool, PoolTimeout

``Pool`` (threads) and ``AsyncPool`` (asyncio) pool resources of one kind;
``KeyedPool`` and ``AsyncKeyedPool`` keep a sub-pool per key (an HTTP client's
(scheme, host, port)) under a global limit.  All four share the pure
bookkeeping in ``surge.pool._core``, whose every operation is O(1).  The
names load on first use (PEP 562): the HTTP client takes the asyncio front-end
only, surge.db's sync pool the thread one only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, __getattr__ loads them
    from surge.errors import PoolClosed, PoolError, PoolTimeout
    from surge.pool._async import AsyncKeyedPool, AsyncPool
    from surge.pool._core import PoolCore
    from surge.pool._keyed_core import KeyedCore
    from surge.pool._sync import KeyedPool, Pool

__all__ = [
    "AsyncKeyedPool",
    "AsyncPool",
    "KeyedCore",
    "KeyedPool",
    "Pool",
    "PoolClosed",
    "PoolCore",
    "PoolError",
    "PoolTimeout",
]

#: name -> the module it is loaded from on first use.
_EXPORTS = {
    "AsyncKeyedPool": "surge.pool._async",
    "AsyncPool": "surge.pool._async",
    "KeyedCore": "surge.pool._keyed_core",
    "KeyedPool": "surge.pool._sync",
    "Pool": "surge.pool._sync",
    "PoolClosed": "surge.errors",
    "PoolCore": "surge.pool._core",
    "PoolError": "surge.errors",
    "PoolTimeout": "surge.errors",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'surge.pool' has no attribute {name!r}")
