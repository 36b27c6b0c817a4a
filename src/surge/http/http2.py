"""HTTP/2: one connection carries many requests, each on a stream of its own.

The framing, HPACK and the protocol's state machine are the ``h2`` package's
(python-hyper's sans-I/O HTTP/2: bytes in, events out, the same shape as the
llhttp parser connection.py drives); this module owns what ``h2`` leaves to
its user:

* :class:`HTTP2Connection`, the asyncio Protocol: it takes over a connection
  connection.py opened once TLS's ALPN said ``h2`` (or at once, for cleartext
  h2c with prior knowledge), feeds ``h2`` what the socket reads, and writes
  what ``h2`` has to send.  Its settings: no server push
  (SETTINGS_ENABLE_PUSH 0), a decoded header list bound (SETTINGS_MAX_HEADER_
  LIST_SIZE, enforced by ``h2``'s HPACK decoder) of connection.py's
  ``MAX_HEAD_BYTES``, and windows raised to :data:`CONNECTION_WINDOW` and
  :data:`STREAM_WINDOW`, so that a large body comes at the link's speed.  Data
  is acknowledged (WINDOW_UPDATE) as it is taken: at once for a body read
  whole, as the reader takes it for a streamed one, so a slow reader holds
  back its own stream only.
* :class:`H2Stream`, one request on it: it stands where connection.py's
  :class:`~surge.http.connection.HTTPConnection` stands for HTTP/1.1
  (``send``, ``send_body``, ``abort``, ``tls_info``, ...), so the client's
  request path, its deadlines and its records are the same for both; the
  response is the same :class:`~surge.http.connection.WireResponse`, with a
  head of ``HTTP/2 <status>`` and the header fields as lines.
* multiplex.py's ``Multiplexer`` (apart, so that a client that never meets
  HTTP/2 never loads ``h2``), the client's streams per origin: a connection that
  speaks HTTP/2 stays checked out of the client's pool while it carries a
  stream, and goes back to the pool as an idle connection when it carries
  none (so the pool's idle expiry, its per-host and global bounds, and its
  eviction of idle connections apply to it as to any).  A request to an
  origin takes a free stream slot (O(1)); with none, it waits in a FIFO queue
  for one (O(1)), and a second connection is opened only when every
  connection's streams are full and the per-host bound allows one more.
  While the first connection to an origin is being opened, other requests to
  it wait to see whether it speaks HTTP/2 (curl's wait for multiplexing)
  rather than each opening their own.

Failures: a GOAWAY ends the streams above its last stream id with an error
marked ``unprocessed`` (the server promised it did not act on them), as does
RST_STREAM with REFUSED_STREAM; the client sends such a request again on
another connection, a POST too (surge.retry.may_resend).  Any other reset is
``connection_reset`` (``protocol_error`` for a PROTOCOL_ERROR).  A malformed
response (RFC 9113 8.1.1) - connection-specific or invalid pseudo-header
fields, a Content-Length the DATA does not match - is its own stream's
``protocol_error`` (the stream is reset, the others on the connection go on:
:class:`_H2Stream`); a violation of the connection's framing - a header
list past the bound, HPACK that does not decode, a CONTINUATION flood
(``h2`` buffers at most 64 frames of one header block) - fails the
connection with ``protocol_error``, as does a flood of PING or SETTINGS
frames (:data:`MAX_ANSWERS` a second), which the client would otherwise
answer without end.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import re
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

import h2
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import h2.utilities
import hyperframe.frame
from hpack import NeverIndexedHeaderTuple

from surge.errors import RequestError
from surge.http.connection import (
    MAX_HEAD_BYTES,
    TLSInfo,
    WireResponse,
    _as_async,
    body_too_large,
)
from surge.http.tlssession import keep_session

if TYPE_CHECKING:
    from surge.http.connection import HTTPConnection
    from surge.http.deadlines import Deadlines, Expirable
    from surge.http.timings import Timings

#: The connection's receive window, raised from HTTP/2's 64 KiB as curl and
#: hyper raise theirs: a window is what a server may send before it waits for
#: an acknowledgement, so at 64 KiB a large body would come 64 KiB a round trip.
CONNECTION_WINDOW = 16 * 1024 * 1024
#: Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE).
STREAM_WINDOW = 4 * 1024 * 1024
#: Streams a new connection carries until the server's SETTINGS say how many
#: it allows (RFC 9113 6.5.2 lets a client assume 100, but a server allowing
#: fewer then refuses the rest): the first request goes at once, the others
#: wait the moment its SETTINGS take (they come with the handshake's answer),
#: and no second connection opens meanwhile (Multiplexer._more).
INITIAL_STREAMS = 1
#: The most streams surge opens on one connection at once, whatever the server allows.
MAX_STREAMS = 1000
#: PING and SETTINGS frames (each answered with an ACK) a server may send in a
#: second before the connection is failed as a flood (CVE-2019-9512/9515's class).
MAX_ANSWERS = 1000
#: Past this stream id, a connection takes no new stream (ids end at 2^31 - 1).
_LAST_STREAM_ID = 2**31 - 2 * MAX_STREAMS - 1

#: Request header fields HTTP/2 forbids (RFC 9113 8.2.2), dropped from the
#: HTTP/1.1 head the client builds; Host becomes ``:authority``.
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"host"}
)

_REFUSED = h2.errors.ErrorCodes.REFUSED_STREAM
_PROTOCOL_CODES = frozenset(
    {
        h2.errors.ErrorCodes.PROTOCOL_ERROR,
        h2.errors.ErrorCodes.COMPRESSION_ERROR,
        h2.errors.ErrorCodes.FRAME_SIZE_ERROR,
        h2.errors.ErrorCodes.FLOW_CONTROL_ERROR,
        h2.errors.ErrorCodes.HTTP_1_1_REQUIRED,
    }
)

#: h2's passes over header fields are off both ways, each done by surge in one
#: loop with the same rules: a request's fields come from the head surge built
#: and checked itself, and :func:`request_fields` does what h2's outbound passes
#: would (lower-case names, no connection-specific fields, credentials never
#: indexed); a response's are checked by :func:`check_received_fields` as h2's
#: inbound passes would (RFC 9113 8.2 and 8.3), where h2 chains about ten
#: generators over every field, each way (~12 us a request's, 15-25 us a
#: response's).  h2's inbound normalising only joins ``cookie`` fields, which a
#: response does not carry.
_CONFIG = h2.config.H2Configuration(
    client_side=True,
    header_encoding=None,
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)

#: A received field name: lower case, no control, space, colon or byte above
#: 0x7e, but for a pseudo-header's leading colon (RFC 9113 8.2.1).
_RECEIVED_NAME = re.compile(rb":?[\x21-\x39\x3b-\x40\x5b-\x7e]+")
#: What no received field value may hold (RFC 9113 8.2.1).
_BAD_VALUE = re.compile(rb"[\0\r\n]")
#: Fields HTTP/2 forbids: connection-specific (RFC 9113 8.2.2).
_CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"}
)
_PSEUDO = frozenset({b":method", b":scheme", b":authority", b":path", b":status", b":protocol"})
_REQUEST_PSEUDO = _PSEUDO - {b":status"}


def check_received_fields(headers: list[Any], *, trailers: bool) -> list[Any]:
    """A response's (or 1xx's) fields, or its ``trailers``, as h2's inbound
    validation would pass them, in one loop; else h2's ProtocolError (which
    :class:`_H2Stream` makes the stream's error): a name empty, upper case or
    holding a byte no name may; a value with NUL, CR or LF, or starting or
    ending with a space or tab; ``te`` other than ``trailers``; a
    connection-specific field; a pseudo-header unknown, repeated, after a
    regular field, in trailers, or a request's; no ``:status``."""
    seen: set[bytes] = set()
    regular = False
    for header in headers:
        name, value = header[0], header[1]
        if _RECEIVED_NAME.fullmatch(name) is None:
            raise h2.exceptions.ProtocolError(f"a field name that is not valid: {name!r}")
        if value and (
            value[0] in (0x20, 0x09)
            or value[-1] in (0x20, 0x09)
            or _BAD_VALUE.search(value) is not None
        ):
            raise h2.exceptions.ProtocolError(f"a field value that is not valid in {name!r}")
        if name[0] == 0x3A:  # ':'
            if regular or name in seen or name not in _PSEUDO:
                raise h2.exceptions.ProtocolError(f"a pseudo-header out of place: {name!r}")
            seen.add(name)
            continue
        regular = True
        if name in _CONNECTION_SPECIFIC or (name == b"te" and value.lower() != b"trailers"):
            raise h2.exceptions.ProtocolError(f"a connection-specific field: {name!r}")
    if trailers:
        if seen:
            raise h2.exceptions.ProtocolError(f"pseudo-headers in trailers: {sorted(seen)}")
    elif b":status" not in seen or seen & _REQUEST_PSEUDO:
        raise h2.exceptions.ProtocolError(f"a response's pseudo-headers: {sorted(seen)}")
    return headers


