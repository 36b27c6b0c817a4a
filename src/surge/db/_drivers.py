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

import contextlib
import functools
import importlib
import math
import select
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from surge.db._session import (
    COM_QUERY,
    COM_RESET_CONNECTION,
    RESET_WAIT,
    RESET_WRITER,
    SESSION_PROBE,
    WATCHDOG,
    ClientState,
    MySQLReset,
    cut,
    cut_fd,
    drive_bounded,
    may_change_database,
    mysql_reset,
    mysql_set_up,
    ok_packet_status,
    pg_finish_reset,
    pg_ping,
    pg_reset,
    pg_send_reset,
    pg_status,
    release_owned,
    send_without_waiting,
    sever_fd,
    socket_identity,
    unresettable,
)
from surge.errors import UsageError
from surge.extras import optional_import
from surge.pool import _fork

#: MySQL/MariaDB client errors that mean the connection is gone: 2006 server has
#: gone away, 2013 lost connection during query, 2055 lost connection at
#: handshake, 4031 disconnected by the server (idle timeout, MySQL 8.0.24+),
#: 1927 connection killed (MariaDB), 1053 server shutdown in progress.
MYSQL_GONE = frozenset({2006, 2013, 2055, 4031, 1927, 1053})

#: PostgreSQL SQLSTATEs that mean the session is over: class 08 (connection
#: exception) and 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now).
PG_GONE = frozenset({"57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004"})


def shown(url: str) -> str:
    """A database URL as an error message quotes it: without its password
    (the userinfo, and secret query parameters: surge.trace.redact)."""
    from surge.trace.redact import safe_url

    return repr(safe_url(url))


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
                f"unsupported database URL {shown(url)}: use mysql://, mariadb://, "
                "postgresql:// or sqlite:///path"
            )
        if scheme == "sqlite":
            path = unquote(parts.path)
            if parts.netloc or not path:
                raise UsageError(
                    f"{shown(url)}: a SQLite URL is sqlite:///relative or sqlite:////abs"
                )
            return cls("sqlite", None, None, None, None, path[1:] or ":memory:")
        try:
            port = parts.port
        except ValueError as e:
            raise UsageError(f"{shown(url)}: {e}") from None
        return cls(
            scheme,
            unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password is not None else None,
            parts.hostname,
            port,
            unquote(parts.path.lstrip("/")) or None,
            dict(parse_qsl(parts.query)),
        )


@contextlib.contextmanager
def pool_cursor(conn: Any) -> Iterator[Any]:
    """A cursor for the pool's own statements, closed after them - unless they
    were interrupted (a BaseException that is not an Exception): a cursor's
    close then reads the rest of an answer that may never be complete
    (mysqlclient raises "2014 Commands out of sync" in place of the
    interruption), and the connection is discarded anyway."""
    cursor = conn.cursor()
    try:
        yield cursor
    except Exception:
        with contextlib.suppress(Exception):
            cursor.close()
        raise
    cursor.close()


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

    def ping(self, conn: Any, within: float = RESET_WAIT) -> None:
        """One round trip that changes no state, its answer waited for at most
        ``within`` seconds; raises if the server is gone or silent."""
        raise NotImplementedError

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        raise NotImplementedError

    def server_idle_timeout(self, conn: Any) -> float | None:
        """The server's idle-connection timeout in seconds, if it has one (one round trip)."""
        return None

    # -- the session reset (see surge.db._session) ----------------------------------------

    #: When the answers of a session reset are read: "at return" (the driver cannot
    #: write without reading: mysqlclient), "at checkout" (psycopg: libpq must leave
    #: pipeline mode before the user may use the connection), or "lazily" (at a
    #: checkout after >= SOCKET_CHECK_AFTER idle, else just after the connection's
    #: next command went out: its class reads them first).
    reset_answers: Literal["at return", "at checkout", "lazily"] = "at checkout"
    #: The driver's per-connection settings a user may change, put back at return.
    client_attributes: tuple[str, ...] = ()

    def run(self, conn: Any, sql: str) -> None:
        """Run one statement of the pool's session set-up (a round trip)."""
        with pool_cursor(conn) as cursor:
            cursor.execute(sql)

    def prepare_session(self, conn: Any, init_sql: tuple[str, ...]) -> None:
        """Learn what the session reset must set again (I/O, once per connection
        and again after glue's set-up); nothing for most drivers."""

    def session_ready(self, conn: Any, autocommit: bool, init_sql: tuple[str, ...]) -> None:
        """The session is as every checkout must find it: record what to put back."""
        if self.client_attributes:
            conn._surge_client = ClientState(conn, self.client_attributes)

    def restore_client(self, conn: Any) -> None:
        state = getattr(conn, "_surge_client", None)
        if state is not None:
            state.restore(conn)

    def used(self, conn: Any) -> bool:
        """Whether anything went to the server since the session was last reset
        (True when the driver cannot tell)."""
        return True

    def send_reset(self, conn: Any) -> bool:
        """Start the session reset (see surge.db._session) and put the client's side
        back; False if the connection's protocol state is unknown (results unread,
        a command in progress): the caller severs it."""
        raise NotImplementedError

    def reset_pending(self, conn: Any) -> bool:
        """A reset was written whose answers are still to be read."""
        return False

    def finish_reset(self, conn: Any, within: float = RESET_WAIT) -> None:
        """Read the answers of the pending reset, waiting at most ``within`` seconds
        for them; raises if it failed or the server is silent."""

    def protocol_idle(self, conn: Any) -> bool:
        """Whether the connection is between commands (safe to close politely)."""
        return True

    def socket_fd(self, conn: Any) -> int | None:
        return None

    def sever(self, conn: Any) -> None:
        """Make ``conn`` unusable without a byte to the server (see _session.sever_fd)."""
        sever_fd(self.socket_fd(conn))

    def sever_inherited(self, conn: Any) -> None:
        """``sever`` in a forked child: the descriptor only, nothing else touched -
        another thread of the parent may have been inside the connection's code at
        the fork, holding a lock that nobody here will release."""
        sever_fd(self.socket_fd(conn))


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


