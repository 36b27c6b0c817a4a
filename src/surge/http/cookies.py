"""Cookies a client keeps: what servers set, sent back where they belong.

The rules are the standard library's ``http.cookiejar`` (domain and path
matching, ``Secure``, expiry), as requests and httpx use them, with what that
policy lacks and curl (and browsers) do, in :class:`Policy`:

* a ``Domain`` that is a public suffix (``co.uk``, ``github.io``) is refused,
  so one site cannot set cookies for its neighbours - unless it is the very
  host that set it, whose cookie is then for that host only (RFC 6265 5.3
  step 5).  The list is Mozilla's Public Suffix List from the
  ``publicsuffixlist`` package (updated from the list with each release, no
  dependencies, ~0.5 MB), loaded on the first cookie that names a Domain
  (~50 ms); a name under no known suffix counts as one (a TLD of its own);
* a ``Secure`` cookie is kept only from a secure origin (https, or the
  loopback host) - RFC 6265bis 5.7, curl since 7.79;
* a cookie without a Domain goes back to its own host only, not to the
  hosts under it (the default policy's Netscape rules would send it there);
* the name prefixes of RFC 6265bis 4.1.3: ``__Secure-`` needs ``Secure`` and
  a secure origin; ``__Host-`` those, no ``Domain`` and ``Path=/`` (matched
  without regard to case, as 6265bis asks).

Surge adds two bounds the jar lacks, so that a client that meets many hosts
stays fast and small:

* a lookup looks only at the domains a host can match (the host and its
  parents), not at every domain in the jar as ``CookieJar`` does - its cost is
  the number of labels in the host name, not the number of hosts met;
* at most ``max_cookies`` cookies (RFC 6265 6.1 asks a client for at least
  3,000); past it, expired ones go, then the oldest.

Nothing is parsed unless a response has a Set-Cookie header, and nothing is
looked up while the jar is empty: a client whose servers set no cookies pays
one search of each response head.
"""

from __future__ import annotations

import functools
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import Any

from surge.http.connection import parse_head, sets_cookies

#: RFC 6265 6.1: "at least 3000 cookies total".
MAX_COOKIES = 3000

CookiesInput = CookieJar | Mapping[str, str] | None


@functools.cache
def _public_suffixes() -> Any:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def is_public_suffix(domain: str) -> bool:
    """Whether cookies may not be set for ``domain`` as a whole (``co.uk``)."""
    return bool(_public_suffixes().is_public(domain.lower()))


#: Hosts whose plain http counts as a secure origin (browsers' "potentially
#: trustworthy", curl's exception for Secure cookies).
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class Policy(DefaultCookiePolicy):
    """``http.cookiejar``'s default policy, and the public suffix, ``Secure`` and
    prefix rules (see the module's notes); a cookie set without a Domain goes
    back to its own host only (RFC 6265 5.3 step 6, curl), not also to the
    hosts under it as the default policy's Netscape rules would send it."""

    def __init__(self) -> None:
        super().__init__(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)

    def set_ok(self, cookie: Cookie, request: Any) -> bool:
        if not super().set_ok(cookie, request):
            return False
        host = urllib.parse.urlsplit(request.get_full_url()).hostname or ""
        secure_origin = request.type == "https" or host in _LOOPBACK
        if cookie.secure and not secure_origin:
            return False
        name = cookie.name.lower()
        if name.startswith("__secure-") and not (cookie.secure and secure_origin):
            return False
        if name.startswith("__host-") and not (
            cookie.secure
            and secure_origin
            and not cookie.domain_specified
            and cookie.path_specified
            and cookie.path == "/"
        ):
            return False
        if cookie.domain_specified:
            domain = cookie.domain.lstrip(".").lower()
            if is_public_suffix(domain):
                if domain != host:
                    return False
                # RFC 6265 5.3 step 5: the suffix's own host keeps it, for itself only.
                cookie.domain, cookie.domain_specified = domain, False
                cookie.domain_initial_dot = False
        return True


class Jar(CookieJar):
    """A ``CookieJar`` whose lookups cost the host's labels, not the jar's size."""

    def __init__(self) -> None:
        super().__init__(Policy())

    def _cookies_for_request(self, request: Any) -> list[Cookie]:
        host = request.host.rsplit(":", 1)[0].lower() if request.host else ""
        if host.startswith("["):
            host = host[1:].partition("]")[0]
        cookies: list[Cookie] = []
        store = self._cookies  # type: ignore[attr-defined]
        for domain in _domains(host):
            if domain in store:
                cookies.extend(self._cookies_for_domain(domain, request))  # type: ignore[attr-defined]
        return cookies


