"""One request's time cut into consecutive phases: the one definition that the
waterfall, the phase summary and HAR use.  (A result record's ``timings`` keep
curl's five coarser phases, ``surge.http.timings.RECORD_PHASES``: dns, connect,
tls, ttfb = send + wait, body = receive.)

A request's time runs from the moment a worker picked up its input (``start``)
to the moment its record was made (``end``); its last attempt's
:class:`~surge.http.timings.Timings` say where the network work fell in
between.  The phases, in the order they happen:

==========  ==============================================================  ==========
phase       what the request was doing                                      HAR field
==========  ==============================================================  ==========
earlier     earlier attempts and their back-off (``--retries``)              blocked
queued      waiting for a connection slot or a handshake slot (surge's own  blocked
            queues), and handing a new connection over
dns         resolving the host                                              dns
connect     the TCP handshake                                               connect
tls         the TLS handshake                                               ssl (and connect)
send        writing the request                                             send
wait        waiting for the first byte of the response (server time)        wait
receive     reading the rest of the response                                receive
==========  ==============================================================  ==========

A failed request ends in the phase it failed in (a connect timeout ends in
``connect``, a read timeout in ``wait``); its last segment runs to ``end``.

A followed redirect is several hops, each with its own phases (the client links
a hop's timings to the previous hop's): the waterfall row runs through all of
them, HAR writes one entry per hop as browsers do.
"""

from __future__ import annotations

from dataclasses import dataclass

from surge.http.timings import Timings

PHASES: tuple[str, ...] = (
    "earlier",
    "queued",
    "dns",
    "connect",
    "tls",
    "send",
    "wait",
    "receive",
)
EARLIER, QUEUED, DNS, CONNECT, TLS, SEND, WAIT, RECEIVE = range(len(PHASES))

#: A segment: (phase index, from, to), in the caller's clock (perf_counter seconds).
Segment = tuple[int, float, float]


@dataclass
class Hop:
    """One request/response exchange of a request: its timings, when it began and
    ended on the request's clock, its URL's scheme, and its phases."""

    timings: Timings | None
    begin: float
    end: float
    tls: bool
    parts: list[Segment]


def hops(
    start: float, end: float, timings: Timings | None, *, url: str, retried: bool = False
) -> list[Hop]:
    """The hops of a request that started at ``start`` and whose record was made
    at ``end``; ``url`` is the last hop's (its scheme says whether it used TLS),
    ``retried``: earlier attempts came before the last one (``start`` is the
    first's), and their time is ``earlier``.  The hops' parts are contiguous
    from ``start`` to the last byte (or ``end`` for a failure)."""
    chain = timings.hops() if timings is not None else [None]
    out: list[Hop] = []
    begin = start
    for n, hop in enumerate(chain):
        last = n == len(chain) - 1
        # A hop ends at its last byte (the record is made a little after); a
        # failed last hop at ``end``.
        stop = max(hop.done if hop is not None and hop.done is not None else end, begin)
        tls = url.startswith("https:") if last or hop is None else str(hop.url).startswith("https:")
        parts = hop_segments(begin, stop, hop, tls=tls, retried=retried and n == 0)
        out.append(Hop(hop, begin, stop, tls, parts))
        begin = stop
    return out


def segments(
    start: float, end: float, timings: Timings | None, *, tls: bool, retried: bool = False
) -> list[Segment]:
    """Consecutive, non-empty segments covering the request, every hop, from
    ``start`` to its last byte (or ``end``): :func:`hops` joined."""
    out: list[Segment] = []
    url = "https:" if tls else "http:"
    for hop in hops(start, end, timings, url=url, retried=retried):
        for phase, begin, finish in hop.parts:
            if out and out[-1][0] == phase and out[-1][2] == begin:
                out[-1] = (phase, out[-1][1], finish)
            else:
                out.append((phase, begin, finish))
    return out


def hop_segments(
    start: float, end: float, t: Timings | None, *, tls: bool, retried: bool = False
) -> list[Segment]:
    """One hop's segments from ``start`` to ``end``; ``retried``: the time before
    the hop's own first timestamp was earlier attempts, not a queue."""
    before = EARLIER if retried else QUEUED
    if t is None:
        return [(before, start, end)] if end > start else []
    # (when, the phase that begins then), in the order they happen; None: did not.
    # (A tuple and one loop with no calls: this runs for every record of a traced run.)
    marks = (
        (t.queued, QUEUED),  # this attempt's request() began (the first hop's)
        (t.dns_start, DNS),
        (t.dns_end, QUEUED),  # a wait for a handshake slot, if any
        (t.connect_start, CONNECT),
        (t.tcp_end, TLS if tls else QUEUED),
        (t.tls_end if tls else None, QUEUED),
        (t.connected, SEND),
        (t.sent, WAIT),
        (t.first_byte, RECEIVE),
    )
    out: list[Segment] = []
    phase, since = before, start
    for when, then in marks:
        if when is None:
            continue
        if when > since:  # clocks never run backwards here: earlier marks are ignored
            if when > end:
                when = end
            if when > since:
                if out and out[-1][0] == phase:  # adjacent segments of one phase are one
                    out[-1] = (phase, out[-1][1], when)
                else:
                    out.append((phase, since, when))
                since = when
        phase = then
    if end > since:
        if out and out[-1][0] == phase:
            out[-1] = (phase, out[-1][1], end)
        else:
            out.append((phase, since, end))
    return out


def durations(parts: list[Segment]) -> list[float]:
    """Seconds spent in each phase (indexed as :data:`PHASES`)."""
    spent = [0.0] * len(PHASES)
    for phase, begin, finish in parts:
        spent[phase] += finish - begin
    return spent


def present(timings: Timings | None, *, tls: bool) -> list[bool]:
    """Which phases one hop went through at all (a reused connection has no dns,
    connect, tls; HAR says -1 for those, not 0).  ``earlier`` and ``queued``
    happened when they took any time (the caller knows)."""
    happened = [False, False, False, False, False, False, False, False]
    if timings is not None:
        happened[DNS] = timings.dns_start is not None
        happened[CONNECT] = timings.connect_start is not None
        happened[TLS] = tls and timings.tcp_end is not None
        happened[SEND] = timings.connected is not None
        happened[WAIT] = timings.sent is not None
        happened[RECEIVE] = timings.first_byte is not None
    return happened
