"""HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/), streamed to a file.

One entry per request and hop (a followed redirect is an entry with its 3xx
status and ``redirectURL``, then the next hop's, as browsers export them),
written as its record is made, so a million requests need no list in memory;
entries are therefore in completion order, not sorted by ``startedDateTime``
(the spec prefers sorted, for faster imports, and does not require it).
``timings`` are the standard fields, from the same phases as the waterfall
(:mod:`surge.trace.phases`): ``blocked`` (surge's queues; for a first hop after
``--retries``, the earlier attempts and their back-off too), ``dns``,
``connect`` (which, as the spec says, includes ``ssl``), ``ssl``, ``send``,
``wait``, ``receive``.  ``blocked``, ``dns``, ``connect`` and ``ssl`` are -1 when
they did not happen (a reused connection has no dns, connect or ssl); ``send``,
``wait`` and ``receive`` must be non-negative, so a request that failed before
them has 0.  ``time`` is their sum (``ssl`` counted once, inside ``connect``)
and equals the hop's duration.  A failed request has ``response.status`` 0 and,
as browsers' exports do, the error in ``_error`` (surge's error class) and
``_error_detail``.  Bodies are not recorded: ``headersSize`` is -1 (unknown),
and so is ``bodySize`` where surge did not count it (earlier hops).

Sanitised as Chrome's "Export HAR (sanitized)" is, unless ``keep_secrets``
(``surge fetch --har-with-secrets``): no ``Cookie``, ``Set-Cookie``,
``Authorization`` or ``Proxy-Authorization`` header and no cookies, and the
values of the secret query parameters (:mod:`surge.trace.redact`) replaced,
in the URL and ``queryString`` alike.  A URL's userinfo is never written, and
neither is one inside an error's detail.  ``request.headers`` are the headers
the caller gave (``-H``, ``-A``), on each hop they were sent to (credentials
only to the input's origin, unless ``trusted``: ``--location-trusted``), not
those surge adds itself; ``response.headers`` are the response's when the
record has them (``-i``), on its last hop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from surge._version import __version__
from surge.errors import SinkError
from surge.http.headers import CREDENTIALS
from surge.http.timings import Timings
from surge.sinks import Sink, open_replacement
from surge.trace.phases import (
    CONNECT,
    DNS,
    EARLIER,
    QUEUED,
    RECEIVE,
    SEND,
    TLS,
    WAIT,
    Hop,
    durations,
    hops,
    present,
)
from surge.trace.redact import (
    cookie_pairs,
    query_pairs,
    safe_headers,
    safe_text,
    safe_url,
)

#: Entries are written in batches of about this many bytes.
BUFFER_SIZE = 256 * 1024


class HarWriter:
    """``add`` each request; ``close`` finishes the JSON document.

    The file is a replacement (:func:`surge.sinks.open_replacement`): written
    beside its name and renamed into place by ``close``, so a HAR is whole or
    absent, never cut.  A write that fails (a full disk) does not stop the run:
    the writer keeps the ``SinkError`` (naming the file) in :attr:`error`,
    writes nothing more, leaves any earlier file of that name as it was, and the
    caller reports it.  Opening raises ``SinkError``."""

    def __init__(
        self,
        path: str,
        *,
        method: str = "GET",
        headers: Iterable[tuple[str, str]] = (),
        keep_secrets: bool = False,
        trusted: bool = False,
        comment: str = "",
    ) -> None:
        self.path = path
        self.method = method
        self.policy = Sanitiser(headers, keep_secrets=keep_secrets, trusted=trusted)
        self.clock0 = time.perf_counter()
        self.wall0 = time.time()
        self.entries = 0
        self.error: SinkError | None = None
        self._sink: Sink | None = open_replacement(path)
        self._pending: list[str] = []
        self._pending_size = 0
        creator = {"name": "surge", "version": __version__}
        head: dict[str, Any] = {"version": "1.2", "creator": creator, "pages": []}
        if comment:
            head["comment"] = comment
        # The document up to the entries array, which the adds then fill.
        self._write(json.dumps({"log": head})[:-2] + ',"entries":[\n')
        self._clock = _Clock(self.wall0 - self.clock0)

    def _write(self, text: str) -> None:
        if self._sink is None or self.error is not None:
            return
        self._pending.append(text)
        self._pending_size += len(text)
        if self._pending_size >= BUFFER_SIZE:
            self._flush()

    def _flush(self) -> None:
        if self._sink is None or self.error is not None or not self._pending:
            return
        data = "".join(self._pending).encode("utf-8", "surrogateescape")
        self._pending.clear()
        self._pending_size = 0
        try:
            self._sink.write(data)
        except SinkError as e:
            self.error = e

    def add(
        self,
        record: Mapping[str, Any],
        start: float,
        end: float,
        timings: Timings | None,
        retried: bool = False,
    ) -> None:
        if self._sink is None:
            raise ValueError(f"{self.path}: the HAR file is closed")
        url = str(record.get("final_url") or record["url"])
        chain = hops(start, end, timings, url=url, retried=retried)
        for n, hop in enumerate(chain):
            following = chain[n + 1] if n + 1 < len(chain) else None
            entry = entry_json(
                record,
                hop,
                following,
                method=self.method,
                clock=self._clock,
                hop_index=n,
                policy=self.policy,
            )
            self._write(",\n" + entry if self.entries else entry)
            self.entries += 1

    def loop_lag(self, when: float, lag: float) -> None:
        """HAR has no place for it (the page shows it)."""

    def close(self) -> None:
        if self._sink is None:
            return
        self._write("\n]}}\n")
        self._flush()
        sink, self._sink = self._sink, None
        if self.error is not None:
            sink.discard()
            return
        try:
            sink.commit()
        except SinkError as e:
            self.error = e

    def discard(self) -> None:
        """Stop without writing the file (a run that could not start): any file
        of that name stays as it was.  After :meth:`close`: nothing."""
        if self._sink is not None:
            sink, self._sink = self._sink, None
            sink.discard()

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


def _pairs_json(pairs: Iterable[tuple[str, str]]) -> str:
    """HAR's ``[{"name": ..., "value": ...}]`` (headers, cookies, queryString)."""
    listed = [{"name": name, "value": value} for name, value in pairs]
    return json.dumps(listed, ensure_ascii=False) if listed else "[]"


