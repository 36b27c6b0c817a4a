"""What each simulated host does: a pure, deterministic function of its name.

Tests, the demo and the benchmarks all call :func:`behaviour` to predict what the
server will do for a host -- and what a correct client should report -- without
talking to the server.  The server calls the same function, so the two can never
disagree.  Nothing here touches a socket or reads a clock.

Host-name grammar
=================
Only names under the ``.sim`` top-level domain have a behaviour; any other name
(``localhost``, ``127.0.0.1``) is an ordinary host answering ``200``.  Names are
case-insensitive.  The labels before ``.sim`` are split on ``.`` and each label
again on ``--``, giving *parts*; ``delay-200.status-404.sim`` and
``delay-200--status-404.sim`` mean the same thing.  (Over TLS, every name other
than the generic ones gets a certificate of its own on first use, see
:mod:`surge.sim.tls`.)

==================  =========================================================
part                meaning
==================  =========================================================
``status-<code>``   final response has this status (200-599); default 200
``delay-<ms>``      wait this long after reading a request before acting
                    (applies to every response, redirect hops included)
``redirect-<n>``    answer a redirect (301 when n is odd, 302 when even) to
                    the same name with ``redirect-<n-1>``; ``redirect-0`` is the
                    end of the chain, where the other parts apply
``redirect-loop``   redirect to the very same URL, forever
``gzip``            ``Content-Encoding: gzip``, only when ``Accept-Encoding``
                    allows it (otherwise identity)
``chunked``         ``Transfer-Encoding: chunked`` (bodies over 1 MiB are
                    chunked anyway when gzipped: their length is not known)
``big-<n>[k|m]``    body of n bytes (k = KiB, m = MiB) before any encoding;
                    the default body is 1024 bytes
``slowbody-<ms>``   the body trickles out in pieces spread over this many ms
``hang``            read the request, never answer
``hang-body``       send the head and half of the body, then stall forever
``reset``           after reading the request, close with a TCP RST
``close``           after reading the request, close cleanly (FIN), no answer
``garbage``         answer bytes that are not HTTP, then close
``badcert``         over TLS, present a certificate from an untrusted CA
``site<N>``         a generic host: the parts above drawn from a hash of the
                    part and the seed (see below); explicit parts override it
==================  =========================================================

Any other part (``x``, ``www``, ``a1``) is a free name, ignored, so that tests
can make many distinct hosts with the same behaviour.  When several parts set the
same field the rightmost wins.  ``redirect-<n>`` with n > 0 takes precedence over
the action (``hang``, ``reset``...): the chain redirects first and the action
happens at its end.

Generic hosts ``site<N>.sim``
=============================
:func:`hosts` lists ``site0.sim`` ... ``site<n-1>.sim``.  Each one's behaviour is
drawn from ``blake2b(f"{seed}:site<N>")``; the mix, as exact probabilities:

==========================================  ======
fate                                         share
==========================================  ======
200 OK                                       85.0 %
404 Not Found                                 3.0 %
500 Internal Server Error                      2.0 %
redirect chain of 1-3 hops (uniform) to 200    4.0 %
hang (never answers)                           2.0 %
hang-body (head, half a body, then stalls)     1.0 %
reset (TCP RST)                                1.5 %
close (FIN, no response)                       0.5 %
garbage (not HTTP)                             1.0 %
==========================================  ======

Independently of the fate:

- latency (``delay``): 95 % lognormal with median 70 ms and sigma 0.7, clipped
  to [5, 1000] ms; 5 % uniform in [1000, 3000) ms (the slow tail).  Hangs (3 %
  counting hang-body) are the hosts "beyond any sane timeout".
- ``gzip`` with probability 30 %, ``chunked`` with probability 20 %.
- body size log-uniform in [300, 50000) bytes.

Every response hop waits the delay, so a host with h redirect hops takes
(h + 1) x delay.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

Action = Literal["respond", "hang", "hang_body", "reset", "close", "garbage"]

#: The TLD every simulated host lives under.
TLD = "sim"
#: Body size of a host that does not say otherwise.
DEFAULT_BODY_BYTES = 1024
#: How many redirects :meth:`Behaviour.expected` assumes a client follows
#: (aiohttp's default; requests allows 30, httpx 20, curl -L 50).
DEFAULT_MAX_REDIRECTS = 10

# The generic mix.  Cumulative thresholds are derived from these, so the table in
# the docstring, the tests and the draw all read the same numbers.
GENERIC_FATES: tuple[tuple[str, float], ...] = (
    ("ok", 0.850),
    ("status_404", 0.030),
    ("status_500", 0.020),
    ("redirect", 0.040),
    ("hang", 0.020),
    ("hang_body", 0.010),
    ("reset", 0.015),
    ("close", 0.005),
    ("garbage", 0.010),
)
GENERIC_GZIP = 0.30
GENERIC_CHUNKED = 0.20
GENERIC_SLOW_TAIL = 0.05
GENERIC_MEDIAN_MS = 70.0
GENERIC_SIGMA = 0.7
GENERIC_DELAY_MIN_MS = 5
GENERIC_DELAY_MAX_MS = 1000
GENERIC_TAIL_MS = (1000, 3000)
GENERIC_BODY_BYTES = (300, 50_000)
GENERIC_MAX_HOPS = 3

_CUMULATIVE_FATES: tuple[tuple[str, float], ...] = tuple(
    (name, sum(share for _, share in GENERIC_FATES[: i + 1]))
    for i, (name, _) in enumerate(GENERIC_FATES)
)

_NORMAL = NormalDist()

_PART = re.compile(
    r"""
    status-(?P<status>[0-9]{3})
    | delay-(?P<delay>[0-9]{1,8})
    | redirect-(?P<redirect>[0-9]{1,4}|loop)
    | big-(?P<big>[0-9]{1,12})(?P<unit>[km]?)
    | slowbody-(?P<slowbody>[0-9]{1,8})
    | site(?P<site>[0-9]{1,12})
    | (?P<flag>gzip|chunked|hang|hang-body|reset|close|garbage|badcert)
    """,
    re.VERBOSE,
)
_REDIRECT_PART = re.compile(r"redirect-(?:[0-9]{1,4}|loop)")
_FLAG_ACTIONS: dict[str, Action] = {
    "hang": "hang",
    "hang-body": "hang_body",
    "reset": "reset",
    "close": "close",
    "garbage": "garbage",
}
_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What the simulated server does for one host name.

    ``redirects`` counts the redirect hops still to come (``-1``: forever).
    ``status``, ``gzip``, ``chunked``, ``body_bytes`` and ``slowbody_ms`` describe
    the response at the end of the chain; ``action`` says whether that response
    is sent at all.
    """

    host: str
    action: Action = "respond"
    status: int = 200
    delay_ms: int = 0
    redirects: int = 0
    gzip: bool = False
    chunked: bool = False
    body_bytes: int = DEFAULT_BODY_BYTES
    slowbody_ms: int = 0
    badcert: bool = False

    @property
    def next_host(self) -> str | None:
        """The host the next redirect points at, or None when this host does not redirect."""
        if self.redirects == 0:
            return None
        if self.redirects < 0:
            return self.host
        return _with_redirect(self.host, self.redirects - 1)

    @property
    def redirect_status(self) -> int:
        """301 for odd hop counts, 302 for even ones (and for loops), so chains mix both."""
        return 301 if self.redirects > 0 and self.redirects % 2 == 1 else 302

    @property
    def service_ms(self) -> float:
        """Server-side time of the whole exchange (all hops), ``inf`` if it never completes."""
        if self.redirects < 0 or self.action in ("hang", "hang_body"):
            return math.inf
        return (self.redirects + 1) * self.delay_ms + (
            self.slowbody_ms if self.action == "respond" else 0
        )

    @property
    def expected_status(self) -> int | None:
        """Final status a correct, patient client reports (None when it reports an error)."""
        return self.expected()[0]

    @property
    def expected_error(self) -> str | None:
        """Error class (see ``surge.errors.ERROR_CLASSES``) a correct, patient client reports."""
        return self.expected()[1]

    def expected(
        self,
        timeout_s: float | None = None,
        *,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
        max_body: int | None = None,
        tls: bool = False,
    ) -> tuple[int | None, str | None]:
        """``(status, error)`` a correct client reports for this host.

        ``timeout_s`` is a total deadline for the request, redirects included
        (None: longer than any finite delay; hangs still end in ``read_timeout``).
        ``max_body`` is the body cap in decoded bytes.  ``status`` is the code of
        the last response whose head arrived, as surge's result records keep it:
        also when its body then stalls (``read_timeout``) or exceeds the cap
        (``body_too_large``), and the last redirect's with ``too_many_redirects``;
        None when no head arrives.
        """
        error = self._error(timeout_s, max_redirects, max_body, tls)
        if error is None:
            return (self.status, None)
        if error in ("read_timeout", "body_too_large") and self._head_arrives(timeout_s):
            return (self.status, error)
        if error == "too_many_redirects":
            # The last response that arrived was the redirect one hop too many.
            if self.redirects < 0:
                return (302, error)
            last_hop = self.redirects - max_redirects
            return (301 if last_hop % 2 == 1 else 302, error)
        return (None, error)

    def _head_arrives(self, timeout_s: float | None) -> bool:
        """Does the final response's head arrive within the deadline?"""
        if self.action not in ("respond", "hang_body") or self.redirects < 0:
            return False
        head_ms = (self.redirects + 1) * self.delay_ms
        return timeout_s is None or head_ms <= timeout_s * 1000

    def client_time_s(
        self, timeout_s: float, *, max_redirects: int = DEFAULT_MAX_REDIRECTS
    ) -> float:
        """Least wall time an ideal client spends on this host with a total deadline."""
        return min(self._outcome_ms(max_redirects)[0] / 1000.0, timeout_s)

    def _outcome_ms(self, max_redirects: int) -> tuple[float, bool]:
        """(server time until the client knows the outcome, redirect limit hit)."""
        if self.redirects < 0 or self.redirects > max_redirects:
            return float((max_redirects + 1) * self.delay_ms), True
        return self.service_ms, False

    def _error(
        self, timeout_s: float | None, max_redirects: int, max_body: int | None, tls: bool
    ) -> str | None:
        if tls and self.badcert:
            return "tls_error"
        elapsed_ms, too_many = self._outcome_ms(max_redirects)
        if math.isinf(elapsed_ms) or (timeout_s is not None and elapsed_ms > timeout_s * 1000):
            return "read_timeout"
        if too_many:
            return "too_many_redirects"
        if self.action in ("reset", "close"):
            # A close before any response byte is the same event, for a client, as a
            # reset: the connection went away (curl: "Empty reply from server").
            return "connection_reset"
        if self.action == "garbage":
            return "protocol_error"
        if max_body is not None and self.body_bytes > max_body:
            return "body_too_large"
        return None


