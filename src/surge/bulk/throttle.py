"""``--auto-throttle``: each host's concurrency and delay adapt to its latency and
to its 429 and 503 answers, additive increase and multiplicative decrease
(AIMD), as TCP's congestion window does, with Scrapy's AutoThrottle delay.

The model, per host (the input URL's, as ``--rate-per-host`` keys it):

- A **window** W, the most of its requests in flight at once (a request holds
  one from before its pacing slot to its try's end).  It starts at 1 and grows
  on each good answer (a status below 400 whose latency shows no queue): by 1
  per answer up to a threshold (TCP's slow start: W doubles each round trip),
  by 1/W per answer above it (about 1 per round trip), never past the **cap**
  (``--per-host``, else :data:`DEFAULT_CAP`, Scrapy's
  ``CONCURRENT_REQUESTS_PER_DOMAIN``).
- A **congestion signal** halves W (at least 1) and sets the threshold there:
  a 429 or 503, a try that timed out or was reset (:data:`CONGESTION_ERRORS`),
  or an answer whose latency (request sent to first byte) exceeds
  :data:`QUEUE_FACTOR` x the least latency seen from the host plus
  :data:`QUEUE_SLACK_S` - the host queues what it is sent: it is slower than
  the load we put on it.  A host that serves one request at a time thus stays
  between W = 1 and 3, a host whose latency does not grow with its load grows to
  the cap.  (A slow start overshoots by about a round trip: the answer that
  shows a queue comes back after the window grew on the answers before it.)
  One halving per round: a signal from a request that started before the
  last halving is news of the load then, already answered, and ignored.
- A **delay** between the starts of its requests, after Scrapy's: with L the
  host's smoothed latency, the target is L / 2W - Scrapy's ``latency /
  AUTOTHROTTLE_TARGET_CONCURRENCY`` with twice the window as the target, so
  that a full window's requests go out spread over half a round trip, not in
  one burst, and the window, not the delay, bounds a host that answers well.
  A good answer moves the delay halfway to the target, never below it;
  another answer (a 404, a 500: often faster than real pages) never lowers
  it; a 429 or 503 doubles it, at least :data:`MIN_BACKOFF_S`, at most
  :data:`MAX_DELAY_S`, and holds the host that long from then on - so a host
  that keeps answering 429 at W = 1 sees each next request twice as late.  The
  delay is applied by the host pacer (surge.bulk.pacing), the one place that
  spaces a host's requests: as the least interval to its next slot, and a
  back-off as a hold, as a Retry-After is.
- **Retry-After** on a 429 or 503 holds the host's pacer back as long as it
  asks (at most ``--max-time``), for every input of the host: the pacer's rule,
  not this module's.

Bounds: 1 <= W <= cap; 0 <= delay <= :data:`MAX_DELAY_S`; the latencies are the
host's own.  Memory: an entry per host with a request in flight or waiting, and
the idle ones until the table passes ``max_hosts`` (then the idle are
forgotten, the sweep amortised as the pacer's): a host met again after that
starts over at W = 1, its pacer slot still kept.  The decisions use counts and
the latencies measured, never a timer of their own.
"""

from __future__ import annotations

import asyncio
from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from surge.bulk.pacing import HostPacer
    from surge.http.timings import Timings

#: The window's cap when ``--per-host`` is not given (Scrapy's default
#: CONCURRENT_REQUESTS_PER_DOMAIN).
DEFAULT_CAP: Final = 8
#: A latency above this many times the host's least, plus QUEUE_SLACK_S, is a queue.
QUEUE_FACTOR: Final = 2.0
#: Seconds of latency noise never taken for a queue (a busy client's event loop
#: reads a first byte late; a loopback host answers in well under a millisecond).
QUEUE_SLACK_S: Final = 0.05
#: The least delay a 429 or 503 sets, seconds.
MIN_BACKOFF_S: Final = 0.25
#: The most delay between a host's requests, seconds (Scrapy's AUTOTHROTTLE_MAX_DELAY).
MAX_DELAY_S: Final = 60.0
#: Statuses that say the host is overloaded.
CONGESTION_STATUSES: Final = frozenset({429, 503})
#: Error classes of a try that say the host (or the way to it) is overloaded.
CONGESTION_ERRORS: Final = frozenset({"connect_timeout", "read_timeout", "connection_reset"})
#: How much of a new latency the smoothed one takes (TCP's SRTT gain, 1/8).
_GAIN: Final = 0.125


class _Host:
    __slots__ = (
        "delay",
        "epoch",
        "in_flight",
        "least",
        "smoothed",
        "threshold",
        "waiters",
        "window",
    )

    def __init__(self, cap: int) -> None:
        self.window = 1.0
        self.threshold = float(cap)
        self.delay = 0.0
        self.in_flight = 0
        self.epoch = 0  # halvings so far: a signal counts if its request began after the last
        self.least: float | None = None  # the least latency seen, seconds
        self.smoothed: float | None = None
        self.waiters: deque[asyncio.Future[None]] = deque()


class Ticket:
    """A request's place in its host's window, from :meth:`AutoThrottle.acquire`;
    :meth:`end` gives it back."""

    __slots__ = ("entry", "epoch", "host", "throttle")

    def __init__(self, throttle: AutoThrottle, host: str, entry: _Host) -> None:
        self.throttle = throttle
        self.host = host
        self.entry = entry
        self.epoch = entry.epoch

    @property
    def delay(self) -> float:
        """The least seconds between its host's request starts, now."""
        return self.entry.delay

    def end(
        self,
        status: int | None = None,
        timings: Timings | None = None,
        error_class: str | None = None,
    ) -> None:
        """Its try ended: as :meth:`AutoThrottle.done`."""
        self.throttle.done(self, status, timings, error_class)