class Sanitiser:
    """What a HAR's entries say about the request beyond its timings: the
    caller's headers and cookies as JSON (once: the same on every entry), the
    URL and query as written; all sanitised unless ``keep_secrets``."""

    def __init__(
        self,
        headers: Iterable[tuple[str, str]] = (),
        *,
        keep_secrets: bool = False,
        trusted: bool = False,
    ) -> None:
        self.keep_secrets = keep_secrets
        kept = safe_headers(headers, keep_secrets=keep_secrets)
        #: To the input's origin, and elsewhere (a redirect: no credentials, as sent).
        self.headers = _pairs_json(kept)
        self.cookies = _pairs_json(
            pair for name, value in kept if name.lower() == "cookie" for pair in cookie_pairs(value)
        )
        if trusted:
            self.headers_elsewhere, self.cookies_elsewhere = self.headers, self.cookies
        else:
            self.headers_elsewhere = _pairs_json(
                (n, v) for n, v in kept if n.lower() not in CREDENTIALS
            )
            self.cookies_elsewhere = "[]"

    def url(self, url: str) -> str:
        """The URL as written: never its userinfo; its secret query values
        redacted unless ``keep_secrets``."""
        return safe_url(url, query=not self.keep_secrets)

    def query(self, url: str) -> str:
        """``queryString`` of a URL as :meth:`url` wrote it."""
        return "[]" if "?" not in url else _pairs_json(query_pairs(url, keep_secrets=True))

    def response_headers(self, headers: Any) -> str:
        """As the request's: no ``Set-Cookie`` unless ``keep_secrets``, and a
        ``Location`` never with its userinfo (:func:`safe_headers`)."""
        if not headers:
            return "[]"
        return _pairs_json(safe_headers(headers, keep_secrets=self.keep_secrets))


_PLAIN = Sanitiser()


def _origin(url: str) -> tuple[str, str, int] | None:
    from surge.errors import RequestError
    from surge.http.url import parse_url

    try:
        return parse_url(url).key
    except RequestError:
        return None


# One entry: a template filled with %, not json.dumps of a nested dict, which cost
# several times more per request (strings go through json.dumps, so are escaped).
_ENTRY = (
    '{"startedDateTime":"%s","time":%.3f,'
    '"request":{"method":"%s","url":%s,"httpVersion":"%s","cookies":%s,"headers":%s,'
    '"queryString":%s,"headersSize":-1,"bodySize":0},'
    '"response":{"status":%d,"statusText":"","httpVersion":"%s","cookies":[],"headers":%s,'
    '"content":{"size":%d,"mimeType":""},"redirectURL":%s,"headersSize":-1,"bodySize":%d},'
    '"cache":{},"timings":{"blocked":%.3f,"dns":%.3f,"connect":%.3f,"ssl":%.3f,"send":%.3f,'
    '"wait":%.3f,"receive":%.3f}%s,"_line":%s,"_attempts":%s,"_hop":%d%s}'
)
# A quoted JSON string (C implementation), as the record writer does.
_json_str = json.encoder.encode_basestring


