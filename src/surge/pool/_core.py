"""The pool core: pure bookkeeping of idle, checked-out and waited-for resources.

No locks, no clock reads, no I/O, no randomness: the front-ends (``Pool`` for
threads, ``AsyncPool`` for asyncio) hold the lock or the loop, read the clock
and pass ``now`` in, create and close the resources, and park the waiters.  The
core only decides: "here is an idle resource", "you may create one", or "wait
here".  That keeps every policy in one place, testable without threads or
sleeps (see tests/pool/test_core_model.py, a Hypothesis state machine).

Every operation is O(1), amortised where noted:

* Idle resources live in a deque ordered by the time they went idle (a release
  appends at the hot end with a non-decreasing ``now``), so idle expiry only
  ever looks at the cold end.  LIFO (the default) takes the hottest resource;
  FIFO takes the coldest.
* Removing something from the middle (a keyed pool evicting an idle resource of
  another key, a waiter that timed out) marks it dead instead of searching for
  it; dead items are skipped when they reach an end, and a deque whose dead
  items outnumber its live ones is rebuilt, which costs O(live) once per
  O(live) removals: amortised O(1), and memory stays bounded.
* Checked-out resources are found by ``id()`` in a dict.

This is the lesson of boto's HostConnectionPool (``list.pop(0)`` in a loop: a
drain of N connections was O(N^2)) and of httpcore's pool (a scan of the
connection and request lists per request).

Interruptions: a signal handler that raises (KeyboardInterrupt, a timeout's
exception) runs between bytecodes, and CPython runs it only at a call, at a
function's first instruction or at a loop's back edge - never at a subscript,
an attribute store, ``del x[i]``, ``+=`` or a comparison.  So each operation
makes its calls (``id()``, a lookup, a new Entry or Waiter) first and then
changes the state with those alone (``del idle[-1]``, not ``idle.pop()``;
``idle += (entry,)``, not ``idle.append(entry)``): an interruption finds the
state before the operation or after it, never half-way, and what the
operation returned is the caller's to give back (see surge.pool._sync).  Where
an operation ends by calling another (a freed slot passed to a waiter), an
interruption between them can at worst leave a waiter unwoken until its
timeout, never a resource or a slot lost.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from surge.errors import PoolClosed

R = TypeVar("R")

INF = math.inf

# Entry states.
IN_USE = 0
IDLE = 1
GONE = 2

#: Rebuild a deque once it holds more dead items than live ones plus this slack
#: (the slack bounds how often a small, busy pool rebuilds: every ~slack/2 ops).
_COMPACT_SLACK = 512


class Entry(Generic[R]):
    """One resource and the facts the pool keeps about it."""

    __slots__ = (
        "created_at",
        "expires_at",
        "generation",
        "idle_since",
        "idle_turn",
        "key",
        "resource",
        "state",
    )

    def __init__(
        self,
        resource: R,
        created_at: float,
        expires_at: float,
        key: Any = None,
        generation: int = 0,
    ) -> None:
        self.resource = resource
        self.created_at = created_at
        #: When the resource's lifetime ends (``inf`` for never); the front-end
        #: computes it, jitter included.
        self.expires_at = expires_at
        #: When the resource last went idle (equal to ``created_at`` until then).
        self.idle_since = created_at
        self.state = IN_USE
        self.key = key
        #: Which of its idle periods a keyed pool's idle log last recorded.
        self.idle_turn = 0
        #: The pool's generation when its slot was reserved (see ``invalidate``).
        self.generation = generation

    def __repr__(self) -> str:
        state = ("in_use", "idle", "gone")[self.state]
        return f"<Entry {self.resource!r} {state}>"


class Waiter(Generic[R]):
    """A caller waiting for a resource, in arrival order.

    The core grants a waiter either an ``entry`` (a resource handed over by a
    release) or ``may_create`` (a slot freed by a discard).  ``wake`` is the
    front-end's (a lock to release, a future to resolve), made by the core's
    ``make_wake`` in the same step that queues the waiter: whoever grants a
    waiter may wake it at once, however soon after it was queued.
    """

    __slots__ = (
        "cancelled",
        "closed",
        "entry",
        "in_global_queue",
        "key",
        "may_create",
        "queued_at",
        "wake",
    )

    def __init__(self, queued_at: float, key: Any = None, wake: Any = None) -> None:
        self.queued_at = queued_at
        self.key = key
        self.entry: Entry[R] | None = None
        self.may_create = False
        self.cancelled = False
        self.closed = False
        #: True while it waits in a keyed pool's global queue (for room, not a key).
        self.in_global_queue = False
        self.wake: Any = wake

    @property
    def granted(self) -> bool:
        return self.entry is not None or self.may_create


class PoolCore(Generic[R]):
    """Bookkeeping for one pool (or one key of a keyed pool).

    ``acquire`` returns an :class:`Entry` (take this idle resource), ``None``
    (a slot is reserved for you: create a resource and report it with
    ``created`` or ``create_failed``) or a :class:`Waiter` (park until it is
    granted).  Operations that end a resource's life append its entry to
    ``garbage``; the front-end closes those outside its lock.
    """

    #: The keyed core lists the waiters an operation granted here; this one
    #: returns the one it grants instead, so its list stays empty (the
    #: front-ends' shared steps look at both).
    woken: tuple[()] = ()

    def __init__(
        self,
        max_size: int,
        max_overflow: int = 0,
        *,
        lifo: bool = True,
        max_idle: float | None = None,
        lifetimes: bool = False,
        key: Any = None,
        make_wake: Callable[[], Any] | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, not {max_size}")
        if max_overflow < 0:
            raise ValueError(f"max_overflow must be 0 or more, not {max_overflow}")
        if max_idle is not None and max_idle <= 0:
            raise ValueError(f"max_idle must be positive, not {max_idle}")
        self.max_size = max_size
        self.max_overflow = max_overflow
        self.limit = max_size + max_overflow
        self.lifo = lifo
        self.max_idle = INF if max_idle is None else max_idle
        self.key = key
        #: Makes each waiter's wake object as it is queued (None: no wake object).
        self.make_wake = make_wake
        self.closed = False
        #: How many resources may be kept idle: ``max_size``, or -1 once closed, so
        #: that one comparison on release covers both overflow and closing.
        self.keep = max_size
        #: True when checkout needs no clock: LIFO, no idle expiry, and (the
        #: front-end says) no resource carries a lifetime.
        self.fast = lifo and max_idle is None and not lifetimes

        self.idle: deque[Entry[R]] = deque()
        self.n_idle = 0  # live entries in ``idle``
        self.checked_out: dict[int, Entry[R]] = {}
        #: Resources that exist or are being created: idle + checked out + reserved.
        self.open = 0
        self.waiters: deque[Waiter[R]] = deque()
        self.n_waiting = 0  # live waiters in ``waiters``
        self.garbage: list[Entry[R]] = []
        #: Moved on by ``invalidate``: resources of an older one are never reused.
        self.generation = 0

        # Counters for stats().
        self.n_created = 0
        self.n_reused = 0
        self.n_discarded = 0
        self.n_expired = 0
        self.n_timeouts = 0
        self.n_waits = 0
        self.wait_total = 0.0
        self.wait_max = 0.0

    # -- the operations -------------------------------------------------------------

    def acquire(self, now: float) -> Entry[R] | Waiter[R] | None:
        """Take an idle resource, reserve a slot to create one, or queue a waiter."""
        # The hot path, inlined: the method calls it saves are a third of a
        # checkout's cost.  (A closed pool has nothing idle.)
        if self.n_idle and self.fast:
            hot = self.idle[-1]
            if hot.state == IDLE:
                key = id(hot.resource)
                del self.idle[-1]  # from here on, no call: see "Interruptions" above
                self.n_idle -= 1
                hot.state = IN_USE
                self.checked_out[key] = hot
                self.n_reused += 1
                return hot
            # dead: the general path skips it
        if self.closed:
            raise PoolClosed("the pool is closed")
        entry = self.take_idle(now)
        if entry is not None:
            return entry
        if self.open < self.limit:
            self.open += 1
            return None
        return self.enqueue(now)

    def take(self, now: float) -> Entry[R] | None:
        """An idle resource, or None: never reserves a slot or queues."""
        if self.closed:
            raise PoolClosed("the pool is closed")
        return self.take_idle(now)

    def created(
        self, resource: R, now: float, expires_at: float = INF, generation: int | None = None
    ) -> Entry[R]:
        """A reserved slot produced ``resource``; it is checked out to its creator.

        ``generation``: the pool's when the slot was reserved (before the create
        began).  If ``invalidate`` ran while it was being made, its creator uses it
        and it is retired when it comes back."""
        if generation is None:
            generation = self.generation
        elif generation != self.generation:
            expires_at = -INF
        entry: Entry[R] = Entry(resource, now, expires_at, self.key, generation)
        key = id(resource)
        self.checked_out[key] = entry
        self.n_created += 1
        return entry

    def create_failed(self, now: float) -> Waiter[R] | None:
        """A reserved slot produced nothing; the slot passes to the oldest waiter."""
        self.open -= 1
        return self.grant_slot(now)

    def release(self, resource: R, now: float) -> Waiter[R] | None:
        """Return a checked-out resource: to the oldest waiter, to the idle deque, or to
        ``garbage`` (pool closed, lifetime over, or an overflow resource)."""
        key = id(resource)
        checked_out = self.checked_out
        entry = checked_out.get(key)
        if entry is None:
            raise ValueError(f"{resource!r} is not checked out from this pool")
        if entry.expires_at <= now:
            del checked_out[key]
            self.n_expired += 1
            entry.state = GONE  # retire(), inlined: no call until the state adds up
            self.open -= 1
            self.garbage += (entry,)
            return self.grant_slot(now)
        if self.n_waiting:
            return self.hand_over(entry, now)  # it stays checked out, to the waiter
        del checked_out[key]
        if self.open > self.keep:  # an overflow resource, or the pool is closed
            entry.state = GONE
            self.open -= 1
            self.garbage += (entry,)
            return None
        # put_idle(), inlined for the hot path.
        entry.state = IDLE
        entry.idle_since = now
        self.n_idle += 1
        self.idle += (entry,)
        if self.max_idle != INF:
            self.expire(now)
        return None

    def discard(self, resource: R, now: float) -> Waiter[R] | None:
        """Drop a checked-out resource (it failed); its slot passes to the oldest waiter."""
        key = id(resource)
        entry = self.checked_out.get(key)
        if entry is None:
            raise ValueError(f"{resource!r} is not checked out from this pool")
        del self.checked_out[key]
        self.n_discarded += 1
        entry.state = GONE
        self.open -= 1
        self.garbage += (entry,)
        return self.grant_slot(now)

    def cancel(self, waiter: Waiter[R], *, timed_out: bool) -> None:
        """Withdraw a waiter that was not granted (it timed out or was cancelled).

        A granted waiter cannot be withdrawn: the front-end must use or give back
        what it was granted.
        """
        if waiter.granted or waiter.cancelled or waiter.closed:
            raise RuntimeError("only a waiting waiter can be cancelled")
        waiter.cancelled = True
        self.n_waiting -= 1
        if timed_out:
            self.n_timeouts += 1
        if self.waiters and self.waiters[-1] is waiter:
            del self.waiters[-1]
        elif len(self.waiters) > 2 * self.n_waiting + _COMPACT_SLACK:
            self.waiters = deque(w for w in self.waiters if not w.cancelled)

    def abandon(self, waiter: Waiter[R], now: float) -> Waiter[R] | None:
        """A waiter gives up whatever state it is in (interrupted by a signal,
        cancelled as it was granted): a resource it was handed is released (to the
        next waiter or the idle set), a creation slot it was granted passes on, and
        a waiter still waiting leaves the queue.  Returns the waiter this grants, as
        ``release`` does: nothing a waiter was given is lost with it."""
        if waiter.entry is not None:
            return self.release(waiter.entry.resource, now)
        if waiter.may_create:
            return self.create_failed(now)
        if not waiter.closed and not waiter.cancelled:
            self.cancel(waiter, timed_out=False)
        return None

    def rescue(self, waiter: Waiter[R], now: float) -> bool:
        """What a waiter still waiting is owed, if an interrupted operation left it
        unserved (one that ends by passing a freed slot on was cut short between
        the two, see "Interruptions"): an idle resource or a slot, when one is free
        now.  True if it was granted; it is off the queue then (marked cancelled
        there, as :meth:`cancel` does).  Where every operation ran to its end this
        finds nothing: a waiter waits only while nothing is free."""
        if waiter.granted or waiter.cancelled or waiter.closed:
            return False
        if self.closed:  # a close cut short before it woke this waiter
            waiter.closed = True
            return True
        entry = self.take_idle(now)
        if entry is not None:
            waiter.entry = entry  # from here on, no call
            waiter.cancelled = True
            self.n_waiting -= 1
            return True
        if self.open >= self.limit:
            return False
        self.open += 1
        waiter.may_create = True
        waiter.cancelled = True
        self.n_waiting -= 1
        return True

    def expire(self, now: float) -> None:
        """Retire resources idle for ``max_idle`` or more, from the cold end."""
        idle = self.idle
        while idle:
            entry = idle[0]
            if entry.state == GONE:
                del idle[0]
            elif entry.idle_since + self.max_idle <= now:
                del idle[0]
                self.n_idle -= 1
                self.n_expired += 1
                entry.state = GONE
                self.open -= 1
                self.garbage += (entry,)
            else:
                break

    def clear(self) -> None:
        """Retire every idle resource now (their server went away, say)."""
        for entry in self.idle:
            if entry.state == IDLE:
                self.retire(entry)
        self.idle.clear()
        self.n_idle = 0

    def invalidate(self, generation: int | None = None) -> bool:
        """No resource that exists now is reused: the idle ones are retired now, the
        checked-out ones when they come back (their lifetime is made over).

        ``generation``: only if the pool is still at that generation, so that
        eight users who met the same failure move the pool on once, not eight
        times (dropping seven rounds of fresh resources).  True if it moved on."""
        if generation is not None and generation != self.generation:
            return False
        self.generation += 1
        end_lifetimes(self.checked_out)
        self.clear()
        return True

    def close(self) -> list[Waiter[R]]:
        """Refuse new acquires, retire every idle resource, and return the waiters,
        each marked ``closed``, for the front-end to wake."""
        self.closed = True
        self.keep = -1
        self.clear()
        woken = [w for w in self.waiters if not w.cancelled]
        for w in woken:
            w.closed = True
        self.waiters.clear()
        self.n_waiting = 0
        return woken

    def forget_all(self) -> list[R]:
        """Start over with nothing, as a process forked from the one that made the
        resources must: return every resource the pool knows (idle, checked out,
        waiting to be closed) for the front-end to sever, and forget them - they
        are never handed out, returned, reset or closed here again.  Waiters
        (threads or tasks of the parent) are dropped; the generation moves on."""
        resources = [e.resource for e in self.idle if e.state == IDLE]
        resources += [e.resource for e in self.checked_out.values()]
        resources += [e.resource for e in self.garbage]
        self.idle = deque()
        self.n_idle = 0
        self.checked_out = {}
        self.garbage = []
        self.waiters = deque()
        self.n_waiting = 0
        self.open = 0
        self.generation += 1
        return resources

    def take_garbage(self) -> list[Entry[R]]:
        garbage = self.garbage
        self.garbage = []
        return garbage

    def lifetimes_on(self) -> None:
        """Resources may carry a lifetime from now on: checkout reads the clock."""
        self.fast = False

    def generation_of(self, resource: R) -> int | None:
        """The generation a checked-out resource was made in; None if it is not
        checked out from this pool."""
        entry = self.checked_out.get(id(resource))
        return None if entry is None else entry.generation

    def retiring(self, resource: R, now: float) -> bool:
        """Whether a checked-out resource is retired when it comes back (its
        lifetime is over, or ``invalidate`` ran): the front-end skips its reset."""
        entry = self.checked_out.get(id(resource))
        return entry is not None and entry.expires_at <= now

    def describe(self) -> str:
        """The gauges, for a front-end's repr."""
        return (
            f"max_size={self.max_size} open={self.open} in_use={len(self.checked_out)} "
            f"idle={self.n_idle} waiting={self.n_waiting}"
        )

    def stats(self) -> dict[str, Any]:
        return {
            "max_size": self.max_size,
            "max_overflow": self.max_overflow,
            "open": self.open,
            "in_use": len(self.checked_out),
            "idle": self.n_idle,
            "waiting": self.n_waiting,
            "generation": self.generation,
            "created": self.n_created,
            "reused": self.n_reused,
            "discarded": self.n_discarded,
            "expired": self.n_expired,
            "timeouts": self.n_timeouts,
            "waits": self.n_waits,
            "wait_total_s": self.wait_total,
            "wait_max_s": self.wait_max,
        }

    # -- primitives, also used by the keyed core --------------------------------------

    def take_idle(self, now: float) -> Entry[R] | None:
        """Pop the live idle entry at the hot end (LIFO) or cold end (FIFO), retiring
        any found expired on the way."""
        if self.max_idle != INF:
            self.expire(now)
        idle = self.idle
        end = -1 if self.lifo else 0
        while self.n_idle:
            entry = idle[end]
            if entry.state == GONE:
                del idle[end]
                continue
            if entry.expires_at <= now:
                del idle[end]
                self.n_idle -= 1
                self.n_expired += 1
                entry.state = GONE
                self.open -= 1
                self.garbage += (entry,)
                continue
            key = id(entry.resource)
            del idle[end]
            self.n_idle -= 1
            entry.state = IN_USE
            self.checked_out[key] = entry
            self.n_reused += 1
            return entry
        if idle:
            idle.clear()  # only dead entries remain
        return None

    def put_idle(self, entry: Entry[R], now: float) -> None:
        entry.state = IDLE
        entry.idle_since = now
        self.n_idle += 1
        self.idle += (entry,)
        if self.max_idle != INF:
            self.expire(now)

    def enqueue(self, now: float) -> Waiter[R]:
        make_wake = self.make_wake
        waiter: Waiter[R] = Waiter(now, self.key, None if make_wake is None else make_wake())
        self.n_waiting += 1
        self.n_waits += 1
        self.waiters += (waiter,)
        return waiter

    def pop_waiter(self, now: float) -> Waiter[R] | None:
        """The oldest live waiter, removed from the queue, with its wait recorded
        (no call once it is removed: the caller's next steps are all that remain)."""
        waiters = self.waiters
        while waiters:
            waiter = waiters[0]
            del waiters[0]
            if waiter.cancelled:
                continue
            self.n_waiting -= 1
            waited = now - waiter.queued_at
            self.wait_total += waited
            if waited > self.wait_max:
                self.wait_max = waited
            return waiter
        return None

    def hand_over(self, entry: Entry[R], now: float) -> Waiter[R] | None:
        """Give a checked-out entry straight to the oldest waiter."""
        key = id(entry.resource)
        waiter = self.pop_waiter(now)  # callers check n_waiting first: a live one is there
        assert waiter is not None
        waiter.entry = entry  # from here on, no call: see "Interruptions" above
        entry.idle_since = now  # it was in use until this instant: as hot as can be
        self.checked_out[key] = entry
        self.n_reused += 1
        return waiter

    def grant_slot(self, now: float) -> Waiter[R] | None:
        """A slot is free: if anyone waits, the oldest may create a resource in it."""
        if not self.n_waiting or self.closed or self.open >= self.limit:
            return None
        waiter = self.pop_waiter(now)
        assert waiter is not None
        waiter.may_create = True  # from here on, no call: see "Interruptions" above
        self.open += 1
        return waiter

    def retire(self, entry: Entry[R]) -> None:
        entry.state = GONE
        self.open -= 1
        self.garbage += (entry,)


