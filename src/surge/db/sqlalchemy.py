"""SQLAlchemy on surge.db's pool: ``create_engine`` without SQLAlchemy's extra round trips.

    from surge.db.sqlalchemy import create_engine
    engine = create_engine("mysql://app:secret@db/shop", max_size=8)
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))

    from surge.db.sqlalchemy import create_async_engine   # asyncio: AsyncEngine
    engine = create_async_engine("postgresql+asyncpg://app@db/shop")

What SQLAlchemy's own pools cost per checkout, and what this module does instead:

* QueuePool rolls back every connection it takes back (``reset_on_return``),
  and a ``Connection`` rolls back the transaction it began at its first
  statement: with PyMySQL that is a ``ROLLBACK`` round trip per checkout even
  after a read (1.4-1.5x a reused connection on MariaDB, issue #4).  Here the
  pool resets nothing itself (surge's ``DBPool.release`` rolls back unless no
  transaction is known to be open) and the engine's dialect rolls back on the
  same rule: an autocommit read costs no ROLLBACK.
* ``pool_pre_ping`` pings every checkout (6.6x); here only connections idle
  >= 1 s, or whose socket turned readable, are pinged, by surge.db.
* A pool of ``creator=`` connections under ``NullPool`` would run the
  dialect's per-connection setup (PyMySQL: ``SET NAMES``) at every checkout.
  Here each DB-API connection gets one SQLAlchemy connection record, made when
  surge first hands the connection out, so that setup runs once per connection.

Connections are made as ``sqlalchemy.create_engine`` makes them: the dialect's
connect arguments (PyMySQL's ``FOUND_ROWS`` flag, the URL's query), then
``connect_args``, then the engine's ``do_connect`` handlers; SQLAlchemy's pool
arguments (``pool_size``, ``pool_recycle``, ``pool_pre_ping``, ...) set surge's
pool.

A disconnect that SQLAlchemy sees (its dialect's ``is_disconnect``) invalidates
the connection as usual, and also moves surge's generation on: every idle
connection of the old server is closed at once.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any

from surge.extras import missing

try:
    import sqlalchemy
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext import asyncio as sqlalchemy_asyncio
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.pool import Pool
    from sqlalchemy.pool.base import ConnectionPoolEntry, PoolProxiedConnection, _ConnectionRecord
    from sqlalchemy.util import concurrency
except ModuleNotFoundError as error:
    raise missing(error, "surge.db.sqlalchemy") from None

from surge.db._async import AsyncDBPool
from surge.db._drivers import DatabaseURL
from surge.db._pool import DBPool
from surge.db._session import refuse_unknown_options, session_of
from surge.errors import UsageError

#: Awaits from SQLAlchemy's greenlet (``await_only`` before SQLAlchemy 2.1).
await_: Any = getattr(concurrency, "await_", None) or concurrency.await_only

#: SQLAlchemy's dialect and driver for each surge.db URL scheme.
DIALECTS = {"mysql": "mysql+pymysql", "postgresql": "postgresql+psycopg", "sqlite": "sqlite"}


class SurgePool(Pool):
    """A SQLAlchemy pool whose connections come from (and go back to) a :class:`DBPool`."""

    def __init__(self, db: Any, **kwargs: Any) -> None:
        self.db = db
        self._handoff = threading.local()
        #: id(DB-API connection) -> its SQLAlchemy record, while surge keeps it open.
        self._records: dict[int, ConnectionPoolEntry] = {}
        kwargs.setdefault("reset_on_return", None)  # surge's release decides
        super().__init__(self._hand_over, **kwargs)
        db.on_close.append(self._forget)
        #: The engine's own "connect" listeners (the dialect's set-up): a session
        #: reset keeps what they set (surge.db's reset restores the character set
        #: and the client's side).  Listeners added later are the application's,
        #: run again on each checkout of a session reset since (see _do_get).
        self.engine_connect_listeners: frozenset[Any] = frozenset()
        os.register_at_fork(after_in_child=self._records.clear)

    def _hand_over(self) -> Any:
        """The creator: the connection surge just handed out, being given a record."""
        conn = getattr(self._handoff, "conn", None)
        if conn is None:
            raise RuntimeError("SurgePool connections come from surge.db, not from a reconnect")
        return self._adapt(conn)

    # -- what the sync and the asyncio pools do differently --------------------------

    def _adapt(self, conn: Any) -> Any:
        """The DB-API connection SQLAlchemy holds for surge's ``conn``."""
        return conn

    def _raw(self, dbapi_connection: Any) -> Any:
        """surge's connection behind the one SQLAlchemy holds."""
        return dbapi_connection

    def _acquire(self) -> Any:
        return self.db.acquire()

    def _release(self, conn: Any) -> None:
        self.db.release(conn)

    def _discard(self, conn: Any) -> None:
        self.db.discard(conn)

    def _server_gone(self, generation: int | None) -> None:
        self.db.server_gone(generation)

    def _is_disconnect(self, error: BaseException, conn: Any) -> bool:
        return bool(self.db.driver.is_disconnect(error, conn))

    # ----------------------------------------------------------------------------------

    def _do_get(self) -> ConnectionPoolEntry:
        db = self.db
        while True:
            conn = self._acquire()
            record = self._records.get(id(conn))
            if record is None:
                self._handoff.conn = conn
                try:
                    # runs the engine's connect events once: dialect setup, first_connect
                    record = _ConnectionRecord(self)
                except BaseException:
                    if self._handoff.conn is conn:  # not discarded by _close_connection
                        self._discard(conn)
                    raise
                finally:
                    self._handoff.conn = None
                self._records[id(conn)] = record
                # what the dialect set on the client's side of it stays
                db.session_ready(conn)
                record.info["surge_session"] = session_of(conn)
            elif record._is_hard_or_soft_invalidated():  # type: ignore[attr-defined]
                # invalidated by the application (soft): replace, never reconnect in place
                self._records.pop(id(conn), None)
                self._discard(conn)
                continue
            elif record.info.get("surge_session") != session_of(conn):
                self._reconnect_events(conn, record)
            return record

    def _reconnect_events(self, conn: Any, record: ConnectionPoolEntry) -> None:
        """The session was reset since the application's "connect" listeners ran on
        it: run them again (a ``SET search_path`` in one, SQLAlchemy's documented
        recipe, would otherwise be gone).  Costs their round trips per checkout;
        ``pool_options={"init_sql": [...]}`` sets a session up with none."""
        for listener in self.dispatch.connect:
            if listener not in self.engine_connect_listeners:
                listener(record.dbapi_connection, record)
        record.info["surge_session"] = session_of(conn)

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        conn = record.dbapi_connection
        if conn is not None:  # None: invalidated, and closed through _close_connection
            self._release(self._raw(conn))

    def _close_connection(self, connection: Any, *, terminate: bool = False) -> None:
        """SQLAlchemy closes a connection it invalidated (or one whose ``connect``
        event raised as it was handed over): surge discards it, once."""
        connection = self._raw(connection)
        if connection is getattr(self._handoff, "conn", None):
            self._handoff.conn = None
        self._records.pop(id(connection), None)
        self._discard(connection)

    def _invalidate(
        self,
        connection: PoolProxiedConnection,
        exception: BaseException | None = None,
        _checkin: bool = True,
    ) -> None:
        """A disconnect: surge's generation moves on (instead of SQLAlchemy's
        invalidation time, which would reconnect records in place)."""
        raw = connection.dbapi_connection
        raw = None if raw is None else self._raw(raw)
        # An asyncio dialect's error wraps the driver's (its __cause__).
        errors = () if exception is None else (exception, exception.__cause__)
        gone = raw is not None and any(
            error is not None and self._is_disconnect(error, raw) for error in errors
        )
        generation = None if raw is None else self.db.generation_of(raw)
        if _checkin and connection.is_valid:
            connection.invalidate(exception)  # closes it: surge discards it
        if gone:
            self._server_gone(generation)

    def _forget(self, conn: Any) -> None:
        self._records.pop(id(conn), None)

    def recreate(self) -> SurgePool:
        """``Engine.dispose()``: a fresh SQLAlchemy pool on the same surge pool (whose
        idle connections ``dispose`` just closed)."""
        pool = type(self)(self.db, _dispatch=self.dispatch, dialect=self._dialect)
        pool.engine_connect_listeners = self.engine_connect_listeners
        return pool

    def dispose(self) -> None:
        self.db.clear()

    def status(self) -> str:
        return f"SurgePool {self.db.stats()}"


