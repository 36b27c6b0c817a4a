"""The thread-safe front-ends: ``Pool`` and ``KeyedPool``.

They wrap the pure cores with one lock, read the clock, call the user's
``create``/``check``/``reset``/``close`` outside the lock, and park waiters on a
private lock each (released by whoever grants them), so a release wakes exactly
the waiter it served - no thundering herd, and the oldest waiter goes first.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Any, Generic, TypeVar

from surge.errors import PoolClosed
from surge.pool import _fork
from surge.pool._core import Entry, PoolCore, Waiter
from surge.pool._keyed_core import KeyedCore
from surge.pool._options import Generations, Options, check_passed, log, timeout_error

R = TypeVar("R")
K = TypeVar("K", bound=Hashable)

_allocate_lock = threading.Lock


def _armed_lock() -> threading.Lock:
    """A waiter's wake: a lock taken now, released by whoever grants the waiter."""
    wake = _allocate_lock()
    wake.acquire()
    return wake


class _SyncFrontEnd(Generations, Generic[R]):
    """Lock, clock, callbacks and waiting: what Pool and KeyedPool share."""

    def __init__(
        self,
        *,
        timeout: float,
        max_idle: float | None,
        max_lifetime: float | None,
        lifetime_jitter: float,
        check: Callable[[R, float], object] | None,
        check_idle_after: float,
        reset: Callable[[R], object] | None,
        close: Callable[[R], object] | None,
        sever: Callable[[R], object] | None,
        clock: Callable[[], float],
    ) -> None:
        self._options = Options(timeout, max_idle, max_lifetime, lifetime_jitter, check_idle_after)
        self._check = check
        #: Seconds idle below which a reused resource skips ``check`` (inf: no check).
        self._unchecked_below = check_idle_after if check is not None else float("inf")
        self._reset = reset
        self._close = close
        self._sever = sever
        self._clock = clock
        self._lock = threading.Lock()
        #: In a forked child: the parent's checked-out resources, by id (kept
        #: alive so that no new resource takes an id), which release and discard
        #: drop without a word.
        self._inherited: dict[int, R] = {}
        _fork.track(self)

    # -- shared steps -----------------------------------------------------------------

    def _dispose(self, garbage: list[Entry[R]]) -> None:
        """Close retired resources; a close that fails is logged, never raised."""
        if self._close is None:
            return
        for entry in garbage:
            try:
                self._close(entry.resource)
            except Exception:
                log.warning("closing %r failed", entry.resource, exc_info=True)

    def _acquire(self, key: Any, timeout: float | None, got: Entry[R] | Waiter[R] | None) -> R:
        """The general acquire, from the core's first answer ``got`` (the one loop
        both thread pools run: ``key`` is None for the plain pool)."""
        deadline = None
        while True:
            now = self._clock()
            if self._core.garbage:
                self._settle()
            if type(got) is Entry:
                if self._passes_check(got, now):
                    return got.resource
            elif got is None:
                return self._create_in_slot(key)
            else:
                assert isinstance(got, Waiter)
                if timeout is None:
                    timeout = self._options.timeout
                if deadline is None:
                    deadline = now + timeout
                entry = self._wait(got, deadline, timeout, key)
                if entry is None:
                    return self._create_in_slot(key)
                if self._passes_check(entry, self._clock()):
                    return entry.resource
            got = self._locked_acquire(key)

    def _acquire_nowait(self, key: Any) -> R | None:
        if self._check is not None:
            raise RuntimeError("acquire_nowait() cannot run check: use acquire()")
        with self._lock:
            entry = self._take(key, self._clock())
        if self._core.garbage:
            self._settle()
        return None if entry is None else entry.resource

    def release_nowait(self, resource: R) -> None:
        """``release`` for a pool with no ``reset`` callback (as the async pools')."""
        if self._reset is not None:
            raise RuntimeError("release_nowait() cannot run reset: use release()")
        self.release(resource)

    def _wait(
        self, waiter: Waiter[R], deadline: float, timeout: float, key: Any = None
    ) -> Entry[R] | None:
        """Block until ``waiter`` is granted; the entry it was handed, or None if it
        may create.  Raises PoolTimeout at ``deadline``, PoolClosed on close."""
        remaining = deadline - self._clock()
        try:
            woke = remaining > 0 and waiter.wake.acquire(True, remaining)
        except BaseException:  # interrupted (KeyboardInterrupt): the grant is not lost
            self._abandon(waiter)
            raise
        if not woke:
            with self._lock:
                if not waiter.granted and not waiter.closed:
                    self._cancel(waiter)
                    raise timeout_error(timeout, self._stats(), key)
        if waiter.closed:
            raise PoolClosed("the pool was closed while waiting")
        return waiter.entry

    def _passes_check(self, entry: Entry[R], now: float) -> bool:
        """Run ``check`` on a reused resource (if it was idle long enough to doubt it);
        a failing resource is discarded."""
        if self._check is None or not self._options.wants_check(now, entry.idle_since):
            return True
        try:
            ok = check_passed(self._check(entry.resource, now - entry.idle_since))
        except Exception:
            log.info("check of %r raised; discarding it", entry.resource, exc_info=True)
            ok = False
        except BaseException:  # interrupted mid-check: the slot must not leak
            self.discard(entry.resource)
            raise
        if not ok:
            self.discard(entry.resource)
        return ok

    def _returns_clean(self, resource: R, now: float) -> bool:
        """Run ``reset`` before a resource goes back; one that fails is discarded.
        One the pool will retire anyway (its lifetime is over, or ``invalidate``
        ran) is not reset: a rollback on a server that is gone can hang."""
        if self._reset is None:
            return True
        if self._core.retiring(resource, now):  # read-only: no lock needed under the GIL
            return True
        try:
            ok = check_passed(self._reset(resource))
        except Exception:
            log.info("reset of %r raised; discarding it", resource, exc_info=True)
            ok = False
        except BaseException:
            self.discard(resource)
            raise
        if not ok:
            self.discard(resource)
        return ok

    def _abandon(self, waiter: Waiter[R]) -> None:
        """A waiter gives up without using its grant (it was interrupted): pass on
        the resource or the creation slot it may have been granted, or leave the
        queue, so that no resource or slot is lost."""
        with self._lock:
            passed_to = self._core.abandon(waiter, self._clock())
        if passed_to is not None:  # the plain core names whom it granted
            passed_to.wake.release()
        self._settle()  # the keyed core keeps a list of them

    def _forked(self) -> None:
        """In a forked child: a new lock (the parent's may have been held by a
        thread that does not exist here), and nothing of the parent's reused or
        closed - each resource goes to ``sever`` instead (see surge.pool._fork)."""
        self._lock = threading.Lock()
        self._inherited = _fork.forget(self._core, self._sever)

    def _drop_inherited(self, resource: R) -> bool:
        """Whether ``resource`` is the parent's (in a forked child): then it is
        forgotten here, and its slot was never this process's to give back."""
        return self._inherited.pop(id(resource), None) is not None

    # -- what each front-end provides ----------------------------------------------------

    _core: Any  # PoolCore or KeyedCore

    def _locked_acquire(self, key: Any) -> Entry[R] | Waiter[R] | None:
        """The core's acquire, under the lock, with the clock read there."""
        raise NotImplementedError

    def _create_in_slot(self, key: Any) -> R:
        """Create a resource in the slot the core reserved; give the slot back if
        creating raises anything."""
        raise NotImplementedError

    def _settle(self) -> None:
        """Wake whoever the last operations granted, and close what they retired."""
        raise NotImplementedError

    def _take(self, key: Any, now: float) -> Entry[R] | None:
        """The core's take (an idle resource or None), under the lock."""
        raise NotImplementedError

    def release(self, resource: R) -> None:
        raise NotImplementedError

    def _cancel(self, waiter: Waiter[R]) -> None:
        raise NotImplementedError

    def _stats(self) -> dict[str, Any]:
        raise NotImplementedError

    def discard(self, resource: R) -> None:
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        """Counters and gauges; see the README for the fields."""
        with self._lock:
            return self._stats()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._core.describe()}>"


