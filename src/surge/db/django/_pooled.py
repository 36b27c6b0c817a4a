"""What surge's Django backends share: connections checked out of a process-wide
:class:`surge.db.DBPool` per database alias and given back at close.

A backend is ``class DatabaseWrapper(PooledWrapper, <Django's DatabaseWrapper>)``
with its ``get_new_connection`` calling :meth:`PooledWrapper._surge_checkout`.
What this adds to Django's wrapper, and why:

* ``OPTIONS["pool"]`` holds the DBPool's options (``max_size``, ``timeout``,
  ``check_idle_after``, ...); the pool keeps connections in Django's autocommit
  mode, so neither Django's ``set_autocommit`` at checkout nor the pool's reset
  at return costs a round trip;
* ``init_connection_state`` is skipped at a checkout whose pooled session
  already has what it would set (MySQL's ``SET SESSION TRANSACTION ISOLATION
  LEVEL``, a round trip; PostgreSQL's time zone and role); called by the
  application, it runs;
* closing gives the connection back, rolled back unless no transaction is known
  to be open; a connection Django judged unusable (a failed health check, or
  ``is_usable()`` false after an error) is discarded instead, and a disconnect
  moves the pool's generation on, so no idle connection of the old server is
  handed out again;
* after the close the wrapper holds a stand-in that raises ``InterfaceError``:
  the connection may already be another thread's (Django keeps
  ``self.connection`` after a close inside ``atomic()`` until the block ends);
* a thread that ends without closing its connection does not keep its pool
  slot: once the pool is exhausted, such connections are discarded.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from surge.db._pool import DBPool
from surge.db._session import refuse_unknown_options
from surge.pool import _fork

_pools: dict[tuple[str, str, str], DBPool] = {}
_pools_lock = _fork.lock()  # free in a forked child

#: Per pool: id(connection) -> (the thread that checked it out, the connection),
#: for every connection a wrapper holds.  Django's connections are per thread; a
#: thread that ends without closing its connection would keep the slot for ever.
_holders: dict[DBPool, dict[int, tuple[threading.Thread, Any]]] = {}
#: Per pool: how many connections it may have checked out at once.
_capacity: dict[DBPool, int] = {}


def pool_for(
    url: str, driver: str, alias: str, conn_params: dict[str, Any], options: dict[str, Any]
) -> DBPool:
    """The process's pool for a database alias and its connection parameters."""
    # Django's MySQL converters ("conv") are one module-level dict: left out of the key.
    params = sorted((k, repr(v)) for k, v in conn_params.items() if k != "conv")
    key = (url, alias, repr(params) + repr(sorted(options.items())))
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            # The URL names only the server kind: Django's parameters (host or
            # socket, converters, adapters, ...) go to every connect.
            refuse_unknown_options(f"DATABASES[{alias!r}]['OPTIONS']['pool']", options)
            pool = DBPool(url, driver=driver, connect_args=conn_params, **options)
            stats = pool.stats()
            _capacity[pool] = stats["max_size"] + stats["max_overflow"]
            _holders[pool] = {}
            _pools[key] = pool
    return pool


def _forget_after_fork() -> None:
    """In a forked child: the pools have severed every inherited connection (see
    surge.pool._fork); forget which thread held which, and take each inherited
    connection away from the Django wrappers of the thread that forked, so that
    the child's next query checks out a connection of its own."""
    for held in _holders.values():
        held.clear()
    try:
        from django.db import connections
    except ImportError:  # pragma: no cover - Django is what imported this module
        return
    for wrapper in connections.all(initialized_only=True):
        if isinstance(wrapper, PooledWrapper) and wrapper.connection is not None:
            wrapper.connection = None
            wrapper._surge_checked_out = False


os.register_at_fork(after_in_child=_forget_after_fork)


def close_pools() -> None:
    """Close every pool of this process (tests, or before a fork)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
        _holders.clear()
        _capacity.clear()
    for pool in pools:
        pool.close()


def reclaim_from_dead_threads(pool: DBPool) -> None:
    """Discard the connections of ``pool`` held by threads that have ended, once
    every connection the pool may open is checked out: a scan of at most those,
    on the path that would otherwise wait for one."""
    held = _holders[pool]
    if len(held) < _capacity[pool]:
        return
    for key, (thread, conn) in list(held.items()):
        if not thread.is_alive() and held.pop(key, None) is not None:
            pool.discard(conn)  # its state is unknown: another thread's, mid-anything


class _Returned:
    """What a wrapper holds in place of a connection it gave back to the pool: every
    use raises the driver's ``InterfaceError`` (as a closed connection would)."""

    closed = True
    open = False

    def __init__(self, interface_error: type[Exception]) -> None:
        self._error = interface_error

    def __getattr__(self, name: str) -> Any:
        raise self._error("this connection went back to surge's pool")


