"""The findings' rules on recorded totals, at and just short of their
thresholds (a finding is raised only when its evidence is there); statements
reduced to their verb and table whatever values they carry; and the recorder's
memory bounded however long the run."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from surge.watch import findings, recorder
from surge.watch.findings import analyse
from surge.watch.instrumentors._dbapi import statement
from surge.watch.recorder import DatabaseTotals, HostTotals, NameTotals, Recorder, _totals


def _data(**changes: Any) -> dict[str, Any]:
    """A quiet run's data (no finding), with ``changes`` applied."""
    data: dict[str, Any] = {
        "wall_s": 10.0,
        "hosts": {},
        "databases": {},
        "names": {},
        "pages": {},
        "doctor": [],
        "overlap": {
            "http": {"spans": 0, "peak": 0, "busy_s": 0.0, "mean_open": 0.0},
            "active": {"spans": 0, "peak": 0, "busy_s": 0.0, "mean_open": 0.0},
            "issued": {"spans": 0, "peak": 0, "busy_s": 0.0, "mean_open": 0.0, "callers": 0},
        },
    }
    for key, value in changes.items():
        data[key] = value
    return data


def _row(empty: Any, **fields: Any) -> dict[str, Any]:
    """A totals row of spans that ran one at a time: each ``x_s`` given (the union
    on the wall clock) is also its ``x_total_s`` (the sum), unless that is given."""
    row = _totals(empty)
    row.update(fields)
    for name, value in fields.items():
        total = name.removesuffix("_s") + "_total_s"
        if name.endswith("_s") and total in row and total not in fields:
            row[total] = value
    return row


def _host(**fields: Any) -> dict[str, Any]:
    return _row(HostTotals(), **fields)


def _db(**fields: Any) -> dict[str, Any]:
    fields.setdefault("busy_s", fields.get("connect_s", 0.0) + fields.get("query_s", 0.0))
    return _row(DatabaseTotals(), **fields)


def _overlap(**parts: dict[str, Any]) -> dict[str, Any]:
    base = copy.deepcopy(_data()["overlap"])
    for name, fields in parts.items():
        base[name].update(fields)
    return base


def _conns(connects: int, short: int, connect_s: float = 1.0) -> dict[str, Any]:
    """One database's data: ``connects`` connects and as many queries, ``short``
    of the connections replaced after their few statements."""
    row = _db(
        connects=connects,
        connect_s=connect_s,
        queries=connects,
        query_s=1.0,
        short_connections=short,
    )
    return {"databases": {"db:3306": row}}


SERIAL = {"spans": 100, "peak": 1, "busy_s": 9.0, "mean_open": 1.0}
CASES: list[tuple[str, str | None, dict[str, Any]]] = [
    ("quiet run", None, {}),
    ("connect per query", "connect-per-query", _conns(10, 10)),
    ("9 replaced: too few", None, _conns(10, 9)),
    ("half the connections replaced", "connect-per-query", _conns(20, 10)),
    ("under half the connections replaced", None, _conns(21, 10)),
    ("a pool's 16 connections, a query each, none replaced", None, _conns(16, 0)),
    ("connects cheap beside queries", None, _conns(10, 10, connect_s=0.1)),
    (
        "serial requests",
        "serial-requests",
        {
            "hosts": {"a:80": _host(requests=100, time_s=9.0)},
            "overlap": _overlap(http=SERIAL, issued=SERIAL),
        },
    ),
    (
        "serial, but the program is CPU-bound",
        None,
        {"overlap": _overlap(http={**SERIAL, "busy_s": 4.0}, issued={**SERIAL, "busy_s": 4.0})},
    ),
    (
        "two at once",
        None,
        {"overlap": _overlap(http={**SERIAL, "peak": 2}, issued={**SERIAL, "peak": 2})},
    ),
    (
        "serial pages",
        "serial-pages",
        {
            "pages": {
                "s3.ListObjectsV2": _row(
                    recorder.PageTotals(),
                    calls=3,
                    pages=2,
                    request_s=0.3,
                    parse_s=0.5,
                    gap_s=0.4,
                    gaps=2,
                )
            }
        },
    ),
    (
        "pages whose gap is shorter than the request",
        None,
        {
            "pages": {
                "s3.ListObjectsV2": _row(
                    recorder.PageTotals(),
                    calls=3,
                    pages=2,
                    request_s=0.9,
                    parse_s=0.1,
                    gap_s=0.4,
                    gaps=2,
                )
            }
        },
    ),
    (
        "serialised https, confirmed",
        "serialised-https",
        {
            "overlap": _overlap(
                issued={"spans": 20, "peak": 10, "busy_s": 1.0, "mean_open": 5.0, "callers": 20},
                active={"spans": 40, "peak": 1, "busy_s": 1.0, "mean_open": 1.0},
            ),
            "doctor": [{"id": "pyopenssl-injected", "status": "fail", "message": "m", "fix": "f"}],
        },
    ),
    (
        "the same overlap without doctor's confirmation",
        None,
        {
            "overlap": _overlap(
                issued={"spans": 20, "peak": 10, "busy_s": 1.0, "mean_open": 5.0, "callers": 20},
                active={"spans": 40, "peak": 1, "busy_s": 1.0, "mean_open": 1.0},
            ),
            "doctor": [{"id": "pyopenssl-injected", "status": "warn", "message": "m", "fix": "f"}],
        },
    ),
    (
        "pool discards",
        "pool-too-small",
        {"hosts": {"a:80": _host(requests=10, pool_discards=3, pool_size=2, peak_in_flight=16)}},
    ),
    (
        "a full pool, but never more in flight than it holds",
        None,
        {"hosts": {"a:80": _host(requests=10, pool_discards=3, pool_size=2, peak_in_flight=2)}},
    ),
    (
        "tls per request",
        "tls-per-request",
        {"hosts": {"a:443": _host(requests=10, tls=10, tls_s=0.5, time_s=1.0)}},
    ),
    (
        "16 at once on one session: 16 connections, none replaced",
        None,
        {"hosts": {"a:443": _host(requests=16, tls=16, tls_s=0.5, time_s=1.0, peak_in_flight=16)}},
    ),
    (
        "4 at once, a connection per request",
        "tls-per-request",
        {"hosts": {"a:443": _host(requests=13, tls=13, tls_s=0.5, time_s=1.0, peak_in_flight=4)}},
    ),
    (
        "tls on most, not 80%",
        None,
        {"hosts": {"a:443": _host(requests=13, tls=10, tls_s=0.5, time_s=1.0)}},
    ),
    (
        "repeated dns",
        "repeated-dns",
        {"names": {"a.example": _row(NameTotals(), lookups=10, time_s=0.1)}},
    ),
    (
        "cheap repeated dns",
        None,
        {"names": {"a.example": _row(NameTotals(), lookups=10, time_s=0.09)}},
    ),
]