class MySQLSessionState:
    """The session reset's state in a PyMySQL-protocol connection, and its steps
    that wait for nothing: the first base of ``pymysql_connection_class``'s class
    and of its asyncio twin's (surge.db._async), before the driver's own
    ``Connection``.  Reading and writing - blocking or awaited - stay theirs."""

    #: Set when a command goes out, cleared when its answer ends in an OK
    #: packet (the only packets whose server status PyMySQL keeps).
    _surge_unsure = False
    #: A command went out since the session was last reset.
    _surge_used = True
    #: A command's answer is not read yet: the protocol state is unknown.
    _surge_busy = False
    #: This connection's reset (built when its session was ready).
    _surge_reset: MySQLReset | None = None
    #: A reset due (the connection came back), not written yet: the next
    #: command takes it along, or the reset's writer (a thread, the loop) does.
    _surge_unsent: MySQLReset | None = None
    #: A reset written whose answers are not read yet: (OK packets, others).
    _surge_pending: tuple[int, int] | None = None
    #: The session may be in another database than the pool's.
    _surge_db_changed = False
    #: Bytes that the next write puts in front of its own.
    _surge_prefix: bytes | None = None
    #: A statement went out whose effect the server's reset does not undo.
    _surge_unresettable = False
    #: Whether the client allows several statements in one text (USE may hide there).
    _surge_multi = False
    # The driver's own, as used here.
    _result: Any
    server_status: int | None

    def _surge_take_reset(self) -> None:
        """Put an unwritten reset in front of the next write (PyMySQL: under
        ``_surge_io``; aiomysql: one loop, no lock)."""
        reset = self._surge_unsent
        if reset is not None:
            data, n_ok, n_results = reset.compose(self._surge_db_changed)
            self._surge_prefix = data
            self._surge_pending = (n_ok, n_results)
            self._surge_unsent = None
            self._surge_db_changed = False

    def _surge_sending(self, command: int, sql: Any) -> bool:
        """A command goes out (first in ``_execute_command``): the session is used,
        its answer unread, its transaction state unsure, and resettable no more
        if the command leaves what the reset does not undo; whether it may leave
        the session in another database (the next reset selects the pool's)."""
        self._surge_used = self._surge_busy = True
        self._surge_unsure = True
        if unresettable(command, sql):
            self._surge_unresettable = True
        return may_change_database(command, sql, self._surge_multi)

    def _write_bytes(self, data: bytes) -> Any:
        prefix = self._surge_prefix
        if prefix is not None:
            self._surge_prefix = None
            data = prefix + data
        return super()._write_bytes(data)  # type: ignore[misc]

    def _surge_mark_reset(self) -> bool:
        """At return: the session reset is due (see surge.db._session); False if
        the protocol state is unknown.  (A closed connection never gets here: the
        pool asked ``is_closed`` just before.)"""
        reset, result = self._surge_reset, self._result
        if reset is None or self._surge_busy:
            return False
        if result is not None and (result.unbuffered_active or result.has_next):
            return False  # results unread: never read them at return
        if self._surge_unresettable:
            return False  # closed instead: see _session.unresettable
        self._surge_unsent = reset
        self._surge_used = self._surge_unsure = False
        self._result = None
        # As the reset will leave it (get_autocommit() reads it).
        self.server_status = AUTOCOMMIT if reset.autocommit else 0
        self._surge_write_later()
        return True

    def _surge_write_later(self) -> None:
        """Have the reset written FLUSH_AFTER from now unless the next command
        takes it first: each class's own writer (a thread, the loop)."""
        raise NotImplementedError

    def _surge_reset_ok(self, payload: bytes) -> None:
        """One of the reset's OK packets read: its server status kept; an error
        packet raises its error, anything else OperationalError 2027."""
        if payload[:1] != b"\x00":
            packet = importlib.import_module("pymysql.protocol").MysqlPacket(
                payload, getattr(self, "encoding", None) or getattr(self, "_encoding", "utf-8")
            )
            if packet.is_error_packet():
                packet.raise_for_error()
            raise importlib.import_module("pymysql.err").OperationalError(
                2027, "the pooled session's reset was answered by a non-OK packet"
            )
        self.server_status = ok_packet_status(payload)


def reset_failed(error: BaseException) -> BaseException:
    """What reading a reset's answers that raised ``error`` raises (the connection
    is closed by then): a disconnect as it is, any other MySQL error as 2014
    (the session's state is unknown), anything else (an interruption) as it is."""
    err = importlib.import_module("pymysql.err")
    if isinstance(error, err.MySQLError) and not mysql_is_disconnect(error):
        failure = err.OperationalError(2014, f"resetting the pooled session failed: {error}")
        failure.__cause__ = error
        return failure  # type: ignore[no-any-return]
    return error


