"""The one retry policy: which failures are worth another try, and how long to wait.

Used by ``surge fetch`` (``--retries``), the Python fetch API and ``surge s3``;
:func:`may_resend` is the one rule of what is sent again unasked (the HTTP
client's stale-connection retry, under every front end).
Pure: no clock is read and nothing sleeps here; callers pass the time left and
sleep for what :meth:`RetryPolicy.delay` returns.

* Backoff is exponential with *full jitter* (a uniform draw below the doubling
  limit), so the retries of many requests hit by one outage do not march in
  step - the scheme AWS's SDKs use ("Exponential Backoff And Jitter", AWS
  Architecture Blog, 2015), capped at ``max_backoff``.
* A ``Retry-After`` on a 429 or 503 (RFC 9110, section 10.2.3: delay-seconds or
  an HTTP-date) is honoured as the least wait.  A server that asks for more
  than ``max_backoff``, or for longer than the time left, gets no early retry:
  that try is the last (curl does the same with ``--retry-max-time``).
* ``time_left``: the request's own deadline.  A wait that would pass it is not
  started.

The timeouts themselves are applied by the HTTP client, per try
(``surge.http.Timeout``: connect, read - silence, or a trickle - and the
whole ``max_time``); the ``connect_timeout`` and ``read_timeout`` they raise
are retried here like any transient transport failure.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

#: Transport failures worth another try: the next try may well succeed.
RETRYABLE_ERRORS = frozenset(
    {
        "dns_error",
        "connect_refused",
        "connect_timeout",
        "read_timeout",
        "write_timeout",
        "connection_reset",
    }
)
#: Transport failures before a request could reach the server: no connection
#: was made.  The only ones after which ``--retries`` sends a POST again.
UNSENT_ERRORS = frozenset({"dns_error", "connect_refused", "connect_timeout"})

#: RFC 9110, section 9.2.2: the methods whose effect, sent several times, is
#: that of one request.  Only these are sent again without being asked.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})
#: Statuses worth another try, as curl's ``--retry`` has them.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Statuses whose Retry-After is a request to wait (RFC 9110: 503, and 429 per RFC 6585).
RETRY_AFTER_STATUSES = frozenset({429, 503})
#: A Retry-After longer than this is not believed to be a number of seconds
#: (a day: no bulk job waits that long for one request).
RETRY_AFTER_MAX = 86_400.0


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A Retry-After header's wait in seconds (0 for a date in the past), or None
    if there is none or it is neither delay-seconds nor an HTTP-date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():  # delay-seconds = 1*DIGIT
        return min(float(int(value[:12])), RETRY_AFTER_MAX)
    from email.utils import parsedate_to_datetime  # an HTTP-date: rare, and email costs ~2 ms

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(0.0, seconds), RETRY_AFTER_MAX)


def may_resend(method: str, written: bool, unprocessed: bool = False) -> bool:
    """At most once: whether a request that failed on its connection may be
    sent again without anyone asking (a reused keep-alive connection the
    server had closed).  ``written``: a byte of the request was handed to the
    connection.  A request that is not idempotent (POST, PATCH, ...; a
    CONNECT-ed tunnel's first request is sent on a fresh connection, never
    resent) goes again only where nothing of it was written: the server cannot
    have processed it.  Once a byte was written, the server may have acted on
    it and lost only its answer - RFC 9110, section 9.2.2: a client SHOULD
    NOT retry such a request automatically (curl, httpx and urllib3 do not).
    ``--retries`` of such a request is the caller's explicit choice, not this.
    ``unprocessed``: the server said it did not act on the request (HTTP/2's
    GOAWAY above the request's stream, or REFUSED_STREAM: RFC 9113 8.7), which
    is as good as not written."""
    return not written or unprocessed or method in IDEMPOTENT_METHODS


@dataclass(frozen=True)
class RetryPolicy:
    """``retries``: tries after the first; ``backoff``: the first wait's limit,
    doubling per try up to ``max_backoff`` seconds."""

    retries: int = 0
    backoff: float = 0.5
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, not {self.retries}")
        if not 0 <= self.backoff <= self.max_backoff:
            raise ValueError(
                f"backoff must be between 0 and max_backoff ({self.max_backoff}),"
                f" not {self.backoff}"
            )

    def delay(
        self,
        attempt: int,
        *,
        retry_after: float | None = None,
        time_left: float | None = None,
        rng: random.Random | None = None,
    ) -> float | None:
        """Seconds to wait before try ``attempt + 1`` (``attempt`` tries have
        failed), or None: no more tries.  ``retry_after``: the server's wait, in
        seconds; ``time_left``: seconds until the request's deadline."""
        if attempt > self.retries:
            return None
        limit = min(self.max_backoff, self.backoff * 2 ** min(attempt - 1, 62))
        wait = (rng or random).uniform(0, limit)
        if retry_after is not None:
            if retry_after > self.max_backoff:
                return None  # asked to stay away longer than we would wait
            wait = max(wait, retry_after)
        if time_left is not None and wait >= time_left:
            return None
        return wait

    def status_worth_retrying(self, status: int) -> bool:
        return status in RETRYABLE_STATUSES

    def error_worth_retrying(self, error_class: str, method: str = "GET") -> bool:
        """A transport failure worth another try of ``method``: for a request
        that is not idempotent (POST, PATCH), only one that failed before any of
        it could reach the server (:data:`UNSENT_ERRORS`); after a read or
        write timeout or a reset the server may have acted on it, and
        ``--retries`` does not send it again (curl's ``--retry`` neither, for a
        reset).  A retryable status is another matter: the server answered."""
        if error_class not in RETRYABLE_ERRORS:
            return False
        return method in IDEMPOTENT_METHODS or error_class in UNSENT_ERRORS
