"""A pool of DB-API connections that costs no round trip the work does not need.

On top of :class:`surge.pool.Pool` (O(1) checkout, waiters in arrival order,
``PoolTimeout`` that says how many are in use and waiting):

* return: roll back unless it is *known* that no transaction is open (the
  driver's state after every statement, see ``_drivers``: on MySQL a read with
  autocommit off holds a snapshot, and an abandoned ``INSERT ... RETURNING`` or
  ``SELECT ... FOR UPDATE`` holds rows and locks that the next user would
  inherit and commit), then put autocommit back to the pool's mode if the user
  changed it.  A pool that always rolls back pays a round trip even where there
  is provably nothing to undo (autocommit reads, an unused checkout): SQLAlchemy's
  rollback-on-return made pooled autocommit queries 1.4-1.5x a reused connection
  on MariaDB and 5.1x on psycopg.
* checkout: ping (one round trip) only a connection idle for
  ``check_idle_after`` seconds (1 s) or more, or whose socket is readable while
  idle (EOF or a goodbye from a server that restarted or timed it out: one
  ``select``, no round trip).  SQLAlchemy's ``pool_pre_ping`` pings every
  checkout: 6.6x a reused connection.
* a ping or a query that fails with a disconnect error discards the connection
  and moves the pool's *generation* on: every idle connection of the old
  server is closed at once, any older one still in use is discarded when it
  comes back, and the checkout goes on with a fresh connection - rather than
  each stale connection failing in turn in someone's hands.
* ``max_lifetime`` defaults to 90% of the server's idle timeout (MySQL's
  ``wait_timeout``, PostgreSQL's ``idle_session_timeout``), read once with the
  first connection, and is jittered down by up to ``lifetime_jitter`` (10%),
  so the pool retires a connection before the server drops it.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from surge.db._drivers import DatabaseURL, Driver, driver_for
from surge.db._session import (
    RESET_WAIT,
    SOCKET_CHECK_AFTER,
    SessionResets,
)
from surge.pool import Pool, _fork
from surge.pool._sync import Owner, orphaned

__all__ = ["SOCKET_CHECK_AFTER", "DBPool"]


class DBPool(SessionResets):
    """A pool of DB-API connections to one database.

    ``with pool.connection() as conn:`` checks a connection out for the block.
    ``max_size``, ``max_overflow``, ``timeout`` (seconds to wait for a
    connection, then :class:`~surge.errors.PoolTimeout`), ``max_idle``,
    ``lifetime_jitter`` and ``lifo`` are :class:`surge.pool.Pool`'s.
    ``max_lifetime``: seconds, None for unlimited, or ``"auto"``: 90% of the
    server's idle timeout if it has one.  ``check_idle_after``: ping a
    connection idle at least this long before handing it out.  ``autocommit``:
    the connections' mode (DB-API's default is off).  ``ssl_context``: TLS for
    MySQL with this context (one for every connect).  ``connect_args``: more
    keyword arguments for the driver's ``connect``.
    """

    driver: Driver

    def _driver_for(
        self, url: str, name: str | None, ssl_context: ssl.SSLContext | None
    ) -> tuple[DatabaseURL, Driver]:
        parsed = DatabaseURL.parse(url)
        return parsed, driver_for(parsed, name, ssl_context)

    def _open(self, **options: Any) -> None:
        #: The acquire under way in this thread: its timeout bounds a connect.
        self._budget = threading.local()
        self._lifetime_lock = _fork.lock()
        #: Makes a new connection; glue that knows better replaces it (SQLAlchemy's
        #: dialect arguments and ``do_connect`` events, see surge.db.sqlalchemy).
        self.connector: Callable[[], Any] = self._connect_to_url
        self.pool: Pool[Any] = Pool(self._create, **options)

    # -- the public surface ---------------------------------------------------------------

    def acquire(self, timeout: float | None = None) -> Any:
        """A connection of the current generation, as fresh as a new one (see
        ``reset``), pinged first if it was idle long enough to doubt it; stale
        ones found on the way are replaced.  A connection made for it has
        ``timeout`` (default: the pool's) to connect, if the URL does not say."""
        if timeout is None:
            return self.pool.acquire()
        self._budget.timeout = timeout
        try:
            return self.pool.acquire(timeout)
        finally:
            self._budget.timeout = None

    def release(self, conn: Any, owner: Owner | None = None) -> None:
        """Take a connection back and reset its session (``reset="session"``: see
        surge.db._session; ``"none"``: roll back an open transaction and put
        autocommit back).  A connection that is closed, of an old generation, or
        whose protocol state is unknown (results unread, a COPY in progress) is
        discarded, never waited on."""
        self.pool.release(conn, owner)

    def session_ready(self, conn: Any) -> None:
        """Glue that sets a checked-out connection up once (SQLAlchemy's connect
        events, Django's connection setup) calls this after: the session as it is
        now is what every later checkout of ``conn`` finds (the client's side of
        it; statements glue runs belong in ``init_sql``)."""
        self.driver.prepare_session(conn, self.init_sql)
        self.driver.session_ready(conn, self.autocommit, self.init_sql)

    def discard(self, conn: Any, owner: Owner | None = None) -> None:
        """Close a checked-out connection instead of returning it."""
        self.pool.discard(conn, owner)

    def connection(self, timeout: float | None = None) -> _Checkout:
        """``with pool.connection() as conn:``.  After the block the connection goes
        back (rolled back if a transaction is open).  If the block raised: an error
        that means the server is gone discards it and moves the generation on;
        another exception returns it rolled back; an interruption that is not an
        Exception (KeyboardInterrupt in the middle of a read) discards it, since
        its protocol state is unknown."""
        return _Checkout(self, timeout)

    def clear(self) -> None:
        """Close every idle connection now (in-use ones are unaffected)."""
        self.pool.clear()

    def server_gone(self, generation: int | None = None) -> None:
        """The server dropped us (restart, failover): no connection made before now
        is handed out again, and the idle ones are closed now.

        ``generation``: that of the connection that found the server gone.  If the
        pool has moved on since - eight threads whose queries all failed in one
        restart report it eight times - nothing more happens, so the fresh
        connections of the new server are not dropped seven times over."""
        self.pool.invalidate(generation)

    def lost(self, conn: Any, owner: Owner | None = None) -> None:
        """A checked-out connection found the server gone: discard it and move the
        generation on (once per generation)."""
        generation = self.pool.generation_of(conn)
        self.pool.discard(conn, owner)
        self.pool.invalidate(generation)

    def close(self) -> None:
        """Close idle connections now, in-use ones when they come back."""
        self.pool.close()

    def __enter__(self) -> DBPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        u = self.url
        where = u.database if u.scheme == "sqlite" else f"{u.host}:{u.port}/{u.database}"
        return f"<DBPool {u.scheme} {where} {self.pool!r}>"

    # -- internals ------------------------------------------------------------------------------

    # -- internals: the I/O that SessionResets' decisions call for ------------------------

    def _check(self, conn: Any, idle: float) -> bool:
        """The pool's check on checkout (see ``SessionResets._checkout_steps``): read
        the answers of the reset written at return, ping; each waits at most
        RESET_WAIT, or the acquire's timeout if shorter (a session silent that
        long is cut and replaced, within the acquire's timeout).  One that fails
        discards the connection, and a disconnect moves the generation on."""
        answers, ping = self._checkout_steps(conn, idle)
        if not answers and ping is False:
            return True
        driver = self.driver
        within = min(RESET_WAIT, getattr(self._budget, "timeout", None) or self.timeout)
        try:
            if answers:
                driver.finish_reset(conn, within)
            if ping or (ping is None and driver.has_input(conn)):
                self.n_pings += 1
                driver.ping(conn, within)
        except Exception as error:
            self._failed(conn, error)
            return False
        return True

    def _reset(self, conn: Any) -> bool:
        """The pool's reset on return (see ``release``, ``SessionResets._returned``).
        (The pool does not reset a connection it is about to retire: one of an old
        generation, whose server may be gone, is discarded without a round trip.)"""
        step = self._returned(conn)
        if step is True or step is False:
            return step
        if step == "server gone":
            self.pool.invalidate(self.pool.generation_of(conn))
            return False
        try:
            if step == "roll back":
                conn.rollback()
            self.driver.restore_autocommit(conn, self.autocommit)
        except Exception as error:
            self._failed(conn, error)
            return False
        return True

    def _failed(self, conn: Any, error: BaseException) -> None:
        """A ping or a rollback raised: if the server is gone, move the generation
        on (the pool discards the connection itself)."""
        if self._gone(conn, error):
            self.pool.invalidate(self.pool.generation_of(conn))

    def _connect_to_url(self) -> Any:
        args = self._connect_kwargs(getattr(self._budget, "timeout", None) or self.timeout)
        return self.driver.connect(self.url, self.autocommit, args)

    def _create(self) -> Any:
        conn = self.connector()
        try:
            self.driver.restore_autocommit(conn, self.autocommit)  # if the connector did not
            if self.max_lifetime == "auto":
                self._learn_lifetime(conn)
            for sql in self.init_sql:
                self.driver.run(conn, sql)
            self.session_ready(conn)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return conn

    def _learn_lifetime(self, conn: Any) -> None:
        """One round trip, once per pool: the server's idle timeout.

        Other threads creating connections meanwhile wait for the answer, so that
        none of the first connections is made without the lifetime (and outlives
        the server's timeout)."""
        with self._lifetime_lock:
            if self.max_lifetime == "auto":  # else another thread read it meanwhile
                self._lifetime_learned(self.driver.server_idle_timeout(conn))  # raises: "auto"

    def _close(self, conn: Any) -> None:
        self._closing(conn)
        with contextlib.suppress(Exception):  # closing a dead connection may fail; it is gone
            conn.close()


class _Checkout:
    """``with pool.connection() as conn``: see :meth:`DBPool.connection`."""

    __slots__ = ("_conn", "_owner", "_pool", "_timeout")

    def __init__(self, pool: DBPool, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout
        self._owner = Owner()  # see surge.pool._sync.Owner: an interrupted __exit__

    def __enter__(self) -> Any:
        self._owner.pending = self._conn = self._pool.acquire(self._timeout)
        return self._conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pool, conn, owner = self._pool, self._conn, self._owner
        if exc is None:
            pool.release(conn, owner)
        else:  # lost, release or discard: see SessionResets._after_error
            pool._after_error(conn, exc)(conn, owner)

    def __del__(self) -> None:
        owner = getattr(self, "_owner", None)  # None: __init__ did not finish
        if owner is not None:
            orphaned(self._pool.pool, owner)
