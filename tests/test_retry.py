"""surge.retry: the one retry policy, alone and as surge fetch uses it against a
server on loopback that answers 503 with a Retry-After."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import surge
from surge.retry import RetryPolicy, may_resend, retry_after_seconds


@given(
    retries=st.integers(0, 8),
    backoff=st.floats(0, 5),
    attempt=st.integers(1, 12),
    seed=st.integers(0, 2**32),
)
def test_waits_stay_under_the_doubling_limit_and_the_cap(
    retries: int, backoff: float, attempt: int, seed: int
) -> None:
    policy = RetryPolicy(retries, backoff, max_backoff=10.0)
    wait = policy.delay(attempt, rng=random.Random(seed))
    if attempt > retries:
        assert wait is None
    else:
        assert wait is not None
        assert 0 <= wait <= min(10.0, backoff * 2 ** (attempt - 1))


def test_retry_after_is_the_least_wait_within_the_cap_and_the_time_left() -> None:
    policy = RetryPolicy(3, backoff=0.01, max_backoff=10.0)
    assert policy.delay(1, retry_after=2.0) == 2.0
    assert policy.delay(1, retry_after=11.0) is None  # longer than we would ever wait
    assert policy.delay(1, retry_after=2.0, time_left=1.5) is None  # past the deadline
    assert policy.delay(4, retry_after=0.0) is None  # out of tries


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("-1", None),
        ("1.5", None),
        ("soon", None),
        (None, None),
        ("9" * 40, 86_400.0),
    ],
)
def test_retry_after_delay_seconds(value: str | None, expected: float | None) -> None:
    assert retry_after_seconds(value) == expected


def test_retry_after_http_date() -> None:
    now = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds(later, now=now) == 30.0
    earlier = format_datetime(now - timedelta(hours=1), usegmt=True)
    assert retry_after_seconds(earlier, now=now) == 0.0


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="retries"):
        RetryPolicy(-1)
    with pytest.raises(ValueError, match="backoff"):
        RetryPolicy(1, backoff=20.0, max_backoff=10.0)


# ------------------------------------------------------- surge fetch against a real server


class Busy(BaseHTTPRequestHandler):
    """503 with ``Retry-After: <the path's number>`` for the first two requests of
    a path, then 200; every request's arrival time is kept."""

    arrivals: ClassVar[dict[str, list[float]]] = {}
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            seen = self.arrivals.setdefault(self.path, [])
            seen.append(time.monotonic())
            busy = len(seen) <= 2
        body = b"busy" if busy else b"ok"
        self.send_response(503 if busy else 200)
        if busy:
            self.send_header("Retry-After", self.path.strip("/"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def busy_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    Busy.arrivals = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_waits_as_long_as_retry_after_asks(busy_server: str) -> None:
    (record,) = surge.fetch_all([f"{busy_server}/1"], retries=3, retry_backoff=0.001)
    assert (record["status"], record["attempts"]) == (200, 3)
    first, second, third = Busy.arrivals["/1"]
    # the server's own clock: each retry came at least the second it asked for later
    assert second - first >= 1.0 and third - second >= 1.0


def test_fetch_gives_up_when_retry_after_is_beyond_max_time(busy_server: str) -> None:
    (record,) = surge.fetch_all([f"{busy_server}/3600"], retries=3, max_time=5.0)
    assert (record["status"], record["attempts"]) == (503, 1)
    assert len(Busy.arrivals["/3600"]) == 1


@pytest.mark.parametrize(
    ("method", "written", "allowed"),
    [
        *((m, True, True) for m in ("GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE")),
        *((m, True, False) for m in ("POST", "PATCH", "CONNECT", "PROPFIND", "LOCK")),
        *((m, False, True) for m in ("GET", "POST", "PATCH", "CONNECT")),
    ],
)
def test_only_an_idempotent_request_is_sent_again_once_written(
    method: str, written: bool, allowed: bool
) -> None:
    assert may_resend(method, written) is allowed


def test_a_write_timeout_is_retried_as_a_read_timeout_is() -> None:
    policy = RetryPolicy(retries=1)
    assert policy.error_worth_retrying("write_timeout")
    assert policy.error_worth_retrying("read_timeout")
