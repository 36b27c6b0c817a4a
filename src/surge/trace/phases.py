"""One request's time cut into consecutive phases: the single definition that the
waterfall, the phase summary and HAR all use.

A request's time runs from the moment a worker picked up its input (``start``)
to the moment its record was made (``end``); its last attempt's
:class:`~surge.http.timings.Timings` say where the network work fell in
between.  The phases, in the order they happen:

==========  ==============================================================  ==========
phase       what the request was doing                                      HAR field
==========  ==============================================================  ==========
earlier     earlier attempts and their back-off (``--retries``), and the     blocked
            hops before a redirect's last one
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
"""

from __future__ import annotations

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


def segments(start: float, end: float, timings: Timings | None, *, tls: bool) -> list[Segment]:
    """Consecutive, non-empty segments covering ``[start, end]`` (``end`` is moved
    to the response's last byte when there is one).  ``tls``: the last hop's URL
    is https, so the time between the TCP connect and the connection being ready
    is the TLS handshake."""
    if timings is None:
        return [(QUEUED, start, end)] if end > start else []
    t = timings
    if t.done is not None:
        end = t.done
    hop = t.hop_start  # after a redirect: the earlier hops, then this one's wait
    # (when, the phase that begins then), in the order they happen; None: did not.
    # (A tuple and one loop with no calls: this runs for every record of a traced run.)
    marks = (
        (t.queued, QUEUED),  # before: earlier attempts, until this request() began
        (t.started if hop is not None else None, EARLIER),
        (hop, QUEUED),
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
    phase, since = EARLIER, start
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
    """Which phases happened at all (a reused connection has no dns, connect, tls;
    HAR says -1 for those, not 0).  ``earlier`` happened when it took any time."""
    happened = [False, True, False, False, False, True, True, True]
    if timings is not None:
        happened[DNS] = timings.dns_start is not None
        happened[CONNECT] = timings.connect_start is not None
        happened[TLS] = tls and timings.tcp_end is not None
        happened[SEND] = timings.connected is not None
        happened[WAIT] = timings.sent is not None
        happened[RECEIVE] = timings.first_byte is not None
    else:
        happened[SEND] = happened[WAIT] = happened[RECEIVE] = False
    return happened
