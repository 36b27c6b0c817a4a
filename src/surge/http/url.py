"""URL parsing for the client: from a string to what a connection needs.

A URL that surge cannot request is a ``RequestError("invalid_url")`` - data in
a result record, never a crash: bulk inputs are full of them.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from typing import NamedTuple
from urllib.parse import unquote, urljoin, urlsplit

from surge.errors import RequestError
from surge.http.headers import userinfo_auth

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
    #: The ``Authorization: Basic`` line from the URL's ``user:password@``, or None.
    #: The userinfo itself is taken out of ``url`` (so out of records' final_url).
    auth: bytes | None = None

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    def join(self, location: str) -> URL:
        """Resolve a redirect's Location (see redirects.location) against this URL.

        A Location with a scheme is a URL of its own, parsed as a user's is
        (as curl does): ``http:\\\\host\\path`` is not a path on this host
        (what ``urljoin`` would make of it) but a URL without "//", refused
        (curl: "Unsupported number of slashes following scheme"; httpx:
        InvalidURL).  A relative one is resolved as RFC 3986 section 5.2 says
        (its dot segments resolved against this URL's path)."""
        if _HAS_SCHEME(location):
            return parse_url(location)
        return parse_url(urljoin(self.url, location))


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
        # Not here: a host that may be a number (127.1, 0x7f.1: its last label
        # is one) unless in normal form, and a host that is a scheme name
        # before "//" (_scheme_typo).
        last = host[host.rfind(".") + 1 :]
        numeric = last.isdigit() or last.startswith("0x")
        if (
            ".." not in host
            and (not numeric or _dotted_quad(host))
            and not _scheme_typo(host, path)
        ):
            default = 80 if scheme == "http" else 443
            port = int(port_text) if port_text else default
            # Longer hosts take the general path, which checks label lengths.
            if 0 < port < 65536 and len(host) <= 63:
                target = ((path or "/") + (query or "")).encode("ascii")
                if port_text and port == default:
                    # written anew without the default port (as httpx writes the
                    # origin): the general path's one writer
                    return _parse_general(text)
                shown = host if port == default else f"{host}:{port}"
                key = (scheme, host, port)
                return URL(text, scheme, host, port, target, shown.encode("ascii"), key)
    return _parse_general(text)


#: A scheme (RFC 3986 3.1) where a Location starts: then it is a URL of its own.
_HAS_SCHEME = re.compile(r"[ \t]*[A-Za-z][A-Za-z0-9+.-]*:", re.ASCII).match


def _scheme_typo(host: str, path: str | None) -> bool:
    """``http://http//x/``: the host is a scheme's name and the path goes on
    with "//" - what ``http//x/`` (a scheme without its colon) becomes when
    http:// is put before it.  No such host is meant: refused before any
    lookup, as a URL's syntax is."""
    return host in _DEFAULT_PORTS and path is not None and path.startswith("//")


def _dotted_quad(host: str) -> bool:
    """Whether ``host`` (ASCII letters, digits and dots) is an IPv4 address written as
    ``ipaddress`` writes it: four decimal parts of 0-255, no leading zeros.
    Such a host is its own normal form, and the fast path may keep it (an
    endpoint like MinIO's 127.0.0.1 took the general path for every request:
    ~70 us of ``ipaddress`` and ``urlsplit`` a URL)."""
    parts = host.split(".")
    return len(parts) == 4 and all(
        0 < len(p) <= 3 and p.isdigit() and (p == "0" or p[0] != "0") and int(p) <= 255
        for p in parts
    )


def _parse_general(text: str) -> URL:
    text = text.strip()
    given = text
    slashes = _SCHEME_SLASHES.match(text)
    if slashes is not None and len(slashes[2]) != 2:  # http:/h and http:///h, as curl
        text = f"{slashes[1]}://{text[slashes.end() :]}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:  # e.g. a port out of range, or bad brackets
        raise RequestError("invalid_url", f"not a valid URL: {e}") from None
    scheme = parts.scheme.lower()
    if any(c in text for c in "\x00\r\n\t"):  # urlsplit drops some of them silently
        raise RequestError("invalid_url", f"control character in URL: {text[:200]!r}")
    if scheme not in _DEFAULT_PORTS:
        what = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise RequestError("invalid_url", f"not an http(s) URL ({what}): {text[:200]!r}")
    host = parts.hostname
    if not host:
        raise RequestError("invalid_url", f"no host in URL: {text[:200]!r}")
    host = _normalise_host(host, text)
    zone = host.find("%")  # an IPv6 zone: where the connection goes, never in Host
    if port is None:
        port = _DEFAULT_PORTS[scheme]
    elif port == 0:
        raise RequestError("invalid_url", f"port 0 in URL: {text[:200]!r}")
    # An empty query ("http://a/?") is kept, as curl sends it: urlsplit reports
    # it as no query, so the "?" is looked for in the text (before a fragment).
    asked = parts.query or "?" in text.partition("#")[0]
    path = parts.path or "/"
    if _scheme_typo(host, path):
        raise RequestError(
            "invalid_url", f"host {host!r} then '//': a scheme without its colon? {given[:200]!r}"
        )
    # The path as given, dot segments and "//" kept (curl's --path-as-is): a
    # path the user named is never normalised - /a/../b may be another
    # resource than /b (an S3 key, a server that maps paths as they come).
    target = _escape(path + (f"?{parts.query}" if asked else ""))
    shown = host if zone < 0 else host[:zone]  # Host: the address without its zone
    shown = f"[{shown}]" if ":" in shown else shown
    port_text = f":{port}" if port != _DEFAULT_PORTS[scheme] else ""
    auth = None
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        auth = userinfo_auth(userinfo)
    # Written anew, as curl's url_effective, when a shorthand was normalised:
    # the slashes, a numeric IPv4 host (IPv6 stays as written); and without a
    # default port given (the origin as httpx writes it; the path as given).
    normalised = (
        text is not given
        or (":" not in host and host != parts.hostname)
        or parts.port == _DEFAULT_PORTS[scheme]
    )
    if at or not text.isascii() or " " in text or normalised:
        # Written anew, so that final_url is a valid URL that holds no password:
        # the IDNA host, the escaped target (as sent), and the fragment.
        written = shown if zone < 0 else f"[{host[:zone]}%25{host[zone + 1 :]}]"
        fragment = _escape("#" + parts.fragment).decode("ascii") if parts.fragment else ""
        text = f"{scheme}://{written}{port_text}{target.decode('ascii')}{fragment}"
    shown += port_text
    return URL(text, scheme, host, port, target, shown.encode("ascii"), (scheme, host, port), auth)


#: A host name as sent to DNS: labels of letters, digits, hyphens and (as curl and
#: resolvers accept, and real hosts use) underscores, 1-63 each, an optional
#: final dot.  Commas, quotes, NULs and the like are not host names.
_HOST_NAME = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*\.?", re.ASCII)


#: A scheme and the slashes after it: curl takes one to three (http:/h, http:///h).
_SCHEME_SLASHES = re.compile(r"(https?):(/{1,3})(?=[^/])", re.ASCII | re.IGNORECASE)
#: A host that may be an IPv4 address in a shorthand: 1 to 4 parts, each
#: decimal, octal (a leading 0) or hexadecimal (0x).
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}", re.ASCII)


