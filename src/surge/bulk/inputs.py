"""Stream the inputs of ``surge fetch``: URLs or domains from text, CSV or JSONL.

:func:`read_inputs` turns a file (or stdin, or an open stream) into
:class:`InputItem` values, one per input record, carrying the physical line number
that ``--resume`` and every result record refer to.  It streams: one line (one CSV
row) is held at a time, so a ten-million-line input runs in constant memory.

What is an input and what is a stop:

- One record per input line: a value that is not a valid URL is still an input,
  and the engine turns it into an ``invalid_url`` record - so is a JSONL line
  whose URL field is null, not a string, empty or blank, and a CSV row whose
  URL cell is empty.  A blank line (in any format) and, in a text file, a line
  starting with ``#`` hold no input and give no record.  Only a file that
  cannot be read or parsed as its format stops the run, with a
  :class:`~surge.errors.UsageError` naming ``file:line`` and raised when the
  bad line is reached, so the records before it are already out.
- Bytes that are not UTF-8 are such a stop (``urls.txt:5: not UTF-8 text``), not
  replaced with U+FFFD: a silently mangled host would be fetched as a different
  one, and the user is told exactly which line to fix.
- Every line is bounded (``max_line``, :data:`MAX_LINE` by default; the CLI's
  ``--max-input-line``).  A longer line is an input of its own, an
  ``invalid_url`` record (``InputItem.problem``) whose ``input`` is the line's
  start; it is read past without being held, so a gigabyte line costs what a
  short one does.  A CSV record spread over several lines (quoted newlines)
  past the bound is a stop, as the line it starts on cannot be told apart
  from the rest.
- A closed stdin is a stop (``<stdin>: cannot read: stdin is closed``).

Formats come from ``input_format`` (``text``, ``csv``, ``tsv``, ``jsonl``), else the
extension (``.csv``, ``.tsv``; ``.jsonl``, ``.ndjson``, ``.json``), else the first
non-blank line (``{`` means JSONL; a first field before a comma or tab that is a
bare word or number, as ``rank,domain`` or ``1,google.com``, CSV; else text).  CSV columns given by
``--column`` are a header name or a number counted from 1, as ``cut -f`` and awk's
``$2`` count them (so ``rank,domain`` has its domain in column 2).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import csv
import io
import json
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from itertools import chain, islice, repeat
from typing import IO, Any, Final, NamedTuple, cast

from surge.errors import UsageError
from surge.http.headers import check_method, header_line
from surge.sinks import stdin_closed

#: The values ``input_format`` accepts.
FORMATS: Final = ("text", "csv", "tsv", "jsonl")
#: The longest input line read as one, in bytes (UTF-8, its line end not
#: counted): a URL of 64 KiB is past what servers accept (8 KiB for nginx's
#: request line, 16 KiB for Node's whole head), and a longer line is an error record.
MAX_LINE: Final = 64 * 1024
#: What a record of a line past the bound keeps of it, as its ``input``.
KEPT_OF_LONG_LINE: Final = 200

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

#: A URL's scheme, as curl tells one from a host: a name and ":/" (``htp:/x`` has
#: the scheme htp - refused as not http(s), never looked up as the host "htp";
#: ``host:80/`` has none); parse_url then takes http(s) with one to three slashes.
_has_scheme = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/").match
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
    #: Why this input cannot be fetched at all (a line past the bound): its
    #: record is ``invalid_url`` with this detail, and nothing is sent.
    problem: str | None = None

    def __reduce__(self) -> tuple[type[InputItem], tuple[Any, ...]]:
        # Pickled as a constructor call: a frozen slots dataclass's default
        # __getstate__/__setstate__ run in Python per field, and a shard of
        # 10,000 items sent to a Dask worker took 104 ms to pickle and 49 ms to
        # unpickle that way, against 18 ms and 19 ms this way.
        if self.problem is not None:
            return (InputItem, (self.line, self.input, self.url, self.request, self.problem))
        if self.request is None:
            return (InputItem, (self.line, self.input, self.url))
        return (InputItem, (self.line, self.input, self.url, self.request))


def read_inputs(
    source: str | os.PathLike[str] | IO[str] | IO[bytes],
    *,
    column: str | None = None,
    template: str | None = None,
    input_format: str | None = None,
    max_line: int = MAX_LINE,
) -> Iterator[InputItem]:
    """Stream the inputs of ``source``: a path, ``"-"`` for stdin, or an open stream.

    ``column`` names the CSV column (a header name or a number counted from 1) or
    the JSONL field (default ``url``).  ``template`` (containing ``{}`` exactly once,
    e.g. ``"https://www.{}/"``) turns inputs without a scheme into URLs; without it
    they get ``http://`` as curl gives them.  ``max_line``: the longest line,
    in bytes; a longer one is an item with a ``problem`` (see the module doc).

    Bad arguments raise :class:`UsageError` here; a file that cannot be opened,
    decoded or parsed raises it from the iteration, at the bad line.
    """
    if input_format is not None and input_format not in FORMATS:
        raise UsageError(f"unknown input format {input_format!r} (one of: {', '.join(FORMATS)})")
    if template is not None and template.count("{}") != 1:
        raise UsageError(f"--template {template!r} must contain {{}} exactly once")
    if column is not None and not column.strip():
        raise UsageError("--column is empty")
    if isinstance(max_line, bool) or not isinstance(max_line, int) or max_line < 1:
        raise UsageError(f"--max-input-line must be a positive number of bytes, not {max_line!r}")
    return _read(source, _source_name(source), column, _url_maker(template), input_format, max_line)


def count_lines(path: str | os.PathLike[str]) -> int | None:
    """The physical lines of the input file ``path`` (a last line without its
    newline counts), read in blocks; None for stdin, a pipe or a device (which
    cannot be read twice) or a file that cannot be read (the reader says why)."""
    if os.fspath(path) == "-":
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # (opening a FIFO would wait for a writer, and take its lines)
        with open(path, "rb") as file:
            count = 0
            last = b"\n"
            while block := file.read(1 << 20):
                count += block.count(b"\n")
                last = block[-1:]
    except OSError:
        return None
    return count + (last != b"\n")


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
    max_line: int,
) -> Iterator[InputItem]:
    lines = _source_lines(source, name, max_line)
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

        fmt = input_format or _EXTENSION_FORMATS.get(os.path.splitext(name)[1].lower())
        if fmt is None:
            fmt = _sniff(first)
        if fmt == "text":
            if column is not None:
                raise UsageError(
                    f"{name}: --column applies to CSV and JSONL inputs; this input is read as text"
                )
            yield from _text_items(replayed, make_url, max_line)
        elif fmt == "jsonl":
            yield from _jsonl_items(replayed, name, column, make_url, max_line)
        else:
            # A .csv that is really tab-separated (a spreadsheet export) is common
            # enough to sniff: tabs and no comma on the first line.
            tabs = fmt == "tsv" or ("\t" in first and "," not in first)
            yield from _csv_items(replayed, name, "\t" if tabs else ",", column, make_url, max_line)
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


class LongLine(str):
    """A line past the bound: the start of it (:data:`KEPT_OF_LONG_LINE`
    characters) stands for it; the rest was read past, not kept."""

    __slots__ = ()


def _too_long(max_line: int) -> str:
    return f"the input line is longer than the {max_line:,}-byte bound (--max-input-line)"


def _long_item(lineno: int, line: LongLine, max_line: int) -> InputItem:
    start = line.strip() + "..."
    return InputItem(lineno, start, start, problem=_too_long(max_line))


def _source_lines(
    source: str | os.PathLike[str] | IO[str] | IO[bytes], name: str, max_line: int
) -> Generator[str, None, None]:
    """The decoded lines of ``source``, opened on the first ``next()``; a line
    longer than ``max_line`` bytes comes as a :class:`LongLine`."""
    if isinstance(source, str | os.PathLike):
        if os.fspath(source) == "-":
            if stdin_closed():
                raise UsageError(f"{name}: cannot read: stdin is closed")
            if _is_descriptor_0(sys.stdin):
                # A stream of its own on a copy of descriptor 0, not sys.stdin's:
                # a thread may be the one waiting in its read (PrefetchedInputs),
                # and at exit Python aborts on a std stream's lock held by one.
                try:
                    own = open(os.dup(0), "rb")  # noqa: SIM115 - closed by the with below
                except OSError as exc:
                    raise UsageError(f"{name}: cannot read: {_reason(exc)}") from None
                with own:
                    yield from _binary_lines(own, name, max_line)
                return
            # The bytes under sys.stdin, so that a bad byte is pinned to its line.
            stdin_bytes = getattr(sys.stdin, "buffer", None)
            if stdin_bytes is None:
                yield from _text_stream_lines(sys.stdin, name, max_line)
            else:
                yield from _binary_lines(stdin_bytes, name, max_line)
            return
        if os.fspath(source) in ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0") and stdin_closed():
            raise UsageError(f"{name}: cannot read: stdin is closed")
        yield from _file_lines(source, name, max_line)
    elif isinstance(source, io.RawIOBase | io.BufferedIOBase):
        yield from _binary_lines(cast(IO[bytes], source), name, max_line)
    else:
        yield from _text_stream_lines(cast(IO[str], source), name, max_line)


def _is_descriptor_0(stream: object) -> bool:
    try:
        return stream is not None and stream.fileno() == 0  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both
        return False


def reads_may_wait(source: str | os.PathLike[str]) -> bool:
    """Whether reading ``source`` may wait on a writer (stdin, a pipe, a FIFO, a
    terminal), rather than on a disk: its inputs are then best read ahead in a
    thread of their own (:class:`PrefetchedInputs`)."""
    try:
        info = os.fstat(0) if os.fspath(source) == "-" else os.stat(source)
    except OSError:
        return False  # the reader says why, at its first line
    return not stat.S_ISREG(info.st_mode)


class NotReady(Exception):
    """:class:`PrefetchedInputs` has no input to give yet: await its ``ready()``."""


class PrefetchedInputs(Iterator[InputItem]):
    """Inputs read ahead, up to ``ahead`` of them, by a thread of their own.

    For a source whose reads wait on a writer (:func:`reads_may_wait`: ``cat
    urls | surge fetch -``, a slow generator, a FIFO): read on the event
    loop's thread, the wait for the next line held every request in flight,
    every flush of the records, and Ctrl-C and SIGTERM (the loop runs its
    signal handlers between callbacks).  ``next()`` never waits: it gives an
    input, ends, raises the source's error, or raises :class:`NotReady`; then
    ``await ready()`` waits for the thread without holding the loop.
    """

    AHEAD: Final = 1024

    def __init__(self, items: Iterator[InputItem], ahead: int = AHEAD) -> None:
        self._items = items
        self._queue: collections.deque[InputItem] = collections.deque()
        self._room = threading.Semaphore(ahead)
        self._lock = threading.Lock()
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque()
        )
        self._ended = False
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, name="surge-inputs", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for item in self._items:
                while not self._room.acquire(timeout=0.1):
                    if self._closed:
                        return
                if self._closed:
                    return
                self._queue.append(item)
                self._wake(everyone=False)
        except BaseException as e:  # a bad line: the consumer raises it in its turn
            self._error = e
        finally:
            self._ended = True
            self._wake(everyone=True)

    def _wake(self, *, everyone: bool) -> None:
        with self._lock:
            if everyone:
                waiters, self._waiters = list(self._waiters), collections.deque()
            else:
                waiters = [self._waiters.popleft()] if self._waiters else []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, future)

    def __next__(self) -> InputItem:
        try:
            item = self._queue.popleft()
        except IndexError:
            if not self._ended:
                raise NotReady from None
            if self._queue:  # appended just before the end
                return self.__next__()
            error, self._error = self._error, None
            if error is not None:
                raise error from None
            raise StopIteration from None
        self._room.release()
        return item

    async def ready(self) -> None:
        """Return once ``next()`` has something to say."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._queue or self._ended:
                return
            self._waiters.append((loop, future))
        await future

    def close(self) -> None:
        """Stop reading ahead (a read under way is left to finish, or to exit)."""
        self._closed = True
        self._room.release()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _bounded(read: Callable[[int], str], max_line: int, first_line: int = 1) -> Iterator[str]:
    """The lines ``read(size)`` (a text stream's readline) gives, a line past
    ``max_line`` bytes as a :class:`LongLine` of its start, the rest of it read
    in bounded pieces and dropped.  (The size asked for is in characters: a
    line of at most that many is then measured in UTF-8 bytes only when it
    could be over, so the common short line costs nothing more.)"""
    size = max_line + 1
    suspect = max_line // 4  # at most 4 bytes a character
    while line := read(size):
        if line[-1] != "\n" and len(line) == size:
            rest = line
            while rest and rest[-1] != "\n":
                rest = read(size)
            yield LongLine(line[:KEPT_OF_LONG_LINE])
            continue
        if len(line) > suspect and _utf8_size(line.rstrip("\n")) > max_line:
            yield LongLine(line[:KEPT_OF_LONG_LINE])
            continue
        yield line


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _file_lines(path: str | os.PathLike[str], name: str, max_line: int) -> Iterator[str]:
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
            for lineno, line in enumerate(_bounded(stream.readline, max_line), 1):  # noqa: B007 - used by the handlers
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
        for _ in range(lineno):  # past the lines already given, each in bounded reads
            while (piece := raw_stream.readline(1 << 20)) and piece[-1:] != b"\n":
                pass
        yield from _binary_lines(raw_stream, name, max_line, first_line=lineno + 1)