def _json_int(value: Any) -> str:
    return "null" if value is None else str(int(value))


def entry_json(
    record: Mapping[str, Any],
    hop: Hop,
    following: Hop | None,
    *,
    method: str,
    clock: _Clock,
    hop_index: int = 0,
    policy: Sanitiser = _PLAIN,
) -> str:
    """The HAR entry of one hop of a request, as compact JSON; ``following``:
    the hop its redirect led to (None for the last); ``policy``: what it says
    of the request, sanitised."""
    spent = [s * 1000.0 for s in durations(hop.parts)]
    happened = present(hop.timings, tls=hop.tls)
    # Numbers go out through "%.3f" (rounding and formatting in one step, where
    # round() alone costs ~0.7 us): -1 is written -1.000, the same JSON number.
    blocked = spent[EARLIER] + spent[QUEUED]
    dns = spent[DNS] if happened[DNS] or spent[DNS] > 0 else -1
    ssl = spent[TLS] if happened[TLS] or spent[TLS] > 0 else -1
    connect = spent[CONNECT] if happened[CONNECT] or spent[CONNECT] > 0 else -1
    if connect != -1 and ssl != -1:
        connect += ssl  # HAR: connect includes ssl
    # send, wait and receive "must have non-negative values": 0 when never reached
    send, wait, receive = spent[SEND], spent[WAIT], spent[RECEIVE]
    total = sum(v for v in (blocked, dns, connect, send, wait, receive) if v > 0)
    extra = ""
    response_headers = "[]"
    timings = hop.timings
    # HAR 1.2's httpVersion as the browsers write it ("HTTP/2.0"), and its
    # connection: the id of the connection the hop went on, so that a viewer's
    # waterfall shows which requests shared one (HTTP/2's streams, keep-alive).
    spoken = "HTTP/2.0" if timings is not None and timings.http2 else "HTTP/1.1"
    connection = (
        "" if timings is None or timings.connection is None
        else ',"connection":"%d"' % timings.connection  # noqa: UP031
    )  # fmt: skip
    if following is not None:  # a redirect this hop answered, then followed
        assert hop.timings is not None
        url = str(hop.timings.url)
        status, error, version = hop.timings.status, None, spoken
        redirect = str(following.timings.url if following.timings and following.timings.url
                       else record.get("final_url") or "")  # fmt: skip
        size, body_size = 0, -1
    else:
        url = str(record.get("final_url") or record["url"]) if hop_index else str(record["url"])
        status, error = record.get("status"), record.get("error")
        version = spoken if status is not None else ""
        redirect = ""
        size = int(record.get("bytes") or 0)
        body_size = size if status is not None else -1
        response_headers = policy.response_headers(record.get("headers"))
        if error is not None:
            detail = record.get("error_detail")
            extra = ',"_error":%s,"_error_detail":%s' % (  # noqa: UP031
                _json_str(error),
                "null" if detail is None else _json_str(safe_text(str(detail))),
            )
            if status is not None:
                extra += ',"_status":%d' % status  # noqa: UP031 - the status before it failed
    headers, cookies = policy.headers, policy.cookies
    if (  # a redirect to another origin: the credentials were not sent there
        hop_index
        and headers != policy.headers_elsewhere
        and _origin(url) != _origin(str(record["url"]))
    ):
        headers, cookies = policy.headers_elsewhere, policy.cookies_elsewhere
    url = policy.url(url)
    return _ENTRY % (
        clock.iso(hop.begin),
        total,
        method,
        _json_str(url),
        spoken,
        cookies,
        headers,
        policy.query(url),
        int(status) if status is not None and error is None else 0,
        version,
        response_headers,
        size,
        _json_str(policy.url(redirect)),
        body_size,
        blocked,
        dns,
        connect,
        ssl,
        send,
        wait,
        receive,
        connection,
        _json_int(record.get("line")),
        _json_int(record.get("attempts")),
        hop_index,
        extra,
    )


def har_entries(
    record: Mapping[str, Any],
    start: float,
    end: float,
    timings: Timings | None,
    *,
    method: str,
    wall: float,
    retried: bool = False,
    policy: Sanitiser = _PLAIN,
) -> list[dict[str, Any]]:
    """The HAR entries of one request (one per hop) as dicts; ``wall`` turns the
    request clock (perf_counter) into Unix time."""
    url = str(record.get("final_url") or record["url"])
    chain = hops(start, end, timings, url=url, retried=retried)
    clock = _Clock(wall)
    return [
        json.loads(
            entry_json(
                record,
                hop,
                chain[n + 1] if n + 1 < len(chain) else None,
                method=method,
                clock=clock,
                hop_index=n,
                policy=policy,
            )
        )
        for n, hop in enumerate(chain)
    ]
