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
  pool resets nothing itself (surge's ``DBPool.release`` rolls back when a
  transaction is open) and the engine's dialect rolls back only when the driver
  reports an open transaction.
* ``pool_pre_ping`` pings every checkout (6.6x); here only connections idle
  >= 1 s, or whose socket turned readable, are pinged, by surge.db.
* A pool of ``creator=`` connections under ``NullPool`` would run the
  dialect's per-connection setup (PyMySQL: ``SET NAMES``) at every checkout.
  Here each DB-API connection gets one SQLAlchemy connection record, made when
  surge first hands the connection out, so that setup runs once per connection.

A disconnect that SQLAlchemy sees (its dialect's ``is_disconnect``) invalidates
the connection as usual, and also moves surge's generation on: every idle
connection of the old server is closed at once.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool
from sqlalchemy.pool.base import ConnectionPoolEntry, PoolProxiedConnection, _ConnectionRecord

from surge.db._drivers import DatabaseURL
from surge.db._pool import DBPool

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
                    db.discard(conn)
                    raise
                finally:
                    self._handoff.conn = None
                self._records[id(conn)] = record
            elif record._is_hard_or_soft_invalidated():  # type: ignore[attr-defined]
                # invalidated by the application (soft): replace, never reconnect in place
                self._records.pop(id(conn), None)
                db.discard(conn)
                continue
            return record

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        conn = record.dbapi_connection
        if conn is not None:  # None: invalidated, and closed through _close_connection
            self.db.release(conn)

    def _close_connection(self, connection: Any, *, terminate: bool = False) -> None:
        """SQLAlchemy closes a connection it invalidated: surge discards it."""
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
        return SurgePool(self.db, _dispatch=self.dispatch, dialect=self._dialect)

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


def create_engine(
    url: str,
    *,
    pool_options: dict[str, Any] | None = None,
    **engine_options: Any,
) -> Engine:
    """A SQLAlchemy engine on a surge.db pool of ``url`` (surge's URL forms:
    ``mysql://``, ``mariadb://``, ``postgresql://``, ``sqlite:///path``).

    ``pool_options`` go to :class:`DBPool` (``max_size``, ``timeout``,
    ``check_idle_after``, ...); ``engine_options`` to ``sqlalchemy.create_engine``.
    The pool is ``engine.pool.db``.
    """
    parsed = DatabaseURL.parse(url)
    db = DBPool(url, **(pool_options or {}))
    rest = url.split("://", 1)[1]
    engine = sqlalchemy.create_engine(
        f"{DIALECTS[parsed.scheme]}://{rest}", pool=SurgePool(db), **engine_options
    )
    # The engine's own rollback (a Connection ending the transaction it began)
    # is skipped when the driver says no transaction is open: no ROLLBACK round
    # trip after a read on MariaDB.  Set on this engine's dialect object only.
    engine.dialect.do_rollback = _rollback_if_open(db)  # type: ignore[method-assign]
    return engine
