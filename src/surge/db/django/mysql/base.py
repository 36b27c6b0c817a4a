"""Django's MySQL/MariaDB backend, with connections pooled across requests.

Django opens a connection per request and closes it at the end (``CONN_MAX_AGE``
0, the default), or keeps one per thread (``CONN_MAX_AGE`` > 0) that idles
between requests until MySQL's ``wait_timeout`` drops it ("MySQL server has
gone away").  This backend is Django's own with these changes:

* ``get_new_connection`` checks a connection out of a process-wide
  :class:`surge.db.DBPool` (one per database alias), and closing gives it back:
  a request costs no login (a MariaDB login with PyMySQL's default "preferred"
  TLS costs ~42 ms building an SSLContext; surge builds one per pool);
* ``init_connection_state`` (Django sends ``SET SESSION TRANSACTION ISOLATION
  LEVEL`` on every connect) is skipped at a checkout whose pooled session already
  has these settings; called by the application, it runs;
* closing gives the connection back rolled back (unless no transaction is known
  to be open) and in Django's autocommit mode; a connection Django judged
  unusable (a failed health check, ``is_usable()`` after an error) is discarded,
  and a disconnect moves the pool's generation on, so no idle connection of the
  old server is handed out again;
* after the close the wrapper holds a stand-in that raises ``InterfaceError``:
  the connection may already be another thread's;
* a thread that ends without closing its connection does not keep the pool
  slot: once the pool is exhausted, such connections are discarded.

The driver is mysqlclient when it is installed, as with Django's backend;
otherwise PyMySQL, installed as ``MySQLdb`` (``pymysql.install_as_MySQLdb``).
``OPTIONS["pool"]`` holds :class:`surge.db.DBPool` options (``max_size``,
``timeout``, ``check_idle_after``, ...); the other ``OPTIONS`` go to the driver
as with Django's backend.
"""

from __future__ import annotations

import threading
from typing import Any

try:
    import MySQLdb  # mysqlclient, if installed, is what Django expects
except ImportError:
    import pymysql

    pymysql.install_as_MySQLdb()
    import MySQLdb

from django.db.backends.mysql import base as django_mysql

from surge.db._pool import DBPool

#: The driver Django's backend uses (its connection parameters are that driver's:
#: mysqlclient's converters mean nothing to PyMySQL), and so the pool's.
DRIVER = "mysqlclient" if MySQLdb.__name__ == "MySQLdb" else "pymysql"

_pools: dict[tuple[str, str], DBPool] = {}
_pools_lock = threading.Lock()


def pool_for(alias: str, conn_params: dict[str, Any], options: dict[str, Any]) -> DBPool:
    """The process's pool for a database alias and its connection parameters."""
    # Django's converters ("conv") are one module-level dict: leave them out of the key.
    params = sorted((k, repr(v)) for k, v in conn_params.items() if k != "conv")
    key = (alias, repr(params) + repr(sorted(options.items())))
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            # The URL says only "MySQL"; Django's parameters (its converters,
            # FOUND_ROWS, charset, host or socket, ...) go to every connect.
            pool = DBPool("mysql://", driver=DRIVER, connect_args=conn_params, **options)
            _pools[key] = pool
    return pool


