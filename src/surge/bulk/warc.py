"""WARC/1.1 output for ``surge fetch --warc FILE.warc.gz`` (issue #21).

:class:`WarcWriter` turns each HTTP exchange into a ``request`` and a
``response`` record, after one ``warcinfo`` record per file, each record its own
gzip member (so a reader can seek to any record and ``warcio check``, warcio's
and FastWARC's iterators accept the file).  The records are what the wire
carried, with three documented choices:

* **Bodies are entity bodies.**  surge's connection (llhttp) removes chunked
  framing and keeps Content-Encoding, so the body handed in is the payload as
  WARC 1.1's WARC-Payload-Digest field defines it: "the entity-body" of RFC
  2616, after transfer decoding and before content decoding.  The payload
  digest is the SHA-1 of exactly those bytes, as heritrix (since its fix for
  chunked responses), ArchiveTeam's wget-lua and the spec's own clarification
  (iipc/warc-specifications#22) have it; warcio instead digests whatever
  follows the HTTP head, chunk framing included (webrecorder/warcio#74).  The
  two agree here because the stored block holds no chunk framing: a head that
  declared a ``Transfer-Encoding`` (chunked, or a gzip the connection undid
  too: the body stored has every transfer coding undone) is stored with that
  header renamed ``X-Crawler-Transfer-Encoding``, any ``Content-Length`` renamed
  ``X-Crawler-Content-Length``, and a ``Content-Length`` of the stored body
  added - Common Crawl's convention, which FastWARC's documentation names and
  which every reader then parses without dechunking.  Chunk extensions and
  trailers are not kept.
* **Digests** are ``sha1:`` + base32 (RFC 4648), as wget, heritrix and warcio
  write them: ``WARC-Block-Digest`` over the HTTP head and body,
  ``WARC-Payload-Digest`` over the body.
* **Dates** are UTC with microseconds (``2026-11-26T09:30:00.123456Z``, which
  WARC 1.1 allows where 1.0 had seconds); both records of an exchange carry
  the same one.

Crash safety and resume.  The records of an exchange are assembled in memory
and reach the file in one ``write`` call together with the other whole
exchanges buffered before them (up to ``buffer_size`` bytes, or
:data:`FLUSH_INTERVAL` seconds): a write never splits an exchange from the
others, and two writers' exchanges never interleave.  The file is a
:mod:`surge.sinks` sink: locked for the run (a second run on it is refused),
and a write that fails (a full disk) is one error naming the file, with the
file cut back to its last whole exchange.  A crash can still cut the
last write.  ``append=True`` therefore first runs :func:`recover`, which
inflates the file member by member (about a second per GB of records) and cuts
it after the last complete exchange: a member the file ends inside, bytes that
are no gzip member (a file system that extended the file with zeros), or a
``request``/``response`` whose partner (named by its ``WARC-Concurrent-To``)
is not the record before it.  Damage followed by further complete records is
not a torn tail: :func:`recover` raises :class:`~surge.errors.UsageError`
rather than throw those records away.  Each exchange of ``surge fetch`` names
its input line (``Surge-Input-Line``, an extension field), so that a resumed
run can tell which records the WARC holds (:func:`exchange_lines`: a record
whose exchange is gone is done again) and cut the exchanges whose records
never got out (:meth:`WarcWriter.cut_unrecorded`); a failed write stays
failed (each later flush raises it), and ``surge fetch`` writes its records
only after the WARC's flush.

Rotation.  With ``max_size``, an exchange that would take the file past it goes
to a new file instead, named by :func:`rotated_path` (``out.warc.gz``,
``out-00001.warc.gz``, ``out-00002.warc.gz``, ...), which starts with its own
warcinfo.  An exchange larger than ``max_size`` gets a file of its own.
Appending continues in the highest-numbered file of the series.

CPU.  Deflate is most of the cost, then the two SHA-1 passes over each body
(the block digest starts with the HTTP head, so its state cannot be shared
with the payload digest's; OpenSSL's SHA-1 uses the CPU's SHA extensions, 1.5
GB/s here, ~14 microseconds per 10 KB body for both).  With python-isal
installed (the ``warc`` extra) ISA-L deflates: level 1 of 10 KB of HTML-like
text in ~27-37 microseconds on the development machine against zlib's ~70-75,
for slightly smaller output (0.368 against 0.381), and its CRC-32 takes ~1
against ~4; zlib-ng 1.1 was measured too (~32-44, 0.487) and is not used.
Records whose body is compressed already (a Content-Encoding other than
identity, images, video, archives) and records under 1 KB (requests,
redirects) go into deflate's stored blocks - still valid gzip members, only
not shrunk - and the rest is deflated at ``level``.  One raw deflate stream
per writer makes every member, each ended with a full flush (which resets its
history, zlib.h and ISA-L's FULL_FLUSH alike), where a new compressor per
record (warcio's way) costs up to ~55 microseconds more in page faults on its
256 KB of state whenever glibc has handed that memory back.  What is left is
Python's: ~25 microseconds an exchange for the two records' headers, IDs,
dates and members.  benchmarks/warc.py measures all of it.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
import zlib
from collections.abc import Container, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final, TypeAlias
from urllib.parse import quote

from surge._version import __version__
from surge.bulk.outputs import LineSet
from surge.errors import SinkError, UsageError
from surge.sinks import Sink, open_output, reason

__all__ = [
    "BUFFER_SIZE",
    "FLUSH_INTERVAL",
    "Body",
    "WarcWriter",
    "exchange_lines",
    "recover",
    "rotated_path",
    "rotated_paths",
    "rotation_index",
]

#: Buffered exchanges reach the file at least this often (seconds) while exchanges
#: come in (the same cadence as surge.bulk.outputs' result records).
FLUSH_INTERVAL: Final = 0.5
#: The default write buffer: whole exchanges, written together.  One write system
#: call costs ~5 microseconds on the development machine, as much as the SHA-1 of
#: 8 KB, so writing each exchange on its own would cost a third of the budget.
BUFFER_SIZE: Final = 256 * 1024

_Bytes: TypeAlias = bytes | bytearray | memoryview
Body: TypeAlias = _Bytes | Sequence[_Bytes]
"""A body: one bytes-like object, or its pieces in order (as the connection
collects them), which are digested and compressed without being joined."""

_WARC_FIELDS_SPEC: Final = (
    "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
)

# -- gzip members ---------------------------------------------------------------------
#
# A member is the 10-byte header, a raw deflate stream and the CRC-32 and length
# of the uncompressed bytes (RFC 1952).  The stream comes from the writer's one
# long-lived raw deflater: Z_FULL_FLUSH ends its output on a byte boundary and
# resets its history, so what follows never refers back across the flush and
# each member decodes alone.  The deflate stream needs a last block with BFINAL
# set; every member here ends with a stored block holding the record's closing
# CRLF CRLF, marked final.

# ID1 ID2, CM=8 (deflate), no flags, MTIME 0, XFL 0, OS 255 (unknown).
_GZIP_HEADER: Final = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_RECORD_END: Final = b"\r\n\r\n"
# A stored block (BTYPE 00) of the four bytes above, with BFINAL set.
_FINAL_BLOCK: Final = b"\x01\x04\x00\xfb\xff" + _RECORD_END
_STORED_MAX: Final = 0xFFFF  # the most a stored block holds (RFC 1951 3.2.4)
#: Records smaller than this are stored, not deflated: level 1 costs ~3 us per
#: member plus ~6 us per KB here, ~10 us to save ~300 bytes of a request record.
_DEFLATE_MIN: Final = 1024
_pack_trailer: Final = struct.Struct("<II").pack
_pack_stored: Final = struct.Struct("<BHH").pack

# ISA-L (python-isal, ``pip install 'surge[warc]'``) deflates text at level 1 in
# about half zlib's time and CRC-32 in a quarter (with PCLMULQDQ); its
# output is plain deflate, so every reader inflates it.  zlib when it is missing.
_isal_zlib: Any
try:
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - the extra is not installed
    _isal_zlib = None

#: The deflate implementations a writer can use, the fastest installed first.
DEFLATE_ENGINES: Final[tuple[str, ...]] = ("isal", "zlib") if _isal_zlib is not None else ("zlib",)
_crc32: Final = zlib.crc32 if _isal_zlib is None else _isal_zlib.crc32
_sha1: Final = hashlib.sha1
_EMPTY_SHA1: Final = hashlib.sha1(b"").digest()


def _stored_blocks(data: _Bytes, out: list[_Bytes]) -> None:
    """Append ``data`` as non-final stored blocks (the stream is byte-aligned)."""
    size = len(data)
    if size <= _STORED_MAX:
        out.append(_pack_stored(0, size, size ^ 0xFFFF))
        out.append(data)
        return
    view = memoryview(data)
    for start in range(0, size, _STORED_MAX):
        piece = view[start : start + _STORED_MAX]
        out.append(_pack_stored(0, len(piece), len(piece) ^ 0xFFFF))
        out.append(piece)


# -- digests --------------------------------------------------------------------------
#
# base64.b32encode is written in Python on 3.11 (~3 microseconds per digest, four
# digests per exchange).  Base32 encodes 5-byte groups on their own, so the four
# 20-byte digests of an exchange are encoded as one 80-byte string: the 128
# five-bit groups are spread into 128 bytes by seven mask-and-shift steps on one
# integer, then mapped to the alphabet with bytes.translate (~1.5 us for all four).

_B32_ALPHABET: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_TABLE: Final = bytes.maketrans(bytes(range(32)), _B32_ALPHABET)


def _spread_steps(nbytes: int) -> tuple[tuple[int, int, int], ...]:
    """(keep mask, move mask, shift) of each halving step, for ``nbytes`` bytes."""
    groups = nbytes * 8 // 5  # a power of two: 20 -> 32, 80 -> 128
    steps = []
    half, slot = nbytes * 8 // 2, groups * 4
    while half >= 5:
        low = high = 0
        for base in range(0, groups * 8, 2 * slot):
            low |= ((1 << half) - 1) << base
            high |= ((1 << half) - 1) << (base + half)
        steps.append((low, high, slot - half))
        half //= 2
        slot //= 2
    return tuple(steps)


_SPREAD_80: Final = _spread_steps(80)


def _base32_80(digests: bytes) -> bytes:
    """Base32 of 80 bytes (four SHA-1 digests): 128 characters."""
    n = int.from_bytes(digests, "big")
    for low, high, shift in _SPREAD_80:
        n = (n & low) | ((n & high) << shift)
    return n.to_bytes(128, "big").translate(_B32_TABLE)


def _base32(digest: bytes) -> bytes:
    """Base32 of one 20-byte digest (warcinfo records only)."""
    return _base32_80(digest + bytes(60))[:32]


# -- record IDs -----------------------------------------------------------------------
#
# uuid.uuid4() costs ~3 us; formatting version-4 UUIDs from a batch of os.urandom
# bytes costs ~1 us each.  The batch is dropped in a forked child, which would
# otherwise hand out the parent's IDs again.

_ID_BATCH: Final = 256
_VARIANT: Final = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}
_ids: list[bytes] = []


def _fill_ids() -> None:
    h = os.urandom(16 * _ID_BATCH).hex()
    v = _VARIANT
    _ids[:] = [
        f"<urn:uuid:{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
        f"{v[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}>".encode()
        for i in range(0, len(h), 32)
    ]


def _record_id() -> bytes:
    """A new ``<urn:uuid:...>`` (random, version 4)."""
    while True:
        try:
            return _ids.pop()
        except IndexError:  # (a check first would race with other threads' pops)
            _fill_ids()


os.register_at_fork(after_in_child=_ids.clear)


# -- header values --------------------------------------------------------------------


def _target_uri(url: str) -> bytes:
    """``url`` as a WARC-Target-URI: an RFC 3986 URI has no spaces, controls or
    non-ASCII characters, so those are percent-encoded (UTF-8), as browsers and
    curl send them; everything else, ``%`` included, is kept as given - but a
    fragment, which is never sent (and holds OAuth's ``#access_token=``)."""
    url = url.partition("#")[0]
    if url.isascii() and url.isprintable() and " " not in url:
        return url.encode("ascii")
    return quote(url, safe=_URI_SAFE, errors="surrogatepass").encode("ascii")


_URI_SAFE: Final = "".join(chr(c) for c in range(0x21, 0x7F))


def _check_field(value: str, what: str) -> None:
    if "\r" in value or "\n" in value:
        raise ValueError(f"{what} must not contain a line break: {value!r}")


# -- HTTP heads -----------------------------------------------------------------------

# Content-Types whose bodies deflate cannot shrink: stored, not compressed again.
_COMPRESSED_TYPES: Final = (
    b"image/jpeg",
    b"image/png",
    b"image/gif",
    b"image/webp",
    b"image/avif",
    b"video/",
    b"audio/",
    b"font/woff",
    b"application/zip",
    b"application/gzip",
    b"application/x-gzip",
    b"application/zstd",
    b"application/x-xz",
    b"application/x-bzip2",
    b"application/x-7z-compressed",
    b"application/x-rar",
)


def _field(head: bytes, lower: bytes, marker: bytes) -> bytes | None:
    """The value of the last header whose lower-cased ``\\nname:`` is ``marker``."""
    at = lower.rfind(marker)
    if at < 0:
        return None
    at += len(marker)
    end = head.find(b"\r\n", at)
    return lower[at : end if end >= 0 else len(head)].strip()


def _unchunked(head: bytes, body_length: int) -> bytes:
    """``head`` (no blank line) with its framing renamed to fit the body as
    stored (dechunked, any other transfer coding undone)."""
    lines = head.split(b"\r\n")
    kept = [lines[0]]
    for line in lines[1:]:
        name = line[:18].lower()
        if name.startswith(b"transfer-encoding:") or name.startswith(b"content-length:"):
            line = b"X-Crawler-" + line
        kept.append(line)
    kept.append(b"Content-Length: %d" % body_length)
    return b"\r\n".join(kept)


def _compressed_already(head: bytes, lower: bytes) -> bool:
    """Whether the head announces a body that deflate cannot shrink."""
    if lower.find(b"\ncontent-encoding:") >= 0:
        coding = _field(head, lower, b"\ncontent-encoding:")
        if coding not in (None, b"", b"identity"):
            return True
    if lower.find(b"\ncontent-type:") >= 0:
        ctype = _field(head, lower, b"\ncontent-type:") or b""
        return ctype.startswith(_COMPRESSED_TYPES)
    return False


def _prepare_head(head: bytes, body_length: int) -> tuple[bytes, bool]:
    """The head as stored (ending in the blank line), and whether the body is
    compressed already (stored rather than deflated again)."""
    head = head[:-4] if head.endswith(_RECORD_END) else head.rstrip(b"\r\n")
    lower = head.lower()
    stored = body_length > 0 and _compressed_already(head, lower)
    if lower.find(b"\ntransfer-encoding:") >= 0:
        # the body stored has every transfer coding undone (chunked, gzip...)
        head = _unchunked(head, body_length)
    return head + _RECORD_END, stored


# -- file names -----------------------------------------------------------------------


def rotated_path(path: str | os.PathLike[str], index: int) -> Path:
    """The ``index``-th file of a rotated series: 0 is ``path`` itself, then
    ``out.warc.gz`` -> ``out-00001.warc.gz``, ``out-00002.warc.gz``, ... (a name
    without ``.warc.gz`` takes the number before its last suffix)."""
    path = Path(path)
    if index == 0:
        return path
    stem, suffix = _stem_and_suffix(path.name)
    return path.with_name(f"{stem}-{index:05d}{suffix}")


def _stem_and_suffix(name: str) -> tuple[str, str]:
    if name.lower().endswith(".warc.gz"):
        return name[:-8], name[-8:]
    return os.path.splitext(name)


def rotation_index(path: str | os.PathLike[str], other: str | os.PathLike[str]) -> int | None:
    """Which file of ``path``'s rotated series ``other`` is (1, 2, ...; the
    series' own directory, a symlink to it, any number of digits past five),
    or None if it is none of them (0, ``path`` itself, is not counted)."""
    base, candidate = Path(os.path.realpath(path)), Path(os.path.realpath(other))
    if base.parent != candidate.parent:
        return None
    head, tail = _stem_and_suffix(base.name)
    name = candidate.name
    if not (name.startswith(head + "-") and name.endswith(tail)):
        return None
    digits = name[len(head) + 1 : len(name) - len(tail)]
    if len(digits) < 5 or not digits.isascii() or not digits.isdigit():
        return None
    index = int(digits)
    return index if index >= 1 and rotated_path(base, index).name == name else None


def rotated_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The files of the series that exist, in order (stopping at the first gap)."""
    found = []
    index = 0
    while (candidate := rotated_path(path, index)).exists():
        found.append(candidate)
        index += 1
    return found


# -- the writer -----------------------------------------------------------------------


class WarcWriter:
    """Writes HTTP exchanges as WARC/1.1 records to ``path``; a context manager.

    ``info``: the warcinfo fields besides ``software`` and ``format`` (for
    ``surge fetch``, the command line and options).  ``max_size``: rotate to a
    new file (see :func:`rotated_path`) before a file would grow past this many
    bytes.  ``append``: continue an existing file after cutting a torn tail
    (:func:`recover`) instead of replacing it; the continuation starts with a
    warcinfo of its own.  ``level``: the zlib level (0 stores everything).
    ``deflate``: "isal" (python-isal, the default when installed) or "zlib".
    ``buffer_size``: bytes of whole exchanges held before one write (0: write
    each exchange at once).  Without ``append`` the files written are replaced;
    later files of an earlier, longer series are left as they are.

    Thread-safe; it keeps no body after :meth:`write_exchange` returns.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        info: Mapping[str, str] | None = None,
        max_size: int | None = None,
        append: bool = False,
        level: int = 1,
        buffer_size: int = BUFFER_SIZE,
        deflate: str | None = None,
    ) -> None:
        if max_size is not None and max_size <= 0:
            raise ValueError(f"max_size must be positive, not {max_size}")
        if not 0 <= level <= 9:
            raise ValueError(f"level must be 0-9, not {level}")
        if deflate is None:
            deflate = DEFLATE_ENGINES[0]
        elif deflate not in DEFLATE_ENGINES:
            raise ValueError(f"deflate must be one of {DEFLATE_ENGINES} here, not {deflate!r}")
        #: The deflate implementation in use: "isal" or "zlib".
        self.deflate = deflate
        self._engine: Any = zlib if deflate == "zlib" else _isal_zlib
        self._full_flush = self._engine.Z_FULL_FLUSH
        self._base = Path(path)
        self._info = self._info_fields(info or {})
        self.max_size = max_size
        self.level = level
        self.buffer_size = buffer_size
        #: Every file this writer has written to, in order.
        self.paths: list[Path] = []
        self._lock = threading.Lock()
        self._deflater = self._new_deflater()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._last_flush = time.monotonic()
        self._closed = False
        self._date_second = -1
        self._date_prefix = b""
        self._sink: Sink | None = None
        self._size = 0  # the current file's size, buffered bytes included
        self._exchanges = False  # whether the current file holds an exchange
        self._warcinfo_id = b""  # the ID of this writer's warcinfo in the current file
        self._warcinfo_written = False  # (an appended file gets it with its first exchange)
        #: The failure of a write: every later flush raises it again, so that
        #: no record is written for an exchange the failed write lost.
        self._failed: SinkError | None = None
        if append and (existing := rotated_paths(self._base)):
            self._index = len(existing) - 1
            current = existing[-1]
            self._open(current, append=True)  # locked before anything is cut
            try:
                if self._file_sink.regular and self._file_sink.position > 0:
                    recover(current)
                    self._size = self._file_sink.seek_end()
                    self._exchanges = self._size > 0
                    if self._size == 0:  # it held a torn exchange only
                        self._add(self._warcinfo())
            except BaseException:
                self._file_sink.close()
                raise
        else:
            self._index = 0
            self._open(self._base, append=False)

    # -- public --------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The file being written."""
        return self.paths[-1]

    def write_exchange(
        self,
        url: str,
        ip: str | None,
        request_head: bytes,
        request_body: Body,
        response_head: bytes,
        response_body: Body,
        date: datetime | float | None = None,
        line: int | None = None,
    ) -> int:
        """Write one exchange as a ``request`` and a ``response`` record.

        ``url``: the URL requested (the IDNA host form: non-ASCII and spaces are
        percent-encoded).  ``ip``: the server's address, or None if unknown.  The
        heads are as sent and received, with or without their closing blank line;
        the bodies are entity bodies (dechunked, not content-decoded).  ``date``:
        when the request was sent (a datetime, naive meaning UTC, or POSIX
        seconds); now if None.  ``line``: the input line the exchange is of
        (``surge fetch``), written as ``Surge-Input-Line`` - what ``--resume``
        matches the records with (:func:`exchange_lines`).  Returns the bytes
        this call added to the WARC files (compressed), a warcinfo it had to
        start included.
        """
        target = _target_uri(url)
        if ip is None:
            ip_line = b""
        else:
            _check_field(ip, "ip")
            ip_line = b"WARC-IP-Address: %s\r\n" % ip.encode("ascii")
        with self._lock:
            if self._closed:
                raise ValueError("write to a closed WarcWriter")
            warc_date = self._warc_date(date)
            exchange = (
                target,
                ip_line,
                warc_date,
                request_head,
                request_body,
                response_head,
                response_body,
                b"" if line is None else b"Surge-Input-Line: %d\r\n" % line,
            )
            records = self._exchange(*exchange)
            written = 0
            warcinfo = b"" if self._warcinfo_written else self._warcinfo()
            if (
                self.max_size is not None
                and self._exchanges
                and self._size + len(warcinfo) + len(records) > self.max_size
            ):
                written += self._rotate()
                warcinfo = b""
                # again, naming the new file's warcinfo (once per file)
                records = self._exchange(*exchange)
            if warcinfo:
                written += self._add(warcinfo)
            written += self._add(records)
            self._exchanges = True
            if (
                self._pending_bytes >= self.buffer_size
                or time.monotonic() - self._last_flush >= FLUSH_INTERVAL
            ):
                self._flush()
            return written

    def cut_unrecorded(self, done: Container[int]) -> int:
        """Resumed (``append``): cut the exchanges whose input line is not in
        ``done`` (the lines the records hold), from the end of the series back
        to the last file that keeps one - the exchanges of records that never
        reached the records file (a write of it failed, the run was killed),
        which the resumed run makes again; the exchanges after one of those
        move down over it (:func:`_kept_members`).  Call it before any
        exchange is written; returns the bytes cut."""
        with self._lock:
            cut = 0
            for index in range(self._index, -1, -1):
                current = index == self._index
                path = rotated_path(self._base, index)
                try:
                    with open(path, "r+b") as file:
                        size = file.seek(0, os.SEEK_END)
                        keep, later, exchanges = _kept_members(file, done)
                        if later:
                            keep = _compact(file.fileno(), keep, later)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise UsageError(f"{path}: cannot rewrite: {reason(exc)}") from None
                if keep < size:
                    cut += size - keep
                    if current:
                        self._file_sink.truncate(keep)  # through the locked descriptor
                    else:
                        os.truncate(path, keep)
                if current:
                    self._exchanges = exchanges
                if exchanges:
                    break  # the last exchange a record holds: kept, and all before it
            sink = self._file_sink
            if cut and sink.regular:
                self._size = sink.position + self._pending_bytes
                if sink.position == 0 and not self._pending:
                    self._add(self._warcinfo())  # a file emptied starts again
            return cut

    def flush(self) -> None:
        """Write the buffered exchanges now (call it when the producer goes idle)."""
        with self._lock:
            if not self._closed:
                self._flush()

    def close(self) -> None:
        """Write what is buffered and close the file; closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._failed is None:  # (else raised already: nothing more is written)
                    self._flush()
            finally:
                if self._sink is not None:
                    sink, self._sink = self._sink, None
                    sink.close()

    def __enter__(self) -> WarcWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- records -------------------------------------------------------------------------

    def _exchange(
        self,
        target: bytes,
        ip_line: bytes,
        warc_date: bytes,
        request_head: bytes,
        request_body: Body,
        response_head: bytes,
        response_body: Body,
        line_field: bytes,
    ) -> bytes:
        request_parts = _pieces(request_body)
        response_parts = _pieces(response_body)
        request_length = _length(request_parts)
        response_length = _length(response_parts)
        request_head, request_stored = _prepare_head(request_head, request_length)
        response_head, response_stored = _prepare_head(response_head, response_length)

        digests = _base32_80(
            _block_and_payload_digests(request_head, request_parts)
            + _block_and_payload_digests(response_head, response_parts)
        )
        request_id = _record_id()
        response_id = _record_id()
        request_record = (
            _HTTP_RECORD
            % (
                b"request",
                request_id,
                warc_date,
                target,
                ip_line,
                self._warcinfo_id,
                response_id,
                line_field,
                b"request",
                digests[0:32],
                digests[32:64],
                len(request_head) + request_length,
            )
            + request_head
        )
        response_record = (
            _HTTP_RECORD
            % (
                b"response",
                response_id,
                warc_date,
                target,
                ip_line,
                self._warcinfo_id,
                request_id,
                line_field,
                b"response",
                digests[64:96],
                digests[96:128],
                len(response_head) + response_length,
            )
            + response_head
        )
        out: list[_Bytes] = []
        try:
            self._member(
                out,
                request_record,
                request_parts,
                request_length,
                not request_stored and len(request_record) + request_length >= _DEFLATE_MIN,
            )
            self._member(
                out,
                response_record,
                response_parts,
                response_length,
                not response_stored and len(response_record) + response_length >= _DEFLATE_MIN,
            )
        except BaseException:
            # the deflater may hold half a member: start a fresh stream
            self._deflater = self._new_deflater()
            raise
        # joined: the writer keeps no reference to a body once this returns
        return b"".join(out)

    def _member(
        self,
        out: list[_Bytes],
        head: bytes,
        body: Sequence[_Bytes],
        length: int,
        deflate: bool,
    ) -> None:
        """Append one record's gzip member: ``head`` (WARC and HTTP headers),
        ``body`` (``length`` bytes), the closing CRLF CRLF; deflated, or in
        stored blocks."""
        size = len(head) + length + 4
        deflater = self._deflater
        if deflate and deflater is not None:
            crc = _crc32(head)
            for part in body:
                crc = _crc32(part, crc)
            out.append(_GZIP_HEADER)
            out.append(deflater.compress(head))
            for part in body:
                out.append(deflater.compress(part))
            out.append(deflater.flush(self._full_flush))
            out.append(_FINAL_BLOCK)
            out.append(_pack_trailer(_crc32(_RECORD_END, crc), size & 0xFFFFFFFF))
        elif not body and size <= _STORED_MAX:
            # a request, a redirect, an empty response: one final stored block
            data = head + _RECORD_END
            out.append(
                b"%s%s%s%s"
                % (
                    _GZIP_HEADER,
                    _pack_stored(1, size, size ^ 0xFFFF),
                    data,
                    _pack_trailer(_crc32(data), size),
                )
            )
        else:
            crc = _crc32(head)
            for part in body:
                crc = _crc32(part, crc)
            out.append(_GZIP_HEADER)
            _stored_blocks(head, out)
            for part in body:
                _stored_blocks(part, out)
            out.append(_FINAL_BLOCK)
            out.append(_pack_trailer(_crc32(_RECORD_END, crc), size & 0xFFFFFFFF))

    def _warcinfo(self) -> bytes:
        """The current file's warcinfo record (a gzip member)."""
        self._warcinfo_written = True
        fields = self._info
        header = (
            b"WARC/1.1\r\n"
            b"WARC-Type: warcinfo\r\n"
            b"WARC-Record-ID: %s\r\n"
            b"WARC-Date: %s\r\n"
            b"WARC-Filename: %s\r\n"
            b"Content-Type: application/warc-fields\r\n"
            b"WARC-Block-Digest: sha1:%s\r\n"
            b"Content-Length: %d\r\n\r\n"
        ) % (
            self._warcinfo_id,
            self._warc_date(None),
            " ".join(self.path.name.splitlines()).encode("utf-8", "surrogateescape"),
            _base32(_sha1(fields).digest()),
            len(fields),
        )
        out: list[_Bytes] = []
        self._member(out, header + fields, (), 0, deflate=True)
        return b"".join(out)

    @staticmethod
    def _info_fields(info: Mapping[str, str]) -> bytes:
        """The warcinfo block (application/warc-fields): surge's fields, then ``info``'s."""
        fields = {
            "software": f"surge/{__version__}",
            "format": "WARC File Format 1.1",
            "conformsTo": _WARC_FIELDS_SPEC,
        }
        for name, value in info.items():
            if not name or any(c in name for c in ":\r\n\t ") or not name.isprintable():
                raise ValueError(f"not a warcinfo field name: {name!r}")
            # a field is one line: line breaks in a value (a multi-line option) become spaces
            fields[name] = " ".join(str(value).splitlines())
        return "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode()

    def _warc_date(self, date: datetime | float | None) -> bytes:
        if isinstance(date, datetime):
            if date.tzinfo is not None:
                date = date.astimezone(UTC)
            return b"%s.%06dZ" % (date.strftime("%Y-%m-%dT%H:%M:%S").encode(), date.microsecond)
        now = time.time() if date is None else float(date)
        second = int(now // 1)
        if second != self._date_second:
            self._date_second = second
            self._date_prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)).encode()
        return b"%s.%06dZ" % (self._date_prefix, int((now - second) * 1e6))

    def _new_deflater(self) -> Any:
        if self.level == 0:
            return None
        engine = self._engine
        # ISA-L has levels 0-3 (its 0 still compresses): zlib's 1-3, 4-6 and
        # 7-9 map to its 1, 2 and 3
        level = self.level if engine is zlib else (self.level + 2) // 3
        return engine.compressobj(level, engine.DEFLATED, -engine.MAX_WBITS)

    # -- files ---------------------------------------------------------------------------

    @property
    def _file_sink(self) -> Sink:
        assert self._sink is not None
        return self._sink

    def _open(self, path: Path, *, append: bool) -> None:
        # A sink (surge.sinks): locked for the run, each flush one whole write or
        # an error naming the file, cut back to the last whole exchange if it fails.
        self._sink = open_output(path, append=append)
        self.paths.append(path)
        self._size = self._sink.position
        self._exchanges = self._size > 0
        self._warcinfo_id = _record_id()
        self._warcinfo_written = False
        if self._size == 0:
            # a new file starts with its warcinfo even if no exchange follows; an
            # appended one gets it with its first exchange (which may rotate first)
            self._add(self._warcinfo())

    def _rotate(self) -> int:
        self._flush()
        sink, self._sink = self._file_sink, None
        sink.close()
        self._index += 1
        self._open(rotated_path(self._base, self._index), append=False)
        return self._size

    def _add(self, data: bytes) -> int:
        self._pending.append(data)
        self._pending_bytes += len(data)
        self._size += len(data)
        return len(data)

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if self._failed is not None:
            raise SinkError(str(self._failed), errno=self._failed.errno)
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        on_disk = self._size - self._pending_bytes
        self._pending.clear()
        self._pending_bytes = 0
        try:
            # whole, or a SinkError with the file cut back to its last exchange
            self._file_sink.write(data)
        except SinkError as e:
            self._size = on_disk
            self._failed = e
            raise
        except BaseException:
            self._size = on_disk
            self._failed = SinkError(f"{self._file_sink.name}: a write was interrupted")
            raise


