"""One record per input line: a JSONL line whose URL is null, empty, blank or
not a string, and a CSV row whose URL cell is empty, are ``invalid_url``
records - never a line without a record, never a stop of the whole run.  A
blank line holds no input in any format (and a ``#`` line none in text).

Before, ``{"url": null}``, ``{"url": ""}`` and ``{"url": "  "}`` gave no record
(5 lines, 2 records, exit 0) and ``{"url": 123}`` stopped the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SURGE = [sys.executable, "-m", "surge.cli"]

#: (a JSONL line's "url" value as JSON, the record's input, its error detail)
JSONL_SHAPES = [
    ("null", "null", 'field "url" is null, not a URL'),
    ('""', "", 'field "url" is empty, not a URL'),
    ('"   "', "", 'field "url" is blank, not a URL'),
    ('"\\t"', "", 'field "url" is blank, not a URL'),
    ("123", "123", 'field "url" is a number, not a URL'),
    ("1.5", "1.5", 'field "url" is a number, not a URL'),
    ("true", "true", 'field "url" is a boolean, not a URL'),
    ('["http://a.example/"]', '["http://a.example/"]', 'field "url" is an array, not a URL'),
    ('{"href": "x"}', '{"href": "x"}', 'field "url" is an object, not a URL'),
]


def _fetch(source: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    out = source.parent / "out.jsonl"
    done = subprocess.run(
        [*SURGE, "fetch", str(source), "-o", str(out), "-q", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return done, sorted(records, key=lambda record: record["line"])  # in completion order


@pytest.mark.parametrize(("value", "shown", "detail"), JSONL_SHAPES)
def test_a_jsonl_line_without_a_url_string_is_an_invalid_url_record(
    tmp_path: Path, value: str, shown: str, detail: str
) -> None:
    source = tmp_path / "in.jsonl"
    # the shape between two lines that are URLs (not valid ones: no network needed)
    source.write_text(f'{{"url": "nope"}}\n{{"url": {value}, "id": 2}}\n{{"url": "x y"}}\n')
    done, records = _fetch(source)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert [r["line"] for r in records] == [1, 2, 3]
    second = records[1]
    assert (second["input"], second["url"], second["status"]) == (shown, shown, None)
    assert (second["error"], second["error_detail"]) == ("invalid_url", detail)


def test_every_shape_in_one_file_gives_one_record_each(tmp_path: Path) -> None:
    """The issue's case: 5 lines, 5 records (there were 2, then a stop)."""
    source = tmp_path / "in.jsonl"
    values = [value for value, _, _ in JSONL_SHAPES]
    source.write_text("".join(f'{{"url": {value}}}\n' for value in values) + "\n\n")
    done, records = _fetch(source)
    assert done.returncode == 0, done.stderr
    assert [r["line"] for r in records] == list(range(1, len(values) + 1))  # blank: none
    assert {r["error"] for r in records} == {"invalid_url"}


@pytest.mark.parametrize(
    ("content", "lines"),
    [
        # an empty cell of the URL column, in a row that is there: a record
        ("rank,domain\n1,\n2,  \n\n3,x y\n", [2, 3, 5]),
        ('rank,domain\n1,""\n', [2]),
        ("url\n\n\n", []),  # blank lines: no rows at all
    ],
)
def test_a_csv_row_with_an_empty_url_cell_is_an_invalid_url_record(
    tmp_path: Path, content: str, lines: list[int]
) -> None:
    source = tmp_path / "in.csv"
    source.write_text(content)
    done, records = _fetch(source)
    assert done.returncode == 0, done.stderr
    assert [r["line"] for r in records] == lines
    assert all(r["error"] == "invalid_url" for r in records)
    empty = [r for r in records if r["input"] == ""]
    assert all(
        r["error_detail"]
        in ('column 2 ("domain") is empty, not a URL', 'column 2 ("domain") is blank, not a URL')
        for r in empty
    )


def test_blank_and_comment_lines_of_a_text_input_hold_no_input(tmp_path: Path) -> None:
    """As the docs say: one record per input line, where a blank line and a
    ``#`` comment are no input."""
    source = tmp_path / "in.txt"
    source.write_text("x y\n\n   \n# a comment\nnope\n")
    done, records = _fetch(source)
    assert done.returncode == 0, done.stderr
    assert [r["line"] for r in records] == [1, 5]


def test_the_api_gives_a_record_for_an_input_that_is_not_a_string() -> None:
    import surge

    inputs: list[object] = [None, "", "   ", 123, "x y"]
    records = sorted(surge.fetch_all(inputs), key=lambda r: r["line"])  # type: ignore[arg-type]
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5]
    assert {r["error"] for r in records} == {"invalid_url"}
    assert records[0]["error_detail"] == "the input is null, not a URL"
    assert records[3]["input"] == "123"