def close_pools() -> None:
    """Close every pool of this process (tests, or before a fork)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


class _Returned:
    """What a wrapper holds in place of a connection it gave back to the pool: every
    use raises the driver's ``InterfaceError`` (as a closed connection would),
    so nothing can reach a connection that another thread may now hold."""

    open = False

    def __init__(self, interface_error: type[Exception]) -> None:
        self._error = interface_error

    def __getattr__(self, name: str) -> Any:
        raise self._error(0, "this connection went back to surge's pool")


class DatabaseWrapper(django_mysql.DatabaseWrapper):  # type: ignore[misc]
    connection: Any  # the DB-API connection, None, or _Returned
    #: Set while Django closes the connection because ``is_usable()`` said no.
    _surge_unusable = False
    #: Set by get_new_connection, read by the init_connection_state of the same
    #: connect(): a pooled session that already has Django's settings skips it.
    _surge_checked_out = False

    def get_connection_params(self) -> dict[str, Any]:
        # Django passes OPTIONS on to the driver: take surge's own out first.
        params: dict[str, Any] = super().get_connection_params()
        # The pool keeps connections in Django's autocommit mode: Django sets it
        # at every checkout, and the pool puts it back at every return - in the
        # same mode, neither costs a round trip.
        self._surge_pool_options = {
            "autocommit": self.settings_dict["AUTOCOMMIT"],
            **params.pop("pool", {}),
        }
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        pool = self._surge_pool = pool_for(self.alias, conn_params, self._surge_pool_options)
        reclaim_from_dead_threads(pool)
        connection = pool.acquire()
        _holders[id(connection)] = (threading.current_thread(), connection, pool)
        if connection.encoders.get(bytes) is bytes:  # as Django's backend does
            connection.encoders.pop(bytes)
        self._surge_checked_out = True
        return connection

    def _surge_session_state(self) -> tuple[Any, ...]:
        """What init_connection_state sets on a session, given these settings."""
        return (self.isolation_level, self.features.is_sql_auto_is_null_enabled)

    def init_connection_state(self) -> None:
        # Django calls this after every connect(): a pooled session that already
        # has these settings skips the round trip.  Called again later, it runs.
        conn: Any = self.connection
        checked_out, self._surge_checked_out = self._surge_checked_out, False
        state = self._surge_session_state()
        if checked_out and getattr(conn, "_surge_django_state", None) == state:
            return
        super().init_connection_state()
        conn._surge_django_state = state

    def close_if_health_check_failed(self) -> None:
        self._surge_unusable = True  # it closes only a connection is_usable() failed
        try:
            super().close_if_health_check_failed()
        finally:
            self._surge_unusable = False

    def close_if_unusable_or_obsolete(self) -> None:
        # After an error it closes only a connection that is_usable() failed (or
        # one left in the wrong autocommit mode: discarding that is no loss).
        self._surge_unusable = bool(self.errors_occurred)
        try:
            super().close_if_unusable_or_obsolete()
        finally:
            self._surge_unusable = False

    def _close(self) -> None:
        conn: Any = self.connection
        if conn is None or isinstance(conn, _Returned):
            return
        pool = self._surge_pool
        _holders.pop(id(conn), None)
        # From here on this wrapper cannot reach the connection: Django keeps
        # ``self.connection`` after a close inside atomic() until the block ends.
        self.connection = _Returned(self.Database.InterfaceError)
        with self.wrap_database_errors:
            if pool.driver.is_closed(conn):
                if self.errors_occurred:  # the driver closed it on a network error
                    pool.lost(conn)
                else:
                    pool.discard(conn)
            elif self._surge_unusable:
                pool.discard(conn)  # Django judged it unusable: never hand it out again
            else:
                pool.release(conn)  # rolled back unless no transaction is open


#: id(connection) -> (the thread that checked it out, the connection, its pool),
#: for every connection a DatabaseWrapper holds.  Django's connections are per
#: thread; a thread that ends without closing its connection would keep the
#: pool slot for ever.
_holders: dict[int, tuple[threading.Thread, Any, DBPool]] = {}


def reclaim_from_dead_threads(pool: DBPool) -> None:
    """Discard the connections of ``pool`` held by threads that have ended, once
    every connection the pool may open is checked out: a scan of at most those,
    on the path that would otherwise wait for one."""
    stats = pool.stats()
    if stats["in_use"] < stats["max_size"] + stats["max_overflow"]:
        return
    for key, (thread, conn, owner) in list(_holders.items()):
        if owner is pool and not thread.is_alive() and _holders.pop(key, None) is not None:
            pool.discard(conn)  # its state is unknown: another thread's, mid-anything
