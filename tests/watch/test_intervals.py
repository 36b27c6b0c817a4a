"""Time spent is a union on the wall clock, never a sum over threads: the
union's own bookkeeping against a brute-force union; a property over recordings
of any concurrency (no finding, summary or report states more than the wall
time, or more than 100% of it); and a real run, 8 threads of PyMySQL
connecting per query against MariaDB."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.watch.conftest import PROGRAMS, watch

from surge.testing import DBServer
from surge.watch.findings import analyse
from surge.watch.recorder import BUSY_INTERVALS, Busy, Recorder
from surge.watch.report import merged_rows, report, summary

EPSILON = 1e-6

spans = st.lists(
    st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 10, allow_nan=False)),
    max_size=200,
)


def _exact_union(pairs: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted((a, a + d) for a, d in pairs):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@given(spans)
def test_busy_is_the_union(pairs: list[tuple[float, float]]) -> None:
    """Exact while its intervals fit; past that never more than the union."""
    busy = Busy()
    for start, duration in pairs:
        busy.add(start, start + duration)
    exact = _exact_union(pairs)
    assert busy.seconds <= exact + EPSILON
    if len(pairs) <= BUSY_INTERVALS:
        assert abs(busy.seconds - exact) < EPSILON


#: A unit of work one caller does: its kind and its phases' durations.
units = st.tuples(
    st.sampled_from(["db", "http", "dns", "wait"]),
    st.lists(st.floats(0.0005, 0.05), min_size=4, max_size=4),
)
callers = st.lists(st.lists(units, min_size=1, max_size=30), min_size=1, max_size=16)


def _record(work: list[list[tuple[str, list[float]]]], *, slack: float = 0.0) -> dict[str, Any]:
    """Each caller runs its units one after another, all callers at once; the
    recorder is fed in the order the calls would come (by time)."""
    rec = Recorder()
    zero = rec.zero
    calls: list[tuple[float, int, Any]] = []
    order = 0

    def at(when: float, call: Any) -> None:
        nonlocal order
        order += 1
        calls.append((zero + when, order, call))

    end_of_all = 0.0
    for n, caller in enumerate(work):
        t = 0.0
        for i, (kind, (a, b, c, d)) in enumerate(caller):
            if kind == "db":
                db = f"db{n % 2}:3306"
                conn = n * 1000 + i  # a new connection each time, as a driver names it
                at(t, lambda s=zero + t: rec.db_start(s))
                at(
                    t + a,
                    lambda s=zero + t, e=zero + t + a, p=db, k=conn: rec.db_end(
                        "db.connect", "pymysql", p, "connect", s, e, connection=k
                    ),
                )
                at(t + a, lambda s=zero + t + a: rec.db_start(s))
                at(
                    t + a + b,
                    lambda s=zero + t + a, e=zero + t + a + b, p=db, k=conn: rec.db_end(
                        "db.query", "pymysql", p, "SELECT", s, e, connection=k
                    ),
                )
                t += a + b
            elif kind in ("http", "wait"):
                host = f"h{n % 3}:443"
                if kind == "wait":
                    at(
                        t + a,
                        lambda s=zero + t, e=zero + t + a, p=host: rec.pool_wait(
                            "urllib3", p, s, e, 1, 8
                        ),
                    )
                    t += a

                def request(
                    s: float = zero + t, p: str = host, x: tuple[float, ...] = (a, b, c, d)
                ) -> None:
                    rec.network_event("tcp", "socket", p, s, s + x[0])
                    rec.network_event("tls", "ssl", p, s + x[0], s + x[0] + x[1])
                    op = rec.http_start("urllib3", p, "GET /", s + x[0] + x[1])
                    assert op is not None
                    rec.mark(op, "sent", s + x[0] + x[1])
                    rec.mark(op, "first_byte", s + x[0] + x[1] + x[2])
                    rec.http_end(op, s + sum(x), status=200)

                at(t + a + b + c + d, request)
                t += a + b + c + d
            else:
                at(
                    t + a,
                    lambda s=zero + t, e=zero + t + a: rec.network_event(
                        "dns", "socket", "h:443", s, e, name="h.example"
                    ),
                )
                t += a
        end_of_all = max(end_of_all, t)
    for _, _, call in sorted(calls, key=lambda c: (c[0], c[1])):
        call()
    rec.stopped = zero + end_of_all + slack
    rec.cpu_s = 0.0
    data = rec.data()
    data["pid"] = 1
    data["findings"] = [f.to_dict() for f in analyse(data)]
    return data


_PERCENT = re.compile(r"(\d+(?:\.\d+)?)%")
_SECONDS = re.compile(r"(\d+(?:\.\d+)?) s\b")


def _assert_within_wall(data: dict[str, Any]) -> None:
    wall = data["wall_s"]
    found = analyse(data)
    for finding in found:
        assert finding.cost_s <= wall + EPSILON, finding
        for name, value in finding.evidence.items():
            if not isinstance(value, int | float) or name.startswith("mean_"):
                continue
            if name.endswith("_s"):
                assert value <= wall + 0.001, (name, value, wall, finding.message)
            if "share" in name:
                assert 0 <= value <= 1, (name, value)
        for pct in _PERCENT.findall(finding.message):
            assert float(pct) <= 100, finding.message
        for seconds in _SECONDS.findall(finding.message):
            assert float(seconds) <= wall + 0.01, finding.message
    text = summary([data], wall, "python prog.py")
    for pct in _PERCENT.findall(text):
        assert float(pct) <= 100, text
    assert report([data], wall, "python prog.py")["network_s"] <= wall + EPSILON
    for table in ("hosts", "databases", "names", "pages"):
        for row in data[table].values():
            for name, value in row.items():
                if name.endswith("_s") and not name.endswith("_total_s"):
                    assert value <= wall + EPSILON, (table, name, value, wall)


@settings(max_examples=60, deadline=None)
@given(callers, st.floats(0, 1))
def test_nothing_states_more_than_the_wall(
    work: list[list[tuple[str, list[float]]]], slack: float
) -> None:
    _assert_within_wall(_record(work, slack=slack))


def test_eight_callers_connecting_per_query() -> None:
    """The write-up's shape: 8 callers, each connecting per query; the connects'
    sum is about 8 times the wall, the finding states their union."""
    work = [[("db", [0.04, 0.002, 0, 0])] * 20 for _ in range(8)]
    data = _record(work)
    database = data["databases"]["db0:3306"]
    assert database["connects"] == 80
    assert database["connect_total_s"] > 3 * data["wall_s"]  # the sum: 4 callers on db0
    assert database["connect_s"] <= data["wall_s"]
    [finding] = [f for f in analyse(data) if f.id == "connect-per-query"][:1]
    assert finding.evidence["mean_connect_ms"] == 40.0  # a mean stays a mean
    assert finding.evidence["connect_share_of_wall"] <= 1
    _assert_within_wall(data)


def test_processes_network_time_is_their_union() -> None:
    """Two processes busy over the same second: the report says one second, not two."""
    runs = []
    for pid in (1, 2):
        data = _record([[("db", [0.5, 0.5, 0, 0])]])
        data["pid"], data["started"] = pid, 1000.0
        runs.append(data)
    assert abs(report(runs, 1.0, "python prog.py")["network_s"] - 1.0) < 0.01


def test_a_host_across_processes_is_the_union_of_their_time() -> None:
    """Two processes asking one host over the same second: its merged row counts
    both processes' requests and states one second, not two; a second later, two."""
    for later, expected in ((0.0, 1.0), (5.0, 2.0)):
        runs = []
        for pid in (1, 2):
            data = _record([[("http", [0.25, 0.25, 0.25, 0.25])]])
            data["pid"], data["started"] = pid, 1000.0 + later * (pid - 1)
            runs.append(data)
        [row] = merged_rows(runs, "hosts").values()
        assert row["requests"] == 2
        assert abs(row["time_s"] - expected) < 0.01


