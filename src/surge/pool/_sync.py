"""The thread-safe front-ends: ``Pool`` and ``KeyedPool``.

They wrap the pure cores with one lock, read the clock, call the user's
``create``/``check``/``reset``/``close`` outside the lock, and park waiters on a
private lock each (released by whoever grants them), so a release wakes exactly
the waiter it served - no thundering herd, and the oldest waiter goes first.

Interruptions (a signal handler that raises, anywhere: see surge.pool._core):
a checkout keeps what it holds at every moment - an entry checked out to it, a
slot reserved for it (None), a waiter, a resource it created - in one place
(``held``), and its one ``except BaseException`` gives that back
(``_give_back``), whatever the step: a wait, a connect, a check, the
bookkeeping between them.  Giving an entry back is a no-op once the pool no
longer counts it as this checkout's (a failed check discarded it).  A return
or a discard that is interrupted discards the resource (its state is unknown).
The lock is only ever taken by ``with``, which CPython never interrupts
between the acquire and the block.
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
from surge.pool._options import FrontEnd, check_passed, front_end_options, log, timeout_error

R = TypeVar("R")
K = TypeVar("K", bound=Hashable)

_allocate_lock = threading.Lock

#: Seconds between a waiter's looks for orphaned resources (see Owner).
ORPHAN_LOOK = 0.05

#: ``held[0]`` when a checkout holds nothing (None there means a slot).
_NOTHING: Any = object()


def _armed_lock() -> threading.Lock:
    """A waiter's wake: a lock taken now, released by whoever grants the waiter."""
    wake = _allocate_lock()
    wake.acquire()
    return wake


