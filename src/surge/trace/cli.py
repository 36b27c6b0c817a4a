"""``surge trace URL [URL ...]``: a few requests, each with an httpstat-like
breakdown of where its time went (DNS, TCP, TLS, server processing, transfer).

The URLs run one after another on one client, as curl runs several URLs of one
command line: a second request to a host reuses the connection and shows no DNS,
TCP or TLS (``--no-reuse`` opens a new connection for each).  ``--json`` prints
one object per request per line, with curl's ``-w`` timers beside surge's phases
(see :mod:`surge.http.timings` for the mapping).  Exit status: 0 when every
request got a response, 1 when any failed, 2 for a usage error (stdout closed
or failing included: its output is a :mod:`surge.sinks` sink).
"""

from __future__ import annotations

import json
import sys
from time import perf_counter
from typing import Any

import click

from surge.errors import LocalResourceError, RequestError, UsageError
from surge.http.client import AsyncClient, parse_header
from surge.http.response import Response
from surge.http.timings import RECORD_PHASES, Timings
from surge.loops import loop_descriptors, new_event_loop, require_descriptors
from surge.sinks import stdout_sink
from surge.terminal import colours, die, paint
from surge.trace.redact import safe_headers, safe_text, safe_url


@click.command("trace")
@click.argument("urls", nargs=-1, required=True, metavar="URL [URL ...]")
@click.option("-n", "--count", default=1, show_default=True, help="Requests per URL.")
@click.option("--no-reuse", is_flag=True, help="A new connection for every request.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per request per line.")
@click.option(
    "-X",
    "--method",
    default="GET",
    show_default=True,
    type=click.Choice(["GET", "HEAD"]),
    help="The request method.",
)
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="'Name: value'",
    help="Send this header with every request (repeatable).",
)
@click.option("-L", "--location", "follow", is_flag=True, help="Follow redirects.")
@click.option(
    "--resolve", multiple=True, metavar="HOST:PORT:ADDR", help="HOST may be * or *.suffix."
)
@click.option("--cacert", type=click.Path(dir_okay=False), help="CA certificates (PEM) to trust.")
@click.option("-k", "--insecure", is_flag=True, help="Do not verify TLS certificates.")
@click.option("--connect-timeout", default=10.0, show_default=True, help="Seconds for DNS+TCP+TLS.")
@click.option("--max-time", default=30.0, show_default=True, help="Seconds per request, all in.")
@click.option("--no-headers", is_flag=True, help="Do not print the response headers.")
@click.option(
    "--http1.1",
    "http1_1",
    is_flag=True,
    help="HTTP/1.1 only: do not offer HTTP/2 (ALPN h2) over TLS (as surge fetch).",
)
@click.option(
    "--http2-prior-knowledge",
    is_flag=True,
    help="Speak HTTP/2 in cleartext (h2c) to http:// URLs, without asking (as surge fetch).",
)
def trace_command(
    urls: tuple[str, ...],
    count: int,
    no_reuse: bool,
    as_json: bool,
    method: str,
    headers: tuple[str, ...],
    follow: bool,
    resolve: tuple[str, ...],
    cacert: str | None,
    insecure: bool,
    connect_timeout: float,
    max_time: float,
    no_headers: bool,
    http1_1: bool,
    http2_prior_knowledge: bool,
) -> None:
    """Request each URL and show where its time went, phase by phase."""
    try:
        if count < 1:
            raise UsageError(f"--count must be at least 1, not {count}")
        options: dict[str, Any] = {
            "headers": [parse_header(h) for h in headers],
            "follow_redirects": follow,
            "resolve": list(resolve),
            "cafile": cacert,
            "insecure": insecure,
            "http2": not http1_1,
            "http2_prior_knowledge": http2_prior_knowledge,
            "connect_timeout": connect_timeout,
            "max_time": max_time,
        }
        # Checks the flags now; and --no-reuse's clients share one TLS context, as
        # one client's connections do: a new connection each time, not a new CA load.
        options["ssl_context"] = AsyncClient(**options).ssl_context
        # stdout through a sink (surge.sinks): closed, full or a pipe closed
        # early, it is one line and exit 2, never a traceback
        out = stdout_sink()
        # the loop, a socket (two for Happy Eyeballs) and one for a moment
        require_descriptors(loop_descriptors() + 3)
    except (UsageError, LocalResourceError) as e:
        die("surge trace", str(e))
    color = colours(sys.stdout) and not as_json  # a terminal's, not under NO_COLOR or TERM=dumb
    loop = new_event_loop()
    try:
        results = loop.run_until_complete(_requests(urls, count, no_reuse, method, options))
    finally:
        loop.close()
    try:
        for n, (url, outcome, end) in enumerate(results):
            if as_json:
                text = json.dumps(as_record(url, outcome, end)) + "\n"
            else:
                text = (
                    ("\n" if n else "")
                    + render(url, outcome, end, color=color, headers=not no_headers)
                    + "\n"
                )
            out.write(text.encode("utf-8", "surrogateescape"))
    except UsageError as e:
        die("surge trace", str(e))
    if any(isinstance(outcome, RequestError) for _, outcome, _ in results):
        sys.exit(1)


