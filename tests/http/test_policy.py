"""What the client sends and accepts: credentials and redirects, the Host header,
userinfo, Location decoding, content decoding under the cap, host names and
header validation - each against a real server on loopback that records the
request heads it was sent."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import brotli
import pytest
from backports import zstd

from surge.errors import RequestError
from surge.http import AsyncClient
from surge.http.headers import InvalidHeader
from surge.http.url import parse_url

Route = Callable[[str, int, list[int]], bytes]


class Recorder:
    """Servers on loopback ports (one origin each) sharing one log of requests."""

    def __init__(self) -> None:
        self.heads: list[tuple[int, bytes]] = []  # (port, request head)

    def sent_to(self, port: int) -> list[bytes]:
        return [head for p, head in self.heads if p == port]


@asynccontextmanager
async def servers(count: int, route: Route) -> AsyncIterator[tuple[Recorder, list[int]]]:
    recorder = Recorder()
    started: list[asyncio.Server] = []
    ports: list[int] = []

    def handler_for(index: int) -> Callable[..., object]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            port = ports[index]
            recorder.heads.append((port, head))
            path = head.split(b" ", 2)[1].decode("latin-1")
            writer.write(route(path, port, ports))
            await writer.drain()
            writer.close()

        return handle

    for index in range(count):
        server = await asyncio.start_server(handler_for(index), "127.0.0.1", 0)  # type: ignore[arg-type]
        started.append(server)
        ports.append(server.sockets[0].getsockname()[1])
    try:
        yield recorder, ports
    finally:
        for server in started:
            server.close()
            await server.wait_closed()


def redirect(location: bytes, status: int = 302) -> bytes:
    return b"HTTP/1.1 %d Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (status, location)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
SECRETS = {"Authorization": "Bearer s3cret", "Cookie": "id=42", "Proxy-Authorization": "Basic eA=="}


def credential_lines(head: bytes) -> list[bytes]:
    return [
        line.split(b":")[0].lower()
        for line in head.split(b"\r\n")
        if line.lower().startswith((b"authorization:", b"cookie:", b"proxy-authorization:"))
    ]


# -- 1. credentials and redirects ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["client", "request"])
async def test_credentials_stay_with_their_origin_across_redirects(where: str) -> None:
    """Another port is another origin: Authorization, Cookie and
    Proxy-Authorization are not sent there (curl's rule since CVE-2022-27776)."""

    def route(path: str, port: int, ports: list[int]) -> bytes:
        if path == "/start":
            return redirect(b"/same")  # same origin first: kept
        if path == "/same":
            return redirect(b"http://127.0.0.1:%d/other" % ports[1])
        return OK

    async with servers(2, route) as (recorder, ports):
        client = AsyncClient(follow_redirects=True, headers=SECRETS if where == "client" else None)
        async with client:
            extra = {"headers": SECRETS} if where == "request" else {}
            response = await client.get(f"http://127.0.0.1:{ports[0]}/start", **extra)  # type: ignore[arg-type]
    assert response.status == 200 and response.redirects == 2
    first, same = recorder.sent_to(ports[0])
    assert (
        sorted(credential_lines(first))
        == sorted(credential_lines(same))
        == [
            b"authorization",
            b"cookie",
            b"proxy-authorization",
        ]
    )
    (other,) = recorder.sent_to(ports[1])
    assert credential_lines(other) == []


async def test_location_trusted_keeps_the_credentials() -> None:
    def route(path: str, port: int, ports: list[int]) -> bytes:
        return redirect(b"http://127.0.0.1:%d/x" % ports[1]) if port == ports[0] else OK

    async with (
        servers(2, route) as (recorder, ports),
        AsyncClient(follow_redirects=True, headers=SECRETS, auth=("u", "p")) as client,
    ):
        await client.get(f"http://127.0.0.1:{ports[0]}/", location_trusted=True)
        await client.get(f"http://127.0.0.1:{ports[0]}/")
    trusted, untrusted = recorder.sent_to(ports[1])
    # The caller's Authorization wins over -u's (curl: a custom header replaces its own).
    assert b"\nAuthorization: Bearer s3cret" in trusted and b"\nAuthorization: Basic" not in trusted
    assert len(credential_lines(trusted)) == 3
    assert credential_lines(untrusted) == []


async def test_a_redirect_back_to_the_first_origin_gets_the_credentials_again() -> None:
    def route(path: str, port: int, ports: list[int]) -> bytes:
        if path == "/start":
            return redirect(b"http://127.0.0.1:%d/away" % ports[1])
        if path == "/away":
            return redirect(b"http://127.0.0.1:%d/back" % ports[0])
        return OK

    async with (
        servers(2, route) as (recorder, ports),
        AsyncClient(follow_redirects=True, auth=("u", "p")) as client,
    ):
        await client.get(f"http://127.0.0.1:{ports[0]}/start")
    assert [credential_lines(h) for h in recorder.sent_to(ports[0])] == [[b"authorization"]] * 2
    assert credential_lines(recorder.sent_to(ports[1])[0]) == []


# -- 2. the caller's Host -------------------------------------------------------------------------


async def test_a_callers_host_header_replaces_surges_own() -> None:
    def route(path: str, port: int, ports: list[int]) -> bytes:
        if path == "/start":
            return redirect(b"/next")  # same host name: the caller's Host again
        if path == "/next":
            return redirect(b"http://localhost:%d/last" % ports[0])  # another name: its own
        return OK

    async with (
        servers(1, route) as (recorder, ports),
        AsyncClient(follow_redirects=True, headers={"host": "b.test"}) as client,
    ):
        await client.get(f"http://127.0.0.1:{ports[0]}/start")
    hosts = [
        [line for line in head.split(b"\r\n") if line.lower().startswith(b"host:")]
        for head in recorder.sent_to(ports[0])
    ]
    assert hosts == [[b"Host: b.test"], [b"Host: b.test"], [b"Host: localhost:%d" % ports[0]]]


# -- 3. userinfo and -u ---------------------------------------------------------------------------


async def test_userinfo_is_sent_as_basic_auth_and_not_to_another_origin() -> None:
    def route(path: str, port: int, ports: list[int]) -> bytes:
        if path == "/start":
            return redirect(b"/same")
        if path == "/same":
            return redirect(b"http://127.0.0.1:%d/x" % ports[1])
        return OK

    async with servers(2, route) as (recorder, ports), AsyncClient(follow_redirects=True) as client:
        response = await client.get(f"http://us%40er:p%3Ass@127.0.0.1:{ports[0]}/start")
    basic = b"Authorization: Basic dXNAZXI6cDpzcw=="  # us@er:p:ss
    assert all(basic in head for head in recorder.sent_to(ports[0]))
    assert credential_lines(recorder.sent_to(ports[1])[0]) == []
    assert "p%3Ass" not in response.final_url and "@" not in response.final_url


async def test_user_option_wins_over_userinfo_as_in_curl() -> None:
    async with (
        servers(1, lambda path, port, ports: OK) as (recorder, ports),
        AsyncClient(auth=("a", "b")) as client,
    ):
        await client.get(f"http://c:d@127.0.0.1:{ports[0]}/")
    assert b"Authorization: Basic YTpi\r\n" in recorder.heads[0][1]  # a:b


# -- 4./5. Location -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "path"),
    [
        ("/files/ü.txt".encode(), "/files/%C3%BC.txt"),  # UTF-8
        ("/files/ü.txt".encode("latin-1"), "/files/%C3%BC.txt"),  # not UTF-8: latin-1
        (b"/a b?q=x y", "/a%20b?q=x%20y"),
        (b"/already%20escaped", "/already%20escaped"),
    ],
)
async def test_location_is_decoded_and_escaped(location: bytes, path: str) -> None:
    def route(got: str, port: int, ports: list[int]) -> bytes:
        return redirect(location) if got == "/start" else OK

    async with servers(1, route) as (recorder, ports), AsyncClient(follow_redirects=True) as client:
        response = await client.get(f"http://127.0.0.1:{ports[0]}/start")
    assert recorder.heads[1][1].split(b" ")[1].decode() == path
    assert response.final_url == f"http://127.0.0.1:{ports[0]}{path}"
    assert response.status == 200


