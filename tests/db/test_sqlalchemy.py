"""SQLAlchemy engines on surge.db's pool, against real servers: round trips
counted on the server beside SQLAlchemy's own QueuePool; restarts."""

from __future__ import annotations

from typing import Any

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
    counter.mark()
    run_selects(engine, 30)
    counts = counter.since()
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
    counter.mark()
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO sa_t VALUES (1)"))
    with engine.connect() as conn:  # never committed: rolled back once
        conn.execute(text("INSERT INTO sa_t VALUES (2)"))
    counts = counter.since()
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