#: Kept out of HPACK's dynamic table, as h2's own outbound pass would (after
#: Firefox and nghttp2): credentials, and cookies short enough to guess.
_NEVER_INDEXED = frozenset({b"authorization", b"proxy-authorization"})

#: What no field of a request head may hold once it is split into lines: a
#: lone CR or LF or a NUL (RFC 9113 8.2.1).  surge's head builder refuses them
#: first; this is the last check before h2, whose own is off.
_BAD_HEAD = re.compile(rb"[\0\r\n]")
#: RFC 9110's token, the only names surge's head builder writes.
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")


class _Malformed(Exception):
    """A response ``h2`` found malformed inside one stream, raised through
    ``h2``'s frame loop to :meth:`_H2Connection._receive_frame` (which would
    otherwise end the whole connection)."""

    def __init__(self, stream_id: int, error: h2.exceptions.ProtocolError) -> None:
        if isinstance(error, h2.exceptions.InvalidBodyLengthError):
            detail = (
                f"{error.actual_length:,} bytes of content against its content-length"
                f" of {error.expected_length:,}"
            )
        else:
            detail = str(error) or type(error).__name__
        super().__init__(detail)
        self.stream_id = stream_id


class StreamMalformed(h2.events.Event):
    """The event for a malformed response (RFC 9113 8.1.1: a stream error): its
    stream was reset (PROTOCOL_ERROR), the connection carries on.  ``flow``:
    the flow-controlled length of the DATA frame that was found bad, for the
    connection's window to get back."""

    def __init__(self, stream_id: int, detail: str, flow: int) -> None:
        self.stream_id = stream_id
        self.detail = detail
        self.flow = flow


#: Final statuses whose response has no content (RFC 9110 6.4.1), DATA or not.
_NO_CONTENT = frozenset({b"204", b"304"})


def _status_of(headers: Any) -> bytes | None:
    for name, value in headers:
        if name == b":status":
            return bytes(value)
    return None


class _H2Stream(h2.stream.H2Stream):
    """h2's stream, whose check of what the server sent on it - the response's
    header fields (pseudo-headers, connection-specific fields), its
    Content-Length against the DATA - raises a stream's error, not the
    connection's: RFC 9113 8.1.1 makes a malformed response a stream error,
    and h2 raises one ProtocolError for both kinds.  What h2 checks before a
    stream sees the frame (HPACK decoding and its size bound, frame sizes,
    flow control) stays the connection's."""

    def _process_received_headers(
        self,
        headers: Any,
        header_validation_flags: h2.utilities.HeaderValidationFlags,
        header_encoding: bool | str | None,
    ) -> list[Any]:
        if header_validation_flags.is_push_promise:  # (surge refuses them): h2's own passes
            return list(
                h2.utilities.validate_headers(
                    h2.utilities.normalize_inbound_headers(headers, header_validation_flags),
                    header_validation_flags,
                )
            )
        return check_received_fields(
            headers if type(headers) is list else list(headers),
            trailers=header_validation_flags.is_trailer,
        )

    def receive_headers(
        self, headers: Any, end_stream: bool, header_encoding: bool | str | None
    ) -> tuple[list[hyperframe.frame.Frame], list[h2.events.Event]]:
        expected = self._expected_content_length
        try:
            frames, events = super().receive_headers(headers, end_stream, header_encoding)
            kind = type(events[0])
            if kind is h2.events.TrailersReceived:
                # h2 reads the trailers' (absent) Content-Length over the head's.
                self._expected_content_length = expected
            elif kind is h2.events.InformationalResponseReceived:
                if _status_of(headers) == b"101":
                    raise h2.exceptions.ProtocolError(
                        "a 101 (Switching Protocols), which HTTP/2 does not have (RFC 9113 8.6)"
                    )
                self._expected_content_length = expected
            elif _status_of(headers) in _NO_CONTENT:
                # RFC 9110 6.4.1: no content, whatever its Content-Length says
                # (a 304's describes the representation); h2 does so for HEAD.
                self._expected_content_length = 0
            if end_stream:
                # h2 matches a Content-Length against DATA only as DATA comes:
                # a stream ended by its HEADERS or its trailers is checked here.
                self._track_content_length(0, end_stream=True)
        except h2.exceptions.StreamClosedError:
            raise  # h2's own handling of frames on closed streams
        except h2.exceptions.ProtocolError as e:
            raise _Malformed(self.stream_id, e) from e
        return frames, events

    def receive_data(
        self, data: bytes, end_stream: bool, flow_control_len: int
    ) -> tuple[list[hyperframe.frame.Frame], list[h2.events.Event]]:
        try:
            return super().receive_data(data, end_stream, flow_control_len)
        except h2.exceptions.StreamClosedError:
            raise
        except h2.exceptions.ProtocolError as e:
            raise _Malformed(self.stream_id, e) from e


