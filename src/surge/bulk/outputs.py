"""Write ``surge fetch`` result records, and read them back for ``--resume``.

A record is the public contract of ``surge fetch`` (docs/architecture-rules.md,
bulk/, "Result records"): the keys of :data:`FIELDS`, in that order, ``timings``
holding the keys of :data:`TIMING_FIELDS`.  :class:`RecordWriter` writes them as JSONL (one compact
object per line) or CSV (the same columns, ``timings`` flattened, nulls as empty
cells).

The file or stdout is a :class:`surge.sinks.Sink`: locked for the run, written
whole or not at all, one line naming it when a write fails (see surge.sinks).
Two properties make an interrupted run resumable:

- Only whole lines reach the file.  Records collect in memory and go out as one
  write of complete lines, at most every :data:`FLUSH_INTERVAL` seconds or
  :data:`FLUSH_RECORDS` records, and on close; a write that fails is cut back.
  A crash in the middle of that write can still leave half a line, which
  ``--resume`` cuts before appending.
- Every record is one physical line, in CSV too (newlines inside values become
  spaces), so "the last line has no newline" is exactly "the last record is cut".

``--resume`` (:func:`hold_output`) appends only to what is surge's own: every
line a record (JSONL: an object with the contract's keys; CSV: this writer's
header, then rows of its width), each with a line number of the input, and a
last line that is a record or the start of one.  Anything else is refused with
one line naming the file and line, before a byte of it changes - and so are
records of another input (:func:`resumed_inputs`: each record's ``line`` and
``input`` must be this input's).  Records whose exchange or body another sink
lost are cut and done again (:class:`Resumed`).  The line
numbers done go into a :class:`LineSet`, whose memory follows the number of
records, not the largest number: 10 million lines cost 1.25 MB, where a Python
``set`` of ints would cost over 500 MB.
"""

from __future__ import annotations

import collections.abc
import contextlib
import csv
import hashlib
import itertools
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Protocol, TypeVar

from surge.errors import RECORD_ERROR_CLASSES, UsageError
from surge.http.timings import RECORD_PHASES
from surge.sinks import Sink, open_output, read_lines, reason
from surge.trace.redact import safe_url

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
TLS_FIELDS: Final = ("version", "cipher", "alpn", "subject", "issuer", "not_after", "resumed")
#: The keys of a record's ``timings`` (curl's -w timers, see surge.http.timings).
TIMING_FIELDS: Final = RECORD_PHASES
#: Fields the options add after the contract's (FetchOptions.extras), in this order.
EXTRA_FIELDS: Final = (
    "headers",
    "body_path",
    "body_sha256",
    "continue_from",
    "continued",
    "body",
)
#: The CSV header: the record's fields with ``tls`` and ``timings`` flattened.
CSV_COLUMNS: Final = FIELDS[:-2] + tuple(f"tls_{k}" for k in TLS_FIELDS) + TIMING_FIELDS
OUTPUT_FORMATS: Final = ("jsonl", "csv")

#: Buffered records reach the file at least this often (seconds) while writes come
#: in, so a progress watcher or an interrupted run sees recent results.
FLUSH_INTERVAL: Final = 0.5
#: ... and at least every this many records, which bounds the buffer (~3 MB).
FLUSH_RECORDS: Final = 10_000

