"""The trace's aggregates: exact where they say so, bounded in memory always."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from surge.http.timings import Timings
from surge.trace.html import render
from surge.trace.recorder import MAX_BUCKETS, SLOWEST, Timeline, TraceRecorder


def brute_force_in_flight(spans: list[tuple[float, float]], begin: float, end: float) -> float:
    """Mean requests in flight over [begin, end): each request's overlap, added up."""
    return sum(max(0.0, min(b, end) - max(a, begin)) for a, b in spans) / (end - begin)


@settings(max_examples=200, deadline=None)
@given(
    spans=st.lists(
        st.tuples(st.floats(0, 3), st.floats(0, 2)).map(lambda s: (s[0], s[0] + s[1])),
        min_size=1,
        max_size=60,
    ),
    max_buckets=st.integers(2, 40),
    points=st.integers(1, 50),
)
def test_in_flight_per_bucket_is_exact_whatever_the_merging(
    spans: list[tuple[float, float]], max_buckets: int, points: int
) -> None:
    timeline = Timeline(max_buckets=max_buckets, width=0.01)
    for a, b in spans:
        timeline.add(a, b, failed=False)
    assert len(timeline.buckets) <= max_buckets
    series = timeline.series(max_points=points)
    w = series["width_s"]
    assert len(series["in_flight"]) <= points
    last = max(b for _, b in spans)
    for i, mean in enumerate(series["in_flight"]):
        # the last bucket is measured over the part of it the run lasted
        final = i == len(series["in_flight"]) - 1 and w / 100 <= last - i * w < w
        closes = last if final else (i + 1) * w
        assert abs(mean - brute_force_in_flight(spans, i * w, closes)) < 1e-3 + 1e-6 / w
    assert sum(series["done_per_s"]) > 0 or not spans


def timings_at(t0: float, total: float) -> Timings:
    t = Timings(t0)
    t.started = t.connected = t0
    t.sent = t0 + total * 0.1
    t.first_byte = t0 + total * 0.9
    t.done = t0 + total
    return t


def record(line: int, *, error: str | None = None) -> dict[str, object]:
    return {
        "url": f"http://host{line}.example/",
        "line": line,
        "status": None if error else 200,
        "error": error,
        "error_detail": "boom" if error else None,
        "bytes": 10,
        "attempts": 1,
        "final_url": f"http://host{line}.example/",
    }


def test_memory_stays_bounded_with_many_requests() -> None:
    recorder = TraceRecorder(rows=100)
    rng = random.Random(1)
    for n in range(1, 20_001):
        start = recorder.clock0 + n * 0.001
        total = rng.uniform(0.001, 0.5)
        recorder.add(record(n, error="read_timeout" if n % 10 == 0 else None), start,
                     start + total, timings_at(start, total))  # fmt: skip
    data = recorder.data()
    assert data["requests"] == 20_000
    assert len(data["rows"]) == 100 and len(data["slowest"]) == SLOWEST
    assert len(recorder.timeline.buckets) <= MAX_BUCKETS
    assert "uniform random sample of 100 of the 20,000" in data["sample"]["how"]
    assert data["errors"] == {"read_timeout": 2000} and data["statuses"] == {"200": 18000}
    # the sample is spread over the whole run, not the first 100
    lines = sorted(r[0] for r in data["rows"])
    assert lines[0] < 2000 and lines[-1] > 18000
    # the slowest are the slowest of all
    slowest = [sum(r[8][1::2]) for r in data["slowest"]]
    assert slowest == sorted(slowest, reverse=True) and min(slowest) > 480
    # every phase's time is counted, not only the sample's
    wait = next(p for p in data["phases"] if p["phase"] == "wait")
    assert wait["requests"] == 20_000 and 0.79 < wait["share"] < 0.81


def test_a_small_run_draws_every_request() -> None:
    recorder = TraceRecorder()
    for n in range(1, 6):
        start = recorder.clock0 + n
        recorder.add(record(n), start, start + 0.5, timings_at(start, 0.5))
    data = recorder.data()
    assert [r[0] for r in data["rows"]] == [1, 2, 3, 4, 5]
    assert data["sample"]["how"] == "every request"
    # from the first request's start to the last one's end: 4.5 s, 2.5 s busy
    assert abs(data["mean_in_flight"] - 2.5 / 4.5) < 1e-3 and data["wall_s"] == 4.5


def test_the_page_cannot_be_broken_out_of_by_a_url() -> None:
    recorder = TraceRecorder()
    evil = dict(record(1), url="http://x/</script><script>alert(1)</script><!--")
    recorder.add(evil, recorder.clock0, recorder.clock0 + 0.1, timings_at(recorder.clock0, 0.1))
    page = render(recorder.data())
    assert "</script><script>alert" not in page
    start = page.index('id="trace-data">') + len('id="trace-data">')
    embedded = page[start : page.index("</script>", start)]
    assert json.loads(embedded)["rows"][0][1] == evil["url"]
