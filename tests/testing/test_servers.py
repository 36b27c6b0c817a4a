"""The database server fixtures work: logins over TCP and the socket, settings,
authentication, TLS, restart and crash, and what happens when a server is missing."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from surge.testing import DBServer, ServerNotInstalled, servers
from surge.testing.servers import find_mariadb, find_postgresql

#: MySQL client errors for a connection the server dropped: 2006 "server has gone
#: away", 2013 "lost connection during query", 4031 (MySQL 8) "disconnected by the
#: server because of inactivity".
MYSQL_GONE = {2006, 2013, 4031}


def select_one(conn: Any) -> Any:
    cur = conn.cursor()
    cur.execute("SELECT 1")
    return cur.fetchone()[0]


def process_dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


def port_refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def assert_mysql_gone(conn: Any) -> None:
    with pytest.raises(pymysql.err.OperationalError) as raised:
        select_one(conn)
    assert raised.value.args[0] in MYSQL_GONE, raised.value


# ---------------------------------------------------------------- logins, TCP and socket


def test_mariadb_tcp_and_socket(mariadb_server: DBServer) -> None:
    server = mariadb_server
    assert server.kind == "mariadb" and server.host == "127.0.0.1"
    assert server.url == (
        f"mysql://{server.user}:{server.password}@127.0.0.1:{server.port}/{server.database}"
    )
    assert server.socket_url.endswith(f"?unix_socket={server.socket}")
    with server.connect() as tcp, server.connect(via_socket=True) as unix:
        assert select_one(tcp) == 1 and select_one(unix) == 1
        cur = tcp.cursor()
        cur.execute("SELECT DATABASE(), CURRENT_USER(), @@bind_address, @@port, @@socket")
        assert cur.fetchone() == (
            server.database,
            f"{server.user}@%",
            "127.0.0.1",
            server.port,
            server.socket,
        )
        cur = unix.cursor()
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone() == (f"{server.user}@localhost",)
    with pytest.raises(pymysql.err.OperationalError):  # a password is required
        server.connect(password="wrong")


def test_postgresql_tcp_and_socket(postgresql_server: DBServer) -> None:
    server = postgresql_server
    assert server.kind == "postgresql" and server.host == "127.0.0.1"
    assert server.url == (
        f"postgresql://{server.user}:{server.password}@127.0.0.1:{server.port}/{server.database}"
    )
    assert Path(server.socket).is_socket()
    with psycopg.connect(server.url) as tcp, psycopg.connect(server.socket_url) as unix:
        assert select_one(tcp) == 1 and select_one(unix) == 1
        assert tcp.info.host == "127.0.0.1" and unix.info.host == str(Path(server.socket).parent)
        row = tcp.execute(
            "SELECT current_database(), current_user, current_setting('listen_addresses'),"
            " rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert row == (server.database, server.user, "127.0.0.1", False)


# ---------------------------------------------------------------- settings, auth, TLS


def test_mariadb_settings_apply(start_mariadb: Any) -> None:
    server = start_mariadb(settings={"wait_timeout": 1, "max_connections": 12})
    conn = server.connect()
    cur = conn.cursor()
    cur.execute("SELECT @@wait_timeout, @@max_connections")
    assert cur.fetchone() == (1, 12)
    time.sleep(2.5)  # idle beyond wait_timeout: the server closes the connection
    assert_mysql_gone(conn)


def test_mariadb_tls(start_mariadb: Any) -> None:
    server = start_mariadb(tls=True)
    assert server.tls_ca and server.url.endswith(f"?ssl_ca={server.tls_ca}")
    with server.connect() as conn:  # verifies the certificate against tls_ca
        cur = conn.cursor()
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1].startswith("TLS")


def test_postgresql_settings_apply_to_an_ordinary_user(start_postgresql: Any) -> None:
    server = start_postgresql(settings={"max_connections": 6})
    conns = [server.connect() for _ in range(3)]  # 6 minus 3 reserved for superusers
    assert conns[0].execute("SHOW max_connections").fetchone() == ("6",)
    with pytest.raises(psycopg.OperationalError, match="reserved"):
        server.connect()
    for conn in conns:
        conn.close()


def test_postgresql_scram_and_tls(start_postgresql: Any) -> None:
    server = start_postgresql(auth="scram-sha-256", tls=True)
    with psycopg.connect(server.url) as conn:  # sslmode=verify-full against tls_ca
        assert conn.info.pgconn.ssl_in_use
        assert conn.execute("SELECT 1").fetchone() == (1,)
    with psycopg.connect(server.socket_url) as conn:
        assert not conn.info.pgconn.ssl_in_use
    for via_socket in (False, True):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            server.connect(via_socket=via_socket, password="wrong")


# ---------------------------------------------------------------- restart and crash


def test_mariadb_restart_keeps_data_and_drops_connections(start_mariadb: Any) -> None:
    server = start_mariadb()
    conn = server.connect(autocommit=True)
    conn.cursor().execute("CREATE TABLE t (v INT)")
    conn.cursor().execute("INSERT INTO t VALUES (42)")
    old_pid, port, sock = server.pid, server.port, server.socket

    server.restart()

    assert (server.port, server.socket) == (port, sock) and server.pid != old_pid
    assert_mysql_gone(conn)
    for via_socket in (False, True):
        with server.connect(via_socket=via_socket) as fresh:
            cur = fresh.cursor()
            cur.execute("SELECT v FROM t")
            assert cur.fetchall() == ((42,),)


def test_postgresql_restart_keeps_data_and_drops_connections(start_postgresql: Any) -> None:
    server = start_postgresql()
    conn = server.connect(autocommit=True)
    conn.execute("CREATE TABLE t (v int)")
    conn.execute("INSERT INTO t VALUES (42)")
    old_pid, port, sock = server.pid, server.port, server.socket

    server.restart()

    assert (server.port, server.socket) == (port, sock) and server.pid != old_pid
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    assert conn.closed
    for via_socket in (False, True):
        with server.connect(via_socket=via_socket) as fresh:
            assert fresh.execute("SELECT v FROM t").fetchall() == [(42,)]


def test_mariadb_kill_then_start_recovers(start_mariadb: Any) -> None:
    server = start_mariadb()
    with server.connect(autocommit=True) as conn:
        conn.cursor().execute("CREATE TABLE t (v INT) ENGINE=InnoDB")
        conn.cursor().execute("INSERT INTO t VALUES (7)")
        pid = server.pid
        assert pid is not None
        server.kill()
        assert server.pid is None and not server.running
        assert process_dead(pid)
        assert port_refuses(server.port)
        assert_mysql_gone(conn)
    server.start()  # InnoDB crash recovery: the committed row is there
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT v FROM t")
        assert cur.fetchall() == ((7,),)


def test_postgresql_kill_takes_the_backends_too(start_postgresql: Any) -> None:
    server = start_postgresql()
    conn = server.connect(autocommit=True)
    conn.execute("CREATE TABLE t (v int)")
    conn.execute("INSERT INTO t VALUES (7)")
    backend = conn.info.backend_pid
    server.kill()
    assert process_dead(backend)
    assert port_refuses(server.port)
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    server.start()  # crash recovery from the WAL
    with server.connect() as fresh:
        assert fresh.execute("SELECT v FROM t").fetchall() == [(7,)]


# ---------------------------------------------------------------- missing binaries


def test_missing_binaries_name_the_debian_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(servers, "SBIN_DIRS", ())
    monkeypatch.setattr(servers, "POSTGRESQL_LIB_DIR", tmp_path)
    with pytest.raises(ServerNotInstalled, match="apt-get install mariadb-server"):
        find_mariadb()
    with pytest.raises(ServerNotInstalled, match="apt-get install postgresql"):
        find_postgresql()


def test_missing_server_fails_under_ci_and_skips_elsewhere(tmp_path: Path) -> None:
    """The conftest's rule, run in a pytest of its own: the hint either way."""
    (tmp_path / "conftest.py").write_text((Path(__file__).parents[1] / "conftest.py").read_text())
    (tmp_path / "test_missing.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from surge.testing import ServerNotInstalled, servers

            @pytest.fixture(autouse=True)
            def no_mariadb(monkeypatch):
                def missing():
                    raise ServerNotInstalled("no mariadbd", "apt-get install mariadb-server")
                monkeypatch.setattr(servers, "find_mariadb", missing)

            def test_under_ci(monkeypatch, start_mariadb):
                monkeypatch.setenv("CI", "true")
                start_mariadb()

            def test_locally(monkeypatch, start_mariadb):
                monkeypatch.delenv("CI", raising=False)
                start_mariadb()
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-rfs", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    out = result.stdout
    assert "1 failed, 1 skipped" in out, out
    assert "FAILED test_missing.py::test_under_ci" in out, out
    assert out.count("apt-get install mariadb-server") >= 2, out
