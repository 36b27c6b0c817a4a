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
import inspect
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar, Unpack

from surge.errors import PoolClosed
from surge.pool._core import Entry, PoolCore, Waiter
from surge.pool._keyed_core import KeyedCore
from surge.pool._options import FrontEnd, PoolOptions, callback_raised, close_failed, keyless

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
    """Everything of AsyncPool and AsyncKeyedPool but their constructors and hot
    paths: the acquire loop, waiting, checks, resets, returns and closes, once
    for both (``key`` is None for the plain pool; ``_ops`` takes it)."""

    # -- checkout -----------------------------------------------------------------------

    async def _acquire(
        self, key: K | None, timeout: float | None, got: Entry[R] | Waiter[R] | None
    ) -> R:
        """The general path, from the core's first answer ``got``."""
        if timeout is None:
            timeout = self._options.timeout
        deadline = None
        now = self._clock()
        while True:
            if self._core.garbage:
                try:
                    await self._dispose()
                except BaseException:  # cancelled while closing: what it holds goes back
                    self._give_back(got, key)
                    raise
            if isinstance(got, Entry):
                if self._check is None or await self._passes_check(got, now):
                    return got.resource
                now = self._clock()
                got = self._ops.acquire(key, now)
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
            got = self._ops.acquire(key, now)

    def _give_back(self, got: Entry[R] | Waiter[R] | None, key: K | None) -> None:
        """What a checkout cancelled between two steps holds goes back: an entry
        checked out to it and not used (no reset), a slot, a waiter."""
        now = self._clock()
        if isinstance(got, Entry):
            self._woke(self._core.release(got.resource, now))
        elif got is None:
            self._woke(self._ops.create_failed(key, now))
        else:
            self._woke(self._core.abandon(got, now))

    def _acquire_nowait(self, key: K | None) -> R | None:
        if self._check is not None:
            raise RuntimeError("acquire_nowait() cannot run check: use 'await acquire()'")
        entry = self._ops.take(key, self._clock())
        if self._core.garbage:
            asyncio.get_running_loop().create_task(self._dispose())
        return None if entry is None else entry.resource

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
                self._core.cancel(waiter, timed_out=True)
                raise self._timed_out(timeout, key) from None
        except BaseException:  # cancelled: hand on whatever was granted
            self._woke(self._core.abandon(waiter, self._clock()))
            raise
        if waiter.closed:
            raise PoolClosed("the pool was closed while waiting")
        return waiter.entry

    async def _create_in_slot(self, key: K | None) -> R:
        generation = self._core.generation
        try:
            resource: R = await _call(self._make, key)
        except BaseException:
            self._woke(self._ops.create_failed(key, self._clock()))
            raise
        now = self._clock()
        self._ops.created(key, resource, now, self._options.expires_at(now), generation)
        return resource

    async def _passes_check(self, entry: Entry[R], now: float) -> bool:
        assert self._check is not None
        if not self._options.wants_check(now, entry.idle_since):
            return True
        return await self._vetted(self._check, "check", entry.resource, now - entry.idle_since)

    async def _vetted(
        self, callback: Callable[..., Any], what: str, resource: R, *args: Any
    ) -> bool:
        """As the thread pools' (surge.pool._sync), awaited."""
        ok = False
        try:
            ok = await _call(callback, resource, *args) is not False
        except Exception:
            callback_raised(what, resource)
        finally:
            if not ok:
                await self.discard(resource)
        return ok

    # -- return -------------------------------------------------------------------------

    def _woke(self, waiter: Waiter[R] | None) -> None:
        """Wake whoever an operation granted: the one the plain core names, the
        ones the keyed core lists."""
        if waiter is not None:
            _wake(waiter)
        core = self._core
        if core.woken:
            for granted in core.take_woken():
                _wake(granted)

    async def release(self, resource: R) -> None:
        """Return a resource: to the oldest waiter if any, else to the idle set."""
        if self._inherited and self._drop_inherited(resource):
            return  # the parent's, in a forked child
        core = self._core
        if self._reset is not None:
            now = self._clock()
            if not core.retiring(resource, now) and not await self._vetted(  # retiring: no reset
                self._reset, "reset", resource
            ):
                return
        self._woke(core.release(resource, self._clock()))
        if core.garbage:
            await self._dispose()

    async def discard(self, resource: R) -> None:
        """Close a checked-out resource instead of returning it (it failed)."""
        if self._inherited and self._drop_inherited(resource):
            return  # the parent's, in a forked child
        self._woke(self._core.discard(resource, self._clock()))
        await self._dispose()

    def release_nowait(self, resource: R) -> None:
        """``release`` without an await, for a pool with no ``reset`` callback (as
        ``asyncio.Queue.put_nowait``): a caller on a hot path saves a coroutine.
        Resources it retires are closed by a task if ``close`` must be awaited."""
        if self._reset is not None:
            raise RuntimeError("release_nowait() cannot run reset: use 'await release()'")
        if self._inherited and self._drop_inherited(resource):
            return  # the parent's, in a forked child
        core = self._core
        waiter = core.release(resource, self._clock())
        if waiter is not None:  # the core's calls made here (not _woke): one Python
            _wake(waiter)  # call less per keep-alive request, the HTTP client's hot path
        if core.woken:
            for granted in core.take_woken():
                _wake(granted)
        if core.garbage:
            asyncio.get_running_loop().create_task(self._dispose())

    async def _dispose(self) -> None:
        core = self._core
        garbage = core.take_garbage() if core.garbage else []
        if not garbage or self._close is None:
            return
        done = 0  # the one being closed counts: a cancellation inside it leaves it
        try:
            for entry in garbage:
                done += 1
                try:
                    await _call(self._close, entry.resource)
                except Exception:
                    close_failed(entry.resource)
        except BaseException:  # cancelled: the rest waits in the core for the next one
            core.garbage += garbage[done:]
            raise

    # -- the whole pool -----------------------------------------------------------------

    async def expire(self) -> None:
        """Close resources idle longer than ``max_idle`` now."""
        self._core.expire(self._clock())
        self._woke(None)
        await self._dispose()

    async def clear(self) -> None:
        """Close every idle resource now; resources in use are unaffected."""
        self._ops.clear(self._clock())
        self._woke(None)
        await self._dispose()

    async def invalidate(self, generation: int | None = None) -> bool:
        """As :meth:`surge.pool.Pool.invalidate`."""
        moved: bool = self._ops.invalidate(self._clock(), generation)
        self._woke(None)
        await self._dispose()
        return moved

    async def close(self) -> None:
        """As :meth:`surge.pool.Pool.close`."""
        for waiter in self._core.close():
            _wake(waiter)
        self._woke(None)
        await self._dispose()

    def stats(self) -> dict[str, Any]:
        """Counters and gauges; see the README for the fields."""
        return self._core.stats()  # type: ignore[no-any-return]

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _AsyncCheckout(Generic[R]):
    """``async with pool.connection() as r``: released after the block, discarded
    if it raised (or was cancelled).  (``_AsyncKeyedCheckout`` differs in its
    acquire only.)"""

    __slots__ = ("_key", "_pool", "_resource", "_timeout")
    _resource: R

    def __init__(self, pool: Any, timeout: float | None, key: Any = None) -> None:
        self._pool = pool
        self._key = key
        self._timeout = timeout

    async def __aenter__(self) -> R:
        self._resource = await self._pool.acquire(self._timeout)
        return self._resource

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            await self._pool.release(self._resource)
        else:
            await self._pool.discard(self._resource)


