"""Byte ranges for ``surge fetch``: the one place a Range header is built and
a Content-Range read (RFC 9110, sections 14.1.1 and 14.4), sans I/O.

``-r/--range SPEC`` is curl's option: SPEC is what follows ``bytes=`` -
``0-499`` (the first 500 bytes), ``500-`` (from byte 500 on), ``-500`` (the
last 500), or several joined by commas (``0-1,5-9``), sent as given, as curl
sends them; a server answers several with a ``multipart/byteranges`` body,
saved as it came, as curl saves it.  curl sends any text; here a SPEC that
is not that grammar - a piece without a dash, a last byte before its first,
``-0`` (no byte), an empty piece, anything but digits, dashes and commas -
is a usage error naming the piece.

``-C -/--continue-at -`` with ``--output-dir``: each body continues the
partial file already under its name, from that file's size N, with
``Range: bytes=N-`` (none when there is no file).  What the answer does to
the file (:func:`continuation`):

* 206 whose Content-Range starts at N: appended (``appended``);
* another 2xx: the server ignored the Range (or there was no partial file):
  the file is rewritten from byte 0 (``restarted``; ``new`` for no partial);
* 416 whose Content-Range is ``*/N`` (or absent): the file is already whole,
  nothing written (``complete``) - curl's ``-C -`` on a complete file does
  the same (exit 0, the file untouched);
* a 206 whose Content-Range does not start at N, is not one range, or whose
  body has a Content-Encoding (a part of a coded body is not a part of the
  file, which holds it decoded), or a 416 that says the body has another
  size or whose Content-Range cannot be read: a ``protocol_error`` record,
  the partial file untouched (curl: exit 33, "Cannot resume");
* any other status (a 404, a redirect not followed): not a body of the file,
  nothing written (None).

curl's ``-C -`` refuses a server that ignores Range (exit 33) unless the
whole body is the size of the file; this restarts instead, as wget's ``-c``
does (1.21: the file rewritten, exit 0), and the record says so.

A ranged request (-r or -C) asks for ``Accept-Encoding: identity`` unless the
run's headers name one, as wget does: a range's offsets are of the body as
stored, and the file holds it decoded.  (curl sends no Accept-Encoding
without ``--compressed``; surge otherwise asks for the codings it decodes.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from surge.errors import RequestError, UsageError

#: The largest byte position either end takes (curl's curl_off_t): larger is a typo.
MAX_POSITION = 2**63 - 1

_DIGITS = re.compile(r"[0-9]+")


def range_header(spec: str) -> str:
    """The Range header's value for ``-r SPEC`` (``bytes=SPEC``), or a
    :class:`~surge.errors.UsageError` naming what is wrong with SPEC."""
    if not isinstance(spec, str):
        raise UsageError(f"range must be a string such as '0-499', not {spec!r}")
    if not spec:
        raise UsageError("--range is empty: give one such as 0-499, 500-, -500 or 0-1,5-9")
    for piece in spec.split(","):
        problem = _piece_problem(piece)
        if problem is not None:
            raise UsageError(f"--range {spec!r}: {problem}")
    return f"bytes={spec}"


def _piece_problem(piece: str) -> str | None:
    """What is wrong with one range of -r (None: nothing)."""
    if not piece:
        return "an empty range between commas"
    first, dash, last = piece.partition("-")
    if not dash:
        hint = f" ({piece}- for byte {piece} on)" if _DIGITS.fullmatch(piece) else ""
        return f"{piece!r} has no dash{hint}: a range is FIRST-LAST, FIRST- or -SUFFIX"
    for end in (first, last):
        if end and not _DIGITS.fullmatch(end):
            return f"{piece!r}: {end!r} is not a byte position (digits only)"
        if end and int(end) > MAX_POSITION:
            return f"{piece!r}: {end} is past the largest byte position"
    if not first and not last:
        return "'-' names no byte: a range is FIRST-LAST, FIRST- or -SUFFIX"
    if not first and int(last) == 0:
        return f"{piece!r}: the last 0 bytes are no byte"
    if first and last and int(last) < int(first):
        return f"{piece!r}: the last byte comes before the first"
    return None


def check_range_options(
    byte_range: str | None,
    continue_at: str | None,
    output_dir: str | None,
    headers: Mapping[str, str] | Sequence[tuple[str, str]],
) -> None:
    """``byte_range`` (-r) and ``continue_at`` (-C) checked together: a
    UsageError (exit 2) naming what does not fit."""
    if byte_range is not None:
        range_header(byte_range)
    if continue_at is not None:
        if continue_at != "-":
            if isinstance(continue_at, int) or str(continue_at).isdigit():
                raise UsageError(
                    f"--continue-at {continue_at}: only '-' (each partial file's own size) is "
                    f"taken; for the bytes from {continue_at} on, use -r {continue_at}-"
                )
            raise UsageError(f"--continue-at must be '-', not {continue_at!r}")
        if output_dir is None:
            raise UsageError("-C - (--continue-at) needs --output-dir, where the partial files are")
        if byte_range is not None:
            raise UsageError("-r/--range and -C/--continue-at cannot be combined")
    names = headers.keys() if isinstance(headers, Mapping) else (name for name, _ in headers)
    if any(isinstance(name, str) and name.lower() == "range" for name in names):
        flag = "-r/--range" if byte_range is not None else "-C/--continue-at"
        raise UsageError(f"{flag} and -H 'Range: ...' both name a range: give one")


def range_headers(
    byte_range: str | None, given: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """What -r or -C adds to the run's headers (``given``): -r's Range, and
    ``Accept-Encoding: identity`` unless ``given`` names an Accept-Encoding
    (see the module's docstring)."""
    added = []
    if byte_range is not None:
        added.append(("Range", range_header(byte_range)))
    if not any(name.lower() == "accept-encoding" for name, _ in given):
        added.append(("Accept-Encoding", "identity"))
    return added


def continue_header(offset: int) -> tuple[str, str] | None:
    """The Range header that continues a partial body of ``offset`` bytes
    (None: nothing yet, the whole body is asked for)."""
    return ("Range", f"bytes={offset}-") if offset > 0 else None


@dataclass(frozen=True)
class ContentRange:
    """A Content-Range value: ``bytes FIRST-LAST/LENGTH`` (``LENGTH`` None for
    ``*``), or the unsatisfied ``bytes */LENGTH`` (``first`` and ``last`` None)."""

    first: int | None
    last: int | None
    length: int | None


_CONTENT_RANGE = re.compile(
    r"bytes[ \t]+(?:(?P<first>[0-9]+)-(?P<last>[0-9]+)|\*)/(?P<length>[0-9]+|\*)",
    re.IGNORECASE,
)


def parse_content_range(value: str | None) -> ContentRange | None:
    """``value`` (a Content-Range header) read, or None when it is absent or
    not RFC 9110's grammar (a range whose last byte comes before its first,
    or past the length it states, is not)."""
    if value is None:
        return None
    found = _CONTENT_RANGE.fullmatch(value.strip())
    if found is None:
        return None
    length = None if found["length"] == "*" else int(found["length"])
    if found["first"] is None:
        return None if length is None else ContentRange(None, None, length)
    first, last = int(found["first"]), int(found["last"])
    if last < first or (length is not None and last >= length):
        return None
    return ContentRange(first, last, length)


#: The values of a record's ``continued`` (``-C -``): what the response did to the file.
CONTINUED = ("new", "appended", "restarted", "complete")


def continuation(
    offset: int, status: int, content_range: str | None, content_encoding: str | None
) -> str | None:
    """What ``-C -`` does with the answer to a request that continued a
    partial file of ``offset`` bytes (``Range: bytes=OFFSET-``, none for 0):
    one of :data:`CONTINUED`, or None (a status whose body is not the file's:
    nothing written).  A 206 or 416 that does not fit the file raises
    ``RequestError("protocol_error")``, its status kept: the file is left as
    it was.  See the module's docstring for the rules."""
    if status == 206:
        told = parse_content_range(content_range)
        if told is None or told.first is None:
            raise RequestError(
                "protocol_error",
                f"asked for bytes {offset}- to continue the partial file, the 206 has "
                f"Content-Range {content_range!r}, not one range",
                status=status,
            )
        if told.first != offset:
            raise RequestError(
                "protocol_error",
                f"asked for bytes {offset}- to continue the partial file, the 206 sent "
                f"bytes {told.first}-{told.last}: the partial file is kept as it was",
                status=status,
            )
        coding = (content_encoding or "").strip().lower()
        if coding not in ("", "identity"):
            raise RequestError(
                "protocol_error",
                f"the 206 continuing the partial file is {coding}-coded, the file holds the "
                "body decoded: the partial file is kept as it was",
                status=status,
            )
        return "appended" if offset > 0 else "new"
    if status == 416 and offset > 0:
        if content_range is None:
            return "complete"  # as curl: nothing says the file is not whole
        told = parse_content_range(content_range)
        if told is not None and told.length == offset:
            return "complete"
        said = "a Content-Range it cannot read" if told is None else f"body {told.length}"
        raise RequestError(
            "protocol_error",
            f"the partial file has {offset} bytes, the server's {said}: "
            "not a part of it (the partial file is kept as it was)",
            status=status,
        )
    if 200 <= status < 300:
        return "restarted" if offset > 0 else "new"
    return None
