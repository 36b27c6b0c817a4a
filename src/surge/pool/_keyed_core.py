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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from surge.errors import PoolClosed
from surge.pool._core import (
    _COMPACT_SLACK,
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
        open_before, idle_before = core.open, core.n_idle
        entry = core.take_idle(now)
        self.open += core.open - open_before
        self.n_idle += core.n_idle - idle_before
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
        self.global_waiters.append(waiter)
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
                core.idle.pop()
                core.n_idle -= 1
                self.n_idle -= 1
                entry.state = IN_USE
                self.checked_out[id(entry.resource)] = entry
                core.n_reused += 1
                if log and log[-1][0] is entry:
                    # Its idle record is the newest (the usual case when one key
                    # is reused): drop it now, not in a later compaction.
                    log.pop()
                return entry
        open_before, idle_before = core.open, core.n_idle
        taken = core.take_idle(now)
        self.open += core.open - open_before
        self.n_idle += core.n_idle - idle_before
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
        open_before = core.open
        waiter = core.create_failed(now)
        self.open += core.open - open_before
        self._after_slot_change(core, waiter, now)

    def release(self, resource: R, now: float) -> None:
        # Popped at once (one dict operation on the hot path); put back for the
        # paths below that look it up again.
        entry = self.checked_out.pop(id(resource), None)
        if entry is None:
            raise ValueError(f"{resource!r} is not checked out from this pool")
        core = self.cores[entry.key]
        if not (core.n_waiting or self.n_global_waiting or self.closed) and entry.expires_at > now:
            # The hot path, inlined (PoolCore.release + _log_idle): nobody waits,
            # so the resource goes idle on its key and into the global log.
            entry.state = IDLE
            entry.idle_since = now
            core.idle.append(entry)
            core.n_idle += 1
            self.n_idle += 1
            entry.idle_turn += 1
            log = self.idle_log
            log.append((entry, entry.idle_turn, now))
            if len(log) > 2 * self.n_idle + _COMPACT_SLACK:
                self.idle_log = _compacted(log)
            return
        self.checked_out[id(resource)] = entry
        if (
            not core.n_waiting
            and self.n_global_waiting
            and entry.expires_at > now
            and not self.closed
            and self._serve_global_waiter(entry, now)
        ):
            return
        open_before, idle_before = core.open, core.n_idle
        waiter = core.release(resource, now)
        self.open += core.open - open_before
        self.n_idle += core.n_idle - idle_before
        if entry.state == IDLE:
            self._log_idle(entry)
        self._after_slot_change(core, waiter, now)

    def _serve_global_waiter(self, entry: Entry[R], now: float) -> bool:
        """A released resource nobody of its key waits for, while others wait for room:
        it goes to the oldest global waiter if that one wants the same key, else it is
        closed to make room for the waiter's own.  Waiters whose key filled up while
        they waited move to that key's queue.  False if no global waiter could use it.
        """
        core = self.cores[entry.key]
        while self.n_global_waiting:
            waiter = self._pop_global_waiter(now)
            if waiter is None:
                break
            waiter.in_global_queue = False
            if waiter.key == entry.key:
                waiter.entry = entry
                entry.idle_since = now
                core.n_reused += 1
                self.woken.append(waiter)
                return True
            other = self.core(waiter.key)
            if other.open < other.limit:
                core.pop_checked_out(entry.resource)
                core.retire(entry)
                waiter.may_create = True
                other.open += 1
                self.woken.append(waiter)
                self._drop_if_empty(core)
                return True
            other.waiters.append(waiter)
            other.n_waiting += 1
        return False

    def discard(self, resource: R, now: float) -> None:
        entry = self._lookup(resource)
        core = self.cores[entry.key]
        open_before = core.open
        waiter = core.discard(resource, now)
        self.open += core.open - open_before
        self._after_slot_change(core, waiter, now)

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
            if not _live(entry, turn):
                log.popleft()
            elif since + self.max_idle <= now:
                log.popleft()
                core = self.cores[entry.key]
                core.remove_idle(entry)
                core.n_expired += 1
                self.open -= 1
                self.n_idle -= 1
                self._drop_if_empty(core)
            else:
                break

    def clear(self, now: float) -> None:
        """Retire every idle resource of every key (their servers went away, or the
        process needs the descriptors they hold); slots freed go to global waiters."""
        for core in list(self.cores.values()):
            if core.n_idle:
                self.open -= core.n_idle
                self.n_idle -= core.n_idle
                core.clear()
                self._after_slot_change(core, None, now)
        self.idle_log.clear()

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
            entry, turn, _ = log.popleft()
            if not _live(entry, turn):
                continue
            core = self.cores[entry.key]
            core.remove_idle(entry)
            self.open -= 1
            self.n_idle -= 1
            self.n_evicted += 1
            self._drop_if_empty(core)
            return True
        return False

    def close(self) -> list[Waiter[R]]:
        self.closed = True
        woken: list[Waiter[R]] = []
        for core in list(self.cores.values()):
            self.open -= core.n_idle
            woken.extend(core.close())
            self._drop_if_empty(core)
        self.n_idle = 0
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

    def _log_idle(self, entry: Entry[R]) -> None:
        entry.idle_turn += 1
        self.idle_log.append((entry, entry.idle_turn, entry.idle_since))
        if len(self.idle_log) > 2 * self.n_idle + _COMPACT_SLACK:
            self.idle_log = _compacted(self.idle_log)

    def _pop_global_waiter(self, now: float) -> Waiter[R] | None:
        waiters = self.global_waiters
        while waiters:
            waiter = waiters.popleft()
            if waiter.cancelled:
                continue
            self.n_global_waiting -= 1
            waited = now - waiter.queued_at
            self.global_wait_total += waited
            if waited > self.global_wait_max:
                self.global_wait_max = waited
            return waiter
        return None

    def _grant_global(self, waiter: Waiter[R], now: float) -> None:
        """Give a global waiter a slot to create in, or move it to its key's queue if
        that key filled up while it waited."""
        waiter.in_global_queue = False
        core = self.core(waiter.key)
        if core.open < core.limit:
            waiter.may_create = True
            core.open += 1
            self.open += 1
            self.woken.append(waiter)
        else:
            core.waiters.append(waiter)
            core.n_waiting += 1

    def _after_slot_change(self, core: PoolCore[R], waiter: Waiter[R] | None, now: float) -> None:
        if waiter is not None:
            self.woken.append(waiter)
        while self.n_global_waiting and self.open < self.max_size and not self.closed:
            global_waiter = self._pop_global_waiter(now)
            if global_waiter is None:
                break
            self._grant_global(global_waiter, now)
        self._drop_if_empty(core)

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
