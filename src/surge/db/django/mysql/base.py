"""Django's MySQL/MariaDB backend, with connections pooled across requests.

Django opens a connection per request and closes it at the end (``CONN_MAX_AGE``
0, the default), or keeps one per thread (``CONN_MAX_AGE`` > 0) that idles
between requests until MySQL's ``wait_timeout`` drops it ("MySQL server has
gone away").  This backend is Django's own with three changes:

* ``get_new_connection`` checks a connection out of a process-wide
  :class:`surge.db.DBPool` (one per database alias), and closing gives it back:
  a request costs no login (a MariaDB login with PyMySQL's default "preferred"
  TLS costs ~42 ms building an SSLContext; surge builds one per pool);
* ``init_connection_state`` (Django sends ``SET SESSION TRANSACTION ISOLATION
  LEVEL`` on every connect) runs once per pooled connection: the session keeps
  the setting;
* a connection found unusable after a disconnect error moves the pool's
  generation on, so no idle connection of the old server is handed out again.

The driver is PyMySQL, installed as ``MySQLdb`` (``pymysql.install_as_MySQLdb``)
when mysqlclient is not installed: Django's backend imports ``MySQLdb``.
``OPTIONS["pool"]`` holds :class:`surge.db.DBPool` options (``max_size``,
``timeout``, ``check_idle_after``, ...); the other ``OPTIONS`` go to the driver
as with Django's backend.
"""

from __future__ import annotations

import threading
from typing import Any

try:
    import MySQLdb  # noqa: F401 - mysqlclient, if installed, is what Django expects
except ImportError:
    import pymysql

    pymysql.install_as_MySQLdb()

from django.db.backends.mysql import base as django_mysql

from surge.db._pool import DBPool

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
            pool = DBPool("mysql://", connect_args=conn_params, **options)
            _pools[key] = pool
    return pool


def close_pools() -> None:
    """Close every pool of this process (tests, or before a fork)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


class DatabaseWrapper(django_mysql.DatabaseWrapper):  # type: ignore[misc]
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
        self._surge_pool = pool_for(self.alias, conn_params, self._surge_pool_options)
        connection = self._surge_pool.acquire()
        if connection.encoders.get(bytes) is bytes:  # as Django's backend does
            connection.encoders.pop(bytes)
        return connection

    def init_connection_state(self) -> None:
        if getattr(self.connection, "_surge_django_ready", False):
            return  # the session already has Django's settings
        super().init_connection_state()
        self.connection._surge_django_ready = True

    def _close(self) -> None:
        conn = self.connection
        if conn is None:
            return
        pool = self._surge_pool
        with self.wrap_database_errors:
            if pool.driver.is_closed(conn):
                if self.errors_occurred:  # PyMySQL closed it on a network error
                    pool.lost(conn)
                else:
                    pool.discard(conn)
            else:
                pool.release(conn)  # rolled back if a transaction is open
