"""A DNS server for the simulated web: a zone described in Python, on loopback.

UDP and TCP on one port (RFC 1035 section 4.2; RFC 7766: TCP is not optional),
answering from a :class:`Zone` so that a test or a benchmark decides every
outcome in advance -- addresses, CNAME chains, TTLs, latency, and the failures a
crawl meets: NXDOMAIN, SERVFAIL, REFUSED, a server that never answers, NOERROR
with no records, and an answer too big for UDP (TC set: the client must ask
again over TCP)::

    zone = Zone({
        "www.example.test": Entry(cname="example.test"),
        "example.test": Entry(a=("192.0.2.1",), aaaa=("2001:db8::1",), ttl=60),
        "gone.example.test": Entry(failure="nxdomain"),
        "*.sim.test": Entry(a=("127.0.0.1",)),        # any name below sim.test
    }, rules=[(r"nx-\\d+\\.sim\\.test", Entry(failure="nxdomain"))])
    async with DNSServer(zone) as server:            # server.port: UDP and TCP
        ...
    with running(zone) as server:                     # on a thread, for sync tests
        ...

Wildcards and rules answer for names that are never stored, so a benchmark can
ask for a million distinct names in constant memory (``count_names=False`` also
stops the per-name query counts).

The wire format is written here (RFC 1035 section 4.1): one question per query;
answers name the question by a compression pointer and everything else in full.
Queries are parsed defensively -- every length is checked against the message,
compression pointers may only point backwards -- and a malformed one gets
FORMERR (or nothing, when not even its header can be read); no input makes the
server raise.  EDNS(0) (RFC 6891) is understood far enough to honour the
client's UDP payload size and to echo an OPT record; larger answers are
truncated (TC set, no records), as a real server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

logger = logging.getLogger(__name__)

#: What an entry can do instead of answering normally.
Failure = Literal["nxdomain", "servfail", "refused", "drop", "noanswer", "truncate"]
FAILURES: frozenset[str] = frozenset(Failure.__args__)  # type: ignore[attr-defined]

# Record types and classes (RFC 1035 section 3.2.2; AAAA: RFC 3596; OPT: RFC 6891).
TYPE_A, TYPE_CNAME, TYPE_AAAA, TYPE_OPT, TYPE_ANY = 1, 5, 28, 41, 255
CLASS_IN = 1
TYPE_NAMES = {TYPE_A: "A", TYPE_CNAME: "CNAME", TYPE_AAAA: "AAAA", TYPE_ANY: "ANY"}
# Response codes (RFC 1035 section 4.1.1; BADVERS: RFC 6891 section 6.1.3).
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED, BADVERS = 0, 1, 2, 3, 4, 5, 16
_RCODES = {"nxdomain": NXDOMAIN, "servfail": SERVFAIL, "refused": REFUSED}

#: The largest answer over UDP without EDNS (RFC 1035 section 2.3.4), and the
#: payload size this server offers with it (the DNS Flag Day 2020 value).
UDP_LIMIT = 512
EDNS_UDP_SIZE = 1232
#: CNAME hops followed inside the zone before the answer is SERVFAIL (a loop).
MAX_CNAME_HOPS = 8
#: Compression pointers followed in one name before the query is FORMERR.
MAX_POINTERS = 16
#: The UDP socket's receive buffer asked for, bytes (see DNSServer.start).
UDP_RECEIVE_BUFFER = 4 * 1024 * 1024
#: A TCP connection with nothing to say for this long is closed (RFC 7766 section 6.2.3).
TCP_IDLE_S = 30.0

_HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")  # type, class, TTL, RDLENGTH
_QUESTION_FIXED = struct.Struct("!HH")


class MalformedQuery(ValueError):
    """A query that cannot be read; answered with FORMERR (or not at all)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """What the zone says about one name (or every name a wildcard or rule covers).

    ``failure`` replaces the answer: ``nxdomain``, ``servfail`` and ``refused``
    are rcodes; ``drop`` never answers, over either transport; ``noanswer`` is
    NOERROR with no records; ``truncate`` answers UDP with TC set and no records
    and TCP in full.  ``latency`` (seconds) passes before any answer.  Along a
    CNAME chain, the target's records, TTL and rcode failures count; latency,
    drop and truncate are the queried name's.
    """

    a: tuple[str, ...] = ()
    aaaa: tuple[str, ...] = ()
    cname: str | None = None
    ttl: int = 300
    latency: float = 0.0
    failure: Failure | None = None
    _a_rdata: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    _aaaa_rdata: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    _cname_wire: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.failure is not None and self.failure not in FAILURES:
            raise ValueError(f"failure {self.failure!r}: expected one of {sorted(FAILURES)}")
        if not 0 <= self.ttl < 2**31:  # RFC 2181 section 8
            raise ValueError(f"ttl {self.ttl} out of range 0..2**31-1")
        if self.latency < 0:
            raise ValueError(f"latency {self.latency} is negative")
        try:
            a = tuple(socket.inet_pton(socket.AF_INET, ip) for ip in self.a)
            aaaa = tuple(socket.inet_pton(socket.AF_INET6, ip) for ip in self.aaaa)
        except OSError:
            raise ValueError(f"bad address in a={self.a} or aaaa={self.aaaa}") from None
        cname = encode_name(self.cname) if self.cname is not None else b""
        object.__setattr__(self, "_a_rdata", a)
        object.__setattr__(self, "_aaaa_rdata", aaaa)
        object.__setattr__(self, "_cname_wire", cname)


