"""Write ``surge fetch`` result records, and read them back for ``--resume``.

A record is the public contract of ``surge fetch`` (docs/architecture.md): the keys
of :data:`FIELDS`, in that order, ``timings`` holding the keys of
:data:`TIMING_FIELDS`.  :class:`RecordWriter` writes them as JSONL (one compact
object per line) or CSV (the same columns, ``timings`` flattened, nulls as empty
cells).

Two properties make an interrupted run resumable:

- Only whole lines reach the file.  Records collect in memory and go out as one
  write of complete lines, at most every :data:`FLUSH_INTERVAL` seconds or
  :data:`FLUSH_RECORDS` records, and on close.  A crash in the middle of that
  write can still leave half a line, which :func:`truncate_partial_last_line`
  cuts before appending.
- Every record is one physical line, in CSV too (newlines inside values become
  spaces), so "the last line has no newline" is exactly "the last record is cut".

:func:`done_lines` reads an existing output into a :class:`LineSet`, a bitmap of
the input line numbers already recorded: 10 million lines cost 1.25 MB, where a
Python ``set`` of ints would cost over 500 MB.
"""

from __future__ import annotations

import collections.abc
import csv
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, Final

from surge.errors import ERROR_CLASSES, UsageError
from surge.http.timings import RECORD_PHASES

#: The keys of a result record, in the order they are written.
FIELDS: Final = (
    "url",
    "input",
    "line",
    "status",
    "error",
    "error_detail",
    "elapsed_ms",
    "bytes",
    "attempts",
    "redirects",
    "redirect_ms",
    "final_url",
    "remote_ip",
    "tls",
    "timings",
)
#: The keys of a record's ``tls`` (None for plain HTTP; surge.http.connection.TLSInfo).
TLS_FIELDS: Final = ("version", "cipher", "alpn", "subject", "issuer", "not_after")
#: The keys of a record's ``timings`` (curl's -w timers, see surge.http.timings).
TIMING_FIELDS: Final = RECORD_PHASES
#: Fields the options add after the contract's (FetchOptions.extras), in this order.
EXTRA_FIELDS: Final = ("headers", "body_path", "body_sha256", "body")
#: The CSV header: the record's fields with ``tls`` and ``timings`` flattened.
CSV_COLUMNS: Final = FIELDS[:-2] + tuple(f"tls_{k}" for k in TLS_FIELDS) + TIMING_FIELDS
OUTPUT_FORMATS: Final = ("jsonl", "csv")

#: Buffered records reach the file at least this often (seconds) while writes come
#: in, so a progress watcher or an interrupted run sees recent results.
FLUSH_INTERVAL: Final = 0.5
#: ... and at least every this many records, which bounds the buffer (~3 MB).
FLUSH_RECORDS: Final = 10_000

_ERRORS: Final = frozenset(ERROR_CLASSES)
_NULL_TIMINGS: Final = dict.fromkeys(TIMING_FIELDS)
# One JSONL record, compact (no spaces: a million records, ~15 MB less to write
# and read back), keys in contract order.
_JSONL_RECORD: Final = (
    '{"url":%s,"input":%s,"line":%d,"status":%s,"error":%s,"error_detail":%s,'
    '"elapsed_ms":%s,"bytes":%d,"attempts":%d,"redirects":%d,"redirect_ms":%s,'
    '"final_url":%s,"remote_ip":%s,"tls":%s,"timings":{"dns_ms":%s,'
    '"connect_ms":%s,"tls_ms":%s,"ttfb_ms":%s,"body_ms":%s}}\n'
)
# A quoted JSON string (C implementation); non-ASCII (IDN hosts, paths) stays
# readable rather than \u-escaped.
_json_str: Final = json.encoder.encode_basestring
# Decoding str is ~25% faster than json.loads(bytes), which sniffs the encoding.
_decode_json: Final = json.JSONDecoder().decode