class PooledWrapper:
    """The pooling half of a surge Django backend (see the module's docstring)."""

    #: "mysql://" or "postgresql://": the kind of server, for DBPool.
    surge_url = ""
    #: The surge.db driver name for Django's driver.
    surge_driver = ""
    connection: Any  # the DB-API connection, None, or a _Returned
    #: Set while Django closes the connection because ``is_usable()`` said no.
    _surge_unusable = False
    #: Set by get_new_connection, read by the init_connection_state of the same
    #: connect(): a pooled session that already has Django's settings skips it.
    _surge_checked_out = False
    #: The pool of the last checkout, and the parameters and options it was for.
    _surge_pool: DBPool | None = None
    _surge_wanted: tuple[dict[str, Any], dict[str, Any]] | None = None
    # (Django's DatabaseWrapper provides these.)
    alias: str
    settings_dict: dict[str, Any]
    errors_occurred: bool
    Database: Any
    wrap_database_errors: Any

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()  # type: ignore[misc]
        params.pop("pool", None)  # surge's options, not the driver's
        options = dict(self.settings_dict["OPTIONS"].get("pool") or {})
        # What Django's connection setup sets in a session, run again after each
        # reset with it (no round trip): without it the pool's reset would undo it.
        options["init_sql"] = [*self._surge_init_sql(), *options.get("init_sql", ())]
        self._surge_pool_options = {"autocommit": self.settings_dict["AUTOCOMMIT"], **options}
        return params

    def _surge_init_sql(self) -> list[str]:
        """The statements Django's ``init_connection_state`` runs, given the settings."""
        raise NotImplementedError

    def close_pool(self) -> None:
        """Close surge's pools of this alias (Django calls it before it drops or
        clones a test database, and when the time zone changes): their idle
        sessions let go of the database now, the ones in use when they come back."""
        with _pools_lock:
            keys = [key for key in _pools if key[1] == self.alias]
            pools = [_pools.pop(key) for key in keys]
        for pool in pools:
            _holders.pop(pool, None)
            _capacity.pop(pool, None)
            pool.close()  # a connection a wrapper holds is closed when it comes back

    @_fork.cached_property
    def _surge_returned(self) -> _Returned:
        return _Returned(self.Database.InterfaceError)

    def _surge_checkout(self, conn_params: dict[str, Any]) -> Any:
        # Django makes the parameters anew at every connect: the pool found for
        # equal ones last time is the pool, unless close_pools() closed it (a dict
        # comparison: pool_for's key costs ~13 us, a tenth of a PostgreSQL query).
        wanted = (conn_params, self._surge_pool_options)
        pool = self._surge_pool
        if pool is None or self._surge_wanted != wanted or pool not in _holders:
            pool = self._surge_pool = pool_for(
                self.surge_url, self.surge_driver, self.alias, *wanted
            )
            self._surge_wanted = wanted
        reclaim_from_dead_threads(pool)
        connection = pool.acquire()
        _holders[pool][id(connection)] = (threading.current_thread(), connection)
        self._surge_checked_out = True
        return connection

    def _surge_session_state(self) -> tuple[Any, ...]:
        """What Django's init_connection_state sets on a session, given the settings."""
        raise NotImplementedError

    def init_connection_state(self) -> None:
        # Django calls this after every connect(): a pooled session that already
        # has these settings skips it (MySQL: a SET SESSION round trip;
        # PostgreSQL: the time zone and role checks).  Called again later, it runs.
        conn: Any = self.connection
        checked_out, self._surge_checked_out = self._surge_checked_out, False
        state = self._surge_session_state()
        if checked_out and getattr(conn, "_surge_django_state", None) == state:
            return
        super().init_connection_state()  # type: ignore[misc]
        conn._surge_django_state = state
        if checked_out and self._surge_pool is not None:
            # what Django set on the client's side of this connection stays; its
            # statements are the pool's init_sql (see get_connection_params)
            self._surge_pool.session_ready(conn)

    def close_if_health_check_failed(self) -> None:
        self._surge_unusable = True  # it closes only a connection is_usable() failed
        try:
            super().close_if_health_check_failed()  # type: ignore[misc]
        finally:
            self._surge_unusable = False

    def close_if_unusable_or_obsolete(self) -> None:
        # After an error it closes only a connection that is_usable() failed (or
        # one left in the wrong autocommit mode: discarding that is no loss).
        self._surge_unusable = bool(self.errors_occurred)
        try:
            super().close_if_unusable_or_obsolete()  # type: ignore[misc]
        finally:
            self._surge_unusable = False

    def _close(self) -> None:
        conn = self.connection
        if conn is None or isinstance(conn, _Returned):
            return
        pool = self._surge_pool
        assert pool is not None  # a connection came from it
        _holders.get(pool, {}).pop(id(conn), None)
        # From here on this wrapper cannot reach the connection.
        self.connection = self._surge_returned
        with self.wrap_database_errors:
            if self.errors_occurred and pool.driver.is_closed(conn):
                pool.lost(conn)  # the driver closed it on a network error
            elif self._surge_unusable:
                pool.discard(conn)  # Django judged it unusable: never hand it out again
            else:
                pool.release(conn)  # rolled back unless no transaction is open; discarded
                # if the driver closed it
