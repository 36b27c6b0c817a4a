"""A reused connection is indistinguishable from a fresh one: the class, as a table.

Each case changes or takes something in one checkout - a variable, a mode, the
database, a temporary table, a prepared statement, a lock, a LISTEN, or the
driver's own settings - and the next checkout of the same connection
(``max_size=1``) must answer a probe exactly as a freshly opened connection of
the same pool options does.  The table runs through every front-end: the pool
with each driver (PyMySQL, mysqlclient, psycopg), autocommit on and off, the
asyncio pools (aiomysql, psycopg), and SQLAlchemy's engine; Django's backends
are in test_django.py.

A case may set state from inside a SELECT (``GET_LOCK``, ``set_config``,
``LAST_INSERT_ID(7)``): what a pool cannot see in the statements it must still
undo, which is why every used connection is reset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.conftest import require
from tests.db._sql import query

import surge.db
from surge.testing import DBServer


@dataclass
class Case:
    """``setup`` statements (or a callable on the DB-API connection), then ``probe``:
    a query whose rows - or error class - must match a fresh connection's."""

    setup: list[str] | Callable[[Any], None]
    probe: str | Callable[[Any], Any]
    kinds: tuple[str, ...] = ("mariadb", "postgresql")
    #: Only where autocommit is (True) or is not (False) on; None: both.
    autocommit: bool | None = None
    drivers: tuple[str, ...] = ()  # only these drivers (default: all of the kind)
    tags: set[str] = field(default_factory=set)


def _pymysql_decoders(conn: Any) -> None:
    import pymysql

    conn.decoders[pymysql.constants.FIELD_TYPE.LONGLONG] = lambda value: "decoded!"


def _psycopg_loader(conn: Any) -> None:
    from psycopg.types.string import TextLoader

    conn.adapters.register_loader("int4", TextLoader)  # ints read as str


def _psycopg_rows(conn: Any) -> Any:
    cur = conn.cursor()
    cur.execute("SELECT 1::int4 AS one")
    row = cur.fetchone()
    cur.close()
    if not conn.autocommit:
        conn.rollback()
    return (type(row).__name__, row if isinstance(row, tuple) else dict(row))


def _psycopg_transaction_settings(conn: Any) -> Any:
    cur = conn.cursor()
    cur.execute(
        "SELECT current_setting('transaction_read_only'), current_setting('transaction_isolation')"
    )
    row = cur.fetchone()
    cur.close()
    conn.rollback()
    return tuple(row)


def _psycopg_set(attribute: str, value: Any) -> Callable[[Any], None]:
    def set_it(conn: Any) -> None:
        if not conn.autocommit:
            conn.rollback()
        setattr(conn, attribute, value)

    return set_it


MARIADB_CASES: dict[str, Case] = {
    "USE another database": Case(["USE information_schema"], "SELECT DATABASE()"),
    "user variable": Case(["SET @v = 5"], "SELECT @v"),
    "sql_mode ANSI_QUOTES": Case(["SET sql_mode = 'ANSI_QUOTES'"], 'SELECT "abc"'),
    "time_zone": Case(["SET time_zone = '+03:00'"], "SELECT @@time_zone"),
    "SET NAMES latin1": Case(
        ["SET NAMES latin1"], "SELECT CHAR_LENGTH('\u20ac'), @@character_set_client"
    ),
    "temporary table shadowing a table": Case(
        ["CREATE TEMPORARY TABLE reset_t (v INT)"], "SELECT COUNT(*) FROM reset_t"
    ),
    "GET_LOCK inside a SELECT": Case(
        ["SELECT GET_LOCK('surge_reset', 0)"], "SELECT IS_USED_LOCK('surge_reset') IS NULL"
    ),
    "LOCK TABLES": Case(["LOCK TABLES reset_t WRITE"], "SELECT COUNT(*) FROM reset_other"),
    "PREPARE": Case(["PREPARE reset_p FROM 'SELECT 1'"], "EXECUTE reset_p"),
    "session isolation level": Case(
        ["SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE"], "SELECT @@tx_isolation"
    ),
    "foreign_key_checks": Case(["SET foreign_key_checks = 0"], "SELECT @@foreign_key_checks"),
    "sql_select_limit": Case(["SET sql_select_limit = 1"], "SELECT v FROM reset_t ORDER BY v"),
    "max_statement_time": Case(["SET max_statement_time = 5"], "SELECT @@max_statement_time"),
    "LAST_INSERT_ID(7)": Case(["SELECT LAST_INSERT_ID(7)"], "SELECT LAST_INSERT_ID()"),
    "autocommit by SQL": Case(["SET autocommit = 1 - @@autocommit"], "SELECT @@autocommit"),
    "an open transaction's snapshot": Case(
        ["SELECT COUNT(*) FROM reset_t", "INSERT INTO reset_t VALUES (99)"],
        "SELECT COUNT(*) FROM reset_t",
        autocommit=False,
    ),
    "PyMySQL decoders": Case(_pymysql_decoders, "SELECT 7", drivers=("pymysql",)),
    "PyMySQL autocommit()": Case(
        lambda conn: conn.autocommit(not conn.get_autocommit()),
        "SELECT @@autocommit",
        drivers=("pymysql",),
    ),
    "mysqlclient autocommit()": Case(
        lambda conn: conn.autocommit(not conn.get_autocommit()),
        "SELECT @@autocommit",
        drivers=("mysqlclient",),
    ),
    "PyMySQL set_character_set": Case(
        lambda conn: conn.set_character_set("latin1"),
        "SELECT @@character_set_client, CHAR_LENGTH('\u20ac')",
        drivers=("pymysql",),
    ),
}
for case in MARIADB_CASES.values():
    case.kinds = ("mariadb",)