Outcome = Response | RequestError


async def _requests(
    urls: tuple[str, ...], count: int, no_reuse: bool, method: str, options: dict[str, Any]
) -> list[tuple[str, Outcome, float]]:
    """(url, response or error, when it ended) for each request, in order."""
    results: list[tuple[str, Outcome, float]] = []
    client = AsyncClient(**options)
    try:
        for url in urls:
            for _ in range(count):
                if no_reuse and results:
                    await client.close()
                    client = AsyncClient(**options)
                outcome: Outcome
                try:
                    outcome = await client.request(method, url)
                except RequestError as e:
                    outcome = e
                results.append((url, outcome, perf_counter()))
    finally:
        await client.close()
    return results


# -- curl's -w timers ------------------------------------------------------------------------

#: curl's cumulative timers, each the time from the request's start to an event.
CURL_TIMERS = (
    "time_namelookup",
    "time_connect",
    "time_appconnect",
    "time_pretransfer",
    "time_starttransfer",
    "time_total",
)
#: ... and the hops before the last, under -L.
TIME_REDIRECT = "time_redirect"


def hop_timers(hop: Timings, *, tls: bool, end: float) -> dict[str, float]:
    """One hop's curl ``-w`` timers, in seconds from the hop's start, from surge's
    timestamps; ``end``: when the request finished or failed.  As curl reports
    them: a step a reused connection skipped takes the previous timer's value
    (its namelookup and connect are ~0); ``time_appconnect`` is 0 without TLS; a
    failed request's timers past the failure are 0 and ``time_total`` is the time
    to the failure."""
    t0 = hop.hop_start if hop.hop_start is not None else hop.queued
    events = (
        ("time_namelookup", hop.dns_end),
        ("time_connect", hop.tcp_end),
        ("time_appconnect", hop.tls_end),
        ("time_pretransfer", hop.sent),
        ("time_starttransfer", hop.first_byte),
    )
    reached = max((i for i, (_, when) in enumerate(events) if when is not None), default=-1)
    failed = hop.done is None
    values: dict[str, float] = {}
    last = 0.0
    for i, (name, when) in enumerate(events):
        if when is not None:
            last = max(last, when - t0)
        values[name] = 0.0 if failed and i > reached else round(last, 6)
    values["time_total"] = round((hop.done if hop.done is not None else end) - t0, 6)
    if not tls:
        values["time_appconnect"] = 0.0
    return values


def curl_timers(timings: Timings, *, tls: bool, end: float) -> dict[str, float]:
    """curl's ``-w`` timers for a whole request.  Under ``-L`` curl adds each
    hop's timers together ("when a redirect is followed, the time from each
    request is added together", its documentation of every CURLINFO_*_TIME) and
    reports the hops before the last as ``time_redirect``; so does this."""
    chain = timings.hops()
    totals = dict.fromkeys(CURL_TIMERS, 0.0)
    for n, hop in enumerate(chain):
        last = n == len(chain) - 1
        hop_tls = tls if last else str(hop.url).startswith("https:")
        for name, value in hop_timers(hop, tls=hop_tls, end=end).items():
            totals[name] += value
    values = {name: round(value, 6) for name, value in totals.items()}
    hop_start = chain[-1].hop_start
    values["time_redirect"] = round(hop_start - timings.queued, 6) if hop_start else 0.0
    return values


