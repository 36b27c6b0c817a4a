"""Cut points: always sorted and inside the range, and sensible on numbered keys."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from surge.s3.keyspace import cut_points, estimate


def test_numbered_keys_are_cut_about_keys_each_apart() -> None:
    sample = [f"part-{i:06d}" for i in range(1000)]
    cuts = cut_points(sample, sample[-1], None, 4, 2000)
    assert len(cuts) == 4
    # the cuts land among the keys that follow, not in the gap right after the page
    positions = [int(c[5:11].ljust(6, "0")) for c in cuts]
    assert positions == sorted(positions)
    assert 1500 < positions[0] < 6000 and positions[-1] < 20000


def test_a_bounded_range_is_split_evenly_and_small_ranges_are_left_alone() -> None:
    sample = [f"k{i:05d}" for i in range(0, 1000)]
    cuts = cut_points(sample, "k00999", "k09999", 8, 2000)
    assert 2 <= len(cuts) <= 8
    assert all("k00999" < c < "k09999" for c in cuts)
    assert cut_points(sample, "k00999", "k01500", 8, 2000) == []
    left = estimate(sample, "k00999", "k01999")
    assert left is not None and 500 < left < 2000


keys = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)


@given(
    st.lists(keys, min_size=2, max_size=50, unique=True),
    keys,
    st.none() | keys,
    st.integers(1, 20),
    st.integers(1, 5000),
)
def test_cuts_are_sorted_and_strictly_inside(
    sample: list[str], after: str, end: str | None, count: int, keys_each: int
) -> None:
    sample.sort()
    cuts = cut_points(sample, after, end, count, keys_each)
    assert cuts == sorted(set(cuts))
    assert len(cuts) <= count
    assert all(c > after and (end is None or c < end) for c in cuts)
    for c in cuts:
        c.encode("utf-8")  # sendable as StartAfter
