"""Per-request phase timestamps, always recorded, cheap to record.

The names map one to one onto curl's ``-w`` timers:

=============  ==========================================  ======================
surge field    what it measures                            curl
=============  ==========================================  ======================
``dns_ms``     resolving the host                          time_namelookup
``connect_ms`` the TCP handshake                           time_connect - namelookup
``tls_ms``     the TLS handshake                           time_appconnect - connect
``ttfb_ms``    request sent -> first response byte         time_starttransfer - pretransfer
``body_ms``    first byte -> last byte                     time_total - starttransfer
=============  ==========================================  ======================

Phases that did not happen (a reused connection has no dns, connect or tls)
are ``None``.  Timestamps are ``time.perf_counter()`` seconds; the trace layer
turns them into waterfalls.
"""

from __future__ import annotations

from math import floor
from typing import Any


class Timings:
    """Monotonic timestamps of one attempt's phases (``None``: did not happen)."""

    __slots__ = (
        "connect_start",
        "connected",
        "connection",
        "dns_end",
        "dns_start",
        "done",
        "first_byte",
        "hop_start",
        "http2",
        "previous",
        "queued",
        "sent",
        "started",
        "status",
        "tcp_end",
        "tls_end",
        "url",
    )

    def __init__(self, queued: float) -> None:
        self.queued = queued  # created: waiting for a slot or a connection
        self.started: float | None = None  # holds what it waited for; the clock runs
        #: After a redirect: when this hop began (``started`` is the first hop's),
        #: and the hop before it, whose ``url`` and ``status`` say where it went.
        self.hop_start: float | None = None
        self.previous: Timings | None = None
        self.url: str | None = None  # set on a hop that redirected
        self.status: int | None = None  # set on a hop that redirected
        self.dns_start: float | None = None
        self.dns_end: float | None = None
        #: The TCP connect began (after any wait for a handshake slot).
        self.connect_start: float | None = None
        self.tcp_end: float | None = None
        self.tls_end: float | None = None
        self.connected: float | None = None  # a connection (new or reused) is ready
        self.sent: float | None = None
        self.first_byte: float | None = None
        self.done: float | None = None
        #: The connection the hop's response came on (its ``serial``: a number
        #: per connection in the process, HAR's ``connection``), and whether
        #: it spoke HTTP/2 (HAR's ``httpVersion``).
        self.connection: int | None = None
        self.http2 = False

    def phases_ms(self) -> dict[str, float | None]:
        """The record's ``timings`` object: milliseconds per phase (as :func:`ms3`).

        Spelled out, with no helper calls: every record of a bulk run makes one,
        and ten function calls were a few percent of a keep-alive request."""
        dns_start, dns_end, tcp_end = self.dns_start, self.dns_end, self.tcp_end
        sent, first_byte, done = self.sent, self.first_byte, self.done
        return {
            "dns_ms": None
            if dns_start is None or dns_end is None
            else floor((dns_end - dns_start) * 1_000_000.0 + 0.5) / 1000.0,
            "connect_ms": None
            if self.connect_start is None or tcp_end is None
            else floor((tcp_end - self.connect_start) * 1_000_000.0 + 0.5) / 1000.0,
            "tls_ms": None
            if tcp_end is None or self.tls_end is None
            else floor((self.tls_end - tcp_end) * 1_000_000.0 + 0.5) / 1000.0,
            "ttfb_ms": None
            if sent is None or first_byte is None
            else floor((first_byte - sent) * 1_000_000.0 + 0.5) / 1000.0,
            "body_ms": None
            if first_byte is None or done is None
            else floor((done - first_byte) * 1_000_000.0 + 0.5) / 1000.0,
        }

    def hops(self) -> list[Timings]:
        """Every hop's timings, the first first (one, without redirects)."""
        chain: list[Timings] = []
        hop: Timings | None = self
        while hop is not None:
            chain.append(hop)
            hop = hop.previous
        chain.reverse()
        return chain

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name != "previous"}


#: The keys of a record's ``timings`` (curl's -w phases, in milliseconds), in
#: order: what :meth:`Timings.phases_ms` returns. The waterfall's finer phases
#: (queued, send, wait, ...) are surge.trace.phases.PHASES.
RECORD_PHASES: tuple[str, ...] = ("dns_ms", "connect_ms", "tls_ms", "ttfb_ms", "body_ms")


def ms3(seconds: float) -> float:
    """``seconds`` in milliseconds, rounded to 0.001 ms (a microsecond).

    The same value as ``round(seconds * 1000, 3)`` (the double nearest to the
    decimal; ties aside) at a fifth of the cost: ``round()`` with digits goes
    through a correctly-rounded decimal conversion, ~0.7 us here, and a bulk
    record made six of them (measured: 0.71 against 0.14 us each)."""
    return floor(seconds * 1_000_000.0 + 0.5) / 1000.0


def redirect_ms(timings: Timings | None) -> float:
    """curl's time_redirect, in ms: the redirects' share of the request (0 without)."""
    if timings is None or timings.hop_start is None or timings.started is None:
        return 0.0
    return ms3(timings.hop_start - timings.started)
