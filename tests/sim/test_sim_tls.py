"""TLS: the CA file verifies every simulated host, and badcert hosts fail verification."""

from __future__ import annotations

import socket
import ssl

import pytest

from surge.sim import SimInfo, behaviour, hosts


def _tls_get(sim: SimInfo, name: str | None, context: ssl.SSLContext) -> bytes:
    """Handshake with SNI ``name``, send one request for it, return the reply's first bytes."""
    host = name or "127.0.0.1"
    with (
        socket.create_connection(("127.0.0.1", sim.https_port), timeout=3) as sock,
        context.wrap_socket(sock, server_hostname=name, do_handshake_on_connect=False) as tls,
    ):
        tls.do_handshake()
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return tls.recv(64)


def _redirect_hop() -> str:
    site = next(b for b in map(behaviour, hosts(1000)) if b.redirects > 0)
    assert site.next_host is not None
    return site.next_host


@pytest.mark.parametrize(
    "name",
    [
        "site1.sim",
        "site4321.sim",
        "status-404.sim",
        "delay-10.status-404.x.sim",
        "gzip--chunked.sim",
        "localhost",
        "127.0.0.1",
    ],
)
def test_the_ca_file_verifies(sim: SimInfo, name: str) -> None:
    reply = _tls_get(sim, name, sim.ssl_context())
    assert reply.startswith(b"HTTP/1.1 ")


def test_redirect_hops_of_generic_sites_verify(sim: SimInfo) -> None:
    assert _tls_get(sim, _redirect_hop(), sim.ssl_context()).startswith(b"HTTP/1.1 ")


def test_no_sni_gets_the_default_certificate(sim: SimInfo) -> None:
    context = sim.ssl_context()
    context.check_hostname = False  # no name to check; the chain is still verified
    assert _tls_get(sim, None, context).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("name", ["badcert.sim", "badcert--status-404.sim", "x.badcert.sim"])
def test_badcert_fails_verification(sim: SimInfo, name: str) -> None:
    with pytest.raises(ssl.SSLCertVerificationError) as raised:
        _tls_get(sim, name, sim.ssl_context())
    assert "unable to get local issuer certificate" in str(raised.value)


def test_badcert_answers_when_not_verified(sim: SimInfo) -> None:
    context = ssl._create_unverified_context()
    assert _tls_get(sim, "badcert.sim", context).startswith(b"HTTP/1.1 200")


def test_without_the_ca_nothing_verifies(sim: SimInfo) -> None:
    context = ssl.create_default_context()
    context.load_verify_locations(cadata=ssl.get_server_certificate(("127.0.0.1", sim.https_port)))
    # a certificate alone is no CA: the chain still ends nowhere trusted
    with pytest.raises(ssl.SSLCertVerificationError):
        _tls_get(sim, "site1.sim", context)


def test_alpn_settles_on_http11(sim: SimInfo) -> None:
    context = sim.ssl_context()
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", sim.https_port), timeout=3) as sock,
        context.wrap_socket(sock, server_hostname="site1.sim") as tls,
    ):
        assert tls.selected_alpn_protocol() == "http/1.1"


def test_redirects_stay_on_https(sim: SimInfo, sim_urlopen) -> None:
    url = sim.url("redirect-2.sim", tls=True)
    with sim_urlopen(url, context=sim.ssl_context()) as response:
        assert response.status == 200
        assert response.url == sim.url("redirect-0.sim", tls=True)


def test_reset_over_tls(sim: SimInfo) -> None:
    # TLS through memory BIOs, so that the test reads the socket itself: a blocking
    # ssl socket reports this RST as SSLEOFError (OpenSSL 3 maps it to an EOF),
    # while asyncio transports, which read the socket directly, see ECONNRESET.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = sim.ssl_context().wrap_bio(incoming, outgoing, server_hostname="reset.sim")
    with socket.create_connection(("127.0.0.1", sim.https_port), timeout=3) as sock:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                incoming.write(sock.recv(65536))
        tls.write(b"GET / HTTP/1.1\r\nHost: reset.sim\r\n\r\n")
        sock.sendall(outgoing.read())
        with pytest.raises(ConnectionResetError):
            while sock.recv(65536):  # session tickets may come first
                pass
