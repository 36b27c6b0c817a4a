"""When ``surge demo`` may state that one thing was faster than another.

One run of a timing on a shared machine can land on either side of another's:
the demo once printed "5x the connections took boto 6x, surge.pool 9x the
time", against its own point, from a single noisy sample.  So a comparison is
stated (as a ratio, or in a section's conclusion) only when which side is
larger cannot flip from run to run:

- over at least :data:`MIN_RUNS` runs of each side, run i of one against run i
  of the other (the runs interleaved, so that a change of the machine's load
  falls on both), every run's ratio is on the same side of 1 - the ratio given
  is then the median of the runs' ratios; when the two sides ran a different
  number of times, every run of one must be above (or below) every run of the
  other, and the ratio given is that of the medians; or
- a floor that no run of one side can beat (an ideal client's time: a pattern
  with 8 requests in flight cannot fetch 1,000 slow hosts faster than the
  schedule of 8 slots allows) is above every run of the other.

Otherwise :func:`settled_ratio` returns None and the demo prints no ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

#: Runs of each side needed before their ranges are trusted not to overlap.
MIN_RUNS = 3


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def settled_ratio(
    a: Sequence[float],
    b: Sequence[float],
    *,
    a_floor: float | None = None,
    min_runs: int = MIN_RUNS,
) -> float | None:
    """How many times b's time a took, when whether a is larger than b cannot
    flip from run to run (see the module's rules); else None."""
    if not a or not b or min(b) <= 0:
        return None
    if a_floor is not None and a_floor > max(b):
        return median(a) / median(b)
    if min(len(a), len(b)) < min_runs:
        return None
    if len(a) == len(b):
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        if min(ratios) > 1 or max(ratios) < 1:
            return median(ratios)
        return None
    if min(a) > max(b) or max(a) < min(b):
        return median(a) / median(b)
    return None


def settled_growth(
    small: Sequence[float],
    big: Sequence[float],
    other_small: Sequence[float],
    other_big: Sequence[float],
) -> tuple[float, float] | None:
    """The growth of two timings from a small size to a big one (run i of each
    size paired), as (this one's median growth, the other's), when which grew
    more is the same in every run; else None."""
    if min([*small, *other_small], default=0) <= 0:
        return None
    mine = [b / s for s, b in zip(small, big, strict=True)]
    theirs = [b / s for s, b in zip(other_small, other_big, strict=True)]
    if settled_ratio(mine, theirs) is None:
        return None
    return median(mine), median(theirs)
