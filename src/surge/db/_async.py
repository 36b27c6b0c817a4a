"""The asyncio twin of :class:`surge.db.DBPool`, on :class:`surge.pool.AsyncPool`.

Same semantics, same counters: roll back on return only when a transaction is
open, ping only a connection idle >= ``check_idle_after`` or whose socket is
readable while idle, move the generation on at a disconnect (every idle
connection of the old server closed at once), ``max_lifetime="auto"`` below the
server's idle timeout.  Drivers: psycopg 3's ``AsyncConnection`` (PostgreSQL)
and aiomysql (MySQL/MariaDB; built on PyMySQL's protocol code).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import ssl
from types import TracebackType
from typing import Any

from surge.db._asyncpg import AsyncAsyncpg
from surge.db._drivers import (
    DatabaseURL,
    MySQLProtocolSession,
    MySQLSessionState,
    PsycopgState,
    _mysql_tls,
    mysql_connect_params,
    mysql_is_disconnect,
    mysql_transaction_open,
    pg_connect_params,
    readable,
    reset_failed,
    set_up_again,
    shown,
)
from surge.db._session import (
    COM_RESET_CONNECTION,
    FLUSH_AFTER,
    RESET_WAIT,
    SESSION_PROBE,
    SessionResets,
    sever_fd,
)
from surge.errors import UsageError
from surge.extras import optional_import
from surge.pool import AsyncPool


class AsyncPsycopg(PsycopgState):
    """What the async pool needs from psycopg's ``AsyncConnection``."""

    name = "psycopg"

    def __init__(self) -> None:
        self.module = optional_import("psycopg", "surge.db.async_pool: postgresql://")
        self.generators = importlib.import_module("psycopg.generators")
        pq = self.module.pq
        self.idle, self.ok = pq.TransactionStatus.IDLE, pq.ConnStatus.OK
        self.fatal, self.tuples_ok = pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.TUPLES_OK

    async def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        return await self.module.AsyncConnection.connect(
            **pg_connect_params(url, autocommit, extra)
        )

    async def _exec(self, conn: Any, query: bytes) -> Any:
        """One simple-protocol query without psycopg's BEGIN, awaited on the loop."""
        async with conn.lock:
            conn.pgconn.send_query(query)
            results = await conn.wait(self.generators.execute(conn.pgconn))
        return results[-1] if results else None

    async def ping(self, conn: Any) -> None:
        if conn.closed:
            raise self.module.OperationalError("the connection is closed")
        result = await self._exec(conn, b"")  # an empty query: one round trip
        if conn.pgconn.status != self.ok or result is None or result.status == self.fatal:
            raise self.module.OperationalError("the connection is broken")

    async def server_idle_timeout(self, conn: Any) -> float | None:
        result = await self._exec(
            conn, b"SELECT setting FROM pg_settings WHERE name = 'idle_session_timeout'"
        )
        if result is None or result.status != self.tuples_ok or result.ntuples == 0:
            return None
        ms = int(result.get_value(0, 0) or b"0")
        return ms / 1000 if ms else None

    async def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        if self.autocommit_differs(conn, autocommit):
            await conn.set_autocommit(autocommit)

    async def close(self, conn: Any) -> None:
        await conn.close()

    async def rollback(self, conn: Any) -> None:
        await conn.rollback()

    async def finish_reset(self, conn: Any) -> None:
        try:
            await asyncio.wait_for(conn.wait(self.finish_generator(conn)), RESET_WAIT)
        except TimeoutError:  # its state is unknown: the pool severs it
            raise self.module.OperationalError("the server took no reset") from None

    async def run(self, conn: Any, sql: str) -> None:
        self.raise_for(conn, await self._exec(conn, sql.encode()))

    async def prepare_session(self, conn: Any, init_sql: tuple[str, ...]) -> None:
        """Nothing to learn: PostgreSQL's reset restores what the startup set."""


