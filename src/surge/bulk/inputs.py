"""Stream the inputs of ``surge fetch``: URLs or domains from text, CSV or JSONL.

:func:`read_inputs` turns a file (or stdin, or an open stream) into
:class:`InputItem` values, one per input record, carrying the physical line number
that ``--resume`` and every result record refer to.  It streams: one line (one CSV
row) is held at a time, so a ten-million-line input runs in constant memory.

What is an input and what is a stop:

- A value that is not a valid URL is still an input: the engine turns it into an
  ``invalid_url`` record.  Only a file that cannot be read or parsed as its format
  stops the run, with a :class:`~surge.errors.UsageError` naming ``file:line`` and
  raised when the bad line is reached, so the records before it are already out.
- Bytes that are not UTF-8 are such a stop (``urls.txt:5: not UTF-8 text``), not
  replaced with U+FFFD: a silently mangled host would be fetched as a different
  one, and the user is told exactly which line to fix.

Formats come from ``input_format`` (``text``, ``csv``, ``tsv``, ``jsonl``), else the
extension (``.csv``, ``.tsv``; ``.jsonl``, ``.ndjson``, ``.json``), else the first
non-blank line (``{`` means JSONL; a first field before a comma or tab that is a
bare word or number, as ``rank,domain`` or ``1,google.com``, CSV; else text).  CSV columns given by
``--column`` are a header name or a number counted from 1, as ``cut -f`` and awk's
``$2`` count them (so ``rank,domain`` has its domain in column 2).
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import os
import re
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, islice, repeat
from pathlib import PurePath
from typing import IO, Any, Final, NamedTuple, cast

from surge.errors import UsageError
from surge.http.headers import check_method, header_line

#: The values ``input_format`` accepts.
FORMATS: Final = ("text", "csv", "tsv", "jsonl")

_EXTENSION_FORMATS: Final = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}

#: Header cells (case-insensitive) that name the column holding the URL or domain.
HEADER_NAMES: Final = frozenset(
    {"url", "uri", "link", "domain", "host", "hostname", "site", "website"}
)

# Excel and Windows Notepad start UTF-8 files with a byte-order mark; left in, it
# would glue itself to the first host ("\ufeffgoogle.com").
_BOM: Final = b"\xef\xbb\xbf"

#: A URL's scheme: any with "://", and http(s) with one or three slashes too, which
#: curl takes (http:/host), as surge.http's parse_url does.
_has_scheme = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|(?i:https?:/)").match
_path_start = re.compile(r"[/?#]").search


class LineRequest(NamedTuple):
    """What a JSONL line asks for besides its URL (each None: the run's own)."""

    method: str | None
    headers: tuple[tuple[str, str], ...] | None
    body: bytes | None


@dataclass(frozen=True, slots=True)
class InputItem:
    """One input record: where it is, what was written, and what to fetch."""

    line: int  # 1-based physical line of the input file where the record starts
    input: str  # the value as written, stripped
    url: str  # what to fetch: ``input`` if it has a scheme, else the template or http://
    #: A JSONL line's own method, headers and body (None: it has none).
    request: LineRequest | None = None

    def __reduce__(self) -> tuple[type[InputItem], tuple[Any, ...]]:
        # Pickled as a constructor call: a frozen slots dataclass's default
        # __getstate__/__setstate__ run in Python per field, and a shard of
        # 10,000 items sent to a Dask worker took 104 ms to pickle and 49 ms to
        # unpickle that way, against 18 ms and 19 ms this way.
        if self.request is None:
            return (InputItem, (self.line, self.input, self.url))
        return (InputItem, (self.line, self.input, self.url, self.request))


def read_inputs(
    source: str | os.PathLike[str] | IO[str] | IO[bytes],
    *,
    column: str | None = None,
    template: str | None = None,
    input_format: str | None = None,
) -> Iterator[InputItem]:
    """Stream the inputs of ``source``: a path, ``"-"`` for stdin, or an open stream.

    ``column`` names the CSV column (a header name or a number counted from 1) or
    the JSONL field (default ``url``).  ``template`` (containing ``{}`` exactly once,
    e.g. ``"https://www.{}/"``) turns inputs without a scheme into URLs; without it
    they get ``http://`` as curl gives them.

    Bad arguments raise :class:`UsageError` here; a file that cannot be opened,
    decoded or parsed raises it from the iteration, at the bad line.
    """
    if input_format is not None and input_format not in FORMATS:
        raise UsageError(f"unknown input format {input_format!r} (one of: {', '.join(FORMATS)})")
    if template is not None and template.count("{}") != 1:
        raise UsageError(f"--template {template!r} must contain {{}} exactly once")
    if column is not None and not column.strip():
        raise UsageError("--column is empty")
    return _read(source, _source_name(source), column, _url_maker(template), input_format)


def default_url(value: str) -> str:
    """The URL curl would fetch for ``value``: itself if it has a scheme, else http://.

    curl also supplies the missing ``/`` path: ``example.com?q=1`` becomes
    ``http://example.com/?q=1``.
    """
    if ":/" in value and _has_scheme(value):  # the substring test first: cheaper
        return value
    if value.startswith("//"):  # scheme-relative: only the scheme is missing
        value = value[2:]
    if "/" not in value and "?" not in value and "#" not in value:
        return f"http://{value}/"  # a bare domain, the common case: no regex
    cut = _path_start(value)
    if cut is None:
        return f"http://{value}/"
    at = cut.start()
    if value[at] == "/":
        return f"http://{value}"
    return f"http://{value[:at]}/{value[at:]}"


def _url_maker(template: str | None) -> Callable[[str], str]:
    if template is None:
        return default_url
    prefix, suffix = template.split("{}")

    def apply(value: str) -> str:
        if ":/" in value and _has_scheme(value):
            return value
        # A template without a scheme ("www.{}") still needs one: curl's default.
        return default_url(prefix + value + suffix)

    return apply


def _source_name(source: object) -> str:
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        return "<stdin>" if path == "-" else str(path)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


def _read(
    source: str | os.PathLike[str] | IO[str] | IO[bytes],
    name: str,
    column: str | None,
    make_url: Callable[[str], str],
    input_format: str | None,
) -> Iterator[InputItem]:
    lines = _source_lines(source, name)
    try:
        # Peek at the first non-blank line (to sniff the format) without keeping
        # the blank lines before it: they are only counted, then replayed.
        leading_blank = 0
        for first in lines:
            if first.strip():
                break
            leading_blank += 1
        else:
            return  # no inputs at all
        replayed = chain(repeat("\n", leading_blank), (first,), lines)

        fmt = input_format or _EXTENSION_FORMATS.get(PurePath(name).suffix.lower())
        if fmt is None:
            fmt = _sniff(first)
        if fmt == "text":
            if column is not None:
                raise UsageError(
                    f"{name}: --column applies to CSV and JSONL inputs; this input is read as text"
                )
            yield from _text_items(replayed, make_url)
        elif fmt == "jsonl":
            yield from _jsonl_items(replayed, name, column, make_url)
        else:
            # A .csv that is really tab-separated (a spreadsheet export) is common
            # enough to sniff: tabs and no comma on the first line.
            tabs = fmt == "tsv" or ("\t" in first and "," not in first)
            yield from _csv_items(replayed, name, "\t" if tabs else ",", column, make_url)
    finally:
        lines.close()


def _sniff(first: str) -> str:
    """The format of an input with no known extension (stdin, ``top.txt``), from its
    first non-blank line: ``{`` is JSONL; a line whose first field, before a comma
    or a tab, is a bare word or number (``rank,domain``, ``1,google.com``) is CSV -
    a URL or a host name has a scheme, a dot or a slash before any comma; else text."""
    line = first.strip()
    if line.startswith("{"):
        return "jsonl"
    cut = min((i for i in (line.find(","), line.find("\t")) if i > 0), default=-1)
    if cut > 0 and not any(c in line[:cut] for c in ":/."):
        return "csv"
    return "text"


def _source_lines(
    source: str | os.PathLike[str] | IO[str] | IO[bytes], name: str
) -> Generator[str, None, None]:
    """The decoded lines of ``source``, opened on the first ``next()``."""
    if isinstance(source, str | os.PathLike):
        if os.fspath(source) == "-":
            # The bytes under sys.stdin, so that a bad byte is pinned to its line.
            stdin_bytes = getattr(sys.stdin, "buffer", None)
            if stdin_bytes is None:
                yield from _text_stream_lines(sys.stdin, name)
            else:
                yield from _binary_lines(stdin_bytes, name)
            return
        yield from _file_lines(source, name)
    elif isinstance(source, io.RawIOBase | io.BufferedIOBase):
        yield from _binary_lines(source, name)
    else:
        yield from _text_stream_lines(cast(IO[str], source), name)


def _file_lines(path: str | os.PathLike[str], name: str) -> Iterator[str]:
    # The C text layer decodes in large chunks and makes one object per line where
    # decoding bytes line by line makes two, so a file is read through it; the
    # rare decoding error is then placed exactly by re-reading the file's bytes.
    # newline="\n": lines end at \n only, as the byte-level count has them.
    # utf-8-sig: a leading byte-order mark (Excel, Notepad) is dropped.
    try:
        stream = open(path, encoding="utf-8-sig", newline="\n")  # noqa: SIM115 - with below
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {_reason(exc)}") from None
    lineno = 0
    with stream:
        try:
            for lineno, line in enumerate(stream, 1):  # noqa: B007 - used by the handlers
                yield line
        except UnicodeDecodeError:
            pass
        except OSError as exc:
            raise UsageError(f"{name}:{lineno + 1}: cannot read: {_reason(exc)}") from None
        else:
            return
    # The undecodable bytes are on line lineno + 1 or a little after it: carry on
    # from there a line at a time, so the good lines before the bad one still go out.
    with open(path, "rb") as raw_stream:
        yield from _binary_lines(islice(raw_stream, lineno, None), name, first_line=lineno + 1)


def _binary_lines(stream: Iterable[bytes], name: str, first_line: int = 1) -> Iterator[str]:
    # Decoding line by line (not through a TextIOWrapper, which decodes 8 KiB
    # chunks ahead) is what lets a decoding error name its exact line: used where
    # the bytes cannot be read a second time (stdin, a caller's binary stream).
    lineno = first_line - 1
    try:
        for lineno, raw in enumerate(stream, first_line):
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(
                    f"{name}:{lineno}: not UTF-8 text "
                    f"(byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
                ) from None
            yield line
    except OSError as exc:
        raise UsageError(f"{name}:{lineno + 1}: cannot read: {_reason(exc)}") from None


def _text_stream_lines(stream: IO[str], name: str) -> Iterator[str]:
    # A stream the caller decodes: its decoder reads ahead, so a decoding error
    # can only be placed at the first line not yet delivered.
    lineno = 0
    try:
        for lineno, line in enumerate(stream, 1):
            yield line[1:] if lineno == 1 and line.startswith("\ufeff") else line
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{name}:{lineno + 1}: not {exc.encoding} text ({exc.reason}, "
            "on this line or one shortly after it)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{name}:{lineno + 1}: cannot read: {_reason(exc)}") from None


def _reason(exc: OSError) -> str:
    # "[Errno 2] No such file or directory", without str(exc)'s repeated file name.
    if exc.errno is not None and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}"
    return str(exc)


