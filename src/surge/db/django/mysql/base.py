"""Django's MySQL/MariaDB backend, with connections pooled across requests.

Django opens a connection per request and closes it at the end (``CONN_MAX_AGE``
0, the default), or keeps one per thread (``CONN_MAX_AGE`` > 0) that idles
between requests until MySQL's ``wait_timeout`` drops it ("MySQL server has
gone away").  This backend is Django's own, pooled by
:class:`surge.db.django._pooled.PooledWrapper` (a request costs no login: a
MariaDB login with PyMySQL's default "preferred" TLS costs ~42 ms building an
SSLContext; surge builds one per pool).

The driver is mysqlclient when it is installed, as with Django's backend;
otherwise PyMySQL, installed as ``MySQLdb`` (``pymysql.install_as_MySQLdb``).
``OPTIONS["pool"]`` holds :class:`surge.db.DBPool` options (``max_size``,
``timeout``, ``check_idle_after``, ...); the other ``OPTIONS`` go to the driver
as with Django's backend.
"""

from __future__ import annotations

from typing import Any

from surge.extras import missing

try:
    import MySQLdb  # mysqlclient, if installed, is what Django expects
except ImportError:
    try:
        import pymysql
    except ModuleNotFoundError as error:
        raise missing(error, "surge.db.django.mysql") from None

    pymysql.install_as_MySQLdb()
    import MySQLdb

try:
    from django.db.backends.mysql import base as django_mysql
except ModuleNotFoundError as error:
    raise missing(error, "surge.db.django.mysql") from None

from surge.db.django._pooled import PooledWrapper, close_pools

__all__ = ["DatabaseWrapper", "close_pools"]


class DatabaseWrapper(PooledWrapper, django_mysql.DatabaseWrapper):  # type: ignore[misc]
    surge_url = "mysql://"
    #: The driver Django's backend uses (its connection parameters are that
    #: driver's: mysqlclient's converters mean nothing to PyMySQL).
    surge_driver = "mysqlclient" if MySQLdb.__name__ == "MySQLdb" else "pymysql"

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = self._surge_checkout(conn_params)
        if connection.encoders.get(bytes) is bytes:  # as Django's backend does
            connection.encoders.pop(bytes)
        return connection

    def _surge_session_state(self) -> tuple[Any, ...]:
        return (self.isolation_level, self.features.is_sql_auto_is_null_enabled)

    def _surge_init_sql(self) -> list[str]:
        # Django runs these once per connection (SQL_AUTO_IS_NULL only where the
        # server has it on; setting it off where it is off already changes nothing).
        statements = ["SET SQL_AUTO_IS_NULL = 0"]
        if self.isolation_level:  # set by get_connection_params from OPTIONS
            level = self.isolation_level.upper()
            statements.append(f"SET SESSION TRANSACTION ISOLATION LEVEL {level}")
        return statements
