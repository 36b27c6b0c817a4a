"""Redirect policy, in one place: which responses are followed, where to, with
which method, and whether the request's credentials go along.

curl 7.88 is the reference (``-L``; ``--location-trusted``):

* 301, 302, 303, 307 and 308 with a non-empty Location are followed; an empty
  Location is not (curl neither: it has nowhere to go), and the 3xx is the answer.
* The Location's bytes are UTF-8 when they decode as UTF-8, else latin-1 (what
  servers send is mostly UTF-8; a few legacy ones send latin-1), and whatever a
  URL may not hold - non-ASCII, spaces, controls - is percent-encoded as UTF-8,
  as curl and browsers do, so the next request line and ``final_url`` are valid.
* A POST after 301 or 302, and anything but HEAD after 303, becomes a GET
  without a body; 307 and 308 keep the method and the body.
* Credentials (headers.CREDENTIALS, ``-u``, a URL's userinfo) and the caller's
  Host go only to the origin the request was made to, unless ``trusted``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from surge.http.connection import header_value

if TYPE_CHECKING:
    from surge.http.headers import RequestHeaders
    from surge.http.url import URL

Body = TypeVar("Body")  # bytes, or a streamed body (arguments.Upload)

STATUSES = frozenset({301, 302, 303, 307, 308})

# Bytes that may stand in a URL as they are (RFC 3986 reserved and unreserved,
# and "%" for escapes already made); everything else is percent-encoded.
_KEEP = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=%"
)


def location(head: bytes) -> str | None:
    """The Location of a response head as URL text (escaped), or None when it has
    none or an empty one."""
    lower = head.lower()
    if lower.find(b"\nlocation:") < 0:
        return None
    raw = header_value(head, lower, b"\nlocation:")
    if not raw:
        return None
    if all(b in _KEEP for b in raw):  # the common case: nothing to decode or escape
        return raw.decode("ascii")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    escaped = text.encode("utf-8")
    return "".join(chr(b) if b in _KEEP else f"%{b:02X}" for b in escaped)


def next_method(status: int, method: str, body: Body | None) -> tuple[str, Body | None]:
    """The method (and body) of the request that follows a redirect, as curl."""
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        return "GET", None
    return method, body


def credentials(
    own: RequestHeaders,
    user_auth: bytes | None,
    first: URL,
    target: URL,
    trusted: bool,
) -> bytes:
    """The credential header lines a hop to ``target`` carries.

    To the origin of the request's ``first`` URL (or anywhere, ``trusted``): the caller's
    credential headers, and unless the caller set Authorization itself, one Basic
    Authorization - ``-u``'s (curl: it wins over the URL's), else the target
    URL's userinfo, else the first URL's.  To another origin: only the target
    URL's own userinfo (a Location that names its credentials)."""
    if trusted or target.key == first.key:
        if own.authorization:
            return own.credentials
        auth = user_auth or target.auth or first.auth
        return own.credentials + auth if auth is not None else own.credentials
    return target.auth or b""


def host_header(own: RequestHeaders, first: URL, target: URL) -> bytes:
    """The Host a hop to ``target`` sends: the caller's own while the redirects
    stay on the first URL's host name (curl's rule), else the target's."""
    if own.host is not None and target.host == first.host:
        return own.host
    return target.host_header
