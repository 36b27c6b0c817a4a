"""``--resume`` resumes only records made from this input: the inputs its
records name (``line`` and ``input``) must be this input's lines.  Otherwise one
line, exit status 2, and the output byte for byte as it was.

Before, resuming onto the records of another input of the same length
reported "0 records, 200 inputs already done" and exited 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import RESOLVE

from surge.bulk.outputs import Resumed, resumed_inputs
from surge.errors import UsageError
from surge.sim import SimInfo

SURGE = [sys.executable, "-m", "surge.cli"]
N = 30


def _urls(tag: str, n: int = N) -> str:
    # port 9 on loopback: refused at once (a connect_refused record), no network
    return "".join(f"http://127.0.0.1:9/{tag}{i}\n" for i in range(n))


def _fetch(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*SURGE, "fetch", *args, "-q", "--connect-timeout", "5"],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


#: The second input, made from the first's lines (``a0`` ... ``a29``).
OTHER_INPUTS = {
    "another list of the same length": _urls("b"),
    "the same lines, one inserted first": "http://127.0.0.1:9/new\n" + _urls("a"),
    "the same lines in another order": "".join(reversed(_urls("a").splitlines(True))),
    "one line changed": _urls("a").replace("/a7\n", "/a7x\n"),
    "fewer lines": _urls("a", N - 5),
    # (the same URLs in a CSV's column are the same input; after a header, not)
    "the same URLs in a CSV after its header": "rank,url\n"
    + "".join(f"{i},http://127.0.0.1:9/a{i}\n" for i in range(N)),
}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("via", ["file", "stdin"])
@pytest.mark.parametrize("kind", sorted(OTHER_INPUTS))
def test_resume_onto_the_records_of_another_input_is_refused(
    tmp_path: Path, kind: str, via: str, fmt: str
) -> None:
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text(_urls("a"))
    second.write_text(OTHER_INPUTS[kind])
    out = tmp_path / f"out.{fmt}"
    done = _fetch(str(first), "-o", str(out))
    assert done.returncode == 0, done.stderr
    before = hashlib.sha256(out.read_bytes()).hexdigest()
    if via == "file":
        again = _fetch(str(second), "-o", str(out), "--resume")
    else:
        again = _fetch("-", "-o", str(out), "--resume", stdin=second.read_bytes())
    err = again.stderr.decode()
    assert again.returncode == 2, err
    assert err.startswith("surge fetch: error: ") and err.count("\n") == 1, err
    assert "not resumed" in err or "past the input" in err, err
    assert hashlib.sha256(out.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_resume_of_the_same_input_grown_fetches_only_the_new_lines(
    tmp_path: Path, via: str
) -> None:
    source = tmp_path / "urls.txt"
    source.write_text(_urls("a"))
    out = tmp_path / "out.jsonl"
    assert _fetch(str(source), "-o", str(out)).returncode == 0
    source.write_text(_urls("a") + "http://127.0.0.1:9/later\n")
    if via == "file":
        again = _fetch(str(source), "-o", str(out), "--resume", "--no-progress")
    else:
        again = _fetch("-", "-o", str(out), "--resume", stdin=source.read_bytes())
    assert again.returncode == 0, again.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["line"] for r in records) == list(range(1, N + 2))
    assert records[-1]["input"] == "http://127.0.0.1:9/later"


def test_resume_after_lost_records_checks_the_lines_in_flight(tmp_path: Path) -> None:
    """Records of lines 1-10 and 15-20 (a run stopped with 11-14 in flight):
    the same input resumes and does just 11-14 and 21-30; another input whose
    lines 15-20 differ is refused."""
    source = tmp_path / "urls.txt"
    source.write_text(_urls("a"))
    out = tmp_path / "out.jsonl"
    assert _fetch(str(source), "-o", str(out)).returncode == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    kept = [r for r in records if r["line"] <= 10 or 15 <= r["line"] <= 20]
    out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    other = tmp_path / "other.txt"
    other.write_text(_urls("a").replace("/a16\n", "/z16\n"))
    refused = _fetch(str(other), "-o", str(out), "--resume")
    assert refused.returncode == 2, refused.stderr
    done = _fetch(str(source), "-o", str(out), "--resume")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line)["line"] for line in out.read_text().splitlines()]
    assert sorted(lines) == list(range(1, N + 1))
    assert sorted(lines[len(kept) :]) == [11, 12, 13, 14, *range(21, N + 1)]


def test_records_a_sink_lost_are_checked_against_the_input_too(
    sim: SimInfo, tmp_path: Path
) -> None:
    """Every body gone (so every record is to be done again): another input is
    still refused, the records untouched; this input redoes them all."""
    source = tmp_path / "urls.txt"
    source.write_text("".join(sim.url(f"k{i}.sim") + "\n" for i in range(5)))
    out, pages = tmp_path / "out.jsonl", tmp_path / "pages"
    args = ["-o", str(out), "--output-dir", str(pages), "--resolve", RESOLVE]
    assert _fetch(str(source), *args).returncode == 0
    for body in pages.rglob("*"):
        if body.is_file():
            body.unlink()
    before = out.read_bytes()
    other = tmp_path / "other.txt"
    other.write_text("".join(sim.url(f"z{i}.sim") + "\n" for i in range(5)))
    refused = _fetch(str(other), *args, "--resume")
    assert refused.returncode == 2, refused.stderr
    assert out.read_bytes() == before
    done = _fetch(str(source), *args, "--resume")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["line"] for r in records) == [1, 2, 3, 4, 5]
    assert all(Path(r["body_path"]).is_file() for r in records)


# -- the check itself: line N of the records is line N of the input ------------------------


class _Item(NamedTuple):
    line: int
    input: str


def _resume_onto(done: list[str], order: list[int], now: list[str]) -> None:
    """Records of ``done`` (in the order ``order`` wrote them: concurrency),
    then ``resumed_inputs`` over the input ``now``."""
    seen = Resumed()
    for at in order:
        seen.add(at + 1, done[at], 0, {})
    items = (_Item(n, value) for n, value in enumerate(now, 1))
    resumed_inputs(items, seen, "out.jsonl", "in.txt")


_VALUES = st.lists(
    st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=12),
    min_size=2,
    max_size=12,
    unique=True,
)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), values=_VALUES)
def test_any_permutation_of_the_done_part_is_refused(
    data: st.DataObject, values: list[str]
) -> None:
    """Two lines swapped, or any other order of the same lines: refused, every
    time (before, a sum of Python's seeded hash() let a swap through in about
    one run in eight - it depended on the process's hash seed)."""
    order = data.draw(st.permutations(range(len(values))))
    moved = data.draw(st.permutations(values).filter(lambda p: list(p) != values))
    _resume_onto(values, order, [*values])  # the same input: resumed
    with pytest.raises(UsageError, match="not of this input"):
        _resume_onto(values, order, [*moved, "next"])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), values=_VALUES)
