"""surge.bulk.inputs: formats and their detection, line numbers, errors, streaming."""

from __future__ import annotations

import io
import pickle
import sys
import tracemalloc
from pathlib import Path

import pytest

from surge.bulk.inputs import InputItem, default_url, read_inputs
from surge.errors import UsageError


def write(directory: Path, name: str, content: str | bytes) -> Path:
    path = directory / name
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def items(source: object, **options: str) -> list[tuple[int, str, str]]:
    return [(item.line, item.input, item.url) for item in read_inputs(source, **options)]  # type: ignore[arg-type]


def error_of(source: object, **options: str) -> tuple[list[int], str]:
    """The lines produced before the UsageError, and its message."""
    produced = []
    with pytest.raises(UsageError) as caught:
        for item in read_inputs(source, **options):  # type: ignore[arg-type]
            produced.append(item.line)
    return produced, str(caught.value)


# --- text --------------------------------------------------------------------


def test_text_lines_blank_and_comment_lines_give_no_item(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "urls.txt",
        "# top sites\n\ngoogle.com\n   \n  https://example.org/a?b=1  \n#x.com\nnot a url!!\n",
    )
    assert items(path) == [
        (3, "google.com", "http://google.com/"),
        (5, "https://example.org/a?b=1", "https://example.org/a?b=1"),
        # Garbage is still an input: the engine makes it an invalid_url record.
        (7, "not a url!!", "http://not a url!!/"),
    ]


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("google.com", "http://google.com/"),
        ("example.com/path", "http://example.com/path"),
        ("example.com?q=1", "http://example.com/?q=1"),
        ("example.com#top", "http://example.com/#top"),
        ("example.com:8080", "http://example.com:8080/"),
        ("//example.com/x", "http://example.com/x"),
        ("HTTPS://Example.com", "HTTPS://Example.com"),
        ("ftp://example.com/f", "ftp://example.com/f"),
        ("example.com/r?to=http://x.org", "http://example.com/r?to=http://x.org"),
    ],
)
def test_default_url_is_curls(value: str, url: str) -> None:
    assert default_url(value) == url


def test_crlf_and_byte_order_mark_are_not_part_of_the_input(tmp_path: Path) -> None:
    path = write(tmp_path, "urls.txt", b"\xef\xbb\xbfgoogle.com\r\nyoutube.com\r\n")
    assert items(path) == [
        (1, "google.com", "http://google.com/"),
        (2, "youtube.com", "http://youtube.com/"),
    ]


@pytest.mark.parametrize("kind", ["file", "bytes", "text"])
def test_a_long_first_line_loses_its_byte_order_mark_too(tmp_path: Path, kind: str) -> None:
    """A JSONL input whose first line is past the bound, after a byte-order
    mark: the line is one error item and the input is still sniffed as JSONL
    (the mark was kept on a long line, so ``{"url": null}`` on the next line
    became a text input).  Whatever the source: a file, a byte stream (stdin),
    a text stream."""
    data = b'\xef\xbb\xbf{"url": "http://a.example/' + b"a" * 200 + b'"}\n{"url": null}\n'
    source: object
    if kind == "file":
        source = write(tmp_path, "in", data)
    elif kind == "bytes":
        source = io.BytesIO(data)
    else:
        source = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="\n")
    got = list(read_inputs(source, max_line=100))  # type: ignore[arg-type]
    assert [item.line for item in got] == [1, 2]
    assert got[0].problem is not None and "--max-input-line" in got[0].problem
    assert got[0].input.startswith('{"url"')
    assert got[1].problem == 'field "url" is null, not a URL'  # a JSONL line, so a record


def test_template_applies_to_inputs_without_a_scheme(tmp_path: Path) -> None:
    path = write(tmp_path, "urls.txt", "google.com\nhttp://keep.me/\n")
    assert items(path, template="https://www.{}/") == [
        (1, "google.com", "https://www.google.com/"),
        (2, "http://keep.me/", "http://keep.me/"),
    ]
    # A template without a scheme still gets curl's default one.
    assert items(path, template="www.{}")[0][2] == "http://www.google.com/"


@pytest.mark.parametrize("template", ["https://www.example.com/", "{}.{}", "https://{x}/"])
def test_bad_template_is_a_usage_error_before_reading(template: str) -> None:
    # Raised by the call itself, not by the first next(): the file does not exist.
    with pytest.raises(UsageError, match="exactly once"):
        read_inputs("does-not-exist.txt", template=template)


