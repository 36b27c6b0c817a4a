"""A request's HTTP/2 header fields, made by surge itself with h2's outbound
passes off (http2._CONFIG): the same fields h2's own normalising and
validation would send, down to which are never indexed and the HPACK bytes on
the wire, for any head surge's header builder writes; and no head that h2
would have refused gets through."""

from __future__ import annotations

from typing import Any

import h2.utilities
import pytest
from hpack import Encoder, NeverIndexedHeaderTuple
from hypothesis import given, settings
from hypothesis import strategies as st

from surge.http import RequestError, headers
from surge.http.http2 import request_fields

_TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Names with a rule of their own in h2's passes or surge's, in any case.
_SPECIAL = [
    "Authorization",
    "proxy-authorization",
    "COOKIE",
    "Cookie",
    "TE",
    "Connection",
    "Keep-Alive",
    "Transfer-Encoding",
    "Upgrade",
    "Proxy-Connection",
    "Content-Length",
    "X-Api-Key",
]
_names = st.one_of(st.sampled_from(_SPECIAL), st.text(_TCHAR, min_size=1, max_size=12))
#: Values as a caller gives them: latin-1 text, whitespace around, tabs inside.
_values = st.one_of(
    st.sampled_from(["trailers", "Trailers", "gzip", "0", "", "a" * 19, "a" * 20]),
    st.text(
        st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
        max_size=40,
    ),
    st.text(" \tab", max_size=6),
)


def _head(fields: list[tuple[str, str]]) -> bytes:
    lines = [headers.header_line("Host", "example.test:8443")]
    lines += [headers.header_line(name, value) for name, value in fields]
    return b"GET /p?q=1 HTTP/1.1\r\n" + b"".join(lines) + b"\r\n"


def _h2s_own(fields: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """What h2 with its outbound passes on (its defaults) sends for these."""
    flags = h2.utilities.HeaderValidationFlags(
        is_client=True, is_trailer=False, is_response_header=False, is_push_promise=False
    )
    plain = [(bytes(n), bytes(v)) if not isinstance(n, str) else (n, v) for n, v in fields]
    plain = [NeverIndexedHeaderTuple(*f) if f[0] == b":path" else tuple(f) for f in plain]
    out = h2.utilities.normalize_outbound_headers(plain, flags)
    return list(h2.utilities.validate_outbound_headers(out, flags))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_names, _values), max_size=10))
def test_fields_are_what_h2s_own_passes_would_send(given_fields: list[tuple[str, str]]) -> None:
    blocks: dict[bytes, Any] = {}
    head = _head(given_fields)
    fields, body, more = request_fields(head, blocks)
    fields[1] = (b":scheme", b"https")  # as the stream does
    reference = _h2s_own(fields)
    assert [tuple(f) for f in fields] == [tuple(f) for f in reference]
    assert [type(f) for f in fields] == [type(f) for f in reference]
    assert Encoder().encode(fields) == Encoder().encode(reference)
    assert body == b""
    # The connection's parsed block, used again: the same fields, untouched
    # by what the first request's caller did with its list.
    again, _, more_again = request_fields(head.replace(b"/p?q=1", b"/other", 1), blocks)
    assert len(blocks) == 1
    assert again[3] == (b":path", b"/other")
    assert again[4:] == fields[4:] and again[1] == (b":scheme", b"") and more_again == more
    assert request_fields(head)[0][4:] == fields[4:]


@pytest.mark.parametrize(
    ("name", "value", "never_indexed"),
    [
        ("Authorization", "Bearer abc", True),
        ("Proxy-Authorization", "Basic eHg6eXk=", True),
        ("Cookie", "sid=1", True),
        ("Cookie", "sid=" + "x" * 16, False),
        ("X-Other", "1", False),
    ],
)
def test_credentials_never_enter_the_hpack_table(
    name: str, value: str, never_indexed: bool
) -> None:
    fields, _, _ = request_fields(_head([(name, value)]))
    (field,) = [f for f in fields if f[0] == name.lower().encode()]
    assert isinstance(field, NeverIndexedHeaderTuple) is never_indexed
    encoder = Encoder()
    encoder.encode(fields)
    table = [entry[0] for entry in encoder.header_table.dynamic_entries]
    assert (name.lower().encode() in table) is not never_indexed


@pytest.mark.parametrize(
    "head",
    [
        b"GET /p HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n",
        b"GET /p HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n",
        b"GET /p HTTP/1.1\r\nHost: h\r\nX-A: a\nb\r\n\r\n",
        b"GET /p HTTP/1.1\r\nHost: h\r\nX A: a\r\n\r\n",
        b"GET /p HTTP/1.1\r\nHost: h\r\nX-\xe9: a\r\n\r\n",
        b"GET /p HTTP/1.1\r\nHost: h\r\n: a\r\n\r\n",
        b"GET /p HTTP/1.1\r\nHost: h\r\n:path: /x\r\n\r\n",
        b"GET /p\x00 HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /p q HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET  HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /p HTTP/1.1\r\nX-A: a\r\n\r\n",
    ],
    ids=[
        "nul-in-value",
        "cr-in-value",
        "lf-in-value",
        "space-in-name",
        "non-ascii-name",
        "empty-name",
        "pseudo-name",
        "nul-in-target",
        "space-in-target",
        "no-target",
        "no-authority",
    ],
)
def test_a_head_h2_would_refuse_is_refused(head: bytes) -> None:
    """The builder never writes these; were one to reach HTTP/2, it is a
    protocol_error before any byte goes out, as h2's own check made it, and
    nothing of it is kept for the connection's next request."""
    blocks: dict[bytes, Any] = {}
    for _ in range(2):
        with pytest.raises(RequestError) as caught:
            request_fields(head, blocks)
        assert caught.value.error_class == "protocol_error"
    assert not blocks or head.startswith((b"GET /p\x00", b"GET /p q", b"GET  "))


