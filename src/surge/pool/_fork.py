"""After ``fork()``, a child never touches what its parent's pools hold.

A child inherits the parent's sockets as file descriptors that still reach the
same peers: a child that sends on one interleaves its bytes with the parent's,
and each reads the other's answers (two MySQL clients sharing a socket got 202
of 300 answers wrong, without an error).  Closing one politely is no better:
psycopg's close sends PostgreSQL a Terminate, which ends the parent's session.

So every pool registers here, and in the child, before any code of the child
runs, each pool forgets everything it held and hands each resource to its
``sever`` callback (surge.db points the inherited descriptor at a dead socket,
so that whatever later touches the object reaches nothing).  The parent's
pools are not touched.  ``os.register_at_fork`` makes this free on every path
but fork itself (redis-py instead compares the pid on every checkout).

Every lock and Condition that a pool, a connection or surge.db's process-wide
threads (the reset writer, the watchdog) hold is made by ``lock()``,
``rlock()`` or ``condition()`` here, and re-initialised in the child before
anything else: a fork while another thread held one (a ``ProcessPoolExecutor``
forking while the reset writer was in a connection's reset) left it held for
ever in the child, which then hung at its first checkout.  ``cached_property``
is the lock-free form of ``functools.cached_property``, which on Python 3.11
holds one RLock per class while computing: the same hang.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, overload

from surge._log import logger as get_logger

log = get_logger("surge.pool")


class Forkable(Protocol):
    def _forked(self) -> None:
        """Start over in a forked child (see the module's docstring)."""


_pools: weakref.WeakSet[Any] = weakref.WeakSet()


def track(pool: Forkable) -> None:
    """Have ``pool._forked()`` called in every child forked from now on."""
    _pools.add(pool)


#: Every lock and Condition made here (weakly: a connection's dies with it).
_primitives: weakref.WeakSet[Any] = weakref.WeakSet()


def lock() -> threading.Lock:
    """A ``threading.Lock`` that a forked child finds free."""
    made = threading.Lock()
    _primitives.add(made)
    return made


def rlock() -> threading.RLock:
    """A ``threading.RLock`` that a forked child finds free."""
    made = threading.RLock()
    _primitives.add(made)
    return made


def condition() -> threading.Condition:
    """A ``threading.Condition`` that a forked child finds free, with no waiter."""
    made = threading.Condition(threading.Lock())
    _primitives.add(made)
    return made


T = TypeVar("T")


class cached_property(Generic[T]):
    """``functools.cached_property`` without its lock: computed on first access and
    kept in the instance's ``__dict__``.  Two threads racing may both compute it;
    the first to finish wins (``dict.setdefault`` is atomic), so every reader sees
    one value.  Nothing to be held at a fork."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached_property[T]: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...
    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        cache = instance.__dict__
        try:
            return cache[self.name]
        except KeyError:
            return cache.setdefault(self.name, self.func(instance))


def _reinit_primitives() -> None:
    for primitive in list(_primitives):
        primitive._at_fork_reinit()  # CPython's own, as threading and logging use it


def _after_fork_in_child() -> None:
    _reinit_primitives()  # first: a pool's _forked may take its lock
    for pool in list(_pools):
        try:
            pool._forked()
        except Exception:  # never break the child over a pool it may not even use
            log.warning("resetting %r after fork failed", pool, exc_info=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forget(core: Any, sever: Any) -> dict[int, Any]:
    """What a front-end's ``_forked`` does with its core: the core forgets every
    resource (see ``PoolCore.forget_all``), each goes to ``sever`` (if any), and
    the checked-out ones are returned by id, for release and discard to drop
    when the child's code hands them back (kept alive, so no new resource can
    take one of their ids)."""
    checked_out = {id(e.resource): e.resource for e in core.checked_out.values()}
    for resource in checked_out.values():
        _keep_forever(resource)
    resources = core.forget_all()
    if sever is not None:
        for resource in resources:
            try:
                sever(resource)
            except Exception:
                log.warning("severing %r after fork failed", resource, exc_info=True)
    return checked_out


def _keep_forever(resource: Any) -> None:
    """Never free ``resource`` in this child.  A resource that was checked out in
    the parent may have been in the middle of an operation in another thread at
    the fork - a read holding its buffered reader's lock, a TLS record half
    done: freeing it would close it, which waits for that lock for ever (no
    thread here will release it).  A child leaks at most a pool's size of them."""
    import ctypes  # here: only a forked child needs it, and it costs ~1.5 ms to import

    with contextlib.suppress(Exception):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(resource))
