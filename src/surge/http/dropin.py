"""The engine side of the drop-in transports: surge's client sending a request
that httpx or requests built, and nothing else.

``surge.httpx`` (httpx's ``HTTPTransport``/``AsyncHTTPTransport``) and
``surge.requests`` (a requests ``Adapter``) are thin: each turns its library's
request into the calls here and surge's response and errors back into its
library's.  What they share lives here, once:

* the client's options (:func:`client_options`): the library keeps its own
  semantics - redirects, cookies, auth, content decoding, proxy choice from the
  environment - so surge's client does none of them: no default headers, no
  cookie jar, no redirects, no decoding, the environment unread, and no limit
  of its own on a request's total time or body (httpx and requests have none:
  a download may take an hour).  The library's connect and read timeouts
  come with each request;
* the request's framing (:func:`frame`): the library has set Content-Length or
  ``Transfer-Encoding: chunked``; surge frames the body itself, the same way,
  so the library's framing headers are taken out and the body handed over as
  bytes or as an :class:`~surge.http.arguments.Upload` of that length;
* the exchange (:func:`send`): one coroutine, run once per request (through the
  client's portal for the synchronous libraries), that sends the request and
  waits for the response's head - and takes the body too when it has all come
  with the head, as a small keep-alive response's does, so that reading it
  costs no second hand-off to the loop;
* :func:`while_sending`: whether a failure came before the request was all
  sent (httpx's ``WriteTimeout``/``WriteError``).

What it does not do: HTTP/2 (surge speaks HTTP/1.1), a Unix socket or a local
address to bind - the transports refuse those options, naming them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from surge.errors import RequestError, UsageError
from surge.http.arguments import Upload
from surge.http.client import AsyncClient
from surge.http.response import Response
from surge.http.timeout import Timeout

#: No limit (the libraries' ``None``).
FOREVER = float("inf")


def client_options(**options: Any) -> dict[str, Any]:
    """:class:`AsyncClient` options for a drop-in: the library's semantics kept
    (see the module's notes); ``options`` (surge's own: ``ssl_context``,
    ``proxy``, ``max_connections``, ``idle_timeout``, ``resolve``, ...) added."""
    return {
        "decompress": False,  # no Accept-Encoding of surge's, no decoding: the library's
        "cookies": False,
        "follow_redirects": False,
        "trust_env": False,  # the library chose the proxy already
        "max_time": FOREVER,
        "connect_timeout": FOREVER,
        "body_cap": sys.maxsize,  # a body is the library's to read, however large
        **options,
    }


#: Timeouts made so far, by (connect, read): a request's is usually its client's.
_TIMEOUTS: dict[tuple[float | None, float | None], Timeout | None] = {}


def timeout(connect: float | None, read: float | None) -> Timeout | None:
    """surge's :class:`Timeout` for a connect and a read (idle) limit in seconds
    (None: none); None when both are None."""
    key = (connect, read)
    made = _TIMEOUTS.get(key, False)
    if made is not False:
        return made  # type: ignore[return-value]
    for name, value in (("connect", connect), ("read", read)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):  # urllib3's words
            raise UsageError(
                f"Timeout value {name} was {value}, but it must be an int, float or None."
            )
        if not value > 0:
            raise UsageError(f"a {name} timeout must be a positive number or None, not {value!r}")
    made = None if connect is None and read is None else Timeout(connect=connect, read=read)
    if len(_TIMEOUTS) < 256:  # bounded: timeouts come from callers, not the network
        _TIMEOUTS[key] = made
    return made


def frame(
    headers: Iterable[tuple[str, str]], body: bytes | None, stream: Any = None
) -> tuple[list[tuple[str, str]], bytes | Upload | None]:
    """The headers without their framing (Content-Length, Transfer-Encoding),
    and the body as surge sends it with the same framing: bytes (surge writes
    their Content-Length), or an ``Upload`` of ``stream`` - an iterator or async
    iterator of bytes, or a binary file - with the declared length, or chunked.
    A request with neither header and no body has none."""
    kept: list[tuple[str, str]] = []
    length: str | None = None
    chunked = False
    for name, value in headers:
        lname = name.lower()
        if lname == "content-length":
            length = value
        elif lname == "transfer-encoding":
            if value.strip().lower() != "chunked":
                raise UsageError(
                    f"Transfer-Encoding: {value}: surge sends a request body as it is or chunked"
                )
            chunked = True
        else:
            kept.append((name, value))
    if chunked:
        source = stream if stream is not None else iter([body] if body else [])
        return kept, Upload(source)
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise UsageError(f"Content-Length: {length!r} is not a number") from None
        if stream is None:
            body = body or b""
            if len(body) != declared:
                raise UsageError(f"Content-Length: {declared} for a body of {len(body):,} bytes")
            return kept, body
        return kept, Upload(stream, length=declared)
    if stream is not None:
        return kept, Upload(stream)
    return kept, body or None


async def send(
    client: AsyncClient,
    method: str,
    url: str,
    headers: list[tuple[str, str]],
    body: bytes | Upload | None,
    limits: Timeout | None,
    pool_timeout: float | None = None,
    whole: bool = False,
) -> tuple[Response, list[bytes] | None]:
    """Send one request as it was framed and wait for its response's head: the
    (streamed) response, and its body when all of it has come (``whole``: wait
    for all of it), in the pieces it came in (a chunked body's chunks apart,
    as requests' ``iter_content`` gives them).  The body is as it came off
    the wire, its transfer codings undone and its content codings not (they
    are the library's to undo)."""
    if isinstance(body, Upload):
        response = await client.request(
            method,
            url,
            headers=headers,
            content=body,
            timeout=limits,
            _stream=True,
            _pool_timeout=pool_timeout,
        )
    else:
        response = await client.request(
            method,
            url,
            headers=headers,
            body=body,
            timeout=limits,
            _stream=True,
            _pool_timeout=pool_timeout,
        )
    stream = response._stream
    assert stream is not None
    payload = await stream.complete()
    if payload is None and whole:
        try:
            payload = [chunk async for chunk in response.aiter_raw()]
        except RequestError as e:
            response.annotate(e)
            raise
    return response, payload


def while_sending(error: RequestError) -> bool:
    """Whether ``error`` came while the request was still being sent: the
    server had stopped taking its body, or a streamed body was still going out."""
    if error.sending:
        return True
    timings = error.timings
    return timings is not None and timings.connected is not None and timings.sent is None


def reason(response: Response) -> str:
    """The status line's reason phrase ("OK"), as the server sent it."""
    head = response.head
    end = head.find(b"\r\n")
    line = head if end < 0 else head[:end]
    return line.split(b" ", 2)[2].decode("latin-1") if line.count(b" ") >= 2 else ""
