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

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, Unpack

from surge.errors import PoolClosed
from surge.pool import _fork
from surge.pool._core import Entry, PoolCore, Waiter
from surge.pool._keyed_core import KeyedCore
from surge.pool._options import FrontEnd, PoolOptions, callback_raised, close_failed, keyless

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
    """Everything of Pool and KeyedPool but their constructors and hot paths:
    the lock, the clock, the callbacks, waiting, returns and interruptions,
    once for both (``key`` is None for the plain pool; ``_ops`` takes it)."""

    def __init__(self, create: Callable[[Any], R], options: dict[str, Any]) -> None:
        self._lock = _fork.lock()
        #: Resources of ``with`` checkouts interrupted on their way back (see Owner).
        self._orphans: list[R] = []
        super().__init__(create, options)

    # -- checkout -----------------------------------------------------------------------

    def _acquire(self, key: Any, timeout: float | None, held: list[Any]) -> R:
        """The general acquire, from the core's first answer in ``held[0]`` (the one
        loop both thread pools run).  ``held`` is what the checkout holds (see the
        module's docstring): the caller's ``except BaseException`` gives it back
        (in the caller's frame: an interruption at this call's entry is then
        covered too)."""
        if self._orphans:
            self._reclaim_orphans()
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
            with self._lock:  # the last entry failed its check
                held[0] = self._ops.acquire(key, self._clock())

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
                close_failed(made)

    def _acquire_nowait(self, key: Any) -> R | None:
        if self._check is not None:
            raise RuntimeError("acquire_nowait() cannot run check: use acquire()")
        with self._lock:
            entry = self._ops.take(key, self._clock())
        if self._core.garbage:
            self._settle()
        return None if entry is None else entry.resource

    def _arm(self, waiter: Waiter[R]) -> None:
        """Time a waiter the core just queued (its wake lock the core made): the hot
        path reads no clock, so its wait is timed from here, under the same lock."""
        if not self._timed:
            waiter.queued_at = self._clock()

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
                    self._core.cancel(waiter, timed_out=True)
                    raise self._timed_out(timeout, key)
        if waiter.closed:
            raise PoolClosed("the pool was closed while waiting")
        return waiter.entry

    def _passes_check(self, entry: Entry[R], now: float) -> bool:
        """Run ``check`` on a reused resource (if it was idle long enough to doubt it)."""
        if self._check is None or not self._options.wants_check(now, entry.idle_since):
            return True
        return self._vetted(self._check, "check", entry.resource, now - entry.idle_since)

    def _vetted(self, callback: Callable[..., object], what: str, resource: R, *args: Any) -> bool:
        """Run ``check`` or ``reset``: a resource for which it returns False or
        raises is discarded, and so is one it was interrupted on (its state is
        unknown: the slot must not leak)."""
        ok = False
        try:
            ok = callback(resource, *args) is not False
        except Exception:
            callback_raised(what, resource)
        finally:
            if not ok:
                self.discard(resource)
        return ok

    def _create_in_slot(self, key: Any, held: list[Any]) -> R:
        """Create a resource in the slot the core reserved (``held[0]`` is None):
        the resource goes to ``held[1]`` as it is made, its entry to ``held[0]``
        once the pool counts it (the caller gives either back if interrupted)."""
        generation = self._core.generation
        resource: R = self._make(key)
        held[1] = resource
        now = self._clock()
        with self._lock:
            expires_at = self._options.expires_at(now)
            held[0] = self._ops.created(key, resource, now, expires_at, generation)
        return resource

    def _slot_back(self, key: Any) -> None:
        """A reserved slot produced nothing: it passes to the next waiter."""
        with self._lock:
            waiter = self._ops.create_failed(key, self._clock())
        if waiter is not None:
            waiter.wake.release()
        self._settle()

    def _return_unused(self, entry: Entry[R]) -> None:
        """Take back an entry checked out but never used, if it still is (no reset)."""
        resource = entry.resource
        with self._lock:
            if self._core.checked_out.get(id(resource)) is not entry:
                return
            waiter = self._core.release(resource, self._clock())
        if waiter is not None:
            waiter.wake.release()
        self._settle()

    def _abandon(self, waiter: Waiter[R]) -> None:
        """A waiter gives up without using its grant (it was interrupted): pass on
        the resource or the creation slot it may have been granted, or leave the
        queue, so that no resource or slot is lost."""
        with self._lock:
            passed_to = self._core.abandon(waiter, self._clock())
        if passed_to is not None:  # the plain core names whom it granted
            passed_to.wake.release()
        self._settle()  # the keyed core lists them

    # -- return -------------------------------------------------------------------------

    def release(self, resource: R, owner: Owner | None = None) -> None:
        """Return a resource: to the oldest waiter if any, else to the idle set."""
        if owner is not None:
            owner.pending = None  # the first step: from here on this call answers for it
        if self._inherited and self._drop_inherited(resource):
            return
        core = self._core
        back = False
        waiter = None
        try:
            now = self._clock()  # before reset: a slow reset makes it look idle longer
            if (
                self._reset is not None
                and not core.retiring(resource, now)  # to be retired: no reset (it may hang)
                and not self._vetted(self._reset, "reset", resource)
            ):
                return
            with self._lock:
                waiter = core.release(resource, now)  # the plain core's grant (the keyed: woken)
                back = True
        except BaseException:
            if not back:  # interrupted: its state is unknown
                self._discard_if_mine(resource)
            elif waiter is not None:
                waiter.wake.release()
            raise  # what it retired or granted stays in the core: the next call settles it
        if waiter is not None:
            waiter.wake.release()
        if core.garbage or core.woken:
            self._settle()

    def discard(self, resource: R, owner: Owner | None = None) -> None:
        """Close a checked-out resource instead of returning it (it failed)."""
        if owner is not None:
            owner.pending = None
        if self._inherited and self._drop_inherited(resource):
            return
        done = False
        waiter = None
        try:
            with self._lock:
                waiter = self._core.discard(resource, self._clock())
                done = True
        except BaseException:
            if not done:  # a signal handler's Exception too (a timeout's); a bad
                # argument (not ours: ValueError) finds nothing to discard
                self._discard_if_mine(resource)  # interrupted before it: once more
            elif waiter is not None:
                waiter.wake.release()
            raise
        if waiter is not None:
            waiter.wake.release()
        self._settle()

    def release_nowait(self, resource: R) -> None:
        """``release`` for a pool with no ``reset`` callback (as the async pools')."""
        if self._reset is not None:
            raise RuntimeError("release_nowait() cannot run reset: use release()")
        self.release(resource)

    def _discard_if_mine(self, resource: R) -> None:
        """Discard ``resource`` if it is still checked out: what an interrupted
        return or discard does, whatever step it was at."""
        with self._lock:
            mine = id(resource) in self._core.checked_out
        if mine:
            self.discard(resource)

    def _settle(self) -> None:
        """Wake whoever the last operations granted (the keyed core lists them),
        and close what they retired."""
        core = self._core
        with self._lock:
            woken = core.take_woken() if core.woken else ()
            garbage = core.take_garbage() if core.garbage else ()
        for waiter in woken:
            waiter.wake.release()
        if garbage:
            self._dispose(garbage)

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
                    close_failed(entry.resource)
        except BaseException:  # interrupted: the rest waits in the core for the next one
            with self._lock:
                self._core.garbage += garbage[done:]
            raise

    # -- the whole pool -----------------------------------------------------------------

    def expire(self) -> None:
        """Close resources idle longer than ``max_idle`` now, rather than at the next
        acquire or release (a pool left alone keeps them until then)."""
        with self._lock:
            self._core.expire(self._clock())
        self._settle()

    def clear(self) -> None:
        """Close every idle resource now; resources in use are unaffected."""
        with self._lock:
            self._ops.clear(self._clock())
        self._settle()

    def invalidate(self, generation: int | None = None) -> bool:
        """Reuse nothing that exists now (its server restarted, say): idle resources
        are closed now, those in use when they come back.  With ``generation``
        (from ``generation_of``), only if the pool has not moved on since, so that
        many users who met one failure move it on once.  True if it moved on."""
        with self._lock:
            moved: bool = self._ops.invalidate(self._clock(), generation)
        self._settle()
        return moved

    def close(self) -> None:
        """Close idle resources, refuse new acquires, and fail current waiters with
        PoolClosed; resources in use are closed when they come back."""
        with self._lock:
            woken = self._core.close()
        for waiter in woken:
            waiter.wake.release()
        self._settle()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """Counters and gauges; see the README for the fields."""
        if self._orphans:
            self._reclaim_orphans()
        with self._lock:
            return self._core.stats()  # type: ignore[no-any-return]

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

    def _forked(self) -> None:
        """In a forked child (its lock re-initialised by surge.pool._fork: the
        parent's may have been held by a thread that does not exist here), nothing
        of the parent's reused or closed - each resource goes to ``sever``."""
        super()._forked()
        self._orphans = []


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
    """``with pool.connection() as r``: release on success, discard if the block
    raised.  (``_KeyedCheckout`` differs in its acquire only.)"""

    __slots__ = ("_key", "_owner", "_pool", "_resource", "_timeout")
    _resource: R

    def __init__(self, pool: Any, timeout: float | None, key: Any = None) -> None:
        self._pool = pool
        self._key = key
        self._timeout = timeout
        self._owner = Owner()

    def __enter__(self) -> R:
        self._owner.pending = self._resource = self._pool.acquire(self._timeout)
        return self._resource

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self._pool.release(self._resource, self._owner)
        else:
            self._pool.discard(self._resource, self._owner)

    def __del__(self) -> None:
        owner = getattr(self, "_owner", None)  # None: __init__ did not finish
        if owner is not None:
            orphaned(self._pool, owner)