class RecordWriter:
    """Writes result records to a file or stdout; use as a context manager.

    Make one with :func:`open_writer`.  Records are buffered; call :meth:`flush`
    when the producer goes idle (the writer only looks at the clock when a record
    arrives), and :meth:`close` (or leave the ``with`` block) at the end.
    """

    def __init__(
        self, sink: _Sink, fmt: str, *, header: bool, extras: tuple[str, ...] = ()
    ) -> None:
        self._sink = sink
        self.fmt = fmt  # "jsonl" or "csv"
        unknown = [name for name in extras if name not in EXTRA_FIELDS]
        if unknown:
            raise ValueError(f"unknown extra record fields {unknown}")
        #: Optional fields after the contract's (FetchOptions.extras), in order.
        self.extras = extras
        self._size = len(FIELDS) + len(extras)
        self._pending: list[str] = []
        self._last_flush = time.monotonic()
        self._closed = False
        if fmt == "csv":
            # The csv writer formats each row into one string and hands it to
            # `write`, which here is the pending list's append.
            self._csv = csv.writer(_Collector(self._pending), lineterminator="\n")
            if header:
                self._csv.writerow(CSV_COLUMNS + extras)

    def write(self, record: Mapping[str, Any]) -> None:
        """Buffer one record; it must have exactly the keys of :data:`FIELDS`.

        ``elapsed_ms`` and the timings are rounded to 0.001 ms here, so that every
        record honours the contract whoever built it.
        """
        if self._closed:
            raise ValueError("write to a closed RecordWriter")
        if len(record) != self._size:
            raise ValueError(_key_mismatch(record, self.extras))
        try:
            error = record["error"]
            if error is not None and error not in _ERRORS:
                raise ValueError(f"unknown error class {error!r}")
            status = record["status"]
            detail = record["error_detail"]
            final_url = record["final_url"]
            remote_ip = record["remote_ip"]
            tls_info = record["tls"]
            elapsed = record["elapsed_ms"]
            timings = record["timings"] or _NULL_TIMINGS
            dns = timings["dns_ms"]
            connect = timings["connect_ms"]
            tls = timings["tls_ms"]
            ttfb = timings["ttfb_ms"]
            body = timings["body_ms"]
            if self.fmt == "jsonl":
                # Formatted by hand rather than by json.dumps: the template fixes the
                # key order, and ":.3f" rounds and formats a float in one step where
                # round() + the encoder's repr() take two.
                line = _JSONL_RECORD % (
                    _json_str(record["url"]),
                    _json_str(record["input"]),
                    record["line"],
                    "null" if status is None else f"{status:d}",
                    "null" if error is None else _json_str(error),
                    "null" if detail is None else _json_str(detail),
                    f"{elapsed:.3f}",
                    record["bytes"],
                    record["attempts"],
                    record["redirects"],
                    f"{record['redirect_ms']:.3f}",
                    "null" if final_url is None else _json_str(final_url),
                    "null" if remote_ip is None else _json_str(remote_ip),
                    "null" if tls_info is None else _tls_json(tls_info),
                    "null" if dns is None else f"{dns:.3f}",
                    "null" if connect is None else f"{connect:.3f}",
                    "null" if tls is None else f"{tls:.3f}",
                    "null" if ttfb is None else f"{ttfb:.3f}",
                    "null" if body is None else f"{body:.3f}",
                )
                if self.extras:
                    line = (
                        line[:-2]
                        + "".join(
                            f",{_json_str(name)}:{_dumps(record[name])}" for name in self.extras
                        )
                        + "}\n"
                    )
                self._pending.append(line)
            else:
                tls_row = (
                    (None,) * len(TLS_FIELDS)
                    if tls_info is None
                    else tuple(_one_line(tls_info.get(k)) for k in TLS_FIELDS)
                )
                self._csv.writerow(
                    (
                        _one_line(record["url"]),
                        _one_line(record["input"]),
                        # ":d" also refuses what is not an integer, as "%d" does above
                        f"{record['line']:d}",
                        None if status is None else f"{status:d}",
                        error,
                        _one_line(detail),
                        f"{elapsed:.3f}",
                        f"{record['bytes']:d}",
                        f"{record['attempts']:d}",
                        f"{record['redirects']:d}",
                        f"{record['redirect_ms']:.3f}",
                        _one_line(final_url),
                        remote_ip,
                        *tls_row,
                        None if dns is None else f"{dns:.3f}",
                        None if connect is None else f"{connect:.3f}",
                        None if tls is None else f"{tls:.3f}",
                        None if ttfb is None else f"{ttfb:.3f}",
                        None if body is None else f"{body:.3f}",
                        *(_csv_extra(record[name]) for name in self.extras),
                    )
                )
        except TypeError as exc:  # e.g. a number where a string belongs
            raise ValueError(f"record field of the wrong type: {exc}") from None
        except KeyError:
            raise ValueError(_key_mismatch(record, self.extras)) from None
        if (
            len(self._pending) >= FLUSH_RECORDS
            or time.monotonic() - self._last_flush >= FLUSH_INTERVAL
        ):
            self.flush()

    def write_encoded(self, lines: str) -> None:
        """Buffer records already formatted by :func:`encode_records` in this format."""
        if self._closed:
            raise ValueError("write to a closed RecordWriter")
        self._pending.append(lines)
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Write the buffered records out, as whole lines, in one write."""
        self._last_flush = time.monotonic()
        if self._pending:
            data = "".join(self._pending)
            self._pending.clear()
            self._sink.write(data)

    def close(self) -> None:
        """Flush, and close the file (never stdout).  Closing twice is harmless."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._sink.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Also on an exception: the records already done are kept.
        self.close()