@pytest.mark.parametrize(("case", "expected", "changes"), CASES, ids=[c[0] for c in CASES])
def test_rules(case: str, expected: str | None, changes: dict[str, Any]) -> None:
    found = analyse(_data(**changes))
    assert [f.id for f in found] == ([expected] if expected else [])
    for finding in found:
        assert finding.id in findings.IDS
        assert finding.evidence and finding.fix and finding.message


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT 1", "SELECT"),
        ("select name from users where id = %s", "SELECT users"),
        ("  (SELECT a FROM `shop`.`items`)", "SELECT shop`.`items"),
        ("INSERT INTO orders (a) VALUES ('x from y')", "INSERT orders"),
        ("SELECT 'FROM secret' FROM t", "SELECT t"),
        ("UPDATE accounts SET pw = 'p'", "UPDATE accounts"),
        ("DELETE FROM sessions WHERE token = 'abc'", "DELETE sessions"),
        ("/* hint FROM x */ SELECT * FROM real", "SELECT real"),
        (b"SELECT x FROM bytes_table", "SELECT bytes_table"),
        ("", "SQL"),
        (None, "SQL"),
        ("BEGIN", "BEGIN"),
    ],
)
def test_statement(query: Any, expected: str) -> None:
    assert statement(query) == expected


@given(st.text(min_size=1, max_size=40))
def test_no_value_comes_through(value: str) -> None:
    """A value quoted as SQL quotes it, in any statement shape, never appears."""
    quoted = "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    for query in (
        f"SELECT * FROM t WHERE a = {quoted}",
        f"INSERT INTO t VALUES ({quoted})",
        f"UPDATE t SET a = {quoted}",
        f"SELECT {quoted} FROM t",
    ):
        described = statement(query)
        assert described in ("SELECT t", "INSERT t", "UPDATE t")


def test_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``keep`` operations are counted, not kept; past MAX_KEYS hosts, one
    "(other)" row takes the rest."""
    monkeypatch.setattr(recorder, "MAX_KEYS", 50)
    rec = Recorder(keep=100)
    for i in range(1000):
        op = rec.http_start("urllib3", f"host{i}:80", "GET /", float(i))
        assert op is not None
        rec.http_end(op, i + 0.5, status=200)
    data = rec.data()
    assert data["operations"] == 1000 and data["kept"] == 100
    assert len(data["hosts"]) == 50 + 1
    assert data["hosts"][recorder.OTHER]["requests"] == 1000 - 50
    assert data["overlap"]["http"]["peak"] == 1
    assert sum(row["requests"] for row in data["hosts"].values()) == 1000
