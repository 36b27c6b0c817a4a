"""What a trace page shows, gathered as requests complete, in bounded memory: a
bulk run's (the engine gives it every record) or a client's (you give it each
response or error).

Three views, each sized independently of the number of requests:

- the phase summary counts *every* request: time per phase summed, and
  percentiles from log-scale histograms (:class:`~surge.histogram.LogHistogram`);
- the timeline counts every request too: starts and completions in time buckets
  that double in width whenever the run outgrows :data:`MAX_BUCKETS` (exact
  merges: a bucket keeps counts and sums of times, so the mean number of
  requests in flight over any bucket is exact, not sampled);
- the waterfall draws one row per request up to ``rows`` requests, and beyond
  that a uniform random sample of ``rows`` of them (reservoir sampling, seeded,
  so the same run gives the same page), plus the slowest requests listed apart.
  The page says which.
"""

from __future__ import annotations

import heapq
import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from surge.histogram import LogHistogram
from surge.http.timings import Timings
from surge.trace.phases import PHASES, Segment, hops, present
from surge.trace.redact import safe_text, safe_url
from surge.trace.tracer import DEFAULT_ROWS

if TYPE_CHECKING:
    from surge.errors import RequestError
    from surge.http.response import Response

#: Timeline buckets at most; beyond, buckets double in width (pairs merge).
MAX_BUCKETS = 1000
#: The first bucket width, seconds: a run shorter than a second gets 1 ms buckets.
FIRST_WIDTH = 0.001
#: The slowest requests, listed apart from the sample.
SLOWEST = 20


