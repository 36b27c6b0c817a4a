"""surge.bulk.outputs: the record writer, and reading outputs back for --resume."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surge.bulk import outputs
from surge.bulk.outputs import (
    CSV_COLUMNS,
    FIELDS,
    TIMING_FIELDS,
    TLS_FIELDS,
    LineSet,
    done_lines,
    encode_records,
    open_writer,
    truncate_partial_last_line,
)
from surge.errors import ERROR_CLASSES, UsageError


def record(line: int, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "url": f"https://site{line}.example/",
        "input": f"site{line}.example",
        "line": line,
        "status": 200,
        "error": None,
        "error_detail": None,
        "elapsed_ms": 12.3456789,
        "bytes": 1024,
        "attempts": 1,
        "redirects": 0,
        "redirect_ms": 0.0,
        "final_url": f"https://site{line}.example/home",
        "remote_ip": "127.0.0.1",
        "tls": {
            "version": "TLSv1.3",
            "cipher": "TLS_AES_256_GCM_SHA384",
            "alpn": "http/1.1",
            "subject": f"CN=site{line}.example",
            "issuer": "O=TestCA,CN=TestCA",
            "not_after": "2027-01-01T00:00:00Z",
        },
        "timings": {
            "dns_ms": 1.00049,
            "connect_ms": 2.5,
            "tls_ms": None,
            "ttfb_ms": 3.0,
            "body_ms": 0.0004,
        },
    }
    base.update(changes)
    return base


def failed(line: int) -> dict[str, Any]:
    return record(
        line,
        status=None,
        error="connect_refused",
        error_detail='connection refused by 127.0.0.1:9, "twice"',
        final_url=None,
        remote_ip=None,
        tls=None,
        timings=None,
    )


def write_all(path: Path, fmt: str, records: list[dict[str, Any]], *, append: bool = False) -> None:
    with open_writer(path, fmt, append=append) as writer:
        for each in records:
            writer.write(each)


# --- the writer --------------------------------------------------------------


def test_jsonl_records_keep_the_contract_order_and_round_times(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_all(path, "jsonl", [record(1), failed(2)])
    lines = path.read_text().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert list(first) == list(FIELDS)
    assert list(first["timings"]) == list(TIMING_FIELDS)
    assert first["elapsed_ms"] == 12.346
    assert first["timings"] == {
        "dns_ms": 1.0,
        "connect_ms": 2.5,
        "tls_ms": None,
        "ttfb_ms": 3.0,
        "body_ms": 0.0,
    }
    assert " " not in lines[0]  # compact
    assert second["status"] is None and second["error"] == "connect_refused"
    assert second["error_detail"] == 'connection refused by 127.0.0.1:9, "twice"'
    assert second["timings"] == dict.fromkeys(TIMING_FIELDS)  # null timings: all phases null


def test_csv_records_flatten_timings_and_leave_nulls_empty(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    write_all(path, "csv", [record(1), failed(2)])
    with path.open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert rows[0]["elapsed_ms"] == "12.346" and rows[0]["tls_ms"] == ""
    assert rows[0]["line"] == "1" and rows[0]["status"] == "200"
    assert rows[1]["status"] == "" and rows[1]["final_url"] == "" and rows[1]["dns_ms"] == ""
    assert rows[1]["error_detail"] == 'connection refused by 127.0.0.1:9, "twice"'


def test_csv_values_with_newlines_stay_on_one_physical_line(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    write_all(path, "csv", [record(1, input="a\nb.com", error_detail="line one\r\nline two")])
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert "a b.com" in lines[1] and "line one line two" in lines[1]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_append_adds_records_and_no_second_csv_header(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"out.{fmt}"
    write_all(path, fmt, [record(1), record(2)])
    write_all(path, fmt, [record(3)], append=True)
    lines = path.read_text().splitlines()
    assert len(lines) == (4 if fmt == "csv" else 3)
    assert done_lines(path, fmt) == {1, 2, 3}
    if fmt == "csv":
        assert lines.count(",".join(CSV_COLUMNS)) == 1


def test_append_to_a_missing_or_empty_csv_writes_the_header(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    write_all(path, "csv", [record(1)], append=True)
    assert path.read_text().splitlines()[0] == ",".join(CSV_COLUMNS)


def test_append_cuts_a_partial_last_line_first(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_all(path, "jsonl", [record(1), record(2)])
    path.write_bytes(path.read_bytes()[:-40])  # an interrupted write
    write_all(path, "jsonl", [record(2)], append=True)
    assert [json.loads(line)["line"] for line in path.read_text().splitlines()] == [1, 2]


def test_records_are_buffered_then_flushed_as_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outputs, "FLUSH_RECORDS", 3)
    path = tmp_path / "out.jsonl"
    with open_writer(path, "jsonl") as writer:
        writer.write(record(1))
        writer.write(record(2))
        assert path.read_bytes() == b""  # still buffered
        writer.write(record(3))
        assert len(path.read_text().splitlines()) == 3 and path.read_bytes().endswith(b"\n")
        writer.write(record(4))
    assert len(path.read_text().splitlines()) == 4  # close flushes


def test_records_are_flushed_when_the_interval_has_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return now[0]

    monkeypatch.setattr(outputs, "time", Clock)
    path = tmp_path / "out.csv"
    with open_writer(path, "csv") as writer:
        writer.write(record(1))
        assert path.read_bytes() == b""
        now[0] += outputs.FLUSH_INTERVAL
        writer.write(record(2))
        assert len(path.read_text().splitlines()) == 3  # header and both records
        writer.write(record(3))
        writer.flush()  # what an idle engine calls
        assert len(path.read_text().splitlines()) == 4


def test_stdout_writer_does_not_close_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    for path in (None, "-"):
        with open_writer(path, "jsonl") as writer:
            writer.write(record(1))
    assert not stdout.closed
    lines = stdout.buffer.getvalue().decode().splitlines()  # type: ignore[attr-defined]
    assert [json.loads(line)["line"] for line in lines] == [1, 1]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_encoded_records_write_the_same_file(tmp_path: Path, fmt: str) -> None:
    # What a cluster worker sends (encode_records) and the client writes whole
    # (write_encoded) is the file the writer makes from the records themselves.
    records = [record(1), failed(2), record(3, input='a,"b"\nc')]
    direct, encoded = tmp_path / f"direct.{fmt}", tmp_path / f"encoded.{fmt}"
    write_all(direct, fmt, records)
    with open_writer(encoded, fmt) as writer:
        writer.write_encoded(encode_records(records[:2], fmt))
        writer.write_encoded(encode_records(records[2:], fmt))
    assert encoded.read_bytes() == direct.read_bytes()


def test_summaries_merge_to_the_summary_of_all_records() -> None:
    from surge.bulk.summary import Summary

    records = [record(n, elapsed_ms=float(n)) for n in range(1, 200)] + [failed(200)]
    whole, parts = Summary(), Summary()
    for chunk in (records[:70], records[70:]):
        part = Summary()
        for each in chunk:
            part.add(each)
            whole.add(each)
        parts.merge(part)
    assert parts.as_dict(1.0) == whole.as_dict(1.0)
    assert parts.latency.total == whole.latency.total


@pytest.mark.parametrize(
    "bad",
    [
        {k: v for k, v in record(1).items() if k != "bytes"},
        {**record(1), "extra": 1},
        record(1, error="timeout"),
        record(1, timings={"dns_ms": 1.0}),
        record(1, bytes="many"),
    ],
)
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_record_off_the_contract_is_a_programming_error(
    tmp_path: Path, fmt: str, bad: dict[str, Any]
) -> None:
    with open_writer(tmp_path / "out", fmt) as writer, pytest.raises(ValueError):
        writer.write(bad)


def test_writer_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown output format 'xml'"):
        open_writer(tmp_path / "out", "xml")
    with pytest.raises(UsageError, match=r"cannot write: \[Errno 2\] No such file or directory"):
        open_writer(tmp_path / "missing-dir" / "out.jsonl", "jsonl")


# --- resume: done_lines and truncate_partial_last_line -------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_done_lines_skips_a_cut_last_line(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"out.{fmt}"
    write_all(path, fmt, [record(3), failed(1), record(7)])
    assert done_lines(path, fmt) == {1, 3, 7}
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])  # the record of line 7 is cut
    assert done_lines(path, fmt) == {1, 3}
    assert truncate_partial_last_line(path) == len(whole) - 10 - whole[:-1].rindex(b"\n") - 1
    assert path.read_bytes() == whole[: whole[:-1].rindex(b"\n") + 1]
    assert truncate_partial_last_line(path) == 0  # already clean


def test_truncate_leaves_missing_empty_and_clean_files_alone(tmp_path: Path) -> None:
    assert truncate_partial_last_line(tmp_path / "missing") == 0
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert truncate_partial_last_line(empty) == 0
    one = tmp_path / "one"
    one.write_bytes(b"x" * 200_000)  # no newline at all, longer than a search block
    assert truncate_partial_last_line(one) == 200_000 and one.read_bytes() == b""


def test_done_lines_of_a_missing_output_is_empty(tmp_path: Path) -> None:
    assert len(done_lines(tmp_path / "out.jsonl", "jsonl")) == 0


_RECORD = json.dumps(record(1), separators=(",", ":")) + "\n"
_HEADER = ",".join(CSV_COLUMNS) + "\n"
_ROW = ",".join(["x", "x", "1"] + [""] * (len(CSV_COLUMNS) - 3)) + "\n"
_ROW_TWO = _ROW.replace(",1,", ",two,", 1)


@pytest.mark.parametrize(
    ("fmt", "content", "message"),
    [
        ("jsonl", _RECORD + '{"line": 2\n{"line": 3}\n', "out:2: not a JSON record ("),
        ("jsonl", _RECORD + '{"url": "x"}\n', 'out:2: no "input" field'),
        ("jsonl", _RECORD + "\xff\n", "out:2: not a JSON record (not UTF-8)"),
        ("jsonl", _RECORD + "[1, 2]\n", "out:2: not a JSON object"),
        ("jsonl", _RECORD.replace('"line":1', '"line":0'), "out:1: no line number"),
        ("jsonl", _RECORD.replace('"line":1', '"line":1e3'), "out:1: no line number"),
        ("jsonl", _RECORD.replace('"line":1', '"line":100000000000000000000000'), "out:1: line 1"),
        ("jsonl", _RECORD + "[1, 2]", "out:2: the last line is neither a record nor the start"),
        ("csv", "url,status\nx,200\n", "out:1: not surge's CSV header"),
        ("csv", _HEADER + _ROW + _ROW_TWO, "out:3: no line number"),
        ("csv", _HEADER + '"x,1\n', "out:2: not valid CSV (unexpected end of data)"),
        ("csv", _HEADER + "x,1\n", "out:2: 2 columns, not the header's"),
        ("csv", "url,inp\x00", "out:1: the only line is neither surge's CSV header"),
    ],
)
def test_done_lines_stops_on_a_line_that_is_not_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, content: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("out").write_bytes(content.encode("latin-1"))
    with pytest.raises(UsageError) as caught:
        done_lines("out", fmt)
    assert str(caught.value).startswith(message)
    assert str(caught.value).endswith("not surge's records, so not resumed (the file is unchanged)")


def test_done_lines_refuses_stdout() -> None:
    with pytest.raises(UsageError, match="not stdout"):
        done_lines("-", "jsonl")


def test_lineset_is_a_small_bitmap() -> None:
    lines = LineSet([5, 1, 5, 10_000_000])
    assert len(lines) == 3
    assert 5 in lines and 1 in lines and 10_000_000 in lines
    assert 2 not in lines and 0 not in lines and -1 not in lines and 10**9 not in lines
    assert "5" not in lines
    assert lines == {1, 5, 10_000_000} and list(lines) == [1, 5, 10_000_000]
    with pytest.raises(ValueError):
        lines.add(0)
    # 10 million lines in ~1.25 MB: a bit a line once a chunk is dense.
    dense = LineSet(range(1, 1_000_001))
    assert len(dense) == 1_000_000 and list(dense)[-3:] == [999_998, 999_999, 1_000_000]
    assert dense.nbytes() <= 1_000_000 // 8 + 8192


def test_lineset_memory_follows_its_size_not_its_largest_member() -> None:
    """Line numbers far apart (10**12, 10**23: an output that is not surge's) cost
    a few hundred bytes each, not (largest) / 8 bytes: 125 GB for 10**12."""
    sparse = LineSet([1, 10**12, 10**23, 2**63 + 5])
    assert len(sparse) == 4 and 10**23 in sparse and 10**23 + 1 not in sparse
    assert list(sparse) == [1, 10**12, 2**63 + 5, 10**23]
    assert sparse.nbytes() < 4 * 1024
    spread = LineSet(range(1, 10**9, 10**6))  # a thousand lines, a million apart
    assert spread.nbytes() < 1000 * 512


# --- the property: what is written is what --resume finds -----------------------

_text = st.text(max_size=30)
_times = st.none() | st.floats(min_value=0, max_value=1e7, allow_nan=False)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    line = draw(st.integers(min_value=1, max_value=100_000))
    return {
        "url": draw(_text),
        "input": draw(_text),
        "line": line,
        "status": draw(st.none() | st.integers(100, 599)),
        "error": draw(st.none() | st.sampled_from(ERROR_CLASSES)),
        "error_detail": draw(st.none() | _text),
        "elapsed_ms": draw(st.floats(min_value=0, max_value=1e7, allow_nan=False)),
        "bytes": draw(st.integers(0, 2**40)),
        "attempts": draw(st.integers(0, 10)),
        "redirects": draw(st.integers(0, 10)),
        "redirect_ms": draw(st.floats(min_value=0, max_value=1e7, allow_nan=False)),
        "final_url": draw(st.none() | _text),
        "remote_ip": draw(st.none() | st.sampled_from(["127.0.0.1", "::1"])),
        "tls": draw(st.none() | st.fixed_dictionaries({k: st.none() | _text for k in TLS_FIELDS})),
        "timings": draw(st.none() | st.fixed_dictionaries({k: _times for k in TIMING_FIELDS})),
    }


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    written=st.lists(records(), max_size=30),
    fmt=st.sampled_from(["jsonl", "csv"]),
    split=st.integers(0, 30),
)
def test_done_lines_equals_the_lines_written(
    tmp_path: Path, written: list[dict[str, Any]], fmt: str, split: int
) -> None:
    path = tmp_path / f"out.{fmt}"
    write_all(path, fmt, written[:split])
    write_all(path, fmt, written[split:], append=True)  # a resumed run
    assert done_lines(path, fmt) == {each["line"] for each in written}
    if fmt == "jsonl":
        # split on "\n" only: a JSON string may hold U+2028, which splitlines() splits on
        text = path.read_text(encoding="utf-8")
        back = [json.loads(line) for line in text.split("\n")[:-1]]
        assert [r["elapsed_ms"] for r in back] == [round(r["elapsed_ms"], 3) for r in written]
        assert [(r["url"], r["input"], r["error_detail"]) for r in back] == [
            (r["url"], r["input"], r["error_detail"]) for r in written
        ]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_extra_fields_follow_the_contracts_in_their_order(tmp_path: Path, fmt: str) -> None:
    """-i and --output-dir add fields after the contract's: JSONL keys at the end,
    CSV columns after the timings (the headers as JSON text)."""
    extras = ("headers", "body_path", "body_sha256")
    path = tmp_path / f"out.{fmt}"
    headers = [["Content-Type", "text/html"], ["Set-Cookie", "a=1"], ["Set-Cookie", "b=2"]]
    with open_writer(path, fmt, extras=extras) as writer:
        writer.write(record(1, headers=headers, body_path="d/h/x", body_sha256="ab" * 32))
        writer.write(failed(2) | {"headers": None, "body_path": None, "body_sha256": None})
        with pytest.raises(ValueError, match="missing"):
            writer.write(record(3))  # without its extras
    if fmt == "jsonl":
        first, second = (json.loads(line) for line in path.read_text().splitlines())
        assert list(first) == [*FIELDS, *extras]
        assert first["headers"] == headers and first["body_path"] == "d/h/x"
        assert first["tls"]["subject"] == "CN=site1.example"
        assert second["headers"] is None and second["tls"] is None
    else:
        with path.open(newline="") as stream:
            rows = list(csv.DictReader(stream))
        assert list(rows[0]) == [*CSV_COLUMNS, *extras]
        assert json.loads(rows[0]["headers"]) == headers
        assert rows[0]["tls_version"] == "TLSv1.3" and rows[0]["remote_ip"] == "127.0.0.1"
        assert rows[1]["tls_version"] == "" and rows[1]["headers"] == ""
