"""Proxies (surge.http.proxy): the choice of proxy and the no-proxy list as curl
makes them, the handshakes as bytes, and requests through real proxies on
loopback - tinyproxy (HTTP: forwarding and CONNECT) and microsocks (SOCKS5) -
checked against curl ``--proxy`` and shown to be in the path (stopped, the same
requests fail to connect)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from tests.http.conftest import StartProxy, _tiny_server, tls_front

import surge
from surge.errors import RequestError, UsageError
from surge.http import AsyncClient
from surge.http.connection import MAX_HEAD_BYTES
from surge.http.proxy import (
    NoProxy,
    Proxies,
    Proxy,
    connect_request,
    connect_status,
    parse_proxy,
    socks5_connect,
    socks5_credentials,
    socks5_greeting,
)
from surge.http.url import parse_url
from surge.sim import SimInfo

trustme = pytest.importorskip("trustme")

ClientFactory = Callable[..., AsyncClient]
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

# -- which proxy, as curl chooses ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "spec", "direct"),
    [
        ("example.com", "example.com", True),
        ("www.example.com", "example.com", True),  # the domain's names too
        ("nonexample.com", "example.com", False),  # a label boundary, not a string suffix
        ("example.com.org", "example.com", False),
        ("example.com", ".example.com", True),  # one leading dot is dropped, as curl
        ("www.example.com", ".example.com", True),
        ("example.com.", "example.com", True),  # trailing dots ignored on both sides
        ("example.com", "example.com.", True),
        ("www.example.com", "Example.COM", True),  # case-insensitive
        ("b.test", " a.test ,, b.test\tc.test", True),  # commas and blanks separate
        ("d.test", " a.test ,, b.test\tc.test", False),
        ("anything.test", "*", True),
        ("anything.test", " * ", True),
        ("anything.test", "a.test,*", False),  # curl: * alone, not as an entry
        ("x.test", "", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.2", "127.0.0.0/24", True),  # CIDR, curl 7.86
        ("127.0.1.2", "127.0.0.0/24", False),
        ("10.1.2.3", "10.0.0.0/8,", True),
        ("10.1.2.3", "10.0.0.0/33", False),  # a range that is not one matches nothing
        ("1.2.3.4", "0.0.0.0/0", True),  # every address (curl: 0.0.0.0 alone)
        ("::1", "::1", True),
        ("::1", "[::1]", True),
        ("fd00::1", "fd00::/8", True),
        ("fe80::1", "fd00::/8", False),
        ("::1", "127.0.0.1", False),  # another family
        ("127.0.0.1", "localhost", False),  # a name never matches an address
        ("localhost", "127.0.0.1", False),  # nor an address a name
    ],
)
def test_noproxy_matches_as_curl(host: str, spec: str, direct: bool) -> None:
    assert NoProxy(spec).matches(host) is direct


HTTP_URL = parse_url("http://a.test/x")
HTTPS_URL = parse_url("https://a.test/x")


def chosen(proxies: Proxies | None) -> tuple[str | None, str | None]:
    """The proxies for http://a.test and https://a.test, as host:port."""
    if proxies is None:
        return None, None
    found = (proxies.proxy_for(HTTP_URL), proxies.proxy_for(HTTPS_URL))
    return tuple(None if p is None else f"{p.host}:{p.port}" for p in found)  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        # http_proxy is read in lower case only: HTTP_PROXY is the CGI variable
        # of a request's Proxy: header (httpoxy), never a proxy setting.
        ({"HTTP_PROXY": "h:1"}, (None, None)),
        ({"http_proxy": "h:1"}, ("h:1", None)),
        ({"https_proxy": "l:1", "HTTPS_PROXY": "u:2"}, (None, "l:1")),  # lower case first
        ({"HTTPS_PROXY": "u:2"}, (None, "u:2")),
        ({"all_proxy": "a:3"}, ("a:3", "a:3")),
        ({"ALL_PROXY": "A:3"}, ("a:3", "a:3")),
        ({"all_proxy": "a:3", "ALL_PROXY": "b:4"}, ("a:3", "a:3")),
        ({"all_proxy": "a:3", "http_proxy": "h:1"}, ("h:1", "a:3")),  # the scheme's own first
        ({"all_proxy": "", "ALL_PROXY": "b:4"}, ("b:4", "b:4")),  # empty is unset
        ({"all_proxy": "a:3", "no_proxy": "a.test"}, (None, None)),
        ({"all_proxy": "a:3", "NO_PROXY": "a.test"}, (None, None)),
        ({"all_proxy": "a:3", "no_proxy": "b.test", "NO_PROXY": "a.test"}, ("a:3", "a:3")),
        ({"all_proxy": "a:3", "no_proxy": "*"}, (None, None)),
        ({"http_proxy": "h"}, ("h:1080", None)),  # curl's default port
        ({"https_proxy": "https://s"}, (None, "s:443")),
    ],
)
def test_the_environment_is_read_as_curl_reads_it(
    environ: dict[str, str], expected: tuple[str | None, str | None]
) -> None:
    assert chosen(Proxies.configure(environ=environ)) == expected


