"""The simulated DNS server, checked with a client nobody here wrote: BIND's dig.

``dig`` comes from Debian's bind9-dnsutils (.ci/run installs it): under CI a
missing dig fails these tests, elsewhere they are skipped (tests/conftest.py's
rule).  The parser's own guarantees -- a malformed query never raises, FORMERR
when the header can be read -- are checked on the function and on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surge.sim.dns import (
    FORMERR,
    DNSServer,
    Entry,
    Zone,
    encode_name,
    parse_query,
    running,
)

ZONE = Zone(
    {
        "both.test": Entry(a=("192.0.2.1", "192.0.2.2"), aaaa=("2001:db8::1",), ttl=60),
        "www.chain.test": Entry(cname="mid.chain.test", ttl=30),
        "mid.chain.test": Entry(cname="end.chain.test", ttl=20),
        "end.chain.test": Entry(a=("192.0.2.7",), ttl=90),
        "dangling.test": Entry(cname="gone.test", ttl=30),
        "gone.test": Entry(failure="nxdomain"),
        "nx.test": Entry(failure="nxdomain"),
        "servfail.test": Entry(failure="servfail"),
        "refused.test": Entry(failure="refused"),
        "empty.test": Entry(failure="noanswer"),
        "drop.test": Entry(failure="drop"),
        "tc.test": Entry(a=("192.0.2.9",), failure="truncate"),
        "big.test": Entry(a=tuple(f"10.0.0.{i}" for i in range(1, 60))),
        "slow.test": Entry(a=("192.0.2.3",), latency=0.05),
        "loop1.test": Entry(cname="loop2.test"),
        "loop2.test": Entry(cname="loop1.test"),
        "*.sim.test": Entry(a=("127.0.0.1",), ttl=5),
    },
    rules=[(r"nx-\d+\.sim\.test", Entry(failure="nxdomain"))],
)


@pytest.fixture(scope="module")
def server() -> Iterator[DNSServer]:
    with running(ZONE) as server:
        yield server


@pytest.fixture(scope="module")
def dig_path() -> str:
    path = shutil.which("dig")
    if path is None:
        hint = "dig is not installed (apt-get install bind9-dnsutils; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"{hint} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(hint)
    return path


class Dig:
    def __init__(self, path: str, server: DNSServer) -> None:
        self.path = path
        self.server = server

    def __call__(self, *args: str) -> str:
        command = [self.path, f"@{self.server.host}", "-p", str(self.server.port)]
        command += ["+time=2", "+tries=1", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=20)
        return done.stdout

    def short(self, *args: str) -> list[str]:
        return self("+short", *args).split()

    def status(self, *args: str) -> str:
        found = re.search(r"status: (\w+)", self(*args))
        assert found, "no header in dig's output"
        return found.group(1)

    def answer(self, *args: str) -> list[tuple[str, int, str, str]]:
        """(name, TTL, type, data) of each answer record."""
        records = []
        for line in self("+noall", "+answer", *args).splitlines():
            name, ttl, _, rtype, data = line.split()
            records.append((name, int(ttl), rtype, data))
        return records


@pytest.fixture
def dig(dig_path: str, server: DNSServer) -> Dig:
    return Dig(dig_path, server)


# -- answers -------------------------------------------------------------------------


def test_a_and_aaaa(dig: Dig) -> None:
    assert dig.short("both.test") == ["192.0.2.1", "192.0.2.2"]
    assert dig.short("both.test", "AAAA") == ["2001:db8::1"]
    assert dig.answer("both.test") == [
        ("both.test.", 60, "A", "192.0.2.1"),
        ("both.test.", 60, "A", "192.0.2.2"),
    ]


def test_names_are_case_insensitive_and_the_question_keeps_its_case(dig: Dig) -> None:
    assert dig.answer("BoTh.TeSt", "AAAA") == [("BoTh.TeSt.", 60, "AAAA", "2001:db8::1")]


def test_cname_chain_with_each_records_ttl(dig: Dig) -> None:
    assert dig.answer("www.chain.test") == [
        ("www.chain.test.", 30, "CNAME", "mid.chain.test."),
        ("mid.chain.test.", 20, "CNAME", "end.chain.test."),
        ("end.chain.test.", 90, "A", "192.0.2.7"),
    ]
    assert dig.short("www.chain.test", "CNAME") == ["mid.chain.test."]
    assert dig.short("www.chain.test", "AAAA") == ["mid.chain.test.", "end.chain.test."]


def test_cname_to_a_missing_name_is_nxdomain_with_the_cname(dig: Dig) -> None:
    assert dig.status("dangling.test") == "NXDOMAIN"
    assert dig.short("dangling.test") == ["gone.test."]


def test_cname_loop_is_servfail(dig: Dig) -> None:
    assert dig.status("loop1.test") == "SERVFAIL"


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("nx.test", "NXDOMAIN"),
        ("servfail.test", "SERVFAIL"),
        ("refused.test", "REFUSED"),
        ("empty.test", "NOERROR"),
        ("not-in-the-zone.example", "NXDOMAIN"),
    ],
)
def test_failure_rcodes(dig: Dig, name: str, status: str) -> None:
    assert dig.status(name) == status
    assert dig.short(name) == []


def test_other_types_and_classes(dig: Dig) -> None:
    assert dig.short("both.test", "MX") == []
    assert dig.status("both.test", "MX") == "NOERROR"
    assert sorted(dig.short("both.test", "ANY")) == ["192.0.2.1", "192.0.2.2", "2001:db8::1"]
    assert dig.status("both.test", "CH") == "REFUSED"


def test_wildcards_and_rules_answer_generated_names(dig: Dig, server: DNSServer) -> None:
    stored = len(ZONE._names)
    assert dig.short("site123456.sim.test") == ["127.0.0.1"]
    assert dig.short("a.b.c.sim.test") == ["127.0.0.1"]
    assert dig.status("nx-999999.sim.test") == "NXDOMAIN"
    assert dig.status("sim.test") == "NXDOMAIN"  # a wildcard covers names below, not its own
    assert len(ZONE._names) == stored


def test_latency_still_answers(dig: Dig) -> None:
    assert dig.short("slow.test") == ["192.0.2.3"]


def test_drop_never_answers_either_transport(dig: Dig, server: DNSServer) -> None:
    before = server.count("drop.test")
    assert "timed out" in dig("+time=1", "drop.test")
    assert "timed out" in dig("+time=1", "+tcp", "drop.test")
    assert server.count("drop.test", transport="udp") >= 1
    assert server.count("drop.test", transport="tcp") >= 1
    assert server.count("drop.test") > before


# -- truncation and TCP --------------------------------------------------------------


def test_truncate_sets_tc_over_udp_and_answers_over_tcp(dig: Dig, server: DNSServer) -> None:
    udp = dig("+notcp", "+ignore", "tc.test")
    assert re.search(r"flags:[a-z ]* tc[ ;]", udp)
    assert "ANSWER: 0" in udp
    assert dig.short("+tcp", "tc.test") == ["192.0.2.9"]
    tcp_before = server.count("tc.test", transport="tcp")
    assert dig.short("tc.test") == ["192.0.2.9"]  # dig retries over TCP by itself
    assert server.count("tc.test", transport="tcp") == tcp_before + 1


def test_answer_too_big_for_udp_without_edns_is_truncated(dig: Dig) -> None:
    assert re.search(r"flags:[a-z ]* tc[ ;]", dig("+noedns", "+notcp", "+ignore", "big.test"))
    assert len(dig.short("+noedns", "big.test")) == 59  # after the retry over TCP
    assert len(dig.short("big.test")) == 59  # fits in EDNS's 1232 octets


def test_queries_are_counted_per_transport(dig: Dig, server: DNSServer) -> None:
    udp, tcp = server.queries["udp"], server.queries["tcp"]
    dig("+notcp", "both.test")
    dig("+tcp", "both.test")
    dig("+tcp", "both.test")
    assert (server.queries["udp"], server.queries["tcp"]) == (udp + 1, tcp + 2)


def test_several_queries_on_one_tcp_connection(server: DNSServer) -> None:
    with socket.create_connection(server.address, timeout=3) as sock:
        for qid in (1, 2, 3):
            message = _query("both.test", qid=qid)
            sock.sendall(len(message).to_bytes(2, "big") + message)
        ids = []
        for _ in range(3):
            length = int.from_bytes(_recv_exactly(sock, 2), "big")
            ids.append(struct.unpack("!H", _recv_exactly(sock, length)[:2])[0])
    assert sorted(ids) == [1, 2, 3]


# -- malformed queries -----------------------------------------------------------------


def _query(name: str, qtype: int = 1, *, qid: int = 0x1234, qdcount: int = 1) -> bytes:
    header = struct.pack("!HHHHHH", qid, 0x0100, qdcount, 0, 0, 0)
    return header + encode_name(name) + struct.pack("!HH", qtype, 1)


HEADER_1Q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "closed early"
        data += chunk
    return data


def _rcode(response: bytes) -> int:
    return response[3] & 0xF


@pytest.mark.parametrize(
    "message",
    [
        _query("both.test", qdcount=2),  # two questions
        _query("both.test", qdcount=0),
        _query("both.test")[:-3],  # question cut short
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",  # self-pointer
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0)
        + b"\x40abc\x00\x00\x01\x00\x01",  # label type
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x3f" + b"a" * 63 * 5,  # > 255 octets
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 2)
        + encode_name("both.test")
        + b"\x00\x01\x00\x01"
        + (b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)) * 2,  # two OPT records
    ],
)
def test_malformed_queries_get_formerr(message: bytes) -> None:
    response, _ = DNSServer(ZONE).answer(message, "udp")
    assert response is not None
    assert response[:2] == message[:2]
    assert _rcode(response) == FORMERR


def test_octets_after_a_complete_query_are_ignored() -> None:
    response, _ = DNSServer(ZONE).answer(_query("both.test") + b"\xff" * 3, "udp")
    assert response is not None and _rcode(response) == 0
    assert response.endswith(socket.inet_aton("192.0.2.2"))


@pytest.mark.parametrize("message", [b"", b"\x00", b"\x00" * 11])
def test_no_header_no_answer(message: bytes) -> None:
    assert DNSServer(ZONE).answer(message, "udp") == (None, 0.0)


def test_responses_are_never_answered() -> None:
    message = bytearray(_query("both.test"))
    message[2] |= 0x80  # QR
    assert DNSServer(ZONE).answer(bytes(message), "udp") == (None, 0.0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_never_raise(message: bytes) -> None:
    response, delay = DNSServer(ZONE).answer(message, "udp")
    assert delay >= 0
    if response is not None:
        assert response[:2] == message[:2]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_queries_never_raise(data: st.DataObject) -> None:
    message = bytearray(_query(data.draw(st.sampled_from(["both.test", "www.chain.test"]))))
    for _ in range(data.draw(st.integers(1, 6))):
        index = data.draw(st.integers(0, len(message) - 1))
        message[index] = data.draw(st.integers(0, 255))
    message = message[: data.draw(st.integers(0, len(message)))]
    response, _ = DNSServer(ZONE).answer(bytes(message), "udp")
    if response is not None:
        assert response[:2] == message[:2]
        if response[5]:  # a question: the one asked, echoed
            assert parse_query(response).labels == parse_query(bytes(message)).labels


def test_garbage_on_the_wire_leaves_the_server_answering(dig: Dig, server: DNSServer) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        for junk in (b"", b"\x01", b"\xff" * 12, os.urandom(300), b"\x00" * 70000):
            with contextlib.suppress(OSError):  # a datagram too big for the kernel
                udp.sendto(junk, server.address)
    with socket.create_connection(server.address, timeout=3) as tcp:
        tcp.sendall(b"\x00\x05abcde" + b"\xff\xff" + os.urandom(100))  # a frame, then half a one
    assert dig.short("both.test") == ["192.0.2.1", "192.0.2.2"]
    assert dig.short("+tcp", "both.test") == ["192.0.2.1", "192.0.2.2"]


# -- the zone, and running the server ------------------------------------------------------------


def test_zone_precedence() -> None:
    exact, rule, near, far, fallback = (Entry(ttl=n) for n in range(1, 6))
    zone = Zone(
        {"x.a.test": exact, "*.a.test": near, "*.test": far},
        rules=[(r"r\d\.a\.test", rule)],
        default=fallback,
    )
    assert zone.find("x.a.test") is exact
    assert zone.find("r1.a.test") is rule
    assert zone.find("y.x.a.test") is near
    assert zone.find("b.test") is far
    assert zone.find("a.test") is far
    assert zone.find("example") is fallback
    assert Zone().find("anything.test") is None


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Entry(a=("not-an-ip",)),
        lambda: Entry(aaaa=("192.0.2.1",)),
        lambda: Entry(failure="sometimes"),  # type: ignore[arg-type]
        lambda: Entry(ttl=-1),
        lambda: Entry(cname="a" * 64 + ".test"),
        lambda: Zone({"a..test": Entry()}),
    ],
)
def test_bad_zones_are_refused_when_built(bad: object) -> None:
    with pytest.raises(ValueError):
        bad()  # type: ignore[operator]


async def test_async_context_manager_and_a_port_of_its_own() -> None:
    zone = Zone({"one.test": Entry(a=("192.0.2.1",))})
    async with DNSServer(zone) as server:
        assert server.port > 0 and server.address == ("127.0.0.1", server.port)

        def ask() -> bytes:  # on a thread: the server answers on this test's loop
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.settimeout(3)
                udp.sendto(_query("one.test"), server.address)
                return udp.recv(512)

        response = await asyncio.to_thread(ask)
        assert response.endswith(socket.inet_aton("192.0.2.1"))
        assert server.queries["udp"] == 1


def test_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        DNSServer(ZONE, host="0.0.0.0")