_HTTP_RECORD: Final = (
    b"WARC/1.1\r\n"
    b"WARC-Type: %s\r\n"
    b"WARC-Record-ID: %s\r\n"
    b"WARC-Date: %s\r\n"
    b"WARC-Target-URI: %s\r\n"
    b"%s"  # WARC-IP-Address, if known
    b"WARC-Warcinfo-ID: %s\r\n"
    b"WARC-Concurrent-To: %s\r\n"
    b"%s"  # Surge-Input-Line, if the exchange is an input's
    b"Content-Type: application/http;msgtype=%s\r\n"
    b"WARC-Block-Digest: sha1:%s\r\n"
    b"WARC-Payload-Digest: sha1:%s\r\n"
    b"Content-Length: %d\r\n\r\n"
)


def _block_and_payload_digests(head: bytes, body: Sequence[_Bytes]) -> bytes:
    """The SHA-1 of head + body, then of the body: two passes over the body, as
    the block digest starts with the head and SHA-1's state cannot be shared."""
    if not body:  # a request without a body: the payload digest is a constant
        return _sha1(head).digest() + _EMPTY_SHA1
    block = _sha1(head)
    if len(body) == 1:
        block.update(body[0])
        return block.digest() + _sha1(body[0]).digest()
    payload = _sha1()
    for part in body:
        block.update(part)
        payload.update(part)
    return block.digest() + payload.digest()


