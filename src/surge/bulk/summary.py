"""What a run did, in constant memory: counts by status and error class, and
latency percentiles from a log-scale histogram (a million records need no list
of a million latencies)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from surge.histogram import LogHistogram


class Summary:
    def __init__(self) -> None:
        self.records = 0
        self.statuses: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.skipped = 0  # inputs already in the output (--resume)
        self.latency = LogHistogram()

    def add(self, record: Mapping[str, Any]) -> None:
        self.records += 1
        status = record.get("status")
        if status is not None:
            self.statuses[status] += 1
        error = record.get("error")
        if error is not None:
            self.errors[error] += 1
        elapsed = record.get("elapsed_ms")
        if elapsed is not None and error != "invalid_url":
            self.latency.add(elapsed)

    def merge(self, other: Summary) -> None:
        """Count ``other``'s records here too (a cluster worker's summary of a shard)."""
        self.records += other.records
        self.statuses.update(other.statuses)
        self.errors.update(other.errors)
        self.skipped += other.skipped
        self.latency.merge(other.latency)

    def percentile(self, p: float) -> float | None:
        """The latency (ms) below which ``p`` percent of the timed records fall."""
        return self.latency.percentile(p)

    def as_dict(self, wall_s: float) -> dict[str, Any]:
        return {
            "records": self.records,
            "skipped": self.skipped,
            "wall_s": round(wall_s, 3),
            "per_s": round(self.records / wall_s, 1) if wall_s > 0 else None,
            "statuses": dict(sorted(self.statuses.items())),
            "errors": dict(self.errors.most_common()),
            "p50_ms": _round(self.percentile(50)),
            "p95_ms": _round(self.percentile(95)),
            "max_ms": _round(self.latency.max) if self.records else None,
        }

    def render(self, wall_s: float) -> str:
        d = self.as_dict(wall_s)
        rate = f" ({d['per_s']:,.0f}/s)" if d["per_s"] else ""
        lines = [f"{self.records:,} records in {wall_s:.2f} s{rate}"]
        if self.skipped:
            lines[0] += f", {self.skipped:,} inputs already done (--resume)"
        if self.statuses:
            lines.append("  status  " + "  ".join(f"{s}: {n:,}" for s, n in d["statuses"].items()))
        if self.errors:
            lines.append("  errors  " + "  ".join(f"{e}: {n:,}" for e, n in d["errors"].items()))
        if d["p50_ms"] is not None:
            lines.append(
                f"  latency p50 {d['p50_ms']:,.0f} ms  p95 {d['p95_ms']:,.0f} ms"
                f"  max {d['max_ms']:,.0f} ms"
            )
        return "\n".join(lines)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
