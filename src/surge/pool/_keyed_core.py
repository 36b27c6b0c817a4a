"""The keyed pool core: one :class:`PoolCore` per key under a global limit.

An HTTP client keeps connections per (scheme, host, port) but must bound the
total, or 10,000 hosts at 1,000 in flight would pile up 10,000 idle sockets.
When the global limit is reached and the requested key has no idle resource,
the globally coldest idle resource (of any key) is evicted to make room; only
when nothing is idle anywhere does the caller wait.

All O(1) (amortised), like the single core:

* A global log of (entry, turn, since) records, appended when an entry goes
  idle, finds the coldest idle resource across keys.  ``turn`` counts the
  entry's idle periods, so a record of an entry that was taken again since is
  stale and skipped when it reaches the front; the log is rebuilt once stale
  records outnumber live ones.  ``since`` (when it went idle) lets a checkout
  see at a glance whether anything can have expired.
* The per-key cores share one ``checked_out`` dict and one ``garbage`` list, so
  a release needs no search for the key, and the front-end drains one list.
* A key's core is dropped as soon as it holds nothing, so a million distinct
  hosts do not leave a million empty cores behind.

Waiters come in two queues: a waiter whose key is at ``max_per_key`` waits on
that key's core (only that key's releases can serve it); a waiter blocked by
the global limit waits in the global queue, served in arrival order by any slot
freed anywhere.  Operations that wake waiters append them to ``woken``.

Interruptions follow the single core's rule (surge.pool._core): each operation
makes its calls first, and from the step that gives a resource away (to a
waiter, to the idle set, to the garbage) to its return it calls nothing, so the
front-end's "did it happen?" after an interruption has one answer.  The global
counts (``open``, ``n_idle``) change in the same call-free step as the key's,
never afterwards from a difference: the key cores' own helpers that call as
they go (take_idle, release, discard, create_failed, remove_idle) are not used
here.  A step that only serves waiters may be cut short: the waiters left
unserved take what is free themselves (:meth:`rescue`, which the front-ends run
while they wait).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from surge.errors import PoolClosed
from surge.pool._core import (
    _COMPACT_SLACK,
    GONE,
    IDLE,
    IN_USE,
    INF,
    Entry,
    PoolCore,
    Waiter,
    end_lifetimes,
)

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

_COUNTERS = ("created", "reused", "discarded", "expired", "timeouts", "waits", "wait_total_s")


class KeyedCore(Generic[K, R]):
    def __init__(
        self,
        max_size: int,
        max_per_key: int,
        *,
        lifo: bool = True,
        max_idle: float | None = None,
        make_wake: Callable[[], Any] | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, not {max_size}")
        if max_per_key < 1:
            raise ValueError(f"max_per_key must be at least 1, not {max_per_key}")
        if max_idle is not None and max_idle <= 0:
            raise ValueError(f"max_idle must be positive, not {max_idle}")
        self.max_size = max_size
        self.max_per_key = min(max_per_key, max_size)
        self.lifo = lifo
        self.max_idle = INF if max_idle is None else max_idle
        self.closed = False
        #: As PoolCore's, for every key's waiters and the global ones.
        self.make_wake = make_wake

        self.cores: dict[K, PoolCore[R]] = {}
        self.open = 0  # the sum of the cores' ``open``
        self.n_idle = 0  # the sum of the cores' ``n_idle``
        self.idle_log: deque[tuple[Entry[R], int, float]] = deque()
        self.checked_out: dict[int, Entry[R]] = {}
        self.garbage: list[Entry[R]] = []
        self.woken: list[Waiter[R]] = []
        #: As PoolCore's; every key's core follows it.
        self.generation = 0
        self.global_waiters: deque[Waiter[R]] = deque()
        self.n_global_waiting = 0

        self.n_evicted = 0
        self.n_global_waits = 0
        self.n_global_timeouts = 0
        self.global_wait_total = 0.0
        self.global_wait_max = 0.0
        #: Counters of cores dropped when their key emptied.
        self.dropped: dict[str, float] = dict.fromkeys(_COUNTERS, 0.0)
        self.dropped_wait_max = 0.0

    # -- the operations -------------------------------------------------------------

    def acquire(self, key: K, now: float) -> Entry[R] | Waiter[R] | None:
        """As :meth:`PoolCore.acquire`, for ``key``."""
        if self.closed:
            raise PoolClosed("the pool is closed")
        log = self.idle_log
        if log and log[0][2] + self.max_idle <= now:
            self.expire(now)
        core = self.core(key)
        entry = self._take_idle(core, now)
        if entry is not None:
            return entry
        if core.open >= core.limit:
            return core.enqueue(now)
        if self.open < self.max_size or self.evict_coldest():
            core.open += 1
            self.open += 1
            return None
        self._drop_if_empty(core)
        make_wake = self.make_wake
        waiter: Waiter[R] = Waiter(now, key, None if make_wake is None else make_wake())
        waiter.in_global_queue = True
        self.global_waiters += (waiter,)  # not append(): no call until it is counted
        self.n_global_waiting += 1
        self.n_global_waits += 1
        return waiter

    def take(self, key: K, now: float) -> Entry[R] | None:
        """An idle resource of ``key``, or None: never reserves a slot or queues."""
        if self.closed:
            raise PoolClosed("the pool is closed")
        log = self.idle_log
        if log and log[0][2] + self.max_idle <= now:
            self.expire(now)
            log = self.idle_log
        core = self.cores.get(key)
        if core is None or not core.n_idle:
            return None
        if self.lifo:
            # The hot path, inlined (PoolCore.take_idle): the newest idle entry is
            # live and within its lifetime, so nothing retires and no count but
            # the idle ones changes.
            entry = core.idle[-1]  # n_idle > 0: the deque is not empty
            if entry.state == IDLE and entry.expires_at > now:
                del core.idle[-1]  # not pop(): from here on, no call
                core.n_idle -= 1
                self.n_idle -= 1
                entry.state = IN_USE
                self.checked_out[id(entry.resource)] = entry
                core.n_reused += 1
                if log and log[-1][0] is entry:
                    # Its idle record is the newest (the usual case when one key
                    # is reused): drop it now, not in a later compaction.
                    del log[-1]  # not pop(): no call once it is handed out
                return entry
        taken = self._take_idle(core, now)
        if core.open == 0:
            self._drop_if_empty(core)
        return taken

    def created(
        self,
        key: K,
        resource: R,
        now: float,
        expires_at: float = INF,
        generation: int | None = None,
    ) -> Entry[R]:
        return self.core(key).created(resource, now, expires_at, generation)

    def create_failed(self, key: K, now: float) -> None:
        core = self.core(key)
        core.open -= 1
        self.open -= 1
        self._slot_freed(core, now)

    def release(self, resource: R, now: float) -> None:
        # No call from the step that gives the resource away to the return (see
        # the module's docstring): an interruption leaves it checked out (to this
        # caller) or given away, whole, never handed on while the caller thinks
        # it still holds it.
        key = id(resource)
        checked_out = self.checked_out
        try:
            entry = checked_out[key]
        except KeyError:
            raise ValueError(f"{resource!r} is not checked out from this pool") from None
        core = self.cores[entry.key]
        if entry.expires_at <= now or self.closed:
            del checked_out[key]  # retired: from here on, no call until the counts add up
            if entry.expires_at <= now:
                core.n_expired += 1
            entry.state = GONE
            core.open -= 1
            self.open -= 1
            self.garbage += (entry,)
            self._slot_freed(core, now)  # the resource is gone: only waiters are left to serve
            return
        if core.n_waiting:
            waiter = core.hand_over(entry, now)  # it stays checked out, to the waiter
            assert waiter is not None  # n_waiting counts live waiters only
            self.woken += (waiter,)
            return
        if self.n_global_waiting and self._serve_global_waiter(entry, now):
            return
        log = self.idle_log
        if len(log) > 2 * self.n_idle + _COMPACT_SLACK:  # the calls, before the change
            self.idle_log = log = _compacted(log)
        # The hot path: it goes idle on its key and into the global log.
        del checked_out[key]
        entry.state = IDLE
        entry.idle_since = now
        core.idle += (entry,)
        core.n_idle += 1
        self.n_idle += 1
        entry.idle_turn += 1
        log += ((entry, entry.idle_turn, now),)

    def _serve_global_waiter(self, entry: Entry[R], now: float) -> bool:
        """A released resource nobody of its key waits for, while others wait for room:
        it goes to the oldest global waiter if that one wants the same key, else it is
        closed to make room for the waiter's own.  Waiters whose key filled up while
        they waited move to that key's queue.  False if no global waiter could use it.

        Interrupt-safe as the hot paths are: every call (a core made for the
        waiter's key, the clock's arithmetic) comes before the waiter leaves the
        queue, and nothing between its leaving and its arrival calls."""
        core = self.cores[entry.key]
        waiters = self.global_waiters
        while self.n_global_waiting and waiters:
            waiter = waiters[0]
            if waiter.cancelled:
                del waiters[0]
                continue
            same = waiter.key == entry.key
            other = core if same else self.core(waiter.key)
            waited = now - waiter.queued_at
            resource_id = id(entry.resource)
            del waiters[0]
            self.n_global_waiting -= 1
            self.global_wait_total += waited
            if waited > self.global_wait_max:
                self.global_wait_max = waited
            waiter.in_global_queue = False
            if same:
                waiter.entry = entry
                entry.idle_since = now
                core.n_reused += 1
                self.woken += (waiter,)
                return True
            if other.open < other.limit:
                del self.checked_out[resource_id]
                entry.state = GONE
                core.open -= 1
                core.garbage += (entry,)
                waiter.may_create = True
                other.open += 1
                self.woken += (waiter,)
                self._drop_if_empty(core)
                return True
            other.waiters += (waiter,)
            other.n_waiting += 1
        return False

    def discard(self, resource: R, now: float) -> None:
        key = id(resource)
        entry = self._lookup(resource)
        core = self.cores[entry.key]
        del self.checked_out[key]  # from here on, no call until the counts add up
        core.n_discarded += 1
        entry.state = GONE
        core.open -= 1
        self.open -= 1
        self.garbage += (entry,)
        self._slot_freed(core, now)

    def cancel(self, waiter: Waiter[R], *, timed_out: bool) -> None:
        if waiter.granted or waiter.cancelled or waiter.closed:
            raise RuntimeError("only a waiting waiter can be cancelled")
        if not waiter.in_global_queue:
            core = self.cores[waiter.key]
            core.cancel(waiter, timed_out=timed_out)
            self._drop_if_empty(core)
            return
        waiter.cancelled = True
        self.n_global_waiting -= 1
        if timed_out:
            self.n_global_timeouts += 1
        if self.global_waiters and self.global_waiters[-1] is waiter:
            self.global_waiters.pop()
        elif len(self.global_waiters) > 2 * self.n_global_waiting + _COMPACT_SLACK:
            self.global_waiters = deque(w for w in self.global_waiters if not w.cancelled)

    def expire(self, now: float) -> None:
        """Retire resources idle for ``max_idle`` or more, coldest first, across keys."""
        log = self.idle_log
        while log:
            entry, turn, since = log[0]
            if entry.state == IDLE and entry.idle_turn == turn:
                if since + self.max_idle > now:
                    break
                self.cores[entry.key].n_expired += 1  # before: the retire may drop the core
                self._retire_idle(entry)
            del log[0]

    def clear(self, now: float) -> None:
        """Retire every idle resource of every key (their servers went away, or the
        process needs the descriptors they hold); slots freed go to global waiters."""
        for core in list(self.cores.values()):
            for entry in list(core.idle):
                if entry.state == IDLE:
                    self._retire_idle(entry)
        self.idle_log.clear()
        self._serve_global(now)

    def invalidate(self, now: float, generation: int | None = None) -> bool:
        """As :meth:`PoolCore.invalidate`, for every key (a proxy or a certificate
        store changed, say)."""
        if generation is not None and generation != self.generation:
            return False
        self.generation += 1
        for core in self.cores.values():
            core.generation = self.generation
        end_lifetimes(self.checked_out)
        self.clear(now)
        return True

    generation_of = PoolCore.generation_of
    retiring = PoolCore.retiring

    def evict_coldest(self) -> bool:
        """Close the coldest idle resource of any key; False if nothing is idle."""
        log = self.idle_log
        while log:
            entry, turn, _ = log[0]
            del log[0]
            if entry.state == IDLE and entry.idle_turn == turn:
                self._retire_idle(entry)
                self.n_evicted += 1
                return True
        return False

    def _retire_idle(self, entry: Entry[R]) -> None:
        """Retire an idle entry where it stands in its key's deque (skipped there
        later), counts global and per key together: no call before they add up."""
        core = self.cores[entry.key]
        entry.state = GONE
        core.n_idle -= 1
        core.open -= 1
        self.n_idle -= 1
        self.open -= 1
        self.garbage += (entry,)
        if len(core.idle) > 2 * core.n_idle + _COMPACT_SLACK:
            core.idle = deque([e for e in core.idle if e.state == IDLE])
        self._drop_if_empty(core)

    def _take_idle(self, core: PoolCore[R], now: float) -> Entry[R] | None:
        """PoolCore.take_idle for a key's core, with the global counts changed in
        the same steps (each pass of the loop is whole when the next begins)."""
        idle = core.idle
        end = -1 if core.lifo else 0
        while core.n_idle:
            entry = idle[end]
            if entry.state == GONE:
                del idle[end]
                continue
            resource_id = id(entry.resource)  # the call, before the changes
            del idle[end]
            core.n_idle -= 1
            self.n_idle -= 1
            if entry.expires_at <= now:
                core.n_expired += 1
                entry.state = GONE
                core.open -= 1
                self.open -= 1
                self.garbage += (entry,)
                continue
            entry.state = IN_USE
            self.checked_out[resource_id] = entry
            core.n_reused += 1
            return entry
        if idle:
            idle.clear()  # only dead entries remain
        return None

    def rescue(self, waiter: Waiter[R], now: float) -> bool:
        """What a waiter still waiting is owed, if an interrupted operation left it
        unserved (the step that serves waiters was cut short): an idle resource of
        its key, or a slot, when one is free now.  True if it was granted; it is
        off its queue then (marked cancelled there, as :meth:`cancel` does).  In a
        pool whose operations all ran to their end this finds nothing: a waiter
        waits only while nothing is free for it."""
        if waiter.granted or waiter.cancelled or waiter.closed:
            return False
        if self.closed:  # a close cut short before it woke this waiter
            waiter.closed = True
            return True
        core = self.core(waiter.key)  # the calls, before any change
        # Its key's idle resource first: the eviction below must not find one of
        # them (it would drop the very core it then grants a slot in).
        entry = self._take_idle(core, now)
        if entry is None:
            if core.open >= core.limit:
                return False
            if self.open >= self.max_size and not self.evict_coldest():
                return False
            core.open += 1  # from here on, no call
            self.open += 1
            waiter.may_create = True
        else:
            waiter.entry = entry
        waiter.cancelled = True
        if waiter.in_global_queue:
            waiter.in_global_queue = False
            self.n_global_waiting -= 1
        else:
            core.n_waiting -= 1
        return True

    def close(self) -> list[Waiter[R]]:
        self.closed = True
        woken: list[Waiter[R]] = []
        for core in list(self.cores.values()):
            for entry in list(core.idle):
                if entry.state == IDLE:
                    self._retire_idle(entry)  # counts global and per key together
            woken.extend(core.close())  # nothing idle is left: it marks its waiters
            self._drop_if_empty(core)
        self.idle_log.clear()
        for waiter in self.global_waiters:
            if not waiter.cancelled:
                waiter.closed = True
                woken.append(waiter)
        self.global_waiters.clear()
        self.n_global_waiting = 0
        return woken

    def abandon(self, waiter: Waiter[R], now: float) -> None:
        """As :meth:`PoolCore.abandon`; whoever it grants is appended to ``woken``."""
        if waiter.entry is not None:
            self.release(waiter.entry.resource, now)
        elif waiter.may_create:
            self.create_failed(waiter.key, now)
        elif not waiter.closed and not waiter.cancelled:
            self.cancel(waiter, timed_out=False)

    def forget_all(self) -> list[R]:
        """As :meth:`PoolCore.forget_all`, for every key."""
        resources = [
            e.resource for core in self.cores.values() for e in core.idle if e.state == IDLE
        ]
        resources += [e.resource for e in self.checked_out.values()]
        resources += [e.resource for e in self.garbage]
        self.cores = {}
        self.open = self.n_idle = 0
        self.idle_log = deque()
        self.checked_out = {}
        self.garbage = []
        self.woken = []
        self.global_waiters = deque()
        self.n_global_waiting = 0
        self.generation += 1
        return resources

    def take_garbage(self) -> list[Entry[R]]:
        garbage = self.garbage[:]
        self.garbage.clear()
        return garbage

    def lifetimes_on(self) -> None:
        """As PoolCore's: here every checkout reads the clock already."""

    def take_woken(self) -> list[Waiter[R]]:
        woken = self.woken
        self.woken = []
        return woken

    def describe(self) -> str:
        """The gauges, for a front-end's repr."""
        waiting = self.n_global_waiting + sum(core.n_waiting for core in self.cores.values())
        return (
            f"max_size={self.max_size} max_per_key={self.max_per_key} open={self.open} "
            f"in_use={len(self.checked_out)} idle={self.n_idle} keys={len(self.cores)} "
            f"waiting={waiting}"
        )

    def stats(self) -> dict[str, Any]:
        totals = dict(self.dropped)
        wait_max = max(self.dropped_wait_max, self.global_wait_max)
        waiting = self.n_global_waiting
        for core in self.cores.values():
            for name, value in _core_counters(core).items():
                totals[name] += value
            wait_max = max(wait_max, core.wait_max)
            waiting += core.n_waiting
        return {
            "max_size": self.max_size,
            "max_per_key": self.max_per_key,
            "keys": len(self.cores),
            "open": self.open,
            "in_use": len(self.checked_out),
            "idle": self.n_idle,
            "waiting": waiting,
            "generation": self.generation,
            "created": int(totals["created"]),
            "reused": int(totals["reused"]),
            "discarded": int(totals["discarded"]),
            "expired": int(totals["expired"]),
            "evicted": self.n_evicted,
            "timeouts": int(totals["timeouts"]) + self.n_global_timeouts,
            "waits": int(totals["waits"]) + self.n_global_waits,
            "wait_total_s": totals["wait_total_s"] + self.global_wait_total,
            "wait_max_s": wait_max,
        }

    # -- helpers ----------------------------------------------------------------------

    def core(self, key: K) -> PoolCore[R]:
        core = self.cores.get(key)
        if core is None:
            core = PoolCore(
                self.max_per_key, lifo=self.lifo, max_idle=None, key=key, make_wake=self.make_wake
            )
            core.checked_out = self.checked_out
            core.garbage = self.garbage
            core.generation = self.generation
            self.cores[key] = core
        return core

    def _lookup(self, resource: R) -> Entry[R]:
        entry = self.checked_out.get(id(resource))
        if entry is None:
            raise ValueError(f"{resource!r} is not checked out from this pool")
        return entry

    def _slot_freed(self, core: PoolCore[R], now: float) -> None:
        """A slot of ``core`` was freed (its counts already add up): to the key's
        oldest waiter, else to the global waiters, oldest first."""
        if (
            core.n_waiting
            and not self.closed
            and core.open < core.limit
            and self.open < self.max_size
        ):
            waiter = core.pop_waiter(now)  # the call; the grant after it calls nothing
            if waiter is not None:
                waiter.may_create = True
                core.open += 1
                self.open += 1
                self.woken += (waiter,)
        self._serve_global(now)
        self._drop_if_empty(core)

    def _serve_global(self, now: float) -> None:
        """Give the room under the global limit to the global waiters, oldest first."""
        waiters = self.global_waiters
        while self.n_global_waiting and self.open < self.max_size and not self.closed and waiters:
            global_waiter = waiters[0]
            if global_waiter.cancelled:
                del waiters[0]
                continue
            its_core = self.core(global_waiter.key)  # the call, before it leaves the queue
            waited = now - global_waiter.queued_at
            del waiters[0]
            self.n_global_waiting -= 1
            self.global_wait_total += waited
            if waited > self.global_wait_max:
                self.global_wait_max = waited
            # _grant_global, inlined: no call until the waiter is granted or queued
            global_waiter.in_global_queue = False
            if its_core.open < its_core.limit:
                global_waiter.may_create = True
                its_core.open += 1
                self.open += 1
                self.woken += (global_waiter,)
            else:
                its_core.waiters += (global_waiter,)
                its_core.n_waiting += 1

    def _drop_if_empty(self, core: PoolCore[R]) -> None:
        if core.open == 0 and not core.n_waiting and self.cores.get(core.key) is core:
            del self.cores[core.key]
            # Added one by one, not through _core_counters(): a core is dropped for
            # every host of a bulk run, and building that dict doubled the cost.
            dropped = self.dropped
            dropped["created"] += core.n_created
            dropped["reused"] += core.n_reused
            dropped["discarded"] += core.n_discarded
            dropped["expired"] += core.n_expired
            dropped["timeouts"] += core.n_timeouts
            dropped["waits"] += core.n_waits
            dropped["wait_total_s"] += core.wait_total
            if core.wait_max > self.dropped_wait_max:
                self.dropped_wait_max = core.wait_max


def _core_counters(core: PoolCore[Any]) -> dict[str, float]:
    return {
        "created": core.n_created,
        "reused": core.n_reused,
        "discarded": core.n_discarded,
        "expired": core.n_expired,
        "timeouts": core.n_timeouts,
        "waits": core.n_waits,
        "wait_total_s": core.wait_total,
    }


def _compacted(log: deque[tuple[Entry[Any], int, float]]) -> deque[tuple[Entry[Any], int, float]]:
    """The idle log's live records, in order (:func:`_live`, inlined: no call per record)."""
    return deque([r for r in log if r[0].state == IDLE and r[0].idle_turn == r[1]])


def _live(entry: Entry[Any], turn: int) -> bool:
    """Does an idle-log record still describe the entry's current idle period?"""
    return entry.state == IDLE and entry.idle_turn == turn
