"""URL parsing for the client: from a string to what a connection needs.

A URL that surge cannot request is a ``RequestError("invalid_url")`` - data in
a result record, never a crash: bulk inputs are full of them.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import NamedTuple
from urllib.parse import urljoin, urlsplit

from surge.errors import RequestError

_DEFAULT_PORTS = {"http": 80, "https": 443}
# RFC 3986 path/query characters that need no escaping; anything else (spaces,
# non-ASCII) is percent-encoded, as curl and browsers do.
_SAFE = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=%"
)


class URL(NamedTuple):
    """A parsed http(s) URL, with the host in the form a connection uses.

    (A NamedTuple, not a frozen dataclass: it is built once per request, and a
    frozen dataclass's ``__init__`` costs several times more.)
    """

    url: str
    scheme: str  # "http" or "https"
    host: str  # lower-case; IDNA-encoded; IPv6 without brackets
    port: int
    target: bytes  # the request target: path and query, escaped
    host_header: bytes  # host[:port], as the Host header carries it
    key: tuple[str, str, int]  # what a pooled connection is for: (scheme, host, port)

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    def join(self, location: str) -> URL:
        """Resolve a redirect's Location against this URL."""
        return parse_url(urljoin(self.url, location.strip()))


#: The common shape, matched in one regex step: scheme://host[:port][/path][?query]
#: with an ASCII name host; anything else (userinfo, IPv6, IDNA, escapes) takes
#: the general path.  Bulk inputs are millions of URLs: parsing is on the hot path.
_SIMPLE = re.compile(
    r"(https?)://([a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?)(?::([0-9]{1,5}))?"
    r"(/[A-Za-z0-9\-._~:/@!$&'()*+,;=%]*)?(\?[A-Za-z0-9\-._~:/?@!$&'()*+,;=%]*)?",
    re.ASCII,
)


@functools.lru_cache(maxsize=4096)  # repeated URLs (polling, keep-alive loops) parse once
def parse_url(text: str) -> URL:
    """Parse an absolute http(s) URL, or raise ``RequestError('invalid_url')``."""
    m = _SIMPLE.fullmatch(text)
    if m is not None:
        scheme, host, port_text, path, query = m.groups()
        if ".." not in host and not host.replace(".", "").isdigit():
            default = 80 if scheme == "http" else 443
            port = int(port_text) if port_text else default
            if 0 < port < 65536:
                target = ((path or "/") + (query or "")).encode("ascii")
                shown = host if port == default else f"{host}:{port}"
                key = (scheme, host, port)
                return URL(text, scheme, host, port, target, shown.encode("ascii"), key)
    return _parse_general(text)


def _parse_general(text: str) -> URL:
    text = text.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:  # e.g. a port out of range, or bad brackets
        raise RequestError("invalid_url", f"not a valid URL: {e}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        what = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise RequestError("invalid_url", f"not an http(s) URL ({what}): {text[:200]!r}")
    host = parts.hostname
    if not host:
        raise RequestError("invalid_url", f"no host in URL: {text[:200]!r}")
    host = _normalise_host(host, text)
    if port is None:
        port = _DEFAULT_PORTS[scheme]
    elif port == 0:
        raise RequestError("invalid_url", f"port 0 in URL: {text[:200]!r}")
    target = _escape((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    shown = f"[{host}]" if ":" in host else host
    if port != _DEFAULT_PORTS[scheme]:
        shown = f"{shown}:{port}"
    return URL(text, scheme, host, port, target, shown.encode("ascii"), (scheme, host, port))


def _normalise_host(host: str, text: str) -> str:
    if any(c in host for c in " \t\r\n/\\@"):
        raise RequestError("invalid_url", f"bad character in host: {text[:200]!r}")
    if ":" in host or host.replace(".", "").isdigit():  # looks like an address
        try:
            return str(ipaddress.ip_address(host))
        except ValueError:
            pass
    try:
        encoded = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError as e:
        raise RequestError("invalid_url", f"host is not a valid domain name: {e}") from None
    labels = encoded.rstrip(".").split(".")
    if not all(0 < len(label) <= 63 for label in labels) or len(encoded) > 253:
        raise RequestError("invalid_url", f"host is not a valid domain name: {host!r}")
    return encoded.lower()


def _escape(target: str) -> bytes:
    raw = target.encode("utf-8", "surrogateescape")
    if all(b in _SAFE for b in raw):
        return raw
    return b"".join(bytes([b]) if b in _SAFE else b"%%%02X" % b for b in raw)