class _H2Connection(h2.connection.H2Connection):
    """h2's connection, with a GOAWAY read as RFC 9113 section 6.8 does: streams
    at or below its last stream id may still complete.  h2 moves its state
    machine to CLOSED on a GOAWAY (python-hyper/h2 #1181) and then refuses
    every later frame as a protocol error - even the response of a stream the
    GOAWAY promised to finish, which nginx with ``keepalive_timeout 0`` sends
    right after it - and drops what was queued to send (the acknowledgements
    of DATA already read).  Here the state stays open and the queue kept;
    :meth:`HTTP2Connection._goaway` ends the streams above the last id, and
    no new stream starts on a draining connection (``draining``)."""

    def _receive_goaway_frame(
        self, frame: hyperframe.frame.GoAwayFrame
    ) -> tuple[list[hyperframe.frame.Frame], list[h2.events.Event]]:
        state = self.state_machine.state
        queued = self._data_to_send
        frames, events = super()._receive_goaway_frame(frame)
        if state is not h2.connection.ConnectionState.CLOSED:
            self.state_machine.state = state
            self._data_to_send = queued
        return frames, events

    @property
    def open_outbound_streams(self) -> int:
        """The streams open, for h2's check of the server's limit before a new
        one starts: the size of ``streams`` - an upper bound, since
        :meth:`let_go` drops each stream as surge is done with it, so only
        streams in flight (and one closed within this read) are there - and
        the exact count only at the limit.  h2's own count walks every stream
        on each new one: O(streams in flight) a request, 1,000 at
        MAX_STREAMS, the hidden O(N) of httpcore #1035."""
        count = len(self.streams)
        if count < self.remote_settings.max_concurrent_streams:
            return count
        return self._open_streams(int(self.config.client_side))

    def let_go(self, stream_id: int) -> None:
        """Forget a closed stream, as h2's count does when it meets one (which
        :attr:`open_outbound_streams` no longer lets it): its frames still
        coming are read as a closed stream's."""
        stream = self.streams.get(stream_id)
        if stream is not None and stream.closed:
            del self.streams[stream_id]
            self._closed_streams[stream_id] = stream.closed_by

    def _receive_headers_frame(
        self, frame: hyperframe.frame.HeadersFrame
    ) -> tuple[list[hyperframe.frame.Frame], list[h2.events.Event]]:
        stream_id = frame.stream_id
        if (
            stream_id not in self.streams
            and stream_id % 2
            and stream_id <= self.highest_outbound_stream_id
        ):
            # One of ours, closed and let go of (h2 forgets a closed stream
            # once it counts open ones): a late answer to a stream we reset
            # (RFC 9113 5.4.2: ignored), which h2 would take for a stream the
            # server opens and end the connection ("Max inbound streams is 0").
            # Decoded all the same: the HPACK table is the connection's.
            h2.connection._decode_headers(self.decoder, frame.data)
            return [], []
        return super()._receive_headers_frame(frame)

    def _begin_new_stream(
        self, stream_id: int, allowed_ids: h2.connection.AllowedStreamIDs
    ) -> h2.stream.H2Stream:
        stream = super()._begin_new_stream(stream_id, allowed_ids)
        stream.__class__ = _H2Stream  # (the same object: h2 builds it with no hook)
        return stream

    def _receive_frame(self, frame: hyperframe.frame.Frame) -> list[h2.events.Event]:
        """A frame through h2's handler for its type, as h2's own method does,
        but for its first line: h2 formats ``repr(frame)`` for a trace line on
        every frame it receives, logger or none (1-3 us a frame, a HEADERS
        block hex-encoded whole; two frames a small response).  The rules
        after a handler fails are h2's (RFC 9113 5.1 and 5.4.2): a frame on a
        stream this side reset is answered with a RST_STREAM, one on a stream
        ended normally (or never opened) ends the connection."""
        if not _OWN_RECEIVE:
            return self._receive_frame_h2(frame)
        events: list[h2.events.Event]
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except h2.exceptions.StreamClosedError as e:
            if not self._stream_is_closed_by_reset(e.stream_id):
                raise
            self._reset_again(e.stream_id, e.error_code)
            events = list(e._events)
        except h2.exceptions.StreamIDTooLowError as e:
            if self._stream_is_closed_by_reset(e.stream_id):
                self._reset_again(e.stream_id, h2.errors.ErrorCodes.STREAM_CLOSED)
                events = []
            elif self._stream_is_closed_by_end(e.stream_id):
                raise h2.exceptions.StreamClosedError(e.stream_id) from e
            else:
                raise
        except _Malformed as e:
            return self._malformed(frame, e)
        else:
            self._prepare_for_sending(frames)
        return events

    def _reset_again(self, stream_id: int, code: int) -> None:
        reset = hyperframe.frame.RstStreamFrame(stream_id)
        reset.error_code = code
        self._prepare_for_sending([reset])

    def _receive_frame_h2(self, frame: hyperframe.frame.Frame) -> list[h2.events.Event]:
        """h2's own handling (an h2 whose internals :data:`_OWN_RECEIVE` does
        not know)."""
        try:
            return super()._receive_frame(frame)
        except _Malformed as e:
            return self._malformed(frame, e)

    def _malformed(self, frame: hyperframe.frame.Frame, e: _Malformed) -> list[h2.events.Event]:
        # Reset that stream alone; closed at both ends already (its
        # END_STREAM came with the bad head), it has nothing to reset.
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.reset_stream(e.stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)
        flow = frame.flow_controlled_length if type(frame) is hyperframe.frame.DataFrame else 0
        return [StreamMalformed(e.stream_id, str(e), flow)]


#: Whether this h2 is one whose frame handling :meth:`_H2Connection._receive_frame`
#: knows (4.x: its dispatch table and closed-stream bookkeeping); another gets
#: h2's own, repr and all.
_OWN_RECEIVE = h2.__version__.startswith("4.") and all(
    hasattr(h2.connection.H2Connection, name)
    for name in ("_stream_is_closed_by_reset", "_stream_is_closed_by_end", "_prepare_for_sending")
)