def test_any_changed_line_of_the_done_part_is_refused(
    data: st.DataObject, values: list[str]
) -> None:
    order = data.draw(st.permutations(range(len(values))))
    at = data.draw(st.integers(0, len(values) - 1))
    other = data.draw(st.text(min_size=1, max_size=12).filter(lambda v: v != values[at]))
    changed = [*values]
    changed[at] = other
    with pytest.raises(UsageError, match="not of this input"):
        _resume_onto(values, order, changed)


@pytest.mark.parametrize("seed", range(8))
def test_a_swap_is_refused_whatever_the_hash_seed(tmp_path: Path, seed: int) -> None:
    """The check is the same in every process: run with 8 hash seeds (the
    hostile case: one URL pattern, two neighbours swapped)."""
    script = (
        "from surge.bulk.outputs import Resumed, resumed_inputs\n"
        "from surge.errors import UsageError\n"
        "u = [f'http://x{i}.status-200.sim:1234/' for i in range(8)]\n"
        "s = Resumed()\n"
        "[s.add(n, v, 0, {}) for n, v in enumerate(u, 1)]\n"
        "m = [u[1], u[0], *u[2:]]\n"
        "class I:\n"
        "    def __init__(self, line, input): self.line, self.input = line, input\n"
        "try:\n"
        "    resumed_inputs(iter([I(n, v) for n, v in enumerate(m, 1)]), s, 'o', 'i')\n"
        "except UsageError:\n"
        "    raise SystemExit(2)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60, check=False)
    assert done.returncode == 2
