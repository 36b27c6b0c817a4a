"""Latency percentiles in constant memory: a log-scale histogram.

A million records need no list of a million latencies: values fall into buckets
that grow by 2**(1/16) (~4.4%), so a percentile is known within ~2.2%, whatever
the count.  Used by the run summary (bulk/) and the trace's phase table (trace/).
"""

from __future__ import annotations

import math

#: Buckets per doubling of the value: 16 gives percentiles within ~2.2%.
STEPS_PER_DOUBLING = 16
#: The bucket of every value up to 0.001 (a microsecond, in milliseconds).
_FLOOR = math.floor(math.log2(0.001) * STEPS_PER_DOUBLING)


class LogHistogram:
    """Counts of non-negative values (milliseconds) in log-scale buckets."""

    __slots__ = ("_buckets", "count", "max", "total")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def add(self, value: float) -> None:
        bucket = math.floor(math.log2(value) * STEPS_PER_DOUBLING) if value > 0.001 else _FLOOR
        self._buckets[bucket] = self._buckets.get(bucket, 0) + 1
        self.count += 1
        self.total += value
        if value > self.max:
            self.max = value

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s counts to this histogram's."""
        for bucket, count in other._buckets.items():
            self._buckets[bucket] = self._buckets.get(bucket, 0) + count
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)

    def percentile(self, p: float) -> float | None:
        """The value below which ``p`` percent of the values fall (None when empty);
        the bucket's upper edge, never above the largest value seen."""
        if not self.count:
            return None
        rank = math.ceil(self.count * p / 100.0)
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= rank:
                return min(float(2 ** ((bucket + 1) / STEPS_PER_DOUBLING)), self.max)
        return self.max  # pragma: no cover - unreachable: the counts sum to count