def test_options_win_over_the_environment() -> None:
    env = {"http_proxy": "h:1", "https_proxy": "s:2", "no_proxy": "a.test"}
    # --proxy replaces the variables, for every scheme...
    assert chosen(Proxies.configure("o:5", environ={"http_proxy": "h:1"})) == ("o:5", "o:5")
    # ... but no_proxy still applies to it (curl since 7.53), unless --noproxy
    # says otherwise; --noproxy "" proxies every host.
    assert chosen(Proxies.configure("o:5", environ=env)) == (None, None)
    assert chosen(Proxies.configure("o:5", "", environ=env)) == ("o:5", "o:5")
    assert chosen(Proxies.configure(None, "b.test", environ=env)) == ("h:1", "s:2")
    # --proxy "": no proxy at all, the environment's ignored (curl -x "").
    assert Proxies.configure("", environ=env) is None
    # trust_env=False: nothing from the environment, options still apply.
    assert Proxies.configure(environ=env, trust_env=False) is None
    assert chosen(Proxies.configure("o:5", environ=env, trust_env=False)) == ("o:5", "o:5")
    # A variable that is not a proxy URL is a usage error that names it.
    with pytest.raises(UsageError, match=r"\$https_proxy"):
        Proxies.configure(environ={"https_proxy": "ftp://x"})


def test_the_client_reads_the_environment_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("https_proxy", "http://envproxy:3128")
    route = AsyncClient()._proxies
    assert route is not None and route.proxy_for(HTTPS_URL) == Proxy("http", "envproxy", 3128)
    assert AsyncClient(trust_env=False)._proxies is None
    assert AsyncClient(proxy="")._proxies is None


