"""Read deadlines for many exchanges, with one event-loop timer per time slot.

A request's read deadline was a ``loop.call_at`` timer armed when the request
was written and cancelled when its response completed. On uvloop that pair
costs ~3.4 us (measured on the 2-core development machine: a TimerHandle, a
context copy, a libuv timer started, stopped and closed) - about a tenth of the
whole CPU of a keep-alive request, spent on a timer that almost never fires.

Here deadlines are rounded up to a slot of ``resolution`` seconds (50 ms). Each
slot is a set of the exchanges due in it, with one loop timer for the whole
set; an exchange joins a set when it starts and leaves it when it ends
(~0.1 us for both). At 1,000 requests a second with a 30 s deadline that is
20 timers a second instead of 1,000. The price: a timeout fires up to
``resolution`` late, which is far inside what a timeout in seconds means (curl
and aiohttp check theirs on their own loop turns too).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Protocol


class Expirable(Protocol):
    def expire(self) -> None: ...


#: The default slot width, seconds.
RESOLUTION = 0.05
#: No deadline at all (httpx's ``Timeout(None)``, requests' ``timeout=None``).
_FOREVER = float("inf")


class Deadlines:
    """``slot = deadlines.add(exchange, deadline)``; ``slot.discard(exchange)`` when
    done. At the slot's end every exchange still in it has ``expire()`` called."""

    __slots__ = ("_loop", "_per_second", "_slots")

    def __init__(self, loop: asyncio.AbstractEventLoop, resolution: float = RESOLUTION) -> None:
        if resolution <= 0:
            raise ValueError(f"resolution must be positive, not {resolution}")
        self._loop = loop
        self._per_second = 1.0 / resolution
        self._slots: dict[int, set[Expirable]] = {}

    def add(self, exchange: Expirable, deadline: float) -> set[Expirable]:
        """Expire ``exchange`` at ``deadline`` (loop time, rounded up to a slot end)
        unless it leaves the returned set first.  An infinite ``deadline`` (a
        drop-in transport's "no limit") never expires: it joins no slot."""
        if deadline == _FOREVER:
            return set()
        # Never early: the slot after the one ``deadline`` falls in (a deadline
        # on a slot's very edge waits one slot more). int() of a positive float
        # floors it without the float modulo that ``//`` costs.
        slot = int(deadline * self._per_second) + 1
        members = self._slots.get(slot)
        if members is None:
            members = self._slots[slot] = set()
            self._loop.call_at(slot / self._per_second, self._fire, slot)
        members.add(exchange)
        return members

    def pending(self) -> int:
        """Exchanges waiting on a deadline (for tests and stats)."""
        return sum(len(members) for members in self._slots.values())

    def timers(self) -> int:
        """Loop timers armed (one per occupied slot)."""
        return len(self._slots)

    def _fire(self, slot: int) -> None:
        members = self._slots.pop(slot, None)
        if members:
            for exchange in list(members):  # expire() takes it out of the set
                if exchange in members:  # not finished by an earlier one's expiry
                    exchange.expire()


class TaskDeadline:
    """``with TaskDeadline(deadlines, when):`` - ``asyncio.timeout_at(when)`` on a slot.

    The current task is cancelled when the slot expires, and the block's
    ``CancelledError`` becomes ``TimeoutError``, with ``asyncio.timeout``'s rule
    for telling its own cancellation from anyone else's (``cancelling()`` /
    ``uncancel()``). For the connect phase of every new connection: a
    ``Timeout`` context manager and its timer handle were ~8% of the client's
    CPU over 10,000 hosts.
    """

    __slots__ = ("_cancelling", "_slot", "_task", "expired")

    def __init__(self, deadlines: Deadlines, when: float) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("TaskDeadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self.expired = False
        self._slot: set[Expirable] | None = deadlines.add(self, when)

    def expire(self) -> None:
        self._slot = None  # its slot is being emptied
        self.expired = True
        self._task.cancel()

    def __enter__(self) -> TaskDeadline:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._slot is not None:
            self._slot.discard(self)
            self._slot = None
        if (
            self.expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc
