"""surge.db.pool against real MariaDB and PostgreSQL servers: the round trips it
costs, counted on the server; restarts and idle timeouts; exhaustion."""

from __future__ import annotations

import threading
import time
from typing import Any

import pymysql
import pytest
from tests.db._sql import GONE_ERRORS, query

import surge.db
from surge.db import DatabaseURL, DBPool, PoolTimeout
from surge.db._pool import SOCKET_CHECK_AFTER
from surge.errors import UsageError
from surge.testing import DBServer


def warm(pool: DBPool, n: int = 1) -> None:
    """Open ``n`` connections and return them all, so that the pool holds n idle."""
    conns = [pool.acquire() for _ in range(n)]
    for conn in conns:
        pool.release(conn)


# ---------------------------------------------------------------- no extra round trips


def test_a_busy_pool_costs_the_query_and_nothing_else(db: tuple[DBServer, Any]) -> None:
    server, counter = db
    with surge.db.pool(server.url, autocommit=True, max_size=2) as pool:
        warm(pool)
        counter.mark(pool)
        for _ in range(50):
            with pool.connection() as conn:
                assert query(conn) == [(1,)]
        counts = counter.since(pool)
    # the SELECT of each block and its session reset (written at return, its
    # answers read behind the next SELECT's or at checkout: nobody waits for it),
    # and no ping, no rollback, no login
    assert (counts.statements, counts.rollbacks, counts.pings, counts.connects) == (50, 0, 0, 0)
    assert counts.resets == 50


def test_a_read_with_autocommit_off_is_rolled_back_so_the_next_user_sees_new_data(
    db: tuple[DBServer, Any],
) -> None:
    """Autocommit off (DB-API's default): a read opens a transaction (InnoDB's
    REPEATABLE READ snapshot; psycopg's BEGIN).  Kept past the checkout, the next
    user of the connection would read the old snapshot."""
    server, counter = db
    with surge.db.pool(server.url, max_size=1) as pool:
        with pool.connection() as conn:
            query(conn, "DROP TABLE IF EXISTS readonly")
            query(conn, "CREATE TABLE readonly (v INT)")
            conn.commit()
        counter.mark(pool)
        with pool.connection() as conn:
            assert query(conn, "SELECT COUNT(*) FROM readonly") == [(0,)]
        counts = counter.since(pool)
        with server.connect(autocommit=True) as other:
            query(other, "INSERT INTO readonly VALUES (1)")
        with pool.connection() as conn:
            assert query(conn, "SELECT COUNT(*) FROM readonly") == [(1,)]
    # the session reset ended it (PostgreSQL: a ROLLBACK before DISCARD ALL;
    # MariaDB: COM_RESET_CONNECTION rolls back itself)
    assert counts.resets == 1
    assert counts.rollbacks == (1 if server.kind == "postgresql" else 0)


@pytest.mark.parametrize("reset", ["none", "session"])
def test_rollback_on_return_only_when_a_transaction_is_open(
    db: tuple[DBServer, Any], reset: str
) -> None:
    server, counter = db
    with surge.db.pool(server.url, max_size=1, reset=reset) as pool:
        with pool.connection() as conn:
            query(conn, "DROP TABLE IF EXISTS rb")
            query(conn, "CREATE TABLE rb (v INT)")
            conn.commit()
        counter.mark(pool)
        with pool.connection() as conn:  # left open: the pool must roll it back
            query(conn, "INSERT INTO rb VALUES (1)")
        with pool.connection() as conn:  # committed: nothing to roll back
            query(conn, "INSERT INTO rb VALUES (2)")
            conn.commit()
        counts = counter.since(pool)
        with pool.connection() as conn:
            assert query(conn, "SELECT v FROM rb") == [(2,)]
            conn.rollback()
    if reset == "none":
        assert counts.rollbacks == 1
        assert pool.stats()["rollbacks"] == 1
    else:  # one ROLLBACK in the first reset only; MariaDB's reset rolls back itself
        assert counts.resets == 2
        assert counts.rollbacks == (1 if server.kind == "postgresql" else 0)