def _data_body_repr(frame: hyperframe.frame.DataFrame) -> str:
    """hyperframe's ``repr`` of a DATA frame's body, the same text, without
    its cost: h2 formats ``repr(frame)`` for a trace log line on every frame
    it receives, logger or not, and hyperframe's default serializes the body
    (a copy of every byte) and hex-encodes all of it to show 10 bytes.  That
    was about a fifth of the CPU of reading a large body over HTTP/2 (cProfile
    of a 200 MB GET from nginx)."""
    padding = frame.serialize_padding_data()
    size = len(padding) + len(frame.data) + frame.pad_length
    if not size:
        return "None"
    first = (padding + bytes(frame.data[:10]) + b"\0" * 10)[: min(size, 10)]
    return "<hex:" + binascii.hexlify(first).decode("ascii") + ("..." if size > 10 else "") + ">"


# Only over the hyperframe this was written against (6.x: a ``_body_repr``
# method); another keeps its own, slower but right.
_DEFAULT_DATA_REPR = getattr(hyperframe.frame.DataFrame, "_body_repr", None)
if _DEFAULT_DATA_REPR is not None and hyperframe.__version__.startswith("6."):
    hyperframe.frame.DataFrame._body_repr = _data_body_repr  # type: ignore[method-assign,assignment]


def _code_name(code: int) -> str:
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return f"error code {code:#x}"


def refused(detail: str) -> RequestError:
    """The error of a stream the server said it did not process (GOAWAY above
    its last stream id, or REFUSED_STREAM): ``unprocessed``, so it may be sent
    again whatever its method."""
    error = RequestError("connection_reset", detail)
    error.unprocessed = True
    return error


#: The parsed field blocks one connection keeps (:func:`request_fields`):
#: a client's requests to one origin differ in their request line, rarely in
#: their fields.  Bounded: emptied when full (a cookie that changes on every
#: response, a body's Content-Length, make new blocks).
_FIELD_BLOCKS = 32

_Block = tuple[list[tuple[bytes, bytes]], bytes, bool, bool]


def request_fields(
    data: bytes, blocks: dict[bytes, _Block] | None = None
) -> tuple[list[tuple[bytes, bytes]], bytes, bool]:
    """The HTTP/2 header list of an HTTP/1.1 request head the client built
    (``data``, maybe with its body behind the blank line), the body there, and
    whether a body is still to come (``send_body``): pseudo-header fields
    first (Host as ``:authority``), names lower-cased, connection-specific
    fields dropped (RFC 9113 8.2.2), credentials and short cookies never
    indexed, anything h2 would refuse refused (see ``_CONFIG``).  ``blocks``:
    the connection's parsed field blocks, by their bytes."""
    line_end = data.find(b"\r\n")
    end = data.find(b"\r\n\r\n", line_end)
    block, body = data[line_end:end], data[end + 4 :]
    parsed = None if blocks is None else blocks.get(block)
    if parsed is None:
        parsed = _parse_block(block)
        if blocks is not None:
            if len(blocks) >= _FIELD_BLOCKS:
                blocks.clear()
            blocks[block] = parsed
    fields, authority, chunked, length = parsed
    method, _, rest = data[:line_end].partition(b" ")
    target = rest.rpartition(b" ")[0]
    if not (method and target) or _BAD_HEAD.search(target) or b" " in target:
        raise RequestError("protocol_error", "HTTP/2: the request's method or target is not valid")
    pseudo = [
        (b":method", method),
        (b":scheme", b""),
        (b":authority", authority),
        # Not into HPACK's dynamic table: a path is rarely sent twice, and hpack
        # searches that table entry by entry for each field it encodes - filled
        # with ~50 paths, 7 fields a request walked ~350 entries (the largest
        # cost of a GET in cProfile), and the fields that do repeat were pushed
        # out.
        NeverIndexedHeaderTuple(b":path", target),
    ]
    return pseudo + fields, body, chunked or (length and not body)


def _parse_block(block: bytes) -> _Block:
    """A head's field lines (``block``: from the request line's CRLF to the
    blank line's) as HTTP/2 fields, its Host, whether it says
    Transfer-Encoding, and whether it gives a Content-Length above 0."""
    authority = b""
    fields: list[tuple[bytes, bytes]] = []
    chunked = length = False
    for line in block.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip()
        if not _NAME.fullmatch(name) or _BAD_HEAD.search(value) is not None:
            raise RequestError("protocol_error", f"HTTP/2: a request field is not valid: {name!r}")
        if name in _HOP_BY_HOP:
            if name == b"host":
                authority = value
            elif name == b"transfer-encoding":
                chunked = True
            continue
        if name == b"te" and value.lower() != b"trailers":
            continue
        if name == b"content-length" and value not in (b"0", b""):
            length = True
        if name in _NEVER_INDEXED or (name == b"cookie" and len(value) < 20):
            fields.append(NeverIndexedHeaderTuple(name, value))
            continue
        fields.append((name, value))
    if not authority:
        raise RequestError("protocol_error", "HTTP/2: the request has no Host for :authority")
    return fields, authority, chunked, length