def encode_records(
    records: Iterable[Mapping[str, Any]], fmt: str, extras: tuple[str, ...] = ()
) -> str:
    """``records`` as :class:`RecordWriter` writes them in ``fmt`` (no CSV header).

    A cluster worker formats its shard's records with this, so that they travel
    to the client as one string, which the client's writer takes whole
    (:meth:`RecordWriter.write_encoded`).
    """
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format {fmt!r} (one of: {', '.join(OUTPUT_FORMATS)})")
    sink = _TextSink()
    with RecordWriter(sink, fmt, header=False, extras=extras) as writer:
        for record in records:
            writer.write(record)
    return "".join(sink.parts)


def open_writer(
    path: str | os.PathLike[str] | None,
    fmt: str,
    *,
    append: bool = False,
    extras: tuple[str, ...] = (),
) -> RecordWriter:
    """A :class:`RecordWriter` for ``path`` (``None`` or ``"-"``: stdout) in ``fmt``.

    ``fmt`` is ``"jsonl"`` or ``"csv"``.  Without ``append`` an existing file is
    replaced.  With it, records go after the existing ones: a CSV header is written
    only if the file is empty, and a partial last line left by an interrupted run
    is cut first (:func:`truncate_partial_last_line`), so that no record is glued
    to half of another.
    """
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format {fmt!r} (one of: {', '.join(OUTPUT_FORMATS)})")
    if path is None or os.fspath(path) == "-":
        return RecordWriter(_StdoutSink(), fmt, header=fmt == "csv", extras=extras)
    name = os.fspath(path)
    try:
        if append:
            truncate_partial_last_line(path)
        # Unbuffered: the writer does its own buffering, in whole lines.
        file = open(path, "ab" if append else "wb", buffering=0)  # noqa: SIM115 - owned by the sink
        empty = os.fstat(file.fileno()).st_size == 0
    except OSError as exc:
        raise UsageError(f"{name}: cannot write: {_reason(exc)}") from None
    return RecordWriter(_FileSink(file, name), fmt, header=fmt == "csv" and empty, extras=extras)


class LineSet(collections.abc.Set[int]):
    """A set of input line numbers (>= 1) stored as a bitmap: one bit per line.

    Membership and :meth:`add` are O(1); memory is (largest line) / 8 bytes.
    It compares equal to any set with the same members.
    """

    __slots__ = ("_bits", "_count")

    def __init__(self, lines: Iterable[int] = ()) -> None:
        self._bits = bytearray()
        self._count = 0
        for line in lines:
            self.add(line)

    def add(self, line: int) -> None:
        """Add ``line``; adding it again changes nothing."""
        if line < 1:
            raise ValueError(f"line numbers start at 1, not {line}")
        index = line >> 3
        bits = self._bits
        if index >= len(bits):
            # Doubling keeps a million appends linear, as list.append does.
            bits.extend(bytes(max(index + 1 - len(bits), len(bits))))
        mask = 1 << (line & 7)
        if not bits[index] & mask:
            bits[index] |= mask
            self._count += 1

    def __contains__(self, line: object) -> bool:
        if not isinstance(line, int) or line < 1:
            return False
        index = line >> 3
        return index < len(self._bits) and bool(self._bits[index] & (1 << (line & 7)))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        for index, byte in enumerate(self._bits):
            if byte:
                for bit in range(8):
                    if byte >> bit & 1:
                        yield index << 3 | bit

    def __repr__(self) -> str:
        return f"<LineSet of {self._count} lines>"


def done_lines(path: str | os.PathLike[str], fmt: str) -> LineSet:
    """The input line numbers already recorded in the output file ``path``.

    A missing file has none.  A last line without its newline is an interrupted
    write, not a record: it is left out (and cut by the next append).  Any other
    line that is not a record is a :class:`UsageError` naming the file and line.
    """
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format {fmt!r} (one of: {', '.join(OUTPUT_FORMATS)})")
    name = os.fspath(path)
    if name == "-":
        raise UsageError("--resume needs an output file (-o FILE), not stdout")
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return LineSet()
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {_reason(exc)}") from None
    try:
        with file:
            lines = (raw for raw in file if raw.endswith(b"\n"))
            if fmt == "jsonl":
                return _jsonl_done(lines, name)
            return _csv_done(lines, name)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {_reason(exc)}") from None