def test_an_error_in_the_block_returns_the_connection_rolled_back(
    db: tuple[DBServer, Any],
) -> None:
    server, _ = db
    with surge.db.pool(server.url, max_size=1) as pool:
        with pool.connection() as conn:
            first = conn
        with pytest.raises(ZeroDivisionError), pool.connection() as conn:
            query(conn, "SELECT 1")
            1 / 0  # noqa: B018 - the application's own error
        with pytest.raises(Exception, match="no_such_table"), pool.connection() as conn:
            query(conn, "SELECT * FROM no_such_table")
        with pool.connection() as conn:
            assert conn is first  # the same connection, usable, every time
            assert len(query(conn)) == 1
        assert pool.stats()["created"] == 1 and pool.stats()["server_gone"] == 0


def test_only_a_connection_idle_past_the_threshold_is_pinged(db: tuple[DBServer, Any]) -> None:
    server, counter = db
    with surge.db.pool(server.url, autocommit=True, max_size=1, check_idle_after=0.3) as pool:
        warm(pool)
        time.sleep(0.4)
        counter.mark(pool)
        with pool.connection() as conn:  # idle 0.4 s: one ping
            query(conn)
        with pool.connection() as conn:  # idle ~0 s: none
            query(conn)
        counts = counter.since(pool)
    assert (counts.pings, counts.statements, counts.connects) == (1, 2, 0)
    assert pool.stats()["pings"] == 1


# ---------------------------------------------------------------- server restarts


def test_after_a_restart_no_stale_connection_is_handed_out(
    db: tuple[DBServer, Any],
) -> None:
    """Four idle connections of the old server: the first checkout finds one dead
    (its socket reads EOF: one ping confirms it), the generation moves on and the
    other three are closed at once, without a ping each; every checkout works."""
    server, counter = db
    with surge.db.pool(server.url, autocommit=True, max_size=4) as pool:
        warm(pool, 4)
        server.restart()
        counter.mark(pool)
        for _ in range(10):
            with pool.connection() as conn:
                assert len(query(conn)) == 1
        stats = pool.stats()
        counts = counter.since(pool)
    seen = (sorted(stats.items()), counts)
    if stats["generation"] == 0:
        # On a busy box the restart can come before the resets of the four
        # returns were written (they go out just after a return): the writer
        # finds each connection gone and it is dropped there, never handed out
        # - no checkout met a dead one, so nothing moved the generation on.
        assert stats["discarded"] == 4 and stats["pings"] == 0, seen
    else:
        assert stats["generation"] == 1 and stats["server_gone"] == 1, seen
        # one dead connection found (by its ping, or by reading its reset's answers:
        # PostgreSQL's reset is read at checkout); the other three dropped unpinged
        assert stats["pings"] <= 1, seen
    assert counts.connects == 1, seen  # one fresh connection served all ten, LIFO
    assert stats["created"] == 5 and stats["open"] == 1, seen


def test_a_query_that_finds_the_server_gone_drops_every_idle_connection(
    db: tuple[DBServer, Any],
) -> None:
    server, _ = db
    with surge.db.pool(server.url, autocommit=True, max_size=4) as pool:
        warm(pool, 4)
        held = pool.acquire()
        with pytest.raises(GONE_ERRORS), pool.connection() as conn:
            assert pool.stats()["idle"] == 2
            server.restart()  # under the application's feet: its query meets it
            query(conn)
        stats = pool.stats()
        # the disconnect moved the generation on and closed the other idle ones at once
        assert stats["generation"] == 1 and stats["idle"] == 0
        pool.release(held)  # of the old server: discarded, never handed out again
        assert pool.stats()["idle"] == 0
        with pool.connection() as conn:
            assert len(query(conn)) == 1
        assert pool.stats()["created"] == 5