def _text_items(lines: Iterator[str], make_url: Callable[[str], str]) -> Iterator[InputItem]:
    for lineno, line in enumerate(lines, 1):
        value = line.strip()
        if value and value[0] != "#":
            yield InputItem(lineno, value, make_url(value))


def _jsonl_items(
    lines: Iterator[str], name: str, field: str | None, make_url: Callable[[str], str]
) -> Iterator[InputItem]:
    key = field.strip() if field is not None else "url"
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{name}:{lineno}: not valid JSON ({exc.msg}: column {exc.colno})"
            ) from None
        except RecursionError:
            raise UsageError(f"{name}:{lineno}: not valid JSON (nested too deeply)") from None
        if not isinstance(record, dict):
            raise UsageError(f"{name}:{lineno}: expected a JSON object, found {_json_type(record)}")
        if key not in record:
            hint = ""
            if field is None:
                fields = ", ".join(islice(record, 5)) or "none"
                hint = f" (its fields: {fields}; choose one with --column)"
            raise UsageError(f'{name}:{lineno}: no "{key}" field{hint}')
        value = record[key]
        if value is None:
            continue  # like an empty CSV cell: no input on this line
        if not isinstance(value, str):
            raise UsageError(
                f'{name}:{lineno}: field "{key}" is {_json_type(value)}, expected a string'
            )
        value = value.strip()
        if value:
            request = _line_request(record, name, lineno) if len(record) > 1 else None
            yield InputItem(lineno, value, make_url(value), request)