def test_bad_format_argument_is_a_usage_error_before_reading() -> None:
    with pytest.raises(UsageError, match="unknown input format 'xml'"):
        read_inputs("does-not-exist.txt", input_format="xml")


# --- format detection --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("top.csv", "1,google.com\n"),
        ("top.tsv", "1\tgoogle.com\n"),
        ("urls.jsonl", '{"url": "google.com"}\n'),
        ("urls.ndjson", '{"url": "google.com"}\n'),
        ("urls.json", '{"url": "google.com"}\n'),
        ("urls.txt", "google.com\n"),
        ("urls", "google.com\n"),
        ("urls.list", '\n\n  {"url": "google.com"}\n'),  # sniffed: first non-blank is {
    ],
)
def test_format_from_extension_or_first_line(tmp_path: Path, name: str, content: str) -> None:
    path = write(tmp_path, name, content)
    assert [(i.input, i.url) for i in read_inputs(path)] == [("google.com", "http://google.com/")]


def test_input_format_overrides_the_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "top.txt", "1,google.com\n")
    assert items(path, input_format="csv") == [(1, "google.com", "http://google.com/")]
    assert items(path, input_format="text")[0][1] == "1,google.com"  # the whole line
    assert items(path) == [(1, "google.com", "http://google.com/")]  # CSV by its content


def test_csv_extension_with_tabs_is_sniffed(tmp_path: Path) -> None:
    path = write(tmp_path, "export.csv", "rank\tdomain\n1\tgoogle.com\n")
    assert items(path) == [(2, "google.com", "http://google.com/")]


def test_empty_file_has_no_inputs(tmp_path: Path) -> None:
    assert items(write(tmp_path, "urls.txt", "")) == []
    assert items(write(tmp_path, "urls.csv", "\n\n")) == []


# --- CSV ---------------------------------------------------------------------


def test_top_sites_csv_without_header(tmp_path: Path) -> None:
    path = write(tmp_path, "top-1m.csv", "1,google.com\n2,youtube.com\n\n3,facebook.com\n")
    assert items(path) == [
        (1, "google.com", "http://google.com/"),
        (2, "youtube.com", "http://youtube.com/"),
        (4, "facebook.com", "http://facebook.com/"),
    ]


def test_csv_header_names_the_column(tmp_path: Path) -> None:
    path = write(tmp_path, "sites.csv", "Rank,Note,Domain\n1,a.b,google.com\n2,,youtube.com\n")
    assert items(path) == [
        (2, "google.com", "http://google.com/"),
        (3, "youtube.com", "http://youtube.com/"),
    ]


def test_csv_header_detected_by_shape(tmp_path: Path) -> None:
    # No known name, but the first row has no URL-like cell and the second has one.
    path = write(tmp_path, "sites.csv", "id,address\n1,google.com\n")
    assert items(path) == [(2, "google.com", "http://google.com/")]


def test_csv_column_option_by_name_or_number_from_1(tmp_path: Path) -> None:
    path = write(tmp_path, "sites.csv", "rank,url,mirror\n1,a.com,b.com\n")
    assert items(path, column="MIRROR") == [(2, "b.com", "http://b.com/")]
    assert items(path, column="3") == [(2, "b.com", "http://b.com/")]
    plain = write(tmp_path, "plain.csv", "a.com,b.com\nc.com,d.com\n")
    assert [i[1] for i in items(plain, column="2")] == ["b.com", "d.com"]
    assert [i[1] for i in items(plain)] == ["a.com", "c.com"]  # first URL-like column


def test_csv_quoted_multiline_fields_keep_physical_line_numbers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "sites.csv",
        'rank,domain,comment\n1,google.com,"two\nlines"\n2,youtube.com,plain\n'
        '3,facebook.com,"three\nphysical\nlines"\n\n4,x.com,\n',
    )
    assert [(i[0], i[1]) for i in items(path)] == [
        (2, "google.com"),
        (4, "youtube.com"),
        (5, "facebook.com"),
        (9, "x.com"),
    ]