def pymysql_connection_class(base: Any, preferred_tls: ssl.SSLContext | None) -> Any:
    """PyMySQL's ``Connection`` that knows when its transaction state is unsure
    (see :func:`mysql_transaction_open`), and that uses ``preferred_tls``, if
    given, for PyMySQL's default "preferred" TLS instead of a context per connect."""

    class Connection(MySQLSessionState, base):  # type: ignore[misc]
        #: Held while the reset's bytes go out (by this thread or RESET_WRITER).
        _surge_io: threading.Lock
        # PyMySQL's own, as used here.
        _next_seq_id: int
        _current_timeout: Any
        _read_timeout: Any

        def _execute_command(self, command: int, sql: Any) -> None:
            use = self._surge_sending(command, sql)
            if self._surge_unsent is not None or self._surge_pending is not None:
                with self._surge_io:
                    self._surge_take_reset()
                    # The command goes out behind the reset (in the same send if
                    # it was not written yet); the reset's answers come first.
                    super()._execute_command(command, sql)
                    next_seq = self._next_seq_id
                    self._surge_read_reset()
                    self._next_seq_id = next_seq
            else:
                super()._execute_command(command, sql)
            # Set after the call too: the call first drains unread results
            # (next_result), whose OK packets would clear it.
            self._surge_unsure = True
            if use:
                self._surge_db_changed = True

        def connect(self, sock: Any = None) -> None:
            # PyMySQL's connect_timeout bounds the TCP connect only: the server's
            # greeting and the login are read with the read timeout (none by
            # default), so a server that accepts and says nothing held a connect
            # for ever.  They are bounded by connect_timeout too.
            read_timeout = self._read_timeout
            if read_timeout is None and self.connect_timeout:
                self._read_timeout = self.connect_timeout
            try:
                super().connect(sock)
            finally:
                self._read_timeout = read_timeout

        def close(self) -> None:
            lock = self.__dict__.get("_surge_io")
            if lock is None:
                super().close()
                return
            with lock:  # not in the middle of RESET_WRITER's write
                super().close()

        def _read_ok_packet(self) -> Any:
            try:
                ok = super()._read_ok_packet()
            except self._surge_err.MySQLError:
                self._surge_answered()
                raise
            self._surge_unsure = self._surge_busy = False
            return ok

        def _read_query_result(self, unbuffered: bool = False) -> Any:
            self._surge_unsure = True
            try:
                affected = super()._read_query_result(unbuffered=unbuffered)
            except self._surge_err.MySQLError:
                self._surge_answered()
                raise
            result = self._result
            self._surge_unsure = result.server_status is None or bool(result.has_next)
            self._surge_busy = False  # unread rows or results show in self._result
            return affected

        def _surge_answered(self) -> None:
            """The server answered with an error: that ends the answer, unless the
            error is the connection's end (then PyMySQL closed it)."""
            if self._sock is not None:
                self._surge_busy = False

        def set_character_set(self, charset: str, collation: str | None = None) -> None:
            super().set_character_set(charset, collation)
            self._surge_busy = False  # answered, by a packet read outside the above

        def _surge_write_later(self) -> None:
            RESET_WRITER.due(self, time.monotonic())

        def _surge_flush(self) -> None:
            """RESET_WRITER: write a reset still due, if nobody is using the socket."""
            if self._surge_unsent is None or not self._surge_io.acquire(False):
                return  # taken along by a command, or a command is going out now
            try:
                if self._surge_unsent is None or self._sock is None:
                    return
                data, n_ok, n_results = self._surge_unsent.compose(self._surge_db_changed)
                if not send_without_waiting(self._sock, data):
                    # the server is gone or not reading (part of a packet may be
                    # out): never used again, and the checkout that finds it says so
                    self._surge_gone = True
                    self._force_close()
                    return
                self._surge_pending = (n_ok, n_results)  # before unsent: see the fast path
                self._surge_unsent = None
                self._surge_db_changed = False
            finally:
                self._surge_io.release()

        def _surge_read_reset(self, timeout: float | None = None) -> None:
            """Read the written reset's answers, waiting at most ``timeout`` for
            them (None, behind a command: RESET_WAIT, or the driver's read timeout
            if shorter - a session silent that long is gone, and the command
            fails as the connection's end); a failure closes the connection."""
            pending, self._surge_pending = self._surge_pending, None
            assert pending is not None
            n_ok, n_results = pending
            own = self._read_timeout
            if timeout is None:  # behind a command: as long as the command may wait, or
                timeout = RESET_WAIT if own is None else min(own, RESET_WAIT)  # RESET_WAIT
            try:
                # Every read of the answers (the init statements' results too,
                # which PyMySQL reads with _read_timeout) waits at most ``timeout``.
                self._read_timeout = timeout
                read = self._read_bytes
                if self._current_timeout != timeout:
                    self._sock.settimeout(timeout)
                    self._current_timeout = timeout
                for _ in range(n_ok):
                    header = read(4)
                    self._surge_reset_ok(read(header[0] | header[1] << 8 | header[2] << 16))
                for _ in range(n_results):
                    self._next_seq_id = 1
                    super()._read_query_result()
                    self._result = None
                self._read_timeout = own
            except BaseException as error:
                self._read_timeout = own
                self._force_close()
                raise reset_failed(error)  # noqa: B904 - its cause is set when it is another
            self._surge_unsure = False

        _surge_err = importlib.import_module("pymysql.err")

        if preferred_tls is not None:

            def _create_ssl_ctx(self, sslp: Any) -> Any:
                # The one shared context for PyMySQL's "preferred" mode ({}).
                return preferred_tls if sslp == {} else super()._create_ssl_ctx(sslp)

    return Connection