POSTGRESQL_CASES: dict[str, Case] = {
    "search_path": Case(["SET search_path = reset_schema"], "SELECT COUNT(*) FROM reset_t"),
    "set_config inside a SELECT": Case(
        ["SELECT set_config('search_path', 'reset_schema', false)"],
        "SELECT COUNT(*) FROM reset_t",
    ),
    "statement_timeout": Case(["SET statement_timeout = '1ms'"], "SHOW statement_timeout"),
    "SET ROLE": Case(["SET ROLE reset_role"], "SELECT current_user"),
    "a tenant id in a custom setting": Case(
        ["SET app.tenant = '42'"],
        # DISCARD ALL leaves an empty string, which PostgreSQL cannot undo: as unset
        "SELECT coalesce(nullif(current_setting('app.tenant', true), ''), 'unset')",
    ),
    "LISTEN": Case(["LISTEN reset_channel"], "SELECT COUNT(*) FROM pg_listening_channels()"),
    "advisory lock": Case(
        ["SELECT pg_advisory_lock(4242)"],
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
    ),
    "temporary table shadowing a table": Case(
        ["CREATE TEMP TABLE reset_t (v INT)"], "SELECT COUNT(*) FROM reset_t"
    ),
    "PREPARE": Case(
        ["PREPARE reset_p AS SELECT 1"],
        "SELECT COUNT(*) FROM pg_prepared_statements WHERE from_sql",  # the application's
    ),
    "WITH HOLD cursor": Case(
        ["DECLARE reset_c CURSOR WITH HOLD FOR SELECT 1"], "SELECT COUNT(*) FROM pg_cursors"
    ),
    "default_transaction_read_only": Case(
        ["SET default_transaction_read_only = on"], "SHOW default_transaction_read_only"
    ),
    "TimeZone": Case(["SET TIME ZONE 'Asia/Tokyo'"], "SHOW TimeZone"),
    "an open transaction": Case(
        ["INSERT INTO reset_t VALUES (99)"], "SELECT COUNT(*) FROM reset_t", autocommit=False
    ),
    "psycopg row_factory": Case(
        lambda conn: setattr(conn, "row_factory", __import__("psycopg.rows").rows.dict_row),
        _psycopg_rows,
    ),
    "psycopg adapters": Case(_psycopg_loader, _psycopg_rows),
    "psycopg read_only": Case(
        _psycopg_set("read_only", True), _psycopg_transaction_settings, autocommit=False
    ),
    "psycopg isolation_level": Case(
        _psycopg_set("isolation_level", 4), _psycopg_transaction_settings, autocommit=False
    ),
    "psycopg autocommit": Case(
        lambda conn: setattr(conn, "autocommit", not conn.autocommit),
        lambda conn: conn.autocommit,
    ),
    "psycopg prepared statements": Case(
        lambda conn: [conn.execute("SELECT 1", prepare=True) for _ in range(2)],
        lambda conn: conn.execute("SELECT 1", prepare=True).fetchall(),
    ),
}
for case in POSTGRESQL_CASES.values():
    case.kinds = ("postgresql",)


