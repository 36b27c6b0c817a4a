"""Django's PostgreSQL backend (psycopg 3), with connections pooled across requests.

Django 5.1+ can pool PostgreSQL connections itself (``OPTIONS: {"pool": True}``,
on psycopg_pool); this backend pools them on :class:`surge.db.DBPool` instead,
through :class:`surge.db.django._pooled.PooledWrapper`: checkout costs no round
trip unless the connection idled ``check_idle_after`` (1 s) or its socket shows
the server hung up (psycopg_pool's ``check`` pings every checkout, or never),
a return costs a ROLLBACK only if a transaction is open (libpq knows), and a
disconnect drops every idle connection of the old server at once.

``OPTIONS["pool"]`` holds :class:`surge.db.DBPool` options, not psycopg_pool's;
``CONN_MAX_AGE`` must stay 0 (the pool keeps the connections).
"""

from __future__ import annotations

from typing import Any

from surge.extras import missing

try:
    from django.core.exceptions import ImproperlyConfigured
    from django.db.backends.postgresql import base as django_postgresql
    from psycopg import IsolationLevel
except ModuleNotFoundError as error:
    raise missing(error, "surge.db.django.postgresql") from None

from surge.db.django._pooled import PooledWrapper, close_pools

__all__ = ["DatabaseWrapper", "close_pools"]


class DatabaseWrapper(PooledWrapper, django_postgresql.DatabaseWrapper):  # type: ignore[misc]
    surge_url = "postgresql://"
    surge_driver = "psycopg"

    @property
    def pool(self) -> None:
        """Django's own pool (psycopg_pool) is never made: OPTIONS["pool"] is surge's."""
        return None

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        # Django's isolation level: READ COMMITTED unless OPTIONS says otherwise.
        # Set on every checkout (psycopg keeps it client-side, for its BEGIN): a
        # pooled connection may come from settings that said otherwise.
        level = self.settings_dict["OPTIONS"].get("isolation_level")
        try:
            self.isolation_level = (
                IsolationLevel.READ_COMMITTED if level is None else IsolationLevel(level)
            )
        except ValueError:
            raise ImproperlyConfigured(
                f"Invalid transaction isolation level {level} specified."
                " Use one of the psycopg.IsolationLevel values."
            ) from None
        connection = self._surge_checkout(conn_params)
        connection.isolation_level = None if level is None else self.isolation_level
        return connection

    def _surge_session_state(self) -> tuple[Any, ...]:
        return (self.timezone_name, self.settings_dict["OPTIONS"].get("assume_role"))

    def _surge_init_sql(self) -> list[str]:
        # What _configure_timezone and _configure_role set, as literals: init_sql
        # takes no parameters.
        statements = []
        if self.timezone_name:
            statements.append(f"SET TIME ZONE {_literal(self.timezone_name)}")
        if role := self.settings_dict["OPTIONS"].get("assume_role"):
            statements.append(f"SET ROLE {_literal(role)}")
        return statements


def _literal(value: str) -> str:
    """A PostgreSQL string literal (standard_conforming_strings: quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"