#: What a user of a PyMySQL or aiomysql connection may change on the client's side.
MYSQL_CLIENT_ATTRIBUTES = (
    "charset",
    "_charset",
    "collation",
    "encoding",
    "_encoding",
    "autocommit_mode",
    "encoders",
    "decoders",
    "cursorclass",
    "sql_mode",
    "init_command",
    "_local_infile",
)


class MySQLProtocolSession:
    """The session reset of a connection of ``pymysql_connection_class`` (PyMySQL's)
    or of its asyncio twin (aiomysql's): what the sync and async drivers share.
    The I/O that sets a session up (``prepare_session``) is each driver's."""

    reset_answers: Literal["at return", "at checkout", "lazily"] = "lazily"
    client_attributes: tuple[str, ...] = MYSQL_CLIENT_ATTRIBUTES

    @_fork.cached_property
    def written(self) -> list[int]:
        """Resets written by this driver's (this pool's) connections, and the
        commands they held (a reset is one to four)."""
        return [0, 0]

    def session_ready(self, conn: Any, autocommit: bool, init_sql: tuple[str, ...]) -> None:
        conn._surge_client = ClientState(conn, self.client_attributes)
        wanted = getattr(conn, "_surge_wanted", None)
        if wanted is None:  # not set up by prepare_session: a do_connect handler's class
            return
        init_command = getattr(conn, "init_command", None)
        conn._surge_reset = mysql_reset(
            database=getattr(conn, "db", None) or getattr(conn, "_db", None),
            wanted=wanted,
            after_reset=conn._surge_after_reset,
            init_statements=((init_command,) if init_command else ()) + init_sql,
            encoding=getattr(conn, "encoding", None) or conn._encoding,
            written=self.written,
        )
        if "_surge_io" not in conn.__dict__:
            # An RLock: release_owned asks whether this thread holds it.
            conn._surge_io = _fork.rlock()
        conn._surge_multi = bool(conn.client_flag & MULTI_STATEMENTS)
        conn._surge_used = conn._surge_db_changed = conn._surge_unresettable = False

    def count_set_up(self, set_up: list[str]) -> None:
        """The set-up's reset counts as one written (its probes and statements as
        its commands): the server counts them all, and so must the pool."""
        self.written[0] += 1
        self.written[1] += 3 + len(set_up)

    def restore_client(self, conn: Any) -> None:
        state = getattr(conn, "_surge_client", None)
        if state is not None:
            state.restore(conn)

    def used(self, conn: Any) -> bool:
        return bool(getattr(conn, "_surge_used", True))

    def send_reset(self, conn: Any) -> bool:
        if getattr(conn, "_surge_reset", None) is None:
            raise UsageError(
                "surge.db cannot reset a connection of another class: a do_connect "
                "handler that makes its own connections needs reset='none'"
            )
        sent: bool = conn._surge_mark_reset()
        if sent:
            self.restore_client(conn)
        return sent

    def reset_pending(self, conn: Any) -> bool:
        return getattr(conn, "_surge_pending", None) is not None

    def protocol_idle(self, conn: Any) -> bool:
        result = conn._result
        return not (
            getattr(conn, "_surge_busy", False)
            or (result is not None and (result.unbuffered_active or result.has_next))
        )

    def forget_reset(self, conn: Any) -> None:
        """A severed connection writes and reads no reset any more."""
        conn._surge_unsent = conn._surge_pending = conn._surge_prefix = None


def set_up_again(
    conn: Any, wanted: tuple[Any, ...], after: tuple[Any, ...], init_sql: tuple[str, ...]
) -> list[str]:
    """What sets a session up again after the set-up's reset: the SET of what the
    reset does not restore, the driver's init_command, the pool's init_sql."""
    encoding = getattr(conn, "encoding", None) or conn._encoding
    set_up = mysql_reset(
        database=None, wanted=wanted, after_reset=after, init_statements=(), encoding=encoding
    ).statements()
    init_command = getattr(conn, "init_command", None)
    return [*set_up, *((init_command,) if init_command else ()), *init_sql]


#: The client capability that lets one text carry several statements.
MULTI_STATEMENTS = 1 << 16
#: COM_SET_OPTION's value that turns it on (MYSQL_OPTION_MULTI_STATEMENTS_ON).
MULTI_STATEMENTS_ON = 0