def _aiomysql_connection_class(base: Any) -> Any:
    """aiomysql's ``Connection`` that knows when its transaction state is unsure:
    the asyncio twin of :func:`surge.db._drivers.pymysql_connection_class`."""
    MySQLError = importlib.import_module("pymysql.err").MySQLError

    class Connection(MySQLSessionState, base):  # type: ignore[misc]
        _next_seq_id: int
        #: Past this many bytes buffered unsent, the server is not reading.
        _SURGE_MAX_UNSENT = 64 * 1024

        async def _execute_command(self, command: int, sql: Any) -> None:
            use = self._surge_sending(command, sql)
            if self._surge_unsent is not None or self._surge_pending is not None:
                self._surge_take_reset()  # see the sync twin (one loop: no lock)
                await super()._execute_command(command, sql)
                next_seq = self._next_seq_id
                await self._surge_read_reset()
                self._next_seq_id = next_seq
            else:
                await super()._execute_command(command, sql)
            self._surge_unsure = True  # after draining unread results, see the sync twin
            if use:
                self._surge_db_changed = True

        async def _read_ok_packet(self) -> Any:
            try:
                ok = await super()._read_ok_packet()
            except MySQLError:
                self._surge_answered()
                raise
            self._surge_unsure = self._surge_busy = False
            return ok

        async def _read_query_result(self, unbuffered: bool = False) -> None:
            self._surge_unsure = True
            try:
                await super()._read_query_result(unbuffered=unbuffered)
            except MySQLError:
                self._surge_answered()
                raise
            result = self._result
            self._surge_unsure = result.server_status is None or bool(result.has_next)
            self._surge_busy = False

        def _surge_answered(self) -> None:
            """As the sync twin's: an error ends the answer, if the connection lives."""
            if self._writer is not None:
                self._surge_busy = False

        async def set_charset(self, charset: str) -> None:
            await super().set_charset(charset)
            self._surge_busy = False

        def _surge_write_later(self) -> None:
            asyncio.get_running_loop().call_later(FLUSH_AFTER, self._surge_flush)

        def _surge_flush(self) -> None:
            writer = self._writer
            if self._surge_unsent is None or writer is None:
                return
            transport = writer.transport
            if transport.is_closing() or transport.get_write_buffer_size() > self._SURGE_MAX_UNSENT:
                self._surge_gone = True  # the server is not reading: never used again
                self.close()
                return
            data, n_ok, n_results = self._surge_unsent.compose(self._surge_db_changed)
            writer.write(data)
            self._surge_pending = (n_ok, n_results)
            self._surge_unsent = None
            self._surge_db_changed = False

        async def _surge_read_reset(self) -> None:
            pending, self._surge_pending = self._surge_pending, None
            assert pending is not None
            n_ok, n_results = pending
            try:
                for _ in range(n_ok):
                    header = await self._read_bytes(4)
                    length = header[0] | header[1] << 8 | header[2] << 16
                    self._surge_reset_ok(await self._read_bytes(length))
                for _ in range(n_results):
                    self._next_seq_id = 1
                    await super()._read_query_result()
                    self._result = None
            except BaseException as error:
                self.close()
                raise reset_failed(error)  # noqa: B904 - its cause is set when it is another
            self._surge_unsure = False

    return Connection