def behaviour(host: str, seed: int = 0) -> Behaviour:
    """The behaviour of ``host`` (a name, without port) on a server started with ``seed``."""
    return _behaviour(host.lower().rstrip("."), seed)


@lru_cache(maxsize=1 << 16)
def _behaviour(host: str, seed: int) -> Behaviour:
    if host != TLD and not host.endswith("." + TLD):
        return Behaviour(host=host)
    parts = _parts(host)
    fields: dict[str, object] = {}
    # The generic draw is the base; explicit parts override it wherever they stand.
    for part in parts:
        match = _PART.fullmatch(part)
        if match and match["site"] is not None:
            fields = _generic_fields(part, seed)
    for part in parts:
        match = _PART.fullmatch(part)
        if match is None or match["site"] is not None:
            continue
        if match["status"] is not None:
            status = int(match["status"])
            if 200 <= status <= 599:
                fields["status"] = status
        elif match["delay"] is not None:
            fields["delay_ms"] = int(match["delay"])
        elif match["redirect"] is not None:
            fields["redirects"] = -1 if match["redirect"] == "loop" else int(match["redirect"])
        elif match["big"] is not None:
            fields["body_bytes"] = int(match["big"]) * _UNITS[match["unit"]]
        elif match["slowbody"] is not None:
            fields["slowbody_ms"] = int(match["slowbody"])
        elif match["flag"] in _FLAG_ACTIONS:
            fields["action"] = _FLAG_ACTIONS[match["flag"]]
        else:
            fields[match["flag"]] = True
    return Behaviour(host=host, **fields)  # type: ignore[arg-type]