@pytest.mark.parametrize(
    ("text", "proxy"),
    [
        ("127.0.0.1:3128", Proxy("http", "127.0.0.1", 3128)),
        ("proxy.test", Proxy("http", "proxy.test", 1080)),
        ("HTTPS://Proxy.Test", Proxy("https", "proxy.test", 443)),
        ("socks5://s.test", Proxy("socks5", "s.test", 1080)),
        ("socks5h://s.test:9/", Proxy("socks5h", "s.test", 9)),
        ("http://[::1]:8080", Proxy("http", "::1", 8080)),
        # credentials percent-decoded, as curl does
        ("http://u%40x:p%3Aw%20@p.test:1", Proxy("http", "p.test", 1, b"u@x", b"p:w ")),
        ("http://user@p.test:1", Proxy("http", "p.test", 1, b"user", b"")),
    ],
)
def test_proxy_urls(text: str, proxy: Proxy) -> None:
    assert parse_proxy(text) == proxy


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ftp://p.test", "scheme"),
        ("socks4://p.test", "SOCKS4"),
        ("http://p.test/path", "no path"),
        ("http://:80", "no proxy host"),
        ("http://p.test:0", "port 0"),
        ("http://p.test:99999", "not a proxy URL"),
        ("socks5://" + "u" * 256 + ":p@p.test", "255 bytes"),
    ],
)
def test_proxy_urls_that_are_not(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_proxy(text)


def test_credentials_never_show() -> None:
    proxy = parse_proxy("http://user:secret@p.test:1")
    assert "secret" not in repr(proxy) and "secret" not in repr(("http", "*", 0, proxy))
    assert proxy.authorization == b"Proxy-Authorization: Basic %s\r\n" % base64.b64encode(
        b"user:secret"
    )


def test_routes() -> None:
    """Forwarded http:// requests share the proxy's key and carry an absolute
    target and the proxy's credentials; https:// and SOCKS go through tunnels
    keyed by origin and proxy; no_proxy hosts keep their own key."""
    proxies = Proxies.configure("http://u:p@p.test:1", "direct.test")
    assert proxies is not None
    proxy = proxies.http
    assert proxy is not None
    a, b = parse_url("http://a.test/x?y"), parse_url("http://[::1]:8080/")
    assert proxies.route(a) == (("http", "*", 0, proxy), b"http://a.test/x?y", proxy.authorization)
    assert proxies.route(b)[:2] == (("http", "*", 0, proxy), b"http://[::1]:8080/")
    assert proxies.route(HTTPS_URL) == (("https", "a.test", 443, proxy), b"/x", b"")
    direct = parse_url("http://www.direct.test/")
    assert proxies.route(direct) == (direct.key, b"/", b"")
    socks = Proxies.configure("socks5h://u:p@s.test")
    assert socks is not None and socks.http is not None
    assert socks.route(a) == (("http", "a.test", 80, socks.http), b"/x?y", b"")


# -- the handshakes as bytes --------------------------------------------------------------------


def test_connect_and_socks5_messages() -> None:
    auth = b"Proxy-Authorization: Basic dTpw\r\n"
    assert connect_request("a.test", 443, auth) == (
        b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n" + auth + b"\r\n"
    )
    assert connect_request("::1", 8443).startswith(b"CONNECT [::1]:8443 HTTP/1.1\r\n")
    assert connect_status(b"HTTP/1.0 200 Connection established\r\nVia: x") == (
        200,
        "Connection established",
    )
    assert connect_status(b"HTTP/1.1 407") == (407, "")
    with pytest.raises(RequestError, match="not HTTP") as caught:
        connect_status(b"SSH-2.0-OpenSSH")
    assert caught.value.error_class == "protocol_error"
    # RFC 1928: version 5, the methods offered; RFC 1929: version 1, length-prefixed
    assert socks5_greeting(Proxy("socks5", "s", 1)) == b"\x05\x01\x00"
    assert socks5_greeting(Proxy("socks5", "s", 1, b"u", b"p")) == b"\x05\x02\x00\x02"
    assert socks5_credentials(b"user", b"pw") == b"\x01\x04user\x02pw"
    assert socks5_connect("127.0.0.1", 443) == b"\x05\x01\x00\x01\x7f\x00\x00\x01\x01\xbb"
    assert socks5_connect("::1", 80) == b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x00\x50"
    assert socks5_connect("a.test", 80) == b"\x05\x01\x00\x03\x06a.test\x00\x50"


# -- what surge sends a proxy, seen by a recording one ----------------------------------------


async def test_forwarded_requests_share_one_keepalive_connection_to_the_proxy() -> None:
    """Requests to several origins go to the proxy over one connection, each
    with its absolute-form target, its own Host and the proxy's credentials."""
    connections: list[list[bytes]] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads: list[bytes] = []
        connections.append(heads)
        while True:
            try:
                heads.append(await reader.readuntil(b"\r\n\r\n"))
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    async with (
        _tiny_server(proxy) as port,
        AsyncClient(proxy=f"http://us%40r:pw@127.0.0.1:{port}", max_time=5) as client,
    ):
        urls = ["http://a.test/x?y=1", "http://b.test:8080/", "http://[::1]/", "http://a.test/z"]
        for url in urls:
            response = await client.get(url)
            assert (response.status, response.content) == (200, b"ok")
        assert client.stats()["dns_lookups"] == 0  # the proxy resolves the origins
    assert len(connections) == 1
    heads = connections[0]
    assert [h.split(b"\r\n", 1)[0] for h in heads] == [
        b"GET http://a.test/x?y=1 HTTP/1.1",
        b"GET http://b.test:8080/ HTTP/1.1",
        b"GET http://[::1]/ HTTP/1.1",
        b"GET http://a.test/z HTTP/1.1",
    ]
    hosts = [next(line for line in h.split(b"\r\n") if line.startswith(b"Host:")) for h in heads]
    assert hosts == [b"Host: a.test", b"Host: b.test:8080", b"Host: [::1]", b"Host: a.test"]
    token = base64.b64encode(b"us@r:pw")
    assert all(h.count(b"\r\nProxy-Authorization: Basic " + token + b"\r\n") == 1 for h in heads)


async def test_a_connect_refused_by_the_proxy_is_an_error_record() -> None:
    """A non-2xx answer to CONNECT is connect_refused saying what the proxy
    answered; the CONNECT carried Host and the proxy's credentials."""
    heads: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(
            b"HTTP/1.1 407 Proxy Authentication Required\r\n"
            b'Proxy-Authenticate: Basic realm="p"\r\nContent-Length: 5\r\n\r\nnope!'
        )
        await writer.drain()
        await reader.read()

    async with _tiny_server(proxy) as port:
        records = [
            r
            async for r in surge.fetch(
                ["https://a.test/"], proxy=f"http://u:p@127.0.0.1:{port}", max_time=5
            )
        ]
    (record,) = records
    assert record["error"] == "connect_refused"
    assert record["status"] is None  # the proxy's status, not the origin's
    assert record["error_detail"] == (
        "proxy answered 407 Proxy Authentication Required to CONNECT a.test:443"
    )
    token = base64.b64encode(b"u:p")
    assert heads == [
        b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n"
        b"Proxy-Authorization: Basic " + token + b"\r\n\r\n"
    ]


async def test_the_proxys_answer_to_connect_is_bounded() -> None:
    """A proxy whose answer head never ends is cut off at MAX_HEAD_BYTES, not
    read until the connect timeout."""
    sent = 0

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        line = b"X-Filler: " + b"y" * 1000 + b"\r\n"
        try:
            while True:
                writer.write(line)
                sent += len(line)
                await writer.drain()
        except ConnectionError:
            pass

    async with (
        _tiny_server(proxy) as port,
        AsyncClient(proxy=f"http://127.0.0.1:{port}", connect_timeout=20) as client,
    ):
        with pytest.raises(RequestError) as caught:
            await client.get("https://a.test/")
    assert caught.value.error_class == "protocol_error"
    assert f"exceeds {MAX_HEAD_BYTES:,} bytes" in caught.value.detail
    assert sent > MAX_HEAD_BYTES


# -- through real proxies ------------------------------------------------------------------------


def curl(*args: str) -> tuple[int, bytes]:
    """curl's status and body (the reference client)."""
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}", *args],
        capture_output=True,
        timeout=20,
        check=True,
    )
    body, _, code = done.stdout.rpartition(b"\n")
    return int(code), body


