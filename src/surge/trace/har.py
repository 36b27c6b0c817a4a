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
from datetime import UTC, datetime
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

    def add(
        self, record: Mapping[str, Any], start: float, end: float, timings: Timings | None
    ) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: the HAR file is closed")
        entry = har_entry(
            record, start, end, timings, method=self.method, wall=self.wall0 - self.clock0
        )
        if self.entries:
            self._file.write(",\n")
        self._file.write(json.dumps(entry, separators=(",", ":")))
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


def har_entry(
    record: Mapping[str, Any],
    start: float,
    end: float,
    timings: Timings | None,
    *,
    method: str,
    wall: float,
) -> dict[str, Any]:
    """The HAR entry of one request; ``wall`` turns the request clock into Unix time."""
    url = str(record["url"])
    final = str(record.get("final_url") or url)
    tls = final.startswith("https:")
    parts = segments(start, end, timings, tls=tls)
    spent = [s * 1000.0 for s in durations(parts)]
    happened = present(timings, tls=tls)

    def ms(index: int) -> float:
        return round(spent[index], 3) if happened[index] or spent[index] > 0 else -1

    blocked = round(spent[EARLIER] + spent[QUEUED], 3)
    ssl = ms(TLS)
    connect = ms(CONNECT)
    if connect != -1 and ssl != -1:
        connect = round(connect + ssl, 3)  # HAR: connect includes ssl
    har_timings = {
        "blocked": blocked,
        "dns": ms(DNS),
        "connect": connect,
        "ssl": ssl,
        "send": ms(SEND),
        "wait": ms(WAIT),
        "receive": ms(RECEIVE),
    }
    total = sum(v for k, v in har_timings.items() if k != "ssl" and v != -1)
    status = record.get("status")
    error = record.get("error")
    started = datetime.fromtimestamp(wall + start, UTC).isoformat(timespec="milliseconds")
    entry: dict[str, Any] = {
        "startedDateTime": started.replace("+00:00", "Z"),
        "time": round(total, 3),
        "request": {
            "method": method,
            "url": url,
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": [],
            "queryString": [],
            "headersSize": -1,
            "bodySize": 0,
        },
        "response": {
            "status": int(status) if status is not None and error is None else 0,
            "statusText": "",
            "httpVersion": "HTTP/1.1" if status is not None else "",
            "cookies": [],
            "headers": [],
            "content": {"size": int(record.get("bytes") or 0), "mimeType": ""},
            "redirectURL": final if final != url else "",
            "headersSize": -1,
            "bodySize": int(record.get("bytes") or 0) if status is not None else -1,
        },
        "cache": {},
        "timings": har_timings,
        "_line": record.get("line"),
        "_attempts": record.get("attempts"),
    }
    if error is not None:
        entry["_error"] = error
        entry["_error_detail"] = record.get("error_detail")
        if status is not None:
            entry["_status"] = status  # the status seen before the failure
    return entry