class _AsyncKeyedCheckout(_AsyncCheckout[R]):
    """``async with pool.connection(key) as r``."""

    __slots__ = ()

    async def __aenter__(self) -> R:
        self._resource = await self._pool.acquire(self._key, self._timeout)
        return self._resource


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
        **options: Unpack[PoolOptions[R]],
    ) -> None:
        super().__init__(keyless(create), dict(options))
        self._core: PoolCore[R] = self._plain_core(max_size, max_overflow, _new_wake)

    async def acquire(self, timeout: float | None = None) -> R:
        """Check out a resource, waiting up to ``timeout`` (default: the pool's)."""
        core = self._core
        now = self._clock()
        got = core.acquire(now)
        if type(got) is Entry and now - got.idle_since < self._unchecked_below and not core.garbage:
            return got.resource  # the hot path: an idle resource, nothing else to do
        return await self._acquire(None, timeout, got)

    def acquire_nowait(self) -> R | None:
        """An idle resource at once, or None (then ``await acquire()``): never
        creates, waits or queues.  For a pool with no ``check`` callback."""
        return self._acquire_nowait(None)

    def connection(self, timeout: float | None = None) -> _AsyncCheckout[R]:
        """``async with pool.connection() as r:`` - returned after the block,
        discarded if it raised (or was cancelled)."""
        return _AsyncCheckout(self, timeout)

    async def __aenter__(self) -> AsyncPool[R]:
        return self


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
        **options: Unpack[PoolOptions[R]],
    ) -> None:
        super().__init__(create, dict(options))
        self._core: KeyedCore[K, R] = self._keyed_core(max_size, max_per_key, _new_wake)

    def _holds(self, key: K) -> bool:
        """Whether a resource of ``key`` exists or is being created (idle or in use):
        for the HTTP client's DNS look-ahead (not public: the front-ends share one
        public surface)."""
        core = self._core.cores.get(key)
        return core is not None and core.open > 0

    async def acquire(self, key: K, timeout: float | None = None) -> R:
        """Check out a resource for ``key``, waiting up to ``timeout`` (default: the pool's)."""
        core = self._core
        now = self._clock()
        got = core.acquire(key, now)
        if type(got) is Entry and now - got.idle_since < self._unchecked_below and not core.garbage:
            return got.resource  # the hot path: an idle resource, nothing else to do
        return await self._acquire(key, timeout, got)

    def acquire_nowait(self, key: K) -> R | None:
        """An idle resource of ``key`` at once, or None (then ``await acquire(key)``):
        never creates, waits or queues.  For a pool with no ``check`` callback."""
        return self._acquire_nowait(key)

    def connection(self, key: K, timeout: float | None = None) -> _AsyncCheckout[R]:
        """``async with pool.connection(key) as r:``, as :meth:`AsyncPool.connection`."""
        return _AsyncKeyedCheckout(self, timeout, key)

    async def __aenter__(self) -> AsyncKeyedPool[K, R]:
        return self