def test_csv_empty_cells_are_invalid_url_records(tmp_path: Path) -> None:
    path = write(tmp_path, "top.csv", "rank,domain\n1,google.com\n2,\n3,  \n,\n4,x.com\n\n")
    got = list(read_inputs(path))
    assert [(i.line, i.input) for i in got] == [
        (2, "google.com"),
        (3, ""),
        (4, ""),
        (5, ""),
        (6, "x.com"),
    ]  # the blank line 7: no row, no record
    assert [i.problem for i in got] == [
        None,
        'column 2 ("domain") is empty, not a URL',
        'column 2 ("domain") is blank, not a URL',
        'column 2 ("domain") is empty, not a URL',
        None,
    ]


def test_single_column_csv_takes_anything(tmp_path: Path) -> None:
    path = write(tmp_path, "one.csv", "localhost\nintranet\n")
    assert [i[1] for i in items(path)] == ["localhost", "intranet"]


# --- JSONL -------------------------------------------------------------------


def test_jsonl_url_field_and_column(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "urls.jsonl",
        '{"url": "https://a.org/", "site": "b.org"}\n\n{"url": null, "site": "c.org"}\n'
        '{"url": " d.org ", "site": ""}\n',
    )
    assert items(path) == [
        (1, "https://a.org/", "https://a.org/"),
        (3, "null", "null"),  # an invalid_url record (below), not a line without one
        (4, "d.org", "http://d.org/"),
    ]
    assert items(path, column="site") == [
        (1, "b.org", "http://b.org/"),
        (3, "c.org", "http://c.org/"),
        (4, "", ""),
    ]


# --- errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "options", "before", "message"),
    [
        (
            "urls.jsonl",
            '{"url": "a.org"}\n{"url": "b.org" "x": 1}\n',
            {},
            [1],
            "urls.jsonl:2: not valid JSON (Expecting ',' delimiter: column 17)",
        ),
        (
            "urls.jsonl",
            '{"url": "a.org"}\n["b.org"]\n',
            {},
            [1],
            "urls.jsonl:2: expected a JSON object, found an array",
        ),
        (
            "urls.jsonl",
            '{"url": "a.org"}\n{"domain": "b.org", "rank": 2}\n',
            {},
            [1],
            'urls.jsonl:2: no "url" field (its fields: domain, rank; choose one with --column)',
        ),
        (
            "top.csv",
            "rank,domain\n1,google.com\n2\n3,x.com\n",
            {},
            [2],
            'top.csv:3: row has 1 column, column 2 ("domain") expected',
        ),
        (
            "top.csv",
            "1,google.com\n2\n",
            {},
            [1],
            "top.csv:2: row has 1 column, column 2 expected",
        ),
        (
            "top.csv",
            'rank,domain\n1,google.com\n2,"youtube.com\n3,x.com\n',
            {},
            [2],
            "top.csv:3: not valid CSV (unexpected end of data)",
        ),
        (
            "top.csv",
            "rank,domain\n1,google.com\n",
            {"column": "site"},
            [],
            'top.csv:1: no column named "site" in the header (rank, domain)',
        ),
        (
            "top.csv",
            "1,google.com\n",
            {"column": "site"},
            [],
            'top.csv: --column "site" is a name, but the file has no header row; '
            "give the column's number, counted from 1",
        ),
        (
            "top.csv",
            "1,google.com\n",
            {"column": "0"},
            [],
            "--column 0: columns are counted from 1",
        ),
        (
            "data.csv",
            "1,2\n3,4\n",
            {},
            [],
            "data.csv:1: no column looks like a URL or domain; choose one with --column",
        ),
        (
            "urls.txt",
            "a.org\n",
            {"column": "2"},
            [],
            "urls.txt: --column applies to CSV and JSONL inputs; this input is read as text",
        ),
        (
            "urls.txt",
            b"a.org\nb.org\n\n\nc\xe9.org\nd.org\n",
            {},
            [1, 2],
            "urls.txt:5: not UTF-8 text (byte 0xe9 at byte 2 of the line)",
        ),
        ("urls.txt", None, {}, [], "urls.txt: cannot read: [Errno 2] No such file or directory"),
    ],
)
def test_errors_name_file_and_line_and_come_after_the_good_records(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    content: str | bytes | None,
    options: dict[str, str],
    before: list[int],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # so that the file is named as a user names it
    if content is not None:
        write(tmp_path, name, content)
    assert error_of(name, **options) == (before, message)


def test_undecodable_bytes_far_into_the_file_name_their_line(tmp_path: Path) -> None:
    # Far beyond the text layer's first read-ahead chunk, and every good line
    # before the bad one is still produced.
    good = "".join(f"site{i}.example\n" for i in range(1, 5001))
    path = write(tmp_path, "urls.txt", good.encode() + b"bad\xff.example\nlast.example\n")
    produced, message = error_of(path)
    assert produced == list(range(1, 5001))
    assert message == f"{path}:5001: not UTF-8 text (byte 0xff at byte 4 of the line)"


def test_directory_is_a_usage_error(tmp_path: Path) -> None:
    assert error_of(tmp_path) == ([], f"{tmp_path}: cannot read: [Errno 21] Is a directory")


# --- stdin and streams -------------------------------------------------------


def test_dash_reads_stdin_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"google.com\n\nhttps://x.org/\nbad\xff\n"))
    monkeypatch.setattr(sys, "stdin", stdin)
    produced, message = error_of("-")
    assert produced == [1, 3]
    assert message == "<stdin>:4: not UTF-8 text (byte 0xff at byte 4 of the line)"