class Timeline:
    """Starts and completions over time, in buckets of a width that doubles as needed.

    Per bucket: starts, completions (failed ones apart), and the sums of their
    times.  From these the area under "requests in flight" over bucket *i* is
    exact: ``n_i * w + sum over starts in i of (B_i - t) - sum over ends in i of
    (B_i - t)``, where ``n_i`` is the number in flight when the bucket opens and
    ``B_i`` its closing time; merging two buckets adds their fields.  Also the
    worst event-loop lag seen in the bucket (merging keeps the larger).
    """

    def __init__(self, *, max_buckets: int = MAX_BUCKETS, width: float = FIRST_WIDTH) -> None:
        self.max_buckets = max_buckets
        self.width = width
        # per bucket: [starts, start time sum, ends, end time sum, failed ends, max lag]
        self.buckets: list[list[float]] = []
        self.last = 0.0  # the latest time seen

    def _bucket(self, t: float) -> list[float]:
        index = int(t / self.width)
        while index >= self.max_buckets:
            self._halve()
            index //= 2
        buckets = self.buckets
        if len(buckets) <= index:
            buckets.extend([0, 0.0, 0, 0.0, 0, 0.0] for _ in range(index + 1 - len(buckets)))
        return buckets[index]

    def _halve(self) -> None:
        self.buckets = _merged(self.buckets, 2)
        self.width *= 2

    def add(self, start: float, end: float, failed: bool) -> None:
        """One request in flight over ``[start, end]`` (seconds since the run began)."""
        if start < 0.0:
            start = 0.0
        if end < start:
            end = start
        e = self._bucket(end)  # widens first, so that the start lands in a final bucket
        b = self.buckets[int(start / self.width)]
        b[0] += 1
        b[1] += start
        e[2] += 1
        e[3] += end
        if failed:
            e[4] += 1
        if end > self.last:
            self.last = end

    def lag(self, when: float, lag: float) -> None:
        """The event loop ran a timer ``lag`` seconds late at ``when``."""
        if when < 0.0:
            return
        bucket = self._bucket(when)
        if lag > bucket[5]:
            bucket[5] = lag

    def series(self, max_points: int = 150) -> dict[str, Any]:
        """Per display bucket (adjacent buckets merged, exactly, down to at most
        ``max_points``): mean requests in flight, completions and failures per
        second, and the worst loop lag (ms).  The last bucket is measured over the
        part of it the run lasted."""
        group = max(1, -(-len(self.buckets) // max_points))
        w = self.width * group
        merged = _merged(self.buckets, group)
        in_flight, done, failed, lag = [], [], [], []
        open_now = 0.0
        for i, (starts, start_sum, ends, end_sum, fails, worst) in enumerate(merged):
            closes = (i + 1) * w
            area = open_now * w + (starts * closes - start_sum) - (ends * closes - end_sum)
            # the run's last moment may fall inside the last bucket: rates over its part
            span = min(w, self.last - i * w) if i == len(merged) - 1 else w
            span = span if span >= w / 100 else w  # too thin a part to take a mean over
            still_open = open_now + starts - ends  # 0 once every request has ended
            in_flight.append(round((area - still_open * (w - span)) / span, 3))
            # a rate over a thin last part would be a spike of noise: per bucket
            per = span if span >= w / 2 else w
            done.append(round(ends / per, 3))
            failed.append(round(fails / per, 3))
            lag.append(round(worst * 1000.0, 3))
            open_now += starts - ends
        return {
            "width_s": w,
            "in_flight": in_flight,
            "done_per_s": done,
            "failed_per_s": failed,
            "lag_ms": lag,
        }


def _merged(buckets: list[list[float]], group: int) -> list[list[float]]:
    """Every ``group`` adjacent buckets as one: counts and sums add up, the lag is
    the larger."""
    out = []
    for i in range(0, len(buckets), group):
        chunk = buckets[i : i + group]
        merged = [sum(b[k] for b in chunk) for k in range(5)]
        merged.append(max(b[5] for b in chunk))
        out.append(merged)
    return out


@dataclass
class Row:
    """One request as the waterfall draws it (times in ms since the run began)."""

    line: int
    url: str
    status: int | None
    error: str | None
    detail: str | None
    bytes: int
    attempts: int
    start_ms: float
    parts: list[tuple[int, float]]  # (phase, duration ms), consecutive from start_ms

    @property
    def total_ms(self) -> float:
        return sum(d for _, d in self.parts)

    def as_json(self) -> list[Any]:
        flat: list[Any] = []
        for phase, duration in self.parts:
            flat += [phase, duration]
        return [
            self.line,
            self.url,
            self.status,
            self.error,
            self.detail,
            self.bytes,
            self.attempts,
            self.start_ms,
            flat,
        ]


class TraceRecorder:
    """Give it each request as it ends; then :meth:`data` for the page
    (:func:`surge.trace.write_html` writes it).

    A bulk run gives it every record: ``surge.fetch(urls, trace=recorder)``
    (``FetchOptions.trace``; :meth:`add`, ~25 us a record here, is paid only
    then).  Requests made with a client of your own (``surge.http.AsyncClient``
    or ``Client``) are given one by one, each response to :meth:`add_response`
    and each failure to :meth:`add_error`::

        recorder = TraceRecorder(title="my script")
        async with AsyncClient() as client:
            for url in urls:
                try:
                    response = recorder.add_response(await client.get(url))
                except RequestError as error:
                    recorder.add_error(error)
        write_html(recorder.data(), "trace.html")

    A row's time runs from when the request was made (``client.get`` called)
    to its last byte, or, for a failure, to the :meth:`add_error` call: call it
    where the error is caught.  The requests may overlap (``asyncio.gather``).
    """

    def __init__(
        self, *, rows: int = DEFAULT_ROWS, seed: int = 0, title: str = "", note: str = ""
    ) -> None:
        if rows < 1:
            raise ValueError(f"rows must be at least 1, not {rows}")
        self.title = title
        self.note = note  # shown under the title (what the page covers)
        self.clock0 = time.perf_counter()  # the run's zero on the request clock
        self.wall0 = time.time()
        self.max_rows = rows
        self._random = random.Random(seed)
        self.rows: list[Row] = []
        self._slowest: list[tuple[float, int, Row]] = []  # a min-heap of the slowest
        self.count = 0
        self.busy_s = 0.0  # the sum of all requests' durations
        self.last_end = 0.0
        self.first_start: float | None = None
        self.phases = [LogHistogram() for _ in PHASES]
        self.statuses: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.timeline = Timeline()
        self.lag = LogHistogram()  # the event loop's lateness, ms

    def add(
        self,
        record: Mapping[str, Any],
        start: float,
        end: float,
        timings: Timings | None,
        retried: bool = False,
    ) -> None:
        """One finished request: its record, when it started and ended (perf_counter
        seconds), its last attempt's timings, whether earlier attempts came first."""
        url = str(record.get("final_url") or record["url"])
        first, *later = hops(start, end, timings, url=url, retried=retried)
        parts = first.parts
        happened = present(first.timings, tls=first.tls)
        for hop in later:  # a followed redirect's hops; most requests have none
            parts = parts + hop.parts
            more = present(hop.timings, tls=hop.tls)
            happened = [a or b for a, b in zip(happened, more, strict=True)]
        if parts:
            end = parts[-1][2]
        spent = [0.0] * len(PHASES)
        for phase, begin, finish in parts:
            spent[phase] += finish - begin
        histograms = self.phases
        for index, seconds in enumerate(spent):
            if seconds > 0.0 or happened[index]:
                histograms[index].add(seconds * 1000.0)
        error = record.get("error")
        status = record.get("status")
        if error is not None:
            self.errors[error] += 1
        elif status is not None:
            self.statuses[status] += 1
        rel_start = start - self.clock0
        rel_end = end - self.clock0
        self.timeline.add(rel_start, rel_end, error is not None)
        self.busy_s += end - start
        if rel_end > self.last_end:
            self.last_end = rel_end
        if self.first_start is None or rel_start < self.first_start:
            self.first_start = rel_start
        self.count += 1

        # Reservoir sampling: the n-th request replaces a random row with
        # probability rows/n, so every request is drawn with the same chance.
        slot = len(self.rows)
        if slot >= self.max_rows:
            slot = int(self._random.random() * self.count)
        keep = slot < self.max_rows
        slow = len(self._slowest) < SLOWEST or end - start > self._slowest[0][0]
        if not (keep or slow):
            return
        row = Row(
            line=int(record.get("line") or self.count),
            url=safe_url(str(record["url"])),
            status=status,
            error=error,
            detail=(
                safe_text(str(record["error_detail"]))[:300] if record.get("error_detail") else None
            ),
            bytes=int(record.get("bytes") or 0),
            attempts=int(record.get("attempts") or 1),
            start_ms=round(rel_start * 1000.0, 3),
            parts=_merged_parts(parts),
        )
        if keep:
            if slot == len(self.rows):
                self.rows.append(row)
            else:
                self.rows[slot] = row
        if slow:
            item = (end - start, self.count, row)
            if len(self._slowest) < SLOWEST:
                heapq.heappush(self._slowest, item)
            else:
                heapq.heapreplace(self._slowest, item)

    def add_response(self, response: Response) -> Response:
        """A client's response, as one row (every hop of its redirects), from its
        ``timings``; returns the response."""
        done = response.timings.done
        self._add_outcome(response, None, done if done is not None else time.perf_counter())
        return response

    def add_error(self, error: RequestError) -> None:
        """A client's failed request (a :class:`~surge.errors.RequestError`), as
        one row ending in the phase it failed in, now."""
        self._add_outcome(error, error, time.perf_counter())

    def _add_outcome(
        self, outcome: Response | RequestError, error: RequestError | None, end: float
    ) -> None:
        # Response and RequestError carry the same fields under the same names
        # (a failure's are what was known of it): the record add() reads.
        timings: Timings | None = outcome.timings
        record = {
            # The URL asked for (a response's own ``url`` is the one that answered).
            "url": getattr(outcome, "requested_url", None) or outcome.url or "",
            "final_url": outcome.final_url,
            "status": outcome.status,
            "error": None if error is None else error.error_class,
            "error_detail": None if error is None else error.detail,
            "bytes": outcome.bytes,
            "attempts": outcome.attempts,
        }
        start = timings.queued if timings is not None else end
        self.add(record, start, end, timings, outcome.attempts > 1)

    def loop_lag(self, when: float, lag: float) -> None:
        """How late the run's event loop ran a timer (see surge.trace.tracer)."""
        self.lag.add(lag * 1000.0)
        self.timeline.lag(when - self.clock0, lag)

    def data(self) -> dict[str, Any]:
        """Everything the page draws, as JSON-ready values."""
        first = self.first_start or 0.0
        wall = self.last_end - first
        total_ms = self.busy_s * 1000.0
        phases = []
        for name, hist in zip(PHASES, self.phases, strict=True):
            phases.append(
                {
                    "phase": name,
                    "requests": hist.count,
                    "total_ms": round(hist.total, 3),
                    "share": round(hist.total / total_ms, 4) if total_ms > 0 else 0.0,
                    "p50_ms": _round(hist.percentile(50)),
                    "p90_ms": _round(hist.percentile(90)),
                    "p99_ms": _round(hist.percentile(99)),
                    "max_ms": _round(hist.max) if hist.count else None,
                }
            )
        sampled = self.count > len(self.rows)
        rows = sorted(self.rows, key=lambda r: (r.start_ms, r.line))
        slowest = sorted(self._slowest, key=lambda item: -item[0])
        return {
            "title": self.title,
            "note": self.note,
            "started": self.wall0,
            "requests": self.count,
            "first_start_s": round(first, 6),
            "wall_s": round(wall, 6),
            "loop_lag": {
                "samples": self.lag.count,
                "p50_ms": _round(self.lag.percentile(50)),
                "p99_ms": _round(self.lag.percentile(99)),
                "max_ms": _round(self.lag.max) if self.lag.count else None,
            },
            "mean_in_flight": round(self.busy_s / wall, 3) if wall > 0 else 0.0,
            "phases": phases,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "errors": dict(self.errors.most_common()),
            "timeline": self.timeline.series(),
            "sample": {
                "drawn": len(rows),
                "of": self.count,
                "how": (
                    f"a uniform random sample of {len(rows):,} of the {self.count:,} requests"
                    " (reservoir sampling); the summary and the timeline count every request"
                    if sampled
                    else "every request"
                ),
            },
            "phase_names": list(PHASES),
            "rows": [r.as_json() for r in rows],
            "slowest": [item[2].as_json() for item in slowest],
        }


def _merged_parts(parts: list[Segment]) -> list[tuple[int, float]]:
    """(phase, ms) runs, adjacent runs of one phase (across hops) as one."""
    out: list[tuple[int, float]] = []
    for phase, begin, finish in parts:
        ms = (finish - begin) * 1000.0
        if out and out[-1][0] == phase:
            out[-1] = (phase, out[-1][1] + ms)
        else:
            out.append((phase, ms))
    return [(phase, round(ms, 3)) for phase, ms in out]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