def test_the_connections_parsed_blocks_are_bounded() -> None:
    blocks: dict[bytes, Any] = {}
    for i in range(1000):
        request_fields(_head([("Cookie", f"session={i:040d}")]), blocks)
        assert len(blocks) <= 32


# -- received fields: surge's one pass against h2's inbound passes -------------------------

from surge.http.http2 import check_received_fields  # noqa: E402

#: Bytes that matter to some rule: controls, space, tab, colon, upper case, DEL, high.
_RAW = st.binary(max_size=8) | st.sampled_from(
    [b"", b" ", b"\t", b"a ", b" a", b"a\tb", b"\x00", b"\r", b"\n", b"\x7f", b"\xff", b"A", b":"]
)
_received_names = st.one_of(
    st.sampled_from(
        [
            b":status",
            b":path",
            b":method",
            b":scheme",
            b":authority",
            b":protocol",
            b":other",
            b":",
            b"te",
            b"connection",
            b"keep-alive",
            b"proxy-connection",
            b"transfer-encoding",
            b"upgrade",
            b"content-length",
            b"content-type",
            b"Content-Type",
            b"x:y",
            b"",
        ]
    ),
    st.text("abcxyz-_:~!A \x00\x7f", min_size=0, max_size=6).map(str.encode),
    _RAW,
)
_received_values = st.one_of(
    st.sampled_from([b"200", b"204", b"trailers", b"TRAILERS", b"gzip", b"", b"x y"]),
    st.text(" \tab", max_size=4).map(str.encode),  # whitespace inside, or around
    _RAW,
)
_received = st.lists(st.tuples(_received_names, _received_values), max_size=6)


def _h2s_inbound(fields: list[tuple[bytes, bytes]], trailers: bool) -> str | None:
    """h2's inbound passes (its defaults) on these: None, or that they refuse."""
    flags = h2.utilities.HeaderValidationFlags(
        is_client=True, is_trailer=trailers, is_response_header=not trailers, is_push_promise=False
    )
    try:
        list(
            h2.utilities.validate_headers(
                h2.utilities.normalize_inbound_headers(fields, flags), flags
            )
        )
    except h2.exceptions.ProtocolError:
        return "refused"
    return None


def _surges_inbound(fields: list[tuple[bytes, bytes]], trailers: bool) -> str | None:
    try:
        kept = check_received_fields(list(fields), trailers=trailers)
    except h2.exceptions.ProtocolError:
        return "refused"
    assert kept == list(fields)
    return None


@settings(max_examples=3000, deadline=None)
@given(
    fields=st.one_of(
        _received,
        # most heads start with a good :status: the rest of them is then what counts
        _received.map(lambda rest: [(b":status", b"200"), *rest]),
    ),
    trailers=st.booleans(),
)
def test_received_fields_refused_exactly_where_h2s_passes_refuse(
    fields: list[tuple[bytes, bytes]], trailers: bool
) -> None:
    assert _surges_inbound(fields, trailers) == _h2s_inbound(fields, trailers), fields


@pytest.mark.parametrize(
    ("fields", "trailers", "verdict"),
    [
        ([(b":status", b"200"), (b"content-type", b"text/plain")], False, None),
        ([(b":status", b"200"), (b"Content-Type", b"text/plain")], False, "refused"),
        ([(b"content-type", b"text/plain"), (b":status", b"200")], False, "refused"),
        ([(b":status", b"200"), (b":status", b"204")], False, "refused"),
        ([(b":status", b"200"), (b":path", b"/")], False, "refused"),
        ([(b":status", b"200"), (b"transfer-encoding", b"chunked")], False, "refused"),
        ([(b":status", b"200"), (b"te", b"gzip")], False, "refused"),
        ([(b":status", b"200"), (b"te", b"Trailers")], False, None),
        ([(b":status", b"200"), (b"x", b" padded")], False, "refused"),
        ([(b":status", b"200"), (b"x", b"padded ")], False, "refused"),
        ([(b":status", b"200"), (b"x", b"tab\t")], False, "refused"),
        ([(b":status", b"200"), (b"x", b"a \tb")], False, None),
        ([(b":status", b"200"), (b"x", b"a\x00b")], False, "refused"),
        ([(b":status", b"200"), (b"x:y", b"1")], False, "refused"),
        ([(b":status", b"200"), (b"", b"1")], False, "refused"),
        ([(b"content-length", b"3")], False, "refused"),
        ([(b"grpc-status", b"0")], True, None),
        ([(b":status", b"200")], True, "refused"),
    ],
)
def test_received_fields_table(
    fields: list[tuple[bytes, bytes]], trailers: bool, verdict: str | None
) -> None:
    assert _surges_inbound(fields, trailers) == verdict == _h2s_inbound(fields, trailers)
