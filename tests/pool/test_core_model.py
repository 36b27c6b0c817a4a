"""The pool core against a simple model, by Hypothesis stateful testing.

The model keeps plain lists and does the obvious (slow) thing for every
operation; the core must agree with it on every outcome and every count,
through thousands of random sequences of acquire / create / fail / release /
discard / cancel / clock ticks / expire / close.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from surge.errors import PoolClosed
from surge.pool._core import Entry, PoolCore, Waiter


@dataclass(eq=False)
class Res:
    n: int
    expires_at: float = math.inf
    generation: int = 0

    def __repr__(self) -> str:
        return f"R{self.n}"


@dataclass
class Model:
    """The semantics, spelled out with lists."""

    max_size: int
    max_overflow: int
    lifo: bool
    max_idle: float
    idle: list[tuple[Res, float]] = field(
        default_factory=list
    )  # (resource, idle_since), cold first
    out: set[int] = field(default_factory=set)  # ids of checked-out resources
    reserved: int = 0
    waiters: list[Waiter[Res]] = field(default_factory=list)
    closed: bool = False

    @property
    def open(self) -> int:
        return len(self.idle) + len(self.out) + self.reserved

    def expire(self, now: float) -> None:
        self.idle = [(r, t) for r, t in self.idle if t + self.max_idle > now]

    def grant_slot(self) -> Waiter[Res] | None:
        if self.waiters and not self.closed and self.open < self.max_size + self.max_overflow:
            waiter = self.waiters.pop(0)
            self.reserved += 1
            return waiter
        return None


class CoreMachine(RuleBasedStateMachine):
    @initialize(
        max_size=st.integers(1, 4),
        max_overflow=st.integers(0, 2),
        lifo=st.booleans(),
        max_idle=st.none() | st.sampled_from([1.0, 3.0]),
        lifetime=st.none() | st.sampled_from([2.0, 5.0]),
    )
    def setup(
        self,
        max_size: int,
        max_overflow: int,
        lifo: bool,
        max_idle: float | None,
        lifetime: float | None,
    ) -> None:
        self.core: PoolCore[Res] = PoolCore(
            max_size, max_overflow, lifo=lifo, max_idle=max_idle, lifetimes=lifetime is not None
        )
        self.model = Model(max_size, max_overflow, lifo, math.inf if max_idle is None else max_idle)
        self.lifetime = math.inf if lifetime is None else lifetime
        self.now = 0.0
        self.counter = 0
        self.generation = 0
        self.garbage: list[Res] = []

    def _grant(self, waiter: Waiter[Res] | None, expected: Waiter[Res] | None) -> None:
        assert waiter is expected
        if waiter is not None:
            assert waiter.may_create and waiter.entry is None
            self._granted_slots.append(waiter)

    _granted_slots: list[Waiter[Res]]

    def _drain_garbage(self) -> None:
        self.garbage.extend(e.resource for e in self.core.take_garbage())

    # -- rules ------------------------------------------------------------------------

    @precondition(lambda self: not self.model.closed)
    @rule()
    def acquire(self) -> None:
        m = self.model
        m.expire(self.now)
        # Expired lifetimes are skipped from the end the core takes from.
        while m.idle:
            res, _ = m.idle[-1] if m.lifo else m.idle[0]
            if res.expires_at > self.now:
                break
            m.idle.remove((res, _))
        got = self.core.acquire(self.now)
        self._drain_garbage()
        if m.idle:
            res, _ = m.idle.pop() if m.lifo else m.idle.pop(0)
            assert isinstance(got, Entry) and got.resource is res
            m.out.add(id(res))
            self._out_objects[id(res)] = res
            return
        if m.open < m.max_size + m.max_overflow:
            assert got is None
            m.reserved += 1
            return
        assert isinstance(got, Waiter)
        event(f"acquire waits behind {len(m.waiters)}")
        m.waiters.append(got)
        self._waiters.append(got)

    @precondition(lambda self: self._has_reservation())
    @rule(stale=st.booleans())
    def create(self, stale: bool) -> None:
        """``stale``: the pool was invalidated while this resource was being made."""
        self.counter += 1
        generation = self.generation - 1 if stale and self.generation else self.generation
        res = Res(self.counter, self.now + self.lifetime, generation)
        self.model.reserved -= 1
        self.core.created(res, self.now, res.expires_at, generation)
        self.model.out.add(id(res))
        self._out_objects[id(res)] = res

    @precondition(lambda self: self._has_reservation())
    @rule()
    def create_fails(self) -> None:
        self.model.reserved -= 1
        expected = self.model.grant_slot()
        self._grant(self.core.create_failed(self.now), expected)

    @precondition(lambda self: bool(self._granted_slots))
    @rule()
    def granted_waiter_creates(self) -> None:
        waiter = self._granted_slots.pop(0)
        self._waiters.remove(waiter)
        self.counter += 1
        res = Res(self.counter, self.now + self.lifetime, self.generation)
        self.model.reserved -= 1
        self.core.created(res, self.now, res.expires_at, self.generation)
        self.model.out.add(id(res))
        self._out_objects[id(res)] = res

    @precondition(lambda self: bool(self.model.out))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        m = self.model
        key = data.draw(st.sampled_from(sorted(m.out, key=lambda k: self._out_objects[k].n)))
        res = self._out_objects.pop(key)
        self._release(res, self.core.release(res, self.now))

    def _release(self, res: Res, waiter: Waiter[Res] | None) -> None:
        """What a release of ``res`` (just made, granting ``waiter``) must have done."""
        m = self.model
        key = id(res)
        m.out.discard(key)
        self._handed.pop(key, None)  # used by whoever it was handed to
        self._drain_garbage()
        if res.expires_at <= self.now or res.generation != self.generation:
            assert res in self.garbage
            self._grant(waiter, m.grant_slot())
        elif m.waiters:
            event(f"release hands over with {len(m.waiters)} waiting")
            expected = m.waiters.pop(0)
            assert waiter is expected and waiter.entry is not None
            assert waiter.entry.resource is res
            self._waiters.remove(waiter)
            m.out.add(key)
            self._out_objects[key] = res
            self._handed[key] = waiter
        elif m.closed or m.open + 1 > m.max_size:
            assert waiter is None and res in self.garbage
        else:
            assert waiter is None
            m.idle.append((res, self.now))
            m.expire(self.now)

    @precondition(lambda self: bool(self.model.out))
    @rule(data=st.data())
    def discard(self, data: st.DataObject) -> None:
        m = self.model
        key = data.draw(st.sampled_from(sorted(m.out, key=lambda k: self._out_objects[k].n)))
        res = self._out_objects.pop(key)
        m.out.discard(key)
        self._handed.pop(key, None)  # used (and discarded) by whoever it was handed to
        waiter = self.core.discard(res, self.now)
        self._drain_garbage()
        assert res in self.garbage
        self._grant(waiter, m.grant_slot())

    @precondition(lambda self: bool(self.model.waiters))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        waiter = data.draw(st.sampled_from(self.model.waiters))
        self.model.waiters.remove(waiter)
        self._waiters.remove(waiter)
        self.core.cancel(waiter, timed_out=True)

    # -- interruptions: a waiter gives up in whatever state it is --------------------

    @precondition(lambda self: bool(self.model.waiters))
    @rule(data=st.data())
    def interrupt_waiting(self, data: st.DataObject) -> None:
        """Interrupted while it waits: it leaves the queue, counted as no timeout."""
        waiter = data.draw(st.sampled_from(self.model.waiters))
        timeouts = self.core.n_timeouts
        assert self.core.abandon(waiter, self.now) is None
        self.model.waiters.remove(waiter)
        self._waiters.remove(waiter)
        assert self.core.n_timeouts == timeouts

    @precondition(lambda self: bool(self._granted_slots))
    @rule()
    def interrupt_granted_slot(self) -> None:
        """Interrupted just as it was granted a slot: the slot passes on."""
        waiter = self._granted_slots.pop(0)
        self._waiters.remove(waiter)
        self.model.reserved -= 1
        expected = self.model.grant_slot()
        self._grant(self.core.abandon(waiter, self.now), expected)

    @precondition(lambda self: bool(self._handed))
    @rule(data=st.data())
    def interrupt_handed(self, data: st.DataObject) -> None:
        """Interrupted just as a release handed it a resource: the resource goes on
        as if released (to the next waiter, idle, or retired)."""
        key = data.draw(st.sampled_from(sorted(self._handed)))
        waiter = self._handed[key]
        res = self._out_objects.pop(key)
        self._release(res, self.core.abandon(waiter, self.now))

    @precondition(lambda self: self.model.closed and bool(self._closed_waiters))
    @rule()
    def interrupt_closed(self) -> None:
        """Interrupted after close woke it: nothing to give back."""
        waiter = self._closed_waiters.pop()
        open_before = self.core.open
        assert self.core.abandon(waiter, self.now) is None
        assert self.core.open == open_before

    @rule(data=st.data())
    def invalidate(self, data: st.DataObject) -> None:
        """Everything that exists now is retired: idle at once, out when it returns.
        An invalidate that names an old generation does nothing."""
        named = data.draw(st.none() | st.sampled_from([self.generation, self.generation - 1]))
        moved = self.core.invalidate(named)
        self._drain_garbage()
        if named is not None and named != self.generation:
            assert not moved
            return
        assert moved
        for res, _ in self.model.idle:
            assert res in self.garbage
        self.model.idle.clear()
        self.generation += 1
        assert self.core.generation == self.generation
        for key in self.model.out:
            res = self._out_objects[key]
            assert self.core.generation_of(res) == res.generation

    @rule(dt=st.sampled_from([0.0, 0.5, 1.0, 2.5]))
    def tick(self, dt: float) -> None:
        self.now += dt

    @rule()
    def expire(self) -> None:
        self.core.expire(self.now)
        self._drain_garbage()
        self.model.expire(self.now)

    @precondition(lambda self: not self.model.closed)
    @rule()
    def close(self) -> None:
        woken = self.core.close()
        self._drain_garbage()
        assert woken == self.model.waiters
        assert all(w.closed for w in woken)
        self.model.idle.clear()
        self.model.waiters.clear()
        self.model.closed = True
        for w in woken:
            self._waiters.remove(w)
        self._closed_waiters.extend(woken)

    @precondition(lambda self: self.model.closed)
    @rule()
    def acquire_after_close_raises(self) -> None:
        try:
            self.core.acquire(self.now)
        except PoolClosed:
            return
        raise AssertionError("a closed pool handed something out")

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def counts_agree(self) -> None:
        if not hasattr(self, "core"):
            return
        c, m = self.core, self.model
        assert c.open == m.open, (c.open, m.open)
        assert c.n_idle == len(m.idle)
        assert c.n_waiting == len(m.waiters)
        assert set(c.checked_out) == m.out
        assert c.open <= c.limit
        live_idle = [e.resource for e in c.idle if e.state == 1]
        assert sorted(r.n for r in live_idle) == sorted(r.n for r, _ in m.idle)

    @invariant()
    def waiters_only_when_full(self) -> None:
        if not hasattr(self, "core"):
            return
        if self.core.n_waiting:
            assert self.core.n_idle == 0
            assert self.core.open == self.core.limit

    def __init__(self) -> None:
        super().__init__()
        self._out_objects: dict[int, Res] = {}
        self._waiters: list[Waiter[Res]] = []
        self._granted_slots = []
        #: id(resource) -> the waiter a release handed it to, until it is used.
        self._handed: dict[int, Waiter[Res]] = {}
        self._closed_waiters: list[Waiter[Res]] = []

    def _has_reservation(self) -> bool:
        # Reservations granted to waiters are consumed by granted_waiter_creates.
        return self.model.reserved > len(self._granted_slots)


CoreMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestCoreModel = CoreMachine.TestCase
