"""``--max-host-errors N``: an origin that failed N times at the connection level
costs no more requests.

Without it a dead or tarpitting host holds a slot per input until each try
times out: 1,000 inputs of a host that accepts and never answers cost 1,000
``--max-time`` waits.  With it, once an origin (scheme, host, port of the input
URL) has had N connection-level failures (:data:`CONNECTION_FAILURES`) with no
response from it in between, its remaining inputs become records with the
error class ``host_skipped`` at once, without a request.

- A response of any status (a 404, a 503) resets the origin's count to 0: the
  host answers, so its failures were not the host being gone.  So N counts
  failures in a row (in the order they complete).
- Each try counts (``--retries``), and a retry is not sent to an origin that
  went over meanwhile: its record keeps the error of its last try.
- The budget is asked at the last moment before a request goes out, after
  every wait - for one of the host's connections (``--per-host``), in a pacer
  (``--rate-per-host``, ``--rate``, a Crawl-delay), in the ``--auto-throttle``
  window: the engine hands the client one check (surge.http.client's
  ``may_send``), asked before a connection is opened for the input and before
  the request is written on one.  An input that waited while its origin went
  over is not sent (its record: ``host_skipped``, a connection opened for it
  just then aside).  Requests already in flight when the N-th failure arrives
  run to their end: so an origin that never answers is sent at most N + C - 1
  requests, C being the most requests to it in flight at once (at most
  ``concurrency``, and ``--per-host`` P with it), exactly N with C = 1.
- Memory: an entry per origin with failures and no answer since, and one per
  origin given up on - not one per origin met.
"""

from __future__ import annotations

from typing import Final

#: The error classes that count against an origin: no answer came from it.
CONNECTION_FAILURES: Final = frozenset(
    {"dns_error", "connect_refused", "connect_timeout", "tls_error", "read_timeout"}
)

Origin = tuple[str, str, int]


class HostBudget:
    """The connection-level failures of each origin (see the module's docstring)."""

    __slots__ = ("_failures", "_skipped", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit!r}")
        self.limit = limit
        self._failures: dict[Origin, int] = {}
        self._skipped: set[Origin] = set()

    def skipped(self, origin: Origin) -> bool:
        """Whether ``origin``'s inputs are skipped from now on."""
        return origin in self._skipped

    def failed(self, origin: Origin, error_class: str) -> None:
        """A try to ``origin`` failed with ``error_class``."""
        if error_class not in CONNECTION_FAILURES or origin in self._skipped:
            return
        count = self._failures.get(origin, 0) + 1
        if count >= self.limit:
            self._failures.pop(origin, None)
            self._skipped.add(origin)
        else:
            self._failures[origin] = count

    def answered(self, origin: Origin) -> None:
        """A response came from ``origin``: its count starts again."""
        if self._failures:
            self._failures.pop(origin, None)

    def detail(self, origin: Origin) -> str:
        """The ``error_detail`` of a skipped input's record."""
        scheme, host, port = origin
        shown = f"[{host}]" if ":" in host else host
        return (
            f"not sent: {scheme}://{shown}:{port} failed {self.limit} times in a row without "
            f"an answer (--max-host-errors {self.limit})"
        )

    def __len__(self) -> int:
        return len(self._failures) + len(self._skipped)
