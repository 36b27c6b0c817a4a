"""The server does what each host name says, seen by plain clients over 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import re
import socket
import time
import urllib.error

import pytest

from surge.sim import SimInfo, behaviour, hosts
from surge.sim.responses import body

# -- responses ------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 404, 418, 500, 503])
def test_status(client, status: int) -> None:
    response, data = client.get(f"status-{status}.sim")
    assert response.status == status
    assert response.getheader("X-Sim-Host") == f"status-{status}.sim"
    assert data == body(1024)


def test_delay_holds_the_response_back(client) -> None:
    sock = client.send(client.request("delay-400.x.sim"), timeout=0.15)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    sock.settimeout(3)
    assert sock.recv(12) == b"HTTP/1.1 200"
    sock.close()


def test_redirect_chain_follows_to_a_200(sim: SimInfo, sim_urlopen) -> None:
    with sim_urlopen(sim.url("redirect-3.sim", "/p?q=1")) as response:
        assert response.status == 200
        assert response.url == sim.url("redirect-0.sim", "/p?q=1")


def test_redirect_statuses_and_locations(client) -> None:
    seen = []
    host = "redirect-3.sim"
    for _ in range(4):
        response, _ = client.get(host, "/a")
        seen.append((response.status, response.getheader("Location")))
        if response.status == 200:
            break
        host = response.getheader("Location").split("//")[1].split(":")[0]
    port = client.info.http_port
    assert seen == [
        (301, f"http://redirect-2.sim:{port}/a"),
        (302, f"http://redirect-1.sim:{port}/a"),
        (301, f"http://redirect-0.sim:{port}/a"),
        (200, None),
    ]


def test_redirect_loop_never_ends(client) -> None:
    itself = f"http://redirect-loop.sim:{client.info.http_port}/x"
    for _ in range(12):
        response, _ = client.get("redirect-loop.sim", "/x")
        assert (response.status, response.getheader("Location")) == (302, itself)


def test_gzip_only_when_accepted(client) -> None:
    response, data = client.get("gzip.sim", headers={"Accept-Encoding": "gzip, br"})
    assert response.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(data) == body(1024)
    response, data = client.get("gzip.sim")
    assert response.getheader("Content-Encoding") is None
    assert data == body(1024)
    response, data = client.get("gzip.sim", headers={"Accept-Encoding": "gzip;q=0"})
    assert data == body(1024)


def test_chunked_framing(client) -> None:
    sock = client.send(client.request("chunked.big-5000.sim", headers="Connection: close\r\n"))
    wire = client.read_until_close(sock)
    head, _, framed = wire.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"Content-Length" not in head
    chunks = []
    while True:
        size_line, _, framed = framed.partition(b"\r\n")
        size = int(size_line, 16)
        chunks.append(framed[:size])
        assert framed[size : size + 2] == b"\r\n"
        framed = framed[size + 2 :]
        if size == 0:
            break
    assert len(chunks) >= 4 and b"".join(chunks) == body(5000)
    assert framed == b""


def test_gzip_and_chunked_together(client) -> None:
    response, data = client.get("gzip--chunked.sim", headers={"Accept-Encoding": "gzip"})
    assert response.getheader("Transfer-Encoding") == "chunked"
    assert gzip.decompress(data) == body(1024)


@pytest.mark.parametrize(("name", "size"), [("big-0.sim", 0), ("big-100k.sim", 102400)])
def test_big_bodies_have_their_size(client, name: str, size: int) -> None:
    response, data = client.get(name)
    assert int(response.getheader("Content-Length")) == size == len(data)


def test_big_bodies_over_a_mebibyte_are_streamed(client) -> None:
    response, data = client.get("big-3m.sim")
    assert int(response.getheader("Content-Length")) == len(data) == 3 * 1024 * 1024
    response, data = client.get("big-2m.gzip.sim", headers={"Accept-Encoding": "gzip"})
    assert len(gzip.decompress(data)) == 2 * 1024 * 1024


def test_head_requests_get_no_body(client) -> None:
    response, data = client.get("big-100k.sim", method="HEAD")
    assert response.status == 200 and data == b""
    assert response.getheader("Content-Length") == "102400"


def test_slowbody_trickles(client) -> None:
    sock = client.send(client.request("slowbody-400.sim", headers="Connection: close\r\n"))
    start = time.monotonic()
    reads = []
    while data := sock.recv(65536):
        reads.append(data)
    elapsed = time.monotonic() - start
    wire = b"".join(reads)
    assert wire.endswith(body(1024))
    assert len(reads) >= 3
    assert elapsed >= 0.35  # a lower bound: the body cannot arrive sooner than it is sent


# -- failures -------------------------------------------------------------------


def test_hang_never_answers(client) -> None:
    sock = client.send(client.request("hang.sim"), timeout=0.3)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    sock.close()


def test_hang_body_stalls_mid_body(client) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", client.info.http_port, timeout=0.3)
    connection.request("GET", "/", headers={"Host": "hang-body.sim"})
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Length") == "1024"
    assert response.read(512) == body(512)
    with pytest.raises(TimeoutError):
        response.read(1)
    connection.close()


def test_reset_sends_rst(client) -> None:
    sock = client.send(client.request("reset.sim"))
    with pytest.raises(ConnectionResetError):
        sock.recv(1)
    sock.close()


def test_close_sends_fin_and_nothing_else(client) -> None:
    sock = client.send(client.request("close.sim"))
    assert sock.recv(1) == b""
    sock.close()


def test_garbage_is_not_http(client) -> None:
    sock = client.send(client.request("garbage.sim"))
    wire = client.read_until_close(sock)
    assert wire and not wire.startswith(b"HTTP/")
    with pytest.raises(http.client.BadStatusLine):
        client.get("garbage.sim")


def test_delay_applies_before_a_failure(client) -> None:
    sock = client.send(client.request("delay-300--reset.sim"), timeout=0.1)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    sock.settimeout(3)
    with pytest.raises(ConnectionResetError):
        sock.recv(1)


# -- connections ----------------------------------------------------------------


def test_keep_alive_serves_many_requests_on_one_connection(client) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", client.info.http_port, timeout=3)
    for status in (200, 404, 500, 200):
        connection.request("GET", "/", headers={"Host": f"status-{status}.sim"})
        response = connection.getresponse()
        response.read()
        assert response.status == status
    assert connection.sock is not None
    connection.close()


def test_pipelined_requests_are_answered_in_order(client) -> None:
    requests = (
        client.request("delay-200.status-404.sim")
        + client.request("status-500.sim")
        + client.request("status-201.sim", headers="Connection: close\r\n")
    )
    wire = client.read_until_close(client.send(requests))
    statuses = re.findall(rb"HTTP/1\.1 ([0-9]{3}) ", wire)
    assert statuses == [b"404", b"500", b"201"]


def test_thousands_of_pipelined_requests_behind_a_delay(client) -> None:
    requests = client.request("delay-50.sim") + client.request("status-404.sim") * 3000
    wire = client.read_until_close(
        client.send(requests + client.request("x.sim", headers="Connection: close\r\n"))
    )
    statuses = re.findall(rb"HTTP/1\.1 ([0-9]{3}) ", wire)
    assert statuses == [b"200"] + [b"404"] * 3000 + [b"200"]


def test_http10_closes_after_the_response(client) -> None:
    sock = client.send(b"GET / HTTP/1.0\r\nHost: x.sim\r\n\r\n")
    wire = client.read_until_close(sock)
    assert wire.startswith(b"HTTP/1.1 200") and wire.endswith(body(1024))


def test_malformed_request_gets_400(client) -> None:
    wire = client.read_until_close(client.send(b"NOT HTTP AT ALL\r\n\r\n"))
    assert wire.startswith(b"HTTP/1.1 400")


def test_host_header_port_and_case_are_ignored(client) -> None:
    for host in ["Status-404.SIM", "status-404.sim:1234", "status-404.sim."]:
        sock = client.send(client.request(host, headers="Connection: close\r\n"))
        assert client.read_until_close(sock).startswith(b"HTTP/1.1 404")


def test_generic_hosts_behave_as_predicted(client) -> None:
    quick = [
        b
        for b in map(behaviour, hosts(300))
        if b.action == "respond" and b.redirects == 0 and b.delay_ms < 60
    ][:10]
    assert len(quick) == 10
    for b in quick:
        response, data = client.get(b.host)
        assert response.status == b.expected_status
        assert len(data) == b.body_bytes  # no Accept-Encoding: identity


async def test_many_concurrent_connections(sim: SimInfo) -> None:
    async def one(i: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", sim.http_port)
        writer.write(f"GET / HTTP/1.1\r\nHost: c{i}.sim\r\nConnection: close\r\n\r\n".encode())
        data = await reader.read()
        writer.close()
        return data

    replies = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(500))), 10)
    assert all(reply.startswith(b"HTTP/1.1 200") for reply in replies)


def test_only_loopback_is_contacted(sim: SimInfo) -> None:
    assert sim.host == "127.0.0.1"
    with socket.create_connection(("127.0.0.1", sim.http_port), timeout=1):
        pass


def test_urllib_sees_errors_as_errors(sim: SimInfo, sim_urlopen) -> None:
    with pytest.raises(urllib.error.HTTPError) as raised:
        sim_urlopen(sim.url("status-404.sim"))
    assert raised.value.code == 404
