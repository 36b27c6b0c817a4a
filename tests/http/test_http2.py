"""HTTP/2 against real servers nobody here wrote - nginx (over TLS by ALPN,
and cleartext h2c) and hypercorn - with curl ``--http2`` as the reference for
status, headers and bodies; one connection carries concurrent requests
(counted at the server); the switches (``http2=False``, ``--http1.1``,
``--http2-prior-knowledge``, the httpx drop-in's ``http2=``)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme
from tests._nginx import free_port, nginx

import surge.httpx
from surge.http import AsyncClient, Client
from surge.testing.servers import wait_listening

BIG = os.urandom(3 * 1024 * 1024 + 17)  # far past h2's default 64 KiB window
TEXT = b"HTTP/2 in surge, line after line.\n" * 3000

APP = """
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/redirect":
        await send({"type": "http.response.start", "status": 302,
                    "headers": [(b"location", b"/cookie")]})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/cookie":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"set-cookie", b"flavour=h2; Path=/")]})
        await send({"type": "http.response.body", "body": b"set"})
        return
    if path == "/echo":
        out = body
    elif path == "/cookies":
        out = dict(scope["headers"]).get(b"cookie", b"")
    elif path == "/port":
        out = str(scope["client"][1]).encode()
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(96):
            await send({"type": "http.response.body", "body": bytes([n]) * 65536,
                        "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    else:
        out = b"hello " + scope["http_version"].encode()
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"text/plain"), (b"x-path", path.encode())]})
    await send({"type": "http.response.body", "body": out})
