"""A FIFO semaphore whose every operation is O(1): the handshake pacer's gate.

``asyncio.Semaphore`` (CPython 3.11) does O(waiters) work per operation:
``release`` walks the waiter deque from the front past every future already
woken, ``acquire`` asks ``any()`` over the waiters and removes its own future
with ``deque.remove``. Behind ``max_connecting`` (256) a bulk run keeps hundreds
of requests waiting for a handshake slot, so each connect paid for all of them:
profiling 10,000 simulated hosts at 1,000 in flight found ~138 ``Future.done()``
calls and ~60 us of CPU per host in ``Semaphore._wake_up_next`` alone.

Here a released slot goes straight to the oldest waiter that is still waiting
(no increment-then-race), and a cancelled waiter stays in the deque until a
release meets it at the front, so nothing is ever searched or removed from the
middle. Invariant: a waiter is queued only while no slot is free, so ``free > 0``
implies the queue holds nobody who could take it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class Gate:
    """``async with gate:`` - at most ``slots`` holders; waiters in arrival order."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a gate needs at least one slot, not {slots}")
        self._free = slots
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def free(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        """Futures queued, cancelled ones not yet passed over included."""
        return len(self._waiters)

    async def acquire(self) -> None:
        if self._free:  # free > 0: nobody waits (the invariant)
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted a slot, then cancelled before it ran: pass it on
            raise

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # a cancelled waiter is passed over, once
                waiter.set_result(None)  # the slot moves to it; ``free`` is unchanged
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