class PyMySQL(MySQLProtocolSession, Driver):
    name = "pymysql"

    def __init__(self, url: DatabaseURL, ssl_context: ssl.SSLContext | None) -> None:
        self.module = optional_import("pymysql", "surge.db: mysql://")
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

    def ping(self, conn: Any, within: float = RESET_WAIT) -> None:
        with read_timeout(conn, within):  # PyMySQL's own has no limit by default
            conn.ping(reconnect=False)  # COM_PING: no statement, no transaction

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        # _surge_gone: RESET_WRITER could not write to it (see _surge_flush)
        return mysql_is_disconnect(error) or getattr(conn, "_surge_gone", False)

    def server_idle_timeout(self, conn: Any) -> float | None:
        return mysql_idle_timeout(conn)

    def finish_reset(self, conn: Any, within: float = RESET_WAIT) -> None:
        """At checkout: the answers should be there; a server silent ``within``
        seconds is gone (2013, as PyMySQL says for a read that times out)."""
        try:
            if not conn._surge_io.acquire(timeout=within):  # RESET_WRITER stuck writing
                raise self.module.err.OperationalError(2013, "the server took no reset")
            if conn._surge_pending is not None:
                conn._surge_read_reset(within)
        finally:
            release_owned(conn._surge_io)

    def prepare_session(self, conn: Any, init_sql: tuple[str, ...]) -> None:
        """What the session is now (its character set, autocommit, sql_mode) and,
        once per connection, what COM_RESET_CONNECTION leaves: one reset now, then
        the session set up again.  Two to four round trips, at connect."""
        if not hasattr(conn, "_surge_mark_reset"):
            return
        wanted = self._probe(conn)
        if getattr(conn, "_surge_after_reset", None) is None:
            conn._execute_command(COM_RESET_CONNECTION, b"")
            conn._read_ok_packet()
            after = self._probe(conn)
            conn._surge_after_reset = after
            set_up = set_up_again(conn, wanted, after, init_sql)
            for sql in set_up:
                self.run(conn, sql)
            self.count_set_up(set_up)
        else:
            self.written[1] += 1  # the probe
        conn._surge_wanted = wanted

    def _probe(self, conn: Any) -> tuple[Any, ...]:
        with pool_cursor(conn) as cursor:
            cursor.execute(SESSION_PROBE)
            return tuple(cursor.fetchone())

    def socket_fd(self, conn: Any) -> int | None:
        sock = conn._sock
        return None if sock is None else int(sock.fileno())

    def sever(self, conn: Any) -> None:
        super().sever(conn)
        self.forget_reset(conn)
        result = conn._result
        if result is not None:  # a cursor's close must not read the rest
            result.unbuffered_active = result.has_next = False
        conn._force_close()  # closes the dead descriptor: the connection reads closed


@contextlib.contextmanager
def read_timeout(conn: Any, seconds: float) -> Iterator[None]:
    """A PyMySQL connection's reads wait at most ``seconds`` (or its own read
    timeout, if shorter) inside the block."""
    own = conn._read_timeout
    conn._read_timeout = seconds if own is None else min(own, seconds)
    try:
        yield
    finally:
        conn._read_timeout = own


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
    with pool_cursor(conn) as cursor:
        cursor.execute("SELECT @@wait_timeout")
        row = cursor.fetchone()
    return float(row[0]) if row else None


def _selects_only(sql: Any) -> bool:
    """One ``SELECT`` statement and nothing else (no ``;``, no leading comment):
    under autocommit it cannot leave a transaction open."""
    head = (sql.encode() if isinstance(sql, str) else bytes(sql)).lstrip()
    return head[:6].upper() == b"SELECT" and b";" not in head


