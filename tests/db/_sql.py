"""Helpers the db tests share: run a statement on a DB-API connection, and the
errors a statement on a connection the server dropped raises."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
import pymysql

#: Errors a query on a connection the server dropped raises, per backend.
GONE_ERRORS = (pymysql.err.OperationalError, pymysql.err.InterfaceError, psycopg.OperationalError)


def query(conn: Any, sql: str = "SELECT 1") -> list[tuple[Any, ...]]:
    """Run ``sql`` through a cursor; its rows as tuples ([] for a statement without)."""
    cur = conn.cursor()
    cur.execute(sql)
    rows = [tuple(row) for row in cur.fetchall()] if cur.description else []
    cur.close()
    return rows


def settle(pool: Any) -> None:
    """Read the answers of every idle connection's pending session reset, so that
    the server has run it: a reset is written at return without waiting, and a
    test counting what the server ran must not count a reset of before its
    window, nor miss one of its own."""
    from surge.pool._core import IDLE

    for entry in list(pool.pool._core.idle):
        conn = entry.resource
        if entry.state != IDLE:
            continue
        if getattr(conn, "_surge_unsent", None) is not None:
            conn._surge_flush()  # what RESET_WRITER does FLUSH_AFTER after the return
        if pool.driver.reset_pending(conn):
            with contextlib.suppress(Exception):  # dead: the next checkout finds it
                pool.driver.finish_reset(conn)


async def asettle(pool: Any) -> None:
    """``settle`` for an asyncio pool."""
    from surge.pool._core import IDLE

    for entry in list(pool.pool._core.idle):
        conn = entry.resource
        if entry.state != IDLE:
            continue
        if getattr(conn, "_surge_unsent", None) is not None:
            conn._surge_flush()
        if pool.driver.reset_pending(conn):
            with contextlib.suppress(Exception):  # dead: the next checkout finds it
                await pool.driver.finish_reset(conn)
