"""SQLAlchemy engines on surge.db's pool, against real servers: round trips
counted on the server beside SQLAlchemy's own QueuePool; restarts."""

from __future__ import annotations

import time
from typing import Any

import pymysql
import pytest
import sqlalchemy
from sqlalchemy import text

from surge.db.sqlalchemy import SurgePool, create_engine
from surge.testing import DBServer


def sqlalchemy_url(server: DBServer) -> str:
    scheme = "mysql+pymysql" if server.kind == "mariadb" else "postgresql+psycopg"
    return scheme + server.url[server.url.index("://") :]


def run_selects(engine: sqlalchemy.Engine, n: int) -> None:
    for _ in range(n):
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1


def test_a_read_costs_the_query_only(db: tuple[DBServer, Any]) -> None:
    """Beside SQLAlchemy's QueuePool, which on MariaDB sends a ROLLBACK after every
    read (PyMySQL's rollback() always does; psycopg's skips an idle one)."""
    server, counter = db
    # Autocommit: otherwise a read opens a transaction (psycopg's BEGIN, InnoDB's
    # snapshot) that must be rolled back, by any pool (tests/db/test_integrity.py).
    options = {"max_size": 2, "autocommit": True}
    engine = create_engine(server.url, pool_options=options)
    assert isinstance(engine.pool, SurgePool)
    run_selects(engine, 2)  # the dialect's first-connect queries happen here
    counter.mark(engine.pool.db)
    run_selects(engine, 30)
    counts = counter.since(engine.pool.db)
    engine.dispose()
    assert (counts.statements, counts.rollbacks, counts.pings, counts.connects) == (30, 0, 0, 0)

    if server.kind == "mariadb":
        queue_pool = sqlalchemy.create_engine(
            sqlalchemy_url(server), pool_size=2, connect_args={"autocommit": True}
        )
        run_selects(queue_pool, 2)
        counter.mark()
        run_selects(queue_pool, 30)
        counts = counter.since()
        queue_pool.dispose()
        assert (counts.statements, counts.rollbacks) == (60, 30)


def test_transactions_commit_and_roll_back(db: tuple[DBServer, Any]) -> None:
    server, counter = db
    engine = create_engine(server.url, pool_options={"max_size": 1})
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS sa_t"))
        conn.execute(text("CREATE TABLE sa_t (v INT)"))
    counter.mark(engine.pool.db)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO sa_t VALUES (1)"))
    with engine.connect() as conn:  # never committed: rolled back once
        conn.execute(text("INSERT INTO sa_t VALUES (2)"))
    counts = counter.since(engine.pool.db)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT v FROM sa_t")).scalars().all() == [1]
    assert counts.rollbacks == 1
    assert engine.pool.db.stats()["created"] == 1  # type: ignore[attr-defined]
    engine.dispose()


def test_engine_recovers_from_a_restart(db: tuple[DBServer, Any]) -> None:
    server, _ = db
    engine = create_engine(server.url, pool_options={"max_size": 3, "autocommit": True})
    surge_pool = engine.pool.db  # type: ignore[attr-defined]
    conns = [engine.connect() for _ in range(3)]
    for conn in conns:
        conn.execute(text("SELECT 1"))
        conn.close()
    server.restart()
    run_selects(engine, 5)  # no error: the stale connections are never handed out
    stats = surge_pool.stats()
    assert stats["generation"] == 1 and stats["created"] == 4
    engine.dispose()


def test_a_disconnect_seen_by_sqlalchemy_drops_every_idle_connection(
    db: tuple[DBServer, Any],
) -> None:
    server, _ = db
    engine = create_engine(server.url, pool_options={"max_size": 3, "autocommit": True})
    surge_pool = engine.pool.db  # type: ignore[attr-defined]
    conns = [engine.connect() for _ in range(3)]
    for conn in conns:
        conn.execute(text("SELECT 1"))
        conn.close()
    held = engine.connect()
    assert surge_pool.stats()["idle"] == 2
    server.restart()
    with pytest.raises(sqlalchemy.exc.OperationalError) as raised:
        held.execute(text("SELECT 1"))
    assert raised.value.connection_invalidated
    held.close()
    stats = surge_pool.stats()
    assert stats["generation"] == 1 and stats["idle"] == 0 and stats["open"] == 0
    run_selects(engine, 3)
    assert surge_pool.stats()["created"] == 4
    engine.dispose()


# ------------------------------------------- connections made as create_engine makes them


def test_connect_args_apply_to_every_connection(db: tuple[DBServer, Any]) -> None:
    server, _ = db
    if server.kind == "mariadb":
        connect_args = {"init_command": "SET @surge_init = 42"}
        probe = "SELECT @surge_init"
    else:
        connect_args = {"application_name": "surge-test-42"}
        probe = "SELECT current_setting('application_name')"
    engine = create_engine(server.url, pool_size=2, connect_args=connect_args)
    try:
        conns = [engine.connect() for _ in range(2)]  # two connections, both made by surge
        for conn in conns:
            assert str(conn.execute(text(probe)).scalar()).endswith("42")
            conn.close()
        assert engine.pool.db.stats()["created"] == 2  # type: ignore[attr-defined]
    finally:
        engine.dispose()