class _StreamedResult:
    """mysqlclient's unbuffered result (``use_result``), which tells its connection
    when its last row was read: until then the connection's protocol state is
    unknown to the pool (libmariadb's reset would read every row left)."""

    __slots__ = ("_connection", "_result")

    def __init__(self, result: Any, connection: Any) -> None:
        self._result = result
        self._connection = connection

    def fetch_row(self, maxrows: int = 1, how: int = 0) -> Any:
        rows = self._result.fetch_row(maxrows, how)
        if maxrows == 0 or len(rows) < maxrows:
            self._connection._surge_streaming = False
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)


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
        self.module = optional_import("MySQLdb", "surge.db: driver='mysqlclient'")
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

            #: A statement went out whose effect the server's reset does not undo.
            _surge_unresettable = False

            #: A statement's answer is not read yet (set until its result is
            #: stored or known to be none): an interruption there leaves the
            #: protocol state unknown, and the pool cuts the connection (as
            #: PyMySQL's class does) instead of handing it on.
            _surge_busy = False

            def query(self, sql: Any) -> None:
                if not (_selects_only(sql) and self.get_autocommit()):
                    self._surge_unsure = True
                if unresettable(COM_QUERY, sql):
                    self._surge_unresettable = True
                self._surge_busy = True
                super().query(sql)
                if not self.field_count():  # answered by an OK packet: nothing to read
                    self._surge_busy = False

            def store_result(self) -> Any:
                result = super().store_result()
                self._surge_busy = False
                return result

            def next_result(self) -> int:
                self._surge_busy = True
                more = int(super().next_result())
                if more != 0 or not self.field_count():
                    self._surge_busy = False
                return more

            #: The user turned multi-statements off (COM_SET_OPTION, which the
            #: server's reset keeps, and which libmariadb's client_flag does not show).
            _surge_multi_off = False

            def set_server_option(self, option: int) -> Any:
                self._surge_multi_off = True  # unknown until the server answers
                answer = super().set_server_option(option)
                self._surge_multi_off = option != MULTI_STATEMENTS_ON
                return answer

            def commit(self) -> None:
                super().commit()
                self._surge_unsure = False

            def rollback(self) -> None:
                super().rollback()
                self._surge_unsure = False

            #: Rows of an unbuffered result (use_result: SSCursor) are unread.
            _surge_streaming = False

            def close(self) -> None:
                # Never free the MYSQL* under RESET_WRITER's mysql_reset_connection
                # (a call without the GIL): that was a use after free, a segfault.
                # A reset stuck on a silent server is ended by severing its socket.
                lock = self.__dict__.get("_surge_io")
                if lock is None:
                    super().close()
                    return
                try:
                    if not lock.acquire(timeout=RESET_WAIT):
                        with contextlib.suppress(Exception):
                            cut_fd(self.fileno())
                        lock.acquire()
                    super().close()
                finally:
                    release_owned(lock)

            def use_result(self) -> Any:
                result = super().use_result()
                self._surge_busy = False  # the rows left unread are _surge_streaming
                if result is not None:
                    self._surge_streaming = True
                    result = _StreamedResult(result, self)
                return result

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

    def ping(self, conn: Any, within: float = RESET_WAIT) -> None:
        # COM_PING (mysqlclient 2.x does not reconnect); libmariadb waits for the
        # answer without a limit: a server silent ``within`` has its socket cut.
        # now: mysqlclient's fileno() fails during a call
        sock = socket_identity(self.socket_fd(conn))
        with WATCHDOG.guard(within, lambda: cut(sock)):
            conn.ping()

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        return mysql_is_disconnect(error) or getattr(conn, "_surge_gone", False)

    def server_idle_timeout(self, conn: Any) -> float | None:
        return mysql_idle_timeout(conn)

    reset_answers = "at checkout"
    client_attributes = ("encoders", "converter", "cursorclass", "encoding", "_binary_prefix")

    def session_ready(self, conn: Any, autocommit: bool, init_sql: tuple[str, ...]) -> None:
        super().session_ready(conn, autocommit, init_sql)
        with pool_cursor(conn) as cursor:
            cursor.execute("SELECT DATABASE(), @@character_set_client, @@collation_connection")
            database, charset, collation = cursor.fetchone()
        conn._surge_session = (database, charset, collation, autocommit, init_sql)
        set_sql = f"SET NAMES {charset} COLLATE {collation}, autocommit={int(autocommit)}"
        # Without multi-statements and with (see _reset_now)
        conn._surge_set_up = tuple(
            mysql_set_up(database, set_sql, init_sql, multi) for multi in (False, True)
        )
        # What the init statements mark (as they did when each was its own query:
        # the joined query's USE of the database's name must not)
        conn._surge_init_unresettable = any(unresettable(COM_QUERY, sql) for sql in init_sql)
        conn._surge_unresettable = False
        if "_surge_io" not in conn.__dict__:
            # Re-entrant: RESET_WRITER closes a connection whose reset failed
            # while it holds the lock, and close takes it (Connection.close).
            conn._surge_io = _fork.rlock()
            conn._surge_flush = functools.partial(self._flush, conn)

    def send_reset(self, conn: Any) -> bool:
        """The reset is due: RESET_WRITER does it FLUSH_AFTER from now, off the
        returning thread, unless a checkout comes first and does it itself.
        mysqlclient cannot write without reading, so either way it costs the
        thread that does it its round trips (libmariadb lets the GIL go)."""
        if conn._surge_streaming or conn._surge_unresettable or conn._surge_busy:
            return False  # an answer or rows left unread (never read at return), or
            # see unresettable: the pool severs it
        conn._surge_due = True
        conn._surge_unsure = False
        self.restore_client(conn)
        RESET_WRITER.due(conn, time.monotonic())
        return True

    def reset_pending(self, conn: Any) -> bool:
        return bool(getattr(conn, "_surge_due", False))

    def finish_reset(self, conn: Any, within: float = RESET_WAIT) -> None:
        try:
            if not conn._surge_io.acquire(timeout=within):  # RESET_WRITER's reset is stuck
                cut_fd(self.socket_fd(conn))  # which ends it
                raise self.module.OperationalError(2013, "the server took no reset")
            if conn._surge_due:
                self._reset(conn, within)
        finally:
            release_owned(conn._surge_io)

    def _reset(self, conn: Any, within: float = RESET_WAIT) -> None:
        """Under the connection's lock: libmariadb's ``mysql_reset_connection``
        (COM_RESET_CONNECTION), then the set-up; a server silent for ``within``
        has its socket shut down under libmariadb's feet (it waits without a
        timeout), which ends the call with an error."""
        sock = socket_identity(self.socket_fd(conn))
        with WATCHDOG.guard(within, lambda: cut(sock)):
            self._reset_now(conn)

    def _reset_now(self, conn: Any) -> None:
        """COM_RESET_CONNECTION, then the session's set-up (``mysql_set_up``): with
        multi-statements one query (``USE``, the SET, the init statements), two
        round trips in all; without, COM_INIT_DB, the SET and each init
        statement apart, 3 + N.  An error in any raises (the caller closes the
        connection: a session half set up is never handed on)."""
        database, _, _, _, init_sql = conn._surge_session
        if self._reset_connection(conn) != 0:  # out of sync: never used again
            conn._surge_due = False
            raise self.module.OperationalError(2014, "resetting the pooled session failed")
        # The statements the server counts (Questions), one query or several:
        # the reset, the database's, the SET, the init statements.
        self.written[0] += 1
        self.written[1] += 2 + bool(database) + len(init_sql)
        off = getattr(conn, "_surge_multi_off", False)  # (a do_connect class: not known)
        multi = bool(conn.client_flag & MULTI_STATEMENTS) and not off
        init_db, queries = conn._surge_set_up[multi]
        if init_db:
            conn.select_db(init_db)
        for sql in queries:
            conn.query(sql)
            while True:  # whatever they answer, read it all (an error raises)
                conn.store_result()
                if conn.next_result() != 0:
                    break
        conn._surge_unresettable = conn._surge_init_unresettable
        conn._surge_unsure = False
        # Last: until now a checkout must wait for this (finish_reset's lock).
        conn._surge_due = False

    def _flush(self, conn: Any) -> None:
        """RESET_WRITER: the reset still due, if no checkout is doing it."""
        if not conn._surge_due or not conn._surge_io.acquire(False):
            return
        try:
            if conn._surge_due and conn.open:
                self._reset(conn)
        except Exception:  # found at the next checkout: a ping, a discard
            conn._surge_gone = True
            conn._surge_due = False
            with contextlib.suppress(Exception):
                conn.close()
        finally:
            conn._surge_io.release()

    @_fork.cached_property
    def written(self) -> list[int]:
        """Resets done, and the commands in them (as MySQLProtocolSession's)."""
        return [0, 0]

    @_fork.cached_property
    def _reset_connection(self) -> Any:
        """``mysql_reset_connection`` of the client library mysqlclient is linked
        with, called on the connection's ``MYSQL*`` (mysqlclient does not wrap it)."""
        import ctypes

        library = ctypes.CDLL(importlib.import_module("MySQLdb._mysql").__file__)
        reset = library.mysql_reset_connection
        reset.argtypes, reset.restype = [ctypes.c_void_p], ctypes.c_int
        pointer = ctypes.pythonapi.PyCapsule_GetPointer
        pointer.argtypes, pointer.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
        name = b"_mysql.connection.native_connection"

        def reset_connection(conn: Any) -> int:
            return int(reset(pointer(conn._get_native_connection(), name)))

        return reset_connection

    def protocol_idle(self, conn: Any) -> bool:
        return not (getattr(conn, "_surge_streaming", False) or getattr(conn, "_surge_busy", False))

    def socket_fd(self, conn: Any) -> int | None:
        try:
            return int(conn.fileno())
        except Exception:
            return None


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

    #: psycopg's per-connection settings a user may change, put back at return.
    client_attributes: tuple[str, ...] = (
        "_autocommit",
        "_isolation_level",
        "_read_only",
        "_deferrable",
        "_begin_statement",
        "row_factory",
        "cursor_factory",
        "server_cursor_factory",
        "_notice_handlers",
        "_notify_handlers",
        "_tpc",
    )

    def session_ready(self, conn: Any, autocommit: bool, init_sql: tuple[str, ...]) -> None:
        conn._surge_client = ClientState(conn, self.client_attributes)
        conn._surge_init = tuple(sql.encode() for sql in init_sql)
        prepared = conn._prepared
        conn._surge_prepare = (prepared.prepare_threshold, prepared.prepared_max)
        conn._surge_first_prepared = prepared._prepared_idx  # this session's: from here
        # The adapters as they are now, kept aside: each session gets a copy of
        # them (psycopg copies on write, so a copy costs a few dict references).
        adapters = conn._adapters
        conn._surge_adapters = None if adapters is None else type(adapters)(adapters)
        conn._adapters = self._fresh_adapters(conn)

    def _fresh_adapters(self, conn: Any) -> Any:
        template = conn._surge_adapters
        return None if template is None else type(template)(template)

    def _restore_psycopg(self, conn: Any) -> None:
        """The client's side of a fresh session: the attributes, the adapters, no
        notification.  psycopg's prepared statements stay (see ``send_reset``):
        only the deallocations it had queued go (the reset deallocates whatever
        it does not keep), and its counts toward ``prepare_threshold``."""
        state = getattr(conn, "_surge_client", None)
        if state is None:
            return
        state.restore(conn)
        adapters = conn._adapters
        if adapters is not None and _adapters_changed(adapters):
            conn._adapters = self._fresh_adapters(conn)
        prepared = conn._prepared
        if prepared._to_flush:
            prepared._to_flush.clear()
        # The counts toward prepare_threshold start again: a statement is
        # prepared when one session runs it that often, as before - the reset
        # that keeps statements costs more than DISCARD ALL (benchmarks/README.md).
        if prepared._counts:
            prepared._counts.clear()
        threshold, most = conn._surge_prepare
        if prepared.prepare_threshold != threshold or prepared.prepared_max != most:
            prepared.prepare_threshold, prepared.prepared_max = threshold, most
        if conn._notifies_backlog:
            conn._notifies_backlog.clear()

    def send_reset(self, conn: Any) -> bool:
        """Write the reset (``pg_reset``): it keeps the statements psycopg's cache
        holds - by name, and only those prepared through the protocol, never an
        application's SQL PREPARE - and deallocates the rest; the names that did
        not survive it leave the cache at ``finish_generator``."""
        prepared = conn._prepared
        first = getattr(conn, "_surge_first_prepared", 0)
        before: list[bytes] = []
        made: list[bytes] = []
        for name in prepared._names.values():
            (made if _prepared_number(name) >= first else before).append(name)
        reset = pg_reset(
            pg_status(conn, self.module), before, made, getattr(conn, "_surge_init", ())
        )
        syncs = pg_send_reset(conn, reset, self.module)
        if not syncs:
            return False
        conn._surge_syncs, conn._surge_survivors = syncs, reset.survivors
        conn._surge_first_prepared = prepared._prepared_idx
        self._restore_psycopg(conn)
        return True

    def reset_pending(self, conn: Any) -> bool:
        return bool(getattr(conn, "_surge_syncs", 0))

    def finish_generator(self, conn: Any) -> Any:
        """The generator reading the reset's answers; then the statements the
        reset dropped leave psycopg's cache, so that it never names one the
        server no longer has."""
        syncs, conn._surge_syncs = conn._surge_syncs, 0
        survivors = yield from pg_finish_reset(
            conn.pgconn, syncs, self.module, conn._surge_survivors
        )
        if survivors is not None:
            alive = set(survivors.split())
            names = conn._prepared._names
            for key in [key for key, name in names.items() if name not in alive]:
                del names[key]

    def protocol_idle(self, conn: Any) -> bool:
        statuses = self.module.pq.TransactionStatus
        status = conn.pgconn.transaction_status
        return status in (statuses.IDLE, statuses.INTRANS, statuses.INERROR) and not getattr(
            conn, "_surge_syncs", 0
        )

    def socket_fd(self, conn: Any) -> int | None:
        try:
            return int(conn.pgconn.socket)
        except Exception:  # closed: libpq has no socket
            return None

    reset_answers: Literal["at return", "at checkout", "lazily"] = "at checkout"

    def used(self, conn: Any) -> bool:
        return True

    def restore_client(self, conn: Any) -> None:
        self._restore_psycopg(conn)

    def sever(self, conn: Any) -> None:
        sever_fd(self.socket_fd(conn))

    sever_inherited = sever  # the descriptor only, either way

    def raise_for(self, conn: Any, result: Any) -> None:
        """Raise the exception psycopg raises for a failed ``result`` (its class
        by SQLSTATE: ``errors.InvalidParameterValue``, ...)."""
        if result is not None and result.status == self.module.pq.ExecStatus.FATAL_ERROR:
            raise self.module.errors.error_from_result(result, encoding=conn.info.encoding)

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        if not isinstance(error, self.module.Error | OSError):
            return False  # the application's own exception: says nothing of the server
        if getattr(error, "sqlstate", None) in PG_GONE:
            return True
        # psycopg marks a connection broken when the server or the network cut it.
        return bool(conn.broken or conn.pgconn.status != self.ok)