def _pieces(body: Body) -> Sequence[_Bytes]:
    """The body's non-empty pieces."""
    if isinstance(body, bytes | bytearray | memoryview):
        return (body,) if body else ()
    if len(body) == 1:
        return body if body[0] else ()
    return [part for part in body if part]


def _length(parts: Sequence[_Bytes]) -> int:
    if not parts:
        return 0
    if len(parts) == 1:
        return len(parts[0])
    return sum(map(len, parts))


# -- recovery -------------------------------------------------------------------------

_READ: Final = 1 << 16
_HEAD_MAX: Final = 1 << 16  # WARC headers longer than this are not surge's


class _Member:
    """One gzip member of a WARC file, as :func:`_members` read it."""

    __slots__ = ("end", "head", "start", "state")

    def __init__(self, state: str, start: int, end: int, head: bytes) -> None:
        self.state = state  # "ok", "torn" (the file ends inside it) or "bad"
        self.start = start
        self.end = end
        self.head = head  # its WARC header block ("ok" only)

    def field(self, name: bytes) -> bytes | None:
        """A WARC header's value (the first of that name)."""
        marker = b"\r\n" + name.lower() + b":"
        at = self.head.lower().find(marker)
        if at < 0:
            return None
        at += len(marker)
        return self.head[at : self.head.find(b"\r\n", at)].strip()