class _KeyedCheckout(_Checkout[R]):
    """``with pool.connection(key) as r``."""

    __slots__ = ()

    def __enter__(self) -> R:
        self._owner.pending = self._resource = self._pool.acquire(self._key, self._timeout)
        return self._resource


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
    seconds (30), in arrival order, then raises :class:`PoolTimeout`.  Idle
    resources are closed after ``max_idle`` seconds; every resource after
    ``max_lifetime`` seconds (shortened by up to ``lifetime_jitter``, 0.1, at
    random).  ``lifo=True`` (the default) reuses the most recently returned
    resource (hot caches, and cold ones expire); ``lifo=False`` rotates through
    all of them.  ``sever(r)`` gets each resource a forked child inherited;
    ``clock`` is ``time.monotonic``.  The options, their types and defaults:
    :class:`surge.pool._options.PoolOptions`, the same for every front-end.
    """

    def __init__(
        self,
        create: Callable[[], R],
        *,
        max_size: int,
        max_overflow: int = 0,
        **options: Unpack[PoolOptions[R]],
    ) -> None:
        super().__init__(keyless(create), dict(options))
        self._core: PoolCore[R] = self._plain_core(max_size, max_overflow, _armed_lock)

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
            return self._acquire(None, timeout, held)
        except BaseException:
            self._give_back(held or [got, None], None)  # what it holds, once
            raise

    def acquire_nowait(self) -> R | None:
        """An idle resource at once, or None: never creates, waits or queues (as
        AsyncPool's).  For a pool with no ``check`` callback."""
        return self._acquire_nowait(None)

    def connection(self, timeout: float | None = None) -> _Checkout[R]:
        """``with pool.connection() as r:`` - returned after the block, discarded if it raised."""
        return _Checkout(self, timeout)

    def __enter__(self) -> Pool[R]:
        return self


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
        **options: Unpack[PoolOptions[R]],
    ) -> None:
        super().__init__(create, dict(options))
        self._core: KeyedCore[K, R] = self._keyed_core(max_size, max_per_key, _armed_lock)

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
            held = [got, None]  # the slow path, as Pool.acquire's
            return self._acquire(key, timeout, held)
        except BaseException:
            self._give_back(held or [got, None], key)
            raise

    def acquire_nowait(self, key: K) -> R | None:
        """An idle resource of ``key`` at once, or None: never creates, waits or
        queues.  For a pool with no ``check`` callback."""
        return self._acquire_nowait(key)

    def connection(self, key: K, timeout: float | None = None) -> _Checkout[R]:
        """``with pool.connection(key) as r:``, as :meth:`Pool.connection`."""
        return _KeyedCheckout(self, timeout, key)

    def __enter__(self) -> KeyedPool[K, R]:
        return self
