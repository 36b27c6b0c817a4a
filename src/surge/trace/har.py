"""HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/), streamed to a file.

One entry per request, written as its record is made, so a million requests
need no list in memory.  ``timings`` are the standard fields, from the same
phases as the waterfall (:mod:`surge.trace.phases`): ``blocked`` (surge's
queues, earlier attempts and redirect hops), ``dns``, ``connect`` (which, as
the spec says, includes ``ssl``), ``ssl``, ``send``, ``wait``, ``receive``;
-1 for a phase that did not happen (a reused connection has no dns, connect or
ssl).  ``time`` is their sum (``ssl`` counted once, inside ``connect``) and equals
the request's duration.  A failed request has ``response.status`` 0 and, as
browsers' exports do, the error in ``_error`` (surge's error class) and
``_error_detail``.  Bodies and headers are not recorded: ``headersSize`` and
``bodySize`` are -1 (unknown) where surge does not count them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import IO, Any

from surge import __version__
from surge.http.timings import Timings
from surge.trace.phases import (
    CONNECT,
    DNS,
    EARLIER,
    QUEUED,
    RECEIVE,
    SEND,
    TLS,
    WAIT,
    durations,
    present,
    segments,
)


class HarWriter:
    """``add`` each request; ``close`` finishes the JSON document."""

    def __init__(self, path: str, *, method: str = "GET") -> None:
        self.path = path
        self.method = method
        self.clock0 = time.perf_counter()
        self.wall0 = time.time()
        self.entries = 0
        self._file: IO[str] | None = open(path, "w", encoding="utf-8")  # noqa: SIM115
        creator = {"name": "surge", "version": __version__}
        head = {"version": "1.2", "creator": creator, "pages": []}
        # The document up to the entries array, which the adds then fill.
        self._file.write(json.dumps({"log": head})[:-2] + ',"entries":[\n')
        self._clock = _Clock(self.wall0 - self.clock0)

    def add(
        self, record: Mapping[str, Any], start: float, end: float, timings: Timings | None
    ) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: the HAR file is closed")
        entry = entry_json(record, start, end, timings, method=self.method, clock=self._clock)
        self._file.write(",\n" + entry if self.entries else entry)
        self.entries += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.write("\n]}}\n")
            self._file.close()
            self._file = None

    def __enter__(self) -> HarWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Clock:
    """perf_counter seconds -> HAR's ISO 8601 ``startedDateTime``, the formatted
    second cached: a run's entries mostly share their second with the previous."""

    def __init__(self, offset: float) -> None:
        self.offset = offset  # Unix time minus perf_counter
        self._second = -1
        self._prefix = ""

    def iso(self, when: float) -> str:
        unix = self.offset + when
        second = int(unix)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return "%s.%03dZ" % (self._prefix, int((unix - second) * 1000))  # noqa: UP031


# One entry: a template filled with %, not json.dumps of a nested dict, which cost
# several times more per request (strings go through json.dumps, so are escaped).
_ENTRY = (
    '{"startedDateTime":"%s","time":%s,'
    '"request":{"method":"%s","url":%s,"httpVersion":"HTTP/1.1","cookies":[],"headers":[],'
    '"queryString":[],"headersSize":-1,"bodySize":0},'
    '"response":{"status":%d,"statusText":"","httpVersion":"%s","cookies":[],"headers":[],'
    '"content":{"size":%d,"mimeType":""},"redirectURL":%s,"headersSize":-1,"bodySize":%d},'
    '"cache":{},"timings":{"blocked":%s,"dns":%s,"connect":%s,"ssl":%s,"send":%s,"wait":%s,'
    '"receive":%s},"_line":%s,"_attempts":%s%s}'
)


def entry_json(
    record: Mapping[str, Any],
    start: float,
    end: float,
    timings: Timings | None,
    *,
    method: str,
    clock: _Clock,
) -> str:
    """The HAR entry of one request, as compact JSON."""
    url = str(record["url"])
    final = str(record.get("final_url") or url)
    tls = final.startswith("https:")
    parts = segments(start, end, timings, tls=tls)
    spent = [s * 1000.0 for s in durations(parts)]
    happened = present(timings, tls=tls)
    timed = [round(spent[i], 3) if happened[i] or spent[i] > 0 else -1 for i in range(len(spent))]
    blocked = round(spent[EARLIER] + spent[QUEUED], 3)
    ssl = timed[TLS]
    connect = timed[CONNECT]
    if connect != -1 and ssl != -1:
        connect = round(connect + ssl, 3)  # HAR: connect includes ssl
    har = (blocked, timed[DNS], connect, timed[SEND], timed[WAIT], timed[RECEIVE])
    total = round(sum(v for v in har if v != -1), 3)
    status = record.get("status")
    error = record.get("error")
    size = int(record.get("bytes") or 0)
    extra = ""
    if error is not None:
        extra = ',"_error":%s,"_error_detail":%s' % (  # noqa: UP031
            json.dumps(error),
            json.dumps(record.get("error_detail")),
        )
        if status is not None:
            extra += ',"_status":%d' % status  # noqa: UP031 - the status seen before it failed
    return _ENTRY % (
        clock.iso(start),
        total,
        method,
        json.dumps(url),
        int(status) if status is not None and error is None else 0,
        "HTTP/1.1" if status is not None else "",
        size,
        json.dumps(final if final != url else ""),
        size if status is not None else -1,
        blocked,
        timed[DNS],
        connect,
        ssl,
        timed[SEND],
        timed[WAIT],
        timed[RECEIVE],
        json.dumps(record.get("line")),
        json.dumps(record.get("attempts")),
        extra,
    )


def har_entry(
    record: Mapping[str, Any],
    start: float,
    end: float,
    timings: Timings | None,
    *,
    method: str,
    wall: float,
) -> dict[str, Any]:
    """The HAR entry of one request as a dict; ``wall`` turns the request clock
    (perf_counter) into Unix time."""
    entry: dict[str, Any] = json.loads(
        entry_json(record, start, end, timings, method=method, clock=_Clock(wall))
    )
    return entry