def _rollback_if_open(db: DBPool | AsyncDBPool) -> Any:
    driver = db.driver

    def do_rollback(dbapi_connection: Any) -> None:
        raw = getattr(dbapi_connection, "dbapi_connection", dbapi_connection)
        raw = getattr(raw, "driver_connection", raw)  # an asyncio dialect's adapter
        if driver.in_transaction(raw):
            dbapi_connection.rollback()

    return do_rollback


#: The isolation levels SQLAlchemy's MySQL dialect sets with a statement (its
#: "AUTOCOMMIT" is the driver's mode, surge.db's ``autocommit`` option).
MYSQL_LEVELS = ("SERIALIZABLE", "READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ")

#: SQLAlchemy's pool arguments to create_engine, and the DBPool option each sets.
POOL_ARGUMENTS = {
    "pool_size": "max_size",
    "max_overflow": "max_overflow",
    "pool_timeout": "timeout",
    "pool_recycle": "max_lifetime",
    "pool_use_lifo": "lifo",
}


def _pool_options(
    caller: str, pool_options: dict[str, Any], engine_options: dict[str, Any]
) -> dict[str, Any]:
    """DBPool's options: ``pool_options`` (a misspelt one refused, naming ``caller``),
    plus SQLAlchemy's own pool arguments taken out of ``engine_options``
    (``pool_options`` wins where both say)."""
    refuse_unknown_options(f"{caller}(pool_options=...)", pool_options)
    options = dict(pool_options)
    for name, option in POOL_ARGUMENTS.items():
        if name in engine_options:
            value = engine_options.pop(name)
            if name == "pool_recycle" and value is not None and value < 0:
                value = None  # SQLAlchemy's -1: never recycle
            options.setdefault(option, value)
    if engine_options.pop("pool_pre_ping", False):
        options.setdefault("check_idle_after", 0.0)  # check every checkout, as asked
    return options