def test_dash_sniffs_jsonl_on_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"url": "a.org"}\n')))
    assert items("-") == [(1, "a.org", "http://a.org/")]


def test_open_text_and_binary_streams() -> None:
    assert items(io.StringIO("a.org\n#c\nb.org\n")) == [
        (1, "a.org", "http://a.org/"),
        (3, "b.org", "http://b.org/"),
    ]
    assert items(io.BytesIO(b"1,a.org\n"), input_format="csv") == [(1, "a.org", "http://a.org/")]
    (item,) = read_inputs(io.StringIO('{"url": 1}\n'))
    assert (item.line, item.input, item.problem) == (1, "1", 'field "url" is a number, not a URL')


def test_item_is_a_frozen_slotted_value() -> None:
    item = InputItem(1, "a.org", "http://a.org/")
    assert not hasattr(item, "__dict__")
    with pytest.raises(AttributeError):
        item.line = 2  # type: ignore[misc]


# --- constant memory ---------------------------------------------------------


def test_a_million_lines_stream_in_constant_memory(tmp_path: Path) -> None:
    path = tmp_path / "million.txt"
    with path.open("w") as out:
        out.writelines(f"site{i}.example\n" for i in range(1_000_000))
    # Tracing every allocation makes Python ~4x slower, so the trace covers the
    # opening and the first 200,000 lines: enough to see the file read whole
    # (~20 MB) or any per-line growth of 10 bytes or more (> 2 MB).  The rest is
    # streamed untraced, to check the count and the last line.
    traced_lines = 200_000
    stream = read_inputs(path)
    tracemalloc.start()
    try:
        for count, item in enumerate(stream, 1):  # noqa: B007 - count is checked after
            if count == traced_lines:
                break
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    for count, item in enumerate(stream, traced_lines + 1):  # noqa: B007
        pass
    assert count == 1_000_000
    assert item == InputItem(1_000_000, "site999999.example", "http://site999999.example/")
    assert peak < 2_000_000, f"peak traced memory {peak:,} bytes"


def test_input_items_survive_pickling() -> None:
    # Shards of items travel to Dask workers pickled (surge fetch --cluster).
    items = [InputItem(1, "example.com", "http://example.com/"), InputItem(7, "x", "http://x/")]
    assert pickle.loads(pickle.dumps(items)) == items


@pytest.mark.parametrize(
    ("text", "urls"),
    [
        (
            "rank,domain\n1,google.com\n2,youtube.com\n",
            ["http://google.com/", "http://youtube.com/"],
        ),
        ("1,google.com\n2,a.org\n", ["http://google.com/", "http://a.org/"]),
        ("1\tgoogle.com\n", ["http://google.com/"]),
        ("http://a.com/x,y\nb.com\n", ["http://a.com/x,y", "http://b.com/"]),
        ("a.com/x,y\n", ["http://a.com/x,y"]),
    ],
)
def test_csv_is_recognised_by_its_content_without_an_extension(
    text: str, urls: list[str], tmp_path: Path
) -> None:
    """A top-sites list in a .txt file, or on stdin, is CSV: its rank is not a host."""
    path = tmp_path / "top.txt"
    path.write_text(text)
    assert [item.url for item in read_inputs(str(path))] == urls
    assert [item.url for item in read_inputs(io.StringIO(text))] == urls
