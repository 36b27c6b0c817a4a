"""surge.bulk.summary: the counts by status and error class partition the records.

A record with an error class is counted under it and nothing else, even when a
status arrived first (a 200 whose body then stalled is a ``read_timeout``);
before, such a record was counted under both, and 200 records summed to 203.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.conftest import RESOLVE

from surge.bulk.summary import Summary, outcome
from surge.errors import ERROR_CLASSES
from surge.sim import SimInfo

SURGE = [sys.executable, "-m", "surge.cli"]


def _record(status: int | None, error: str | None) -> dict[str, Any]:
    return {"status": status, "error": error, "elapsed_ms": 1.0}


def _total(summary: Summary) -> int:
    return sum(summary.statuses.values()) + sum(summary.errors.values())


@pytest.mark.parametrize(
    ("status", "error", "counted"),
    [
        (200, None, ("status", 200)),
        (404, None, ("status", 404)),
        (None, "dns_error", ("error", "dns_error")),
        (200, "read_timeout", ("error", "read_timeout")),  # the head came, the body stalled
        (200, "body_too_large", ("error", "body_too_large")),
        (301, "too_many_redirects", ("error", "too_many_redirects")),
        (None, "invalid_url", ("error", "invalid_url")),
    ],
)
def test_each_record_is_counted_once(status: int | None, error: str | None, counted: Any) -> None:
    assert outcome(_record(status, error)) == counted
    summary = Summary()
    summary.add(_record(status, error))
    assert _total(summary) == summary.records == 1
    rendered = summary.render(1.0)
    assert ("status  " in rendered) == (counted[0] == "status")
    assert ("errors  " in rendered) == (counted[0] == "error")


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(100, 599)),
            st.one_of(st.none(), st.sampled_from(sorted(ERROR_CLASSES))),
        ).filter(lambda pair: pair != (None, None)),
        max_size=60,
    ),
    st.integers(0, 60),
)
def test_the_counts_add_up_to_the_records_merged_or_not(
    pairs: list[tuple[int | None, str | None]], cut: int
) -> None:
    whole, first, second = Summary(), Summary(), Summary()
    for index, (status, error) in enumerate(pairs):
        whole.add(_record(status, error))
        (first if index < cut else second).add(_record(status, error))
    first.merge(second)
    for summary in (whole, first):
        assert _total(summary) == summary.records == len(pairs)
        shown = summary.as_dict(1.0)
        assert sum(shown["statuses"].values()) + sum(shown["errors"].values()) == len(pairs)


def test_the_summary_of_a_run_with_stalled_bodies_adds_up(sim: SimInfo, tmp_path: Path) -> None:
    """The command line's summary: 3 answers, 2 of them 200s whose bodies stall."""
    urls = [
        sim.url("s1--status-200.sim"),
        sim.url("h1--hang-body.sim"),
        sim.url("h2--hang-body.sim"),
    ]
    source = tmp_path / "urls.txt"
    source.write_text("".join(url + "\n" for url in urls))
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [*SURGE, "fetch", str(source), "-o", str(out), "--resolve", RESOLVE, "--max-time", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["status"], r["error"] or "") for r in records) == [
        (200, ""),
        (200, "read_timeout"),
        (200, "read_timeout"),
    ]
    lines = done.stderr.splitlines()
    assert lines[0].startswith("3 records")
    assert "  status  200: 1" in lines
    assert "  errors  read_timeout: 2" in lines