class _Checkout(Generic[R]):
    """``with pool.connection() as r``: release on success, discard if the block raised."""

    __slots__ = ("_pool", "_resource", "_timeout")

    def __init__(self, pool: Pool[R], timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout

    def __enter__(self) -> R:
        self._resource = self._pool.acquire(self._timeout)
        return self._resource

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._pool.release(self._resource)
        else:
            self._pool.discard(self._resource)


class Pool(_SyncFrontEnd[R]):
    """A thread-safe pool of reusable resources (connections, sessions, ...).

    ``create()`` makes a resource; ``check(r, idle)`` (optional) is run on checkout
    of a resource idle for ``check_idle_after`` seconds or more (``idle``: how many
    seconds, so a check can pick its depth), and a resource for which it raises or
    returns False is discarded and replaced; ``reset(r)`` (optional) runs on
    return, and a resource for which it raises or returns False is discarded;
    ``close(r)`` runs on every resource the pool retires.  ``invalidate()`` makes
    every resource that exists now unusable (a server restart).

    At most ``max_size + max_overflow`` resources exist; up to ``max_size`` are kept
    idle, overflow ones are closed on return.  ``acquire`` waits up to ``timeout``
    seconds, in arrival order, then raises :class:`PoolTimeout`.  Idle resources
    are closed after ``max_idle`` seconds; every resource after ``max_lifetime``
    seconds (shortened by up to ``lifetime_jitter`` at random).  ``lifo=True``
    reuses the most recently returned resource (hot caches, and cold ones expire);
    ``lifo=False`` rotates through all of them.
    """

    def __init__(
        self,
        create: Callable[[], R],
        *,
        max_size: int,
        max_overflow: int = 0,
        timeout: float = 30.0,
        max_idle: float | None = None,
        max_lifetime: float | None = None,
        lifetime_jitter: float = 0.1,
        check: Callable[[R, float], object] | None = None,
        check_idle_after: float = 0.0,
        reset: Callable[[R], object] | None = None,
        close: Callable[[R], object] | None = None,
        sever: Callable[[R], object] | None = None,
        lifo: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            timeout=timeout,
            max_idle=max_idle,
            max_lifetime=max_lifetime,
            lifetime_jitter=lifetime_jitter,
            check=check,
            check_idle_after=check_idle_after,
            reset=reset,
            close=close,
            sever=sever,
            clock=clock,
        )
        self._create = create
        self._core: PoolCore[R] = PoolCore(
            max_size,
            max_overflow,
            lifo=lifo,
            max_idle=max_idle,
            lifetimes=bool(max_lifetime),
            make_wake=_armed_lock,
        )
        # Checkout reads the clock only when some option depends on time (or to
        # time a wait): a clock read is a tenth of a checkout's cost.
        self._timed = max_idle is not None or max_lifetime is not None or check is not None

    def acquire(self, timeout: float | None = None) -> R:
        """Check out a resource, waiting up to ``timeout`` (default: the pool's)."""
        # The hot path: an idle resource, nothing to check, nothing to close.
        # (lock.acquire/try/finally costs half of `with lock` on CPython 3.11.)
        core = self._core
        lock = self._lock
        lock.acquire()
        try:
            now = self._clock() if self._timed else 0.0
            got = core.acquire(now)
            if type(got) is Waiter:
                self._arm(got)
        finally:
            lock.release()
        if type(got) is Entry and now - got.idle_since < self._unchecked_below and not core.garbage:
            return got.resource
        return self._acquire(None, timeout, got)

    def _locked_acquire(self, key: Any) -> Entry[R] | Waiter[R] | None:
        with self._lock:
            got = self._core.acquire(self._clock())
            if type(got) is Waiter:
                self._arm(got)
        return got

    def release(self, resource: R) -> None:
        """Return a resource: to the oldest waiter if any, else to the idle set."""
        if self._inherited and self._drop_inherited(resource):
            return
        now = self._clock()  # before reset: a slow reset makes it look idle longer
        if self._reset is not None and not self._returns_clean(resource, now):
            return
        lock = self._lock
        lock.acquire()
        try:
            waiter = self._core.release(resource, now)
        finally:
            lock.release()
        if waiter is not None:
            waiter.wake.release()
        if self._core.garbage:
            self._settle()

    def discard(self, resource: R) -> None:
        """Close a checked-out resource instead of returning it (it failed)."""
        if self._inherited and self._drop_inherited(resource):
            return
        core = self._core
        with self._lock:
            waiter = core.discard(resource, self._clock())
            garbage = core.take_garbage()
        if waiter is not None:
            waiter.wake.release()
        self._dispose(garbage)

    def connection(self, timeout: float | None = None) -> _Checkout[R]:
        """``with pool.connection() as r:`` - returned after the block, discarded if it raised."""
        return _Checkout(self, timeout)

    def acquire_nowait(self) -> R | None:
        """An idle resource at once, or None: never creates, waits or queues (as
        AsyncPool's).  For a pool with no ``check`` callback."""
        return self._acquire_nowait(None)

    def _take(self, key: Any, now: float) -> Entry[R] | None:
        return self._core.take(now)

    def expire(self) -> None:
        """Close resources idle longer than ``max_idle`` now, rather than at the next
        acquire or release (a pool left alone keeps them until then)."""
        with self._lock:
            self._core.expire(self._clock())
            garbage = self._core.take_garbage()
        self._dispose(garbage)

    def clear(self) -> None:
        """Close every idle resource now; resources in use are unaffected."""
        with self._lock:
            self._core.clear()
            garbage = self._core.take_garbage()
        self._dispose(garbage)

    def invalidate(self, generation: int | None = None) -> bool:
        """Reuse nothing that exists now (its server restarted, say): idle resources
        are closed now, those in use when they come back.  With ``generation``
        (from ``generation_of``), only if the pool has not moved on since, so that
        many users who met one failure move it on once.  True if it moved on."""
        with self._lock:
            moved = self._core.invalidate(generation)
            garbage = self._core.take_garbage()
        self._dispose(garbage)
        return moved

    def set_max_lifetime(self, seconds: float | None) -> None:
        """Change ``max_lifetime`` for resources created from now on."""
        self._options = dataclasses.replace(self._options, max_lifetime=seconds)
        with self._lock:
            self._core.fast = self._core.fast and seconds is None
            self._timed = self._timed or seconds is not None

    def close(self) -> None:
        """Close idle resources, refuse new acquires, and fail current waiters with
        PoolClosed; resources in use are closed when they come back."""
        with self._lock:
            woken = self._core.close()
            garbage = self._core.take_garbage()
        for waiter in woken:
            waiter.wake.release()
        self._dispose(garbage)

    def __enter__(self) -> Pool[R]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------

    def _settle(self) -> None:
        with self._lock:
            garbage = self._core.take_garbage()
        self._dispose(garbage)

    def _create_in_slot(self, key: Any = None) -> R:
        generation = self._core.generation
        try:
            resource = self._create()
        except BaseException:
            with self._lock:
                waiter = self._core.create_failed(self._clock())
            if waiter is not None:
                waiter.wake.release()
            raise
        now = self._clock()
        with self._lock:
            self._core.created(resource, now, self._options.expires_at(now), generation)
        return resource

    def _arm(self, waiter: Waiter[R]) -> None:
        """Time a waiter the core just queued (its wake lock the core made): the hot
        path reads no clock, so its wait is timed from here, under the same lock."""
        if not self._timed:
            waiter.queued_at = self._clock()

    def _cancel(self, waiter: Waiter[R]) -> None:
        self._core.cancel(waiter, timed_out=True)

    def _stats(self) -> dict[str, Any]:
        return self._core.stats()


class KeyedPool(_SyncFrontEnd[R], Generic[K, R]):
    """A thread-safe pool with one sub-pool per key under a global limit.

    ``create(key)`` makes a resource for ``key``.  At most ``max_per_key``
    resources exist per key and ``max_size`` in all; when the total is reached, the
    coldest idle resource of any key is closed to make room, and only when none is
    idle does ``acquire`` wait.  Other options as :class:`Pool`.
    """

    def __init__(
        self,
        create: Callable[[K], R],
        *,
        max_size: int,
        max_per_key: int,
        timeout: float = 30.0,
        max_idle: float | None = None,
        max_lifetime: float | None = None,
        lifetime_jitter: float = 0.1,
        check: Callable[[R, float], object] | None = None,
        check_idle_after: float = 0.0,
        reset: Callable[[R], object] | None = None,
        close: Callable[[R], object] | None = None,
        sever: Callable[[R], object] | None = None,
        lifo: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            timeout=timeout,
            max_idle=max_idle,
            max_lifetime=max_lifetime,
            lifetime_jitter=lifetime_jitter,
            check=check,
            check_idle_after=check_idle_after,
            reset=reset,
            close=close,
            sever=sever,
            clock=clock,
        )
        self._create = create
        self._core: KeyedCore[K, R] = KeyedCore(
            max_size, max_per_key, lifo=lifo, max_idle=max_idle, make_wake=_armed_lock
        )

    def acquire(self, key: K, timeout: float | None = None) -> R:
        """Check out a resource for ``key``, waiting up to ``timeout`` (default: the pool's)."""
        core = self._core
        lock = self._lock
        lock.acquire()
        try:
            now = self._clock()
            got = core.acquire(key, now)
        finally:
            lock.release()
        if type(got) is Entry and now - got.idle_since < self._unchecked_below and not core.garbage:
            return got.resource
        return self._acquire(key, timeout, got)

    def _locked_acquire(self, key: K) -> Entry[R] | Waiter[R] | None:
        with self._lock:
            return self._core.acquire(key, self._clock())

    def acquire_nowait(self, key: K) -> R | None:
        """An idle resource of ``key`` at once, or None: never creates, waits or
        queues.  For a pool with no ``check`` callback."""
        return self._acquire_nowait(key)

    def _take(self, key: K, now: float) -> Entry[R] | None:
        return self._core.take(key, now)

    def set_max_lifetime(self, seconds: float | None) -> None:
        """Change ``max_lifetime`` for resources created from now on."""
        self._options = dataclasses.replace(self._options, max_lifetime=seconds)

    def release(self, resource: R) -> None:
        if self._inherited and self._drop_inherited(resource):
            return
        now = self._clock()
        if self._reset is not None and not self._returns_clean(resource, now):
            return
        with self._lock:
            self._core.release(resource, now)
        self._settle()

    def discard(self, resource: R) -> None:
        if self._inherited and self._drop_inherited(resource):
            return
        with self._lock:
            self._core.discard(resource, self._clock())
        self._settle()

    def connection(self, key: K, timeout: float | None = None) -> _KeyedCheckout[K, R]:
        return _KeyedCheckout(self, key, timeout)

    def expire(self) -> None:
        with self._lock:
            self._core.expire(self._clock())
        self._settle()

    def clear(self) -> None:
        """Close every idle resource of every key now; resources in use are unaffected."""
        with self._lock:
            self._core.clear(self._clock())
        self._settle()

    def invalidate(self, generation: int | None = None) -> bool:
        """As :meth:`Pool.invalidate`, for every key."""
        with self._lock:
            moved = self._core.invalidate(self._clock(), generation)
        self._settle()
        return moved

    def close(self) -> None:
        with self._lock:
            woken = self._core.close()
        for waiter in woken:
            waiter.wake.release()
        self._settle()

    def __enter__(self) -> KeyedPool[K, R]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _settle(self) -> None:
        """Wake whoever the last operation granted, and close what it retired."""
        with self._lock:
            woken = self._core.take_woken() if self._core.woken else ()
            garbage = self._core.take_garbage() if self._core.garbage else ()
        for waiter in woken:
            waiter.wake.release()
        if garbage:
            self._dispose(list(garbage))

    def _create_in_slot(self, key: K) -> R:
        generation = self._core.generation
        try:
            resource = self._create(key)
        except BaseException:
            with self._lock:
                self._core.create_failed(key, self._clock())
            self._settle()
            raise
        now = self._clock()
        with self._lock:
            self._core.created(key, resource, now, self._options.expires_at(now), generation)
        return resource

    def _cancel(self, waiter: Waiter[R]) -> None:
        self._core.cancel(waiter, timed_out=True)

    def _stats(self) -> dict[str, Any]:
        return self._core.stats()


class _KeyedCheckout(Generic[K, R]):
    __slots__ = ("_key", "_pool", "_resource", "_timeout")

    def __init__(self, pool: KeyedPool[K, R], key: K, timeout: float | None) -> None:
        self._pool = pool
        self._key = key
        self._timeout = timeout

    def __enter__(self) -> R:
        self._resource = self._pool.acquire(self._key, self._timeout)
        return self._resource

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._pool.release(self._resource)
        else:
            self._pool.discard(self._resource)
