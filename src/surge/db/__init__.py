"""surge.db: pooled DB-API connections for MySQL/MariaDB, PostgreSQL and SQLite.

    import surge.db
    pool = surge.db.pool("mysql://app:secret@127.0.0.1:3306/shop", max_size=8)
    with pool.connection() as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")

    pool = surge.db.async_pool("postgresql://app@127.0.0.1/shop")   # asyncio
    async with pool.connection() as conn:
        await conn.execute("SELECT 1")

Drivers: PyMySQL for MySQL/MariaDB, psycopg 3 for PostgreSQL, sqlite3; for
asyncio, psycopg's AsyncConnection, asyncpg (``driver="asyncpg"``) and aiomysql.  What
the pool does and does not do on each checkout and return: see
:mod:`surge.db._pool` and docs/architecture-rules.md (db/).
"""

from __future__ import annotations

from typing import Any

from surge._keywords import parameters_of
from surge.db._async import AsyncDBPool
from surge.db._drivers import DatabaseURL
from surge.db._pool import DBPool
from surge.db._session import refuse_unknown_options
from surge.errors import PoolClosed, PoolTimeout

__all__ = [
    "AsyncDBPool",
    "DBPool",
    "DatabaseURL",
    "PoolClosed",
    "PoolTimeout",
    "async_pool",
    "pool",
]


@parameters_of(DBPool)
def pool(url: str, **options: Any) -> DBPool:
    """A pool of connections to ``url`` (``mysql://``, ``mariadb://``,
    ``postgresql://``, ``sqlite:///path``); options as :class:`DBPool`."""
    refuse_unknown_options("pool()", options)
    return DBPool(url, **options)


@parameters_of(AsyncDBPool)
def async_pool(url: str, **options: Any) -> AsyncDBPool:
    """The asyncio variant (``postgresql://``: psycopg's AsyncConnection, or
    asyncpg's Connection with ``driver="asyncpg"``; ``mysql://``: aiomysql):
    ``async with pool.connection() as conn:``; options as :class:`DBPool`."""
    refuse_unknown_options("async_pool()", options)
    return AsyncDBPool(url, **options)
