"""Authentication a request carries: Basic from a (user, password) pair, or
anything from a callable (a bearer token, a signature).

Whatever it adds is a credential: sent to the origin the request was made to
and nowhere else unless ``location_trusted`` (redirects.py), as ``-u`` is.

    def bearer(request: surge.http.Request) -> None:
        request.headers["Authorization"] = f"Bearer {token()}"

    client.get(url, auth=bearer)

The callable is called once per request, before its first hop, with the method,
the URL (``params`` applied) and the body it will send.  The synchronous
clients call it in the calling thread, before the request goes to their event
loop (a callable that fetches a token must not hold other threads' requests);
what it made goes with the request as :class:`Signed` lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from surge.errors import UsageError
from surge.http.headers import basic_auth, header_line


@dataclass(slots=True)
class Request:
    """What an ``auth`` callable is given: it adds to ``headers``."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None


class Signed(bytes):
    """The header lines an ``auth`` callable made for one request, made already
    (in the calling thread: see the module's notes)."""


#: ``auth=``: (user, password) for Basic, or a callable given a :class:`Request`
#: (or, inside surge, what one made: :class:`Signed`).
Auth = tuple[str, str] | Callable[[Request], Any] | Signed


def check(auth: Any) -> None:
    """A usage error now, for an ``auth`` that could not be used."""
    if auth is None or callable(auth) or isinstance(auth, Signed):
        return
    if not (isinstance(auth, tuple | list) and len(auth) == 2):
        raise UsageError(f"auth= takes (user, password) or a callable, not {type(auth).__name__}")


def lines(auth: Auth, method: str, url: str, body: bytes | None) -> bytes:
    """The credential header lines ``auth`` gives this request."""
    if isinstance(auth, Signed):
        return auth
    if not callable(auth):
        check(auth)
        user, password = auth
        return basic_auth(user, password)
    request = Request(method, url, {}, body)
    auth(request)
    return b"".join(header_line(name, value) for name, value in request.headers.items())
