"""What surge.db needs to know of each DB-API driver, and nothing more.

For each backend: how to connect from a URL, whether a connection has a
transaction open (so that a return rolls back only when there is something to
roll back - SQLAlchemy's unconditional rollback made pooled queries 1.4-5x a
reused connection), whether an idle connection's socket has something to read
(a server that restarts or times a connection out closes it, and a closed TCP
socket reads as ready: the cheapest liveness hint there is, no round trip), how
to ping without opening a transaction, and which errors mean the server is gone
(so the connection is discarded, never handed out again).
"""

from __future__ import annotations

import importlib
import select
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from surge.errors import UsageError

#: MySQL/MariaDB client errors that mean the connection is gone: 2006 server has
#: gone away, 2013 lost connection during query, 2055 lost connection at
#: handshake, 4031 disconnected by the server (idle timeout, MySQL 8.0.24+),
#: 1927 connection killed (MariaDB), 1053 server shutdown in progress.
MYSQL_GONE = frozenset({2006, 2013, 2055, 4031, 1927, 1053})

#: PostgreSQL SQLSTATEs that mean the session is over: class 08 (connection
#: exception) and 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now).
PG_GONE = frozenset({"57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004"})


@dataclass(frozen=True)
class DatabaseURL:
    """``scheme://user:password@host:port/database?option=value``."""

    scheme: str  # mysql | postgresql | sqlite
    user: str | None
    password: str | None
    host: str | None
    port: int | None
    database: str | None
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str) -> DatabaseURL:
        parts = urlsplit(url)
        scheme = parts.scheme.lower().split("+")[0]
        scheme = {"mariadb": "mysql", "postgres": "postgresql"}.get(scheme, scheme)
        if scheme not in ("mysql", "postgresql", "sqlite"):
            raise UsageError(
                f"unsupported database URL {url!r}: use mysql://, mariadb://, "
                "postgresql:// or sqlite:///path"
            )
        if scheme == "sqlite":
            path = unquote(parts.path)
            if parts.netloc or not path:
                raise UsageError(f"{url!r}: a SQLite URL is sqlite:///relative or sqlite:////abs")
            return cls("sqlite", None, None, None, None, path[1:] or ":memory:")
        try:
            port = parts.port
        except ValueError as e:
            raise UsageError(f"{url!r}: {e}") from None
        return cls(
            scheme,
            unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password is not None else None,
            parts.hostname,
            port,
            unquote(parts.path.lstrip("/")) or None,
            dict(parse_qsl(parts.query)),
        )


def readable(fd: int) -> bool:
    """Whether ``fd`` has bytes (or EOF) to read now; one poll, no waiting."""
    try:
        ready, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):  # closed underneath us: -1 or EBADF
        return True
    return bool(ready)


