"""SQLAlchemy on surge.db's pool: ``create_engine`` without SQLAlchemy's extra round trips.

    from surge.db.sqlalchemy import create_engine
    engine = create_engine("mysql://app:secret@db/shop", max_size=8)
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))

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

import os
import threading
from typing import Any

from surge.extras import missing

try:
    import sqlalchemy
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import Pool
    from sqlalchemy.pool.base import ConnectionPoolEntry, PoolProxiedConnection, _ConnectionRecord
except ModuleNotFoundError as error:
    raise missing(error, "surge.db.sqlalchemy") from None

from surge.db._drivers import DatabaseURL
from surge.db._pool import DBPool
from surge.db._session import session_of

#: SQLAlchemy's dialect and driver for each surge.db URL scheme.
DIALECTS = {"mysql": "mysql+pymysql", "postgresql": "postgresql+psycopg", "sqlite": "sqlite"}


class SurgePool(Pool):
    """A SQLAlchemy pool whose connections come from (and go back to) a :class:`DBPool`."""

    def __init__(self, db: DBPool, **kwargs: Any) -> None:
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
        return conn

    def _do_get(self) -> ConnectionPoolEntry:
        db = self.db
        while True:
            conn = db.acquire()
            record = self._records.get(id(conn))
            if record is None:
                self._handoff.conn = conn
                try:
                    # runs the engine's connect events once: dialect setup, first_connect
                    record = _ConnectionRecord(self)
                except BaseException:
                    if self._handoff.conn is conn:  # not discarded by _close_connection
                        db.discard(conn)
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
                db.discard(conn)
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
                listener(conn, record)
        record.info["surge_session"] = session_of(conn)

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        conn = record.dbapi_connection
        if conn is not None:  # None: invalidated, and closed through _close_connection
            self.db.release(conn)

    def _close_connection(self, connection: Any, *, terminate: bool = False) -> None:
        """SQLAlchemy closes a connection it invalidated (or one whose ``connect``
        event raised as it was handed over): surge discards it, once."""
        if connection is getattr(self._handoff, "conn", None):
            self._handoff.conn = None
        self._records.pop(id(connection), None)
        self.db.discard(connection)

    def _invalidate(
        self,
        connection: PoolProxiedConnection,
        exception: BaseException | None = None,
        _checkin: bool = True,
    ) -> None:
        """A disconnect: surge's generation moves on (instead of SQLAlchemy's
        invalidation time, which would reconnect records in place)."""
        raw = connection.dbapi_connection
        gone = (
            exception is not None
            and raw is not None
            and self.db.driver.is_disconnect(exception, raw)
        )
        generation = None if raw is None else self.db.generation_of(raw)
        if _checkin and connection.is_valid:
            connection.invalidate(exception)  # closes it: surge discards it
        if gone:
            self.db.server_gone(generation)

    def _forget(self, conn: Any) -> None:
        self._records.pop(id(conn), None)

    def recreate(self) -> SurgePool:
        """``Engine.dispose()``: a fresh SQLAlchemy pool on the same surge pool (whose
        idle connections ``dispose`` just closed)."""
        pool = SurgePool(self.db, _dispatch=self.dispatch, dialect=self._dialect)
        pool.engine_connect_listeners = self.engine_connect_listeners
        return pool

    def dispose(self) -> None:
        self.db.clear()

    def status(self) -> str:
        return f"SurgePool {self.db.stats()}"


def _rollback_if_open(db: DBPool) -> Any:
    driver = db.driver

    def do_rollback(dbapi_connection: Any) -> None:
        raw = getattr(dbapi_connection, "dbapi_connection", dbapi_connection)
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


def _pool_options(pool_options: dict[str, Any], engine_options: dict[str, Any]) -> dict[str, Any]:
    """DBPool's options: ``pool_options``, plus SQLAlchemy's own pool arguments taken
    out of ``engine_options`` (``pool_options`` wins where both say)."""
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
    db = DBPool(url, **_pool_options(pool_options or {}, engine_options))
    rest = url.split("://", 1)[1]
    engine = sqlalchemy.create_engine(
        f"{DIALECTS[parsed.scheme]}://{rest}", pool=SurgePool(db), **engine_options
    )
    db.connector = _dialect_connector(engine, db, connect_args)
    surge_pool: SurgePool = engine.pool  # type: ignore[assignment]
    surge_pool.engine_connect_listeners = frozenset(surge_pool.dispatch.connect)
    dialect = engine.dialect  # the engine's isolation_level (SQLAlchemy 2: a private name)
    level = getattr(dialect, "_on_connect_isolation_level", None) or getattr(
        dialect, "isolation_level", None
    )
    if parsed.scheme == "mysql" and level in MYSQL_LEVELS:
        # SQLAlchemy sets it once per connection; the session reset would undo it
        db.init_sql = (f"SET SESSION TRANSACTION ISOLATION LEVEL {level}", *db.init_sql)
    # The engine's own rollback (a Connection ending the transaction it began)
    # is skipped when the driver says no transaction is open: no ROLLBACK round
    # trip after an autocommit read.  Set on this engine's dialect object only.
    engine.dialect.do_rollback = _rollback_if_open(db)  # type: ignore[method-assign]
    return engine
