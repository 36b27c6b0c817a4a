"""TLS session resumption, checked at the server: nginx closes each connection
after its response (``keepalive_timeout 0``) and logs ``$ssl_session_reused``
per request, so each request is a new handshake and the log says whether it
resumed.  Every front end (``Client``, ``AsyncClient``, ``surge fetch``), TLS
1.2 and 1.3; no session crosses SNI, port, or verification / client
certificate settings; the cache is bounded.  The first connection to an
origin only marks it seen; the second keeps its session; later ones resume."""

from __future__ import annotations

import csv
import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from tests._nginx import free_port, nginx
from tests.http.conftest import StartProxy, tls_front

from surge.http import AsyncClient, Client, make_ssl_context
from surge.http.tlssession import ResumingContext

NAMES = ("a.test", "b.test", "c.test", "d.test", "e.test")
REQUESTS = 20


@dataclass
class Server:
    base: Path
    cafile: str
    client_cert: str
    ports: dict[str, int]  # "TLSv1.3" / "TLSv1.2" -> port
    log: Path  # "$ssl_server_name $server_port $ssl_session_reused $ssl_client_verify $arg_m"

    def resolve(self) -> list[str]:
        return [f"{name}:{port}:127.0.0.1" for name in NAMES for port in self.ports.values()]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("tlsresume")
    ca = trustme.CA()
    cafile = str(base / "ca.pem")
    ca.cert_pem.write_to_path(cafile)
    cert = str(base / "cert.pem")
    ca.issue_cert(*NAMES, "127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        cert
    )
    client_cert = str(base / "client.pem")
    ca.issue_cert("client@surge.test").private_key_and_cert_chain_pem.write_to_path(client_cert)
    log = base / "access.log"
    ports = {"TLSv1.3": free_port(), "TLSv1.2": free_port(), "h2": free_port()}
    blocks = []
    for protocol, port in ports.items():
        listen = "ssl http2" if protocol == "h2" else "ssl"
        versions = "TLSv1.3" if protocol == "h2" else protocol
        # a server block per name: the SNI picks it (localhost: reached through a
        # proxy, which resolves the name itself)
        for name in (*NAMES, "localhost"):
            blocks.append(f"""
    server {{
        listen 127.0.0.1:{port} {listen};
        server_name {name};
        ssl_protocols {versions};
        ssl_certificate {cert};
        ssl_certificate_key {cert};
        ssl_verify_client optional;
        ssl_client_certificate {cafile};
        keepalive_timeout 0;
        access_log {log} resumed;
        location / {{ return 200 "ok\\n"; }}
    }}""")
    config = (
        "log_format resumed '$ssl_server_name $server_port $ssl_session_reused "
        "$ssl_client_verify $arg_m';\n" + "\n".join(blocks)
    )
    with nginx(base, config, wait_port=ports["TLSv1.2"]):
        yield Server(base, cafile, client_cert, ports, log)


