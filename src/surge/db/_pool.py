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
import logging
import math
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Literal

from surge.db._drivers import DatabaseURL, Driver, driver_for
from surge.db._session import RESET_WAIT, next_session
from surge.errors import UsageError
from surge.pool import Pool, _fork
from surge.pool._sync import Owner, orphaned

log = logging.getLogger("surge.db")

#: Share of the server's idle timeout that ``max_lifetime="auto"`` keeps below
#: (then jittered down by up to ``lifetime_jitter``).
LIFETIME_SHARE = 0.9

#: A connection back in the pool for less than this (seconds) is handed out
#: without looking at its socket.  The look is a ``select()``, a system call
#: that lets go of the GIL: with four Django threads sharing a pool it cost a
#: request cycle ~30 us of its ~430 (``benchmarks/django_cycle.py``, 4 threads:
#: 427-460 us with it, 400 without, Django's own pool 393-427).  A server that
#: goes away in those 50 ms is met by the first statement instead, as a kill
#: that races the check always is.
SOCKET_CHECK_AFTER = 0.05


class SessionResets:
    """What DBPool and AsyncDBPool share: their settings, their counters and
    ``stats()``, and the session reset at return (its sending is the same,
    sync or async: nothing is waited for).  Only waiting differs between them:
    each wraps its own pool (surge.pool's Pool or AsyncPool) as ``pool``."""

    driver: Any
    pool: Any
    #: Each front-end's own, sync or async (surge.pool awaits what returns an awaitable).
    _check: Callable[[Any, float], Any]
    _reset: Callable[[Any], Any]
    _close: Callable[[Any], Any]
    n_resets = 0
    n_severed = 0
    n_pings = 0
    n_rollbacks = 0

    def _settings(
        self,
        url: DatabaseURL,
        reset: str,
        init_sql: Sequence[str],
        autocommit: bool,
        check_idle_after: float,
        connect_args: dict[str, Any] | None,
        timeout: float,
        max_lifetime: float | Literal["auto"] | None,
    ) -> None:
        """The settings both keep as given (``driver`` set before: the reset
        mode is checked against it)."""
        self.url = url
        self.reset = check_reset_mode(reset, self.driver)
        self.init_sql = check_init_sql(init_sql)
        self.autocommit = autocommit
        self.check_idle_after = check_idle_after
        self._connect_args = dict(connect_args or {})
        self.timeout = timeout
        #: The lifetime in force; ``"auto"`` until the first connection has read it.
        self.max_lifetime: float | Literal["auto"] | None = max_lifetime
        #: Called with each connection the pool closes (glue that keeps its own
        #: record per connection, as SQLAlchemy's, forgets it here).
        self.on_close: list[Callable[[Any], object]] = []

    def _pool_options(
        self,
        max_size: int,
        max_overflow: int,
        max_idle: float | None,
        lifetime_jitter: float,
        lifo: bool,
        clock: Callable[[], float],
    ) -> dict[str, Any]:
        """surge.pool's arguments (Pool's or AsyncPool's: the same), with this
        pool's callbacks: the check, the reset and close at return, the sever
        of a forked child's inherited connections."""
        max_lifetime = self.max_lifetime
        return {
            "max_size": max_size,
            "max_overflow": max_overflow,
            "timeout": self.timeout,
            "max_idle": max_idle,
            "max_lifetime": None if max_lifetime == "auto" else max_lifetime,
            "lifetime_jitter": lifetime_jitter,
            "check": self._check,
            "check_idle_after": checkout_check_after(
                self.check_idle_after, self.reset, self.driver
            ),
            "reset": self._reset,
            "close": self._close,
            "sever": self._sever_inherited,
            "lifo": lifo,
            "clock": clock,
        }

    @property
    def generation(self) -> int:
        return int(self.pool.generation)

    def generation_of(self, conn: Any) -> int | None:
        """The generation ``conn`` was made in (None if it is not checked out)."""
        generation: int | None = self.pool.generation_of(conn)
        return generation

    def stats(self) -> dict[str, Any]:
        """The pool's counters plus ``generation``, ``pings``, ``rollbacks`` and
        ``server_gone`` (how many times a disconnect moved the generation on)."""
        stats: dict[str, Any] = self.pool.stats()
        written = getattr(self.driver, "written", None) or [self.n_resets, self.n_resets]
        stats.update(
            pings=self.n_pings,
            rollbacks=self.n_rollbacks,
            resets=self.n_resets,
            resets_written=written[0],
            reset_commands=written[1],
            severed=self.n_severed,
            server_gone=stats["generation"],
            max_lifetime=self.max_lifetime,
        )
        return stats

    def _after_reset(self, conn: Any, outcome: bool | Exception | None) -> bool:
        """Count a session reset started at return; sever a connection that could
        not be reset (``start_session_reset``'s False or error): never waited on."""
        if outcome is None:
            return True
        if outcome is True:
            self.n_resets += 1
            next_session(conn)
            return True
        self._sever(conn)
        return False

    def _sever(self, conn: Any) -> None:
        """Cut a connection whose protocol state is unknown at its socket, without
        a byte to the server."""
        if sever_once(conn):
            self.n_severed += 1
            self.driver.sever(conn)

    def _sever_inherited(self, conn: Any) -> None:
        """The pool's ``sever`` in a forked child, for each connection of the parent."""
        self.n_severed += 1
        self.driver.sever_inherited(conn)


