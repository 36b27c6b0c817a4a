"""No work a user of a pooled connection abandoned outlives the checkout: nothing
of it is committed by the next user, and the next user inherits no snapshot and
no lock - on real MariaDB and PostgreSQL, sync and asyncio, through the plain
pool and through SQLAlchemy's ORM.

The MySQL drivers keep the server's transaction flag from OK packets only, so
after a statement that returns rows (``INSERT ... RETURNING``, ``SELECT ... FOR
UPDATE``, a plain ``SELECT`` with autocommit off) they report no transaction
while InnoDB holds one; a pool that trusted the flag handed the open
transaction to the next user, whose COMMIT committed it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pymysql
import pytest
from sqlalchemy import Integer
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from tests.conftest import require
from tests.db._sql import query as run

import surge.db
from surge.db.sqlalchemy import create_engine
from surge.testing import DBServer

#: What the abandoned checkout does; each leaves a transaction open on the server.
WORK = {
    "insert returning": ["INSERT INTO integ (id, v) VALUES (2, 0) RETURNING id"],
    "select for update": ["SELECT v FROM integ WHERE id = 1 FOR UPDATE"],
    "plain select": ["SELECT COUNT(*) FROM integ"],
    "update then select": ["UPDATE integ SET v = 5 WHERE id = 1", "SELECT v FROM integ"],
}


class Base(DeclarativeBase):
    pass


class Row(Base):
    __tablename__ = "integ"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    v: Mapped[int] = mapped_column(Integer)


def make_table(server: DBServer) -> DBServer:
    with server.connect(autocommit=True) as conn:
        run(conn, "DROP TABLE IF EXISTS integ")
        run(conn, "CREATE TABLE integ (id INT PRIMARY KEY, v INT)")
        run(conn, "INSERT INTO integ VALUES (1, 0)")
    return server


@pytest.fixture
def table(db: tuple[DBServer, Any]) -> DBServer:
    return make_table(db[0])


def open_transactions(server: DBServer) -> int:
    """Sessions of the test's user that hold a transaction open on the server."""
    with server.connect(admin=True, autocommit=True) as admin:
        if server.kind == "mariadb":
            sql = "SELECT COUNT(*) FROM information_schema.innodb_trx"
        else:
            sql = (
                "SELECT COUNT(*) FROM pg_stat_activity"
                " WHERE state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
            )
        return int(run(admin, sql)[0][0])


#: InnoDB refreshes information_schema.innodb_trx only once it has not been read
#: for 100 ms (its trx_i_s cache): a poll more frequent than that reads the same
#: stale answer for ever.
POLL = 0.15


def settled_transactions(server: DBServer) -> int:
    """``open_transactions``, once the resets written after the returns had their
    bound (RESET_WRITER's FLUSH_AFTER, and the server's time to run them)."""
    deadline = time.monotonic() + 10
    while (count := open_transactions(server)) and time.monotonic() < deadline:
        time.sleep(POLL)
    return count


async def asettled_transactions(server: DBServer) -> int:
    """As ``settled_transactions``, letting the event loop write the resets."""
    deadline = time.monotonic() + 10
    while (count := open_transactions(server)) and time.monotonic() < deadline:
        await asyncio.sleep(POLL)
    return count


def assert_nothing_left(server: DBServer, pool: surge.db.DBPool) -> None:
    """The abandoned work left no lock, no snapshot and nothing to commit.  The
    reset is written FLUSH_AFTER after the return unless a command took it along:
    the open transaction ends within a bound (surge.db._session.RESET_WRITER)."""
    assert settled_transactions(server) == 0
    with server.connect(autocommit=True) as other:
        # a lock held by the idle pooled connection would time this out (1 s)
        if server.kind == "mariadb":
            run(other, "SET SESSION innodb_lock_wait_timeout = 1")
        else:
            run(other, "SET lock_timeout = '1s'")
        run(other, "UPDATE integ SET v = v WHERE id = 1")
        run(other, "INSERT INTO integ VALUES (4, 0)")  # committed by another client
    with pool.connection() as conn:  # the same connection (max_size=1)
        # a snapshot kept from the abandoned read would not see row 4
        assert run(conn, "SELECT id FROM integ ORDER BY id") == [(1,), (4,)]
        run(conn, "INSERT INTO integ VALUES (3, 0)")
        conn.commit()  # commits this user's work, and only this user's
    with server.connect(autocommit=True) as other:
        assert run(other, "SELECT id, v FROM integ ORDER BY id") == [(1, 0), (3, 0), (4, 0)]