class AsyncMySQL(MySQLProtocolSession):
    """What the async pool needs from aiomysql."""

    name = "aiomysql"

    def __init__(self, url: DatabaseURL, ssl_context: ssl.SSLContext | None = None) -> None:
        self.module = optional_import("aiomysql", "surge.db.async_pool: mysql://")
        # aiomysql takes an SSLContext or nothing (no "preferred" mode): TLS when
        # asked for (?ssl_ca=, or a context), one context for every connect.
        self.ssl = _mysql_tls(url, ssl_context).get("ssl")
        self.connection_class = _aiomysql_connection_class(self.module.Connection)

    async def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        params = mysql_connect_params(url, autocommit, database_key="db")
        if self.ssl is not None:
            params["ssl"] = self.ssl
        params.update(extra)
        conn = self.connection_class(**params)  # as aiomysql.connect, with surge's class
        # aiomysql's connect_timeout bounds the TCP connect only; the greeting
        # and the login are bounded by it here too (a server that accepts and
        # says nothing held a connect for ever).
        try:
            await asyncio.wait_for(conn._connect(), conn.connect_timeout)
        except TimeoutError:
            conn.close()
            raise importlib.import_module("pymysql.err").OperationalError(
                2013, f"the server sent no greeting within {conn.connect_timeout:g} s"
            ) from None
        return conn

    def in_transaction(self, conn: Any) -> bool:
        return mysql_transaction_open(conn)

    async def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        if conn.get_autocommit() != autocommit:
            await conn.autocommit(autocommit)

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.closed)

    def has_input(self, conn: Any) -> bool:
        # aiomysql reads through an asyncio stream: the loop takes in whatever
        # arrives while the connection idles (EOF from a restart, say) - unless it
        # has not run since, so the socket itself is asked too.
        reader, writer = conn._reader, conn._writer
        if reader is None or writer is None or reader.at_eof() or reader._buffer:
            return True
        sock = writer.transport.get_extra_info("socket")
        return sock is None or readable(sock.fileno())

    async def ping(self, conn: Any) -> None:
        await conn.ping(reconnect=False)  # COM_PING

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        return mysql_is_disconnect(error) or getattr(conn, "_surge_gone", False)

    async def server_idle_timeout(self, conn: Any) -> float | None:
        cursor = await conn.cursor()
        try:
            await cursor.execute("SELECT @@wait_timeout")
            row = await cursor.fetchone()
        finally:
            await cursor.close()
        return float(row[0]) if row else None

    async def close(self, conn: Any) -> None:
        conn.close()  # closes the socket; no COM_QUIT round trip

    async def rollback(self, conn: Any) -> None:
        await conn.rollback()

    async def finish_reset(self, conn: Any) -> None:
        if conn._surge_pending is not None:
            try:
                await asyncio.wait_for(conn._surge_read_reset(), RESET_WAIT)
            except TimeoutError:  # a server silent that long is gone
                conn.close()
                raise importlib.import_module("pymysql.err").OperationalError(
                    2013, "the server took no reset"
                ) from None

    async def prepare_session(self, conn: Any, init_sql: tuple[str, ...]) -> None:
        """As the sync twin's (surge.db._drivers.PyMySQL.prepare_session)."""
        wanted = await self._probe(conn)
        if getattr(conn, "_surge_after_reset", None) is None:
            await conn._execute_command(COM_RESET_CONNECTION, b"")
            await conn._read_ok_packet()
            after = await self._probe(conn)
            conn._surge_after_reset = after
            set_up = set_up_again(conn, wanted, after, init_sql)
            for sql in set_up:
                await self.run(conn, sql)
            self.count_set_up(set_up)
        else:
            self.written[1] += 1
        conn._surge_wanted = wanted

    async def _probe(self, conn: Any) -> tuple[Any, ...]:
        cursor = await conn.cursor()
        try:
            await cursor.execute(SESSION_PROBE)
            return tuple(await cursor.fetchone())
        finally:
            await cursor.close()

    def sever(self, conn: Any) -> None:
        self.forget_reset(conn)
        writer = conn._writer
        sock = None if writer is None else writer.transport.get_extra_info("socket")
        sever_fd(None if sock is None else sock.fileno())

    sever_inherited = sever  # the descriptor only, either way

    async def run(self, conn: Any, sql: str) -> None:
        cursor = await conn.cursor()
        try:
            await cursor.execute(sql)
        finally:
            await cursor.close()


AsyncDriver = AsyncPsycopg | AsyncAsyncpg | AsyncMySQL


def async_driver_for(
    url: DatabaseURL, name: str | None, given: str, ssl_context: ssl.SSLContext | None = None
) -> AsyncDriver:
    """The asyncio driver for ``url``: psycopg (the default) or asyncpg for
    PostgreSQL, aiomysql for MySQL/MariaDB (with ``ssl_context``, as the sync
    pool's PyMySQL)."""
    if url.scheme == "postgresql" and name in (None, "psycopg"):
        return AsyncPsycopg()
    if url.scheme == "postgresql" and name == "asyncpg":
        return AsyncAsyncpg()
    if url.scheme == "mysql" and name in (None, "aiomysql"):
        return AsyncMySQL(url, ssl_context)
    if url.scheme not in ("postgresql", "mysql"):
        raise UsageError(f"the asyncio pool takes postgresql:// or mysql://, not {shown(given)}")
    choices = "psycopg or asyncpg" if url.scheme == "postgresql" else "aiomysql"
    raise UsageError(f"driver {name!r} for the asyncio pool on {url.scheme}: use {choices}")


#: The acquire under way in this task: its timeout bounds a connect.
_BUDGET: contextvars.ContextVar[float | None] = contextvars.ContextVar("budget", default=None)