async def test_http_and_https_through_tinyproxy_as_curl(
    sim: SimInfo, start_proxy: StartProxy, client_for: ClientFactory
) -> None:
    """http:// forwarded, https:// through CONNECT: the same status and body as
    curl --proxy, and as without the proxy; tinyproxy's Via and its log show it
    carried them."""
    tinyproxy = start_proxy("tinyproxy", connect_ports=[sim.https_port])
    plain = f"http://localhost:{sim.http_port}/page"
    tls = f"https://localhost:{sim.https_port}/page"
    async with client_for(proxy=tinyproxy.url()) as client, client_for() as direct:
        for url in (plain, tls):
            response = await client.get(url)
            reference = curl("--proxy", tinyproxy.url(), "--cacert", sim.cafile, url)
            assert (response.status, response.content) == reference
            assert response.content == (await direct.get(url)).content
            assert response.connection.address == ("127.0.0.1", tinyproxy.port)
        assert "tinyproxy" in (await client.get(plain)).headers["via"]
        tunnelled = await client.get(tls)
        assert "via" not in tunnelled.headers  # the origin's own answer, end to end
        assert tunnelled.connection.tls is not None  # TLS with the origin, in the tunnel
    log = tinyproxy.log_text()
    assert f"GET http://localhost:{sim.http_port}/page" in log
    assert f"CONNECT localhost:{sim.https_port}" in log


