"""Response bytes, without a server: heads, chunked framing, gzip, Accept-Encoding."""

from __future__ import annotations

import gzip

import httptools
import pytest

from surge.sim import behaviour
from surge.sim import responses as r


class _Collector:
    def __init__(self) -> None:
        self.body = b""
        self.headers: dict[bytes, bytes] = {}
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


def _parse(data: bytes) -> tuple[int, _Collector]:
    collector = _Collector()
    parser = httptools.HttpResponseParser(collector)
    parser.feed_data(data)
    return parser.get_status_code(), collector


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        (b"gzip", True),
        (b"gzip, deflate, br", True),
        (b"br;q=1.0, gzip;q=0.5", True),
        (b"x-gzip", True),
        (b"GZIP", True),
        (b"*", True),
        (b"*;q=0", False),
        (b"gzip;q=0", False),
        (b"gzip;q=0, *", False),
        (b"identity", False),
        (b"br, deflate", False),
        (b"", False),
    ],
)
def test_accepts_gzip(value: bytes, allowed: bool) -> None:
    assert r.accepts_gzip(value) is allowed


def test_chunked_framing_has_several_chunks_and_round_trips() -> None:
    data = r.body(1000)
    wire = r.chunked(data)
    assert wire.endswith(b"\r\n0\r\n\r\n")
    assert wire.count(b"\r\n") >= 2 * 3 + 2
    status, parsed = _parse(r.head(200, "x.sim", length=None, is_chunked=True) + wire)
    assert (status, parsed.body, parsed.complete) == (200, data, True)


def test_gzip_bodies_are_deterministic_and_decode() -> None:
    assert r.gzipped(5000) == r.gzipped(5000)
    assert gzip.decompress(r.gzipped(5000)) == r.body(5000)
    assert gzip.decompress(b"".join(r.gzip_pieces(3 * r.WHOLE_BODY_MAX))) == b"".join(
        r.body_pieces(3 * r.WHOLE_BODY_MAX)
    )


@pytest.mark.parametrize(
    "name", ["x.sim", "gzip.sim", "chunked.sim", "gzip.chunked.sim", "status-404.big-7.sim"]
)
@pytest.mark.parametrize("gzip_ok", [True, False])
def test_final_response_parses(name: str, gzip_ok: bool) -> None:
    b = behaviour(name)
    response = r.final(b, gzip_ok=gzip_ok, keep_alive=True, head_only=False)
    assert response.body is not None
    status, parsed = _parse(response.head + response.body)
    assert status == b.status and parsed.complete
    decoded = gzip.decompress(parsed.body) if gzip_ok and b.gzip else parsed.body
    assert decoded == r.body(b.body_bytes)
    assert parsed.headers[b"x-sim-host"] == name.encode()


def test_streamed_bodies_frame_like_small_ones() -> None:
    b = behaviour("big-2m.gzip.sim")
    response = r.final(b, gzip_ok=True, keep_alive=True, head_only=False)
    assert response.body is None and b"Transfer-Encoding: chunked" in response.head
    _, parsed = _parse(response.head + b"".join(r.streamed_body(b, gzip_ok=True)))
    assert parsed.complete
    assert len(gzip.decompress(parsed.body)) == 2 * 1024 * 1024


def test_bodiless_statuses_have_no_body_or_length() -> None:
    response = r.final(behaviour("status-204.sim"), gzip_ok=False, keep_alive=True, head_only=False)
    assert response.body == b"" and b"Content-Length" not in response.head


def test_stalled_response_announces_more_than_it_sends() -> None:
    wire = r.stalled(behaviour("hang-body.sim"), keep_alive=True)
    status, parsed = _parse(wire)
    assert status == 200 and not parsed.complete
    assert int(parsed.headers[b"content-length"]) == 2 * len(parsed.body)


def test_garbage_is_not_http() -> None:
    with pytest.raises(httptools.HttpParserError):
        _parse(r.GARBAGE)
