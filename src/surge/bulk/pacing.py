"""``--rate-per-host``: requests to one host spaced evenly, and held back as long
as the host asks (Retry-After).

Each host has the time its next request may start; a request takes that slot
and moves it on by ``1 / rate``, so a burst of inputs for one host goes out at
the rate, in input order, while other hosts' inputs go on.  A 429 or 503 with
Retry-After moves the host's slot to then.  Hosts whose slot is in the past
constrain nothing and are forgotten when the table grows past ``max_hosts``:
its size is bounded by the hosts with a wait still ahead, not by the hosts met.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class HostPacer:
    """Paces the requests to each host (see the module's docstring)."""

    def __init__(
        self,
        rate: float,
        *,
        max_hosts: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be positive, not {rate!r}")
        self.interval = 1.0 / rate
        self.max_hosts = max_hosts
        self.clock = clock
        self._next: dict[str, float] = {}
        self._limit = max_hosts  # the size that makes the table forget (amortised)
        self.waits = 0  # requests that had to wait for their slot

    def slot(self, host: str) -> float:
        """Take ``host``'s next slot: the seconds to wait before sending (0: now)."""
        now = self.clock()
        start = max(now, self._next.get(host, now))
        self._next[host] = start + self.interval
        if len(self._next) > self._limit:
            self._forget(now)
        return start - now

    async def wait(self, host: str) -> None:
        delay = self.slot(host)
        if delay > 0:
            self.waits += 1
            await asyncio.sleep(delay)

    def hold(self, host: str, seconds: float) -> None:
        """The host asked for ``seconds`` of quiet (Retry-After)."""
        until = self.clock() + seconds
        if until > self._next.get(host, 0.0):
            self._next[host] = until

    def _forget(self, now: float) -> None:
        self._next = {host: due for host, due in self._next.items() if due > now}
        # Every host still waiting stays; the next sweep waits for as many more
        # again, so that sweeping costs O(1) a request however many wait.
        self._limit = max(self.max_hosts, 2 * len(self._next))

    def __len__(self) -> int:
        return len(self._next)