def _parts(host: str) -> list[str]:
    labels = host[: -len(TLD)].rstrip(".").split(".") if host != TLD else []
    return [part for label in labels for part in label.split("--") if part]


def _with_redirect(host: str, hops: int) -> str:
    """``host`` with its effective (rightmost) redirect part set to ``hops``, or with
    ``redirect-<hops>--`` prepended when it has none (its hops came from ``site<N>``)."""
    labels = host.split(".")
    for i in reversed(range(len(labels) - 1)):
        parts = labels[i].split("--")
        for j in reversed(range(len(parts))):
            if _REDIRECT_PART.fullmatch(parts[j]):
                parts[j] = f"redirect-{hops}"
                labels[i] = "--".join(parts)
                return ".".join(labels)
    return f"redirect-{hops}--{host}"


def _uniforms(key: str, count: int) -> list[float]:
    digest = hashlib.blake2b(key.encode(), digest_size=8 * count).digest()
    return [
        (int.from_bytes(digest[8 * i : 8 * i + 8], "big") + 0.5) / 2.0**64 for i in range(count)
    ]


def _generic_fields(site: str, seed: int) -> dict[str, object]:
    u_fate, u_tail, u_delay, u_body, u_gzip, u_chunked, u_hops = _uniforms(f"{seed}:{site}", 7)
    fate = next((name for name, upper in _CUMULATIVE_FATES if u_fate < upper), "ok")
    if u_tail < GENERIC_SLOW_TAIL:
        low, high = GENERIC_TAIL_MS
        delay_ms = int(low + u_delay * (high - low))
    else:
        delay = GENERIC_MEDIAN_MS * math.exp(GENERIC_SIGMA * _NORMAL.inv_cdf(u_delay))
        delay_ms = int(min(max(delay, GENERIC_DELAY_MIN_MS), GENERIC_DELAY_MAX_MS))
    low, high = GENERIC_BODY_BYTES
    fields: dict[str, object] = {
        "delay_ms": delay_ms,
        "body_bytes": int(low * (high / low) ** u_body),
        "gzip": u_gzip < GENERIC_GZIP,
        "chunked": u_chunked < GENERIC_CHUNKED,
    }
    if fate == "status_404":
        fields["status"] = 404
    elif fate == "status_500":
        fields["status"] = 500
    elif fate == "redirect":
        fields["redirects"] = 1 + int(u_hops * GENERIC_MAX_HOPS)
    elif fate != "ok":
        fields["action"] = fate
    return fields


def hosts(n: int, seed: int = 0) -> list[str]:
    """The first ``n`` generic host names, ``site0.sim`` ... (the same for every seed)."""
    del seed  # names do not depend on the seed; their behaviour does
    return [f"site{i}.{TLD}" for i in range(n)]


def lower_bound(
    hosts: Iterable[str | Behaviour],
    concurrency: int,
    timeout_s: float,
    *,
    seed: int = 0,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
) -> float:
    """Wall time, in seconds, of an ideal client fetching ``hosts`` in order.

    Each host occupies one of ``concurrency`` slots for its server-side service
    time capped at ``timeout_s`` (network and client CPU cost nothing); the next
    host starts on the earliest free slot (greedy list scheduling).  No real client
    with that concurrency and a total per-request deadline of ``timeout_s`` can
    finish sooner when it starts requests in this order.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    free_at = [0.0] * concurrency  # a heap of the times at which each slot frees up
    finish = 0.0
    for host in hosts:
        b = host if isinstance(host, Behaviour) else behaviour(host, seed)
        start = heapq.heappop(free_at)
        end = start + b.client_time_s(timeout_s, max_redirects=max_redirects)
        finish = max(finish, end)
        heapq.heappush(free_at, end)
    return finish