def as_record(url: str, outcome: Outcome, end: float) -> dict[str, Any]:
    """The ``--json`` object of one request."""
    timings = outcome.timings
    final = outcome.final_url if isinstance(outcome, Response) else outcome.final_url or url
    tls = str(final).startswith("https:")
    # As every writer of surge: no userinfo, no secret query value (surge.trace.redact).
    record: dict[str, Any] = {"url": safe_url(url), "final_url": safe_url(str(final))}
    if isinstance(outcome, Response):
        record.update(
            status=outcome.status,
            reason=_reason(outcome),
            http_version=outcome.http_version,
            error=None,
            error_detail=None,
            bytes=outcome.bytes,
            headers=safe_headers(outcome.headers.multi_items()),
        )
    else:
        record.update(
            status=outcome.status,
            reason=None,
            http_version=None,
            error=outcome.error_class,
            error_detail=safe_text(outcome.detail),
            bytes=outcome.bytes,
            headers=[],
        )
    # True: opened (or tried to open) one; False: reused one; None: it failed
    # before either (a bad URL, a failed lookup).
    record["new_connection"] = _new_connection(timings)
    conn = outcome.connection if isinstance(outcome, Response) else None
    address = conn.address if conn is not None else None
    record["remote"] = f"{address[0]}:{address[1]}" if address else None
    tls_info = conn.tls if conn is not None else None
    record["tls"] = (
        dict(zip(("version", "cipher", "alpn"), tls_info, strict=True)) if tls_info else None
    )
    if record["tls"] is not None:
        record["tls"]["resumed"] = (conn.tls_info() or {}).get("resumed")  # type: ignore[union-attr]
    record["timings"] = timings.phases_ms() if timings is not None else None
    record["curl"] = curl_timers(timings, tls=tls, end=end) if timings is not None else None
    return record


def _new_connection(timings: Timings | None) -> bool | None:
    if timings is None:
        return None
    if timings.connect_start is not None:
        return True
    return False if timings.connected is not None else None


def _reason(response: Response) -> str:
    status_line = response.head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    return parts[2] if len(parts) == 3 else ""


# -- the terminal picture ------------------------------------------------------------------

_COLUMNS = (
    "DNS Lookup",
    "TCP Connection",
    "TLS Handshake",
    "Server Processing",
    "Content Transfer",
)
_MARKS = ("namelookup", "connect", "pretransfer", "starttransfer", "total")