def test_threads_connecting_per_query_against_mariadb(
    mariadb_server: DBServer, tmp_path: Path
) -> None:
    watched = watch(
        "mysql_threads_connect_per_query.py", mariadb_server.url, "80", tmp_path=tmp_path
    )
    assert watched.process.stdout == "queries: 80\n"
    report_ = watched.report
    wall = report_["wall_s"]
    finding = watched.finding("connect-per-query")
    evidence = finding["evidence"]
    assert evidence["connects"] == 80 and evidence["queries"] == 80
    assert 0 < evidence["connect_s"] <= wall
    assert 0 < evidence["connect_share_of_wall"] <= 1
    [pct] = re.findall(r"(\d+)% of the wall time", finding["message"])
    assert 0 < int(pct) <= 100
    [database] = report_["processes"][0]["databases"].values()
    assert database["connect_s"] <= database["connect_total_s"]  # a union, not a sum
    assert report_["network_s"] <= wall
    for pct in _PERCENT.findall(watched.process.stderr):
        assert float(pct) <= 100, watched.process.stderr


def test_shares_are_of_the_commands_wall_not_a_process_s(
    mariadb_server: DBServer, tmp_path: Path
) -> None:
    """The program connecting per query is the child of a process that waited
    first: its own wall is shorter than the command's, and "x% of the wall time"
    is of the command's (what the user timed)."""
    program = str(PROGRAMS / "mysql_connect_per_query.py")
    watched = watch(
        "child_after_pause.py", "0.5", program, mariadb_server.url, "12", tmp_path=tmp_path
    )
    wall = watched.report["wall_s"]
    [child] = [run for run in watched.report["processes"] if run["databases"]]
    assert child["wall_s"] < wall - 0.4  # the 0.5 s pause is not the child's
    evidence = watched.finding("connect-per-query")["evidence"]
    assert abs(evidence["connect_share_of_wall"] - evidence["connect_s"] / wall) <= 0.002
    [pct] = re.findall(r"(\d+)% of the wall time", watched.finding("connect-per-query")["message"])
    assert abs(int(pct) - 100 * evidence["connect_s"] / wall) <= 1