def _members(file: IO[bytes], start: int) -> Iterator[_Member]:
    """The gzip members from offset ``start``: each complete WARC record as "ok",
    then, if the file does not end cleanly, one "torn" or "bad" member."""
    file.seek(start)
    pending = b""
    offset = start
    while True:
        if not pending:
            pending = file.read(_READ)
            if not pending:
                return
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        head = b""
        head_done = False
        tail = b""
        produced = 0
        consumed = 0
        data = pending
        try:
            while True:
                out = inflater.decompress(data, _READ)
                produced += len(out)
                if not head_done and out:
                    head += out
                    cut = head.find(b"\r\n\r\n")
                    if cut >= 0:
                        head_done = True
                        head = head[: cut + 4]
                    if not head.startswith(b"WARC/"[: len(head)]) or len(head) > _HEAD_MAX:
                        raise zlib.error("not a WARC record")
                tail = out[-4:] if len(out) >= 4 else (tail + out)[-4:]
                if inflater.eof:
                    consumed += len(data) - len(inflater.unused_data)
                    pending = inflater.unused_data
                    break
                consumed += len(data) - len(inflater.unconsumed_tail)
                data = inflater.unconsumed_tail
                if not data:
                    data = file.read(_READ)
                    if not data and not out:
                        yield _Member("torn", offset, offset + consumed, b"")
                        return
        except zlib.error:
            yield _Member("bad", offset, offset, b"")
            return
        member = _Member("ok", offset, offset + consumed, head)
        length = member.field(b"Content-Length")
        if (
            not head_done
            or tail != _RECORD_END
            or length is None
            or not length.isdigit()
            or produced != len(head) + int(length) + 4
        ):
            yield _Member("bad", offset, offset, b"")
            return
        yield member
        offset += consumed