@pytest.mark.parametrize("location", [b"", b"   "])
async def test_an_empty_location_is_not_followed(location: bytes) -> None:
    async with (
        servers(1, lambda path, port, ports: redirect(location)) as (recorder, ports),
        AsyncClient(follow_redirects=True) as client,
    ):
        response = await client.get(f"http://127.0.0.1:{ports[0]}/")
    assert response.status == 302 and response.redirects == 0
    assert len(recorder.heads) == 1


# -- 4. decoding under the cap --------------------------------------------------------------------

ZEROS = b"\0" * (4 * 1024 * 1024)
CODINGS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "br": brotli.compress,
    "zstd": zstd.compress,
    "gzip, br": lambda data: brotli.compress(gzip.compress(data)),
}


def encoded(coding: str, data: bytes) -> bytes:
    body = CODINGS[coding](data)
    return (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n"
        % (coding.encode(), len(body))
        + body
    )


@pytest.mark.parametrize("coding", list(CODINGS))
async def test_every_coding_decodes_and_a_bomb_is_body_too_large(coding: str) -> None:
    async with (
        servers(1, lambda path, port, ports: encoded(coding, ZEROS)) as (_, ports),
        AsyncClient(body_cap=len(ZEROS)) as client,
    ):
        response = await client.get(f"http://127.0.0.1:{ports[0]}/")
        assert response.body == ZEROS and response.bytes < len(ZEROS) // 100
        async with AsyncClient(body_cap=len(ZEROS) - 1) as client:
            with pytest.raises(RequestError) as caught:
                await client.get(f"http://127.0.0.1:{ports[0]}/")
    assert caught.value.error_class == "body_too_large"


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip"])
async def test_a_bomb_is_stopped_within_bounded_memory(coding: str) -> None:
    """64 MiB of zeros behind a few KiB of wire, with a 1 MiB cap: the decoder
    stops at the cap, so the client never holds the 64 MiB (``brotli.decompress``
    of the whole body did: 432 MB of RSS for 200 MB of zeros)."""
    wire = encoded(coding, b"\0" * (64 * 1024 * 1024))
    cap = 1024 * 1024
    async with (
        servers(1, lambda path, port, ports: wire) as (_, ports),
        AsyncClient(body_cap=cap) as client,
    ):
        tracemalloc.start()
        try:
            with pytest.raises(RequestError) as caught:
                await client.get(f"http://127.0.0.1:{ports[0]}/")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert caught.value.error_class == "body_too_large"
    assert peak < 8 * cap


