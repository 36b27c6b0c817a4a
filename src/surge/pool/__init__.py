"""surge.pool: one O(1) pool core with thread and asyncio front-ends.

    from surge.pool import Pool, AsyncPool, KeyedPool, AsyncKeyedPool, PoolTimeout

``Pool`` (threads) and ``AsyncPool`` (asyncio) pool resources of one kind;
``KeyedPool`` and ``AsyncKeyedPool`` keep a sub-pool per key (an HTTP client's
(scheme, host, port)) under a global limit.  All four share the pure
bookkeeping in ``surge.pool._core``, whose every operation is O(1).
"""

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