def normalise(name: str) -> str:
    return name.lower().rstrip(".")


def encode_name(name: str) -> bytes:
    """``name`` in wire format (RFC 1035 section 3.1), uncompressed."""
    name = normalise(name)
    out = bytearray()
    for label in name.split(".") if name else ():
        raw = label.encode("ascii")
        if not 0 < len(raw) < 64:
            raise ValueError(f"{name!r}: a label must have 1 to 63 octets")
        out.append(len(raw))
        out += raw
    out.append(0)
    if len(out) > 255:
        raise ValueError(f"{name!r}: longer than 255 octets")
    return bytes(out)


class Zone:
    """Names and what they answer: exact names, then ``rules`` (regular
    expressions matched against the whole name, in order), then the closest
    wildcard (``*.example.test`` covers every name below example.test, at any
    depth, but not example.test itself), then ``default``; a name none of them
    covers is NXDOMAIN."""

    def __init__(
        self,
        entries: Mapping[str, Entry] | None = None,
        *,
        rules: Iterable[tuple[str | re.Pattern[str], Entry]] = (),
        default: Entry | None = None,
    ) -> None:
        self._names: dict[str, Entry] = {}
        self._wildcards: dict[str, Entry] = {}  # "example.test" for "*.example.test"
        self._rules = [(re.compile(p) if isinstance(p, str) else p, e) for p, e in rules]
        self.default = default
        for name, entry in (entries or {}).items():
            self[name] = entry

    def __setitem__(self, name: str, entry: Entry) -> None:
        name = normalise(name)
        if name.startswith("*."):
            encode_name(name[2:])
            self._wildcards[name[2:]] = entry
        else:
            encode_name(name)
            self._names[name] = entry

    def find(self, name: str) -> Entry | None:
        """The entry that answers for ``name`` (lower case, no trailing dot)."""
        entry = self._names.get(name)
        if entry is not None:
            return entry
        for pattern, entry in self._rules:
            if pattern.fullmatch(name):
                return entry
        if self._wildcards:
            dot = name.find(".")
            while dot >= 0:
                entry = self._wildcards.get(name[dot + 1 :])
                if entry is not None:
                    return entry
                dot = name.find(".", dot + 1)
        return self.default


@dataclass(frozen=True, slots=True)
class Query:
    id: int
    flags: int
    labels: tuple[bytes, ...]  # as asked (case kept, for the echoed question)
    qtype: int
    qclass: int
    edns: int | None  # the client's UDP payload size, if it sent an OPT record
    edns_version: int = 0

    @property
    def name(self) -> str:
        return b".".join(self.labels).decode("latin-1").lower()


def _read_name(message: bytes, offset: int) -> tuple[tuple[bytes, ...], int]:
    """The labels of the name at ``offset`` and the offset after it."""
    labels: list[bytes] = []
    length = 1
    end = -1  # where the name ends in the message, once a pointer was followed
    pointers = 0
    size = len(message)
    while True:
        if offset >= size:
            raise MalformedQuery("name runs past the end of the message")
        octet = message[offset]
        if octet == 0:
            return tuple(labels), (offset + 1 if end < 0 else end)
        kind = octet & 0xC0
        if kind == 0xC0:
            if offset + 1 >= size:
                raise MalformedQuery("compression pointer runs past the end")
            target = ((octet & 0x3F) << 8) | message[offset + 1]
            pointers += 1
            if target >= offset or pointers > MAX_POINTERS:
                raise MalformedQuery("compression pointer does not point backwards")
            if end < 0:
                end = offset + 2
            offset = target
            continue
        if kind:
            raise MalformedQuery(f"label type {kind:#x} is not supported")
        label = message[offset + 1 : offset + 1 + octet]
        if len(label) != octet:
            raise MalformedQuery("label runs past the end of the message")
        length += octet + 1
        if length > 255:
            raise MalformedQuery("name longer than 255 octets")
        labels.append(label)
        offset += 1 + octet