def render(
    url: str, outcome: Outcome, end: float, *, color: bool = False, headers: bool = True
) -> str:
    """httpstat's picture of one request: the phases side by side, then the
    cumulative timers under the boundary each one ends at."""
    record = as_record(url, outcome, end)

    lines = []
    how = {True: "new connection", False: "reused connection", None: "no connection"}[
        record["new_connection"]
    ]
    if record["remote"]:
        how += f" to {record['remote']}"
    if record["tls"]:
        tls = record["tls"]
        how += f", {tls['version']} {tls['cipher']}" + (
            f", ALPN {tls['alpn']}" if tls["alpn"] else ""
        )
    lines.append(paint(record["url"], "1", color) + f"  ({how})")
    timings = outcome.timings
    chain = timings.hops() if timings is not None else []
    if len(chain) > 1:  # the picture is the last hop's; the hops before, in a line
        steps = " -> ".join(f"{safe_url(str(hop.url))} ({hop.status})" for hop in chain[:-1])
        lines.append(
            f"after {len(chain) - 1} redirect(s) in {_fmt(record['curl']['time_redirect'] * 1000)}:"
            f" {steps} -> {record['final_url']}"
        )
    elif record["final_url"] != record["url"]:
        lines.append(f"final URL {record['final_url']}")
    if isinstance(outcome, Response):
        head = outcome.head.decode("latin-1").split("\r\n")
        lines.append(paint(head[0], "32" if outcome.status < 400 else "33", color))
        if headers:  # as the HAR has them: no Set-Cookie, a Location without userinfo
            fields = (line.partition(":")[::2] for line in head[1:] if line)
            for name, value in safe_headers((n, v.strip()) for n, v in fields):
                lines.append(paint(name, "90", color) + ": " + value)
        lines.append(f"body: {outcome.bytes:,} bytes on the wire")
    else:
        lines.append(paint(f"FAILED: {outcome.error_class}: {record['error_detail']}", "31", color))
    tls = str(record["final_url"]).startswith("https:")
    columns = _columns(outcome, chain[-1] if chain else None, tls=tls, end=end)
    if not columns:
        return "\n".join(lines)
    heads = [head for head, _, _ in columns]
    cells = [cell for _, cell, _ in columns]
    widths = [max(len(c), len(h)) + 2 for c, h in zip(cells, heads, strict=True)]
    lines.append("")
    lines.append(" " + "".join(h.center(w) + " " for h, w in zip(heads, widths, strict=True)))
    bar = "[" + "|".join(
        paint(c.center(w), "31" if c == _failed_cell(outcome) else "36", color)
        for c, w in zip(cells, widths, strict=True)
    )
    lines.append(bar + "]")
    # The cumulative timers, each under the boundary its phase ends at.
    edges = []
    position = 0
    for w in widths:
        position += w + 1
        edges.append(position)
    lines.append(_ruler(edges, 0))
    for i, (_, _, (mark, seconds)) in enumerate(columns):
        text = f"{mark}:{_fmt(seconds * 1000)}"
        line = _ruler(edges, i + 1).ljust(edges[-1] + 1)
        start = max(0, edges[i] + 1 - len(text))  # ends where its boundary's bar was
        lines.append((line[:start] + paint(text, "36", color) + line[start + len(text) :]).rstrip())
    return "\n".join(lines)


def _failed_cell(outcome: Outcome) -> str | None:
    return outcome.error_class if isinstance(outcome, RequestError) else None


def _failed_phase(hop: Timings, *, tls: bool) -> int:
    """Which of the picture's phases (an index of _COLUMNS) a failed hop was in."""
    if hop.dns_start is not None and hop.dns_end is None:
        return 0
    if hop.connect_start is not None and hop.tcp_end is None:
        return 1
    if tls and hop.tcp_end is not None and hop.tls_end is None:
        return 2
    return 3 if hop.first_byte is None else 4


def _columns(
    outcome: Outcome, hop: Timings | None, *, tls: bool, end: float
) -> list[tuple[str, str, tuple[str, float]]]:
    """The picture's columns: (heading, cell, (timer, seconds)) each.  A response
    has all five (a phase its connection skipped is "-"); a failure has the
    phases that happened, then the one it failed in, which shows its error
    class over the time to the failure: a phase that did not happen is not drawn."""
    began = (hop.dns_start, hop.connect_start, hop.connected, hop.sent) if hop else ()
    if hop is None or (isinstance(outcome, RequestError) and all(when is None for when in began)):
        return []  # it failed before any phase began: a URL that is not one
    phases = hop.phases_ms()
    curl = hop_timers(hop, tls=tls, end=end)
    timers = [curl[f"time_{mark}"] for mark in _MARKS]
    keys = RECORD_PHASES
    if isinstance(outcome, Response):
        return [
            (head, _fmt(phases[key]), (mark, seconds))
            for head, key, mark, seconds in zip(_COLUMNS, keys, _MARKS, timers, strict=True)
        ]
    failed = _failed_phase(hop, tls=tls)
    columns = [
        (_COLUMNS[i], _fmt(phases[keys[i]]), (_MARKS[i], timers[i]))
        for i in range(failed)
        if phases[keys[i]] is not None
    ]
    columns.append((_COLUMNS[failed], outcome.error_class, ("total", curl["time_total"])))
    return columns


def _ruler(edges: list[int], skip: int) -> str:
    """Vertical bars at the boundaries from ``skip`` on."""
    chars = [" "] * (edges[-1] + 1)
    for edge in edges[skip:]:
        chars[edge] = "|"
    return "".join(chars).rstrip()


def _fmt(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"