class AsKeyed(Generic[R]):
    """A plain core answering the keyed core's calls, the key ignored: the
    front-ends' shared steps (everything but the hot paths, which call a core
    directly) are written once, against the keyed core's signatures."""

    __slots__ = ("core",)

    def __init__(self, core: PoolCore[R]) -> None:
        self.core = core

    def acquire(self, key: Any, now: float) -> Entry[R] | Waiter[R] | None:
        return self.core.acquire(now)

    def take(self, key: Any, now: float) -> Entry[R] | None:
        return self.core.take(now)

    def created(
        self, key: Any, resource: R, now: float, expires_at: float, generation: int
    ) -> Entry[R]:
        return self.core.created(resource, now, expires_at, generation)

    def create_failed(self, key: Any, now: float) -> Waiter[R] | None:
        return self.core.create_failed(now)

    def clear(self, now: float) -> None:
        self.core.clear()

    def invalidate(self, now: float, generation: int | None) -> bool:
        return self.core.invalidate(generation)


def end_lifetimes(checked_out: dict[int, Entry[Any]]) -> None:
    """Make every checked-out resource's lifetime over: each is retired, not kept,
    when it comes back (release already compares ``expires_at`` on every return,
    so this costs the hot path nothing)."""
    for entry in checked_out.values():
        entry.expires_at = -INF