def _prepared_number(name: bytes) -> float:
    """N of psycopg's statement ``_pg3_N`` (its N counts up per connection);
    infinity for a name of another form (taken as this session's)."""
    try:
        return int(name[5:]) if name.startswith(b"_pg3_") else math.inf
    except ValueError:
        return math.inf


def _adapters_changed(adapters: Any) -> bool:
    """Whether a psycopg AdaptersMap was written to since it was copied (psycopg
    marks what it copies on write)."""
    return (
        any(adapters._own_dumpers.values())
        or any(adapters._own_loaders)
        or any(adapters._own_dumpers_by_oid)
        or adapters.types._own_state
    )


class Psycopg(PsycopgState, Driver):
    name = "psycopg"

    def finish_reset(self, conn: Any, within: float = RESET_WAIT) -> None:
        try:
            drive_bounded(self.finish_generator(conn), conn.pgconn.socket, within)
        except TimeoutError as error:  # its state is unknown: the pool severs it
            raise self.module.OperationalError(f"the server took no reset: {error}") from None

    def run(self, conn: Any, sql: str) -> None:
        """One statement without psycopg's BEGIN; its error as psycopg raises it."""
        self.raise_for(conn, conn.pgconn.exec_(sql.encode()))

    def __init__(self) -> None:
        self.module = optional_import("psycopg", "surge.db: postgresql://")
        self.idle = self.module.pq.TransactionStatus.IDLE
        self.ok = self.module.pq.ConnStatus.OK

    def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        return self.module.connect(**pg_connect_params(url, autocommit, extra))

    def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        if self.autocommit_differs(conn, autocommit):
            conn.autocommit = autocommit  # client-side in psycopg: no round trip

    def ping(self, conn: Any, within: float = RESET_WAIT) -> None:
        # An empty query: one round trip, no statement run, no transaction opened;
        # its answer waited for at most ``within`` (libpq's exec waits for ever).
        if conn.closed:
            raise self.module.OperationalError("the connection is closed")
        pgconn = conn.pgconn
        try:
            result = drive_bounded(pg_ping(pgconn), pgconn.socket, within)
        except TimeoutError as error:  # a query in flight: the pool severs it
            raise self.module.OperationalError(f"the server answered no ping: {error}") from None
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

    def ping(self, conn: Any, within: float = RESET_WAIT) -> None:
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
