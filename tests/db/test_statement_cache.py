"""psycopg's own prepared statements survive the session reset; the application's
do not, and psycopg's cache never names a statement the server dropped.

With ``prepare_threshold=0`` psycopg prepares every statement it runs
(``_pg3_N``, through the protocol).  The reset keeps those its cache holds and
deallocates every other one - an application's ``PREPARE``, whatever its name -
and those of a session that may have changed what they were planned against (a
transaction that wrote, rolled back; temporary tables).  Counted on the server:
``pg_prepared_statements`` and the statement log's ``parse`` lines.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.db._sql import query
from tests.db.test_session_reset import leaks, prepare_server

import surge.db
from surge.testing import DBServer

THRESHOLD_0 = {"connect_args": {"prepare_threshold": 0}}
CHECKOUTS = 20


def server_statements(conn: Any) -> list[tuple[str, bool]]:
    """The session's prepared statements on the server: (name, made by SQL PREPARE),
    read without psycopg's cache (libpq's own exec)."""
    result = conn.pgconn.exec_(
        b"SELECT name, from_sql FROM pg_prepared_statements ORDER BY prepare_time, name"
    )
    return [
        (result.get_value(i, 0).decode(), result.get_value(i, 1) == b"t")
        for i in range(result.ntuples)
    ]


def unprepared(conn: Any, sql: str) -> None:
    """Run ``sql`` as the application, without psycopg preparing it."""
    conn.execute(sql, prepare=False)


def parses(server: DBServer, offset: int, sql: str) -> int:
    """How many times the server parsed ``sql`` into a named statement since
    ``offset`` of its log (log_min_duration_statement=0 logs each parse)."""
    with open(server.log_path, "rb") as log:
        log.seek(offset)
        lines = log.read().decode(errors="replace").splitlines()
    return sum(" parse _pg3_" in line and line.endswith(": " + sql) for line in lines)


def log_size(server: DBServer) -> int:
    with open(server.log_path, "rb") as log:
        return log.seek(0, 2)


@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
def test_psycopg_prepares_once_for_many_checkouts(
    postgresql_server: DBServer, autocommit: bool
) -> None:
    sql = "SELECT 40 + 2 AS surge_cache_probe"
    with surge.db.pool(
        postgresql_server.url, max_size=1, autocommit=autocommit, **THRESHOLD_0
    ) as pool:
        offset = log_size(postgresql_server)
        for _ in range(CHECKOUTS):
            with pool.connection() as conn:
                assert conn.execute(sql).fetchall() == [(42,)]
                if not autocommit:
                    conn.commit()  # a read that is rolled back keeps them too: see below
        with pool.connection() as conn:
            names = [name for name, _ in server_statements(conn)]
        assert pool.stats()["resets"] == CHECKOUTS + 1  # the last checkout's too
    assert parses(postgresql_server, offset, sql) == 1
    assert names == [name.decode() for name in conn._prepared._names.values()]
    assert len(names) == 1


def test_a_read_only_transaction_rolled_back_keeps_them(postgresql_server: DBServer) -> None:
    """A transaction that wrote nothing has no transaction id: its rollback
    cannot take a table or a column its statements were planned against."""
    sql = "SELECT count(*) AS surge_rolled_back_read FROM pg_class"
    with surge.db.pool(postgresql_server.url, max_size=1, **THRESHOLD_0) as pool:
        offset = log_size(postgresql_server)
        for _ in range(CHECKOUTS):
            with pool.connection() as conn:
                conn.execute(sql).fetchall()  # left open: the reset rolls it back
        assert pool.stats()["rollbacks"] + pool.stats()["resets"] >= CHECKOUTS
    assert parses(postgresql_server, offset, sql) == 1


def test_an_application_prepare_is_gone_whatever_its_name(postgresql_server: DBServer) -> None:
    """SQL PREPARE is the application's, even under a name of psycopg's form."""
    with surge.db.pool(postgresql_server.url, max_size=1, autocommit=True, **THRESHOLD_0) as pool:
        with pool.connection() as conn:
            conn.execute("SELECT 1").fetchall()  # psycopg's own: _pg3_0
            ours = conn._prepared._prepared_idx  # the next name psycopg would make
            unprepared(conn, "PREPARE foo AS SELECT 2")
            unprepared(conn, f"PREPARE _pg3_{ours + 5} AS SELECT 3")
            before = server_statements(conn)
        with pool.connection() as conn:
            after = server_statements(conn)
            for _ in range(8):  # psycopg's next names, unhindered
                conn.execute("SELECT %s::int + 1", (1,)).fetchall()
                conn.execute(f"SELECT {_} + 100").fetchall()
    assert ("foo", True) in before and (f"_pg3_{ours + 5}", True) in before
    assert after == [("_pg3_0", False)]


def test_the_cache_never_names_a_statement_the_server_dropped(
    postgresql_server: DBServer,
) -> None:
    """An application that deallocates psycopg's statements behind its back
    (DEALLOCATE, or one of its own in their place) leaves a cache the reset puts
    right: the next user's statements run, none fails with 'prepared statement
    _pg3_0 does not exist' or runs another statement's text."""
    with surge.db.pool(postgresql_server.url, max_size=1, autocommit=True, **THRESHOLD_0) as pool:
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchall() == [(1,)]
            assert conn.execute("SELECT 2").fetchall() == [(2,)]
            held = sorted(n.decode() for n in conn._prepared._names.values())
            unprepared(conn, f"DEALLOCATE {held[0]}")
            unprepared(conn, f"DEALLOCATE {held[1]}")
            unprepared(conn, f"PREPARE {held[1]} AS SELECT 'not two'")
        with pool.connection() as conn:
            assert conn._prepared._names == {}
            assert server_statements(conn) == []
            assert conn.execute("SELECT 1").fetchall() == [(1,)]
            assert conn.execute("SELECT 2").fetchall() == [(2,)]


#: Sessions that change what their statements were planned against: the next
#: user runs the same text and must get the fresh session's answer, not "cached
#: plan must not change result type".
UNSETTLED = {
    "a column added, rolled back": (
        ["ALTER TABLE reset_t ADD COLUMN w INT", "SELECT * FROM reset_t ORDER BY v"],
        False,
    ),
    "a temporary table shadowing a table": (
        ["CREATE TEMP TABLE reset_t (v INT, w INT)", "SELECT * FROM reset_t ORDER BY v"],
        True,
    ),
}


@pytest.mark.parametrize("case", list(UNSETTLED))
def test_statements_of_an_unsettled_session_go(postgresql_server: DBServer, case: str) -> None:
    setup, autocommit = UNSETTLED[case]
    prepare_server(postgresql_server)
    with surge.db.pool(
        postgresql_server.url, max_size=1, autocommit=autocommit, **THRESHOLD_0
    ) as pool:
        with pool.connection() as conn:
            for sql in setup:
                query(conn, sql)
        with pool.connection() as conn:
            assert query(conn, "SELECT * FROM reset_t ORDER BY v") == [(1,), (2,), (3,)]


@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
def test_every_kind_of_state_still_matches_a_fresh_session(
    postgresql_server: DBServer, autocommit: bool
) -> None:
    """The session-state table of test_session_reset, with psycopg preparing every
    statement: only its own statements outlive the checkout (the probe of
    PREPARE counts the application's: ``from_sql``)."""
    prepare_server(postgresql_server)
    found = leaks(postgresql_server, "psycopg", autocommit, **THRESHOLD_0)
    assert found == {}


async def _async_checkouts(url: str, sql: str) -> list[tuple[str, bool]]:
    async with surge.db.async_pool(url, max_size=1, autocommit=True, **THRESHOLD_0) as pool:
        for _ in range(CHECKOUTS):
            async with pool.connection() as conn:
                await (await conn.execute(sql)).fetchall()
                await conn.execute("PREPARE async_foo AS SELECT 1")
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT name, from_sql FROM pg_prepared_statements ORDER BY name", prepare=False
            )
            return [tuple(row) for row in await cur.fetchall()]  # type: ignore[misc]


def test_async_psycopg_keeps_them_too(postgresql_server: DBServer) -> None:
    sql = "SELECT 42 AS surge_async_cache_probe"
    offset = log_size(postgresql_server)
    statements = asyncio.run(asyncio.wait_for(_async_checkouts(postgresql_server.url, sql), 60))
    assert parses(postgresql_server, offset, sql) == 1
    assert ("async_foo", True) not in statements
    assert all(not from_sql for _, from_sql in statements)