def parse_query(message: bytes) -> Query:
    """The header and question of ``message``; :class:`MalformedQuery` if they
    cannot be read (the header alone, when readable, is in ``args[1]``)."""
    if len(message) < _HEADER.size:
        raise MalformedQuery("shorter than a header")
    qid, flags, qdcount, ancount, nscount, arcount = _HEADER.unpack_from(message)
    header = (qid, flags)
    try:
        if qdcount != 1:
            raise MalformedQuery(f"{qdcount} questions, expected 1")
        labels, offset = _read_name(message, _HEADER.size)
        if offset + 4 > len(message):
            raise MalformedQuery("question runs past the end of the message")
        qtype, qclass = _QUESTION_FIXED.unpack_from(message, offset)
        offset += 4
        edns: int | None = None
        version = 0
        for index in range(ancount + nscount + arcount):  # at most 3 * 65535, each bounded
            _, offset = _read_name(message, offset)
            if offset + _RR_FIXED.size > len(message):
                raise MalformedQuery("record runs past the end of the message")
            rtype, rclass, ttl, rdlength = _RR_FIXED.unpack_from(message, offset)
            offset += _RR_FIXED.size + rdlength
            if offset > len(message):
                raise MalformedQuery("record data runs past the end of the message")
            if rtype == TYPE_OPT and index >= ancount + nscount:
                if edns is not None:
                    raise MalformedQuery("more than one OPT record")  # RFC 6891 section 6.1.1
                edns = rclass
                version = (ttl >> 16) & 0xFF
    except MalformedQuery as e:
        raise MalformedQuery(str(e), header) from None
    return Query(qid, flags, labels, qtype, qclass, edns, version)


def _header(qid: int, query_flags: int, rcode: int, tc: bool, counts: tuple[int, ...]) -> bytes:
    # QR, the query's opcode and RD, AA (the zone is ours), RA (so dig does not warn).
    flags = 0x8000 | (query_flags & 0x7900) | 0x0400 | 0x0080 | (rcode & 0xF)
    if tc:
        flags |= 0x0200
    return _HEADER.pack(qid, flags, *counts)


def _question(query: Query) -> bytes:
    out = bytearray()
    for label in query.labels:
        out.append(len(label))
        out += label
    out.append(0)
    return bytes(out) + _QUESTION_FIXED.pack(query.qtype, query.qclass)


def _opt(rcode: int) -> bytes:
    # Root owner, TYPE OPT, CLASS = our UDP payload size, TTL = extended rcode/version/flags.
    return b"\x00" + _RR_FIXED.pack(TYPE_OPT, EDNS_UDP_SIZE, (rcode >> 4) << 24, 0)


def error_response(message: bytes, error: MalformedQuery) -> bytes | None:
    """FORMERR for a query whose header could be read, None (no answer) otherwise."""
    if len(error.args) < 2:
        return None
    query_id, flags = error.args[1]
    if flags & 0x8000:  # a response: never answer one (two servers could loop)
        return None
    return _header(query_id, flags, FORMERR, False, (0, 0, 0, 0))