class AsyncDBPool(SessionResets):
    """``async with pool.connection() as conn:`` - options as :class:`surge.db.DBPool`
    (``ssl_context``: TLS for aiomysql, as for PyMySQL)."""

    driver: AsyncDriver

    def _driver_for(
        self, url: str, name: str | None, ssl_context: ssl.SSLContext | None
    ) -> tuple[DatabaseURL, AsyncDriver]:
        parsed = DatabaseURL.parse(url)
        return parsed, async_driver_for(parsed, name, url, ssl_context)

    def _open(self, **options: Any) -> None:
        self._lifetime_lock = asyncio.Lock()
        self.pool: AsyncPool[Any] = AsyncPool(self._create, **options)

    async def acquire(self, timeout: float | None = None) -> Any:
        """As :meth:`surge.db.DBPool.acquire`."""
        if timeout is None:
            return await self.pool.acquire()
        token = _BUDGET.set(timeout)
        try:
            return await self.pool.acquire(timeout)
        finally:
            _BUDGET.reset(token)

    async def release(self, conn: Any) -> None:
        await self.pool.release(conn)

    async def discard(self, conn: Any) -> None:
        await self.pool.discard(conn)

    def connection(self, timeout: float | None = None) -> _AsyncCheckout:
        return _AsyncCheckout(self, timeout)

    async def clear(self) -> None:
        """Close every idle connection now (in-use ones are unaffected)."""
        await self.pool.clear()

    async def server_gone(self, generation: int | None = None) -> None:
        """As :meth:`surge.db.DBPool.server_gone`."""
        await self.pool.invalidate(generation)

    async def lost(self, conn: Any) -> None:
        """A checked-out connection found the server gone: discard it, move on."""
        generation = self.pool.generation_of(conn)
        await self.pool.discard(conn)
        await self.pool.invalidate(generation)

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> AsyncDBPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- internals: the I/O that SessionResets' decisions call for ------------------------

    async def _check(self, conn: Any, idle: float) -> bool:
        """As DBPool's (see ``SessionResets._checkout_steps``); each driver waits
        at most RESET_WAIT for an answer."""
        answers, ping = self._checkout_steps(conn, idle)
        if not answers and ping is False:
            return True
        driver = self.driver
        try:
            if answers:
                await driver.finish_reset(conn)
            if ping or (ping is None and driver.has_input(conn)):
                self.n_pings += 1
                await driver.ping(conn)
        except Exception as error:
            await self._failed(conn, error)
            return False
        return True

    async def _reset(self, conn: Any) -> bool:
        """As DBPool's (see ``SessionResets._returned``)."""
        step = self._returned(conn)
        if step is True or step is False:
            return step
        if step == "server gone":
            await self.pool.invalidate(self.pool.generation_of(conn))
            return False
        try:
            if step == "roll back":
                await self.driver.rollback(conn)
            await self.driver.restore_autocommit(conn, self.autocommit)
        except Exception as error:
            await self._failed(conn, error)
            return False
        return True

    async def _failed(self, conn: Any, error: BaseException) -> None:
        if self._gone(conn, error):
            await self.pool.invalidate(self.pool.generation_of(conn))

    async def _create(self) -> Any:
        args = self._connect_kwargs(_BUDGET.get() or self.timeout)
        conn = await self.driver.connect(self.url, self.autocommit, args)
        try:
            if self.max_lifetime == "auto":
                await self._learn_lifetime(conn)
            for sql in self.init_sql:
                await self.driver.run(conn, sql)
            await self.driver.prepare_session(conn, self.init_sql)
            self.driver.session_ready(conn, self.autocommit, self.init_sql)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.driver.close(conn)
            raise
        return conn

    def session_ready(self, conn: Any) -> None:
        """As :meth:`surge.db.DBPool.session_ready`."""
        self.driver.session_ready(conn, self.autocommit, self.init_sql)

    async def _learn_lifetime(self, conn: Any) -> None:
        """As DBPool's: tasks creating connections meanwhile wait for the answer."""
        async with self._lifetime_lock:
            if self.max_lifetime == "auto":
                self._lifetime_learned(await self.driver.server_idle_timeout(conn))

    async def _close(self, conn: Any) -> None:
        self._closing(conn)
        with contextlib.suppress(Exception):
            await self.driver.close(conn)


class _AsyncCheckout:
    __slots__ = ("_conn", "_pool", "_timeout")

    def __init__(self, pool: AsyncDBPool, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout

    async def __aenter__(self) -> Any:
        self._conn = await self._pool.acquire(self._timeout)
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pool, conn = self._pool, self._conn
        if exc is None:
            await pool.release(conn)
        else:  # lost, release or discard (cancelled mid-query): see SessionResets._after_error
            await pool._after_error(conn, exc)(conn)