_ERRORS: Final = frozenset(RECORD_ERROR_CLASSES)
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
        self, sink: Sink | list[str], fmt: str, *, header: bool, extras: tuple[str, ...] = ()
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
        #: Called before each write of records: what must hold their exchanges
        #: first (the WARC's flush), raising if it cannot - the records then
        #: stay unwritten.
        self.before_flush: Callable[[], None] | None = None
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
                    else tuple(_csv_extra(tls_info.get(k)) for k in TLS_FIELDS)  # resumed: true
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
            if self.before_flush is not None:
                self.before_flush()  # a record is done only when every sink holds it
            data = "".join(self._pending)
            self._pending.clear()
            if isinstance(self._sink, list):
                self._sink.append(data)  # encode_records: kept as text
            else:
                self._sink.write(data.encode("utf-8", "surrogateescape"))

    def close(self) -> None:
        """Flush, and close the file (never stdout).  Closing twice is harmless."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if not isinstance(self._sink, list):
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
    parts: list[str] = []
    with RecordWriter(parts, fmt, header=False, extras=extras) as writer:
        for record in records:
            writer.write(record)
    return "".join(parts)


def open_writer(
    path: str | os.PathLike[str] | None,
    fmt: str,
    *,
    append: bool = False,
    extras: tuple[str, ...] = (),
    held: HeldOutput | None = None,
) -> RecordWriter:
    """A :class:`RecordWriter` for ``path`` (``None`` or ``"-"``: stdout) in ``fmt``.

    ``fmt`` is ``"jsonl"`` or ``"csv"``.  The file is locked for the run (a
    second run on it is refused, naming its pid).  Without ``append`` an
    existing file is replaced.  With it, records go after the existing ones,
    which must be surge's own (see :func:`hold_output`): a partial last line
    left by an interrupted run is cut first (or given its newline, if it is a
    whole record), so that no record is glued to half of another, and a CSV
    header is written only if the file is empty.  ``held``: the output as
    :func:`hold_output` returned it (``path`` and ``append`` are then its).
    """
    _check_format(fmt)
    if held is None:
        held = hold_output(path, fmt, resume=append, extras=extras)
    try:
        held.finish()
    except BaseException:
        held.close()
        raise
    sink = held.sink
    empty = not sink.regular or sink.position == 0
    return RecordWriter(sink, fmt, header=fmt == "csv" and empty, extras=extras)


def _check_format(fmt: str) -> None:
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format {fmt!r} (one of: {', '.join(OUTPUT_FORMATS)})")


#: Keys every JSONL record of surge has carried since its first release: a line
#: without them is not surge's, and --resume does not append to its file.
RECORD_KEYS: Final = (*FIELDS[: FIELDS.index("attempts") + 1], "final_url", "timings")
#: How every JSONL record starts (the contract fixes the key order).
RECORD_START: Final = b'{"url":'
#: The largest line number a record may carry when the input's length is unknown
#: (JSON's exact integers): more is not a line surge numbered.
MAX_LINE: Final = 2**53
#: A line of an output longer than this is not a record (those with -i's headers
#: are the longest, tens of KiB); it is never held whole.
MAX_RECORD_BYTES: Final = 64 * 1024 * 1024


class LineSet(collections.abc.Set[int]):
    """A set of input line numbers (>= 1) whose memory follows its size, not its
    largest member.

    Lines are grouped in chunks of 65,536: a chunk keeps its lines in a small
    ``set`` up to 256 of them, then as a bitmap of 8 KiB (one bit a line).  So a
    dense set (a resumed run's lines) costs a bit a line - 10 million lines,
    1.25 MB - and a sparse one (numbers far apart) a few hundred bytes a line,
    never (largest line) / 8 bytes: a record numbered 10**12 costs the same as
    one numbered 1.  Membership and :meth:`add` are O(1).  It compares equal
    to any set with the same members.
    """

    __slots__ = ("_chunks", "_count")

    _SHIFT: Final = 16
    _LOW: Final = (1 << 16) - 1
    _SET_MAX: Final = 256

    def __init__(self, lines: Iterable[int] = ()) -> None:
        self._chunks: dict[int, set[int] | bytearray] = {}
        self._count = 0
        for line in lines:
            self.add(line)

    def add(self, line: int) -> None:
        """Add ``line``; adding it again changes nothing."""
        if line < 1:
            raise ValueError(f"line numbers start at 1, not {line}")
        key = line >> self._SHIFT
        chunk = self._chunks.get(key)
        if chunk is None:
            self._chunks[key] = {line}
            self._count += 1
        elif isinstance(chunk, set):
            if line not in chunk:
                chunk.add(line)
                self._count += 1
                if len(chunk) > self._SET_MAX:
                    bits = bytearray((self._LOW + 1) >> 3)
                    for member in chunk:
                        low = member & self._LOW
                        bits[low >> 3] |= 1 << (low & 7)
                    self._chunks[key] = bits
        else:
            low = line & self._LOW
            mask = 1 << (low & 7)
            if not chunk[low >> 3] & mask:
                chunk[low >> 3] |= mask
                self._count += 1

    def __contains__(self, line: object) -> bool:
        if not isinstance(line, int) or line < 1:
            return False
        chunk = self._chunks.get(line >> self._SHIFT)
        if chunk is None:
            return False
        if isinstance(chunk, set):
            return line in chunk
        low = line & self._LOW
        return bool(chunk[low >> 3] & (1 << (low & 7)))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        for key in sorted(self._chunks):
            chunk = self._chunks[key]
            if isinstance(chunk, set):
                yield from sorted(chunk)
                continue
            base = key << self._SHIFT
            for index, byte in enumerate(chunk):
                if byte:
                    for bit in range(8):
                        if byte >> bit & 1:
                            yield base | index << 3 | bit

    def nbytes(self) -> int:
        """Roughly the memory the members take (the chunks' bitmaps and sets)."""
        return sum(
            len(chunk) if isinstance(chunk, bytearray) else sys.getsizeof(chunk) + 32 * len(chunk)
            for chunk in self._chunks.values()
        )

    def __repr__(self) -> str:
        return f"<LineSet of {self._count} lines>"


class HeldOutput:
    """An output locked for a run and checked, not yet changed
    (:func:`hold_output`).  :meth:`finish` readies it for the records: empties
    it, or, resumed, cuts a torn last line (or gives a whole last record its
    newline).  :meth:`close` before that leaves it exactly as it was - and
    removes it if holding it created it."""

    __slots__ = ("_cut", "_newline", "done", "seen", "sink")

    def __init__(self, sink: Sink, seen: Resumed, cut: int | None, newline: bool) -> None:
        self.sink = sink
        #: What --resume read of it (resumed; else nothing).
        self.seen = seen
        #: The input line numbers recorded already (resumed; else none).
        self.done = seen.done
        self._cut = cut
        self._newline = newline

    def finish(self) -> None:
        if self._cut is not None:
            self.sink.truncate(self._cut)
        elif self._newline:
            self.sink.write(b"\n")
        self._cut, self._newline = None, False
        self.sink.created = False  # the run's now: kept whatever happens next

    def close(self) -> None:
        self.sink.abandon()


def hold_output(
    path: str | os.PathLike[str] | None,
    fmt: str,
    *,
    resume: bool = False,
    extras: tuple[str, ...] = (),
    input_lines: int | None = None,
    held_elsewhere: Callable[[Mapping[str, Any]], bool] | None = None,
) -> HeldOutput:
    """Lock the output ``path`` (``None`` or ``"-"``: stdout) for a run, and
    with ``resume`` read the input lines it has recorded; nothing in it changes
    until :meth:`HeldOutput.finish`.

    Resumed, it must hold surge's records in ``fmt`` with these ``extras`` (a
    CSV's columns), or nothing; ``input_lines``, when the input's length is
    known, bounds the line numbers.  Anything else - another format, garbage,
    a last line that is neither a record nor the start of one, a line number
    past the input - is a :class:`UsageError` naming the file and line, and the
    file is left byte for byte as it was.

    ``held_elsewhere(record)``: whether the run's other sinks (the WARC, the
    saved bodies) still hold what this record says was done; from the first
    record that is not so, the records are cut by :meth:`HeldOutput.finish`
    and their inputs fetched again (see :class:`Resumed`).
    """
    _check_format(fmt)
    if path is None or os.fspath(path) == "-":
        if resume:
            raise UsageError("--resume needs an output file (-o FILE), not stdout")
        return HeldOutput(open_output(None), Resumed(), None, False)
    name = os.fspath(path)
    if resume:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.stat(name).st_mode):  # (opening a FIFO waits for a reader)
                raise UsageError(f"{name}: --resume needs a regular file to read back")
    # a write that fails is cut back to its last whole line: records stay whole
    sink = open_output(path, append=True, rollback="line")
    try:
        if not resume:
            return HeldOutput(sink, Resumed(), 0 if sink.regular else None, False)
        if not sink.regular:
            raise UsageError(f"{name}: --resume needs a regular file to read back, not this one")
        seen = Resumed(held_elsewhere)
        cut, newline = _scan(
            sink.read_lines(MAX_RECORD_BYTES), name, fmt, extras, input_lines, seen
        )
        if seen.lost is not None:  # records from there on are done again
            cut, newline = seen.lost, False
    except BaseException:
        sink.abandon()
        raise
    return HeldOutput(sink, seen, cut, newline)


def done_lines(
    path: str | os.PathLike[str],
    fmt: str,
    *,
    extras: tuple[str, ...] | None = None,
    input_lines: int | None = None,
) -> LineSet:
    """The input line numbers already recorded in the output file ``path``
    (read only, not locked; a missing file has none).

    The file is checked as :func:`hold_output` checks it (``extras`` None: a
    CSV may have any of the optional columns); a last line without its newline
    is an interrupted write, left out unless it is a whole record.
    """
    _check_format(fmt)
    name = os.fspath(path)
    if name == "-":
        raise UsageError("--resume needs an output file (-o FILE), not stdout")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return LineSet()
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {reason(exc)}") from None
    try:
        seen = Resumed()
        _scan(read_lines(fd, MAX_RECORD_BYTES, name), name, fmt, extras, input_lines, seen)
        return seen.done
    finally:
        os.close(fd)


_Lines = Iterator[tuple[bytes, bool, int]]


def _refused(name: str, lineno: int, problem: str) -> UsageError:
    return UsageError(
        f"{name}:{lineno}: {problem}: not surge's records, so not resumed (the file is unchanged)"
    )


class Resumed:
    """What ``--resume`` read of an output: the input lines it records
    (:attr:`lines`), those of them done (:attr:`done`), and what it says of the
    input they came from.

    * **The input it was made from.**  :attr:`digest` folds each record's
      (``line``, ``input``) into one number (:func:`input_key`), in constant
      memory; :func:`resumed_inputs` folds this input's lines at those numbers
      the same way, and refuses to resume onto records of another input.
    * **What the other sinks hold.**  ``held_elsewhere(record)`` (the WARC has
      its exchange, its saved body is there): the first record it is false of
      is :attr:`lost` - its offset - and that record and every one after it
      are cut and done again, so that a record never stands for an exchange
      a sink lost (a WARC cut by a full disk, an OS that lost its tail)."""

    __slots__ = ("digest", "done", "held_elsewhere", "last", "lines", "lost")

    def __init__(self, held_elsewhere: Callable[[Mapping[str, Any]], bool] | None = None) -> None:
        self.lines = LineSet()
        self.done = LineSet()
        self.digest = 0
        #: The largest line recorded (0: none).
        self.last = 0
        #: The offset of the first record a sink lost, if one did.
        self.lost: int | None = None
        self.held_elsewhere = held_elsewhere

    def add(self, line: int, value: str, offset: int, record: Mapping[str, Any]) -> None:
        """``record`` of input ``line``, whose ``input`` is ``value``, at ``offset``."""
        if line in self.lines:
            return
        self.lines.add(line)
        self.digest = (self.digest + input_key(line, value)) & _DIGEST_MASK
        if line > self.last:
            self.last = line
        held = self.held_elsewhere
        if self.lost is None and held is not None and not held(record):
            self.lost = offset
        if self.lost is None:
            self.done.add(line)


_DIGEST_MASK: Final = (1 << 128) - 1


def input_key(line: int, value: str) -> int:
    """An input line (its number, its value as a record's ``input`` holds it)
    as one term of :attr:`Resumed.digest`: 128 bits of BLAKE2b of both, so the
    sum of the terms tells "line N is the input's line N" - whatever order the
    records were written in - for every run alike.  (Not ``hash()``: seeded
    per process, and a tuple's hash is near-linear in its items, so a sum of
    them missed two lines swapped in about one run in eight.)  The value is
    folded as a record writes it (:func:`surge.trace.redact.safe_url`, which
    gives what it wrote back unchanged): an input line and its record's
    ``input`` fold the same."""
    key = hashlib.blake2b(line.to_bytes(8, "little"), digest_size=16)
    key.update((_one_line(safe_url(value)) or "").encode("utf-8", "surrogatepass"))
    return int.from_bytes(key.digest(), "little")


class _Input(Protocol):
    @property
    def line(self) -> int: ...
    @property
    def input(self) -> str: ...


_I = TypeVar("_I", bound=_Input)


def resumed_inputs(
    items: Iterator[_I], seen: Resumed, output: str, source: str
) -> tuple[int, Iterator[_I]]:
    """(how many inputs are done already, the inputs left) of a resumed run -
    once ``items`` (the input's, in line order) were read past the last line
    recorded and their lines matched the records': every recorded line there,
    with the same ``input``.  Else a :class:`UsageError`, before anything
    changed: the records are of another input.  The inputs left before the
    last line recorded are held meanwhile (those the first run had in
    flight, and those whose records a sink lost)."""
    if not seen.lines:
        return 0, items
    digest = 0
    count = 0
    left: list[_I] = []
    ahead: _I | None = None
    for item in items:
        if item.line > seen.last:
            ahead = item
            break
        if item.line in seen.lines:
            count += 1
            digest = (digest + input_key(item.line, item.input)) & _DIGEST_MASK
        if item.line not in seen.done:
            left.append(item)
    if count != len(seen.lines) or digest != seen.digest:
        missing = len(seen.lines) - count
        why = (
            f"{missing:,} of the lines it records are not in {source}"
            if missing
            else f"the inputs it records are not {source}'s lines"
        )
        raise UsageError(
            f"{output}: its records are not of this input ({why}): not resumed "
            "(the file is unchanged)"
        )
    rest = itertools.chain(left, () if ahead is None else (ahead,), items)
    return len(seen.done), rest


def _scan(
    lines: _Lines,
    name: str,
    fmt: str,
    extras: tuple[str, ...] | None,
    input_lines: int | None,
    seen: Resumed,
) -> tuple[int | None, bool]:
    """(where to cut a torn last line, whether a whole last record lacks only
    its newline) of an output's ``lines``, their records added to ``seen``;
    refuses what is not surge's."""
    top = MAX_LINE if input_lines is None else input_lines

    def add(record: Mapping[str, Any], lineno: int, offset: int) -> None:
        value = record["line"]
        if type(value) is not int or value < 1:
            raise _refused(name, lineno, "no line number")
        if value > top:
            past = f"past the input's {top:,} lines" if input_lines is not None else "not a line"
            raise _refused(name, lineno, f"line {value} is {past}")
        given = record["input"]
        if not isinstance(given, str):
            raise _refused(name, lineno, "no input")
        seen.add(value, given, offset, record)

    if fmt == "jsonl":
        return _jsonl_scan(lines, name, add)
    return _csv_scan(lines, name, extras, add)


_Add = Callable[[Mapping[str, Any], int, int], None]


def _jsonl_scan(lines: _Lines, name: str, add: _Add) -> tuple[int | None, bool]:
    for lineno, (raw, whole, offset) in enumerate(lines, 1):
        if len(raw) > MAX_RECORD_BYTES + 1:
            raise _refused(name, lineno, f"a line of more than {MAX_RECORD_BYTES:,} bytes")
        if not whole:
            # The last line lacks its newline: a write cut short - or a whole
            # record whose newline did not make it, which is kept.
            record = _json_object(raw)
            if record is not None and all(key in record for key in RECORD_KEYS):
                add(record, lineno, offset)
                return None, True
            if raw.startswith(RECORD_START) or RECORD_START.startswith(raw):
                return offset, False
            raise _refused(name, lineno, "the last line is neither a record nor the start of one")
        if raw.isspace():
            continue
        try:
            # Parsed in full (a regex for "line" would be faster) because a line
            # that is not a record must stop the resume, not be skipped.
            record = _decode_json(raw.decode("utf-8"))
        except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bad bytes
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            raise _refused(name, lineno, f"not a JSON record ({detail})") from None
        except RecursionError:
            raise _refused(name, lineno, "not a JSON record (nested too deeply)") from None
        if not isinstance(record, dict):
            raise _refused(name, lineno, "not a JSON object")
        missing = [key for key in RECORD_KEYS if key not in record]
        if missing:
            raise _refused(name, lineno, f'no "{missing[0]}" field')
        add(record, lineno, offset)
    return None, False


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = _decode_json(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _csv_scan(
    lines: _Lines, name: str, extras: tuple[str, ...] | None, add: _Add
) -> tuple[int | None, bool]:
    first = next(lines, None)
    if first is None:
        return None, False
    raw, whole, _ = first
    text = _text(raw, name, 1, partial=not whole)
    if not whole:
        ours = ",".join(CSV_COLUMNS + (extras or ()))
        if ours.startswith(text):
            return 0, False  # a header cut short: the file starts again
        raise _refused(name, 1, "the only line is neither surge's CSV header nor part of it")
    header = next(csv.reader([text]), [])
    width = len(header)
    fields = tuple(header[len(CSV_COLUMNS) :])
    if tuple(header[: len(CSV_COLUMNS)]) != CSV_COLUMNS or any(
        f not in EXTRA_FIELDS for f in fields
    ):
        raise _refused(name, 1, "not surge's CSV header")
    if extras is not None and fields != extras:
        raise UsageError(
            f"{name}: written with the record fields {list(fields)}, not {list(extras)}: "
            "resume with the first run's options (-i, --output-dir, -C)"
        )
    column = header.index("line")
    input_column = header.index("input")
    where = [1, 0]  # the line number and offset of the row read
    tail: list[tuple[bytes, int]] = []

    def texts() -> Iterator[str]:
        for lineno, (raw, whole, offset) in enumerate(lines, 2):
            if not whole:
                tail.append((raw, offset))
                return
            where[0], where[1] = lineno, offset
            if len(raw) > MAX_RECORD_BYTES + 1:
                raise _refused(name, lineno, f"a line of more than {MAX_RECORD_BYTES:,} bytes")
            yield _text(raw, name, lineno)

    reader = csv.reader(texts(), strict=True)
    try:
        for row in reader:
            if not row:
                continue
            if len(row) != width:
                raise _refused(name, where[0], f"{len(row)} columns, not the header's {width}")
            try:
                line = int(row[column])
            except ValueError:
                line = 0
            # a CSV record's empty cells are its nulls
            record: dict[str, Any] = {
                key: value or None for key, value in zip(header, row, strict=True)
            }
            record["line"] = line
            record["input"] = row[input_column]
            add(record, where[0], where[1])
    except csv.Error as exc:
        raise _refused(name, where[0], f"not valid CSV ({exc})") from None
    if tail:
        raw, offset = tail[0]
        lineno = where[0] + 1
        cut_row = next(csv.reader([_text(raw, name, lineno, partial=True)]), [])
        if "\0" in raw.decode("utf-8", "replace") or len(cut_row) > width:
            raise _refused(name, lineno, "the last line is neither a record nor the start of one")
        return offset, False
    return None, False


def _text(raw: bytes, name: str, lineno: int, *, partial: bool = False) -> str:
    """A line's text; a cut last line may end inside a character."""
    for cut in range(4 if partial else 1):
        try:
            return raw[: len(raw) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    raise _refused(name, lineno, "not UTF-8 text")


def truncate_partial_last_line(path: str | os.PathLike[str]) -> int:
    """Cut a last line that lacks its newline; return the number of bytes cut.

    A missing or empty file, or one ending in a newline, is left alone.  (The
    writer's ``--resume`` checks the line is surge's before cutting it:
    :func:`hold_output`.)
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


class _Collector:
    """A file-like ``write`` that appends to a list (for csv.writer)."""

    __slots__ = ("write",)

    def __init__(self, lines: list[str]) -> None:
        self.write = lines.append