#: The fields a JSONL line may carry besides its URL, to make its own request.
REQUEST_FIELDS: Final = ("method", "headers", "body", "body_base64")


def _line_request(record: dict[str, Any], name: str, lineno: int) -> LineRequest | None:
    """A JSONL line's ``method``, ``headers`` (an object, or [name, value] pairs)
    and ``body`` (text, sent as UTF-8) or ``body_base64``; None if it has none.
    Other fields are the user's own, and ignored."""
    if not any(key in record for key in REQUEST_FIELDS):
        return None
    where = f"{name}:{lineno}"
    method = record.get("method")
    if method is not None:
        if not isinstance(method, str) or not method.strip():
            raise UsageError(f'{where}: field "method" must be a non-empty string')
        try:
            method = check_method(method.strip())
        except UsageError as e:
            raise UsageError(f"{where}: {e}") from None
    headers = record.get("headers")
    pairs: tuple[tuple[str, str], ...] | None = None
    if headers is not None:
        items = headers.items() if isinstance(headers, dict) else headers
        if not isinstance(headers, dict | list):
            raise UsageError(f'{where}: field "headers" must be an object or [name, value] pairs')
        checked = []
        for pair in items:
            if not (isinstance(pair, list | tuple) and len(pair) == 2) or not all(
                isinstance(part, str) for part in pair
            ):
                raise UsageError(
                    f'{where}: field "headers" must map names to strings, not {pair!r:.60}'
                )
            try:
                header_line(pair[0], pair[1])
            except UsageError as e:
                raise UsageError(f"{where}: {e}") from None
            checked.append((pair[0], pair[1]))
        pairs = tuple(checked)
    body: bytes | None = None
    text, packed = record.get("body"), record.get("body_base64")
    if text is not None and packed is not None:
        raise UsageError(f'{where}: give "body" or "body_base64", not both')
    if text is not None:
        if not isinstance(text, str):
            raise UsageError(f'{where}: field "body" is {_json_type(text)}, expected a string')
        body = text.encode("utf-8")
    elif packed is not None:
        if not isinstance(packed, str):
            raise UsageError(f'{where}: field "body_base64" is {_json_type(packed)}, not a string')
        try:
            body = base64.b64decode(packed, validate=True)
        except binascii.Error as e:
            raise UsageError(f'{where}: field "body_base64" is not base64 ({e})') from None
    return LineRequest(method, pairs, body)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a string" if isinstance(value, str) else "null"