def needs_ping(idle: float, check_idle_after: float, driver: Any, conn: Any) -> bool:
    """Whether a connection idle ``idle`` seconds must be pinged before use: idle
    ``check_idle_after`` or more, or idle long enough to look at its socket
    (``SOCKET_CHECK_AFTER``) and something arrived on it (EOF, a goodbye)."""
    if idle >= check_idle_after:
        return True
    return idle >= SOCKET_CHECK_AFTER and bool(driver.has_input(conn))


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

    def __init__(
        self,
        url: str,
        *,
        driver: str | None = None,
        max_size: int = 10,
        max_overflow: int = 0,
        timeout: float = 30.0,
        max_idle: float | None = None,
        max_lifetime: float | Literal["auto"] | None = "auto",
        lifetime_jitter: float = 0.1,
        check_idle_after: float = 1.0,
        autocommit: bool = False,
        lifo: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        connect_args: dict[str, Any] | None = None,
        reset: Literal["session", "none"] = "session",
        init_sql: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if check_idle_after < 0:
            raise ValueError(f"check_idle_after must be 0 or more, not {check_idle_after}")
        parsed = DatabaseURL.parse(url)
        self.driver: Driver = driver_for(parsed, driver, ssl_context)
        self._settings(
            parsed, reset, init_sql, autocommit, check_idle_after, connect_args, timeout,
            max_lifetime,
        )  # fmt: skip
        #: The acquire under way in this thread: its timeout bounds a connect.
        self._budget = threading.local()
        self._lifetime_lock = _fork.lock()
        #: Makes a new connection; glue that knows better replaces it (SQLAlchemy's
        #: dialect arguments and ``do_connect`` events, see surge.db.sqlalchemy).
        self.connector: Callable[[], Any] = self._connect_to_url
        self.pool: Pool[Any] = Pool(
            self._create,
            **self._pool_options(max_size, max_overflow, max_idle, lifetime_jitter, lifo, clock),
        )

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

    def _check(self, conn: Any, idle: float) -> bool:
        """The pool's check on checkout: read the answers of the reset written at
        return (unless the connection's next command may: ``Driver.reset_answers``),
        then ping if ``needs_ping``; a reset or ping that fails discards the
        connection, and a disconnect moves the generation on."""
        driver = self.driver
        within = self._answer_wait()
        if driver.reset_pending(conn) and not (
            driver.reset_answers == "lazily" and idle < SOCKET_CHECK_AFTER
        ):
            try:
                driver.finish_reset(conn, within)
            except Exception as error:
                self._failed(conn, error)
                return False
        if not needs_ping(idle, self.check_idle_after, driver, conn):
            return True
        self.n_pings += 1
        try:
            self.driver.ping(conn, within)
        except Exception as error:
            self._failed(conn, error)
            return False
        return True

    def _answer_wait(self) -> float:
        """How long a checkout waits for one answer (a reset's, a ping's): RESET_WAIT,
        or the acquire's timeout if shorter.  A session silent that long is cut
        and replaced, within the acquire's timeout."""
        budget = getattr(self._budget, "timeout", None) or self.timeout
        return min(RESET_WAIT, budget)

    def _reset(self, conn: Any) -> bool:
        """The pool's reset on return (see ``release``).  False (discard) for a
        closed connection.  (The pool does not reset a connection it is about to
        retire: one of an old generation, whose server may be gone, is discarded
        without a round trip.)"""
        driver = self.driver
        if driver.is_closed(conn):
            return False
        if self.reset == "session":
            outcome = start_session_reset(driver, conn)
            if isinstance(outcome, Exception):
                self._failed(conn, outcome)
            return self._after_reset(conn, outcome)
        if not driver.protocol_idle(conn):
            self._sever(conn)
            return False
        try:
            if driver.in_transaction(conn):
                self.n_rollbacks += 1
                conn.rollback()
            driver.restore_autocommit(conn, self.autocommit)
        except Exception as error:
            self._failed(conn, error)
            return False
        return True

    def _failed(self, conn: Any, error: BaseException) -> None:
        """A ping or rollback raised: if the server is gone, move the generation on
        (the pool discards the connection itself)."""
        if self.driver.is_disconnect(error, conn):
            self.pool.invalidate(self.pool.generation_of(conn))
        else:
            log.info("%r failed on %r; discarding it", error, conn)

    def _connect_to_url(self) -> Any:
        budget = getattr(self._budget, "timeout", None) or self.timeout
        args = with_connect_timeout(self.url, self.driver.name, self._connect_args, budget)
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
            if self.max_lifetime != "auto":
                return  # another thread read it while this one waited
            idle_timeout = self.driver.server_idle_timeout(conn)  # raises: still "auto"
            if idle_timeout:
                self.pool.set_max_lifetime(idle_timeout * LIFETIME_SHARE)
                self.max_lifetime = idle_timeout * LIFETIME_SHARE
            else:
                self.max_lifetime = None

    def _close(self, conn: Any) -> None:
        for forget in self.on_close:
            forget(conn)
        if not self.driver.protocol_idle(conn):  # a polite close could wait on the server
            self._sever(conn)
        with contextlib.suppress(Exception):  # closing a dead connection may fail; it is gone
            conn.close()


def with_connect_timeout(
    url: DatabaseURL, driver: str, connect_args: dict[str, Any], budget: float
) -> dict[str, Any]:
    """``connect_args`` with a connect timeout no longer than ``budget`` (an
    acquire's timeout), unless the URL or the arguments set one: a server that
    accepts and then says nothing (a hung host) must not hold an acquire past
    its timeout.  (libpq has no default at all; PyMySQL's is 10 s.)"""
    if "connect_timeout" in connect_args or "connect_timeout" in url.options:
        return connect_args
    defaults = {
        "pymysql": 10.0,
        "aiomysql": 10.0,
        "mysqlclient": 10.0,
        "psycopg": None,
        "asyncpg": None,
    }
    if driver not in defaults:
        return connect_args
    default = defaults[driver]
    seconds = budget if default is None else min(default, budget)
    if driver in ("psycopg", "mysqlclient"):  # whole seconds (libpq: 2 at least)
        seconds = max(2 if driver == "psycopg" else 1, math.ceil(seconds))
    return {**connect_args, "connect_timeout": seconds}


def start_session_reset(driver: Any, conn: Any) -> bool | Exception | None:
    """The session reset at return, as far as it goes without waiting: None if
    nothing went to the server since the last one (only the client's side is put
    back), True if it was sent, False if the protocol state is unknown, or the
    exception that sending it raised."""
    if not driver.used(conn):
        driver.restore_client(conn)
        return None
    try:
        return bool(driver.send_reset(conn))
    except Exception as error:
        return error


def sever_once(conn: Any) -> bool:
    """Whether ``conn`` is to be severed now (not already)."""
    if getattr(conn, "_surge_severed", False):
        return False
    with contextlib.suppress(AttributeError):  # a class without __dict__ (sqlite3)
        conn._surge_severed = True
    return True


def check_reset_mode(reset: str, driver: Any) -> Literal["session", "none"]:
    if reset not in ("session", "none"):
        raise UsageError(f"reset={reset!r}: use 'session' (the default) or 'none'")
    if reset == "session" and driver.name == "sqlite3":
        return "none"  # a file, not a server session: nothing outlives the transaction
    return reset  # type: ignore[return-value]


def check_init_sql(init_sql: Sequence[str]) -> tuple[str, ...]:
    if isinstance(init_sql, str | bytes):
        raise UsageError("init_sql is a list of statements, not one string")
    statements = tuple(init_sql)
    for sql in statements:
        if not isinstance(sql, str) or not sql.strip():
            raise UsageError(f"init_sql: {sql!r} is not a statement")
    return statements


def checkout_check_after(check_idle_after: float, reset: str, driver: Any) -> float:
    """How idle a connection must be for the pool to call ``check`` at checkout: at
    every checkout when a reset's answers must be read there (PostgreSQL), else
    from ``SOCKET_CHECK_AFTER`` (a look at the socket) or ``check_idle_after``."""
    if reset == "session" and driver.reset_answers == "at checkout":
        return 0.0
    return min(check_idle_after, SOCKET_CHECK_AFTER)


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
        elif pool.driver.is_disconnect(exc, conn):
            pool.lost(conn, owner)
        elif isinstance(exc, Exception):
            pool.release(conn, owner)
        else:
            pool.discard(conn, owner)

    def __del__(self) -> None:
        owner = getattr(self, "_owner", None)  # None: __init__ did not finish
        if owner is not None:
            orphaned(self._pool.pool, owner)