class H2Stream:
    """One request on an :class:`HTTP2Connection`: what the client's request
    path uses of a connection (connection.py's ``HTTPConnection``)."""

    __slots__ = (
        "_active",
        "_deadline",
        "_idle",
        "_slot",
        "_unacked",
        "conn",
        "connect_timings",
        "ended",
        "heard",
        "id",
        "loop",
        "response",
        "sent_end",
        "serial",
    )

    #: Not an HTTP/2 connection itself: the client tells the two apart by this.
    multiplexed = False
    #: What goes back to the multiplexer, not to the pool (the client reads it).
    is_stream = True
    #: Its response is HTTP/2 (the client's Timings.http2; HTTPConnection's is False).
    http2 = True

    def __init__(self, conn: HTTP2Connection) -> None:
        self.conn = conn
        self.serial = conn.serial
        self.loop = conn.loop
        self.id = 0  # set by send
        self.response: WireResponse | None = None
        self.connect_timings: Timings | None = None
        self.ended = False  # let go of (its slot freed)
        #: Something of a response came (a status, interim or final; DATA only
        #: ever follows a final one, h2 refuses it before): the server
        #: processed the request, whatever a GOAWAY or reset says.
        self.heard = False
        self.sent_end = False  # END_STREAM sent
        self._slot: set[Expirable] | None = None
        self._idle: float | None = None
        self._deadline = 0.0
        self._active = 0.0
        self._unacked = 0  # streamed: DATA received and not yet acknowledged

    # -- the connection's interface, as the client uses it --------------------------

    @property
    def closed(self) -> bool:
        return self.conn.closed

    @property
    def requests(self) -> int:
        return self.conn.requests

    @property
    def address(self) -> tuple[str, int] | None:
        return self.conn.address

    @property
    def tls(self) -> tuple[str | None, str | None, str | None] | None:
        """(version, cipher, ALPN), as ``HTTPConnection.tls``."""
        return self.conn.tls

    @property
    def key(self) -> tuple[str, str, int]:
        return self.conn.key

    @property
    def connect_attempts(self) -> int:
        return self.conn.connect_attempts

    def tls_info(self) -> TLSInfo | None:
        return self.conn.tls_info()

    def send(
        self,
        data: bytes,
        is_head: bool,
        deadline: float,
        limit: float,
        stream: bool = False,
        discard: bool = False,
        idle: float | None = None,
    ) -> WireResponse:
        """As ``HTTPConnection.send``: the request's HEADERS (and its body, if
        ``data`` carries one) on a new stream."""
        conn = self.conn
        if conn.closed or conn.transport is None:
            raise RequestError("connection_reset", "connection closed before the request")
        if conn.draining:  # GOAWAY came after the slot was given: not sent, so sent again
            raise refused("HTTP/2: the server is going away; the request was not sent")
        # Before the stream takes a deadline slot or a response: a field it
        # refuses leaves nothing of the request behind.
        headers, body, more = request_fields(data, conn.field_blocks)
        loop = self.loop
        response = self.response = WireResponse(
            loop.create_future(), is_head, limit, loop.create_future() if stream else None
        )
        if discard:
            response.discard = True
        self._idle = idle
        self._deadline = deadline
        if idle is not None:
            now = self._active = loop.time()
            if now + idle < deadline:
                deadline = now + idle
        self._slot = conn.deadlines.add(self, deadline)
        headers[1] = (b":scheme", conn.scheme)
        h2conn = conn.h2
        try:
            stream_id = self.id = h2conn.get_next_available_stream_id()
            end = not body and not more
            h2conn.send_headers(stream_id, headers, end_stream=end)
        except h2.exceptions.ProtocolError as e:
            # Nothing went out (the server lowered its stream limit, say): the
            # connection carries on, and this request may go again.
            self._unslot()
            self.response = None
            self.id = 0
            raise refused(f"HTTP/2: cannot open a stream: {e}") from None
        conn.streams[stream_id] = self
        conn.started += 1
        self.sent_end = end
        if body:
            conn.queue_data(self, body, end=not more)
        conn.flush()
        return response

    def end_body(self) -> None:
        """End the request's stream: no more body comes (see AsyncClient.request)."""
        if not self.sent_end:
            self.conn.queue_data(self, b"", end=True)
            self.conn.flush()

    async def send_body(self, chunks: Any, chunked: bool, response: WireResponse) -> int:
        """As ``HTTPConnection.send_body``: the body as DATA frames, each chunk
        sent as the stream's and the connection's windows allow."""
        sent = 0
        aiter = getattr(chunks, "__aiter__", None)
        source = (chunks if aiter is not None else _as_async(chunks)).__aiter__()
        conn = self.conn
        while not self.sent_end:
            try:
                chunk = await anext(source)
            except StopAsyncIteration:
                chunk = b""
                last = True
            else:
                last = False
                if not chunk:
                    continue
            if conn.closed or response.done.done():
                return sent
            self._active = self.loop.time()
            waiter = conn.queue_data(self, chunk, end=last)
            conn.flush()
            sent += len(chunk)
            if waiter is not None:
                await waiter
            if last:
                break
        return sent

    def abort(self) -> None:
        """The caller gives up on this request: its stream is reset (CANCEL),
        the connection carries on."""
        self.conn.cancel(self)

    def close(self) -> None:
        self.abort()

    # -- the response, fed by the connection ------------------------------------------

    def _still_writing(self, response: WireResponse) -> bool:
        """Whether the request is still going out as its exchange times out (as
        HTTPConnection's): body bytes wait for the server's flow-control window,
        or in the transport - and no byte of an answer came first."""
        if response.first_byte is not None:
            return False
        conn = self.conn
        transport = conn.transport
        return self.id in conn._pending or (
            transport is not None and transport.get_write_buffer_size() > 0
        )

    def expire(self) -> None:
        """The deadline slot came: the whole deadline passed, or maybe the read
        (idle) timeout (then checked against the stream's last activity)."""
        response = self.response
        if response is None:
            return
        idle = self._idle
        now = self.loop.time()
        if idle is not None and now < self._deadline:
            paused = self._unacked > 0 and response.resume is not None
            due = now + idle if paused else self._active + idle
            if due > now:
                self._slot = self.conn.deadlines.add(self, min(due, self._deadline))
                return
            if self._still_writing(response):
                self.fail(
                    RequestError(
                        "write_timeout",
                        f"the server took none of the request body for {idle:g} s"
                        " (the read timeout)",
                    )
                )
                return
            self.fail(
                RequestError(
                    "read_timeout",
                    f"no data from the server for {idle:g} s (the read timeout)",
                    status=response.status if response.head_done else None,
                )
            )
            return
        if self._still_writing(response):
            self.fail(
                RequestError(
                    "write_timeout", f"timed out sending the request (limit {response.limit:g} s)"
                )
            )
            return
        where = "the body" if response.head_done else "the response"
        self.fail(
            RequestError(
                "read_timeout",
                f"timed out waiting for {where} (limit {response.limit:g} s)",
                status=response.status if response.head_done else None,
            )
        )

    def fail(self, error: RequestError) -> None:
        """End the exchange with ``error`` (the stream is reset if still open).
        An ``unprocessed`` error - a GOAWAY above the stream, REFUSED_STREAM -
        for a stream whose response had begun is not believed: the response
        is the server's word that it processed the request, which is then
        never sent again unless its method allows (surge.retry.may_resend)."""
        response = self.response
        self._unslot()
        if response is None:
            return
        if error.unprocessed and self.heard:
            error = RequestError(
                "connection_reset",
                f"{error.detail}; but its response had begun, so it was processed",
                status=response.status if response.head_done else None,
            )
        self.response = None
        response.keep_alive = False
        if not response.done.done():
            response.done.set_exception(error)
            response.done.exception()
        ready = response.head_ready
        if ready is not None:
            if not ready.done():
                ready.set_exception(error)
                ready.exception()
            response._wake()
        self.conn.forget(self, reset=True)

    def _unslot(self) -> None:
        slot = self._slot
        if slot is not None:
            slot.discard(self)
            self._slot = None

    def headers_received(self, headers: list[tuple[bytes, bytes]]) -> None:
        response = self.response
        if response is None:
            return
        self.heard = True
        self._active = self.loop.time()
        if response.first_byte is None:
            response.first_byte = perf_counter()
        status = b""
        lines = []
        encodings = []
        for name, value in headers:
            if name[:1] == b":":
                if name == b":status":
                    status = value
                continue
            lines.append(name + b": " + value)
            if name == b"content-encoding":
                encodings.append(value.strip())
        if not status.isdigit() or len(status) != 3 or status[:1] == b"0":
            self.fail(RequestError("protocol_error", f"HTTP/2: bad :status {status[:20]!r}"))
            return
        response.status = int(status)
        response.head = b"\r\n".join([b"HTTP/2 " + status, *lines])
        response.head_done = True
        response.keep_alive = True
        if encodings:
            response.content_encoding = b", ".join(e for e in encodings if e).lower() or None
        ready = response.head_ready
        if ready is not None:
            ready.set_result(None)

    def data_received(self, data: bytes, flow: int) -> int:
        """DATA for this stream; ``flow``: its flow-controlled length (padding
        in).  Returns how much of it to acknowledge now (the connection does,
        once per read): all of it, or none for a streamed body (acknowledged
        as its reader takes it)."""
        response = self.response
        conn = self.conn
        if response is None or not data:  # (an empty DATA frame that ends the stream)
            return flow
        self._active = self.loop.time()
        received = response.body_bytes = response.body_bytes + len(data)
        if response.head_ready is not None:  # streamed: acknowledged as the reader takes it
            response.body.append(data)
            response.buffered += len(data)
            self._unacked += flow
            if response.resume is None:
                response.resume = self._taken
            response._wake()
            return 0
        if received > conn.body_cap:
            self.fail(body_too_large(conn.body_cap))
        elif not response.discard:
            response.body.append(data)
        return flow

    def _taken(self) -> None:
        """The streamed body's reader took what had come: the window reopens."""
        unacked, self._unacked = self._unacked, 0
        conn = self.conn
        if unacked and not conn.closed and self.id in conn.streams:
            conn.h2.acknowledge_received_data(unacked, self.id)
            conn.flush()

    def ended_by_server(self) -> None:
        """END_STREAM: the response is complete."""
        response = self.response
        if response is None:
            return
        if not response.head_done:
            self.fail(RequestError("protocol_error", "HTTP/2: the stream ended without a response"))
            return
        self._unslot()
        self.response = None
        conn = self.conn
        conn.requests += 1
        if conn.resume is not None and keep_session(conn.resume, conn._ssl_object):
            conn.resume = None
        conn.forget(self, reset=not self.sent_end)  # (a body not all read: acknowledged)
        if not response.done.done():
            response.done.set_result(None)
        ready = response.head_ready
        if ready is not None:
            if not ready.done():
                ready.set_result(None)
            response.resume = None
            response._wake()


