"""mysqlclient's session reset: COM_RESET_CONNECTION, then the session's set-up in
one query when the connection has multi-statements (``USE``, the SET, the init
statements: two round trips), or apart when it has not (3 + N).

Round trips are counted at the server: its general log (a table here) has a row
per COM_QUERY and COM_INIT_DB of a connection - one for a query of several
statements - and none for COM_RESET_CONNECTION or COM_PING, which the admin
command counter (Com_admin_commands) counts instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from tests.conftest import require
from tests.db._sql import query, settle

import surge.db
from surge.db._session import JOIN, joinable, mysql_set_up
from surge.testing import DBServer

# -- what is joined, without a server -------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "joined"),
    [
        ("SET @a = 1", "SET @a = 1"),
        ("SET @a = 1;", "SET @a = 1"),
        ("SET @a = 1 ;\n ;  ", "SET @a = 1"),
        ("SET @a = 1 -- a note", "SET @a = 1 -- a note"),
        ("SET @a = 1 # a note", "SET @a = 1 # a note"),
        ("SET @a = 1; SET @b = 2", "SET @a = 1; SET @b = 2"),
        ("SET @a = 'x;y' /* c */", "SET @a = 'x;y' /* c */"),
        ("SET @a = 'it''s'", "SET @a = 'it''s'"),
        ("SET @a = 1--1", "SET @a = 1--1"),  # not a comment: 1 - (-1)
        ("SET @a = 1; -- only a comment after the ;", None),  # an empty statement
        ("-- only a comment", None),
        ("SET @a = 'open", None),
        ("SET @a = 'a\\'", None),  # closed without backslash escapes, open with
        ("SET @a = 'a\\''", None),  # closed with, open without
        ("SET @a = 1 /* open", None),
        ("SELECT `open", None),
        ("/*!40101 SET @a = 1 */", None),
        ("DELIMITER //", None),
        ("SET @a = 'é'", None),
    ],
)
def test_joinable(sql: str, joined: str | None) -> None:
    assert joinable(sql) == joined


def test_set_up_queries() -> None:
    init = ("SET @a = 1 -- a", "SET @b = 'open", "SET @c = 3")
    assert mysql_set_up("db", "SET x=1", init, multi=False) == ("db", ("SET x=1", *init))
    # joined up to the first statement that cannot be; the rest, in order, apart
    assert mysql_set_up("we`ird", "SET x=1", init, multi=True) == (
        None,
        (JOIN.join(["USE `we``ird`", "SET x=1", "SET @a = 1 -- a"]), *init[1:]),
    )
    assert mysql_set_up("bäd", "SET x=1", (), multi=True) == ("bäd", ("SET x=1",))
    assert mysql_set_up(None, "SET x=1", (), multi=True) == (None, ("SET x=1",))


# -- at the server --------------------------------------------------------------------

INIT_SQL = [
    "SET @init_a = 'a'",
    "SET SESSION sql_mode = 'ANSI_QUOTES,STRICT_ALL_TABLES' -- a trailing comment",
    "SET @init_b = 'b';",
]


class RoundTrips:
    """Commands of one connection logged by the server from ``mark()`` on."""

    def __init__(self, server: DBServer) -> None:
        self.admin = server.connect(admin=True, autocommit=True)
        cur = self.admin.cursor()
        cur.execute("SELECT @@global.log_output, @@global.general_log")
        self.saved = cur.fetchone()
        cur.execute("SET GLOBAL general_log = 0")
        cur.execute("SET GLOBAL log_output = 'TABLE'")
        cur.execute("TRUNCATE mysql.general_log")
        cur.execute("SET GLOBAL general_log = 1")
        self.thread = 0
        self.seen = 0
        self.admin_commands = 0

    def _admin_commands(self) -> int:
        cur = self.admin.cursor()
        cur.execute("SHOW GLOBAL STATUS LIKE 'Com_admin_commands'")
        return int(cur.fetchone()[1])

    def _rows(self) -> list[tuple[str, str]]:
        cur = self.admin.cursor()
        cur.execute(
            "SELECT command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log"
            " WHERE thread_id = %s ORDER BY event_time",
            (self.thread,),
        )
        return [tuple(row) for row in cur.fetchall()]

    def mark(self, thread: int) -> None:
        self.thread = thread
        self.seen = len(self._rows())
        self.admin_commands = self._admin_commands()

    def since(self) -> tuple[list[tuple[str, str]], int]:
        """The logged commands since ``mark`` and the admin commands (any client's)."""
        admin = self._admin_commands() - self.admin_commands
        return self._rows()[self.seen :], admin

    def close(self) -> None:
        cur = self.admin.cursor()
        cur.execute("SET GLOBAL general_log = 0")
        cur.execute(f"SET GLOBAL log_output = '{self.saved[0]}'")
        cur.execute("TRUNCATE mysql.general_log")
        if self.saved[1]:
            cur.execute("SET GLOBAL general_log = 1")
        self.admin.close()


@pytest.fixture
def trips(mariadb_server: DBServer) -> Iterator[RoundTrips]:
    require("MySQLdb")
    counter = RoundTrips(mariadb_server)
    yield counter
    counter.close()


def mysqlclient_pool(url: str, **options: Any) -> surge.db.DBPool:
    return surge.db.pool(url, driver="mysqlclient", max_size=1, **options)


def dirty(conn: Any) -> None:
    """What one checkout leaves that the next must not see."""
    query(conn, "SET @user_v = 5")
    query(conn, "SET NAMES latin1")
    query(conn, "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'")
    query(conn, "CREATE TEMPORARY TABLE tmp_t (v INT)")
    query(conn, "SET autocommit = 0")
    query(conn, "INSERT INTO set_up_t VALUES (99)")  # left open: never committed
    query(conn, "USE information_schema")


def reset_commands(pool: surge.db.DBPool, trips: RoundTrips) -> tuple[Any, ...]:
    """A checkout that dirties its session, its return and the reset: what the
    server logged for the reset, and its admin commands."""
    with pool.connection() as conn:
        first = conn
        (thread,) = query(conn, "SELECT CONNECTION_ID()")[0]
        dirty(conn)
        trips.mark(thread)
    settle(pool)  # the reset done (RESET_WRITER's, or settle's own)
    logged, admin = trips.since()
    return first, reset_only(logged), admin


#: What the return writes before the reset: the rollback of the open transaction,
#: the pool's autocommit mode again (mysqlclient's autocommit()).
RETURN_STEPS = ("ROLLBACK", "SET autocommit=1", "SET autocommit=0")


def reset_only(logged: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The commands of the reset: those after the return's own."""
    n = 0
    while n < len(logged) and logged[n][1] in RETURN_STEPS:
        n += 1
    assert n <= 2, logged
    return logged[n:]


def fresh_session(conn: Any, database: str, autocommit: bool) -> None:
    got = query(
        conn,
        "SELECT DATABASE(), @@character_set_client, @@collation_connection, @@autocommit,"
        " @@sql_mode, @init_a, @init_b, @user_v, @@in_transaction",
    )
    assert got == [
        (
            database,
            "utf8mb4",
            "utf8mb4_general_ci",
            int(autocommit),
            "ANSI_QUOTES,STRICT_ALL_TABLES",
            "a",
            "b",
            None,
            0,
        )
    ]
    with pytest.raises(Exception, match="doesn't exist"):
        query(conn, "SELECT * FROM tmp_t")
    assert query(conn, f"SELECT COUNT(*) FROM {database}.set_up_t") == [(0,)]  # rolled back


@pytest.fixture
def table(mariadb_server: DBServer) -> Iterator[None]:
    with mariadb_server.connect(autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("DROP TABLE IF EXISTS set_up_t")
        cur.execute("CREATE TABLE set_up_t (v INT) ENGINE=InnoDB")
    yield
    with mariadb_server.connect(autocommit=True) as conn:
        conn.cursor().execute("DROP TABLE IF EXISTS set_up_t")


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize("autocommit", [False, True], ids=["autocommit-off", "autocommit-on"])
def test_with_multi_statements_the_set_up_is_one_query(
    mariadb_server: DBServer, trips: RoundTrips, autocommit: bool
) -> None:
    with mysqlclient_pool(mariadb_server.url, autocommit=autocommit, init_sql=INIT_SQL) as pool:
        before = pool.stats()
        first, logged, admin = reset_commands(pool, trips)
        # COM_RESET_CONNECTION (an admin command), then one query: two round trips
        assert [kind for kind, _ in logged] == ["Query"]
        assert logged[0][1].startswith(f"USE `{mariadb_server.database}`{JOIN}SET NAMES utf8mb4")
        assert admin == 1
        # the statements the server ran, as it counts them (Questions): as before
        after = pool.stats()
        assert after["resets_written"] - before["resets_written"] == 1
        assert after["reset_commands"] - before["reset_commands"] == 3 + len(INIT_SQL)
        with pool.connection() as conn:
            assert conn is first
            fresh_session(conn, mariadb_server.database, autocommit)


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize("how", ["connect option", "set_server_option"])
def test_without_multi_statements_each_is_its_own(
    mariadb_server: DBServer, trips: RoundTrips, how: str
) -> None:
    options: dict[str, Any] = {"init_sql": INIT_SQL}
    if how == "connect option":
        options["connect_args"] = {"multi_statements": False}
    with mysqlclient_pool(mariadb_server.url, **options) as pool:
        if how == "set_server_option":
            with pool.connection() as conn:
                # kept by the server's reset, and not shown in libmariadb's client_flag
                conn.set_server_option(1)  # MYSQL_OPTION_MULTI_STATEMENTS_OFF
            settle(pool)
        before = pool.stats()
        first, logged, admin = reset_commands(pool, trips)
        assert [kind for kind, _ in logged] == ["Init DB"] + ["Query"] * (1 + len(INIT_SQL))
        assert logged[1][1].startswith("SET NAMES utf8mb4")
        assert [sql for _, sql in logged[2:]] == [sql.rstrip(";") for sql in INIT_SQL]  # as logged
        assert admin == 1
        after = pool.stats()
        assert after["reset_commands"] - before["reset_commands"] == 3 + len(INIT_SQL)
        with pool.connection() as conn:
            assert conn is first
            fresh_session(conn, mariadb_server.database, pool.autocommit)


@pytest.mark.usefixtures("table")
def test_multi_statements_on_again_joins_again(mariadb_server: DBServer, trips: RoundTrips) -> None:
    with mysqlclient_pool(mariadb_server.url, init_sql=INIT_SQL) as pool:
        with pool.connection() as conn:
            conn.set_server_option(1)  # MYSQL_OPTION_MULTI_STATEMENTS_OFF
            conn.set_server_option(0)  # and _ON
        _, logged, _ = reset_commands(pool, trips)
        assert [kind for kind, _ in logged] == ["Query"]


def test_a_statement_that_cannot_be_joined_and_those_after_run_apart(
    mariadb_server: DBServer, trips: RoundTrips
) -> None:
    init = ["SET @j1 = 1 -- joined", "SET @n1 = 2; -- not: an empty statement after", "SET @n2 = 3"]
    with mysqlclient_pool(mariadb_server.url, init_sql=init) as pool:
        with pool.connection() as conn:
            (thread,) = query(conn, "SELECT CONNECTION_ID()")[0]
            query(conn, "SET @j1 = NULL, @n1 = NULL, @n2 = NULL")
            trips.mark(thread)
        settle(pool)
        logged, admin = trips.since()
        assert [sql for _, sql in reset_only(logged)] == [
            JOIN.join(
                [
                    f"USE `{mariadb_server.database}`",
                    "SET NAMES utf8mb4 COLLATE utf8mb4_general_ci,"
                    f" autocommit={int(pool.autocommit)}",
                    "SET @j1 = 1 -- joined",
                ]
            ),
            *init[1:],
        ]
        assert admin == 1
        with pool.connection() as conn:
            assert query(conn, "SELECT @j1, @n1, @n2") == [(1, 2, 3)]


@pytest.fixture
def odd_database(mariadb_server: DBServer) -> Iterator[str]:
    name = "we`ird db"
    quoted = "`we``ird db`"
    with mariadb_server.connect(admin=True, autocommit=True) as admin:
        cur = admin.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {quoted}")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {quoted}.set_up_t (v INT) ENGINE=InnoDB")
        cur.execute(f"GRANT ALL ON {quoted}.* TO {mariadb_server.user}@'%'")
    yield name
    with mariadb_server.connect(admin=True, autocommit=True) as admin:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {quoted}")


def test_a_database_named_with_a_backtick(
    mariadb_server: DBServer, trips: RoundTrips, odd_database: str
) -> None:
    base = mariadb_server.url.rsplit("/", 1)[0]
    url = f"{base}/{quote(odd_database, safe='')}"
    with mysqlclient_pool(url, init_sql=INIT_SQL) as pool:
        first, logged, admin = reset_commands(pool, trips)
        assert [kind for kind, _ in logged] == ["Query"] and admin == 1
        assert logged[0][1].startswith(f"USE `we``ird db`{JOIN}")
        with pool.connection() as conn:
            assert conn is first
            got = query(conn, "SELECT DATABASE(), @init_a, @init_b, @user_v")
            assert got == [(odd_database, "a", "b", None)]
            assert query(conn, "SELECT COUNT(*) FROM set_up_t") == [(0,)]  # its own table


def rename(server: DBServer, name: str, to: str) -> None:
    with server.connect(autocommit=True) as admin:
        cur = admin.cursor()
        cur.execute("SET SESSION lock_wait_timeout = 5")  # bounded, if a session holds it
        cur.execute(f"RENAME TABLE {name} TO {to}")


@pytest.mark.parametrize("multi", [True, False], ids=["multi-statements", "one-by-one"])
def test_an_init_statement_that_fails_fails_the_checkout(
    mariadb_server: DBServer, multi: bool
) -> None:
    """The set-up fails at its second statement: the connection is closed, not
    handed on with half a session; the checkout fails while every new session's
    set-up fails too, and works once it can."""
    MySQLdb = require("MySQLdb")
    with mariadb_server.connect(autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS init_src (n INT)")
        cur.execute("DELETE FROM init_src")
        cur.execute("INSERT INTO init_src VALUES (7)")
    init = ["SET @fa = 1", "SET @fn = (SELECT n FROM init_src)", "SET @fb = 2"]
    extra: dict[str, Any] = {} if multi else {"connect_args": {"multi_statements": False}}
    try:
        with mysqlclient_pool(mariadb_server.url, init_sql=init, timeout=2, **extra) as pool:
            with pool.connection() as conn:
                first = conn
                query(conn, "SET @user_v = 1")
                conn.commit()  # the set-up's read of init_src holds its metadata lock
                rename(mariadb_server, "init_src", "init_src_away")  # before the reset
            # the reset failed (the connection closed), then the new session's set-up
            with pytest.raises(MySQLdb.ProgrammingError, match="init_src"), pool.connection():
                pass
            assert not first.open
            rename(mariadb_server, "init_src_away", "init_src")
            with pool.connection() as conn:
                assert conn is not first
                assert query(conn, "SELECT @fa, @fn, @fb, @user_v") == [(1, 7, 2, None)]
            assert pool.stats()["created"] == 2
    finally:
        with mariadb_server.connect(autocommit=True) as conn, contextlib.suppress(Exception):
            conn.cursor().execute("DROP TABLE IF EXISTS init_src, init_src_away")