class _SyncFrontEnd(FrontEnd, Generic[R]):
    """Lock, clock, callbacks and waiting: what Pool and KeyedPool share."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)  # FrontEnd's keyword arguments
        self._lock = _fork.lock()
        #: Resources of ``with`` checkouts interrupted on their way back (see Owner).
        self._orphans: list[R] = []
        _fork.track(self)

    # -- shared steps -----------------------------------------------------------------

    def _dispose(self, garbage: list[Entry[R]]) -> None:
        """Close retired resources; a close that fails is logged, never raised."""
        if self._close is None:
            return
        done = 0  # the one being closed counts: an interruption inside it leaves it
        try:
            for entry in garbage:
                done += 1
                try:
                    self._close(entry.resource)
                except Exception:
                    log.warning("closing %r failed", entry.resource, exc_info=True)
        except BaseException:  # interrupted: the rest waits in the core for the next one
            with self._lock:
                self._core.garbage += garbage[done:]
            raise

    def _acquire(self, key: Any, timeout: float | None, held: list[Any]) -> R:
        """The general acquire, from the core's first answer in ``held[0]`` (the one
        loop both thread pools run: ``key`` is None for the plain pool).  ``held``
        is what the checkout holds (see the module's docstring): the caller's
        ``except BaseException`` gives it back (in the caller's frame: an
        interruption at this call's entry is then covered too)."""
        deadline = None
        while True:
            got = held[0]
            now = self._clock()
            if self._core.garbage:
                self._settle()
            if type(got) is Entry:
                if self._passes_check(got, now):
                    return got.resource  # type: ignore[no-any-return]
            elif got is None:
                return self._create_in_slot(key, held)
            else:
                assert isinstance(got, Waiter)
                if timeout is None:
                    timeout = self._options.timeout
                if deadline is None:
                    deadline = now + timeout
                held[0] = self._wait(got, deadline, timeout, key)  # an entry, or None: a slot
                continue
            self._locked_acquire(key, held)  # the last entry failed its check

    def _give_back(self, held: list[Any], key: Any) -> None:
        """An interrupted or failed checkout gives back what ``held`` holds: an
        entry still checked out to it is returned as it is (it was not used), a
        slot passes on, a waiter leaves the queue (or passes on its grant), a
        resource created but not yet the pool's is closed."""
        got, made = held
        held[0], held[1] = _NOTHING, None  # given back once, whatever calls again
        if type(got) is Entry:
            if made is got.resource:
                made = None
            self._return_unused(got)
        elif got is None:
            self._slot_back(key)
        elif isinstance(got, Waiter):
            self._abandon(got)
        if made is not None and self._close is not None:
            try:
                self._close(made)
            except Exception:
                log.warning("closing %r failed", made, exc_info=True)

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
        # Interrupted (KeyboardInterrupt): the caller gives the waiter back, and
        # with it whatever it was granted meanwhile.  Every ORPHAN_LOOK seconds a
        # waiter looks for orphans (resources of ``with`` blocks interrupted on
        # their way back, which only a pool call can reclaim: the one it waits
        # for may be one), and for what an interrupted operation freed without
        # serving it (the core's rescue).
        end = time.monotonic() + (deadline - self._clock())  # the pool's clock may be a test's
        while True:
            remaining = end - time.monotonic()
            woke = remaining > 0 and waiter.wake.acquire(True, min(remaining, ORPHAN_LOOK))
            if woke or remaining <= ORPHAN_LOOK:
                break
            if self._orphans:
                self._reclaim_orphans()
            if not (waiter.granted or waiter.closed):
                # An operation interrupted before it served the waiters (its own
                # steps done, the grant not made) leaves what it freed unserved.
                with self._lock:
                    self._core.rescue(waiter, self._clock())
            if waiter.granted or waiter.closed:  # granted, its wake maybe never released
                woke = True
                break
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
        """In a forked child (its lock re-initialised by surge.pool._fork: the
        parent's may have been held by a thread that does not exist here), nothing
        of the parent's reused or closed - each resource goes to ``sever``."""
        self._inherited = _fork.forget(self._core, self._sever)
        self._orphans = []

    def _drop_inherited(self, resource: R) -> bool:
        """Whether ``resource`` is the parent's (in a forked child): then it is
        forgotten here, and its slot was never this process's to give back."""
        return self._inherited.pop(id(resource), None) is not None

    # -- what each front-end provides ----------------------------------------------------

    _core: Any  # PoolCore or KeyedCore

    def _locked_acquire(self, key: Any, held: list[Any]) -> None:
        """The core's acquire, under the lock, with the clock read there, its
        answer put in ``held[0]``."""
        raise NotImplementedError

    def _create_in_slot(self, key: Any, held: list[Any]) -> R:
        """Create a resource in the slot the core reserved (``held[0]`` is None):
        the resource goes to ``held[1]`` as it is made, its entry to ``held[0]``
        once the pool counts it (the caller gives either back if interrupted)."""
        raise NotImplementedError

    def _slot_back(self, key: Any) -> None:
        """A reserved slot produced nothing: it passes to the next waiter."""
        raise NotImplementedError

    def _return_unused(self, entry: Entry[R]) -> None:
        """Take back an entry checked out but never used, if it still is (no reset)."""
        raise NotImplementedError

    def _discard_if_mine(self, resource: R) -> None:
        """Discard ``resource`` if it is still checked out: what an interrupted
        return or discard does, whatever step it was at."""
        with self._lock:
            mine = id(resource) in self._core.checked_out
        if mine:
            self.discard(resource)

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
        if self._orphans:
            self._reclaim_orphans()
        with self._lock:
            return self._stats()

    def _reclaim_orphans(self) -> None:
        """Discard the orphans' resources (see Owner).  Interrupt-safe: an orphan
        leaves the list only once its discard is done (a pop() first and an
        interruption at its return would lose it, and its slot, for good);
        reclaiming one twice is harmless (the second finds it is not checked out)."""
        orphans = self._orphans
        self._orphans = []  # no call between: a finaliser's append lands in one list or the other
        done = 0
        try:
            for resource in orphans:
                self._discard_if_mine(resource)
                done += 1
        except BaseException:
            self._orphans += orphans[done:]
            raise

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._core.describe()}>"


class Owner:
    """A ``with`` checkout's claim on its resource, from ``__enter__`` until the
    pool takes it back.  An interruption at the first instruction of ``__exit__``
    (or of a call on the way to the pool) raises out of the ``with`` before any
    code of the pool runs: the claim is then still ``pending`` when the checkout
    object dies, and the pool reclaims the resource (discarded: its state is
    unknown) at its next checkout that finds nothing idle, or at ``stats()``.
    The pool clears ``pending`` as its first step of a return or a discard."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: Any = None


def orphaned(pool: Any, owner: Owner) -> None:
    """From a checkout's ``__del__``: never the lock here (a finaliser may run
    anywhere, the pool's own code included); a list append is atomic."""
    resource = owner.pending
    if resource is not None:
        owner.pending = None
        pool._orphans.append(resource)


class _Checkout(Generic[R]):
    """``with pool.connection() as r``: release on success, discard if the block raised."""

    __slots__ = ("_owner", "_pool", "_resource", "_timeout")

    def __init__(self, pool: Pool[R], timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout
        self._owner = Owner()

    def __enter__(self) -> R:
        self._owner.pending = self._resource = self._pool.acquire(self._timeout)
        return self._resource

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._pool.release(self._resource, self._owner)
        else:
            self._pool.discard(self._resource, self._owner)

    def __del__(self) -> None:
        owner = getattr(self, "_owner", None)  # None: __init__ did not finish
        if owner is not None:
            orphaned(self._pool, owner)


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
        super().__init__(**front_end_options(locals()))
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
        got: Entry[R] | Waiter[R] | None = _NOTHING
        held: list[Any] | None = None
        try:
            with self._lock:
                now = self._clock() if self._timed else 0.0
                got = core.acquire(now)
                if type(got) is Waiter:
                    self._arm(got)
            if (
                type(got) is Entry
                and now - got.idle_since < self._unchecked_below
                and not core.garbage
            ):
                return got.resource
            # The slow path, in this frame's try: an interruption at the entry of
            # the call (before its code runs) is given back here too.
            held = [got, None]
            if self._orphans:
                self._reclaim_orphans()
            return self._acquire(None, timeout, held)
        except BaseException:
            self._give_back(held or [got, None], None)  # what it holds, once
            raise

    def _locked_acquire(self, key: Any, held: list[Any]) -> None:
        with self._lock:
            held[0] = got = self._core.acquire(self._clock())
            if type(got) is Waiter:
                self._arm(got)

    def release(self, resource: R, owner: Owner | None = None) -> None:
        """Return a resource: to the oldest waiter if any, else to the idle set."""
        if owner is not None:
            owner.pending = None  # the first step: from here on this call answers for it
        if self._inherited and self._drop_inherited(resource):
            return
        back = False
        waiter = None
        try:
            now = self._clock()  # before reset: a slow reset makes it look idle longer
            if self._reset is not None and not self._returns_clean(resource, now):
                return
            with self._lock:
                waiter = self._core.release(resource, now)
                back = True
        except BaseException:
            if not back:  # interrupted: its state is unknown
                self._discard_if_mine(resource)
            elif waiter is not None:
                waiter.wake.release()
            raise
        if waiter is not None:
            waiter.wake.release()
        if self._core.garbage:
            self._settle()

    def discard(self, resource: R, owner: Owner | None = None) -> None:
        """Close a checked-out resource instead of returning it (it failed)."""
        if owner is not None:
            owner.pending = None
        if self._inherited and self._drop_inherited(resource):
            return
        core = self._core
        done = False
        waiter = None
        try:
            with self._lock:
                waiter = core.discard(resource, self._clock())
                done = True
        except BaseException:
            if not done:  # a signal handler's Exception too (a timeout's); a bad
                # argument (not ours: ValueError) finds nothing to discard
                self._discard_if_mine(resource)  # interrupted before it: once more
            elif waiter is not None:
                waiter.wake.release()
            raise  # what it retired stays in the core's garbage: the next checkout closes it
        if waiter is not None:
            waiter.wake.release()
        self._settle()

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

    def _create_in_slot(self, key: Any, held: list[Any]) -> R:
        generation = self._core.generation
        held[1] = resource = self._create()
        now = self._clock()
        with self._lock:
            expires_at = self._options.expires_at(now)
            held[0] = self._core.created(resource, now, expires_at, generation)
        return resource

    def _slot_back(self, key: Any) -> None:
        with self._lock:
            waiter = self._core.create_failed(self._clock())
        if waiter is not None:
            waiter.wake.release()

    def _return_unused(self, entry: Entry[R]) -> None:
        resource = entry.resource
        with self._lock:
            if self._core.checked_out.get(id(resource)) is not entry:
                return
            waiter = self._core.release(resource, self._clock())
        if waiter is not None:
            waiter.wake.release()
        if self._core.garbage:
            self._settle()

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
        super().__init__(**front_end_options(locals()))
        self._create = create
        self._core: KeyedCore[K, R] = KeyedCore(
            max_size, max_per_key, lifo=lifo, max_idle=max_idle, make_wake=_armed_lock
        )

    def acquire(self, key: K, timeout: float | None = None) -> R:
        """Check out a resource for ``key``, waiting up to ``timeout`` (default: the pool's)."""
        core = self._core
        got: Entry[R] | Waiter[R] | None = _NOTHING
        held: list[Any] | None = None
        try:
            with self._lock:
                now = self._clock()
                got = core.acquire(key, now)
            if (
                type(got) is Entry
                and now - got.idle_since < self._unchecked_below
                and not core.garbage
            ):
                return got.resource
            # The slow path, in this frame's try: an interruption at the entry of
            # the call (before its code runs) is given back here too.
            held = [got, None]
            if self._orphans:
                self._reclaim_orphans()
            return self._acquire(key, timeout, held)
        except BaseException:
            self._give_back(held or [got, None], key)  # what it holds, once
            raise

    def _locked_acquire(self, key: K, held: list[Any]) -> None:
        with self._lock:
            held[0] = self._core.acquire(key, self._clock())

    def acquire_nowait(self, key: K) -> R | None:
        """An idle resource of ``key`` at once, or None: never creates, waits or
        queues.  For a pool with no ``check`` callback."""
        return self._acquire_nowait(key)

    def _take(self, key: K, now: float) -> Entry[R] | None:
        return self._core.take(key, now)

    def set_max_lifetime(self, seconds: float | None) -> None:
        """Change ``max_lifetime`` for resources created from now on."""
        self._options = dataclasses.replace(self._options, max_lifetime=seconds)

    def release(self, resource: R, owner: Owner | None = None) -> None:
        if owner is not None:
            owner.pending = None  # the first step (see Pool.release)
        if self._inherited and self._drop_inherited(resource):
            return
        back = False
        try:
            now = self._clock()
            if self._reset is not None and not self._returns_clean(resource, now):
                return
            with self._lock:
                self._core.release(resource, now)
                back = True
        except BaseException:
            if not back:  # interrupted (see Pool.release)
                self._discard_if_mine(resource)
            raise
        self._settle()

    def discard(self, resource: R, owner: Owner | None = None) -> None:
        if owner is not None:
            owner.pending = None
        if self._inherited and self._drop_inherited(resource):
            return
        done = False
        try:
            with self._lock:
                self._core.discard(resource, self._clock())
                done = True
        except BaseException:
            if not done:  # a signal handler's Exception too (a timeout's); a bad
                # argument (not ours: ValueError) finds nothing to discard
                self._discard_if_mine(resource)
            raise
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

    def _create_in_slot(self, key: K, held: list[Any]) -> R:
        generation = self._core.generation
        held[1] = resource = self._create(key)
        now = self._clock()
        with self._lock:
            expires_at = self._options.expires_at(now)
            held[0] = self._core.created(key, resource, now, expires_at, generation)
        return resource

    def _slot_back(self, key: K) -> None:
        with self._lock:
            self._core.create_failed(key, self._clock())
        self._settle()

    def _return_unused(self, entry: Entry[R]) -> None:
        resource = entry.resource
        with self._lock:
            if self._core.checked_out.get(id(resource)) is not entry:
                return
            self._core.release(resource, self._clock())
        self._settle()

    def _cancel(self, waiter: Waiter[R]) -> None:
        self._core.cancel(waiter, timed_out=True)

    def _stats(self) -> dict[str, Any]:
        return self._core.stats()


class _KeyedCheckout(Generic[K, R]):
    """``with pool.connection(key) as r``, as ``_Checkout`` (its Owner too)."""

    __slots__ = ("_key", "_owner", "_pool", "_resource", "_timeout")

    def __init__(self, pool: KeyedPool[K, R], key: K, timeout: float | None) -> None:
        self._pool = pool
        self._key = key
        self._timeout = timeout
        self._owner = Owner()

    def __enter__(self) -> R:
        self._owner.pending = self._resource = self._pool.acquire(self._key, self._timeout)
        return self._resource

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._pool.release(self._resource, self._owner)
        else:
            self._pool.discard(self._resource, self._owner)

    def __del__(self) -> None:
        owner = getattr(self, "_owner", None)  # None: __init__ did not finish
        if owner is not None:
            orphaned(self._pool, owner)