"""


@dataclass
class Servers:
    cafile: str
    nginx_tls: str  # https://127.0.0.1:port (h2 by ALPN)
    nginx_h2c: str  # http://127.0.0.1:port (h2c, prior knowledge)
    hypercorn: str  # https://127.0.0.1:port
    access_log: Path  # nginx's: "$connection $request_uri $server_protocol" lines


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("h2")
    ca = trustme.CA()
    cafile = str(base / "ca.pem")
    ca.cert_pem.write_to_path(cafile)
    cert = str(base / "cert.pem")
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(cert)
    www = base / "www"
    www.mkdir()
    (www / "index.html").write_bytes(b"<p>index</p>\n")
    (www / "big.bin").write_bytes(BIG)
    (www / "text.txt").write_bytes(TEXT)
    (base / "app.py").write_text(APP)
    tls_port, h2c_port, hc_port = free_port(), free_port(), free_port()
    log = base / "access.log"
    config = f"""
    log_format conns '$connection $request_uri $server_protocol';
    types {{ text/html html; text/plain txt; application/octet-stream bin; }}
    gzip on;
    gzip_types text/plain;
    server {{
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {cert};
        access_log {log} conns;
        root {www};
    }}
    server {{
        listen 127.0.0.1:{h2c_port} http2;
        access_log {log} conns;
        root {www};
    }}
    """
    hypercorn = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hypercorn",
            "--certfile",
            cert,
            "--keyfile",
            cert,
            "-b",
            f"127.0.0.1:{hc_port}",
            "app:app",
        ],
        cwd=base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(hc_port, hypercorn, "hypercorn")
        with nginx(base, config, wait_port=h2c_port):
            wait_listening(tls_port, hypercorn, "nginx")
            yield Servers(
                cafile,
                f"https://127.0.0.1:{tls_port}",
                f"http://127.0.0.1:{h2c_port}",
                f"https://127.0.0.1:{hc_port}",
                log,
            )
    finally:
        hypercorn.terminate()
        hypercorn.wait(timeout=10)
        if hypercorn.stderr:
            hypercorn.stderr.close()


@dataclass
class Seen:
    status: int
    version: str
    body: bytes
    headers: dict[str, str]


def curl(s: Servers, url: str, *args: str, data: bytes | None = None) -> Seen:
    """What curl (the reference) gets for ``url``."""
    command = ["curl", "-s", "--max-time", "10", "--cacert", s.cafile, "-D", "-", *args, url]
    if data is not None:
        command[1:1] = ["--data-binary", "@-"]
    out = subprocess.run(command, input=data, capture_output=True, check=True, timeout=20).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ")[:2]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Seen(int(status), version, body, headers)


def same_as_curl(response: object, reference: Seen, names: tuple[str, ...]) -> None:
    assert response.status_code == reference.status  # type: ignore[attr-defined]
    assert response.http_version == "HTTP/2" == reference.version  # type: ignore[attr-defined]
    assert response.content == reference.body  # type: ignore[attr-defined]
    for name in names:
        assert response.headers.get(name) == reference.headers.get(name), name  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("path", "curl_args", "names"),
    [
        ("/", (), ("content-type", "content-length", "etag")),
        ("/big.bin", (), ("content-type", "content-length", "etag")),
        ("/text.txt", ("--compressed",), ("content-type", "content-encoding")),
        ("/missing", (), ("content-type",)),
    ],
)
async def test_nginx_over_tls_as_curl_sees_it(
    servers: Servers, path: str, curl_args: tuple[str, ...], names: tuple[str, ...]
) -> None:
    reference = curl(servers, servers.nginx_tls + path, "--http2", *curl_args)
    async with AsyncClient(cafile=servers.cafile) as client:
        response = await client.get(servers.nginx_tls + path)
    same_as_curl(response, reference, names)


async def test_nginx_h2c_with_prior_knowledge_as_curl_sees_it(servers: Servers) -> None:
    reference = curl(servers, servers.nginx_h2c + "/big.bin", "--http2-prior-knowledge")
    async with AsyncClient(http2_prior_knowledge=True) as client:
        response = await client.get(servers.nginx_h2c + "/big.bin")
    same_as_curl(response, reference, ("content-length", "etag"))


@pytest.mark.parametrize("path", ["/x", "/echo"])
async def test_hypercorn_as_curl_sees_it(servers: Servers, path: str) -> None:
    body = os.urandom(300_000)  # past the 64 KiB default window: flow control
    reference = curl(servers, servers.hypercorn + path, "--http2", data=body)
    async with AsyncClient(cafile=servers.cafile) as client:
        response = await client.post(servers.hypercorn + path, content=body)
    same_as_curl(response, reference, ("content-type", "x-path"))


async def test_an_upload_of_unknown_length(servers: Servers) -> None:
    async def pieces():  # type: ignore[no-untyped-def]
        for n in range(40):
            yield bytes([n]) * 10_000

    async with AsyncClient(cafile=servers.cafile) as client:
        response = await client.post(servers.hypercorn + "/echo", content=pieces())
    assert response.content == b"".join(bytes([n]) * 10_000 for n in range(40))


async def test_redirects_and_cookies(servers: Servers) -> None:
    async with AsyncClient(cafile=servers.cafile, follow_redirects=True) as client:
        response = await client.get(servers.hypercorn + "/redirect")
        assert (response.status_code, response.content, response.redirects) == (200, b"set", 1)
        assert (await client.get(servers.hypercorn + "/cookies")).content == b"flavour=h2"


async def test_a_streamed_body_comes_whole(servers: Servers) -> None:
    async with (
        AsyncClient(cafile=servers.cafile) as client,
        client.stream("GET", servers.hypercorn + "/stream") as response,
    ):
        chunks = [chunk async for chunk in response.aiter_bytes()]
    assert response.http_version == "HTTP/2"
    assert b"".join(chunks) == STREAMED


STREAMED = b"".join(bytes([n]) * 65536 for n in range(96))  # 6 MiB: past a stream's window


async def test_an_unread_stream_holds_back_only_itself(servers: Servers) -> None:
    """A streamed body left unread fills its own stream's window; another
    stream on the same connection still comes whole, and then the first."""
    async with AsyncClient(cafile=servers.cafile) as client:
        async with client.stream("GET", servers.hypercorn + "/stream") as unread:
            other = await asyncio.wait_for(client.get(servers.hypercorn + "/stream"), 20)
            assert other.content == STREAMED
            assert await asyncio.wait_for(unread.aread(), 20) == STREAMED
        assert client.stats()["created"] == 1


async def test_head_as_curl_sees_it(servers: Servers) -> None:
    reference = curl(servers, servers.nginx_tls + "/big.bin", "--http2", "-I")
    reference.body = b""  # (-I writes the head where the body would go)
    async with AsyncClient(cafile=servers.cafile) as client:
        response = await client.head(servers.nginx_tls + "/big.bin")
    same_as_curl(response, reference, ("content-length", "etag"))


def log_lines(log: Path, marker: str, count: int = 1) -> list[str]:
    """nginx's access log lines with ``marker``, once ``count`` of them are there:
    nginx writes a line after it sent the response, so the client may have read
    it first (polled for at most 5 s)."""
    for _ in range(500):
        lines = [line for line in log.read_text().splitlines() if marker in line]
        if len(lines) >= count:
            return lines
        time.sleep(0.01)
    return lines


def connections_of(log: Path, marker: str, count: int = 1) -> list[str]:
    """nginx's connection serial numbers of the requests whose URI has ``marker``."""
    return [line.split()[0] for line in log_lines(log, marker, count)]


