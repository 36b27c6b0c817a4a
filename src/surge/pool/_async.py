"""The asyncio front-ends: ``AsyncPool`` and ``AsyncKeyedPool``.

Same cores and semantics as the thread front-ends, driven from one event loop
(no lock: the loop is the lock; a pool belongs to the loop that uses it).  The
callbacks may be plain functions or coroutine functions.

Cancellation is the subtle part: a task cancelled while it waits may already
have been granted a resource (the grant and the cancellation race within one
loop iteration).  A granted resource is then handed on at once - to the next
waiter or the idle set - and a granted creation slot is given back, so a
cancelled waiter never loses a resource or a slot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

from surge.errors import PoolClosed
from surge.pool import _fork
from surge.pool._core import Entry, PoolCore, Waiter
from surge.pool._keyed_core import KeyedCore
from surge.pool._options import FrontEnd, check_passed, front_end_options, log, timeout_error

R = TypeVar("R")
K = TypeVar("K", bound=Hashable)

#: A callback may return its result or an awaitable of it.
MaybeAwaitable = Awaitable[object] | object


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    result = fn(*args)
    # None first: isawaitable(None) is an ABC check (~0.7 us), paid by every close.
    if result is not None and inspect.isawaitable(result):
        result = await result
    return result


def _new_wake() -> asyncio.Future[None]:
    """A waiter's wake, made by the core as it queues the waiter: an acquire that
    awaits (a ``close``) before it waits may be granted in between."""
    return asyncio.get_running_loop().create_future()


def _wake(waiter: Waiter[Any]) -> None:
    future: asyncio.Future[None] = waiter.wake
    if not future.done():
        future.set_result(None)


class _AsyncFrontEnd(FrontEnd, Generic[K, R]):
    """The acquire loop, waiting, checks and resets shared by both async pools.

    Subclasses adapt it to their core; ``key`` is None for the plain pool.
    """

    def __init__(self, create: Callable[..., Any], **options: Any) -> None:
        super().__init__(**options)  # FrontEnd's keyword arguments
        self._create = create
        _fork.track(self)

    def _forked(self) -> None:
        """In a forked child: forget the parent's resources, each handed to ``sever``
        (see surge.pool._fork); the parent's waiters and their loop are not ours."""
        self._inherited = _fork.forget(self._core, self._sever)

    # -- adapters to the core --------------------------------------------------------------

    _core: Any  # PoolCore or KeyedCore

    def _core_acquire(self, key: K | None, now: float) -> Entry[R] | Waiter[R] | None:
        raise NotImplementedError

    def _core_created(self, key: K | None, resource: R, now: float, generation: int) -> None:
        raise NotImplementedError

    def _core_create_failed(self, key: K | None, now: float) -> None:
        raise NotImplementedError

    def _core_release(self, resource: R, now: float) -> None:
        raise NotImplementedError

    def _core_discard(self, resource: R, now: float) -> None:
        raise NotImplementedError

    def _core_cancel(self, waiter: Waiter[R], timed_out: bool) -> None:
        raise NotImplementedError

    def _core_abandon(self, waiter: Waiter[R]) -> None:
        """The core's ``abandon``, and wake whoever it grants."""
        raise NotImplementedError

    def _core_take_garbage(self) -> list[Entry[R]]:
        raise NotImplementedError

    def _core_has_garbage(self) -> bool:
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._core.describe()}>"

    async def _new_resource(self, key: K | None) -> R:
        raise NotImplementedError

    # -- the shared loop ----------------------------------------------------------------

    async def _acquire(
        self, key: K | None, timeout: float | None, got: Entry[R] | Waiter[R] | None
    ) -> R:
        """The general path, from the core's first answer ``got``."""
        if timeout is None:
            timeout = self._options.timeout
        deadline = None
        now = self._clock()
        while True:
            if self._core_has_garbage():
                try:
                    await self._dispose()
                except BaseException:  # cancelled while closing: what it holds goes back
                    self._give_back(got, key)
                    raise
            if isinstance(got, Entry):
                if self._check is None or await self._passes_check(got, now):
                    return got.resource
                now = self._clock()
                got = self._core_acquire(key, now)
                continue
            if got is None:
                return await self._create_in_slot(key)
            if deadline is None:
                deadline = now + timeout
            entry = await self._wait(got, deadline, timeout, key)
            if entry is None:
                return await self._create_in_slot(key)
            if self._check is None or await self._passes_check(entry, self._clock()):
                return entry.resource
            now = self._clock()
            got = self._core_acquire(key, now)

    def _give_back(self, got: Entry[R] | Waiter[R] | None, key: K | None) -> None:
        """What a checkout cancelled between two steps holds goes back: an entry
        checked out to it and not used (no reset), a slot, a waiter."""
        now = self._clock()
        if isinstance(got, Entry):
            self._core_release(got.resource, now)
        elif got is None:
            self._core_create_failed(key, now)
        else:
            self._core_abandon(got)

    async def _wait(
        self, waiter: Waiter[R], deadline: float, timeout: float, key: K | None
    ) -> Entry[R] | None:
        future: asyncio.Future[None] = waiter.wake
        try:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):
                await future
        except TimeoutError:
            if not waiter.granted and not waiter.closed:
                self._core_cancel(waiter, True)
                raise timeout_error(timeout, self.stats(), key) from None
        except BaseException:  # cancelled: hand on whatever was granted
            self._core_abandon(waiter)
            raise
        if waiter.closed:
            raise PoolClosed("the pool was closed while waiting")
        return waiter.entry

    async def _create_in_slot(self, key: K | None) -> R:
        generation = self._core.generation
        try:
            resource = await self._new_resource(key)
        except BaseException:
            self._core_create_failed(key, self._clock())
            raise
        self._core_created(key, resource, self._clock(), generation)
        return resource

    async def _passes_check(self, entry: Entry[R], now: float) -> bool:
        assert self._check is not None
        if not self._options.wants_check(now, entry.idle_since):
            return True
        try:
            ok = check_passed(await _call(self._check, entry.resource, now - entry.idle_since))
        except Exception:
            log.info("check of %r raised; discarding it", entry.resource, exc_info=True)
            ok = False
        except BaseException:
            await self.discard(entry.resource)
            raise
        if not ok:
            await self.discard(entry.resource)
        return ok

    async def _dispose(self) -> None:
        garbage = self._core_take_garbage()
        if not garbage or self._close is None:
            return
        done = 0  # the one being closed counts: a cancellation inside it leaves it
        try:
            for entry in garbage:
                done += 1
                try:
                    await _call(self._close, entry.resource)
                except Exception:
                    log.warning("closing %r failed", entry.resource, exc_info=True)
        except BaseException:  # cancelled: the rest waits in the core for the next one
            self._core.garbage += garbage[done:]
            raise

    # -- public ---------------------------------------------------------------------------

    async def release(self, resource: R) -> None:
        """Return a resource: to the oldest waiter if any, else to the idle set."""
        if self._inherited and self._inherited.pop(id(resource), None) is not None:
            return  # the parent's, in a forked child
        if self._reset is None:  # the hot path: no callback, usually nothing to close
            self._core_release(resource, self._clock())
            if self._core_has_garbage():
                await self._dispose()
            return
        now = self._clock()
        if self._core.retiring(resource, now):  # to be retired: no reset
            self._core_release(resource, now)
            await self._dispose()
            return
        try:
            ok = check_passed(await _call(self._reset, resource))
        except Exception:
            log.info("reset of %r raised; discarding it", resource, exc_info=True)
            ok = False
        except BaseException:
            await self.discard(resource)
            raise
        if not ok:
            await self.discard(resource)
            return
        self._core_release(resource, self._clock())
        await self._dispose()

    async def discard(self, resource: R) -> None:
        """Close a checked-out resource instead of returning it (it failed)."""
        if self._inherited and self._inherited.pop(id(resource), None) is not None:
            return  # the parent's, in a forked child
        self._core_discard(resource, self._clock())
        await self._dispose()

    def release_nowait(self, resource: R) -> None:
        """``release`` without an await, for a pool with no ``reset`` callback (as
        ``asyncio.Queue.put_nowait``): a caller on a hot path saves a coroutine.
        Resources it retires are closed by a task if ``close`` must be awaited."""
        if self._reset is not None:
            raise RuntimeError("release_nowait() cannot run reset: use 'await release()'")
        if self._inherited and self._inherited.pop(id(resource), None) is not None:
            return  # the parent's, in a forked child
        self._core_release(resource, self._clock())
        if self._core_has_garbage():
            asyncio.get_running_loop().create_task(self._dispose())