async def test_zstd_is_asked_for() -> None:
    async with (
        servers(1, lambda path, port, ports: OK) as (recorder, ports),
        AsyncClient() as client,
    ):
        await client.get(f"http://127.0.0.1:{ports[0]}/")
    assert b"Accept-Encoding: gzip, deflate, br, zstd\r\n" in recorder.heads[0][1]


async def test_a_corrupt_body_is_a_protocol_error() -> None:
    wire = b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 4\r\n\r\nxxxx"
    async with servers(1, lambda path, port, ports: wire) as (_, ports), AsyncClient() as client:
        with pytest.raises(RequestError) as caught:
            await client.get(f"http://127.0.0.1:{ports[0]}/")
    assert caught.value.error_class == "protocol_error"


# -- 6. hosts and headers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://1,a.test/",
        'http://a"b.test/',
        "http://a\0b.test/",
        f"http://{'a' * 64}.test/",
        "http://☃.net/",
        "http://a b.test/",
    ],
)
def test_hosts_that_are_not_host_names_are_invalid(url: str) -> None:
    parse_url.cache_clear()
    with pytest.raises(RequestError) as caught:
        parse_url(url)
    assert caught.value.error_class == "invalid_url"


def test_idn_hosts_are_idna_2008() -> None:
    parse_url.cache_clear()
    assert parse_url("http://faß.de/").host == "xn--fa-hia.de"
    assert parse_url("http://BÜCHER.de/").host == "xn--bcher-kva.de"
    assert parse_url("http://faß.de/ü").url == "http://xn--fa-hia.de/%C3%BC"
    assert parse_url("http://under_score.test/").host == "under_score.test"


async def test_an_invalid_host_fails_before_any_lookup() -> None:
    async with AsyncClient() as client:
        with pytest.raises(RequestError) as caught:
            await client.get("http://1,a.test/")
        assert client.resolver.lookups == 0
    assert caught.value.error_class == "invalid_url"


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Bad": "a\r\nInjected: 1"},
        {"X-Bad": "nul\0"},
        {"Bad Name": "x"},
        {"X-Snow": "☃"},  # not latin-1: cannot be sent
        {"": "x"},
    ],
)
async def test_unsendable_headers_are_usage_errors(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        AsyncClient(headers=headers)
    async with AsyncClient() as client:
        with pytest.raises(InvalidHeader):
            await client.get("http://127.0.0.1:9/", headers=headers)


async def test_a_method_must_be_a_token() -> None:
    async with AsyncClient() as client:
        with pytest.raises(ValueError):
            await client.request("GET /x HTTP/1.1\r\n", "http://127.0.0.1:9/")


# -- 7. what the response says ---------------------------------------------------------------------


async def test_http_version_comes_from_the_status_line() -> None:
    wire = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
    async with servers(1, lambda path, port, ports: wire) as (_, ports), AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{ports[0]}/")
    assert response.http_version == "HTTP/1.0"


async def test_redirects_are_counted_and_timed_and_attempts_are_not_hops() -> None:
    def route(path: str, port: int, ports: list[int]) -> bytes:
        hop = int(path.strip("/") or 0)
        return redirect(b"/%d" % (hop + 1)) if hop < 3 else OK

    async with servers(1, route) as (_, ports), AsyncClient(follow_redirects=True) as client:
        response = await client.get(f"http://127.0.0.1:{ports[0]}/")
        direct = await client.get(f"http://127.0.0.1:{ports[0]}/3")
    assert (response.redirects, response.attempts) == (3, 1)
    assert response.redirect_ms > 0 and direct.redirect_ms == 0