def test_many_failures_in_one_restart_move_the_generation_once(db: tuple[DBServer, Any]) -> None:
    """Three connections in use when the server restarts each fail in turn; the
    first moves the generation on, the others (of the same old generation) do
    not again, so a fresh connection made in between stays pooled."""
    server, _ = db
    with surge.db.pool(server.url, autocommit=True, max_size=4) as pool:
        held = [pool.acquire() for _ in range(3)]
        server.restart()
        for i, conn in enumerate(held):
            with pytest.raises(GONE_ERRORS) as raised:
                query(conn)
            assert pool.driver.is_disconnect(raised.value, conn)
            pool.lost(conn)
            if i == 0:
                with pool.connection() as fresh:
                    assert query(fresh) == [(1,)]
        stats = pool.stats()
        assert (stats["generation"], stats["server_gone"]) == (1, 1)
        assert stats["idle"] == 1 and stats["created"] == 4
        with pool.connection() as conn:
            assert conn is fresh


def test_a_crash_is_survived_like_a_restart(start_postgresql: Any) -> None:
    server = start_postgresql()
    with surge.db.pool(server.url, autocommit=True, max_size=3) as pool:
        warm(pool, 3)
        server.kill()
        server.start()
        for _ in range(5):
            with pool.connection() as conn:
                assert query(conn) == [(1,)]
        assert pool.stats()["generation"] == 1 and pool.stats()["created"] == 4


def test_while_the_server_is_down_checkout_raises_and_then_recovers(
    start_mariadb: Any,
) -> None:
    server = start_mariadb()
    with surge.db.pool(server.url, autocommit=True, max_size=2) as pool:
        warm(pool, 2)
        server.stop()
        time.sleep(SOCKET_CHECK_AFTER)  # a connection back for less is not looked at
        with pytest.raises(pymysql.err.OperationalError):
            pool.acquire()
        assert pool.stats()["open"] == 0  # no slot leaked by the failed connects
        server.start()
        with pool.connection() as conn:
            assert query(conn) == [(1,)]


# ---------------------------------------------------------------- idle timeouts


def test_mariadb_wait_timeout_sets_max_lifetime(start_mariadb: Any, counter_for: Any) -> None:
    server = start_mariadb(settings={"wait_timeout": 2})
    counter = counter_for(server)
    with surge.db.pool(server.url, autocommit=True, max_size=1) as pool:
        assert pool.max_lifetime == "auto"
        warm(pool)
        assert pool.max_lifetime == pytest.approx(1.8)
        time.sleep(2.2)  # past the lifetime: retired before the server drops it
        counter.mark(pool)
        with pool.connection() as conn:
            assert query(conn) == [(1,)]
        counts = counter.since(pool)
        stats = pool.stats()
    assert stats["expired"] == 1 and stats["pings"] == 0 and stats["server_gone"] == 0
    # the new connection's login and the query; no ping of the expired one
    assert (counts.connects, counts.pings) == (1, 0)


def test_connections_made_while_the_lifetime_is_read_get_it_too(
    mariadb_server: DBServer,
) -> None:
    """Four threads connect at once to a fresh pool: one reads wait_timeout, the
    others wait for it, and no connection is left without a lifetime."""
    with surge.db.pool(mariadb_server.url, max_size=4) as pool:
        barrier = threading.Barrier(4)
        held: list[Any] = []

        def take() -> None:
            barrier.wait()
            held.append(pool.acquire())

        threads = [threading.Thread(target=take) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lifetime = pool.max_lifetime
        assert isinstance(lifetime, float)
        entries = list(pool.pool._core.checked_out.values())
        assert len(entries) == 4
        assert all(e.expires_at <= e.created_at + lifetime for e in entries)
        for conn in held:
            pool.release(conn)


def test_postgresql_idle_session_timeout_sets_max_lifetime(start_postgresql: Any) -> None:
    server = start_postgresql(settings={"idle_session_timeout": "2s"})
    with surge.db.pool(server.url, max_size=1) as pool:
        warm(pool)
        assert pool.max_lifetime == pytest.approx(1.8)
    with surge.db.pool(server.url, max_size=1, max_lifetime=None) as pool:
        warm(pool)  # asked for no lifetime: the server is not asked
        assert pool.max_lifetime is None


def test_no_idle_timeout_no_lifetime(postgresql_server: DBServer) -> None:
    with surge.db.pool(postgresql_server.url, max_size=1) as pool:
        warm(pool)
        assert pool.max_lifetime is None


# ---------------------------------------------------------------- exhaustion, threads


def test_exhaustion_raises_pool_timeout_saying_why(mariadb_server: DBServer) -> None:
    with surge.db.pool(mariadb_server.url, max_size=2, timeout=0.2) as pool:
        a, b = pool.acquire(), pool.acquire()
        with pytest.raises(PoolTimeout, match=r"max_size=2, 2 in use"):
            pool.acquire()
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(pool.acquire(timeout=5)))
        waiter.start()
        time.sleep(0.05)
        pool.release(a)
        waiter.join(5)
        assert got == [a]
        pool.release(b)
        pool.release(a)