async def test_stopping_the_proxy_fails_the_same_run(sim: SimInfo, start_proxy: StartProxy) -> None:
    """The proxy is in the path: stopped, the very same run gets connect_refused,
    saying it could not reach the proxy."""
    tinyproxy = start_proxy("tinyproxy", connect_ports=[sim.https_port])
    urls = [f"http://localhost:{sim.http_port}/", f"https://localhost:{sim.https_port}/"]

    def run() -> list[dict[str, object]]:
        return sorted(
            surge.fetch_all(urls, proxy=tinyproxy.url(), cafile=sim.cafile, max_time=5),
            key=lambda r: str(r["url"]),
        )

    assert [(r["status"], r["error"]) for r in run()] == [(200, None), (200, None)]
    tinyproxy.stop()
    failed = run()
    assert [(r["status"], r["error"]) for r in failed] == [(None, "connect_refused")] * 2
    for record in failed:
        assert str(record["error_detail"]).startswith("cannot reach the proxy: ")
        assert f"127.0.0.1:{tinyproxy.port}" in str(record["error_detail"])


async def test_tinyproxy_with_credentials(
    sim: SimInfo, start_proxy: StartProxy, client_for: ClientFactory
) -> None:
    """Basic credentials from the proxy URL (percent-decoded) for a forwarded
    request and for CONNECT; without them the proxy's 407 is the response of a
    forwarded request and a connect_refused for a tunnel."""
    tinyproxy = start_proxy(
        "tinyproxy", auth=("surge", "pass.word-1"), connect_ports=[sim.https_port]
    )
    plain = f"http://localhost:{sim.http_port}/"
    tls = f"https://localhost:{sim.https_port}/"
    good = tinyproxy.url(userinfo="surge:pass%2Eword%2D1")
    async with client_for(proxy=good) as client:
        assert (await client.get(plain)).status == 200
        assert (await client.get(tls)).status == 200
    assert curl("--proxy", good, "--cacert", sim.cafile, plain)[0] == 200
    for proxy in (tinyproxy.url(), tinyproxy.url(userinfo="surge:wrong")):
        async with client_for(proxy=proxy) as client:
            # A response, as curl has it (tinyproxy answers a forwarded request 401)
            status = (await client.get(plain)).status
            assert status in (401, 407)
            assert status == curl("--proxy", proxy, plain)[0]
            with pytest.raises(RequestError) as caught:
                await client.get(tls)
            assert caught.value.error_class == "connect_refused"
            # tinyproxy says 401 where RFC 9110 says 407
            assert re.match(r"proxy answered 40[17] .* to CONNECT localhost:", caught.value.detail)
            assert caught.value.status is None


async def test_socks5_through_microsocks(
    sim: SimInfo, start_proxy: StartProxy, client_for: ClientFactory
) -> None:
    """http:// and https:// through SOCKS5 tunnels, with RFC 1929 credentials
    (percent-decoded); wrong ones, or none, are connect_refused."""
    microsocks = start_proxy("microsocks", auth=("sur ge", "p@ss:word"))
    urls = [f"http://localhost:{sim.http_port}/s", f"https://localhost:{sim.https_port}/s"]
    for scheme in ("socks5", "socks5h"):
        proxy = microsocks.url(scheme, "sur%20ge:p%40ss%3Aword")
        async with client_for(proxy=proxy) as client, client_for() as direct:
            for url in urls:
                response = await client.get(url)
                assert response.status == 200
                assert response.content == (await direct.get(url)).content
                assert response.connection.address == ("127.0.0.1", microsocks.port)
        code, body = curl("--proxy", proxy, "--cacert", sim.cafile, urls[1])
        assert (code, body) == (200, response.content)
    for proxy, detail in [
        (microsocks.url("socks5h", "sur%20ge:wrong"), "refused the user name and password"),
        (microsocks.url("socks5h"), "accepts none of the methods offered"),
    ]:
        async with client_for(proxy=proxy) as client:
            with pytest.raises(RequestError, match=detail) as caught:
                await client.get(urls[0])
            assert caught.value.error_class == "connect_refused"
    microsocks.stop()
    async with client_for(proxy=microsocks.url("socks5h", "sur%20ge:p%40ss%3Aword")) as client:
        with pytest.raises(RequestError, match="cannot reach the proxy") as caught:
            await client.get(urls[0])
        assert caught.value.error_class == "connect_refused"


