"""What a run did, in constant memory: counts by status and error class, and
latency percentiles from a log-scale histogram (a million records need no list
of a million latencies).

The counts partition the records (:func:`outcome`): a record with an error
class is counted under it, whatever status arrived before the failure (a 200
whose body then stalled is a ``read_timeout``), and only a record without one
under its status - so the status and error counts add up to the records, as
``surge trace``'s do.

Besides the records, the requests the run's pacing held back (``held``): by
``--rate``, per host (``--rate-per-host``, a Crawl-delay, a Retry-After,
``--auto-throttle``'s delay and back-off: one pacer), and by ``--auto-throttle``'s
window - how many waited, and for how long in all."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from surge.histogram import LogHistogram


def outcome(record: Mapping[str, Any]) -> tuple[str, Any]:
    """What a record is counted as: ``("error", class)`` if it has an error
    class, else ``("status", code)``, else ``("none", None)`` (neither: not a
    record surge makes).  The one place the summary and the progress line
    count records by."""
    error = record.get("error")
    if error is not None:
        return "error", error
    status = record.get("status")
    if status is not None:
        return "status", status
    return "none", None


class Summary:
    def __init__(self) -> None:
        self.records = 0
        self.statuses: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.skipped = 0  # inputs already in the output (--resume)
        # 416s that found a -C file complete: done, not failed
        self.complete = 0
        self.latency = LogHistogram()
        #: What held requests back: name -> [requests that waited, seconds in all].
        self.held: dict[str, list[float]] = {}

    def hold(self, name: str, requests: int, seconds: float) -> None:
        """``requests`` waited ``seconds`` in all for ``name`` (a pacer, a window)."""
        if requests:
            kept = self.held.setdefault(name, [0, 0.0])
            kept[0] += requests
            kept[1] += seconds

    def add(self, record: Mapping[str, Any]) -> None:
        self.records += 1
        kind, value = outcome(record)
        if kind == "error":
            self.errors[value] += 1
        elif kind == "status":
            self.statuses[value] += 1
            if value == 416 and record.get("continued") == "complete":
                self.complete += 1
        error = record.get("error")
        elapsed = record.get("elapsed_ms")
        if elapsed is not None and error != "invalid_url":
            self.latency.add(elapsed)

    def merge(self, other: Summary) -> None:
        """Count ``other``'s records here too (a cluster worker's summary of a shard)."""
        self.records += other.records
        self.statuses.update(other.statuses)
        self.errors.update(other.errors)
        self.skipped += other.skipped
        self.complete += other.complete
        self.latency.merge(other.latency)
        for name, (requests, seconds) in other.held.items():
            self.hold(name, int(requests), seconds)

    def failed(self) -> tuple[int, int]:
        """``--fail-exit``'s count: (records with an error class, records
        without one whose status is 400 or more - but a 416 that found a
        ``-C -`` file complete: done, not failed, as curl's ``-C -`` exits 0
        there (its ``--fail`` makes that 22: a re-run over finished files
        would fail every time))."""
        bad_statuses = sum(n for status, n in self.statuses.items() if status >= 400)
        bad_statuses -= self.complete
        return sum(self.errors.values()), bad_statuses

    def failed_line(self) -> str | None:
        """The line ``--fail-exit`` ends with when any record failed, else None:
        ``N of M records failed: E with an error, S with a status >= 400``."""
        errors, statuses = self.failed()
        if not errors and not statuses:
            return None
        return (
            f"{errors + statuses:,} of {self.records:,} records failed: {errors:,} with an error, "
            f"{statuses:,} with a status >= 400 (--fail-exit: exit 22)"
        )

    def held_line(self) -> str | None:
        """``held back  --rate: N waited X s  ...`` (N requests, X seconds in all),
        or None if nothing waited."""
        if not self.held:
            return None
        return "held back  " + "  ".join(
            f"{name}: {int(requests):,} waited {seconds:,.1f} s"
            for name, (requests, seconds) in self.held.items()
        )

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
            "held": {
                name: {"requests": int(requests), "s": round(seconds, 3)}
                for name, (requests, seconds) in self.held.items()
            },
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
        if line := self.held_line():
            lines.append("  " + line)
        if d["p50_ms"] is not None:
            lines.append(
                f"  latency p50 {d['p50_ms']:,.0f} ms  p95 {d['p95_ms']:,.0f} ms"
                f"  max {d['max_ms']:,.0f} ms"
            )
        return "\n".join(lines)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