def _ipv4_shorthand(host: str) -> str | None:
    """``127.1``, ``0x7f.1``, ``2130706433``, ``0177.0.0.1`` as the address they
    name (``127.0.0.1``), as curl and browsers read them (inet_aton's forms:
    the last part fills the bytes left); None if ``host`` is not one (curl
    then asks DNS for it, and so does surge: ``256.1`` is a name)."""
    if not _NUMERIC_HOST.fullmatch(host):
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None


def _normalise_host(host: str, text: str) -> str:
    """The host as a connection uses it: an address, or an ASCII (A-label) name.

    Non-ASCII names are mapped and encoded per UTS #46 / IDNA 2008 (the ``idna``
    package), as curl (libidn2) and browsers do: ``faß.de`` is ``xn--fa-hia.de``,
    not IDNA 2003's ``fass.de`` (a different host, which Python's "idna" codec
    would have asked for)."""
    if ":" in host:  # an IPv6 address, maybe with a zone (RFC 6874: %25 is its %)
        try:
            return str(ipaddress.ip_address(host.replace("%25", "%", 1)))
        except ValueError:
            pass
    elif host[-1:].isdigit() or "0x" in host:
        address = _ipv4_shorthand(host)
        if address is not None:
            return address
    if "%" in host:  # RFC 3986 allows escapes in a name (a Location's IDN host, escaped)
        try:
            host = unquote(host, errors="strict")
        except UnicodeDecodeError:  # escapes that are not UTF-8 (curl: "Bad hostname")
            raise RequestError(
                "invalid_url", f"host is not a valid domain name: {host[:200]!r}"
            ) from None
    encoded = host.lower()
    if not encoded.isascii():
        import idna  # on first use: its tables are ~3,000 objects every run would carry

        try:
            encoded = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as e:
            raise RequestError("invalid_url", f"host is not a valid domain name: {e}") from None
    if len(encoded) > 253 or not _HOST_NAME.fullmatch(encoded):
        raise RequestError("invalid_url", f"host is not a valid domain name: {host[:200]!r}")
    return encoded


def _escape(target: str) -> bytes:
    raw = target.encode("utf-8", "surrogateescape")
    if all(b in _SAFE for b in raw):
        return raw
    return b"".join(bytes([b]) if b in _SAFE else b"%%%02X" % b for b in raw)