def reused(server: Server, marker: str, count: int) -> list[tuple[str, int, bool, str]]:
    """(SNI, port, resumed, client verify) of the requests marked ``marker``,
    once nginx logged ``count`` of them (it logs after the response is sent)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [
            line.split()
            for line in server.log.read_text().splitlines()
            if line.endswith(f" {marker}")
        ]
        if len(lines) >= count or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert len(lines) == count, lines
    return [(sni, int(port), flag == "r", verify) for sni, port, flag, verify, _ in lines]


@pytest.mark.parametrize("protocol", ["TLSv1.3", "TLSv1.2"])
def test_sync_client_resumes_every_reconnect(server: Server, protocol: str) -> None:
    port = server.ports[protocol]
    marker = f"sync-{protocol}"
    with Client(cafile=server.cafile, resolve=server.resolve()) as client:
        resumed = []
        for _ in range(REQUESTS):
            response = client.get(f"https://a.test:{port}/?m={marker}")
            assert response.status_code == 200
            info = response.connection.tls_info()
            assert info is not None and info["version"] == protocol
            resumed.append(info["resumed"])
    seen = reused(server, marker, REQUESTS)
    assert [r for _, _, r, _ in seen] == resumed  # the client says what the server saw
    assert resumed == [False, False] + [True] * (REQUESTS - 2)


def test_http2_connections_resume(server: Server) -> None:
    """An HTTP/2 connection (ALPN h2) keeps its session as an HTTP/1.1 one does:
    clients one after another on one context.  nginx's h2 with
    ``keepalive_timeout 0`` sends a GOAWAY before each response (and the
    response after it, on the same connection), then closes."""
    port = server.ports["h2"]
    context = make_ssl_context(server.cafile, http2=True)
    for _ in range(4):
        with Client(ssl_context=context, resolve=server.resolve()) as client:
            response = client.get(f"https://a.test:{port}/?m=h2")
            assert response.http_version == "HTTP/2"
    assert [r for _, _, r, _ in reused(server, "h2", 4)] == [False, False, True, True]


async def test_async_client_resumes_every_reconnect(server: Server) -> None:
    port = server.ports["TLSv1.3"]
    async with AsyncClient(cafile=server.cafile, resolve=server.resolve()) as client:
        for _ in range(REQUESTS):
            response = await client.get(f"https://a.test:{port}/?m=async")
            assert response.status_code == 200
    seen = reused(server, "async", REQUESTS)
    assert sum(r for _, _, r, _ in seen) >= REQUESTS - 2


def test_surge_fetch_resumes_and_records_it(server: Server, tmp_path: Path) -> None:
    port = server.ports["TLSv1.3"]
    source = tmp_path / "urls.txt"
    source.write_text("".join(f"https://a.test:{port}/?m=fetch&n={n}\n" for n in range(REQUESTS)))
    out = tmp_path / "out.jsonl"
    args = [sys.executable, "-m", "surge", "fetch", str(source), "-o", str(out), "-q"]
    args += ["--no-progress", "-c", "1", "--cacert", server.cafile]
    for entry in server.resolve():
        args += ["--resolve", entry]
    done = subprocess.run(args, capture_output=True, timeout=60, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == REQUESTS and all(r["status"] == 200 for r in records)
    seen = [s for s in reused(server, "fetch", REQUESTS)]
    assert sum(r for _, _, r, _ in seen) >= REQUESTS - 2
    assert sum(r["tls"]["resumed"] for r in records) == sum(r for _, _, r, _ in seen)
    # CSV: a tls_resumed column, spelt as in JSON
    csv_out = tmp_path / "out.csv"
    source.write_text("".join(f"https://a.test:{port}/?m=csv&n={n}\n" for n in range(3)))
    args[args.index(str(out))] = str(csv_out)
    done = subprocess.run(args, capture_output=True, timeout=60, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(csv_out.open(newline="")))
    assert [row["tls_resumed"] for row in rows] == ["false", "false", "true"]


def test_no_session_crosses_sni_or_port(server: Server) -> None:
    """Origins taken in turn, each reconnecting: the first two connections to
    each (SNI name, port) are full handshakes, and only then does it resume."""
    origins = [
        ("a.test", server.ports["TLSv1.3"]),
        ("b.test", server.ports["TLSv1.3"]),
        ("a.test", server.ports["TLSv1.2"]),
    ]
    with Client(cafile=server.cafile, resolve=server.resolve()) as client:
        for _ in range(4):
            for name, port in origins:
                assert client.get(f"https://{name}:{port}/?m=sni").status_code == 200
    seen = reused(server, "sni", 12)
    assert [(sni, port) for sni, port, _, _ in seen] == origins * 4
    assert [r for _, _, r, _ in seen] == [False] * 6 + [True] * 6


@pytest.mark.parametrize(
    "second",
    [
        pytest.param({"insecure": True}, id="verification"),
        pytest.param({"cert": "client"}, id="client-certificate"),
    ],
)
def test_no_session_crosses_tls_settings(server: Server, second: dict[str, object]) -> None:
    """A second client with other verification or a client certificate makes
    its own full handshake, after the first resumed; and the certificate was
    shown (a resumed session would carry the first client's identity: none)."""
    port = server.ports["TLSv1.3"]
    options = {k: (server.client_cert if v == "client" else v) for k, v in second.items()}
    marker = f"settings-{next(iter(second))}"
    with Client(cafile=server.cafile, resolve=server.resolve()) as first:
        for _ in range(3):
            first.get(f"https://a.test:{port}/?m={marker}")
        with Client(cafile=server.cafile, resolve=server.resolve(), **options) as other:  # type: ignore[arg-type]
            for _ in range(3):
                other.get(f"https://a.test:{port}/?m={marker}")
    seen = reused(server, marker, 6)
    assert [r for _, _, r, _ in seen] == [False, False, True] * 2
    expected = "SUCCESS" if "cert" in second else "NONE"
    assert [v for _, _, _, v in seen] == ["NONE"] * 3 + [expected] * 3


def test_a_plain_ssl_context_is_used_as_it_is(server: Server) -> None:
    """A caller's own ``ssl.SSLContext`` (not made by make_ssl_context) is not
    changed: no session is kept, every reconnect is a full handshake."""
    context = ssl.create_default_context(cafile=server.cafile)
    with Client(ssl_context=context, resolve=server.resolve()) as client:
        for _ in range(4):
            client.get(f"https://a.test:{server.ports['TLSv1.3']}/?m=plain")
    assert [r for _, _, r, _ in reused(server, "plain", 4)] == [False] * 4
    assert type(context) is ssl.SSLContext


def test_the_cache_is_bounded_least_recently_used_first(server: Server) -> None:
    port = server.ports["TLSv1.3"]
    context = make_ssl_context(server.cafile)
    assert isinstance(context, ResumingContext)
    context.max_sessions = 3
    with Client(ssl_context=context, resolve=server.resolve()) as client:
        for name in NAMES:  # a..e, twice each (seen, then kept): a and b are dropped
            for _ in range(2):
                client.get(f"https://{name}:{port}/?m=bound")
        assert list(context.sessions) == [(name, port) for name in NAMES[2:]]
        assert all(session is not None for session in context.sessions.values())
        for name in ("e.test", "a.test"):  # e resumes; a is new again (c is dropped)
            client.get(f"https://{name}:{port}/?m=bound")
        assert list(context.sessions) == [(n, port) for n in ("d.test", "e.test", "a.test")]
        assert context.sessions[("a.test", port)] is None  # seen once: nothing read
    seen = reused(server, "bound", 12)
    assert [r for _, _, r, _ in seen] == [False] * 10 + [True, False]


async def test_both_sessions_resume_through_an_https_proxy(
    server: Server, start_proxy: StartProxy
) -> None:
    """TLS inside TLS (an https:// origin through an https:// proxy's tunnel):
    the proxy's session and the origin's each resume on every reconnect - the
    origin's as nginx logs it, the proxy's as the proxy saw it."""
    port = server.ports["TLSv1.3"]
    tinyproxy = start_proxy("tinyproxy", connect_ports=[port])
    ca = trustme.CA()
    front = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(front)
    proxy_ca = server.base / "proxy-ca.pem"
    ca.cert_pem.write_to_path(str(proxy_ca))
    outer: list[bool] = []
    async with (
        tls_front(tinyproxy.port, front, outer) as proxy_port,
        AsyncClient(
            proxy=f"https://localhost:{proxy_port}",
            proxy_cafile=str(proxy_ca),
            cafile=server.cafile,
            idle_timeout=0.001,  # a new tunnel for each request (nginx closes anyway)
        ) as client,
    ):
        inner = []
        for _ in range(6):
            response = await client.get(f"https://localhost:{port}/?m=proxied")
            assert response.status_code == 200
            info = response.connection.tls_info()
            assert info is not None
            inner.append(info["resumed"])
    seen = reused(server, "proxied", 6)
    assert [sni for sni, _, _, _ in seen] == ["localhost"] * 6
    assert [r for _, _, r, _ in seen] == inner  # the client says what nginx saw
    assert sum(inner) >= 4, inner  # all but the first one or two
    assert len(outer) == 6 and sum(outer) >= 4, outer