class DNSServer:
    """Answers queries for ``zone`` on ``host`` (loopback only), UDP and TCP on
    one port; ``port=0`` picks a free one (both protocols), see :attr:`port`."""

    def __init__(
        self,
        zone: Zone,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        count_names: bool = True,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the simulated DNS server binds to loopback only, not {host!r}")
        self.zone = zone
        self.host = host
        self._requested_port = port
        self.port = 0
        self.count_names = count_names
        #: Messages received, by transport ("udp", "tcp"), malformed ones included.
        self.queries: Counter[str] = Counter()
        #: Responses sent, by transport: one answering a query is on its way (over
        #: UDP on loopback, in the client's receive buffer or dropped) once counted.
        self.responses: Counter[str] = Counter()
        #: Questions received, by (transport, name, type name); see :meth:`count`.
        self.questions: Counter[tuple[str, str, str]] = Counter()
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._connections: set[asyncio.Transport] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def server_spec(self) -> str:
        """The address as ``--dns-servers`` / ``Resolver(servers=...)`` take it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def count(self, name: str, qtype: str | None = None, transport: str | None = None) -> int:
        """Questions received for ``name`` (of type ``qtype``: "A", "AAAA"...) over
        ``transport`` ("udp", "tcp"); None counts all."""
        name = normalise(name)
        return sum(
            n
            for (t, q, k), n in self.questions.items()
            if q == name and qtype in (None, k) and transport in (None, t)
        )

    # -- running -----------------------------------------------------------------------------

    async def start(self) -> DNSServer:
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        for _ in range(20):  # port 0: a free UDP port may be taken for TCP; try another
            udp = socket.socket(family, socket.SOCK_DGRAM)
            tcp = socket.socket(family, socket.SOCK_STREAM)
            try:
                udp.bind((self.host, self._requested_port))
                port = udp.getsockname()[1]
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcp.bind((self.host, port))
            except OSError:
                udp.close()
                tcp.close()
                if self._requested_port:
                    raise
                continue
            break
        else:
            raise OSError("no port free for both UDP and TCP on loopback")
        tcp.listen(1024)
        tcp.setblocking(False)
        udp.setblocking(False)
        # A crawl's burst of queries (1,000 lookups in flight: 2,000 datagrams)
        # overflows the default 208 KB receive buffer, and each datagram dropped
        # there costs the client a retransmission timeout: ask for more (the
        # kernel caps it at net.core.rmem_max).
        with contextlib.suppress(OSError):
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER)
        self.port = port
        self._udp, _ = await loop.create_datagram_endpoint(lambda: _UDP(self), sock=udp)
        self._tcp = await loop.create_server(lambda: _TCP(self), sock=tcp)
        return self

    async def close(self) -> None:
        """Stop listening, drop every connection and every answer not yet sent."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        for transport in list(self._connections):
            transport.abort()
        if self._tcp is not None:
            await self._tcp.wait_closed()

    async def __aenter__(self) -> DNSServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- answering ---------------------------------------------------------------------------

    def answer(self, message: bytes, transport: str) -> tuple[bytes | None, float]:
        """The response to ``message`` (None: no answer) and the delay before it."""
        self.queries[transport] += 1
        try:
            query = parse_query(message)
        except MalformedQuery as error:
            return error_response(message, error), 0.0
        try:
            return self._answer(query, transport)
        except Exception:  # a bug here must not stop the server: the client sees SERVFAIL
            logger.exception("simulated DNS: answering %r", message[:512])
            return self._render(query, SERVFAIL, [], transport), 0.0

    def _answer(self, query: Query, transport: str) -> tuple[bytes | None, float]:
        if query.flags & 0x8000:
            return None, 0.0
        name = query.name
        if self.count_names:
            self.questions[(transport, name, TYPE_NAMES.get(query.qtype, str(query.qtype)))] += 1
        opcode = (query.flags >> 11) & 0xF
        if opcode != 0:
            return self._render(query, NOTIMP, [], transport), 0.0
        if query.edns is not None and query.edns_version != 0:
            return self._render(query, BADVERS, [], transport), 0.0
        if query.qclass != CLASS_IN:
            return self._render(query, REFUSED, [], transport), 0.0
        entry = self.zone.find(name)
        if entry is None:
            return self._render(query, NXDOMAIN, [], transport), 0.0
        if entry.failure == "drop":
            return None, 0.0
        if entry.failure == "truncate" and transport == "udp":
            return self._render(query, NOERROR, [], transport, tc=True), entry.latency
        rcode, records = self._resolve(query, name, entry)
        return self._render(query, rcode, records, transport), entry.latency

    def _resolve(self, query: Query, name: str, entry: Entry) -> tuple[int, list[bytes]]:
        """The rcode and answer records for ``query``, following CNAMEs in the zone."""
        records: list[bytes] = []
        owner = b"\xc0\x0c"  # the question's name, at offset 12
        qtype = query.qtype
        for _ in range(MAX_CNAME_HOPS + 1):
            failure = entry.failure
            if failure in _RCODES:
                return _RCODES[failure], ([] if failure != "nxdomain" else records)
            if failure == "noanswer":
                return NOERROR, records
            ttl = entry.ttl
            if entry.cname is not None:
                target = entry._cname_wire
                records.append(
                    owner + _RR_FIXED.pack(TYPE_CNAME, CLASS_IN, ttl, len(target)) + target
                )
                if qtype == TYPE_CNAME:
                    return NOERROR, records
                owner = target
                name = normalise(entry.cname)
                following = self.zone.find(name)
                if following is None:
                    return (NOERROR if records else NXDOMAIN), records
                entry = following
                continue
            if qtype in (TYPE_A, TYPE_ANY):
                for rdata in entry._a_rdata:
                    records.append(owner + _RR_FIXED.pack(TYPE_A, CLASS_IN, ttl, 4) + rdata)
            if qtype in (TYPE_AAAA, TYPE_ANY):
                for rdata in entry._aaaa_rdata:
                    records.append(owner + _RR_FIXED.pack(TYPE_AAAA, CLASS_IN, ttl, 16) + rdata)
            return NOERROR, records
        return SERVFAIL, []  # a CNAME loop, or a chain longer than a resolver follows

    def _render(
        self, query: Query, rcode: int, records: list[bytes], transport: str, *, tc: bool = False
    ) -> bytes:
        question = _question(query)
        opt = _opt(rcode) if query.edns is not None else b""
        body = b"".join(records)
        count = len(records)
        limit = 65535 if transport == "tcp" else max(UDP_LIMIT, min(query.edns or 0, 4096))
        if tc or _HEADER.size + len(question) + len(body) + len(opt) > limit:
            body, count, tc = b"", 0, True
        header = _header(query.id, query.flags, rcode, tc, (1, count, 0, 1 if opt else 0))
        return header + question + body + opt

    # -- called by the transports --------------------------------------------------------------

    def _later(self, delay: float, send: Callable[[bytes], None], response: bytes) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(timer)
            send(response)

        timer = loop.call_later(delay, fire)
        self._timers.add(timer)


class _UDP(asyncio.DatagramProtocol):
    def __init__(self, server: DNSServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        response, delay = self.server.answer(data, "udp")
        if response is None or self.transport is None:
            return
        transport = self.transport
        if delay > 0:

            def send(r: bytes) -> None:
                if not transport.is_closing():
                    transport.sendto(r, addr)
                    self.server.responses["udp"] += 1

            self.server._later(delay, send, response)
        else:
            transport.sendto(response, addr)
            self.server.responses["udp"] += 1

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error for an earlier answer: nothing to do


class _TCP(asyncio.Protocol):
    """Two-octet length, then the message (RFC 1035 section 4.2.2); several
    queries per connection, answered as they are ready (RFC 7766 section 6.2.1.1)."""

    def __init__(self, server: DNSServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.server._connections.add(self.transport)
        self._touch()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.server._connections.discard(self.transport)
        if self.idle is not None:
            self.idle.cancel()

    def _touch(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        assert self.transport is not None
        self.idle = asyncio.get_running_loop().call_later(TCP_IDLE_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        self._touch()
        buffer = self.buffer
        buffer += data
        # The buffer never holds more than one message (at most 2 + 65535 octets)
        # beyond what arrived in this call.
        while len(buffer) >= 2:
            length = (buffer[0] << 8) | buffer[1]
            if len(buffer) < 2 + length:
                return
            message = bytes(buffer[2 : 2 + length])
            del buffer[: 2 + length]
            response, delay = self.server.answer(message, "tcp")
            if response is None:
                continue
            if delay > 0:
                self.server._later(delay, self._send, response)
            else:
                self._send(response)

    def _send(self, response: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(len(response).to_bytes(2, "big") + response)
            self.server.responses["tcp"] += 1


def web_zone(address: str = "127.0.0.1", ttl: int = 300) -> Zone:
    """The simulated web's names: every name under ``.sim`` is ``address`` (an A
    record; no AAAA, as the web listens on IPv4 loopback only)."""
    return Zone({"*.sim": Entry(a=(address,), ttl=ttl)})


@contextlib.contextmanager
def running(
    zone: Zone,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    count_names: bool = True,
    use_uvloop: bool = True,
) -> Iterator[DNSServer]:
    """Run a :class:`DNSServer` on a background thread with its own event loop
    for the duration of the block (as :func:`surge.sim.running` runs the web).

    The zone may be changed from the calling thread while it runs.
    """
    from surge.sim.runner import STARTUP_TIMEOUT_S, loop_factory

    loop = loop_factory()() if use_uvloop else asyncio.new_event_loop()
    server = DNSServer(zone, host, port, count_names=count_names)
    started = threading.Event()
    errors: list[BaseException] = []

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as error:  # handed to the waiting thread, which raises it
            errors.append(error)
            started.set()
            loop.close()
            return
        started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(server.close())
            loop.close()

    thread = threading.Thread(target=main, name="surge-sim-dns", daemon=True)
    thread.start()
    if not started.wait(STARTUP_TIMEOUT_S):
        raise RuntimeError("the simulated DNS server did not start in time")
    if errors:
        raise RuntimeError("the simulated DNS server failed to start") from errors[0]
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STARTUP_TIMEOUT_S)
