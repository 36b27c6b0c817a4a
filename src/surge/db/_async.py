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
import importlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

from surge.db._drivers import (
    DatabaseURL,
    PsycopgState,
    _mysql_tls,
    mysql_connect_params,
    mysql_is_disconnect,
    mysql_transaction_open,
    pg_connect_params,
    readable,
)
from surge.db._pool import LIFETIME_SHARE, SOCKET_CHECK_AFTER, log, needs_ping
from surge.errors import UsageError
from surge.pool import AsyncPool


class AsyncPsycopg(PsycopgState):
    """What the async pool needs from psycopg's ``AsyncConnection``."""

    name = "psycopg"

    def __init__(self) -> None:
        self.module = importlib.import_module("psycopg")
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


def _aiomysql_connection_class(base: Any) -> Any:
    """aiomysql's ``Connection`` that knows when its transaction state is unsure:
    the asyncio twin of :func:`surge.db._drivers.pymysql_connection_class`."""

    class Connection(base):  # type: ignore[misc]
        _surge_unsure = False

        async def _execute_command(self, command: int, sql: Any) -> None:
            self._surge_unsure = True
            await super()._execute_command(command, sql)
            self._surge_unsure = True  # after draining unread results, see the sync twin

        async def _read_ok_packet(self) -> Any:
            ok = await super()._read_ok_packet()
            self._surge_unsure = False
            return ok

        async def _read_query_result(self, unbuffered: bool = False) -> None:
            self._surge_unsure = True
            await super()._read_query_result(unbuffered=unbuffered)
            result = self._result
            self._surge_unsure = result.server_status is None or bool(result.has_next)

    return Connection


class AsyncMySQL:
    """What the async pool needs from aiomysql."""

    name = "aiomysql"

    def __init__(self, url: DatabaseURL) -> None:
        self.module = importlib.import_module("aiomysql")
        # aiomysql takes an SSLContext or nothing (no "preferred" mode): TLS when
        # asked for (?ssl_ca=, or a context), one context for every connect.
        self.ssl = _mysql_tls(url, None).get("ssl")
        self.connection_class = _aiomysql_connection_class(self.module.Connection)

    async def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        params = mysql_connect_params(url, autocommit, database_key="db")
        if self.ssl is not None:
            params["ssl"] = self.ssl
        params.update(extra)
        conn = self.connection_class(**params)  # as aiomysql.connect, with surge's class
        await conn._connect()
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
        return mysql_is_disconnect(error)

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


AsyncDriver = AsyncPsycopg | AsyncMySQL


