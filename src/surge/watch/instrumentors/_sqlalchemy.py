"""SQLAlchemy's QueuePool: a checkout that finds the pool and its overflow all
in use waits in ``QueuePool._do_get`` (a wrapper: SQLAlchemy's pool events say
when a connection is checked out, not how long the caller waited for it).

Each wait is a ``pool.wait`` of the pool (``sqlalchemy QueuePool (mysql) #1``)
with the pool's size (``pool_size + max_overflow``) and the demand at that
moment (connections checked out plus callers waiting): what the
``pool-too-small`` finding sizes the pool from.
"""

from __future__ import annotations

import _thread
import itertools
from types import ModuleType
from typing import Any

from surge.watch.instrument import Instrumentor, failed
from surge.watch.recorder import clock

_NAME = "_surge_watch_name"


class SQLAlchemyInstrumentor(Instrumentor):
    library = "sqlalchemy"
    modules = ("sqlalchemy.pool.impl",)
    shown = ("databases", ("SQLAlchemy's pool",))

    def apply(self, module: ModuleType) -> None:
        self.waiting: dict[int, int] = {}  # per pool, callers in _do_get now
        self.lock = _thread.allocate_lock()
        self.numbers = itertools.count(1)
        self.replace(module.QueuePool, "_do_get", self._do_get)

    def _name(self, pool: Any) -> str:
        name = pool.__dict__.get(_NAME)
        if name is None:
            dialect = getattr(getattr(pool, "_dialect", None), "name", None) or "?"
            name = pool.__dict__[_NAME] = f"sqlalchemy QueuePool ({dialect}) #{next(self.numbers)}"
        return str(name)

    def _do_get(self, original: Any) -> Any:
        instrumentor = self

        def _do_get(pool: Any) -> Any:
            if not instrumentor.on:
                return original(pool)
            try:
                limit = pool._max_overflow
                waits = limit > -1 and pool._overflow >= limit and pool._pool.empty()
            except Exception:
                waits = False
            if not waits:
                return original(pool)
            key = id(pool)
            waiting = instrumentor.waiting
            with instrumentor.lock:
                waiting[key] = waiting.get(key, 0) + 1
                now_waiting = waiting[key]
            try:
                wanted = pool.checkedout() + now_waiting  # held, and waiting with this one
            except Exception:
                wanted = 0
            start = clock()
            try:
                return original(pool)
            finally:
                with instrumentor.lock:
                    waiting[key] -= 1
                    others = waiting[key]
                try:
                    size = pool.size() + pool._max_overflow
                    demand = max(wanted, pool.checkedout() + others)
                    instrumentor.recorder.pool_wait(
                        "sqlalchemy", instrumentor._name(pool), start, clock(), size, demand
                    )
                except Exception:
                    failed("sqlalchemy QueuePool._do_get")

        return _do_get