async def test_50_concurrent_gets_share_one_connection(servers: Servers) -> None:
    async with AsyncClient(cafile=servers.cafile) as client:
        responses = await asyncio.gather(
            *(client.get(f"{servers.nginx_tls}/?n={n}&m=concurrent") for n in range(50))
        )
    assert {r.status_code for r in responses} == {200}
    seen = connections_of(servers.access_log, "m=concurrent", 50)
    assert len(seen) == 50
    assert len(set(seen)) == 1


async def test_hypercorn_counts_one_connection(servers: Servers) -> None:
    async with AsyncClient(cafile=servers.cafile) as client:
        responses = await asyncio.gather(
            *(client.get(servers.hypercorn + "/port") for _ in range(50))
        )
    assert len({r.content for r in responses}) == 1


async def test_a_second_connection_opens_only_when_streams_are_full(servers: Servers) -> None:
    # nginx allows 128 concurrent streams a connection: 200 at once need two.
    async with AsyncClient(cafile=servers.cafile) as client:
        await asyncio.gather(
            *(client.get(f"{servers.nginx_tls}/?n={n}&m=overflow") for n in range(200))
        )
    assert len(set(connections_of(servers.access_log, "m=overflow", 200))) == 2


async def test_requests_made_in_one_turn_go_out_in_one_write(
    servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100 GETs started together: their HEADERS are written at the end of the
    # loop's turn as one TLS record, not one write (and one send) each.
    import asyncio.sslproto

    writes = 0
    write = asyncio.sslproto._SSLProtocolTransport.write

    def counted(self: asyncio.sslproto._SSLProtocolTransport, data: bytes) -> None:
        nonlocal writes
        writes += 1
        write(self, data)

    monkeypatch.setattr(asyncio.sslproto._SSLProtocolTransport, "write", counted)
    async with AsyncClient(cafile=servers.cafile) as client:
        await client.get(f"{servers.nginx_tls}/?m=one-turn-warm")
        writes = 0
        responses = await asyncio.gather(
            *(client.get(f"{servers.nginx_tls}/?n={n}&m=one-turn") for n in range(100))
        )
    assert {r.status_code for r in responses} == {200}
    assert len(set(connections_of(servers.access_log, "m=one-turn", 100))) == 1
    # the HEADERS in one, then at most one a read of responses (acknowledgements)
    assert writes <= 20, writes


async def test_per_host_1_queues_for_streams(servers: Servers) -> None:
    async with AsyncClient(cafile=servers.cafile, per_host=1) as client:
        responses = await asyncio.gather(
            *(client.get(f"{servers.nginx_tls}/?n={n}&m=per-host-1") for n in range(300))
        )
    assert {r.status_code for r in responses} == {200}
    assert len(set(connections_of(servers.access_log, "m=per-host-1", 300))) == 1


def test_threads_sharing_a_sync_client_share_one_connection(servers: Servers) -> None:
    errors: list[BaseException] = []
    with Client(cafile=servers.cafile) as client:
        barrier = threading.Barrier(8)

        def work(n: int) -> None:
            try:
                barrier.wait(timeout=10)
                for k in range(5):
                    assert (
                        client.get(f"{servers.nginx_tls}/?t={n}-{k}&m=threads").status_code == 200
                    )
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors
    seen = connections_of(servers.access_log, "m=threads", 40)
    assert len(seen) == 40
    assert len(set(seen)) == 1


# -- the switches --------------------------------------------------------------------------


async def test_http2_false_speaks_http_1_1(servers: Servers) -> None:
    async with AsyncClient(cafile=servers.cafile, http2=False) as client:
        response = await client.get(servers.nginx_tls + "/?m=http1")
    assert response.http_version == "HTTP/1.1"
    assert log_lines(servers.access_log, "m=http1")[0].endswith("HTTP/1.1")


@pytest.mark.parametrize(("flags", "alpn"), [((), "h2"), (("--http1.1",), "http/1.1")])
def test_fetch_records_alpn(servers: Servers, flags: tuple[str, ...], alpn: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "surge", "fetch", "--cacert", servers.cafile, *flags, "-"],
        input=f"{servers.nginx_tls}/\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    record = json.loads(run.stdout)
    assert (record["status"], record["tls"]["alpn"]) == (200, alpn)


def test_fetch_http2_prior_knowledge(servers: Servers) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "surge", "fetch", "--http2-prior-knowledge", "-"],
        input=f"{servers.nginx_h2c}/index.html?m=h2c-fetch\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(run.stdout)["status"] == 200
    assert log_lines(servers.access_log, "m=h2c-fetch")[0].endswith("HTTP/2.0")