def _csv_items(
    lines: Iterator[str],
    name: str,
    delimiter: str,
    column: str | None,
    make_url: Callable[[str], str],
) -> Iterator[InputItem]:
    # strict: an unclosed quote is an error at its row, rather than one field
    # silently swallowing every line after it.
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    rows = _csv_rows(reader, name)
    head = list(islice(rows, 2))  # header detection looks at two rows, no more
    if not head:
        return
    header, index = _choose_column(name, head, column)
    data = chain(head[1:] if header is not None else head, rows)

    label = ""
    if header is not None and index < len(header) and header[index].strip():
        label = f' ("{header[index].strip()}")'
    for lineno, row in data:
        if index < len(row):
            value = row[index].strip()
            if value:
                yield InputItem(lineno, value, make_url(value))
        elif any(cell.strip() for cell in row):
            count = len(row)
            raise UsageError(
                f"{name}:{lineno}: row has {count} column{'' if count == 1 else 's'}, "
                f"column {index + 1}{label} expected"
            )


def _csv_rows(reader: Any, name: str) -> Iterator[tuple[int, list[str]]]:
    """Non-blank rows with the physical line each starts on.

    ``reader.line_num`` counts the lines consumed so far, so a row starts on the
    line after the previous row ended, however many lines a quoted field spans.
    """
    end = 0
    try:
        for row in reader:
            start = end + 1
            end = reader.line_num
            if row and (len(row) > 1 or row[0].strip()):
                yield start, row
    except csv.Error as exc:
        raise UsageError(f"{name}:{end + 1}: not valid CSV ({exc})") from None


def _choose_column(
    name: str, head: list[tuple[int, list[str]]], column: str | None
) -> tuple[list[str] | None, int]:
    """Decide whether the first row is a header, and which column holds the inputs."""
    first_line, first = head[0]
    names = [cell.strip().lower() for cell in first]
    wanted = column.strip() if column is not None else None
    is_header = (
        any(cell in HEADER_NAMES for cell in names)
        or (wanted is not None and wanted.lower() in names and not wanted.isdigit())
        or (
            len(head) > 1
            and not any(map(_looks_like_host, first))
            and any(map(_looks_like_host, head[1][1]))
        )
    )
    header = first if is_header else None

    if wanted is not None:
        if is_header and wanted.lower() in names:
            return header, names.index(wanted.lower())
        if wanted.isascii() and wanted.isdigit():
            if int(wanted) < 1:
                raise UsageError(f"--column {wanted}: columns are counted from 1")
            return header, int(wanted) - 1
        if is_header:
            raise UsageError(
                f'{name}:{first_line}: no column named "{wanted}" in the header '
                f"({', '.join(cell.strip() for cell in first)})"
            )
        raise UsageError(
            f'{name}: --column "{wanted}" is a name, but the file has no header row; '
            "give the column's number, counted from 1"
        )

    if is_header:
        for index, cell in enumerate(names):
            if cell in HEADER_NAMES:
                return header, index
        if len(head) == 1:
            return header, 0  # a header and no data: nothing will be read
    sample_line, sample = head[1] if is_header else head[0]
    for index, cell in enumerate(sample):
        if _looks_like_host(cell):
            return header, index
    if len(sample) == 1:
        return header, 0  # one column: it is the input, whatever it looks like
    raise UsageError(
        f"{name}:{sample_line}: no column looks like a URL or domain; choose one with --column"
    )


def _looks_like_host(cell: str) -> bool:
    """A URL (has a scheme) or a domain (one word with a dot that is not a number)."""
    value = cell.strip()
    if "://" in value:
        return True
    if "." not in value or len(value.split()) != 1:
        return False
    try:
        float(value)
    except ValueError:
        return True
    return False