class AutoThrottle:
    """Each host's window and delay (see the module's docstring)."""

    def __init__(
        self, cap: int | None = None, pacer: HostPacer | None = None, *, max_hosts: int = 65_536
    ) -> None:
        self.cap = DEFAULT_CAP if cap is None else cap
        if self.cap < 1:
            raise ValueError(f"cap must be at least 1, not {self.cap!r}")
        #: Where a back-off holds the host (the run's host pacer); None: nowhere
        #: but the delay between starts.
        self.pacer = pacer
        self.max_hosts = max_hosts
        self._hosts: dict[str, _Host] = {}
        self._limit = max_hosts
        self.waits = 0  # requests that waited for room in their host's window
        self.waited_s = 0.0  # ... and how long, in all

    async def acquire(self, host: str) -> Ticket:
        """Wait for room in ``host``'s window; the ticket goes back to :meth:`done`."""
        entry = self._hosts.get(host)
        if entry is None:
            if len(self._hosts) >= self._limit:
                self._forget()
            entry = self._hosts[host] = _Host(self.cap)
        if entry.in_flight < int(entry.window) and not entry.waiters:
            entry.in_flight += 1
            return Ticket(self, host, entry)
        began = perf_counter()
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry.waiters.append(waiting)
        try:
            await waiting  # done() counted it in
        except BaseException:
            if waiting.done() and not waiting.cancelled():
                self._leave(entry)  # it had room already: give it to the next
            elif waiting in entry.waiters:  # (done() may have passed it by already)
                entry.waiters.remove(waiting)
            raise
        self.waits += 1
        self.waited_s += perf_counter() - began
        return Ticket(self, host, entry)

    def done(
        self,
        ticket: Ticket,
        status: int | None = None,
        timings: Timings | None = None,
        error_class: str | None = None,
    ) -> None:
        """The ticket's try ended: with a response of ``status``, or with
        ``error_class`` (None for both: it ended without news, e.g. cancelled)."""
        entry = ticket.entry
        latency = _latency(timings) if status is not None and error_class is None else None
        if latency is not None:
            least = entry.least
            if least is None or latency < least:
                entry.least = least = latency
            smoothed = entry.smoothed
            entry.smoothed = (
                latency if smoothed is None else smoothed + _GAIN * (latency - smoothed)
            )
        if status in CONGESTION_STATUSES or error_class in CONGESTION_ERRORS:
            self._halve(entry, ticket, backoff=status in CONGESTION_STATUSES)
        elif status is not None and error_class is None:
            target = _target(entry)
            if status >= 400:
                entry.delay = max(entry.delay, target)  # an error page never speeds it up
            elif (
                latency is not None
                and latency > QUEUE_FACTOR * (entry.least or 0.0) + QUEUE_SLACK_S
            ):
                self._halve(entry, ticket, backoff=False)
            else:
                if entry.window < entry.threshold:
                    entry.window = min(float(self.cap), entry.window + 1.0)
                else:
                    entry.window = min(float(self.cap), entry.window + 1.0 / entry.window)
                entry.delay = max(target, (entry.delay + target) / 2)
        self._leave(entry)

    def _halve(self, entry: _Host, ticket: Ticket, *, backoff: bool) -> None:
        if ticket.epoch != entry.epoch:
            return  # began before the last halving: that load was answered already
        entry.epoch += 1
        entry.window = max(1.0, entry.window / 2)
        entry.threshold = entry.window
        target = _target(entry)
        if backoff:  # the host said so: back off in time too, from now
            entry.delay = min(MAX_DELAY_S, max(2 * entry.delay, MIN_BACKOFF_S, target))
            if self.pacer is not None:
                self.pacer.hold(ticket.host, entry.delay)
        else:
            entry.delay = min(MAX_DELAY_S, max(entry.delay, target))

    def _leave(self, entry: _Host) -> None:
        """One request of ``entry`` ended: let in those the window has room for."""
        entry.in_flight -= 1
        waiters = entry.waiters
        while waiters and entry.in_flight < int(entry.window):
            waiting = waiters.popleft()
            if not waiting.done():
                entry.in_flight += 1
                waiting.set_result(None)

    def _forget(self) -> None:
        self._hosts = {
            host: entry for host, entry in self._hosts.items() if entry.in_flight or entry.waiters
        }
        self._limit = max(self.max_hosts, 2 * len(self._hosts))

    def window(self, host: str) -> float | None:
        """``host``'s window now (None: not in the table)."""
        entry = self._hosts.get(host)
        return None if entry is None else entry.window

    def __len__(self) -> int:
        return len(self._hosts)


def _target(entry: _Host) -> float:
    """The delay ``entry``'s answers lead to: its window spread over half its latency."""
    return (entry.smoothed or 0.0) / (2 * entry.window)


def _latency(timings: Timings | None) -> float | None:
    """Request sent to first byte (the last hop's), seconds; None if unknown."""
    if timings is None or timings.sent is None or timings.first_byte is None:
        return None
    return max(0.0, timings.first_byte - timings.sent)
