"""asyncpg for :class:`surge.db.AsyncDBPool`: asyncpg's own ``Connection`` handed out.

The session reset keeps what asyncpg made for itself - its statement cache,
the ``__asyncpg_stmt_N__`` statements prepared on the server - and undoes
everything else, as ``DISCARD ALL`` would: asyncpg's own pool reset
(``pg_advisory_unlock_all()``, ``CLOSE ALL``, ``UNLISTEN *``, ``RESET ALL``),
``SET SESSION AUTHORIZATION DEFAULT``, ``DISCARD TEMP``, ``DISCARD SEQUENCES``,
a ``ROLLBACK`` first if a transaction is open, and a ``DEALLOCATE`` of every
prepared statement the application named (whatever is not asyncpg's).  One
simple-protocol query, one round trip: sent at return by a task of its own,
its answer awaited at the next checkout.

A connection whose client side cannot be put back - a type codec set on it
(``set_type_codec``, ``set_builtin_type_codec``) - is closed at return and
replaced, never handed on.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal
from urllib.parse import urlencode

from surge.db._drivers import PG_GONE, DatabaseURL, readable
from surge.db._session import RESET_WAIT, pg_reset_keeping, sever_fd
from surge.extras import optional_import

#: What a checkout undoes, after the ROLLBACK (if a transaction is open): the
#: reset that keeps the driver's statements (surge.db._session.PG_RESET_KEEPING,
#: psycopg's too) - here every statement asyncpg prepared through the protocol
#: under its own names (``__asyncpg_...``); an application's SQL PREPARE goes,
#: whatever its name.
RESET_SQL = "".join(
    f"{sql};\n" for sql in pg_reset_keeping("name LIKE '\\_\\_asyncpg\\_%'")
).rstrip("\n")

#: asyncpg's per-connection callbacks, none on a fresh connection.
_CALLBACKS = ("_listeners", "_log_listeners", "_query_loggers", "_termination_listeners")


def _connection_class(base: Any) -> Any:
    """asyncpg's ``Connection`` (or the one given as ``connection_class``) that
    knows when a type codec was set on it: a session reset cannot undo that."""

    class Connection(base):  # type: ignore[misc]
        _surge_codecs = False
        _surge_reset: asyncio.Task[Any] | None = None

        async def set_type_codec(self, *args: Any, **kwargs: Any) -> Any:
            self._surge_codecs = True
            return await super().set_type_codec(*args, **kwargs)

        async def set_builtin_type_codec(self, *args: Any, **kwargs: Any) -> Any:
            self._surge_codecs = True
            return await super().set_builtin_type_codec(*args, **kwargs)

    return Connection


def _retrieved(task: asyncio.Task[Any]) -> None:
    """A reset's outcome nobody awaited (the connection was closed first)."""
    if not task.cancelled():
        task.exception()