def _jsonl_done(lines: Iterator[bytes], name: str) -> LineSet:
    done = LineSet()
    for lineno, raw in enumerate(lines, 1):
        if raw.isspace():
            continue
        try:
            # Parsed in full (a regex for "line" would be faster) because a line
            # that is not a record must stop the resume, not be skipped.
            record = _decode_json(raw.decode("utf-8"))
        except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bad bytes
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            raise UsageError(f"{name}:{lineno}: not a JSON record ({detail})") from None
        line = record.get("line") if isinstance(record, dict) else None
        if type(line) is not int or line < 1:
            raise UsageError(f'{name}:{lineno}: not a result record (no "line" number)')
        done.add(line)
    return done


def _csv_done(lines: Iterator[bytes], name: str) -> LineSet:
    done = LineSet()
    lineno = 0

    def decoded() -> Iterator[str]:
        nonlocal lineno
        for lineno, raw in enumerate(lines, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"{name}:{lineno}: not UTF-8 text") from None

    reader = csv.reader(decoded(), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            return done
        if "line" not in header:
            raise UsageError(f'{name}:1: not a surge CSV output (no "line" column in the header)')
        column = header.index("line")
        for row in reader:
            if not row:
                continue
            try:
                line = int(row[column])
            except (IndexError, ValueError):
                line = 0
            if line < 1:
                raise UsageError(f"{name}:{lineno}: not a result record (no line number)")
            done.add(line)
    except csv.Error as exc:
        raise UsageError(f"{name}:{lineno}: not valid CSV ({exc})") from None
    return done


def truncate_partial_last_line(path: str | os.PathLike[str]) -> int:
    """Cut a last line that lacks its newline; return the number of bytes cut.

    A missing or empty file, or one ending in a newline, is left alone.
    """
    try:
        file = open(path, "r+b")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return 0
    with file:
        size = file.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return 0
        # Search backwards in blocks: the file may be gigabytes, the cut line short.
        keep = 0
        end = size
        while end > 0:
            start = max(0, end - 65536)
            file.seek(start)
            found = file.read(end - start).rfind(b"\n")
            if found >= 0:
                keep = start + found + 1
                break
            end = start
        file.truncate(keep)
        return size - keep


def _one_line(value: str | None) -> str | None:
    # One record per physical line, even in CSV: see the module docstring.
    if value is not None and ("\n" in value or "\r" in value):
        return value.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return value


def _tls_json(info: Mapping[str, Any]) -> str:
    """A record's ``tls`` as JSON: made once per connection (TLSInfo.json)."""
    made = getattr(info, "json", None)
    return made if isinstance(made, str) else _dumps(dict(info))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _csv_extra(value: Any) -> str | None:
    """An optional field in a CSV cell: text as it is (on one line), lists as JSON."""
    if value is None or isinstance(value, str):
        return _one_line(value)
    return _dumps(value)


def _key_mismatch(record: Mapping[str, Any], extras: tuple[str, ...] = ()) -> str:
    expected = FIELDS + extras
    missing = [key for key in expected if key not in record]
    extra = [key for key in record if key not in expected]
    timings = record.get("timings")
    if not missing and not extra and isinstance(timings, Mapping):
        missing = [key for key in TIMING_FIELDS if key not in timings]
        return f"record timings lack {missing}"
    return f"record keys differ from the contract: missing {missing}, unexpected {extra}"


def _reason(exc: OSError) -> str:
    # "[Errno 13] Permission denied", without str(exc)'s repeated file name.
    if exc.errno is not None and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}"
    return str(exc)


class _Collector:
    """A file-like ``write`` that appends to a list (for csv.writer)."""

    __slots__ = ("write",)

    def __init__(self, lines: list[str]) -> None:
        self.write = lines.append


class _Sink:
    """Where flushed text goes: a file or stdout."""

    def write(self, data: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _FileSink(_Sink):
    def __init__(self, file: IO[bytes], name: str) -> None:
        self._file = file
        self._name = name

    def write(self, data: str) -> None:
        view = memoryview(data.encode("utf-8", "surrogateescape"))
        try:
            # An unbuffered write may be partial (a signal, a full pipe): loop.
            while view:
                written = self._file.write(view)
                view = view[written or 0 :]
        except OSError as exc:
            raise UsageError(f"{self._name}: cannot write: {_reason(exc)}") from None

    def close(self) -> None:
        self._file.close()


class _TextSink(_Sink):
    """Keeps what is written, in memory (for :func:`encode_records`)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, data: str) -> None:
        self.parts.append(data)

    def close(self) -> None:
        pass


class _StdoutSink(_Sink):
    def write(self, data: str) -> None:
        stdout = sys.stdout
        buffer = getattr(stdout, "buffer", None)
        if buffer is not None:
            buffer.write(data.encode("utf-8", "surrogateescape"))
            buffer.flush()
        else:
            stdout.write(data)
            stdout.flush()

    def close(self) -> None:
        pass  # stdout belongs to the process, not to the writer
