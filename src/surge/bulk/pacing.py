"""Pacing: ``--rate-per-host`` (requests to one host spaced evenly, and held back
as long as the host asks: Retry-After; a robots.txt's Crawl-delay spaces its
host further, and ``--auto-throttle``'s delay and back-off, surge.bulk.throttle)
and ``--rate`` (every request of the run spaced evenly, curl's
``--rate``: the same slots, under one key for the whole run, :data:`RUN`).

Each host has the time its next request may start; a request takes that slot
and moves it on by ``1 / rate``, so a burst of inputs for one host goes out at
the rate, in input order, while other hosts' inputs go on.  A 429 or 503 with
Retry-After moves the host's slot to then.  Hosts whose slot is in the past
constrain nothing and are forgotten when the table grows past ``max_hosts``:
its size is bounded by the hosts with a wait still ahead, not by the hosts met.
The hosts' own intervals (:meth:`HostPacer.space`, a Crawl-delay) are kept on
the same terms, forgotten with their host's slot: the caller that knows one
(surge.bulk.robots) gives it again with each input of its host.

Smooth, not bursty: a slot is a time, not a token saved up, so a pacer that
was idle sends one request at once and the next an interval later - never a
burst of the tokens an idle bucket would have kept.  A request starts at its
slot or later, never earlier, and never sooner than an interval after the
host's last start (:data:`EARLY_S` aside, a timer's granularity): when a
stalled event loop wakes several waiters late at once, they go out an interval
apart from then, not together.  So any window of T seconds holds at most
T x rate + 1 starts, however late the loop ran.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Final

#: The one key of a pacer that spaces every request of the run (``--rate``).
RUN: Final = ""

#: How much sooner than an interval after the last start a request may still
#: go: a timer's granularity (libuv's is 1 ms), so that a waiter woken a
#: fraction early does not sleep again for that fraction.
EARLY_S: Final = 0.001

#: ``--rate``'s units, as curl's: the seconds each names.
RATE_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class HostPacer:
    """Paces the requests to each host (see the module's docstring)."""

    def __init__(
        self,
        rate: float | None,
        *,
        max_hosts: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # rate None: no spacing of its own; hosts are spaced by what they ask
        # (space(), hold()) only.
        if rate is not None and not rate > 0:
            raise ValueError(f"rate must be positive, not {rate!r}")
        self.interval = 0.0 if rate is None else 1.0 / rate
        self.max_hosts = max_hosts
        self.clock = clock
        self._next: dict[str, float] = {}
        self._own: dict[str, float] = {}  # hosts spaced more than the rate (Crawl-delay)
        self._started: dict[str, float] = {}  # each paced host's last start
        self._limit = max_hosts  # the size that makes the table forget (amortised)
        self.waits = 0  # requests that had to wait for their slot
        self.waited_s = 0.0  # ... and the seconds they were told to, in all

    def slot(self, host: str, at_least: float = 0.0) -> float:
        """Take ``host``'s next slot: the seconds to wait before sending (0: now).
        ``at_least``: seconds the slot after it is at least away (``--auto-throttle``'s
        delay, surge.bulk.throttle), if more than the host's interval."""
        now = self.clock()
        start = max(now, self._next.get(host, now))
        interval = self._interval(host, at_least)
        if interval <= 0 and start <= now:
            return 0.0  # unpaced, and not held: nothing to keep
        self._next[host] = start + interval
        if len(self._next) > self._limit:
            self._forget(now)
        return start - now

    def _interval(self, host: str, at_least: float) -> float:
        """The spacing of ``host``'s requests: its own (a Crawl-delay) or the
        rate's, or ``at_least`` if more."""
        interval = self._own.get(host, self.interval) if self._own else self.interval
        return at_least if at_least > interval else interval

    def space(self, host: str, seconds: float) -> None:
        """Space ``host``'s requests at least ``seconds`` apart (a Crawl-delay),
        until its slot is forgotten (see the module's docstring)."""
        if seconds > self.interval:
            own = self._own
            if len(own) >= self._limit and host not in own:
                self._forget(self.clock())  # before: its own entry stays
                own = self._own
            own[host] = seconds

    async def wait(self, host: str, at_least: float = 0.0) -> None:
        """Wait for ``host``'s next slot, then until an interval after its last
        start (a waiter woken late, with others, by a stalled loop)."""
        delay = self.slot(host, at_least)
        if delay > 0:
            self.waits += 1
            self.waited_s += delay
            await asyncio.sleep(delay)
        interval = self._interval(host, at_least)
        if interval <= 0:
            return  # unpaced: nothing to space from
        started = self._started
        while True:
            now = self.clock()
            last = started.get(host)
            if last is None or now >= last + interval - EARLY_S:
                break
            await asyncio.sleep(last + interval - now)
        started[host] = now

    def hold(self, host: str, seconds: float) -> None:
        """The host asked for ``seconds`` of quiet (Retry-After)."""
        until = self.clock() + seconds
        if until > self._next.get(host, 0.0):
            self._next[host] = until

    def _forget(self, now: float) -> None:
        longest = max(self.interval, max(self._own.values(), default=0.0))
        self._next = nexts = {host: due for host, due in self._next.items() if due > now}
        if self._own:  # a host's own interval goes with its slot
            self._own = {host: seconds for host, seconds in self._own.items() if host in nexts}
        # a last start matters while its host has a slot ahead, or for an interval
        self._started = {
            host: t for host, t in self._started.items() if host in nexts or now - t < longest
        }
        # Every host still waiting stays; the next sweep waits for as many more
        # again, so that sweeping costs O(1) a request however many wait.
        self._limit = max(self.max_hosts, 2 * len(self._next))

    def __len__(self) -> int:
        return len(self._next)


def parse_rate(text: str) -> float:
    """curl's ``--rate N/U``: requests a second.  U is ``s``, ``m``, ``h`` or ``d``
    (a second, minute, hour, day), and N/h without a unit, as curl reads it.
    Raises ValueError for anything else."""
    number, slash, unit = text.strip().partition("/")
    seconds = RATE_UNITS.get(unit.strip().lower() if slash else "h")
    try:
        n = float(number)
    except ValueError:
        n = math.nan
    if seconds is None or not (0 < n < math.inf):
        raise ValueError(
            f"--rate {text!r}: not a rate; give N/s, N/m, N/h or N/d (N/h without a unit, "
            "as curl's --rate)"
        )
    return n / seconds