async def test_socks5h_leaves_the_lookup_to_the_proxy(
    sim: SimInfo, start_proxy: StartProxy, client_for: ClientFactory
) -> None:
    """socks5 resolves the name here and sends the address, socks5h sends the
    name.  An override that sends ``localhost`` to an address where nothing
    listens tells who resolved: socks5 fails on it, socks5h never asks this
    resolver at all (the proxy's own lookup finds the simulated web)."""
    microsocks = start_proxy("microsocks")
    url = f"http://localhost:{sim.http_port}/"
    nowhere = [f"localhost:{sim.http_port}:127.0.0.9"]
    async with client_for(proxy=microsocks.url("socks5"), resolve=nowhere) as client:
        with pytest.raises(RequestError, match=r"connection refused \(reply 5\)"):
            await client.get(url)
    async with client_for(proxy=microsocks.url("socks5h"), resolve=nowhere) as client:
        asked: list[str] = []
        cached = client.resolver.cached

        def spy(host: str, port: int) -> tuple[str, ...] | None:
            asked.append(host)
            return cached(host, port)

        client.resolver.cached = spy  # type: ignore[method-assign]
        assert (await client.get(url)).status == 200
        assert client.resolver.lookups == 0
        assert asked == ["127.0.0.1"]  # the proxy's address, and nothing else