class HTTP2Connection(asyncio.Protocol):
    """An HTTP/2 connection to one (scheme, host, port): many streams at once."""

    #: The client tells this from an HTTP/1.1 connection (and an H2Stream) by it.
    multiplexed = True
    connect_attempts = 1

    def __init__(self, opened: HTTPConnection) -> None:
        self.key = opened.key
        self.serial = opened.serial  # the same TCP connection, taken over
        self.scheme = opened.key[0].encode()
        self.loop = opened.loop
        self.deadlines: Deadlines = opened._deadlines
        self.body_cap = opened._body_cap
        self.address = opened.address
        self.tls = opened.tls
        self._ssl_object = opened._ssl_object
        self._tls_info: TLSInfo | None = None
        #: Where this connection's TLS session is kept (HTTPConnection.resume).
        self.resume = opened.resume
        self.connect_timings = opened.connect_timings
        self.connect_attempts = opened.connect_attempts
        self.transport: asyncio.Transport | None = opened.transport
        self.closed = False
        #: GOAWAY came (or the stream ids ran out): no new stream; closed when the last ends.
        self.draining = False
        self.requests = 0  # responses completed
        self.streams: dict[int, H2Stream] = {}
        #: Request field blocks parsed, by their bytes (request_fields).
        self.field_blocks: dict[bytes, _Block] = {}
        #: Stream slots taken (streams open, and those reserved by the Multiplexer).
        self.active = 0
        self.capacity = INITIAL_STREAMS
        #: The server's SETTINGS came (its stream limit is known).
        self.settled = False
        #: Streams started on it (HEADERS sent), and the most it may start: the
        #: streams its origin's server processed on a connection before its
        #: GOAWAY cut the rest off (nginx's keepalive_requests, or 1 under
        #: keepalive_timeout 0; the Multiplexer learns it), None: no such bound.
        self.started = 0
        self.stream_limit: int | None = None
        #: At its bound, streams all ended, waiting LIFT_S for a GOAWAY (multiplex.py).
        self.lifting = False
        #: What its GOAWAY taught (the streams processed), for the Multiplexer.
        self.processed: int | None = None
        #: Called when a slot frees or the capacity grows (the Multiplexer's).
        self.on_slots: Callable[[HTTP2Connection], None] | None = None
        #: Request body bytes waiting for window: stream id -> [data, end, waiter].
        self._pending: dict[int, list[Any]] = {}
        #: PING and SETTINGS frames answered in the second that began at _answers_since.
        self._answers = 0
        self._answers_since = 0.0
        #: When its last stream ended (the loop's clock; None: never idle yet):
        #: the Multiplexer pings a connection idle long before reusing it.
        self.idle_since: float | None = None
        #: Our PINGs waiting for their ACK, by their 8 bytes.
        self._pings: dict[bytes, asyncio.Future[bool]] = {}
        self._ping_count = 0
        #: A flush is scheduled for the end of this turn of the loop (flush).
        self._flush_due = False
        h2conn = self.h2 = _H2Connection(config=_CONFIG)
        h2conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEAD_BYTES,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 0,
            },
        )
        # Enforced from the start, not only once the server acknowledges the settings.
        h2conn.decoder.max_header_list_size = MAX_HEAD_BYTES
        h2conn.initiate_connection()
        h2conn.increment_flow_control_window(CONNECTION_WINDOW - 65535)

    @classmethod
    def take_over(cls, opened: HTTPConnection) -> HTTP2Connection:
        """HTTP/2 on the connection ``opened`` made (ALPN said h2, or prior
        knowledge): the transport's protocol becomes the new connection, which
        is fed whatever came before it took over."""
        if opened.closed or opened.transport is None:
            raise RequestError("connection_reset", "the connection closed after its handshake")
        conn = cls(opened)
        transport = opened.transport
        transport.set_protocol(conn)
        early = opened.early or []
        opened.early = None
        opened.transport = None  # the old protocol lets go (its loss is the new one's)
        conn.flush()
        for data in early:
            conn.data_received(data)
        return conn

    def tls_info(self) -> TLSInfo | None:
        info = self._tls_info
        if info is None and self.tls is not None:
            info = self._tls_info = TLSInfo.of(self.tls, self._ssl_object)
        return info

    @property
    def free(self) -> int:
        """Stream slots free for new requests."""
        if self.closed or self.draining:
            return 0
        free = min(self.capacity, MAX_STREAMS) - self.active
        limit = self.stream_limit
        if limit is not None:  # slots reserved and not started yet count as started
            free = min(free, limit - self.started - max(0, self.active - len(self.streams)))
        return free

    # -- writing -----------------------------------------------------------------------

    def flush(self) -> None:
        """Write what ``h2`` has to send, at the end of this turn of the event
        loop: the HEADERS of every request made in one turn (100 tasks woken by
        one read of responses, say) and the acknowledgements of that read go
        out as one TLS record in one ``send``, not one each.  A ``send`` per
        request was the largest single cost of a small GET over HTTP/2 (~25%
        of its CPU, cProfile of 5,000 GETs to nginx, 100 in flight)."""
        if not self._flush_due:
            self._flush_due = True
            self.loop.call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self._flush_due = False
        if self.closed:
            return
        data = self.h2.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def queue_data(self, stream: H2Stream, data: bytes, end: bool) -> asyncio.Future[None] | None:
        """Send ``data`` on ``stream`` as its window allows; the rest waits for
        WINDOW_UPDATE.  Returns a future that resolves when all of it is sent
        (None: sent already)."""
        pending = self._pending.get(stream.id)
        if pending is None:
            pending = self._pending[stream.id] = [memoryview(data), end, None]
        else:
            pending[0] = memoryview(bytes(pending[0]) + data)
            pending[1] = end
        self._send_pending(stream.id, pending)
        if stream.id not in self._pending:
            return None
        waiter = pending[2] = self.loop.create_future()
        return waiter

    def _send_pending(self, stream_id: int, pending: list[Any]) -> None:
        h2conn = self.h2
        data: memoryview = pending[0]
        try:
            while data:
                window = min(
                    h2conn.local_flow_control_window(stream_id), h2conn.max_outbound_frame_size
                )
                if window <= 0:
                    pending[0] = data
                    return
                h2conn.send_data(stream_id, data[:window].tobytes())
                data = data[window:]
            if pending[1]:
                h2conn.end_stream(stream_id)
                stream = self.streams.get(stream_id)
                if stream is not None:
                    stream.sent_end = True
        except h2.exceptions.StreamClosedError:
            pass  # the server ended or reset it meanwhile: its response says how
        del self._pending[stream_id]
        waiter = pending[2]
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _window_opened(self) -> None:
        for stream_id, pending in list(self._pending.items()):
            self._send_pending(stream_id, pending)

    def _drop_pending(self, stream_id: int) -> None:
        pending = self._pending.pop(stream_id, None)
        if pending is not None and pending[2] is not None and not pending[2].done():
            pending[2].set_result(None)

    async def ping(self, timeout: float) -> bool:
        """Send a PING and wait up to ``timeout`` for its ACK: whether the
        server is still there (False: no ACK in time, or the connection ended)."""
        if self.closed or self.transport is None:
            return False
        self._ping_count += 1
        data = self._ping_count.to_bytes(8, "big")
        waiter = self._pings[data] = self.loop.create_future()
        try:
            self.h2.ping(data)
            self.flush()
            return await asyncio.wait_for(waiter, timeout)
        except (TimeoutError, h2.exceptions.ProtocolError):
            return False
        finally:
            self._pings.pop(data, None)

    def _end_pings(self) -> None:
        for waiter in self._pings.values():
            if not waiter.done():
                waiter.set_result(False)
        self._pings.clear()

    # -- streams ------------------------------------------------------------------------

    def new_stream(self) -> H2Stream:
        """A stream for a request (its slot counted: see ``active``)."""
        self.active += 1
        stream = H2Stream(self)
        timings = self.connect_timings
        if timings is not None:  # the first request, that opened it, takes the connect phases
            stream.connect_timings = timings
            self.connect_timings = None
        return stream

    def stream_for_reserved(self) -> H2Stream:
        """A stream on a slot the Multiplexer reserved for a waiter (``active``
        counts it already)."""
        return H2Stream(self)

    def forget(self, stream: H2Stream, reset: bool) -> None:
        """A stream's exchange is over on the wire (``reset``: the server is told
        to stop, CANCEL, if the stream is still open)."""
        stream_id = stream.id
        if self.streams.pop(stream_id, None) is None:
            return
        self._drop_pending(stream_id)
        unacked, stream._unacked = stream._unacked, 0
        if unacked and not self.closed:  # unread: the connection's window gets it back
            self.h2.acknowledge_received_data(unacked, stream_id)
        if reset and not self.closed:
            with contextlib.suppress(h2.exceptions.ProtocolError):  # closed already
                self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            self.flush()
        self.h2.let_go(stream_id)

    def release(self, stream: H2Stream) -> None:
        """The client lets go of ``stream`` (read, failed or given up): its slot frees."""
        if stream.ended:
            return
        stream.ended = True
        if stream.response is not None:  # given up on mid-exchange
            stream.fail(RequestError("connection_reset", "the request was given up"))
        self.forget(stream, reset=True)
        self.active -= 1
        if not self.active:
            self.idle_since = self.loop.time()
        if self.draining and not self.streams and not self.closed:
            self.close()
        if self.on_slots is not None:
            self.on_slots(self)

    def cancel(self, stream: H2Stream) -> None:
        if stream.response is not None:
            response = stream.response
            stream._unslot()
            stream.response = None
            if not response.done.done():
                response.done.cancel()
        self.forget(stream, reset=True)

    def fail(self, error: RequestError) -> None:
        """The connection is lost or broken: every stream ends with ``error``."""
        self._end_pings()
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
        for stream in list(self.streams.values()):
            stream.fail(error)
        for stream_id in list(self._pending):
            self._drop_pending(stream_id)
        if self.on_slots is not None:
            self.on_slots(self)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._end_pings()
        if self.transport is not None:
            try:
                self.h2.close_connection()
                self.flush_unchecked()
            except h2.exceptions.ProtocolError:
                pass
            self.transport.close()
        if self.streams:
            self.fail(RequestError("connection_reset", "the connection was closed"))

    def flush_unchecked(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def abort(self) -> None:
        self.fail(RequestError("connection_reset", "the connection was closed"))

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            events: list[Any] = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            detail = str(e) or type(e).__name__
            self.fail(RequestError("protocol_error", f"HTTP/2: {detail}"[:300]))
            return
        streams = self.streams
        #: DATA to acknowledge, per stream: once per read, not per frame (h2's
        #: bookkeeping of an acknowledgement costs as much as a frame's).
        acks: dict[int, int] = {}
        for event in events:
            kind = type(event)
            if kind is h2.events.DataReceived:
                stream_id = event.stream_id
                stream = streams.get(stream_id)
                flow = (
                    event.flow_controlled_length
                    if stream is None
                    else stream.data_received(event.data, event.flow_controlled_length)
                )
                if flow:
                    acks[stream_id] = acks.get(stream_id, 0) + flow
            elif kind is h2.events.ResponseReceived:
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream.headers_received(event.headers)
            elif kind is h2.events.InformationalResponseReceived:
                stream = streams.get(event.stream_id)
                if stream is not None:  # a 1xx: skipped, but the request was processed
                    stream.heard = True
            elif kind is h2.events.StreamEnded:
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream.ended_by_server()
            elif kind is h2.events.StreamReset:
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream.fail(self._reset_error(event.error_code))
            elif kind is h2.events.WindowUpdated or kind is h2.events.RemoteSettingsChanged:
                if kind is h2.events.RemoteSettingsChanged:
                    if self._answered():
                        return
                    self.capacity = min(self.h2.remote_settings.max_concurrent_streams, MAX_STREAMS)
                    self.settled = True
                    if self.on_slots is not None:
                        self.on_slots(self)
                if self._pending:
                    self._window_opened()
            elif kind is StreamMalformed:
                if event.flow:
                    acks[event.stream_id] = acks.get(event.stream_id, 0) + event.flow
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream.fail(
                        RequestError(
                            "protocol_error", f"HTTP/2: a malformed response: {event.detail}"[:300]
                        )
                    )
            elif kind is h2.events.ConnectionTerminated:
                self._goaway(event.error_code or 0, event.last_stream_id)
            elif kind is h2.events.PingReceived and self._answered():
                return
            elif kind is h2.events.PingAckReceived:
                waiter = self._pings.get(event.ping_data)
                if waiter is not None and not waiter.done():
                    waiter.set_result(True)
            # TrailersReceived, SettingsAcknowledged, PriorityUpdated: nothing to do.
        if acks and not self.closed:
            for stream_id, flow in acks.items():
                self.h2.acknowledge_received_data(flow, stream_id)
        if self.h2.highest_outbound_stream_id > _LAST_STREAM_ID:
            self.draining = True
        # A frame h2 holds unparsed until all of it came - and checks its length
        # only then: one longer than the SETTINGS_MAX_FRAME_SIZE we allow (bytes
        # that are no frames, "HTTP/1.1 200" read as a 4.7 MB one) fails now.
        pending = self.h2.incoming_buffer._data
        if len(pending) >= 9:
            length = int.from_bytes(pending[:3], "big")
            if length > self.h2.max_inbound_frame_size:
                self.fail(
                    RequestError(
                        "protocol_error",
                        f"HTTP/2: a frame of {length:,} bytes, over the "
                        f"{self.h2.max_inbound_frame_size:,} allowed (no HTTP/2 from the server?)",
                    )
                )
                return
        self.flush()

    def _answered(self) -> bool:
        """A PING or SETTINGS frame came, which h2 answers (an ACK): past
        :data:`MAX_ANSWERS` of them in a second, the connection is failed
        (``protocol_error``: a flood, whose answers would pile up unread).
        True: it was."""
        now = self.loop.time()
        if now - self._answers_since >= 1.0:
            self._answers_since = now
            self._answers = 0
        self._answers += 1
        if self._answers <= MAX_ANSWERS:
            return False
        # h2 queued an ACK for every frame of this read already (a 64 KiB read
        # holds ~3,800 PINGs): none of them goes out, only the GOAWAY.
        self.h2.clear_outbound_data_buffer()
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            self.flush_unchecked()  # now: fail() aborts the transport
        self.fail(
            RequestError(
                "protocol_error", f"HTTP/2: over {MAX_ANSWERS:,} PING/SETTINGS frames in a second"
            )
        )
        return True

    def _reset_error(self, code: int) -> RequestError:
        name = _code_name(code)
        if code == _REFUSED:
            return refused("HTTP/2: the server refused the stream (REFUSED_STREAM)")
        error_class = "protocol_error" if code in _PROTOCOL_CODES else "connection_reset"
        return RequestError(error_class, f"HTTP/2: the server reset the stream ({name})")

    def _goaway(self, code: int, last_stream_id: int | None) -> None:
        """GOAWAY: streams above ``last_stream_id`` were not processed (sent again
        by the client); the others may finish; no new stream starts here."""
        self.draining = True
        last = last_stream_id if last_stream_id is not None else 2**31
        name = _code_name(code)
        if self.active > len(self.streams) or any(stream_id > last for stream_id in self.streams):
            # The server processed this many of our streams (ids 1, 3, 5, ...)
            # and cut the rest off - those above its last id, or a request
            # handed a slot here and not sent yet (``active`` counts it; nginx
            # under keepalive_timeout 0 sends its GOAWAY just after the one
            # response, with no stream above): a bound the Multiplexer keeps
            # for a while, so that no later connection hands out a slot past it.
            self.processed = (last + 1) // 2
        for stream_id, stream in list(self.streams.items()):
            if stream_id > last:
                stream.fail(
                    refused(f"HTTP/2: the server is going away ({name}), stream unprocessed")
                )
        if code != h2.errors.ErrorCodes.NO_ERROR:
            for stream in list(self.streams.values()):
                stream.fail(RequestError("connection_reset", f"HTTP/2: GOAWAY ({name})"))
        if self.on_slots is not None:
            self.on_slots(self)
        if not self.streams:
            self.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed = self.closed
        self.closed = True
        self._end_pings()
        if self.resume is not None and keep_session(self.resume, self._ssl_object):
            self.resume = None
        if self.streams:
            detail = f"HTTP/2 connection lost: {exc}" if exc else "HTTP/2 connection closed"
            error = RequestError("connection_reset", detail)
            for stream in list(self.streams.values()):
                response = stream.response
                if response is not None and response.first_byte is None:
                    error = RequestError("connection_reset", detail)
                stream.fail(error)
        self.transport = None
        if not was_closed and self.on_slots is not None:
            self.on_slots(self)