class AsyncPool(_AsyncFrontEnd[Any, R]):
    """The asyncio twin of :class:`surge.pool.Pool`: same options, same semantics;
    ``acquire``, ``release``, ``discard`` and ``close`` are awaited and
    ``connection()`` is an ``async with``.  ``create``, ``check``, ``reset`` and
    ``close`` may be coroutine functions."""

    def __init__(
        self,
        create: Callable[[], Awaitable[R] | R],
        *,
        max_size: int,
        max_overflow: int = 0,
        timeout: float = 30.0,
        max_idle: float | None = None,
        max_lifetime: float | None = None,
        lifetime_jitter: float = 0.1,
        check: Callable[[R, float], Any] | None = None,
        check_idle_after: float = 0.0,
        reset: Callable[[R], Any] | None = None,
        close: Callable[[R], Any] | None = None,
        sever: Callable[[R], object] | None = None,
        lifo: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(create, **front_end_options(locals()))
        self._core: PoolCore[R] = PoolCore(
            max_size,
            max_overflow,
            lifo=lifo,
            max_idle=max_idle,
            lifetimes=bool(max_lifetime),
            make_wake=_new_wake,
        )

    def acquire_nowait(self) -> R | None:
        """An idle resource at once, or None (then ``await acquire()``): never
        creates, waits or queues.  For a pool with no ``check`` callback."""
        if self._check is not None:
            raise RuntimeError("acquire_nowait() cannot run check: use 'await acquire()'")
        entry = self._core.take(self._clock())
        if self._core.garbage:
            asyncio.get_running_loop().create_task(self._dispose())
        return None if entry is None else entry.resource

    async def acquire(self, timeout: float | None = None) -> R:
        """Check out a resource, waiting up to ``timeout`` (default: the pool's)."""
        core = self._core
        now = self._clock()
        got = core.acquire(now)
        if type(got) is Entry and now - got.idle_since < self._unchecked_below and not core.garbage:
            return got.resource  # the hot path: an idle resource, nothing else to do
        return await self._acquire(None, timeout, got)

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[R]:
        """``async with pool.connection() as r:`` - returned after the block,
        discarded if it raised (or was cancelled)."""
        resource = await self.acquire(timeout)
        try:
            yield resource
        except BaseException:
            await self.discard(resource)
            raise
        await self.release(resource)

    async def expire(self) -> None:
        self._core.expire(self._clock())
        await self._dispose()

    async def clear(self) -> None:
        """Close every idle resource now; resources in use are unaffected."""
        self._core.clear()
        await self._dispose()

    async def invalidate(self, generation: int | None = None) -> bool:
        """As :meth:`surge.pool.Pool.invalidate`."""
        moved = self._core.invalidate(generation)
        await self._dispose()
        return moved

    def set_max_lifetime(self, seconds: float | None) -> None:
        """Change ``max_lifetime`` for resources created from now on."""
        self._options = dataclasses.replace(self._options, max_lifetime=seconds)
        self._core.fast = self._core.fast and seconds is None

    async def close(self) -> None:
        for waiter in self._core.close():
            _wake(waiter)
        await self._dispose()

    def stats(self) -> dict[str, Any]:
        return self._core.stats()

    async def __aenter__(self) -> AsyncPool[R]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _core_acquire(self, key: Any, now: float) -> Entry[R] | Waiter[R] | None:
        return self._core.acquire(now)

    def _core_created(self, key: Any, resource: R, now: float, generation: int) -> None:
        self._core.created(resource, now, self._options.expires_at(now), generation)

    def _core_create_failed(self, key: Any, now: float) -> None:
        waiter = self._core.create_failed(now)
        if waiter is not None:
            _wake(waiter)

    def _core_release(self, resource: R, now: float) -> None:
        waiter = self._core.release(resource, now)
        if waiter is not None:
            _wake(waiter)

    def _core_discard(self, resource: R, now: float) -> None:
        waiter = self._core.discard(resource, now)
        if waiter is not None:
            _wake(waiter)

    def _core_cancel(self, waiter: Waiter[R], timed_out: bool) -> None:
        self._core.cancel(waiter, timed_out=timed_out)

    def _core_abandon(self, waiter: Waiter[R]) -> None:
        granted = self._core.abandon(waiter, self._clock())
        if granted is not None:
            _wake(granted)

    def _core_take_garbage(self) -> list[Entry[R]]:
        return self._core.take_garbage() if self._core.garbage else []

    def _core_has_garbage(self) -> bool:
        return bool(self._core.garbage)

    async def _new_resource(self, key: Any) -> R:
        resource: R = await _call(self._create)
        return resource


class AsyncKeyedPool(_AsyncFrontEnd[K, R]):
    """The asyncio twin of :class:`surge.pool.KeyedPool`: one sub-pool per key
    (``create(key)``), at most ``max_per_key`` per key and ``max_size`` in all; the
    coldest idle resource of any key is closed to make room."""

    def __init__(
        self,
        create: Callable[[K], Awaitable[R] | R],
        *,
        max_size: int,
        max_per_key: int,
        timeout: float = 30.0,
        max_idle: float | None = None,
        max_lifetime: float | None = None,
        lifetime_jitter: float = 0.1,
        check: Callable[[R, float], Any] | None = None,
        check_idle_after: float = 0.0,
        reset: Callable[[R], Any] | None = None,
        close: Callable[[R], Any] | None = None,
        sever: Callable[[R], object] | None = None,
        lifo: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(create, **front_end_options(locals()))
        self._core: KeyedCore[K, R] = KeyedCore(
            max_size, max_per_key, lifo=lifo, max_idle=max_idle, make_wake=_new_wake
        )

    def _holds(self, key: K) -> bool:
        """Whether a resource of ``key`` exists or is being created (idle or in use):
        for the HTTP client's DNS look-ahead (not public: the front-ends share one
        public surface)."""
        core = self._core.cores.get(key)
        return core is not None and core.open > 0

    def acquire_nowait(self, key: K) -> R | None:
        """An idle resource of ``key`` at once, or None (then ``await acquire(key)``):
        never creates, waits or queues.  For a pool with no ``check`` callback."""
        if self._check is not None:
            raise RuntimeError("acquire_nowait() cannot run check: use 'await acquire()'")
        entry = self._core.take(key, self._clock())
        if self._core.garbage:
            asyncio.get_running_loop().create_task(self._dispose())
        return None if entry is None else entry.resource

    def release_nowait(self, resource: R) -> None:
        """As the plain pool's, with the core's calls made here: one Python call
        less per keep-alive request (the HTTP client's hot path)."""
        if self._reset is not None:
            raise RuntimeError("release_nowait() cannot run reset: use 'await release()'")
        if self._inherited and self._inherited.pop(id(resource), None) is not None:
            return  # the parent's, in a forked child
        core = self._core
        core.release(resource, self._clock())
        if core.woken:
            for waiter in core.take_woken():
                _wake(waiter)
        if core.garbage:
            asyncio.get_running_loop().create_task(self._dispose())

    async def acquire(self, key: K, timeout: float | None = None) -> R:
        core = self._core
        now = self._clock()
        got = core.acquire(key, now)
        if type(got) is Entry and now - got.idle_since < self._unchecked_below and not core.garbage:
            return got.resource  # the hot path: an idle resource, nothing else to do
        return await self._acquire(key, timeout, got)

    @asynccontextmanager
    async def connection(self, key: K, timeout: float | None = None) -> AsyncIterator[R]:
        resource = await self.acquire(key, timeout)
        try:
            yield resource
        except BaseException:
            await self.discard(resource)
            raise
        await self.release(resource)

    async def expire(self) -> None:
        self._core.expire(self._clock())
        self._wake_granted()
        await self._dispose()

    async def clear(self) -> None:
        """Close every idle resource of every key now; resources in use are unaffected."""
        self._core.clear(self._clock())
        self._wake_granted()
        await self._dispose()

    async def invalidate(self, generation: int | None = None) -> bool:
        """As :meth:`surge.pool.Pool.invalidate`, for every key."""
        moved = self._core.invalidate(self._clock(), generation)
        self._wake_granted()
        await self._dispose()
        return moved

    def set_max_lifetime(self, seconds: float | None) -> None:
        """Change ``max_lifetime`` for resources created from now on."""
        self._options = dataclasses.replace(self._options, max_lifetime=seconds)

    async def close(self) -> None:
        for waiter in self._core.close():
            _wake(waiter)
        self._wake_granted()
        await self._dispose()

    def stats(self) -> dict[str, Any]:
        return self._core.stats()

    async def __aenter__(self) -> AsyncKeyedPool[K, R]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _wake_granted(self) -> None:
        if self._core.woken:
            for waiter in self._core.take_woken():
                _wake(waiter)

    def _core_acquire(self, key: K | None, now: float) -> Entry[R] | Waiter[R] | None:
        return self._core.acquire(key, now)  # type: ignore[arg-type]

    def _core_created(self, key: K | None, resource: R, now: float, generation: int) -> None:
        expires_at = self._options.expires_at(now)
        self._core.created(key, resource, now, expires_at, generation)  # type: ignore[arg-type]

    def _core_create_failed(self, key: K | None, now: float) -> None:
        self._core.create_failed(key, now)  # type: ignore[arg-type]
        self._wake_granted()

    def _core_release(self, resource: R, now: float) -> None:
        core = self._core
        core.release(resource, now)
        if core.woken:
            for waiter in core.take_woken():
                _wake(waiter)

    def _core_discard(self, resource: R, now: float) -> None:
        self._core.discard(resource, now)
        self._wake_granted()

    def _core_cancel(self, waiter: Waiter[R], timed_out: bool) -> None:
        self._core.cancel(waiter, timed_out=timed_out)

    def _core_abandon(self, waiter: Waiter[R]) -> None:
        self._core.abandon(waiter, self._clock())
        self._wake_granted()

    def _core_take_garbage(self) -> list[Entry[R]]:
        return self._core.take_garbage() if self._core.garbage else []

    def _core_has_garbage(self) -> bool:
        return bool(self._core.garbage)

    async def _new_resource(self, key: K | None) -> R:
        resource: R = await _call(self._create, key)
        return resource