class Driver:
    """The operations surge.db needs from one DB-API module."""

    name = ""
    module: Any  # the DB-API module

    def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        raise NotImplementedError

    def in_transaction(self, conn: Any) -> bool:
        """Whether a rollback would do anything; answered from the driver's state."""
        raise NotImplementedError

    def connect_with(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """A connection from the DB-API ``connect()``'s own arguments (as
        SQLAlchemy's dialects make them), of the class surge tracks."""
        return self.module.connect(*args, **kwargs)

    def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        """Put the connection back in the pool's mode if its user changed it (after
        the rollback: on MySQL, turning autocommit on commits an open transaction)."""
        raise NotImplementedError

    def is_closed(self, conn: Any) -> bool:
        """The driver knows the connection is unusable (closed, or broken by an error)."""
        raise NotImplementedError

    def has_input(self, conn: Any) -> bool:
        """An idle connection whose socket is readable got something it did not ask
        for: usually EOF or a goodbye (restart, idle timeout, kill); PostgreSQL also
        sends notices and notifications.  Either way worth a ping before use."""
        return False

    def ping(self, conn: Any) -> None:
        """One round trip that changes no state; raises if the server is gone."""
        raise NotImplementedError

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        raise NotImplementedError

    def server_idle_timeout(self, conn: Any) -> float | None:
        """The server's idle-connection timeout in seconds, if it has one (one round trip)."""
        return None


def _pymysql_preferred_context() -> ssl.SSLContext:
    """What PyMySQL builds for its default "preferred" TLS, built once.

    PyMySQL (1.2.4) calls ``ssl.create_default_context()`` in every ``connect``
    when no TLS option is given, loading the system CA store each time: 42-52 ms
    per connect measured, against 0.9 ms with TLS off.  This is the same context
    (no verification: "preferred" only encrypts if the server offers TLS),
    shared by every connection of a pool.
    """
    ctx = ssl.create_default_context()
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def mysql_connect_params(
    url: DatabaseURL, autocommit: bool, *, database_key: str = "database"
) -> dict[str, Any]:
    """Connection keywords from a ``mysql://`` URL, for PyMySQL and for aiomysql
    (which calls the database ``db``): a socket (``?unix_socket=``) or host and
    port, ``?charset=`` and ``?connect_timeout=`` seconds."""
    params: dict[str, Any] = {
        "user": url.user,
        "password": url.password or "",
        database_key: url.database,
        "autocommit": autocommit,
    }
    socket = url.options.get("unix_socket") or url.options.get("socket")
    if socket:
        params["unix_socket"] = socket
    else:
        params["host"] = url.host or "127.0.0.1"
        params["port"] = url.port or 3306
    if "charset" in url.options:
        params["charset"] = url.options["charset"]
    if "connect_timeout" in url.options:
        params["connect_timeout"] = float(url.options["connect_timeout"])
    return params


def _mysql_tls(url: DatabaseURL, ssl_context: ssl.SSLContext | None) -> dict[str, Any]:
    """The TLS arguments for every connect of a pool, with one SSLContext.

    ``ssl_context`` or ``?ssl_ca=PATH`` (verify the certificate and the host name,
    like PostgreSQL's ``verify-full``): TLS required.  ``?ssl=false``
    (or ``ssl_disabled=true``): no TLS.  Neither: PyMySQL's own default,
    "preferred" TLS, with the context built once instead of per connect.
    """
    options = url.options
    off = options.get("ssl", "").lower() in ("0", "false", "off", "no", "disabled")
    if off or options.get("ssl_disabled", "").lower() in ("1", "true", "on", "yes"):
        return {"ssl_disabled": True}
    if ssl_context is None and "ssl_ca" in options:
        ssl_context = ssl.create_default_context(cafile=options["ssl_ca"])
    if ssl_context is not None:
        return {"ssl": ssl_context}
    return {}


#: The MySQL protocol's SERVER_STATUS bits that surge reads (in every OK packet).
IN_TRANS = 0x0001
AUTOCOMMIT = 0x0002


def mysql_transaction_open(conn: Any) -> bool:
    """Whether a PyMySQL-protocol connection (PyMySQL's, aiomysql's) may hold an
    open transaction: False only when that is known, never guessed.

    The server reports ``SERVER_STATUS_IN_TRANS`` and ``SERVER_STATUS_AUTOCOMMIT``
    in its OK packets, but PyMySQL (1.2) and aiomysql keep ``server_status`` from
    OK packets only, not from the EOF packet that ends a result set.  After a
    ``SELECT``, ``SELECT ... FOR UPDATE`` or ``INSERT ... RETURNING`` with
    autocommit off, the flag still says what the statement *before* said, while
    InnoDB holds a transaction (a snapshot, row locks, uncommitted rows) that
    the next user of the connection would inherit and commit.  So the connection
    classes below mark a connection *unsure* from the moment a command is sent
    until its answer ends in an OK packet, and then:

    * results still unread (a multi-statement, a ``CALL``, an unbuffered read
      left half-way): the server's last word is not in yet - open;
    * the last OK packet said a transaction is open - open;
    * unsure with autocommit off - open (any statement on an InnoDB table opens
      one, reads included);
    * unsure with autocommit on - closed: under autocommit only ``BEGIN``,
      ``START TRANSACTION``, ``XA START`` and ``SET autocommit`` open or keep a
      transaction, and each ends in an OK packet that reports it (a ``CALL`` that
      begins one inside ends in one too, after its result sets).
    """
    result = conn._result
    if result is not None and (result.has_next or result.unbuffered_active):
        return True
    status = conn.server_status or 0
    if status & IN_TRANS:
        return True
    # A connection of another class (made by a SQLAlchemy do_connect handler)
    # does not say: unsure.
    return bool(getattr(conn, "_surge_unsure", True)) and not status & AUTOCOMMIT


def pymysql_connection_class(base: Any, preferred_tls: ssl.SSLContext | None) -> Any:
    """PyMySQL's ``Connection`` that knows when its transaction state is unsure
    (see :func:`mysql_transaction_open`), and that uses ``preferred_tls``, if
    given, for PyMySQL's default "preferred" TLS instead of a context per connect."""

    class Connection(base):  # type: ignore[misc]
        #: Set when a command goes out, cleared when its answer ends in an OK
        #: packet (the only packets whose server status PyMySQL keeps).
        _surge_unsure = False

        def _execute_command(self, command: int, sql: Any) -> None:
            # Set after the call too: the call first drains unread results
            # (next_result), whose OK packets would clear it.
            self._surge_unsure = True
            super()._execute_command(command, sql)
            self._surge_unsure = True

        def _read_ok_packet(self) -> Any:
            ok = super()._read_ok_packet()
            self._surge_unsure = False
            return ok

        def _read_query_result(self, unbuffered: bool = False) -> Any:
            self._surge_unsure = True
            affected = super()._read_query_result(unbuffered=unbuffered)
            result = self._result
            self._surge_unsure = result.server_status is None or bool(result.has_next)
            return affected

        if preferred_tls is not None:

            def _create_ssl_ctx(self, sslp: Any) -> Any:
                # The one shared context for PyMySQL's "preferred" mode ({}).
                return preferred_tls if sslp == {} else super()._create_ssl_ctx(sslp)

    return Connection


class PyMySQL(Driver):
    name = "pymysql"

    def __init__(self, url: DatabaseURL, ssl_context: ssl.SSLContext | None) -> None:
        self.module = importlib.import_module("pymysql")
        self.tls = _mysql_tls(url, ssl_context)
        self.connection_class: Any = pymysql_connection_class(
            self.module.connections.Connection,
            None if self.tls else _pymysql_preferred_context(),
        )

    def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        params = mysql_connect_params(url, autocommit)
        params.update(self.tls)
        params.update(extra)
        return self.connection_class(**params)

    def connect_with(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.connection_class(*args, **{**self.tls, **kwargs})

    def in_transaction(self, conn: Any) -> bool:
        return mysql_transaction_open(conn)

    def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        # PyMySQL's get_autocommit() reads the last OK packet's status: exact,
        # since only statements answered by an OK packet change the mode.
        if conn.get_autocommit() != autocommit:
            conn.autocommit(autocommit)

    def is_closed(self, conn: Any) -> bool:
        return not conn.open

    def has_input(self, conn: Any) -> bool:
        sock = conn._sock  # PyMySQL's socket; None once closed
        return sock is None or readable(sock.fileno())

    def ping(self, conn: Any) -> None:
        conn.ping(reconnect=False)  # COM_PING: no statement, no transaction

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        return mysql_is_disconnect(error)

    def server_idle_timeout(self, conn: Any) -> float | None:
        return mysql_idle_timeout(conn)


def mysql_is_disconnect(error: BaseException) -> bool:
    """Whether a MySQL driver's error (PyMySQL's, aiomysql's, mysqlclient's) means
    the connection is gone."""
    # By class name, not identity: after pymysql.install_as_MySQLdb() (Django),
    # importing MySQLdb.err loads a second copy of pymysql.err, and whichever
    # copy ``self.module.err`` names, the connection may raise the other's.
    names = {cls.__name__ for cls in type(error).__mro__}
    if "OperationalError" in names and error.args:
        return error.args[0] in MYSQL_GONE
    # The drivers raise InterfaceError for a connection they know is closed, and
    # PyMySQL lets socket errors through on some paths.
    return "InterfaceError" in names or isinstance(error, OSError)


def mysql_idle_timeout(conn: Any) -> float | None:
    # The session value: what the server applies to this (non-interactive) client.
    cursor = conn.cursor()
    try:
        cursor.execute("SELECT @@wait_timeout")
        row = cursor.fetchone()
    finally:
        cursor.close()
    return float(row[0]) if row else None


def _selects_only(sql: Any) -> bool:
    """One ``SELECT`` statement and nothing else (no ``;``, no leading comment):
    under autocommit it cannot leave a transaction open."""
    head = (sql.encode() if isinstance(sql, str) else bytes(sql)).lstrip()
    return head[:6].upper() == b"SELECT" and b";" not in head


class MySQLClient(Driver):
    """mysqlclient (``MySQLdb``, libmariadb), Django's recommended MySQL driver.

    libmariadb keeps the server status from every packet, but mysqlclient shows
    only its autocommit bit, not the transaction one.  So the connection class
    below marks a connection unsure at every statement and sure again at
    COMMIT and ROLLBACK; under autocommit, a lone ``SELECT`` leaves it as it
    was (it cannot open a transaction there).  An unsure connection is rolled
    back on return: with autocommit off, any checkout that ran a statement."""

    name = "mysqlclient"

    def __init__(self, url: DatabaseURL) -> None:
        self.module = importlib.import_module("MySQLdb")
        options = url.options
        self.tls: dict[str, Any] = {}
        off = options.get("ssl", "").lower() in ("0", "false", "off", "no", "disabled")
        if off or options.get("ssl_disabled", "").lower() in ("1", "true", "on", "yes"):
            self.tls = {"ssl_mode": "DISABLED"}
        elif "ssl_ca" in options:
            self.tls = {"ssl_mode": "VERIFY_IDENTITY", "ssl": {"ca": options["ssl_ca"]}}

        base = importlib.import_module("MySQLdb.connections").Connection

        class Connection(base):  # type: ignore[misc, valid-type]
            _surge_unsure = False

            def query(self, sql: Any) -> None:
                if not (_selects_only(sql) and self.get_autocommit()):
                    self._surge_unsure = True
                super().query(sql)

            def commit(self) -> None:
                super().commit()
                self._surge_unsure = False

            def rollback(self) -> None:
                super().rollback()
                self._surge_unsure = False

        self.connection_class = Connection

    def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        params = mysql_connect_params(url, autocommit)
        if "connect_timeout" in params:
            params["connect_timeout"] = max(1, round(params["connect_timeout"]))
        params = {k: v for k, v in params.items() if v is not None}  # it takes no None
        return self.connect_with([], {**params, **self.tls, **extra})

    def connect_with(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.connection_class(*args, **kwargs)

    def in_transaction(self, conn: Any) -> bool:
        return bool(getattr(conn, "_surge_unsure", True))

    def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        conn.autocommit(autocommit)  # mysqlclient sends it only if the mode differs

    def is_closed(self, conn: Any) -> bool:
        return not conn.open

    def has_input(self, conn: Any) -> bool:
        try:
            return readable(conn.fileno())
        except Exception:  # closed: nothing to read but the news
            return True

    def ping(self, conn: Any) -> None:
        conn.ping()  # COM_PING; mysqlclient 2.x does not reconnect

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        return mysql_is_disconnect(error)

    def server_idle_timeout(self, conn: Any) -> float | None:
        return mysql_idle_timeout(conn)


def pg_connect_params(url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> dict[str, Any]:
    """psycopg's connect keywords from a ``postgresql://`` URL (sync and async)."""
    params: dict[str, Any] = {"dbname": url.database, "user": url.user}
    if url.password is not None:
        params["password"] = url.password
    host = url.options.get("host") or url.host  # ?host=/run/postgresql: a socket dir
    if host:
        params["host"] = host
    if url.port:
        params["port"] = url.port
    for key, value in url.options.items():
        if key != "host":
            params[key] = value  # libpq's own: sslmode, sslrootcert, application_name, ...
    params["autocommit"] = autocommit
    params.update(extra)
    return {k: v for k, v in params.items() if v is not None}


class PsycopgState:
    """What the sync and async psycopg drivers read alike, with no I/O: libpq's
    transaction status, the connection's state, its socket, and which errors mean
    the server is gone. The driver sets ``module``, ``idle`` and ``ok``."""

    module: Any
    idle: Any  # pq.TransactionStatus.IDLE
    ok: Any  # pq.ConnStatus.OK

    def in_transaction(self, conn: Any) -> bool:
        # libpq's status of the last ReadyForQuery: IDLE, INTRANS, INERROR (or
        # UNKNOWN for a broken connection, which the rollback then finds out).
        return bool(conn.pgconn.transaction_status != self.idle)

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken)

    def autocommit_differs(self, conn: Any, autocommit: bool) -> bool:
        return bool(conn.autocommit) != autocommit

    def has_input(self, conn: Any) -> bool:
        # An idle connection's socket is watched by no loop: bytes or EOF that
        # arrived while idle are still there to see.
        return readable(conn.pgconn.socket)

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        if not isinstance(error, self.module.Error | OSError):
            return False  # the application's own exception: says nothing of the server
        if getattr(error, "sqlstate", None) in PG_GONE:
            return True
        # psycopg marks a connection broken when the server or the network cut it.
        return bool(conn.broken or conn.pgconn.status != self.ok)


class Psycopg(PsycopgState, Driver):
    name = "psycopg"

    def __init__(self) -> None:
        self.module = importlib.import_module("psycopg")
        self.idle = self.module.pq.TransactionStatus.IDLE
        self.ok = self.module.pq.ConnStatus.OK

    def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        return self.module.connect(**pg_connect_params(url, autocommit, extra))

    def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        if self.autocommit_differs(conn, autocommit):
            conn.autocommit = autocommit  # client-side in psycopg: no round trip

    def ping(self, conn: Any) -> None:
        # An empty query: one round trip, no statement run, no transaction opened.
        if conn.closed:
            raise self.module.OperationalError("the connection is closed")
        result = conn.pgconn.exec_(b"")
        if conn.pgconn.status != self.ok or result.status == self.module.pq.ExecStatus.FATAL_ERROR:
            raise self.module.OperationalError(
                "the connection is broken: "
                + (result.error_message or b"").decode(errors="replace").strip()
            )

    def server_idle_timeout(self, conn: Any) -> float | None:
        # idle_session_timeout (PostgreSQL 14+) closes sessions idle outside a
        # transaction; 0 (the default) is off.  Read without psycopg's BEGIN.
        result = conn.pgconn.exec_(
            b"SELECT setting FROM pg_settings WHERE name = 'idle_session_timeout'"
        )
        if result.status != self.module.pq.ExecStatus.TUPLES_OK or result.ntuples == 0:
            return None
        ms = int(result.get_value(0, 0) or b"0")
        return ms / 1000 if ms else None


class SQLite(Driver):
    name = "sqlite3"

    def __init__(self) -> None:
        self.module = importlib.import_module("sqlite3")

    def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        # The pool hands a connection to one thread at a time.
        params: dict[str, Any] = {"check_same_thread": False}
        if autocommit:
            params["isolation_level"] = None
        params.update(extra)
        return self.module.connect(url.database or ":memory:", **params)

    def connect_with(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.module.connect(*args, **{"check_same_thread": False, **kwargs})

    def in_transaction(self, conn: Any) -> bool:
        return bool(conn.in_transaction)

    def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        if (conn.isolation_level is None) != autocommit:
            conn.isolation_level = None if autocommit else ""

    def is_closed(self, conn: Any) -> bool:
        try:
            conn.total_changes  # noqa: B018 - raises ProgrammingError once closed
        except self.module.ProgrammingError:
            return True
        return False

    def ping(self, conn: Any) -> None:
        conn.execute("SELECT 1")

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        return self.is_closed(conn)


def driver_for(url: DatabaseURL, name: str | None, ssl_context: ssl.SSLContext | None) -> Driver:
    if url.scheme == "mysql":
        if name in ("mysqlclient", "MySQLdb"):
            if ssl_context is not None:
                raise UsageError("mysqlclient takes no SSLContext: use ?ssl_ca=PATH")
            return MySQLClient(url)
        if name not in (None, "pymysql"):
            raise UsageError(f"driver {name!r} for MySQL: use pymysql or mysqlclient")
        return PyMySQL(url, ssl_context)
    if name not in (None, {"postgresql": "psycopg", "sqlite": "sqlite3"}[url.scheme]):
        raise UsageError(f"driver {name!r} is not supported for {url.scheme}")
    if url.scheme == "postgresql":
        return Psycopg()
    return SQLite()