def test_do_connect_handlers_make_the_connections(db: tuple[DBServer, Any]) -> None:
    """The documented way to supply a rotating token or password."""
    server, _ = db
    url = server.url.replace(f":{server.password}@", ":wrong@")
    engine = create_engine(url)
    calls = []

    @sqlalchemy.event.listens_for(engine, "do_connect")
    def supply_password(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        calls.append(dict(cparams))
        cparams["password"] = server.password

    try:
        run_selects(engine, 3)
        assert len(calls) == 1  # one connection, reused
        if server.kind == "mariadb":  # SQLAlchemy's own arguments for PyMySQL are kept
            assert calls[0]["client_flag"] & pymysql.constants.CLIENT.FOUND_ROWS
    finally:
        engine.dispose()


def test_a_failing_connect_surfaces_as_itself_and_frees_the_slot(
    db: tuple[DBServer, Any],
) -> None:
    server, _ = db
    engine = create_engine(server.url, pool_size=1, pool_timeout=2)

    @sqlalchemy.event.listens_for(engine, "do_connect")
    def refuse(dialect: Any, record: Any, cargs: Any, cparams: Any) -> None:
        raise LookupError("no credentials today")

    try:
        for _ in range(3):  # a leaked slot would make the 2nd a PoolTimeout
            with pytest.raises(LookupError, match="no credentials today"):
                engine.connect()
        assert engine.pool.db.stats()["in_use"] == 0  # type: ignore[attr-defined]
    finally:
        engine.dispose()


def test_a_failing_connect_event_surfaces_as_itself(db: tuple[DBServer, Any]) -> None:
    """A pool ``connect`` event (run when SQLAlchemy first sees a connection)."""
    server, _ = db
    engine = create_engine(server.url, pool_size=1, pool_timeout=2)
    fail = [True]

    @sqlalchemy.event.listens_for(engine, "connect")
    def setup(dbapi_connection: Any, record: Any) -> None:
        if fail[0]:
            raise LookupError("setup failed")

    try:
        with pytest.raises(LookupError, match="setup failed"):
            engine.connect()
        fail[0] = False
        run_selects(engine, 2)
        stats = engine.pool.db.stats()  # type: ignore[attr-defined]
        assert stats["in_use"] == 0 and stats["created"] == 2 and stats["discarded"] == 1
    finally:
        engine.dispose()


def test_sqlalchemy_pool_arguments_set_the_surge_pool(db: tuple[DBServer, Any]) -> None:
    server, _ = db
    engine = create_engine(server.url, pool_size=3, max_overflow=1, pool_recycle=0.2)
    try:
        db_pool = engine.pool.db  # type: ignore[attr-defined]
        stats = db_pool.stats()
        assert (stats["max_size"], stats["max_overflow"]) == (3, 1)
        run_selects(engine, 1)
        time.sleep(0.3)  # past pool_recycle: the connection is replaced, not reused
        run_selects(engine, 1)
        assert db_pool.stats()["created"] == 2
    finally:
        engine.dispose()


def test_found_rows_as_with_sqlalchemy_s_own_pool(mariadb_server: DBServer) -> None:
    """SQLAlchemy's MySQL dialect connects with FOUND_ROWS: an UPDATE's rowcount is
    the rows matched, which the ORM's stale-row check relies on."""
    engine = create_engine(mariadb_server.url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS sa_found"))
            conn.execute(text("CREATE TABLE sa_found (v INT)"))
            conn.execute(text("INSERT INTO sa_found VALUES (1)"))
            assert conn.execute(text("UPDATE sa_found SET v = 1")).rowcount == 1
    finally:
        engine.dispose()


def test_connect_listeners_and_isolation_hold_in_every_session(db: tuple[DBServer, Any]) -> None:
    """What the application's "connect" listener sets (SQLAlchemy's documented
    recipe for a search_path) and the engine's isolation_level hold in every
    checkout, though the pool resets each session; what a user set does not."""
    from sqlalchemy import event

    server, _ = db
    mariadb = server.kind == "mariadb"
    engine = create_engine(server.url, pool_options={"max_size": 1}, isolation_level="SERIALIZABLE")
    setting = "@app" if mariadb else "current_setting('application_name')"
    isolation = "@@tx_isolation" if mariadb else "current_setting('transaction_isolation')"

    @event.listens_for(engine, "connect")
    def set_up(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("SET @app = 'listener'" if mariadb else "SET application_name = 'listener'")
        cursor.close()

    try:
        for _ in range(3):
            with engine.connect() as conn:
                row = conn.exec_driver_sql(f"SELECT {setting}, {isolation}").one()
                assert tuple(row) == ("listener", "SERIALIZABLE" if mariadb else "serializable")
                conn.exec_driver_sql(
                    "SET @app = 'user'" if mariadb else "SET application_name = 'user'"
                )
                conn.exec_driver_sql(
                    "SET @other = 1" if mariadb else "SET search_path = pg_catalog"
                )
            with engine.connect() as conn:
                probe = "SELECT @other" if mariadb else "SELECT current_setting('search_path')"
                assert conn.exec_driver_sql(probe).scalar() in (None, '"$user", public')
        assert engine.pool.db.stats()["created"] == 1
    finally:
        engine.dispose()