def _complete_member_after(file: IO[bytes], start: int) -> int | None:
    """The offset of the first complete WARC record member after ``start``, if any."""
    position = start + 1
    carry = b""
    file.seek(position)
    while True:
        block = file.read(_READ)
        if not block:
            return None
        data = carry + block
        base = position - len(carry)
        at = data.find(_GZIP_HEADER[:3])
        while at >= 0:
            candidate = base + at
            member = next(_members(file, candidate), None)
            if member is not None and member.state == "ok":
                return candidate
            at = data.find(_GZIP_HEADER[:3], at + 1)
        position += len(block)
        carry = data[-2:]
        file.seek(position)


def recover(path: str | os.PathLike[str]) -> int:
    """Cut a torn tail from the WARC file at ``path`` so that it ends after its
    last complete exchange; return the number of bytes cut (0 if none).

    Raises UsageError for a file that is not a per-record gzipped WARC, or whose
    damage is followed by complete records (nothing is cut then).
    """
    with open(path, "r+b") as file:
        size = file.seek(0, os.SEEK_END)
        keep = 0
        previous: _Member | None = None
        last: _Member | None = None
        broken: _Member | None = None
        for member in _members(file, 0):
            if member.state != "ok":
                broken = member
                break
            previous, last = last, member
            keep = member.end
        if broken is not None and broken.state == "bad":
            if broken.start == 0:
                raise UsageError(f"{path}: not a gzipped WARC file; not appending to it")
            found = _complete_member_after(file, broken.start)
            if found is not None:
                raise UsageError(
                    f"{path}: damaged at byte {broken.start:,} but complete records follow "
                    f"at byte {found:,}; not appending (repair it, e.g. warcio recompress)"
                )
        if last is not None and _unpaired(last, previous):
            keep = last.start
        if keep < size:
            file.truncate(keep)
        return size - keep