def _dialect_connector(engine: Engine, db: DBPool, connect_args: dict[str, Any]) -> Any:
    """Connections made as ``sqlalchemy.create_engine`` makes them - the dialect's
    arguments (PyMySQL: ``client_flag=FOUND_ROWS``, the URL's query), then
    ``connect_args``, then the engine's ``do_connect`` handlers, which may change
    the arguments or return a connection of their own - of surge's driver class."""
    dialect = engine.dialect
    cargs, cparams = dialect.create_connect_args(engine.url)
    cparams.update(connect_args)
    if db.url.scheme != "sqlite":  # sqlite3 before 3.12 has no autocommit argument
        cparams.setdefault("autocommit", db.autocommit)

    def connect() -> Any:
        args, kwargs = list(cargs), dict(cparams)  # a handler may change them
        if dialect._has_events:
            for handler in dialect.dispatch.do_connect:
                conn = handler(dialect, None, args, kwargs)
                if conn is not None:
                    return conn
        return db.driver.connect_with(args, kwargs)

    return connect


def create_engine(
    url: str,
    *,
    pool_options: dict[str, Any] | None = None,
    **engine_options: Any,
) -> Engine:
    """A SQLAlchemy engine on a surge.db pool of ``url`` (surge's URL forms:
    ``mysql://``, ``mariadb://``, ``postgresql://``, ``sqlite:///path``).

    ``pool_options`` go to :class:`DBPool` (``max_size``, ``timeout``,
    ``check_idle_after``, ...); ``engine_options`` to ``sqlalchemy.create_engine``,
    except SQLAlchemy's pool arguments, which set the DBPool's: ``pool_size``
    (``max_size``), ``max_overflow``, ``pool_timeout`` (``timeout``),
    ``pool_recycle`` (``max_lifetime``), ``pool_use_lifo`` (``lifo``) and
    ``pool_pre_ping`` (``check_idle_after=0``).  ``connect_args`` and the
    engine's ``do_connect`` events apply to every connection surge makes.
    The pool is ``engine.pool.db``.
    """
    parsed = DatabaseURL.parse(url)
    connect_args = dict(engine_options.pop("connect_args", None) or {})
    db = DBPool(url, **_pool_options("create_engine", pool_options or {}, engine_options))
    rest = url.split("://", 1)[1]
    engine = sqlalchemy.create_engine(
        f"{DIALECTS[parsed.scheme]}://{rest}", pool=SurgePool(db), **engine_options
    )
    db.connector = _dialect_connector(engine, db, connect_args)
    _on_surge(engine, db)
    return engine


def _on_surge(engine: Engine, db: DBPool | AsyncDBPool) -> None:
    """What an engine on surge's pool (sync or asyncio) needs set once it exists."""
    surge_pool: SurgePool = engine.pool  # type: ignore[assignment]
    surge_pool.engine_connect_listeners = frozenset(surge_pool.dispatch.connect)
    dialect = engine.dialect  # the engine's isolation_level (SQLAlchemy 2: a private name)
    level = getattr(dialect, "_on_connect_isolation_level", None) or getattr(
        dialect, "isolation_level", None
    )
    if db.url.scheme == "mysql" and level in MYSQL_LEVELS:
        # SQLAlchemy sets it once per connection; the session reset would undo it
        db.init_sql = (f"SET SESSION TRANSACTION ISOLATION LEVEL {level}", *db.init_sql)
    # The engine's own rollback (a Connection ending the transaction it began)
    # is skipped when the driver says no transaction is open: no ROLLBACK round
    # trip after an autocommit read.  Set on this engine's dialect object only.
    engine.dialect.do_rollback = _rollback_if_open(db)  # type: ignore[method-assign]


