"""surge.db.async_pool against real servers - psycopg's AsyncConnection on
PostgreSQL, aiomysql on MariaDB: the same round-trip counts and restart
behaviour as the thread pool."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pymysql
import pytest
from tests.db._sql import asettle

import surge.db
from surge.db import AsyncDBPool, PoolTimeout
from surge.errors import UsageError
from surge.testing import DBServer

GONE_ERRORS = (psycopg.OperationalError, pymysql.err.OperationalError)


async def select(conn: Any, sql: str = "SELECT 1") -> list[Any]:
    if hasattr(conn, "execute"):  # psycopg
        cur = await conn.execute(sql)
        rows = await cur.fetchall() if cur.description else []
    else:  # aiomysql
        cur = await conn.cursor()
        await cur.execute(sql)
        rows = await cur.fetchall() if cur.description else []
        await cur.close()
    return [tuple(row) for row in rows]


async def warm(pool: AsyncDBPool, n: int = 1) -> None:
    conns = [await pool.acquire() for _ in range(n)]
    for conn in conns:
        await pool.release(conn)


async def test_a_busy_pool_costs_the_query_and_nothing_else(db: tuple[DBServer, Any]) -> None:
    server, counter = db
    async with surge.db.async_pool(server.url, autocommit=True) as pool:
        await warm(pool)
        await asettle(pool)
        counter.mark(pool)
        for _ in range(30):
            async with pool.connection() as conn:
                assert await select(conn) == [(1,)]
        await asettle(pool)
        counts = counter.since(pool)
    assert (counts.statements, counts.rollbacks, counts.pings, counts.connects) == (30, 0, 0, 0)
    assert counts.resets == 30  # written at return, read behind the next command


@pytest.mark.filterwarnings("ignore:Unknown table")  # aiomysql's note for DROP ... IF EXISTS
@pytest.mark.parametrize("reset", ["none", "session"])
async def test_rollback_only_when_a_transaction_is_open(
    db: tuple[DBServer, Any], reset: str
) -> None:
    server, counter = db
    async with surge.db.async_pool(server.url, max_size=1, reset=reset) as pool:
        async with pool.connection() as conn:
            await select(conn, "DROP TABLE IF EXISTS async_rb")
            await select(conn, "CREATE TABLE async_rb (v int)")
            await conn.commit()
        await asettle(pool)
        counter.mark(pool)
        async with pool.connection() as conn:
            await select(conn, "INSERT INTO async_rb VALUES (1)")  # left open
        async with pool.connection() as conn:
            await select(conn, "INSERT INTO async_rb VALUES (2)")
            await conn.commit()
        await asettle(pool)
        counts = counter.since(pool)
        async with pool.connection() as conn:
            assert await select(conn, "SELECT v FROM async_rb") == [(2,)]
    if reset == "none":
        assert counts.rollbacks == 1
        # and the last read's: it opened a transaction (psycopg's BEGIN; InnoDB's snapshot)
        assert pool.stats()["rollbacks"] == 2
    else:  # in the first reset only; MariaDB's reset rolls back itself
        assert counts.resets == 2
        assert counts.rollbacks == (1 if server.kind == "postgresql" else 0)


async def test_only_a_connection_idle_past_the_threshold_is_pinged(
    db: tuple[DBServer, Any],
) -> None:
    server, counter = db
    async with surge.db.async_pool(server.url, autocommit=True, check_idle_after=0.3) as pool:
        await warm(pool)
        await asyncio.sleep(0.4)
        await asettle(pool)
        counter.mark(pool)
        for _ in range(2):
            async with pool.connection() as conn:
                await select(conn)
        await asettle(pool)
        counts = counter.since(pool)
    assert (counts.pings, counts.statements) == (1, 2) and pool.stats()["pings"] == 1


async def test_after_a_restart_no_stale_connection_is_handed_out(
    db: tuple[DBServer, Any],
) -> None:
    server, _ = db
    async with surge.db.async_pool(server.url, autocommit=True, max_size=3) as pool:
        await warm(pool, 3)
        server.restart()
        for _ in range(5):
            async with pool.connection() as conn:
                assert await select(conn) == [(1,)]
        stats = pool.stats()
    # the dead connection found by its ping, or by reading its reset's answers
    assert stats["generation"] == 1 and stats["pings"] <= 1 and stats["created"] == 4


async def test_a_query_that_finds_the_server_gone_drops_every_idle_connection(
    db: tuple[DBServer, Any],
) -> None:
    server, _ = db
    async with surge.db.async_pool(server.url, autocommit=True, max_size=3) as pool:
        await warm(pool, 3)
        with pytest.raises(GONE_ERRORS):
            async with pool.connection() as conn:
                server.restart()
                await select(conn)
        assert pool.stats()["generation"] == 1 and pool.stats()["idle"] == 0
        async with pool.connection() as conn:
            assert await select(conn) == [(1,)]


async def test_the_server_idle_timeout_sets_max_lifetime(
    start_postgresql: Any, start_mariadb: Any
) -> None:
    for server in (
        start_postgresql(settings={"idle_session_timeout": "2s"}),
        start_mariadb(settings={"wait_timeout": 2}),
    ):
        async with surge.db.async_pool(server.url) as pool:
            await warm(pool)
            assert pool.max_lifetime == pytest.approx(1.8)


async def test_exhaustion_raises_pool_timeout(postgresql_server: DBServer) -> None:
    async with surge.db.async_pool(postgresql_server.url, max_size=1, timeout=0.1) as pool:
        held = await pool.acquire()
        with pytest.raises(PoolTimeout, match="max_size=1, 1 in use"):
            await pool.acquire()
        await pool.release(held)


def test_sqlite_is_not_offered_asynchronously() -> None:
    with pytest.raises(UsageError, match="postgresql:// or mysql://"):
        surge.db.async_pool("sqlite:///x.db")
