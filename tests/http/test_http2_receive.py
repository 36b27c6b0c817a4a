"""surge's own frame dispatch (http2._H2Connection._receive_frame, which skips
h2's eager ``repr(frame)``) against h2's as shipped: the same events, the same
frames sent back and the same errors, frame by frame, for a response in order
and for frames that come after their stream was reset or ended."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hyperframe.frame
import pytest

from surge.http import http2

_FIELDS = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a"), (b":path", b"/")]


def _pair(ours: bool) -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    config = http2._CONFIG if ours else h2.config.H2Configuration(client_side=True)
    client = (http2._H2Connection if ours else h2.connection.H2Connection)(config)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    return client, server


def _headers(stream_id: int, end: bool = False) -> bytes:
    server_side = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    frame = hyperframe.frame.HeadersFrame(stream_id)
    frame.data = server_side.encoder.encode([(b":status", b"200"), (b"content-length", b"2")])
    frame.flags.add("END_HEADERS")
    if end:
        frame.flags.add("END_STREAM")
    return frame.serialize()


def _data(stream_id: int, end: bool = True) -> bytes:
    frame = hyperframe.frame.DataFrame(stream_id, data=b"ok")
    if end:
        frame.flags.add("END_STREAM")
    return frame.serialize()


def _in_order(client: h2.connection.H2Connection, server: Any) -> list[bytes]:
    client.send_headers(1, _FIELDS, end_stream=True)
    return [_headers(1), _data(1)]


def _after_reset(client: h2.connection.H2Connection, server: Any) -> list[bytes]:
    client.send_headers(1, _FIELDS, end_stream=True)
    client.reset_stream(1)
    return [_headers(1), _data(1)]


def _after_end(client: h2.connection.H2Connection, server: Any) -> list[bytes]:
    client.send_headers(1, _FIELDS, end_stream=True)
    return [_headers(1), _data(1), _data(1)]


def _forgotten(ended_by: str) -> Callable[[Any, Any], list[bytes]]:
    """Stream 1 closed (by ``ended_by``: this side's reset, or its response's
    end) and forgotten - h2 drops a closed stream when it next counts open
    ones, surge when the client lets go of it - then a frame on it."""

    def case(client: h2.connection.H2Connection, server: Any) -> list[bytes]:
        client.send_headers(1, _FIELDS, end_stream=True)
        if ended_by == "reset":
            client.reset_stream(1)
        else:
            client.receive_data(_headers(1) + _data(1))
        if isinstance(client, http2._H2Connection):
            client.let_go(1)
        client.send_headers(3, _FIELDS, end_stream=True)  # (h2 counts open streams here)
        assert 1 not in client.streams
        return [_data(1)]

    return case


def _never_opened(client: h2.connection.H2Connection, server: Any) -> list[bytes]:
    client.send_headers(3, _FIELDS, end_stream=True)
    return [_data(1)]


CASES: dict[str, Callable[[Any, Any], list[bytes]]] = {
    "in order": _in_order,
    "after a reset": _after_reset,
    "after the end": _after_end,
    "on a stream never opened": _never_opened,
    "after a reset, forgotten": _forgotten("reset"),
    "after the end, forgotten": _forgotten("end"),
}


def _play(ours: bool, case: Callable[[Any, Any], list[bytes]]) -> list[Any]:
    client, server = _pair(ours)
    frames = case(client, server)
    client.data_to_send()
    seen: list[Any] = []
    for raw in frames:
        try:
            events = client.receive_data(raw)
        except h2.exceptions.ProtocolError as e:
            seen.append(type(e).__name__)
            break
        seen.append([type(event).__name__ for event in events])
        seen.append(client.data_to_send())
    return seen


@pytest.mark.parametrize("case", sorted(CASES))
def test_surges_dispatch_does_what_h2s_does(case: str) -> None:
    assert http2._OWN_RECEIVE, "this h2 is not the one surge's dispatch was written for"
    assert _play(True, CASES[case]) == _play(False, CASES[case])