@pytest.mark.parametrize("ending", ["returned", "raised"])
@pytest.mark.parametrize("work", list(WORK))
def test_abandoned_work_is_rolled_back(table: DBServer, work: str, ending: str) -> None:
    abandon(table, work, ending)


@pytest.mark.parametrize("ending", ["returned", "raised"])
@pytest.mark.parametrize("work", list(WORK))
def test_mysqlclient_abandoned_work_is_rolled_back(
    mariadb_server: DBServer, work: str, ending: str
) -> None:
    require("MySQLdb")  # mysqlclient: .ci/run installs it (it needs libmariadb-dev)
    abandon(make_table(mariadb_server), work, ending, driver="mysqlclient")


def abandon(server: DBServer, work: str, ending: str, driver: str | None = None) -> None:
    """A checkout runs ``work``, then returns or raises without committing."""
    with surge.db.pool(server.url, max_size=1, driver=driver) as pool:
        with pool.connection() as conn:
            run(conn, "SELECT 1")  # the connection's first use: its setup is done
        try:
            with pool.connection() as conn:
                for sql in WORK[work]:
                    run(conn, sql)
                if ending == "raised":
                    raise LookupError("the application's own error")
        except LookupError:
            pass
        assert_nothing_left(server, pool)
        assert pool.stats()["created"] == 1  # the connection was reused, not replaced


def test_a_half_read_unbuffered_result_is_rolled_back(mariadb_server: DBServer) -> None:
    server = make_table(mariadb_server)
    with surge.db.pool(server.url, max_size=1) as pool:
        with pool.connection() as conn:
            run(conn, "INSERT INTO integ VALUES (2, 0)")
            conn.commit()
            run(conn, "DELETE FROM integ WHERE id = 2")
            conn.commit()
        with pool.connection() as conn:
            cur = conn.cursor(pymysql.cursors.SSCursor)
            cur.execute("SELECT id FROM integ FOR UPDATE")
            assert cur.fetchone() == (1,)  # the rest unread: the server's last word too
        # never read to the end at return (it could be any size, or never end):
        # cut at the socket, which ends the server's session and its locks
        assert pool.stats()["severed"] == 1 and pool.stats()["open"] == 0
        assert_nothing_left(server, pool)


def test_the_pool_puts_autocommit_back(table: DBServer) -> None:
    """A user who turns autocommit on (or off) does not change it for the next one;
    and an open transaction is rolled back before - on MySQL, turning autocommit on
    would commit it."""
    server = table
    with surge.db.pool(server.url, max_size=1) as pool:
        with pool.connection() as conn:
            run(conn, "INSERT INTO integ (id, v) VALUES (2, 0) RETURNING id")
            if server.kind == "mariadb":
                conn.autocommit(True)  # PyMySQL: SET AUTOCOMMIT=1 commits row 2
            else:
                conn.rollback()
                conn.autocommit = True
        with pool.connection() as conn:
            mode = conn.get_autocommit() if server.kind == "mariadb" else conn.autocommit
            assert mode is False
            run(conn, "DELETE FROM integ WHERE id = 2")
            conn.commit()
        assert_nothing_left(server, pool)


async def test_asyncio_abandoned_work_is_rolled_back(table: DBServer) -> None:
    server = table

    async def arun(conn: Any, sql: str) -> None:
        if server.kind == "mariadb":
            async with conn.cursor() as cur:
                await cur.execute(sql)
                await cur.fetchall()
        else:
            cur = await conn.execute(sql)
            if cur.description:
                await cur.fetchall()

    async with surge.db.async_pool(server.url, max_size=1) as pool:
        for work in WORK.values():
            async with pool.connection() as conn:
                for sql in work:
                    await arun(conn, sql)
            assert await asettled_transactions(server) == 0
    with server.connect(autocommit=True) as other:
        assert run(other, "SELECT id, v FROM integ ORDER BY id") == [(1, 0)]


def test_sqlalchemy_flush_then_rollback_commits_nothing(table: DBServer) -> None:
    """SQLAlchemy flushes with INSERT ... RETURNING on MariaDB 10.5+ and PostgreSQL:
    ``session.rollback()`` must undo it, whoever uses the connection next."""
    server = table
    engine = create_engine(server.url, pool_options={"max_size": 1})
    try:
        with Session(engine) as session:
            session.add_all(Row(id=i, v=0) for i in range(10, 110))
            session.flush()
            session.rollback()
        with Session(engine) as session:
            session.add(Row(id=3, v=0))
            session.commit()
        assert settled_transactions(server) == 0
        with server.connect(autocommit=True) as other:
            assert run(other, "SELECT id FROM integ ORDER BY id") == [(1,), (3,)]
    finally:
        engine.dispose()