def _line_of(member: _Member) -> int | None:
    """The input line an exchange's record names (``Surge-Input-Line``), if any."""
    value = member.field(b"Surge-Input-Line")
    return int(value) if value is not None and value.isdigit() else None


def exchange_lines(path: str | os.PathLike[str]) -> LineSet | None:
    """The input lines whose responses the WARC series at ``path`` holds (its
    rotated parts included), read up to a torn tail: what ``--resume`` checks
    the records against.  None when there is nothing to check against: no
    such file, or responses that name no line (a WARC of an earlier surge)."""
    lines = LineSet()
    unnamed = False
    paths = rotated_paths(path)
    if not paths:
        return None
    for part in paths:
        try:
            file = open(part, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"{part}: cannot read: {reason(exc)}") from None
        with file:
            for member in _members(file, 0):
                if member.state != "ok":
                    break
                if member.field(b"WARC-Type") != b"response":
                    continue
                line = _line_of(member)
                if line is None:
                    unnamed = True
                elif line >= 1:
                    lines.add(line)
    return None if unnamed and not lines else lines


def _kept_members(file: IO[bytes], done: Container[int]) -> tuple[int, list[tuple[int, int]], bool]:
    """What of a WARC file stays once the exchanges of lines not in ``done``
    are cut (those whose records were lost): the offset where the first of
    them starts (or where the last complete member ends), the (start, end) of
    each member after it that stays, and whether an exchange stays.  Members
    that name no line (warcinfo, an earlier surge's exchanges) stay.  With
    several requests in flight an unrecorded exchange (a redirect's first hop,
    say) is followed by exchanges whose records did get out: cutting the file
    from it would lose theirs, keeping it would leave the line's hop twice
    once it is fetched again."""
    cut_at: int | None = None
    whole = 0
    later: list[tuple[int, int]] = []
    exchanges = False
    for member in _members(file, 0):
        if member.state != "ok":
            break
        line = _line_of(member)
        kept = line is None or line in done
        exchanges = exchanges or (kept and line is not None)
        if cut_at is None:
            if kept:
                whole = member.end
            else:
                cut_at = member.start
        elif kept:
            later.append((member.start, member.end))
    return (whole if cut_at is None else cut_at), later, exchanges


def _compact(fd: int, at: int, ranges: list[tuple[int, int]]) -> int:
    """Move the byte ranges ``ranges`` (ascending, all past ``at``) down to
    ``at``, one after another; returns where the last ends.  Each write lands
    at or before what is still to be read, so a copy in place is safe; a run
    killed meanwhile leaves a file whose members stop parsing there, which the
    next resumption cuts and fetches again."""
    for start, end in ranges:
        while start < end:
            chunk = os.pread(fd, min(_READ, end - start), start)
            if not chunk:
                break
            os.pwrite(fd, chunk, at)
            at += len(chunk)
            start += len(chunk)
    return at


def _unpaired(last: _Member, previous: _Member | None) -> bool:
    """Whether ``last`` is the first half of an exchange whose second half is missing."""
    if last.field(b"WARC-Type") not in (b"request", b"response"):
        return False
    partner = last.field(b"WARC-Concurrent-To")
    if partner is None:
        return False
    return previous is None or previous.field(b"WARC-Record-ID") != partner
