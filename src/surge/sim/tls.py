"""TLS for the simulated web: a throwaway CA and certificates chosen by SNI.

At start-up a fresh CA (trustme) is made and its PEM written to a file that
clients pass as ``--cacert``.  Leaf keys are ECDSA P-256: a handshake costs the
server less CPU than with RSA.

Why not one ``*.sim`` certificate: OpenSSL (hence Python's ``ssl``, curl,
urllib3, aiohttp) refuses a wildcard with fewer than two labels after it -- it
would match a whole TLD -- and a wildcard never spans labels (RFC 6125
section 6.4.3).  So the server picks the certificate by SNI, with the callback
swapping in another :class:`ssl.SSLContext` only on the first handshake of a
group of names (contexts are cached; OpenSSL 3 spends ~1.6 ms making one):

- ``site<N>.sim`` and its redirect hops share one certificate per block of
  :data:`SITES_PER_CERT` sites (site0-site99, site100-site199, ...), so 10,000
  generic hosts cost 100 certificates, issued on demand in ~3 ms each
  (or up front: :meth:`SimTLS.warm`);
- ``badcert`` names get a certificate from a second CA that nobody trusts, so a
  client meets a real verification failure (``tls_error``);
- any other ``.sim`` name gets a certificate of its own, issued on first use;
- no SNI (a client that connected to an IP address): the default certificate,
  for ``127.0.0.1``, ``localhost``, ``sim`` and ``*.sim``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
from collections import OrderedDict

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from surge.sim.behaviour import TLD, behaviour

#: The names of the default certificate.
DEFAULT_NAMES = ("127.0.0.1", "localhost", TLD, f"*.{TLD}")
#: Generic sites covered by one certificate.
SITES_PER_CERT = 100
#: Contexts kept at most (the least recently used go first); ~20 KB each.
CONTEXTS_MAX = 2048

_GENERIC = re.compile(
    r"(?:redirect-(?P<hop>0|[1-9][0-9]{0,3})--)?site(?P<site>0|[1-9][0-9]*)\." + TLD
)


class _Issuer:
    """Signs leaf certificates with the CA's key, all for one shared leaf key.

    trustme would do, but it makes a key per certificate and runs every name
    through IDNA checks: ~18 ms for a block of 100 sites, against ~0.3 ms here.
    """

    def __init__(self, ca: trustme.CA, directory: str) -> None:
        self._ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
        self._ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        self._public_key = key.public_key()
        self._key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self._directory = directory

    def context(self, names: list[str]) -> ssl.SSLContext:
        """A server context presenting a new certificate for ``names``."""
        now = datetime.datetime.now(datetime.UTC)
        alternative_names: list[x509.GeneralName] = []
        for name in names:
            try:
                alternative_names.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternative_names.append(x509.DNSName(name))
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self._ca_cert.subject)
            .public_key(self._public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        # load_cert_chain() reads files only; a private directory, one file at a time
        # (the server issues from its one event-loop thread).
        path = os.path.join(self._directory, "leaf.pem")
        with open(path, "wb") as out:
            out.write(self._key_pem)
            out.write(certificate.public_bytes(serialization.Encoding.PEM))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(path)
        os.unlink(path)
        # Clients offering h2 (curl, httpx[http2]) must settle on HTTP/1.1.
        context.set_alpn_protocols(["http/1.1"])
        return context


class SimTLS:
    """The CA, the server's default context and its SNI callback, for one server.

    ``directory`` is private to this server; the CA file may be written there.
    """

    def __init__(self, directory: str, seed: int = 0) -> None:
        self.seed = seed
        self.ca = trustme.CA(organization_name="surge.sim test CA")
        self._issuer = _Issuer(self.ca, directory)
        self.context = self._issuer.context(list(DEFAULT_NAMES))
        untrusted = trustme.CA(organization_name="surge.sim untrusted CA")
        self.bad_context = _Issuer(untrusted, directory).context(list(DEFAULT_NAMES))
        self._contexts: OrderedDict[str | int, ssl.SSLContext] = OrderedDict()
        self.context.sni_callback = self._choose_context

    def write_ca(self, path: str) -> None:
        """Write the trusted CA's PEM to ``path`` (for ``--cacert``)."""
        self.ca.cert_pem.write_to_path(path)

    def warm(self, sites: int) -> None:
        """Issue the certificates of generic sites 0..``sites``-1 now, not on first use."""
        for block in range(-(-sites // SITES_PER_CERT)):
            self.context_for(f"site{block * SITES_PER_CERT}.{TLD}")

    def names_for_block(self, block: int) -> list[str]:
        """The names on the certificate of generic sites block ``block``: each site
        and the hops of its redirect chain."""
        names = []
        for n in range(block * SITES_PER_CERT, (block + 1) * SITES_PER_CERT):
            site = f"site{n}.{TLD}"
            names.append(site)
            hops = behaviour(site, self.seed).redirects
            names.extend(f"redirect-{k}--{site}" for k in range(max(hops, 0)))
        return names

    def context_for(self, name: str) -> ssl.SSLContext:
        """The context whose certificate is valid for ``name`` (a ``.sim`` name)."""
        key = self._block_of(name)
        context = self._contexts.get(key)
        if context is not None:
            self._contexts.move_to_end(key)
            return context
        context = self._issuer.context(
            self.names_for_block(key) if isinstance(key, int) else [name]
        )
        self._contexts[key] = context
        if len(self._contexts) > CONTEXTS_MAX:
            self._contexts.popitem(last=False)
        return context

    def _block_of(self, name: str) -> str | int:
        """The block of generic sites whose certificate has ``name``, else ``name`` itself."""
        generic = _GENERIC.fullmatch(name)
        if generic is None:
            return name
        site = int(generic["site"])
        if generic["hop"] is not None:
            hops = behaviour(f"site{site}.{TLD}", self.seed).redirects
            if not int(generic["hop"]) < hops:
                return name  # a valid name, but not one of this site's chain
        return site // SITES_PER_CERT

    def _choose_context(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> int | None:
        if not server_name:
            return None
        name = server_name.lower().rstrip(".")
        if not name.endswith("." + TLD):
            return None
        if behaviour(name, self.seed).badcert:
            connection.context = self.bad_context
        else:
            connection.context = self.context_for(name)
        return None