def prepare_server(server: DBServer) -> None:
    """The tables, schema and role the cases use: ``reset_t`` holds 3 rows; on
    PostgreSQL ``reset_schema.reset_t`` holds 1, and the test user may SET ROLE
    reset_role."""
    with server.connect(admin=True, autocommit=True) as admin:
        if server.kind == "mariadb":
            for sql in (
                f"DROP TABLE IF EXISTS {server.database}.reset_t, {server.database}.reset_other",
                f"CREATE TABLE {server.database}.reset_t (v INT)",
                f"INSERT INTO {server.database}.reset_t VALUES (1), (2), (3)",
                f"CREATE TABLE {server.database}.reset_other (v INT)",
            ):
                query(admin, sql)
            return
    with server.connect(admin=True, autocommit=True) as admin:
        query(admin, "SELECT 1")
        roles = query(admin, "SELECT 1 FROM pg_roles WHERE rolname = 'reset_role'")
        if not roles:
            query(admin, "CREATE ROLE reset_role")
        query(admin, f'GRANT reset_role TO "{server.user}"')
    with server.connect(autocommit=True) as conn:
        for sql in (
            "DROP TABLE IF EXISTS reset_t",
            "DROP SCHEMA IF EXISTS reset_schema CASCADE",
            "CREATE TABLE reset_t (v INT)",
            "INSERT INTO reset_t VALUES (1), (2), (3)",
            "CREATE SCHEMA reset_schema",
            "CREATE TABLE reset_schema.reset_t (v INT)",
            "INSERT INTO reset_schema.reset_t VALUES (1)",
        ):
            query(conn, sql)


def answer(conn: Any, probe: str | Callable[[Any], Any]) -> Any:
    """The probe's rows, or the name of the error it raised."""
    try:
        if callable(probe):
            return probe(conn)
        return query(conn, probe)
    except Exception as error:
        return type(error).__name__
    finally:
        rollback = getattr(conn, "rollback", None)
        if rollback is not None:
            with contextlib.suppress(Exception):  # the probe's answer stands
                rollback()


def dirty(conn: Any, setup: list[str] | Callable[[Any], None]) -> None:
    if callable(setup):
        setup(conn)
        return
    for sql in setup:
        query(conn, sql)


def cases_for(kind: str, driver: str, autocommit: bool) -> dict[str, Case]:
    table = MARIADB_CASES if kind == "mariadb" else POSTGRESQL_CASES
    return {
        name: case
        for name, case in table.items()
        if (case.autocommit is None or case.autocommit == autocommit)
        and (not case.drivers or driver in case.drivers)
    }


def leaks(server: DBServer, driver: str, autocommit: bool, **options: Any) -> dict[str, Any]:
    """Per case that leaks: (what the next checkout answered, what a fresh one did)."""
    found = {}
    for name, case in cases_for(server.kind, driver, autocommit).items():
        pool_options = {"max_size": 1, "autocommit": autocommit, **options}
        if server.kind == "mariadb":
            pool_options["driver"] = driver
        with (
            surge.db.pool(server.url, **pool_options) as fresh_pool,
            fresh_pool.connection() as fresh,
        ):
            expected = answer(fresh, case.probe)
        with surge.db.pool(server.url, **pool_options) as pool:
            with pool.connection() as conn:
                first = conn
                dirty(conn, case.setup)
            with pool.connection() as conn:
                assert conn is first  # the same connection, reused
                got = answer(conn, case.probe)
        if got != expected:
            found[name] = (got, expected)
    return found


MARIADB_DRIVERS = ["pymysql", "mysqlclient"]


@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
@pytest.mark.parametrize("driver", MARIADB_DRIVERS)
def test_mariadb_next_checkout_is_a_fresh_session(
    mariadb_server: DBServer, driver: str, autocommit: bool
) -> None:
    if driver == "mysqlclient":
        require("MySQLdb")
    prepare_server(mariadb_server)
    assert leaks(mariadb_server, driver, autocommit) == {}


@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
def test_postgresql_next_checkout_is_a_fresh_session(
    postgresql_server: DBServer, autocommit: bool
) -> None:
    prepare_server(postgresql_server)
    assert leaks(postgresql_server, "psycopg", autocommit) == {}


@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
def test_after_a_long_idle_too(mariadb_server: DBServer, autocommit: bool) -> None:
    """A connection idle past SOCKET_CHECK_AFTER has its reset read at checkout
    rather than behind its next command: the same fresh session."""
    import time

    from surge.db._pool import SOCKET_CHECK_AFTER

    prepare_server(mariadb_server)
    with surge.db.pool(mariadb_server.url, max_size=1, autocommit=autocommit) as pool:
        with pool.connection() as conn:
            query(conn, "SET @v = 5")
            query(conn, "USE information_schema")
        time.sleep(SOCKET_CHECK_AFTER * 2)
        with pool.connection() as conn:
            assert not pool.driver.reset_pending(conn)  # read at checkout
            assert query(conn, "SELECT @v, DATABASE()") == [(None, mariadb_server.database)]


