"""What a bulk run's trace page shows, gathered as records complete, in bounded memory.

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
from typing import Any

from surge.histogram import LogHistogram
from surge.http.timings import Timings
from surge.trace.phases import PHASES, present, segments

#: Timeline buckets at most; beyond, buckets double in width (pairs merge).
MAX_BUCKETS = 1000
#: The first bucket width, seconds: a run shorter than a second gets 1 ms buckets.
FIRST_WIDTH = 0.001
#: Requests drawn in the waterfall, by default; a sample beyond.
DEFAULT_ROWS = 2000
#: The slowest requests, listed apart from the sample.
SLOWEST = 20


class Timeline:
    """Starts and completions over time, in buckets of a width that doubles as needed.

    Per bucket: starts, completions (failed ones apart), and the sums of their
    times.  From these the area under "requests in flight" over bucket *i* is
    exact: ``n_i * w + sum over starts in i of (B_i - t) - sum over ends in i of
    (B_i - t)``, where ``n_i`` is the number in flight when the bucket opens and
    ``B_i`` its closing time; merging two buckets adds their fields.
    """

    def __init__(self, *, max_buckets: int = MAX_BUCKETS, width: float = FIRST_WIDTH) -> None:
        self.max_buckets = max_buckets
        self.width = width
        # per bucket: [starts, start time sum, ends, end time sum, failed ends]
        self.buckets: list[list[float]] = []

    def _bucket(self, t: float) -> list[float]:
        index = int(t / self.width)
        while index >= self.max_buckets:
            self._halve()
            index //= 2
        buckets = self.buckets
        if len(buckets) <= index:
            buckets.extend([0, 0.0, 0, 0.0, 0] for _ in range(index + 1 - len(buckets)))
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

    def series(self, max_points: int = 150) -> dict[str, Any]:
        """Per display bucket (adjacent buckets merged, exactly, down to at most
        ``max_points``): mean requests in flight, completions and failures per second."""
        group = max(1, -(-len(self.buckets) // max_points))
        w = self.width * group
        merged = _merged(self.buckets, group)
        in_flight, done, failed = [], [], []
        open_now = 0.0
        for i, (starts, start_sum, ends, end_sum, fails) in enumerate(merged):
            closes = (i + 1) * w
            area = open_now * w + (starts * closes - start_sum) - (ends * closes - end_sum)
            in_flight.append(round(area / w, 3))
            done.append(round(ends / w, 3))
            failed.append(round(fails / w, 3))
            open_now += starts - ends
        return {"width_s": w, "in_flight": in_flight, "done_per_s": done, "failed_per_s": failed}


def _merged(buckets: list[list[float]], group: int) -> list[list[float]]:
    """Every ``group`` adjacent buckets as one (all their fields add up)."""
    return [
        [sum(b[k] for b in buckets[i : i + group]) for k in range(5)]
        for i in range(0, len(buckets), group)
    ]


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
    """Give it each request as its record is made; then :meth:`data` for the page.

    ``add`` is what :mod:`surge.bulk.engine` calls for every record when a run is
    traced (``FetchOptions.trace``); its cost, a few microseconds, is paid only then.
    """

    def __init__(self, *, rows: int = DEFAULT_ROWS, seed: int = 0, title: str = "") -> None:
        if rows < 1:
            raise ValueError(f"rows must be at least 1, not {rows}")
        self.title = title
        self.clock0 = time.perf_counter()  # the run's zero on the request clock
        self.wall0 = time.time()
        self.max_rows = rows
        self._random = random.Random(seed)
        self.rows: list[Row] = []
        self._slowest: list[tuple[float, int, Row]] = []  # a min-heap of the slowest
        self.count = 0
        self.busy_s = 0.0  # the sum of all requests' durations
        self.last_end = 0.0
        self.phases = [LogHistogram() for _ in PHASES]
        self.statuses: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.timeline = Timeline()

    def add(
        self, record: Mapping[str, Any], start: float, end: float, timings: Timings | None
    ) -> None:
        """One finished request: its record, when it started and ended (perf_counter
        seconds), and its last attempt's timings."""
        tls = str(record.get("final_url") or record["url"]).startswith("https:")
        parts = segments(start, end, timings, tls=tls)
        if parts:
            end = parts[-1][2]
        spent = [0.0] * len(PHASES)
        for phase, begin, finish in parts:
            spent[phase] += finish - begin
        histograms = self.phases
        for index, happened in enumerate(present(timings, tls=tls)):
            seconds = spent[index]
            if seconds > 0.0 or happened:
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
            url=str(record["url"]),
            status=status,
            error=error,
            detail=(str(record["error_detail"])[:300] if record.get("error_detail") else None),
            bytes=int(record.get("bytes") or 0),
            attempts=int(record.get("attempts") or 1),
            start_ms=round(rel_start * 1000.0, 3),
            parts=[(p, round((b - a) * 1000.0, 3)) for p, a, b in parts],
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

    def data(self) -> dict[str, Any]:
        """Everything the page draws, as JSON-ready values."""
        wall = self.last_end
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
            "started": self.wall0,
            "requests": self.count,
            "wall_s": round(wall, 6),
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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