def _domains(host: str) -> list[str]:
    """The jar keys a host's cookies may be under: the host itself (as
    ``cookiejar`` names a dotless host, ``host.local`` too), and each parent
    domain with and without its leading dot."""
    if "." not in host:
        return [host, host + ".local", "." + host + ".local"]
    keys = [host]
    labels = host.split(".")
    for i in range(len(labels) - 1):
        parent = ".".join(labels[i:])
        keys.append("." + parent)
        if i:
            keys.append(parent)
    return keys


class _Headers:
    """A response head as ``cookiejar`` reads it (``info().get_all``)."""

    def __init__(self, head: bytes) -> None:
        self._head = head

    def info(self) -> _Headers:
        return self

    def get_all(self, name: str, default: Any = None) -> Any:
        wanted = name.lower().encode("latin-1")
        values = [v.decode("latin-1") for k, v in parse_head(self._head) if k.lower() == wanted]
        return values or default


class CookieStore:
    """A client's cookies: ``header(url)`` for a request, ``extract(url, head)``
    from its response."""

    __slots__ = ("jar", "max_cookies")

    def __init__(self, cookies: CookiesInput = None, *, max_cookies: int = MAX_COOKIES) -> None:
        self.jar = Jar()
        self.max_cookies = max_cookies
        if isinstance(cookies, CookieJar):
            for cookie in cookies:
                self.jar.set_cookie(cookie)
        elif cookies:
            for name, value in cookies.items():
                self.set(name, value)

    def set(self, name: str, value: str, domain: str = "", path: str = "/") -> None:
        """A cookie of the caller's, for ``domain`` ("" - every host, as requests
        and httpx take ``cookies={...}``)."""
        self.jar.set_cookie(
            Cookie(
                0, name, value, None, False, domain, bool(domain), domain.startswith("."),
                path, True, False, None, False, None, None, {},
            )
        )  # fmt: skip

    def header(self, url: str) -> bytes:
        """The ``Cookie:`` line for a request to ``url`` (b"" if none)."""
        jar = self.jar
        if not jar._cookies:  # type: ignore[attr-defined]
            return b""
        request = urllib.request.Request(url)
        jar._policy._now = jar._now = int(time.time())  # type: ignore[attr-defined]
        # The caller's own domain-less cookies are under "": sent everywhere.
        cookies = jar._cookies_for_request(request)
        store = jar._cookies  # type: ignore[attr-defined]
        if "" in store:
            for by_path in store[""].values():
                cookies.extend(c for c in by_path.values() if not c.is_expired())
        attrs = jar._cookie_attrs(cookies)  # type: ignore[attr-defined]
        if not attrs:
            return b""
        return b"Cookie: %s\r\n" % "; ".join(_within_bounds(attrs)).encode("latin-1", "replace")

    def extract(self, url: str, head: bytes) -> None:
        """Keep what a response to ``url`` sets (if it sets anything)."""
        if not sets_cookies(head):
            return
        self.jar.extract_cookies(_Headers(head), urllib.request.Request(url))  # type: ignore[arg-type]
        self._bound()

    def _bound(self) -> None:
        store = self.jar._cookies  # type: ignore[attr-defined]
        count = sum(len(names) for paths in store.values() for names in paths.values())
        if count <= self.max_cookies:
            return
        self.jar.clear_expired_cookies()
        # Then the oldest: domains in the order they were first set (dicts keep it).
        for domain in list(store):
            for path in list(store[domain]):
                for name in list(store[domain][path]):
                    if count <= self.max_cookies:
                        return
                    self.jar.clear(domain, path, name)
                    count -= 1


def response_cookies(head: bytes) -> dict[str, str]:
    """The cookies a response head sets, by name (the last of a name wins)."""
    from http.cookies import CookieError, SimpleCookie

    found: dict[str, str] = {}
    for value in _Headers(head).get_all("set-cookie", []):
        parsed: SimpleCookie = SimpleCookie()
        try:
            parsed.load(value)
        except CookieError:
            continue
        for name, morsel in parsed.items():
            found[name] = morsel.value
    return found


#: The most cookies one request sends, and the longest its Cookie value is:
#: curl's bounds (MAX_COOKIE_SEND_AMOUNT, MAX_COOKIE_HEADER_LEN), so that what
#: servers set (300 cookies of 200 bytes, say) never makes a 60 KB header line.
MAX_SENT = 150
MAX_HEADER = 8190


def _within_bounds(attrs: list[str]) -> list[str]:
    """The first of ``attrs`` (most specific path first, as RFC 6265 orders them)
    that fit :data:`MAX_SENT` and :data:`MAX_HEADER`; the rest are not sent."""
    kept: list[str] = []
    size = 0
    for attr in attrs[:MAX_SENT]:
        size += len(attr) + (2 if kept else 0)
        if size > MAX_HEADER:
            break
        kept.append(attr)
    return kept