def _binary_lines(
    stream: IO[bytes], name: str, max_line: int, first_line: int = 1
) -> Iterator[str]:
    # Decoding line by line (not through a TextIOWrapper, which decodes 8 KiB
    # chunks ahead) is what lets a decoding error name its exact line: used where
    # the bytes cannot be read a second time (stdin, a caller's binary stream).
    lineno = first_line - 1
    size = max_line + 1
    try:
        while raw := stream.readline(size):
            lineno += 1
            # the byte-order mark goes whatever the line's length: a long first
            # line's start is what the format is sniffed from ("{": JSONL)
            skip = len(_BOM) if lineno == 1 and raw.startswith(_BOM) else 0
            if raw[-1:] != b"\n" and len(raw) == size:  # past the bound: read past the rest
                rest = raw
                while rest and rest[-1:] != b"\n":
                    rest = stream.readline(1 << 20)
                start = raw[skip : skip + KEPT_OF_LONG_LINE * 4].decode("utf-8", "replace")
                yield LongLine(start[:KEPT_OF_LONG_LINE])
                continue
            raw = raw[skip:]
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


def _text_stream_lines(stream: IO[str], name: str, max_line: int) -> Iterator[str]:
    # A stream the caller decodes: its decoder reads ahead, so a decoding error
    # can only be placed at the first line not yet delivered.
    lineno = 0
    try:
        for lineno, line in enumerate(_bounded(stream.readline, max_line), 1):
            if lineno == 1 and line.startswith("\ufeff"):
                # a long line stays one (its slice would be a plain str)
                line = LongLine(line[1:]) if isinstance(line, LongLine) else line[1:]
            yield line
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


