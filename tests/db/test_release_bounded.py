"""A release never waits on the server: a connection whose protocol state is
unknown - a COPY left half-done either way, rows left unread, a command
interrupted mid-answer - is cut at its socket and discarded, and its slot comes
back.  (Before, a half-done COPY IN made psycopg's rollback() in release() wait
for ever, and the slot never came back.)

"Never waits" is checked as "returns at all": each release runs in a thread
given 20 s, far above anything but a hang; no test measures how fast it is.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.conftest import require
from tests.db._sql import query

import surge.db
from surge.testing import DBServer

HANG = 20.0


def returns(action: Callable[[], None]) -> None:
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(HANG), "the release hung"
    assert errors == []


def sessions(server: DBServer) -> int:
    with server.connect(admin=True, autocommit=True) as admin:
        if server.kind == "mariadb":
            rows = query(
                admin,
                f"SELECT COUNT(*) FROM information_schema.processlist WHERE user = '{server.user}'",
            )
        else:
            rows = query(
                admin,
                f"SELECT COUNT(*) FROM pg_stat_activity WHERE usename = '{server.user}'"
                " AND pid <> pg_backend_pid()",
            )
    return int(rows[0][0])


@pytest.fixture
def copy_table(postgresql_server: DBServer) -> DBServer:
    with postgresql_server.connect(autocommit=True) as conn:
        query(conn, "DROP TABLE IF EXISTS copy_t")
        query(conn, "CREATE TABLE copy_t (v INT)")
        query(conn, "INSERT INTO copy_t SELECT generate_series(1, 200000)")
    return postgresql_server


@pytest.mark.parametrize("reset", ["session", "none"])
@pytest.mark.parametrize("direction", ["FROM STDIN", "TO STDOUT"])
def test_a_half_done_copy_is_cut_not_waited_on(
    copy_table: DBServer, direction: str, reset: str
) -> None:
    server = copy_table
    with surge.db.pool(server.url, max_size=1, reset=reset) as pool:
        conn = pool.acquire()
        cur = conn.cursor()
        block = cur.copy(f"COPY copy_t {direction}")  # kept: its end would end the COPY
        copy = block.__enter__()
        if direction == "FROM STDIN":
            copy.write_row((1,))
        else:
            assert copy.read()  # one block of 200,000 rows read; the rest on the wire
        returns(lambda: pool.release(conn))
        stats = pool.stats()
        assert stats["severed"] == 1 and stats["in_use"] == 0 and stats["open"] == 0
        with pool.connection() as fresh:  # the slot came back
            assert fresh is not conn
            assert query(fresh, "SELECT 1") == [(1,)]
    with server.connect(autocommit=True) as other:
        assert query(other, "SELECT COUNT(*) FROM copy_t") == [(200000,)]  # nothing copied in


@pytest.mark.parametrize("driver", ["pymysql", "mysqlclient"])
def test_rows_left_unread_are_cut_not_read(mariadb_server: DBServer, driver: str) -> None:
    """An unbuffered read of a huge result left half-way: reading it to the end at
    release could take any time (a server streaming rows for ever)."""
    if driver == "mysqlclient":
        require("MySQLdb")
    import pymysql

    with surge.db.pool(mariadb_server.url, max_size=1, driver=driver) as pool:
        conn = pool.acquire()
        if driver == "pymysql":
            cur = conn.cursor(pymysql.cursors.SSCursor)
        else:
            import MySQLdb.cursors

            cur = conn.cursor(MySQLdb.cursors.SSCursor)
        cur.execute("SELECT seq FROM seq_1_to_1000000")
        assert cur.fetchone() == (1,)
        returns(lambda: pool.release(conn))
        assert pool.stats()["in_use"] == 0
        with pool.connection() as fresh:
            assert fresh is not conn and query(fresh) == [(1,)]


@pytest.mark.parametrize("kind", ["mariadb", "postgresql"])
def test_an_interrupted_command_is_cut(request: pytest.FixtureRequest, kind: str) -> None:
    """KeyboardInterrupt in the middle of reading an answer, caught by the
    application inside the block: the block ends normally, the pool must see that
    the answer is half read."""
    server: DBServer = request.getfixturevalue(f"{kind}_server")
    with surge.db.pool(server.url, max_size=1) as pool:
        before = sessions(server)
        with pool.connection() as conn:
            if kind == "mariadb":
                real = conn._read_bytes
                calls = 0

                def interrupted(n: int) -> Any:
                    nonlocal calls
                    calls += 1
                    if calls == 3:  # inside the result set
                        raise KeyboardInterrupt
                    return real(n)

                conn._read_bytes = interrupted
                with contextlib.suppress(KeyboardInterrupt):  # the application carries on
                    query(conn, "SELECT seq FROM seq_1_to_100000")
            else:  # what an interrupted execute leaves: a command sent, not answered
                conn.pgconn.send_query(b"SELECT pg_sleep(0.5)")
        assert pool.stats()["severed"] == 1 and pool.stats()["open"] == 0
        with pool.connection() as fresh:
            assert query(fresh) == [(1,)]
        # the cut session ends on the server (when it notices: within a bound)
        deadline = time.monotonic() + HANG
        while sessions(server) > before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sessions(server) == before + 1  # the fresh one only