async def test_noproxy_is_judged_per_hop_and_credentials_stay_with_the_proxy(
    start_proxy: StartProxy,
) -> None:
    """A redirect chain across the no-proxy line: each hop goes the way its own
    host says (tinyproxy's Via on the proxied ones only), and no origin ever sees
    Proxy-Authorization - not the one behind the proxy, not the direct one."""
    tinyproxy = start_proxy("tinyproxy", auth=("surge", "secret"))
    seen: dict[str, list[bytes]] = {"proxied": [], "direct": []}

    def origin(name: str, other: Callable[[], str]) -> Handler:
        """/start redirects to the other origin's /next, /next to its /end."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            seen[name].append(head)
            path = head.split(b" ")[1].rsplit(b"/", 1)[-1]
            if path == b"end":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
            else:
                location = other() + ("/next" if path == b"start" else "/end")
                writer.write(
                    b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n"
                    % location.encode()
                )
            await writer.drain()
            writer.close()

        return handle

    ports: dict[str, int] = {}
    async with (
        _tiny_server(origin("direct", lambda: f"http://localhost:{ports['proxied']}")) as d,
        _tiny_server(origin("proxied", lambda: f"http://127.0.0.1:{ports['direct']}")) as p,
    ):
        ports.update(direct=d, proxied=p)
        proxy = tinyproxy.url(userinfo="surge:secret")
        async with AsyncClient(
            proxy=proxy, noproxy="127.0.0.1", follow_redirects=True, max_time=5
        ) as client:
            for start in (f"http://localhost:{p}/start", f"http://127.0.0.1:{d}/start"):
                response = await client.get(start)
                assert (response.status, response.redirects, response.content) == (200, 2, b"done")
    # proxied: /start, /end, /next; direct: /next, /start, /end
    assert len(seen["proxied"]) == 3 and len(seen["direct"]) == 3
    assert all(b"\r\nVia: " in head for head in seen["proxied"])
    assert not any(b"\r\nVia: " in head for head in seen["direct"])
    for head in seen["proxied"] + seen["direct"]:
        assert b"proxy-authorization" not in head.lower()


async def test_a_tunnel_carries_no_proxy_credentials(start_proxy: StartProxy) -> None:
    """Through a SOCKS5 tunnel the origin gets the request as sent direct: no
    Proxy-Authorization, an origin-form target."""
    microsocks = start_proxy("microsocks", auth=("u", "p"))
    heads: list[bytes] = []

    async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    async with _tiny_server(origin) as port:
        for scheme in ("socks5", "socks5h"):
            async with AsyncClient(proxy=microsocks.url(scheme, "u:p"), max_time=5) as client:
                assert (await client.get(f"http://localhost:{port}/x")).status == 200
    assert len(heads) == 2
    for head in heads:
        assert head.startswith(b"GET /x HTTP/1.1\r\nHost: localhost:%d\r\n" % port)
        assert b"authorization" not in head.lower()


# -- an https:// proxy: TLS to the proxy itself ------------------------------------------------


async def test_an_https_proxy(sim: SimInfo, start_proxy: StartProxy, tmp_path: Path) -> None:
    """TLS to the proxy (verified with the client's CAs), then for an https://
    URL TLS to the origin inside it; curl's --proxy https:// agrees."""
    tinyproxy = start_proxy("tinyproxy", connect_ports=[sim.https_port])
    ca = trustme.CA()
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server_context)
    proxy_ca = tmp_path / "proxy-ca.pem"
    ca.cert_pem.write_to_path(str(proxy_ca))
    trusting = sim.ssl_context()
    trusting.load_verify_locations(cafile=str(proxy_ca))
    trusting.set_alpn_protocols(["http/1.1"])
    async with tls_front(tinyproxy.port, server_context) as port:
        proxy = f"https://localhost:{port}"
        urls = [f"http://localhost:{sim.http_port}/", f"https://localhost:{sim.https_port}/"]
        async with AsyncClient(proxy=proxy, ssl_context=trusting, max_time=5) as client:
            for url in urls:
                response = await client.get(url)
                done = await asyncio.create_subprocess_exec(
                    "curl", "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}",
                    "--proxy", proxy, "--proxy-cacert", str(proxy_ca), "--cacert", sim.cafile,
                    url,
                    stdout=asyncio.subprocess.PIPE,
                )  # fmt: skip
                out, _ = await done.communicate()
                body, _, code = out.rpartition(b"\n")
                assert (response.status, response.content) == (int(code), body)
            assert response.connection.tls is not None
        # The proxy's certificate is checked: a client that does not trust its CA
        async with AsyncClient(proxy=proxy, cafile=sim.cafile, max_time=5) as client:
            with pytest.raises(RequestError, match="cannot reach the proxy: certificate") as e:
                await client.get(urls[0])
            assert e.value.error_class == "tls_error"
        # curl's --proxy-cacert: the proxy's CA for the proxy alone, the origin's
        # certificate still checked against the client's own CAs.
        async with AsyncClient(
            proxy=proxy, cafile=sim.cafile, proxy_cafile=str(proxy_ca), max_time=5
        ) as client:
            for url in urls:
                assert (await client.get(url)).status == 200
        async with AsyncClient(proxy=proxy, proxy_cafile=str(proxy_ca), max_time=5) as client:
            assert (await client.get(urls[0])).status == 200
            with pytest.raises(RequestError, match="certificate") as e:
                await client.get(urls[1])  # the sim's CA is not the system's
            assert "proxy" not in str(e.value)
        # --proxy-insecure: the proxy unverified, the origin still verified.
        async with AsyncClient(
            proxy=proxy, cafile=sim.cafile, proxy_insecure=True, max_time=5
        ) as client:
            for url in urls:
                assert (await client.get(url)).status == 200
        async with AsyncClient(
            proxy=proxy, cafile=str(proxy_ca), proxy_insecure=True, max_time=5
        ) as client:
            with pytest.raises(RequestError, match="certificate"):
                await client.get(urls[1])

        # The same from the command line: surge fetch --proxy-cacert.
        # The same from the command line (on uvloop when installed): surge fetch
        # --proxy-cacert; without --cacert the origin's certificate fails alone.
        async def cli(*args: str) -> list[tuple[object, object]]:
            run = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "surge.cli", "fetch", "-", "--max-time", "5",
                "-x", proxy, "--proxy-cacert", str(proxy_ca), *args,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await run.communicate("".join(u + "\n" for u in urls).encode())
            records = sorted((json.loads(line) for line in out.splitlines()), key=str)
            return sorted((r["url"][:5], r["status"], r["error"]) for r in records)

        assert await cli("--cacert", sim.cafile) == [("http:", 200, None), ("https", 200, None)]
        assert await cli() == [("http:", 200, None), ("https", None, "tls_error")]


def test_the_sync_client_and_surge_get_take_the_proxy(
    sim: SimInfo, start_proxy: StartProxy
) -> None:
    tinyproxy = start_proxy("tinyproxy")
    url = f"http://localhost:{sim.http_port}/"
    with surge.http.Client(proxy=tinyproxy.url()) as client:
        assert "tinyproxy" in client.get(url).headers["via"]
    assert "tinyproxy" in surge.get(url, proxy=tinyproxy.url()).headers["via"]
    assert "via" not in surge.get(url, proxy=tinyproxy.url(), noproxy="localhost").headers