def _text_items(
    lines: Iterator[str], make_url: Callable[[str], str], max_line: int
) -> Iterator[InputItem]:
    for lineno, line in enumerate(lines, 1):
        value = line.strip()
        if value and value[0] != "#":
            if type(line) is LongLine:
                yield _long_item(lineno, line, max_line)
                continue
            yield InputItem(lineno, value, make_url(value))


def _jsonl_items(
    lines: Iterator[str],
    name: str,
    field: str | None,
    make_url: Callable[[str], str],
    max_line: int,
) -> Iterator[InputItem]:
    key = field.strip() if field is not None else "url"
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if type(line) is LongLine:
            yield _long_item(lineno, line, max_line)
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
        if not isinstance(value, str) or not value.strip():
            # a line of its own all the same: an invalid_url record, not a stop
            yield not_a_url(lineno, value, f'field "{key}"')
            continue
        value = value.strip()
        request = _line_request(record, name, lineno) if len(record) > 1 else None
        yield InputItem(lineno, value, make_url(value), request)


def not_a_url(lineno: int, value: object, where: str) -> InputItem:
    """The item of an input line whose URL is missing: null, not a string,
    empty or blank (a JSONL field, a CSV cell) - an ``invalid_url`` record,
    whose ``input`` is the value as written (JSON's text for a non-string)."""
    if isinstance(value, str):
        shown, what = value.strip(), "blank" if value else "empty"
    else:
        shown, what = json.dumps(value, ensure_ascii=False)[:KEPT_OF_LONG_LINE], _json_type(value)
    return InputItem(lineno, shown, shown, problem=f"{where} is {what}, not a URL")


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
    max_line: int,
) -> Iterator[InputItem]:
    # A line past the bound reaches the csv reader as a blank line, and its
    # item comes out in its place; a record over several lines is measured as
    # the reader takes them.
    long_lines: dict[int, LongLine] = {}
    fed = _CSVFeed(lines, long_lines, max_line, name)
    # strict: an unclosed quote is an error at its row, rather than one field
    # silently swallowing every line after it.
    reader = csv.reader(fed, delimiter=delimiter, strict=True)
    _fit_field_limit(max_line)
    rows = _csv_rows(reader, name, fed, long_lines, max_line)
    head: list[tuple[int, list[str]]] = []  # header detection looks at two rows, no more
    for entry in rows:
        if isinstance(entry, InputItem):
            yield entry  # a line past the bound: its item whatever the columns are
            continue
        head.append(entry)
        if len(head) == 2:
            break
    if not head:
        return
    header, index = _choose_column(name, head, column)
    label = ""
    if header is not None and index < len(header) and header[index].strip():
        label = f' ("{header[index].strip()}")'
    for entry in chain(head[1:] if header is not None else head, rows):
        if isinstance(entry, InputItem):
            yield entry
            continue
        lineno, row = entry
        if index < len(row):
            value = row[index].strip()
            if value:
                yield InputItem(lineno, value, make_url(value))
            else:
                yield not_a_url(lineno, row[index], f"column {index + 1}{label}")
        elif any(cell.strip() for cell in row):
            count = len(row)
            raise UsageError(
                f"{name}:{lineno}: row has {count} column{'' if count == 1 else 's'}, "
                f"column {index + 1}{label} expected"
            )


