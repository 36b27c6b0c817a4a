"""``surge demo``'s table says what it measured: answered + lost = answerable on
every row, a pattern that gave up on hosts is marked, a sampled row says so.

The sections after it, one per write-up, run here at tiny sizes and are checked
on the work they count (items a pool moves, connections opened, what doctor
names), never on wall-clock time."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from surge.bench import writeups
from surge.bench.demo import Row, conclude, demo_command, render
from surge.bench.verdict import settled_growth, settled_ratio
from surge.bench.writeups import (
    BotoHostConnectionPool,
    answering_hosts,
    connect_per_query,
    grequests_pyopenssl,
    pool_drain,
    render_db,
    render_pool_drain,
    render_pyopenssl,
    run_with_doctor,
    tls_missing,
)
from surge.sim import SimInfo, behaviour


def _row(peer: str, wall: float, ok: int, lost: int, answerable: int, **kw: object) -> Row:
    fields: dict[str, object] = {
        "label": peer,
        "in_flight": 100,
        "cpu_s": 1.0,
        "extrapolated": False,
        "note": "",
        "walls": [wall],
    }
    fields.update(kw)
    return Row(peer, wall_s=wall, ok=ok, lost=lost, answerable=answerable, **fields)  # type: ignore[arg-type]


def test_the_table_is_consistent_and_flags_what_it_should() -> None:
    rows = [
        _row("requests_seq", 600.0, 29, 0, 28, extrapolated=True, vs_surge=200.0),
        _row("aiohttp_gather", 3.1, 938, 12, 930),  # ok counts borderline hosts too
        _row("requests_threads", 12.0, 930, 0, 930, vs_surge=4.0),
        _row("surge", 3.0, 940, 0, 930, walls=[3.1, 3.0, 2.9]),
    ]
    table = render(rows, 2.9, sample_of=1000)
    lines = table.splitlines()
    assert "I/O patterns for 1,000 GETs" in lines[0]
    aiohttp = next(line for line in lines if line.startswith("aiohttp_gather"))
    # never "answered 938 of 930"; no ratio where the comparison is not settled
    assert "918/930" in aiohttp and " -* " in aiohttp
    surge = next(line for line in lines if line.startswith("surge"))
    assert "930/930" in surge and " 3 " in surge and "1.0x " in surge + " "
    sequential = next(line for line in lines if line.startswith("requests_seq"))
    assert "[sample]" in sequential and "~200.0x" in sequential
    assert any(line.startswith("* lost hosts") for line in lines)
    assert any(line.startswith("~ [sample]") for line in lines)
    assert any(line.startswith("- : no ratio") for line in lines)
    said = " ".join(table[table.index("Conclusion:") :].split())
    assert said == (
        "Conclusion: surge answered all 930 answerable hosts in 3.0 s (an ideal client: 2.90 s);"
        " requests_seq would need about 10 minutes; requests_threads took 4.0x its time;"
        " and aiohttp_gather lost 12 answerable hosts."
    )


def test_the_conclusion_states_only_settled_comparisons() -> None:
    rows = [
        _row("requests_threads", 3.2, 930, 0, 930),  # not settled: no claim either way
        _row("surge", 3.0, 930, 0, 930, walls=[3.0, 3.4, 2.9]),
    ]
    assert conclude(rows, 2.9) == (
        "Conclusion: surge answered all 930 answerable hosts in 3.0 s (an ideal client: 2.90 s)."
    )
    assert "requests_threads" not in conclude(rows, 2.9)


def test_settled_ratio_needs_runs_that_cannot_flip() -> None:
    assert settled_ratio([2.0, 2.1, 2.2], [1.0, 1.1, 1.2]) == pytest.approx(2.1 / 1.1)
    assert settled_ratio([2.0, 2.1, 0.9], [1.0, 1.1, 1.2]) is None  # one run flipped
    assert settled_ratio([2.0, 2.1], [1.0, 1.1, 1.2]) is None  # too few runs
    assert settled_ratio([30.0], [3.0, 3.1, 2.9], a_floor=8.0) == pytest.approx(10.0)
    assert settled_ratio([30.0], [3.0, 9.0, 2.9], a_floor=8.0) is None  # a run above the floor
    # the growth of two timings: which grew more must hold in every pairing
    assert settled_growth([1, 1, 1], [20, 22, 18], [1, 1, 1], [5, 6, 5]) == (20, 5)
    assert settled_growth([1, 1, 1], [20, 5, 18], [1, 1, 1], [5, 6, 5]) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=7),
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=7),
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=7),
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=7),
)
def test_the_pool_conclusion_never_contradicts_its_runs(
    boto_small: list[float], boto_big: list[float], surge_small: list[float], surge_big: list[float]
) -> None:
    runs = min(map(len, (boto_small, boto_big, surge_small, surge_big)))
    boto_small, boto_big = boto_small[:runs], boto_big[:runs]
    surge_small, surge_big = surge_small[:runs], surge_big[:runs]
    boto, surge = writeups.DRAINS
    rows = [
        writeups.DrainRow(boto, 10, statistics.median(boto_small), 55, boto_small),
        writeups.DrainRow(boto, 50, statistics.median(boto_big), 1275, boto_big),
        writeups.DrainRow(surge, 10, statistics.median(surge_small), 10, surge_small),
        writeups.DrainRow(surge, 50, statistics.median(surge_big), 50, surge_big),
    ]
    said = writeups.conclude_pool_drain(rows)
    assert said.startswith("Conclusion: a get from boto's pool moved 26 items at 50")
    assert "boto's work per get grows with the pool, surge's does not" in said
    # a timing is compared only when, over 3 runs or more, every run agrees
    pairs = list(zip(boto_big, surge_big, strict=True))
    if "took boto" in said and "x surge.pool's time" in said:
        assert runs >= 3 and all(b > s for b, s in pairs)
    elif "took surge.pool" in said:
        assert runs >= 3 and all(b < s for b, s in pairs)
    else:
        assert runs < 3 or not (all(b > s for b, s in pairs) or all(b < s for b, s in pairs))
    if "the connections took boto" in said:
        growths = [b / s for s, b in zip(boto_small, boto_big, strict=True)]
        theirs = [b / s for s, b in zip(surge_small, surge_big, strict=True)]
        ratios = [g / h for g, h in zip(growths, theirs, strict=True)]
        assert runs >= 3 and (min(ratios) > 1 or max(ratios) < 1)


# -- the sections after the table: the other write-ups ---------------------------------


def test_boto_pool_drain_moves_quadratic_items_and_surges_linear() -> None:
    sizes = (100, 1_000)
    rows = {(r.pool, r.n): r for r in pool_drain(sizes, runs=1)}
    for n in sizes:
        # pop(0) of a list of L moves L items: L = n, n-1, ..., 1 over the drain.
        assert rows["boto 2 HostConnectionPool", n].moved == n * (n + 1) // 2
        # a deque's pop moves the one it takes.
        assert rows["surge.pool.Pool", n].moved == n
    boto_growth = (
        rows["boto 2 HostConnectionPool", 1_000].moved
        / rows["boto 2 HostConnectionPool", 100].moved
    )
    surge_growth = rows["surge.pool.Pool", 1_000].moved / rows["surge.pool.Pool", 100].moved
    assert boto_growth > 95 and surge_growth == 10  # 10x the connections
    text = render_pool_drain(list(rows.values()))
    assert "boto's quadratic connection pool" in text.splitlines()[0]
    # one run of each: no timing is compared, the counts are
    assert "the connections took" not in text and "x surge.pool's time" not in text
    said = " ".join(text[text.index("Conclusion:") :].split())
    assert said.endswith("boto's work per get grows with the pool, surge's does not.")


def test_boto_reimplementation_keeps_boto_2s_rules() -> None:
    """clean() drops stale pairs from the head; get() skips a connection whose
    response is still open, putting it back at the tail."""

    class Response:
        def __init__(self, closed: bool) -> None:
            self.closed = closed

        def isclosed(self) -> bool:
            return self.closed

    class Conn:
        def __init__(self, response: Response | None) -> None:
            self._HTTPConnection__response = response

    pool = BotoHostConnectionPool()
    stale, busy, done, fresh = Conn(None), Conn(Response(False)), Conn(Response(True)), Conn(None)
    pool.queue = [(stale, 0.0)]
    for conn in (busy, done, fresh):
        pool.put(conn)
    assert pool.get() is done  # stale dropped, busy skipped
    assert [conn for conn, _ in pool.queue] == [fresh, busy]
    assert pool.get() is fresh
    assert pool.get() is None and pool.size() == 1  # only the busy one is left


def test_connect_per_query_section_counts_connects(tmp_path: Path) -> None:
    rows = connect_per_query(50, directory=str(tmp_path))
    per_query, pooled, kept = rows
    assert [r.queries for r in rows] == [50, 50, 50]
    assert per_query.connects == 50
    assert pooled.connects == 1 and kept.connects == 1  # the pool reused its one connection
    text = render_db(rows)
    assert "MySQL connection cost" in text.splitlines()[0]
    assert "benchmarks/README.md#databases" in text


def test_pyopenssl_section_runs_both_and_doctor_names_pyopenssl(sim: SimInfo) -> None:
    missing = tls_missing()
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    result = grequests_pyopenssl(sim, n_hosts=4, concurrency=4, timeout=5.0, limit_s=60)
    assert [(r.answered, r.answerable) for r in result.runs] == [(4, 4), (4, 4)], result.runs
    assert all(r.wall_s is not None for r in result.runs)
    finding = result.doctor
    assert finding is not None and finding["status"] == "fail"
    assert "pyOpenSSL" in finding["message"] and finding["measured"]["injected"] is True
    text = render_pyopenssl(result)
    assert "grequests + pyOpenSSL" in text.splitlines()[0]
    named = next(line for line in text.splitlines() if "pyopenssl-injected" in line)
    assert "[fail]" in named and "pyOpenSSL" in named


def test_answering_hosts_answer_quickly_over_tls() -> None:
    names = answering_hosts(20, timeout=3.0)
    assert len(names) == len(set(names)) == 20
    for name in names:
        fate = behaviour(name)
        assert fate.expected(3.0, tls=True)[1] is None and fate.service_ms < 1000


def test_a_peer_that_will_not_import_is_unavailable_and_skips_doctor() -> None:
    result, events = run_with_doctor(
        "no_such_peer", ["http://x.sim/"], concurrency=1, timeout=1.0, cafile=None, limit_s=30
    )
    assert not result.available and "no_such_peer" in result.note
    assert "doctor" not in events


def test_demo_runs_only_the_sections_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(writeups, "DRAIN_SIZES", (50, 100))
    monkeypatch.setattr(writeups, "DB_QUERIES", 20)
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(demo_command, ["--sections", "db,pool", "--json", str(out)])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "I/O patterns for 1,000 GETs" not in text  # no table: fetch was not asked for
    # in the demo's order, whatever the order asked
    assert text.index("boto's quadratic connection pool") < text.index("MySQL connection cost")
    payload = json.loads(out.read_text())
    assert payload["sections"] == ["pool", "db"]
    assert [r["connects"] for r in payload["connect_per_query"]] == [20, 1, 1]
    assert {(r["pool"], r["n"]) for r in payload["pool_drain"]} == {
        (pool, n) for pool in writeups.DRAINS for n in (50, 100)
    }


def test_a_section_without_its_libraries_says_which_extra_and_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writeups, "tls_missing", lambda: ["pyOpenSSL"])
    monkeypatch.setattr(writeups, "DB_QUERIES", 20)
    result = CliRunner().invoke(demo_command, ["--sections", "pyopenssl,db"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "MySQL connection cost" in result.stdout  # the next section still ran
    skipped = [line for line in lines if line.startswith("grequests + pyOpenSSL")]
    assert len(skipped) == 1 and "pyOpenSSL not installed" in skipped[0]
    assert "[bench]" in skipped[0]


def test_unknown_sections_are_a_usage_error() -> None:
    result = CliRunner().invoke(demo_command, ["--sections", "pool,nope"])
    assert result.exit_code == 2 and "nope" in result.output


def test_patterns_that_cannot_run_are_listed_once_and_every_section_concludes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from surge.bench import demo
    from surge.bench.peers import runner

    monkeypatch.setattr(runner, "available", lambda name: name == "surge")
    monkeypatch.setattr(demo, "_found", lambda module: module != "requests")
    monkeypatch.setattr(writeups, "DRAIN_SIZES", (50, 100))
    monkeypatch.setattr(writeups, "DB_QUERIES", 20)
    only = "requests_seq,requests_threads,surge"
    result = CliRunner().invoke(
        demo_command,
        ["--sections", "fetch,pool,db", "--hosts", "20", "--timeout", "1", "--only", only],
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    skipped = [line for line in out.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1, out
    assert "requests, one after another; requests + a thread pool" in skipped[0]
    assert "(requests)" in skipped[0] and "[bench]" in skipped[0]
    # nothing was run for them: no "done in 0.0 s"
    assert "running requests" not in result.stderr
    assert result.stderr.count("running surge fetch") == 3  # surge's runs, to settle ratios
    # each of the three sections ends with its conclusion
    sections = out.strip().split("\n\nThe ")  # each opens with the write-up it answers
    assert len(sections) == 3
    for text in sections:
        assert text.count("Conclusion:") == 1
        last = text[text.index("Conclusion:") :]
        assert "\n\n" not in last and last.endswith(".")  # the section's last sentence


def test_a_faster_pattern_is_said_to_be_faster_and_why() -> None:
    rows = [
        _row("aiohttp_gather", 3.1, 918, 12, 930, vs_surge=0.96),
        _row("surge", 3.2, 930, 0, 930, walls=[3.2, 3.3, 3.1]),
    ]
    table = render(rows, 3.0)
    aiohttp = next(line for line in table.splitlines() if line.startswith("aiohttp_gather"))
    assert " 0.96x* " in aiohttp  # not "1.0x", which would read as a tie
    assert conclude(rows, 3.0).endswith(
        "; and aiohttp_gather finished in 0.96x its time by losing 12 answerable hosts."
    )
