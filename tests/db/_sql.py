"""Helpers the db tests share: run a statement on a DB-API connection, and the
errors a statement on a connection the server dropped raises."""

from __future__ import annotations

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