def test_threads_share_a_small_pool(db: tuple[DBServer, Any]) -> None:
    server, counter = db
    errors: list[BaseException] = []
    with surge.db.pool(server.url, autocommit=True, max_size=3, timeout=30) as pool:
        counter.mark(pool)

        def work() -> None:
            try:
                for i in range(25):
                    with pool.connection() as conn:
                        assert len(query(conn, f"SELECT {i}")) == 1
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        counts = counter.since(pool)
        stats = pool.stats()
    assert errors == []
    assert stats["created"] <= 3 and counts.connects == stats["created"]
    # 200 queries plus the one that read the server's idle timeout, and nothing else
    # but PyMySQL's SET NAMES per login (it cannot trust the handshake's collation)
    per_login = 1 if server.kind == "mariadb" else 0
    assert counts.statements == 201 + per_login * counts.connects
    assert counts.rollbacks == 0 and counts.pings == 0


# ---------------------------------------------------------------- TLS


def test_one_ssl_context_for_every_connection(start_mariadb: Any) -> None:
    server = start_mariadb(tls=True)
    with surge.db.pool(server.url, max_size=2) as pool:  # ?ssl_ca=...: verified TLS
        a, b = pool.acquire(), pool.acquire()
        assert a.ctx is b.ctx and a.ctx.verify_mode.name == "CERT_REQUIRED"
        cur = a.cursor()
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1].startswith("TLS")
        pool.release(a)
        pool.release(b)
    plain_url = server.url.split("?")[0]
    with surge.db.pool(plain_url, max_size=2) as pool:  # PyMySQL's "preferred" TLS
        a, b = pool.acquire(), pool.acquire()
        assert a.ctx is b.ctx
        cur = a.cursor()
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1].startswith("TLS")
        pool.release(a)
        pool.release(b)
    with surge.db.pool(plain_url + "?ssl=false", max_size=1) as pool, pool.connection() as c:
        cur = c.cursor()
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1] == ""


# ---------------------------------------------------------------- SQLite, URLs


def test_sqlite_pool_rolls_back_an_open_transaction(tmp_path: Any) -> None:
    with surge.db.pool(f"sqlite:///{tmp_path}/app.db", max_size=2) as pool:
        with pool.connection() as conn:
            conn.execute("CREATE TABLE t (v INTEGER)")
        with pool.connection() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
        with pool.connection() as conn:
            assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)
            conn.execute("INSERT INTO t VALUES (2)")
            conn.commit()
        assert pool.stats()["rollbacks"] == 1


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "mariadb://app:p%40ss@db.example:3307/shop?charset=utf8mb4",
            ("mysql", "app", "p@ss", "db.example", 3307, "shop"),
        ),
        ("postgres://u@h/d", ("postgresql", "u", None, "h", None, "d")),
        ("sqlite:///rel.db", ("sqlite", None, None, None, None, "rel.db")),
        ("sqlite:////abs/x.db", ("sqlite", None, None, None, None, "/abs/x.db")),
    ],
)
def test_urls(url: str, expected: tuple[Any, ...]) -> None:
    u = DatabaseURL.parse(url)
    assert (u.scheme, u.user, u.password, u.host, u.port, u.database) == expected


@pytest.mark.parametrize("url", ["oracle://x/y", "sqlite://host/x.db", "mysql://h:notaport/d"])
def test_bad_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(UsageError):
        surge.db.pool(url)


def test_an_unsupported_driver_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="pymysql or mysqlclient"):
        surge.db.pool("mysql://u@h/d", driver="mysql-connector")