class AsyncAsyncpg:
    """What the async pool needs from asyncpg.

    asyncpg has no autocommit mode: a statement outside ``conn.transaction()``
    (or an explicit ``BEGIN``) commits itself, whatever the pool's ``autocommit``.
    """

    name = "asyncpg"
    reset_answers: Literal["at return", "at checkout", "lazily"] = "at checkout"

    def __init__(self) -> None:
        self.module = optional_import("asyncpg", "surge.db.async_pool: driver='asyncpg'")
        self.classes: dict[Any, Any] = {}

    async def connect(self, url: DatabaseURL, autocommit: bool, extra: dict[str, Any]) -> Any:
        options = dict(url.options)
        params: dict[str, Any] = {
            "host": options.pop("host", None) or url.host,
            "port": url.port,
            "user": url.user,
            "password": url.password,
            "database": url.database,
        }
        timeout = options.pop("connect_timeout", None)
        if options:  # libpq's own (sslmode, application_name, ...): asyncpg parses them
            params["dsn"] = "postgresql://?" + urlencode(options)
        params.update(extra)
        timeout = params.pop("connect_timeout", timeout)
        if timeout is not None:
            params["timeout"] = float(timeout)
        base = params.pop("connection_class", self.module.Connection)
        cls = self.classes.get(base)
        if cls is None:
            cls = self.classes[base] = _connection_class(base)
        return await self.module.connect(
            **{k: v for k, v in params.items() if v is not None}, connection_class=cls
        )

    def in_transaction(self, conn: Any) -> bool:
        return bool(conn.is_in_transaction() or conn._top_xact is not None)

    async def restore_autocommit(self, conn: Any, autocommit: bool) -> None:
        """Nothing: asyncpg has no autocommit mode to change."""

    async def rollback(self, conn: Any) -> None:
        conn._top_xact = None
        await conn.execute("ROLLBACK", timeout=RESET_WAIT)

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.is_closed())

    def socket_fd(self, conn: Any) -> int | None:
        transport = conn._transport
        sock = None if transport is None else transport.get_extra_info("socket")
        try:
            return None if sock is None else int(sock.fileno())
        except Exception:
            return None

    def has_input(self, conn: Any) -> bool:
        # asyncpg reads through the loop: EOF from a restart closes the protocol
        # when the loop has run; until then the socket itself says.
        if conn.is_closed():
            return True
        fd = self.socket_fd(conn)
        return fd is None or fd < 0 or readable(fd)

    async def ping(self, conn: Any) -> None:
        await conn.execute("SELECT 1", timeout=RESET_WAIT)  # asyncpg fails on an empty query

    def is_disconnect(self, error: BaseException, conn: Any) -> bool:
        module = self.module
        if isinstance(error, module.PostgresError):
            return getattr(error, "sqlstate", None) in PG_GONE or conn.is_closed()
        if isinstance(error, OSError | module.exceptions.ConnectionDoesNotExistError):
            return True
        if isinstance(error, module.InterfaceError):
            return bool(conn.is_closed())
        return False

    async def server_idle_timeout(self, conn: Any) -> float | None:
        ms = await conn.fetchval(
            "SELECT setting::int FROM pg_settings WHERE name = 'idle_session_timeout'"
        )
        return ms / 1000 if ms else None

    async def close(self, conn: Any) -> None:
        if not getattr(conn, "_surge_severed", False) and self.protocol_idle(conn):
            await conn.close(timeout=RESET_WAIT)
            return
        conn.terminate()  # a command under way, or cut: no goodbye waited on
        task = conn._surge_reset
        if task is not None:  # ends with the connection: its outcome read here
            await asyncio.wait([task], timeout=RESET_WAIT)
            if task.done():
                _retrieved(task)

    async def run(self, conn: Any, sql: str) -> None:
        await conn.execute(sql)

    async def prepare_session(self, conn: Any, init_sql: tuple[str, ...]) -> None:
        """Nothing to learn: RESET ALL restores what the startup set."""

    def session_ready(self, conn: Any, autocommit: bool, init_sql: tuple[str, ...]) -> None:
        conn._surge_init = "".join(f"\n{sql.rstrip().rstrip(';')};" for sql in init_sql)
        conn._surge_codecs = False  # the set-up's own (SQLAlchemy's JSON codecs) stay

    def used(self, conn: Any) -> bool:
        return True

    def restore_client(self, conn: Any) -> None:
        for name in _CALLBACKS:
            callbacks = getattr(conn, name, None)
            if callbacks:
                callbacks.clear()

    def send_reset(self, conn: Any) -> bool:
        """Start the reset in a task of its own (its bytes go out on the loop's next
        turn; its answer is awaited by ``finish_reset``); False if the connection
        cannot be given back as fresh."""
        if conn._surge_codecs or conn._protocol._is_cancelling() or conn._surge_reset is not None:
            return False
        sql = RESET_SQL + getattr(conn, "_surge_init", "")
        if self.in_transaction(conn):
            conn._top_xact = None
            sql = "ROLLBACK;\n" + sql
        self.restore_client(conn)
        task = asyncio.ensure_future(conn.execute(sql))
        task.add_done_callback(_retrieved)
        conn._surge_reset = task
        return True

    def reset_pending(self, conn: Any) -> bool:
        return conn._surge_reset is not None

    async def finish_reset(self, conn: Any) -> None:
        """The reset's answer, waited for at most RESET_WAIT; a cancelled checkout
        leaves it to finish (the pool then closes the connection)."""
        task = conn._surge_reset
        try:
            await asyncio.wait_for(asyncio.shield(task), RESET_WAIT)
        except TimeoutError:  # its state is unknown: the pool severs it
            raise self.module.exceptions.ConnectionDoesNotExistError(
                "the server took no reset"
            ) from None
        conn._surge_reset = None

    def protocol_idle(self, conn: Any) -> bool:
        return (
            conn._surge_reset is None
            and not conn.is_closed()
            and not conn._protocol._is_cancelling()
        )

    def sever(self, conn: Any) -> None:
        sever_fd(self.socket_fd(conn))

    sever_inherited = sever  # the descriptor only, either way