def test_reset_none_is_the_documented_opt_out(mariadb_server: DBServer) -> None:
    """``reset="none"``: the session leaks (what the README lists), the open
    transaction does not."""
    prepare_server(mariadb_server)
    with surge.db.pool(mariadb_server.url, max_size=1, reset="none") as pool:
        with pool.connection() as conn:
            query(conn, "SET @v = 5")
            query(conn, "INSERT INTO reset_t VALUES (99)")
        with pool.connection() as conn:
            assert query(conn, "SELECT @v") == [(5,)]
            assert query(conn, "SELECT COUNT(*) FROM reset_t") == [(3,)]


def test_an_unused_checkout_costs_no_reset(mariadb_server: DBServer) -> None:
    with surge.db.pool(mariadb_server.url, max_size=1) as pool:
        with pool.connection() as conn:
            query(conn)
        for _ in range(5):
            with pool.connection():
                pass
        assert pool.stats()["resets"] == 1


# -- asyncio -------------------------------------------------------------------------


async def async_answer(conn: Any, kind: str, probe: str) -> Any:
    try:
        if kind == "mariadb":
            async with conn.cursor() as cur:
                await cur.execute(probe)
                rows = [tuple(r) for r in await cur.fetchall()]
        else:
            cur = await conn.execute(probe)
            rows = [tuple(r) for r in await cur.fetchall()] if cur.description else []
        return rows
    except Exception as error:
        return type(error).__name__
    finally:
        with contextlib.suppress(Exception):
            await conn.rollback()


async def async_dirty(conn: Any, kind: str, setup: list[str]) -> None:
    for sql in setup:
        if kind == "mariadb":
            async with conn.cursor() as cur:
                await cur.execute(sql)
                await cur.fetchall()
        else:
            cur = await conn.execute(sql)
            if cur.description:
                await cur.fetchall()


@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
async def test_asyncio_next_checkout_is_a_fresh_session(
    db: tuple[DBServer, Any], autocommit: bool
) -> None:
    server, _ = db
    prepare_server(server)
    driver = "aiomysql" if server.kind == "mariadb" else "psycopg"
    found = {}
    for name, case in cases_for(server.kind, driver, autocommit).items():
        if callable(case.setup) or callable(case.probe):
            continue  # the sync drivers' own attributes
        options = {"max_size": 1, "autocommit": autocommit}
        async with (
            surge.db.async_pool(server.url, **options) as fresh_pool,
            fresh_pool.connection() as fresh,
        ):
            expected = await async_answer(fresh, server.kind, case.probe)
        async with surge.db.async_pool(server.url, **options) as pool:
            async with pool.connection() as conn:
                await async_dirty(conn, server.kind, case.setup)
            async with pool.connection() as conn:
                got = await async_answer(conn, server.kind, case.probe)
        if got != expected:
            found[name] = (got, expected)
    assert found == {}


# -- SQLAlchemy -------------------------------------------------------------------------


@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
def test_sqlalchemy_next_checkout_is_a_fresh_session(
    db: tuple[DBServer, Any], autocommit: bool
) -> None:
    """Through the engine: SQLAlchemy's own checkout and return, surge's reset."""
    from surge.db.sqlalchemy import create_engine

    server, _ = db
    prepare_server(server)
    driver = "pymysql" if server.kind == "mariadb" else "psycopg"
    found = {}
    for name, case in cases_for(server.kind, driver, autocommit).items():
        if callable(case.setup) or callable(case.probe):
            continue
        options = {"max_size": 1, "autocommit": autocommit}
        fresh_engine = create_engine(server.url, pool_options=options)
        engine = create_engine(server.url, pool_options=options)
        try:
            with fresh_engine.connect() as c:
                expected = answer(c.connection.dbapi_connection, case.probe)
            with engine.connect() as c:
                dirty(c.connection.dbapi_connection, case.setup)
            with engine.connect() as c:
                got = answer(c.connection.dbapi_connection, case.probe)
        finally:
            fresh_engine.dispose()
            engine.dispose()
        if got != expected:
            found[name] = (got, expected)
    assert found == {}