class AsyncDBPool:
    """``async with pool.connection() as conn:`` - options as :class:`surge.db.DBPool`."""

    def __init__(
        self,
        url: str,
        *,
        max_size: int = 10,
        max_overflow: int = 0,
        timeout: float = 30.0,
        max_idle: float | None = None,
        max_lifetime: float | Literal["auto"] | None = "auto",
        lifetime_jitter: float = 0.1,
        check_idle_after: float = 1.0,
        autocommit: bool = False,
        lifo: bool = True,
        connect_args: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = DatabaseURL.parse(url)
        self.driver: AsyncDriver
        if self.url.scheme == "postgresql":
            self.driver = AsyncPsycopg()
        elif self.url.scheme == "mysql":
            self.driver = AsyncMySQL(self.url)
        else:
            raise UsageError(f"the asyncio pool takes postgresql:// or mysql://, not {url!r}")
        self.autocommit = autocommit
        self.check_idle_after = check_idle_after
        self._connect_args = dict(connect_args or {})
        self._lifetime_lock = asyncio.Lock()
        self.max_lifetime: float | Literal["auto"] | None = max_lifetime
        self.n_pings = self.n_rollbacks = 0
        self.pool: AsyncPool[Any] = AsyncPool(
            self._create,
            max_size=max_size,
            max_overflow=max_overflow,
            timeout=timeout,
            max_idle=max_idle,
            lifetime_jitter=lifetime_jitter,
            check=self._check,
            check_idle_after=min(check_idle_after, SOCKET_CHECK_AFTER),
            reset=self._reset,
            close=self._close,
            lifo=lifo,
            clock=clock,
        )
        if isinstance(max_lifetime, int | float):
            self.pool.set_max_lifetime(max_lifetime)

    async def acquire(self, timeout: float | None = None) -> Any:
        return await self.pool.acquire(timeout)

    async def release(self, conn: Any) -> None:
        await self.pool.release(conn)

    async def discard(self, conn: Any) -> None:
        await self.pool.discard(conn)

    def connection(self, timeout: float | None = None) -> _AsyncCheckout:
        return _AsyncCheckout(self, timeout)

    async def server_gone(self, generation: int | None = None) -> None:
        """As :meth:`surge.db.DBPool.server_gone`."""
        await self.pool.invalidate(generation)

    def generation_of(self, conn: Any) -> int | None:
        return self.pool.generation_of(conn)

    async def lost(self, conn: Any) -> None:
        """A checked-out connection found the server gone: discard it, move on."""
        generation = self.pool.generation_of(conn)
        await self.pool.discard(conn)
        await self.pool.invalidate(generation)

    @property
    def generation(self) -> int:
        return self.pool.generation

    def stats(self) -> dict[str, Any]:
        stats = self.pool.stats()
        stats.update(
            pings=self.n_pings,
            rollbacks=self.n_rollbacks,
            server_gone=stats["generation"],
            max_lifetime=self.max_lifetime,
        )
        return stats

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> AsyncDBPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _check(self, conn: Any, idle: float) -> bool:
        """As DBPool's: ping if ``needs_ping``; a disconnect moves the generation on."""
        if not needs_ping(idle, self.check_idle_after, self.driver, conn):
            return True
        self.n_pings += 1
        try:
            await self.driver.ping(conn)
        except Exception as error:
            await self._failed(conn, error)
            return False
        return True

    async def _reset(self, conn: Any) -> bool:
        """As DBPool's: roll back if a transaction may be open, restore autocommit;
        False for a closed connection."""
        driver = self.driver
        if driver.is_closed(conn):
            return False
        try:
            if driver.in_transaction(conn):
                self.n_rollbacks += 1
                await conn.rollback()
            await driver.restore_autocommit(conn, self.autocommit)
        except Exception as error:
            await self._failed(conn, error)
            return False
        return True

    async def _failed(self, conn: Any, error: BaseException) -> None:
        if self.driver.is_disconnect(error, conn):
            await self.pool.invalidate(self.pool.generation_of(conn))
        else:
            log.info("%r failed on %r; discarding it", error, conn)

    async def _create(self) -> Any:
        conn = await self.driver.connect(self.url, self.autocommit, self._connect_args)
        if self.max_lifetime == "auto":
            try:
                await self._learn_lifetime(conn)
            except BaseException:
                with contextlib.suppress(Exception):
                    await self.driver.close(conn)
                raise
        return conn

    async def _learn_lifetime(self, conn: Any) -> None:
        """As DBPool's: tasks creating connections meanwhile wait for the answer."""
        async with self._lifetime_lock:
            if self.max_lifetime != "auto":
                return
            idle_timeout = await self.driver.server_idle_timeout(conn)
            if idle_timeout:
                self.pool.set_max_lifetime(idle_timeout * LIFETIME_SHARE)
                self.max_lifetime = idle_timeout * LIFETIME_SHARE
            else:
                self.max_lifetime = None

    async def _close(self, conn: Any) -> None:
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
        elif pool.driver.is_disconnect(exc, conn):
            await pool.lost(conn)
        elif isinstance(exc, Exception):
            await pool.release(conn)
        else:  # cancelled mid-query: the protocol state is unknown
            await pool.discard(conn)