class _CSVFeed:
    """The lines handed to the csv reader: a line past the bound as a blank
    one (kept aside, as an item to give at its place), and a record that runs
    over several lines stopped once it passes the bound."""

    def __init__(
        self, lines: Iterator[str], long_lines: dict[int, LongLine], max_line: int, name: str
    ) -> None:
        self._lines = lines
        self._long = long_lines
        self._max = max_line
        self._name = name
        self.lineno = 0  # lines handed over so far
        self.row_start = 1  # the line the record being read started on
        self._row_size = 0  # characters of it so far

    def __iter__(self) -> _CSVFeed:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.lineno += 1
        if type(line) is LongLine:
            self._long[self.lineno] = line
            line = "\n"
            self._row_size += self._max + 1
        else:
            self._row_size += len(line)
        if self._row_size > self._max + 2 and self.lineno > self.row_start:
            raise UsageError(
                f"{self._name}:{self.row_start}: a CSV record longer than the "
                f"{self._max:,}-byte bound (--max-input-line), over several lines"
                " (an unclosed quote?)"
            )
        return line

    def row_done(self, end: int) -> None:
        """The reader has given the record ending on line ``end``."""
        self.row_start = end + 1
        self._row_size = 0


def _fit_field_limit(max_line: int) -> None:
    # The csv module refuses a field past its limit (128 KiB by default); a line
    # within --max-input-line must not be refused for that. (A process-wide
    # setting: only ever raised.)
    if csv.field_size_limit() < max_line + 2:
        csv.field_size_limit(max_line + 2)


def _csv_rows(
    reader: Any,
    name: str,
    fed: _CSVFeed,
    long_lines: dict[int, LongLine],
    max_line: int,
) -> Iterator[tuple[int, list[str]] | InputItem]:
    """Non-blank rows with the physical line each starts on, and, in their
    place, the items of lines past the bound.

    ``reader.line_num`` counts the lines consumed so far, so a row starts on the
    line after the previous row ended, however many lines a quoted field spans.
    """
    end = 0
    try:
        for row in reader:
            start = end + 1
            end = reader.line_num
            fed.row_done(end)
            for lineno in sorted(n for n in long_lines if n <= end):
                if lineno > start or (row and (len(row) > 1 or row[0].strip())):
                    # within a record of several lines: no place to put it
                    raise UsageError(
                        f"{name}:{start}: a CSV record longer than the {max_line:,}-byte "
                        "bound (--max-input-line), over several lines (an unclosed quote?)"
                    )
                yield _long_item(lineno, long_lines.pop(lineno), max_line)
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