@pytest.mark.parametrize(("http2", "version"), [(True, "HTTP/2"), (False, "HTTP/1.1")])
def test_the_httpx_transport_mirrors_httpxs_flag(
    servers: Servers, http2: bool, version: str
) -> None:
    transport = surge.httpx.HTTPTransport(
        verify=ssl.create_default_context(cafile=servers.cafile), http2=http2
    )
    with httpx.Client(transport=transport) as client:
        response = client.get(servers.nginx_tls + "/")
    assert (response.status_code, response.http_version) == (200, version)


@pytest.mark.parametrize(("http2", "version"), [(True, "HTTP/2"), (False, "HTTP/1.1")])
async def test_the_async_httpx_transport_mirrors_httpxs_flag(
    servers: Servers, http2: bool, version: str
) -> None:
    transport = surge.httpx.AsyncHTTPTransport(
        verify=ssl.create_default_context(cafile=servers.cafile), http2=http2
    )
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(servers.nginx_tls + "/")
    assert (response.status_code, response.http_version) == (200, version)


def test_trace_json_says_http2(servers: Servers) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "surge",
            "trace",
            "--json",
            "--cacert",
            servers.cafile,
            servers.nginx_tls + "/",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    record = json.loads(run.stdout.splitlines()[0])
    assert (record["status"], record["http_version"], record["tls"]["alpn"]) == (
        200,
        "HTTP/2",
        "h2",
    )


@pytest.mark.parametrize(
    ("flags", "version"),
    [((), "HTTP/2.0"), (("--http1.1", "--per-host", "3"), "HTTP/1.1")],
)
def test_a_har_says_the_version_and_which_connection_each_request_went_on(
    servers: Servers, tmp_path: Path, flags: tuple[str, ...], version: str
) -> None:
    """HAR's ``httpVersion`` and ``connection``: the requests nginx saw on one
    connection (its ``$connection``) are those the HAR puts on one."""
    marker = f"m=har-{len(flags)}"
    urls = "".join(f"{servers.nginx_tls}/?n={n}&{marker}\n" for n in range(30))
    har = tmp_path / "out.har"
    subprocess.run(
        [sys.executable, "-m", "surge", "fetch", "--cacert", servers.cafile, "-q", "-c", "30",
         *flags, "--har", str(har), "-"],
        input=urls, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    entries = json.loads(har.read_text())["log"]["entries"]
    assert len(entries) == 30
    assert {e["request"]["httpVersion"] for e in entries} == {version}
    assert {e["response"]["httpVersion"] for e in entries} == {version}
    by_har: dict[str, set[str]] = {}
    for entry in entries:
        by_har.setdefault(entry["connection"], set()).add(entry["request"]["url"])
    by_nginx: dict[str, set[str]] = {}
    for line in log_lines(servers.access_log, marker, 30):
        conn, uri, _ = line.split()
        by_nginx.setdefault(conn, set()).add(servers.nginx_tls + uri)
    assert sorted(map(sorted, by_har.values())) == sorted(map(sorted, by_nginx.values()))
    assert len(by_har) == (1 if version == "HTTP/2.0" else 3)
