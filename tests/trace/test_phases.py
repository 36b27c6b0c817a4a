"""A request's time cut into phases: contiguous, complete, in the right phase."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from surge.http.timings import Timings
from surge.trace.phases import (
    CONNECT,
    DNS,
    EARLIER,
    PHASES,
    QUEUED,
    RECEIVE,
    SEND,
    TLS,
    WAIT,
    durations,
    hops,
    present,
    segments,
)


def fresh_tls() -> Timings:
    """A request on a new TLS connection: each phase 1 s long, from t=10."""
    t = Timings(10.0)
    t.started = t.dns_start = 11.0
    t.dns_end = 12.0
    t.connect_start = 13.0  # a second waiting for a handshake slot
    t.tcp_end = 14.0
    t.tls_end = 15.0
    t.connected = 16.0
    t.sent = 17.0
    t.first_byte = 18.0
    t.done = 19.0
    return t


def test_a_new_tls_connection_passes_through_every_phase_in_order() -> None:
    parts = segments(10.0, 19.5, fresh_tls(), tls=True)
    assert [PHASES[p] for p, _, _ in parts] == [
        "queued", "dns", "queued", "connect", "tls", "queued", "send", "wait", "receive",
    ]  # fmt: skip
    # the record is made a little after the last byte: the row ends at the last byte
    assert parts[-1][2] == 19.0
    spent = durations(parts)
    assert spent[QUEUED] == 3.0 and spent[DNS] == spent[TLS] == spent[RECEIVE] == 1.0
    assert spent[EARLIER] == 0.0


def test_plain_http_has_no_tls_phase() -> None:
    parts = segments(10.0, 19.0, fresh_tls(), tls=False)
    assert TLS not in {p for p, _, _ in parts}
    assert durations(parts)[QUEUED] == 4.0  # 14 -> 16 is the handover, not TLS


def test_a_reused_connection_skips_dns_connect_tls() -> None:
    t = Timings(5.0)
    t.started = t.connected = 5.5
    t.sent, t.first_byte, t.done = 6.0, 8.0, 9.0
    parts = segments(5.0, 9.0, t, tls=True)
    assert [p for p, _, _ in parts] == [QUEUED, SEND, WAIT, RECEIVE]
    happened = present(t, tls=True)
    assert not happened[DNS] and not happened[CONNECT] and not happened[TLS]


def test_retries_are_earlier_time_and_redirect_hops_have_their_own_phases() -> None:
    first = Timings(20.0)  # the last attempt began at 20; the input was picked up at 0
    first.started = first.dns_start = 21.0
    first.dns_end = first.connect_start = 21.5
    first.tcp_end = first.connected = 22.0
    first.sent, first.first_byte, first.done = 22.5, 23.5, 24.0
    first.url, first.status = "http://a.example/", 301
    last = Timings(20.0)
    last.started, last.hop_start, last.previous = 21.0, 25.0, first
    last.connected = 26.0  # a reused connection: no dns, connect
    last.sent, last.first_byte, last.done = 26.5, 27.0, 28.0
    spent = durations(segments(0.0, 28.5, last, tls=False, retried=True))
    assert spent[EARLIER] == 20.0  # the attempts before the last, with their back-off
    assert spent[QUEUED] == 1.0 + 2.0  # before the first hop; between the hops
    assert spent[DNS] == 0.5 and spent[CONNECT] == 0.5
    assert spent[WAIT] == 1.0 + 0.5 and spent[RECEIVE] == 0.5 + 1.0
    chain = hops(0.0, 28.5, last, url="http://b.example/", retried=True)
    assert [(h.begin, h.end) for h in chain] == [(0.0, 24.0), (24.0, 28.0)]
    assert [h.timings for h in chain] == [first, last]
    # without a retry, the moment before the first hop is queued, not "earlier"
    assert durations(segments(0.0, 28.5, last, tls=False))[EARLIER] == 0.0


def test_a_failure_ends_in_the_phase_it_failed_in() -> None:
    t = Timings(0.0)
    t.started = t.dns_start = 0.0
    t.dns_end = 0.1
    t.connect_start = 0.1  # the TCP connect never completed
    parts = segments(0.0, 10.0, t, tls=True)
    assert parts[-1] == (CONNECT, 0.1, 10.0)
    t.tcp_end, t.tls_end, t.connected, t.sent = 0.2, 0.3, 0.3, 0.3  # read timeout
    assert segments(0.0, 10.0, t, tls=True)[-1] == (WAIT, 0.3, 10.0)


def test_no_timings_at_all_is_all_queued() -> None:
    assert segments(1.0, 1.5, None, tls=False) == [(QUEUED, 1.0, 1.5)]
    assert not any(present(None, tls=False)[SEND:])


FIELDS = ("dns_start", "dns_end", "connect_start", "tcp_end", "tls_end", "connected", "sent",
          "first_byte", "done")  # fmt: skip


@given(
    gaps=st.lists(st.floats(0, 5), min_size=len(FIELDS) + 2, max_size=len(FIELDS) + 2),
    missing=st.sets(st.sampled_from(FIELDS)),
    tls=st.booleans(),
    tail=st.floats(0, 5),
)
def test_segments_always_tile_the_request_exactly(
    gaps: list[float], missing: set[str], tls: bool, tail: float
) -> None:
    """Whatever happened and whatever did not: consecutive, non-empty segments
    from start to the end, adjacent ones of different phases."""
    start = 100.0
    clock = start + gaps[0]
    t = Timings(clock)
    clock += gaps[1]
    t.started = clock
    for name, gap in zip(FIELDS, gaps[2:], strict=True):
        clock += gap
        if name not in missing:
            setattr(t, name, clock)
    end = clock + tail
    parts = segments(start, end, t, tls=tls)
    if parts:
        assert parts[0][1] == start
        assert parts[-1][2] == (t.done if t.done is not None else end)
    for (p1, _, b1), (p2, a2, _) in pairwise(parts):
        assert b1 == a2 and p1 != p2
    assert all(b > a for _, a, b in parts)
    assert abs(sum(durations(parts)) - ((t.done or end) - start if parts else 0)) < 1e-9