# -- asyncio: create_async_engine ---------------------------------------------------------


def _current() -> Any:
    """The greenlet running now (greenlet is SQLAlchemy's asyncio dependency)."""
    return importlib.import_module("greenlet").getcurrent()


class _PerGreenlet:
    """``_handoff`` for the asyncio pool: the engine's tasks share a thread, each in
    a greenlet of its own, and a hand-over awaits (the dialect's set-up)."""

    def __init__(self) -> None:
        self._by: dict[Any, Any] = {}

    @property
    def conn(self) -> Any:
        return self._by.get(_current())

    @conn.setter
    def conn(self, conn: Any) -> None:
        if conn is None:
            self._by.pop(_current(), None)
        else:
            self._by[_current()] = conn


async def _given(conn: Any) -> Any:
    return conn


class AsyncSurgePool(SurgePool):
    """:class:`SurgePool` for ``create_async_engine``: SQLAlchemy's pool API runs in
    the engine's greenlet, and awaits surge's :class:`AsyncDBPool` from there (as
    ``AsyncAdaptedQueuePool`` does its queue); SQLAlchemy holds its dialect's
    adapter around the driver's connection surge hands out (``async_creator``)."""

    _is_asyncio = True
    db: AsyncDBPool

    def __init__(self, db: AsyncDBPool, **kwargs: Any) -> None:
        super().__init__(db, **kwargs)
        self._handoff = _PerGreenlet()  # type: ignore[assignment]

    def _adapt(self, conn: Any) -> Any:
        return self._dialect.loaded_dbapi.connect(  # type: ignore[union-attr]
            async_creator_fn=lambda *args, **kwargs: _given(conn)
        )

    def _raw(self, dbapi_connection: Any) -> Any:
        return getattr(dbapi_connection, "driver_connection", dbapi_connection)

    def _acquire(self) -> Any:
        return await_(self.db.acquire())

    def _release(self, conn: Any) -> None:
        await_(self.db.release(conn))

    def _discard(self, conn: Any) -> None:
        await_(self.db.discard(conn))

    def _server_gone(self, generation: int | None) -> None:
        await_(self.db.server_gone(generation))

    def dispose(self) -> None:
        await_(self.db.clear())


#: SQLAlchemy's asyncio dialect, and surge's driver, for each scheme and ``+driver``.
ASYNC_DIALECTS = {
    ("postgresql", "asyncpg"): ("postgresql+asyncpg", "asyncpg"),
    ("postgresql", "psycopg"): ("postgresql+psycopg", "psycopg"),
    ("postgresql", "psycopg_async"): ("postgresql+psycopg", "psycopg"),
    ("postgresql", ""): ("postgresql+psycopg", "psycopg"),
    ("mysql", "aiomysql"): ("mysql+aiomysql", "aiomysql"),
    ("mysql", ""): ("mysql+aiomysql", "aiomysql"),
}


def create_async_engine(
    url: str,
    *,
    pool_options: dict[str, Any] | None = None,
    **engine_options: Any,
) -> AsyncEngine:
    """SQLAlchemy's ``AsyncEngine`` on a surge.db :class:`AsyncDBPool` of ``url``:
    ``postgresql+asyncpg://``, ``postgresql+psycopg://`` (or ``postgresql://``:
    psycopg), ``mysql+aiomysql://`` (or ``mysql://``, ``mariadb://``).

    Options as :func:`create_engine`'s, except that ``connect_args`` go to the
    driver's connect as surge makes it (``do_connect`` events do not apply).
    The pool is ``engine.sync_engine.pool.db``.
    """
    parsed = DatabaseURL.parse(url)
    scheme, rest = url.split("://", 1)
    wanted = scheme.partition("+")[2].lower()
    if (parsed.scheme, wanted) not in ASYNC_DIALECTS:
        raise UsageError(
            f"create_async_engine takes postgresql+asyncpg://, postgresql+psycopg:// "
            f"or mysql+aiomysql://, not {scheme}://"
        )
    dialect, driver = ASYNC_DIALECTS[parsed.scheme, wanted]
    options = _pool_options("create_async_engine", pool_options or {}, engine_options)
    connect_args = engine_options.pop("connect_args", None)
    if connect_args:
        options["connect_args"] = {**options.get("connect_args", {}), **connect_args}
    if parsed.scheme == "postgresql":
        options["driver"] = driver
    db = AsyncDBPool(url, **options)
    engine = sqlalchemy_asyncio.create_async_engine(
        f"{dialect}://{rest}", pool=AsyncSurgePool(db), **engine_options
    )
    _on_surge(engine.sync_engine, db)
    return engine
