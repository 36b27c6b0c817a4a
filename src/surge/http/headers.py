"""Request header policy: what a request sends, validated once, split by origin.

One place decides three things about the headers a caller gives (``-H``,
``headers=``, ``-u``, a URL's userinfo):

* whether they can be sent at all - names are RFC 9110 tokens, values carry no
  control character but HTAB and encode as latin-1 (h11's rules); a header that
  cannot be sent is a usage error (``InvalidHeader``, a ``ValueError`` too; exit
  status 2 on the command line), not a traceback from deep in a write;
* which of them are *credentials* - ``Authorization``, ``Cookie`` and
  ``Proxy-Authorization`` - sent only to the origin (scheme, host, port) the
  request was made to, as curl does since 7.83 (CVE-2022-27776 was the leak of
  exactly these on a redirect); ``trusted`` (curl's ``--location-trusted``)
  sends them on to every origin;
* whether the caller's ``Host`` replaces surge's own: it does, on the first host
  only (curl: a custom Host is used only while the redirects stay on the host
  it was given for), so a request never carries two Host headers.

The header lines are built once per client (and once per request only when the
request brings headers of its own), as bytes ready to join into the request head.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple
from urllib.parse import unquote_to_bytes

from surge.errors import UsageError

#: RFC 9110 5.6.2: token = 1*tchar.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", re.ASCII)
#: RFC 9110 5.5: field values are visible characters, SP and HTAB (obs-text
#: allowed, as h11 does); any other control character - CR and LF above all,
#: the way to smuggle a header - is refused.
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: Headers that identify the user to a server: never sent to another origin.
CREDENTIALS = frozenset({"authorization", "cookie", "proxy-authorization"})
#: Methods already checked (a set lookup instead of a regex per request).
_METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}

HeaderInput = Mapping[str, str] | Iterable[tuple[str, str]] | None


class InvalidHeader(UsageError, ValueError):
    """A header (or a method) that cannot be sent: a usage error."""


class RequestHeaders(NamedTuple):
    """A request's own header lines, split by where they may go."""

    common: bytes  # sent on every hop
    credentials: bytes  # sent to the first origin only (unless trusted)
    host: bytes | None  # the caller's Host value: replaces surge's own on the first host
    authorization: bool  # the caller set Authorization: a URL's userinfo does not replace it
    names: frozenset[bytes] = frozenset()  # the lower-cased names of the lines

    def plus(self, other: RequestHeaders) -> RequestHeaders:
        """These headers and a request's own: a name the request gives replaces
        the client's lines of that name (httpx's merge; a request's User-Agent
        is the one sent, not a second one)."""
        common, credentials = self.common, self.credentials
        if other.names & self.names:
            common = _without(common, other.names)
            credentials = _without(credentials, other.names)
        return RequestHeaders(
            common + other.common,
            credentials + other.credentials,
            other.host if other.host is not None else self.host,
            other.authorization or (b"authorization" not in other.names and self.authorization),
            self.names | other.names,
        )


def _without(lines: bytes, names: frozenset[bytes]) -> bytes:
    """Header lines whose (lower-cased) names are not in ``names``."""
    kept = [
        line + b"\r\n"
        for line in lines.split(b"\r\n")
        if line and line.partition(b":")[0].lower() not in names
    ]
    return b"".join(kept)


def build(headers: HeaderInput, defaults: str | None = None) -> RequestHeaders:
    """Validate ``headers`` and split them; ``defaults`` (an Accept-Encoding
    value) adds surge's User-Agent, Accept and Accept-Encoding unless given."""
    items = list(headers.items() if isinstance(headers, Mapping) else headers or ())
    common: list[bytes] = []
    credentials: list[bytes] = []
    host: bytes | None = None
    names = set()
    for name, value in items:
        line = header_line(name, value)
        lname = name.lower()
        names.add(lname)
        if lname == "host":
            host = line[len(name) + 2 : -2]
        elif lname in CREDENTIALS:
            credentials.append(line)
        else:
            common.append(line)
    if defaults is not None:
        from surge._version import __version__

        own = []
        if "user-agent" not in names:
            own.append(b"User-Agent: surge/%s\r\n" % __version__.encode("ascii"))
        if "accept" not in names:
            own.append(b"Accept: */*\r\n")
        if "accept-encoding" not in names:
            own.append(b"Accept-Encoding: %s\r\n" % defaults.encode("ascii"))
        common[:0] = own
    return RequestHeaders(
        b"".join(common),
        b"".join(credentials),
        host,
        "authorization" in names,
        frozenset(n.encode("ascii") for n in names)
        | (_DEFAULT_NAMES if defaults is not None else frozenset()),
    )


#: The names of the lines ``build`` adds itself (a request's own replace them).
_DEFAULT_NAMES = frozenset({b"user-agent", b"accept", b"accept-encoding"})


def header_line(name: str, value: str) -> bytes:
    """``Name: value\\r\\n``, or ``InvalidHeader`` saying why it cannot be sent."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise InvalidHeader(f"header {name!r}: name and value must be str")
    if not _TOKEN.fullmatch(name):
        raise InvalidHeader(f"bad header name {name!r}: not an HTTP token")
    value = value.strip(" \t")
    # The error names the header and the character, never the value: it may
    # be a credential (-H 'Authorization: Bearer ...'), and errors are printed.
    bad = _BAD_VALUE.search(value)
    if bad:
        raise InvalidHeader(
            f"header {name}: the value holds a control character ({_where(value, bad.start())})"
        )
    try:
        return b"%s: %s\r\n" % (name.encode("ascii"), value.encode("latin-1"))
    except UnicodeEncodeError as e:
        raise InvalidHeader(
            f"header {name}: the value cannot be sent (not latin-1: {_where(value, e.start)})"
        ) from None


def _where(value: str, at: int) -> str:
    return f"U+{ord(value[at]):04X} at character {at + 1}"


def check_method(method: str) -> str:
    """The method, upper-cased, if it is a token; else ``InvalidHeader``."""
    method = method.upper()
    if method not in _METHODS:
        if not _TOKEN.fullmatch(method):
            raise InvalidHeader(f"bad method {method!r}: not an HTTP token")
        if len(_METHODS) < 64:  # bounded: methods come from callers, not the network
            _METHODS.add(method)
    return method


def basic_auth(user: str | bytes, password: str | bytes) -> bytes:
    """An ``Authorization: Basic`` line for user and password (as curl: the bytes
    as given, UTF-8 for text)."""
    if isinstance(user, str):
        user = user.encode("utf-8")
    if isinstance(password, str):
        password = password.encode("utf-8")
    return b"Authorization: Basic %s\r\n" % base64.b64encode(user + b":" + password)


def userinfo_auth(userinfo: str) -> bytes:
    """The Authorization line for a URL's ``user:password`` (percent-decoded)."""
    user, _, password = userinfo.partition(":")
    return basic_auth(unquote_to_bytes(user), unquote_to_bytes(password))


def parse_user(text: str) -> tuple[str, str]:
    """``-u/--user user:password`` (curl's form; no colon: an empty password)."""
    user, _, password = text.partition(":")
    if not user:
        raise UsageError(f"-u {text!r}: expected 'user:password'")
    return user, password
