"""A requests transport adapter on surge's engine:
``session.mount("https://", surge.requests.Adapter())`` (and ``"http://"``).

:class:`Adapter` is a ``requests.adapters.BaseAdapter``.  requests keeps its
semantics - redirects, cookies, auth, hooks, the proxies and the CA bundle it
picks from the environment, ``elapsed`` - and the adapter sends the prepared
request it is given (the framing headers are surge's to write, the same way:
surge.http.dropin).  Underneath: surge's pooled HTTP/1.1 connections,
resolver and phase timings, on a portal (surge.http.portal): threads that share
one Session run their requests at once on one pool, with no ``pool_maxsize``
of 10 and no "Connection pool is full" warning.

* ``send()``'s arguments are honoured: ``timeout`` (a number for both, or a
  (connect, read) tuple: ``read`` is the longest the server may stay silent,
  as urllib3's socket timeout), ``verify`` (True: requests' own bundle,
  certifi; a CA file or directory; False), ``cert`` (a file, or (certificate,
  key)), ``proxies`` (chosen as requests does: ``select_proxy``) and
  ``stream`` (False: the body is read before ``send()`` returns).
* The ``Response`` is filled as ``HTTPAdapter.build_response`` fills it:
  ``status_code``, ``headers``, ``encoding``, ``reason``, ``url``, cookies,
  ``request``, ``connection``, and ``raw``: a file-like object with urllib3's
  ``read(amt, decode_content=)``, ``stream()`` and ``release_conn()``, on which
  ``iter_content``, ``stream=True`` and ``shutil.copyfileobj(r.raw, f)`` work.
* ``response.surge_timings``: the request's phases (:class:`surge.http.Timings`;
  ``.phases_ms()`` gives dns, connect, tls, ttfb and body in milliseconds)
  beside requests' own ``elapsed`` (its time to the response's head).
* Errors: requests' (``ConnectionError``, ``ConnectTimeout``, ``ReadTimeout``,
  ``SSLError``, ``ProxyError``, ``ChunkedEncodingError``, ...), from surge's
  error classes through :data:`ERRORS`, the one table.

One surge client is kept per (verify, cert, proxy) that requests asks for - a
Session mostly asks for one - each with its own pool and loop thread.
"""

from __future__ import annotations

import contextlib
import io
import os
import ssl
import threading
import weakref
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from surge.extras import missing

try:
    import requests
    from requests.adapters import BaseAdapter
    from requests.cookies import extract_cookies_to_jar
    from requests.structures import CaseInsensitiveDict
    from requests.utils import DEFAULT_CA_BUNDLE_PATH, extract_zipped_paths, select_proxy
except ModuleNotFoundError as e:  # the extra is not installed: say which
    raise missing(e, "surge.requests") from None

import urllib3.exceptions
from requests import exceptions as rex
from requests.adapters import DEFAULT_RETRIES
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, ProtocolError, ReadTimeoutError
from urllib3.util.retry import Retry

from surge.errors import (
    LocalResourceError,
    PoolClosed,
    PoolTimeout,
    RequestError,
    StreamError,
    SurgeError,
    UsageError,
)
from surge.http import dropin
from surge.http.decoding import layers
from surge.http.portal import Portal, PortalClosed
from surge.http.response import Response
from surge.http.sync import Client, reads_here
from surge.http.tlssession import resuming

__all__ = ["ERRORS", "Adapter"]

#: surge's error classes as requests' exceptions: (while sending the request
#: and reading the response's head, while reading the body - where requests
#: itself turns urllib3's errors into these).  The one place it is written.
ERRORS: dict[str, tuple[type[rex.RequestException], type[rex.RequestException]]] = {
    "invalid_url": (rex.InvalidURL, rex.InvalidURL),
    "dns_error": (rex.ConnectionError, rex.ConnectionError),
    "connect_refused": (rex.ConnectionError, rex.ConnectionError),
    "connect_timeout": (rex.ConnectTimeout, rex.ConnectTimeout),
    "tls_error": (rex.SSLError, rex.SSLError),
    "read_timeout": (rex.ReadTimeout, rex.ConnectionError),
    # urllib3's socket timeout while sending: "Connection aborted.", a ConnectionError
    "write_timeout": (rex.ConnectionError, rex.ConnectionError),
    "connection_reset": (rex.ConnectionError, rex.ChunkedEncodingError),
    "protocol_error": (rex.ConnectionError, rex.ChunkedEncodingError),
    "too_many_redirects": (rex.TooManyRedirects, rex.TooManyRedirects),  # never: no redirects
    "body_too_large": (rex.ConnectionError, rex.ChunkedEncodingError),  # never: no cap
}
#: Through a proxy, these classes mean the proxy could not be reached (urllib3's
#: ProxyError, which requests raises as its own).
_PROXY_FAILURES = frozenset({"dns_error", "connect_refused"})

#: Clients kept per adapter, one per (verify, cert, proxy): past this, the oldest goes.
MAX_CLIENTS = 16


def _error(e: Exception, request: Any, body: bool = False, proxied: bool = False) -> Exception:
    """requests' exception for one of surge's (the table above, and every other
    surge exception that can reach the adapter: none escapes it); anything
    else - a library's own, a caller's - as it is."""
    if isinstance(e, RequestError):
        if proxied and not body and e.error_class in _PROXY_FAILURES:
            kind: type[rex.RequestException] = rex.ProxyError
        else:
            kind = ERRORS[e.error_class][body]
        error: Exception = kind(str(e), request=request)
    elif isinstance(e, PoolTimeout | LocalResourceError):
        error = rex.ConnectionError(str(e), request=request)
    elif isinstance(e, UsageError):  # a request surge cannot send as given (a header)
        error = rex.InvalidHeader(str(e), request=request)
    elif isinstance(e, PortalClosed | PoolClosed):  # the adapter closed under the request
        error = rex.ConnectionError(str(e), request=request)
    elif isinstance(e, StreamError):
        error = rex.StreamConsumedError(str(e), request=request)
    elif isinstance(e, SurgeError):  # none reaches here today: still requests'
        error = rex.RequestException(str(e), request=request)
    else:
        return e
    error.__cause__ = e
    return error


def _timeout(timeout: Any) -> Any:
    """surge's Timeout for requests' ``timeout=`` (as HTTPAdapter reads it)."""
    if timeout is None:
        return None
    if isinstance(timeout, tuple):
        try:
            connect, read = timeout
        except ValueError:
            raise ValueError(
                f"Invalid timeout {timeout}. Pass a (connect, read) timeout tuple, "
                "or a single float to set both timeouts to the same value."
            ) from None
    elif hasattr(timeout, "connect_timeout"):  # urllib3's Timeout
        connect, read = timeout.connect_timeout, timeout.read_timeout
        connect = connect if isinstance(connect, int | float) else None
        read = read if isinstance(read, int | float) else None
    else:
        connect = read = timeout
    try:
        return dropin.timeout(connect, read)
    except UsageError as e:  # urllib3's words, and its type
        raise ValueError(str(e)) from None


def _ssl_context(verify: bool | str, cert: Any) -> ssl.SSLContext:
    """TLS as ``HTTPAdapter.cert_verify`` configures it: requests' bundle (or
    the CA file or directory given) unless ``verify`` is False, and the client
    certificate; a missing file is requests' ``OSError``."""
    if verify:
        where = extract_zipped_paths(DEFAULT_CA_BUNDLE_PATH) if verify is True else verify
        if not where or not os.path.exists(where):
            raise OSError(
                f"Could not find a suitable TLS CA certificate bundle, invalid path: {where}"
            )
        if os.path.isdir(where):
            context = resuming(ssl.create_default_context(capath=where))
        else:
            context = resuming(ssl.create_default_context(cafile=where))
    else:
        context = resuming(ssl.create_default_context())
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert:
        certfile, keyfile = (cert, None) if isinstance(cert, str) else cert
        if certfile and not os.path.exists(certfile):
            raise OSError(f"Could not find the TLS certificate file, invalid path: {certfile}")
        if keyfile and not os.path.exists(keyfile):
            raise OSError(f"Could not find the TLS key file, invalid path: {keyfile}")
        context.load_cert_chain(certfile, keyfile)
    context.set_alpn_protocols(["http/1.1"])
    return context


def _body(request: requests.PreparedRequest) -> tuple[bytes | None, Any]:
    """The prepared body: bytes, or a stream (a file or an iterator) to send as
    it is read.  Text is sent as UTF-8, as urllib3 does."""
    body = request.body
    if body is None or isinstance(body, bytes):
        return body, None
    if isinstance(body, str):
        return body.encode("utf-8"), None
    if isinstance(body, bytearray | memoryview):
        return bytes(body), None
    return None, body


class Adapter(BaseAdapter):
    """A requests transport adapter on surge's engine.  Keyword arguments are
    surge's client options (``max_connections`` - 1000 -, ``per_host``,
    ``resolve``, ``dns_servers``, ``idle_timeout``, ...:
    :class:`surge.http.AsyncClient`)."""

    def __init__(self, max_retries: int | Retry = DEFAULT_RETRIES, **surge_options: Any) -> None:
        super().__init__()
        #: As HTTPAdapter's: urllib3's Retry (an int is ``Retry.from_int``; the
        #: default, none and no read retries: ``Retry(0, read=False)``).
        if max_retries == DEFAULT_RETRIES:
            self.max_retries = Retry(0, read=False)
        else:
            self.max_retries = Retry.from_int(max_retries)
        self._options = surge_options
        self._clients: dict[tuple[Any, ...], Client] = {}
        self._lock = threading.Lock()
        #: Streamed bodies not yet read or closed (see close()).
        self._streams: weakref.WeakSet[_Raw] = weakref.WeakSet()

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "max_retries": self.max_retries}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state.get("max_retries", DEFAULT_RETRIES), **state["_options"])  # type: ignore[misc]

    def client(
        self, verify: bool | str = True, cert: Any = None, proxy: str | None = None
    ) -> Client:
        """surge's client for this TLS and proxy configuration (its ``stats()``)."""
        key = (verify, cert if not isinstance(cert, list) else tuple(cert), proxy)
        client = self._clients.get(key)
        if client is not None:
            return client
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                options = dict(self._options)
                options["ssl_context"] = _ssl_context(verify, cert)
                if proxy:
                    options["proxy"] = proxy
                client = self._clients[key] = Client(**dropin.client_options(**options))
                if len(self._clients) > MAX_CLIENTS:
                    oldest = next(iter(self._clients))
                    self._clients.pop(oldest).close()
        return client

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: dict[str, str] | None = None,
    ) -> requests.Response:
        url = request.url
        assert isinstance(url, str)
        proxy = select_proxy(url, proxies) if proxies else None
        if url[:6].lower() != "https:":
            verify, cert = True, None  # plain http: no TLS to configure
        try:
            client = self.client(verify, cert, proxy)
        except UsageError as e:  # the proxy's URL (requests checks its host)
            if proxy is None:  # the adapter's own options
                raise ValueError(str(e)) from None
            raise rex.InvalidProxyURL(
                f"Please check proxy URL. It is malformed and could be missing the host. ({e})"
            ) from None
        limits = _timeout(timeout)
        if "@" in url:  # requests sent the user info as Authorization already
            parts = urlsplit(url)
            url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        headers = [
            (name, value.decode("latin-1") if isinstance(value, bytes) else value)
            for name, value in request.headers.items()
        ]
        data, source = _body(request)
        if data is not None and "Content-Length" not in request.headers:
            source, data = iter([data]), None  # no length given: chunked, as urllib3
        method = request.method or "GET"
        retries = self.max_retries
        start = source.tell() if hasattr(source, "tell") and hasattr(source, "seek") else None
        while True:  # a try per turn, as urllib3's urlopen under max_retries
            try:
                portal = client.portal
                framed, body = dropin.frame(headers, data, source)
                response, payload = portal.call(
                    dropin.send(
                        client.async_client, method, url, framed, body, limits, whole=not stream
                    ),
                    reads_here(body),  # a streamed body is read in this thread, not on the loop
                )
            except Exception as e:
                # A failure after the head (its status known) is one of the body's,
                # as requests meets it in iter_content: never retried, as urllib3's.
                proxied = proxy is not None
                after_head = isinstance(e, RequestError) and e.status is not None
                if not isinstance(e, RequestError) or after_head:
                    raise _error(e, request, body=after_head, proxied=proxied) from None
                retries = _next_try(retries, method, url, e, request, proxied)
            else:
                if payload is None:  # read as it comes, each step on the portal's loop
                    response._stream.run = portal.call  # type: ignore[union-attr]
                retry_after = "retry-after" in response.headers
                if not retries.is_retry(method, response.status, retry_after):
                    break
                shown = _Shown(response)
                try:
                    retries = retries.increment(method, url, response=shown)  # type: ignore[arg-type]
                except MaxRetryError as e:
                    if retries.raise_on_status:
                        response.close()
                        raise rex.RetryError(e, request=request) from None
                    break
                response.close()
                retries.sleep(shown)  # type: ignore[arg-type]
            if start is not None and source is not None:
                source.seek(start)  # the body again from where it began
        out = self._build(request, response, payload, portal)
        if payload is None:
            # A streamed body outlives the adapter's close (requests.get(...,
            # stream=True) closes its Session before the body is read): the
            # raw holds its client, and close() leaves such a client running.
            out.raw._client = client
            self._streams.add(out.raw)
        return out

    def _build(
        self,
        request: requests.PreparedRequest,
        response: Response,
        payload: list[bytes] | None,
        portal: Portal,
    ) -> requests.Response:
        """The Response, filled as HTTPAdapter.build_response fills it."""
        out = requests.Response()
        out.status_code = response.status
        headers = response.headers
        named: dict[str, str] = {}
        for name, value in headers.multi_items():
            if name in named:
                named[name] += ", " + value
            else:
                named[name] = value
        out.headers = CaseInsensitiveDict(named)
        out.encoding = requests.utils.get_encoding_from_headers(out.headers)
        raw = out.raw = _Raw(response, payload, portal, request)
        out.reason = raw.reason
        out.url = request.url  # type: ignore[assignment]
        if "set-cookie" in headers or "set-cookie2" in headers:
            raw._original_response = _Original(headers)
            extract_cookies_to_jar(out.cookies, request, raw)
        out.request = request
        out.connection = self  # type: ignore[assignment]
        out.surge_timings = response.timings  # type: ignore[attr-defined]
        return out

    def close(self) -> None:
        """Close every client's connections.  A client whose streamed body is
        still being read closes its idle ones now and the rest when the last
        such body is done with (as urllib3's pools let a response finish); the
        adapter makes new clients if used again, as requests' own does."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        reading = {id(raw._client) for raw in list(self._streams) if not raw.closed}
        for client in clients:
            if id(client) not in reading:
                client.close()
                continue
            portal = client.portal
            with contextlib.suppress(PortalClosed):  # closed by another thread meanwhile
                portal.call(client.async_client._pool.clear())
            # The raws still reading hold it; its finalizer closes it after them.


def _next_try(
    retries: Retry, method: str, url: str, error: RequestError, request: Any, proxied: bool
) -> Retry:
    """urllib3's Retry after a try failed with ``error`` (before a response
    head): the next Retry, waited for; or requests' exception, as HTTPAdapter
    raises it when urllib3 gives up (MaxRetryError) or will not retry (a read
    error of a method not in ``allowed_methods``, or with ``read=False``)."""
    kind = error.error_class
    if kind == "invalid_url":
        raise _error(error, request, proxied=proxied) from None
    # What urllib3 would have met: a connection never made (its connect
    # count), TLS (other), or a request begun (a read error: only for the
    # methods allowed, so never a POST unless asked).
    met: Exception
    if kind in ("dns_error", "connect_refused", "connect_timeout"):
        met = ConnectTimeoutError(str(error))
    elif kind == "tls_error":
        met = urllib3.exceptions.SSLError(str(error))
    elif kind == "read_timeout":
        met = ReadTimeoutError(None, url, str(error))  # type: ignore[arg-type]
    else:
        met = ProtocolError(str(error))
    try:
        retries = retries.increment(method, url, error=met)
    except MaxRetryError:
        if kind == "connect_timeout":
            raise rex.ConnectTimeout(str(error), request=request) from None
        if kind == "tls_error":
            raise rex.SSLError(str(error), request=request) from None
        if proxied and kind in _PROXY_FAILURES:
            raise rex.ProxyError(str(error), request=request) from None
        raise rex.ConnectionError(str(error), request=request) from None
    except Exception:  # not retried at all: the error as it is
        raise _error(error, request, proxied=proxied) from None
    retries.sleep()
    return retries


class _Shown:
    """What urllib3's Retry reads of a response: ``status``, ``headers``
    (Retry-After), the redirect location (none: requests follows redirects)."""

    def __init__(self, response: Response) -> None:
        self.status = response.status
        self.headers = response.headers

    def get_redirect_location(self) -> bool:
        return False


def _cut(chunks: Iterator[bytes], size: int) -> Iterator[bytes]:
    """``chunks``, each longer than ``size`` bytes cut into pieces of ``size``."""
    for chunk in chunks:
        if len(chunk) <= size:
            yield chunk
        else:
            for at in range(0, len(chunk), size):
                yield chunk[at : at + size]


class _Original:
    """What requests' cookie extraction reads of urllib3's ``_original_response``:
    ``msg.get_all(name)``."""

    def __init__(self, headers: Any) -> None:
        self.msg = self
        self._headers = headers

    def get_all(self, name: str, default: Any = None) -> Any:
        values = self._headers.get_list(name)
        return values if values else default

    getheaders = get_all


class _Raw(io.IOBase):
    """``response.raw``: the body as urllib3's response gives it to requests -
    ``read(amt, decode_content=False)``, ``stream(amt, decode_content)``,
    ``release_conn()``, ``status``, ``reason``, ``headers``, ``version``."""

    _original_response: Any = None
    _client: Client | None = None  # a streamed body's: kept open while it is read
    version = 11
    version_string = "HTTP/1.1"
    decode_content = False

    def __init__(
        self,
        response: Response,
        payload: list[bytes] | None,
        portal: Portal,
        request: requests.PreparedRequest,
    ) -> None:
        self._response = response
        self._payload = payload
        self._portal = portal
        self._request = request
        self._pieces: Iterator[bytes] | None = None
        self._left = b""  # of a piece read in part
        self.status = response.status
        self.reason = dropin.reason(response)
        self.headers = response.headers

    # -- what requests and its users call -------------------------------------------------

    def stream(
        self, amt: int | None = 2**16, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        """The body in pieces of at most ``amt`` bytes (decoded if asked), as
        urllib3 gives them to ``iter_content``: a chunked body's chunks as they
        came, each cut to ``amt`` and never joined (urllib3's read_chunked);
        any other body ``amt`` bytes at a time (its read fills them)."""
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if chunked and self._pieces is None:
            decode = self.decode_content if decode_content is None else decode_content
            for piece in self._source(decode, amt):
                if piece:
                    yield piece
            return
        while True:
            piece = self.read(amt, decode_content)
            if not piece:
                return
            yield piece

    def read(self, amt: int | None = None, decode_content: bool | None = None, **_: Any) -> bytes:
        """Up to ``amt`` bytes of the body (all that is left: None), decoded from
        its Content-Encoding if ``decode_content`` (urllib3's default here: not)."""
        if self._pieces is None:
            decode = self.decode_content if decode_content is None else decode_content
            self._pieces = self._source(decode)
        left = self._left
        if amt is None:
            rest = b"".join(self._pieces)
            self._left = b""
            return left + rest if left else rest
        while len(left) < amt:
            piece = next(self._pieces, None)
            if piece is None:
                break
            left = left + piece if left else piece
        self._left = left[amt:]
        return left[:amt]

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def release_conn(self) -> None:
        self._let_go()

    def close(self) -> None:
        self._let_go()
        super().close()

    def isclosed(self) -> bool:
        return self.closed

    def getheaders(self) -> Any:
        return self.headers

    def getheader(self, name: str, default: Any = None) -> Any:
        return self.headers.get(name, default)

    # -- inside ---------------------------------------------------------------------------

    def _source(self, decode: bool, cut: int | None = None) -> Iterator[bytes]:
        """The body's pieces as they come (through the portal if not all in);
        ``cut``: each cut to at most that many bytes before it is decoded, and
        what each piece decodes to cut so too (urllib3 decodes a chunk's piece
        ``max_length`` bytes at a time)."""
        decoder = None
        if decode:
            codings = self._response.headers.get("content-encoding")
            if codings:
                # requests has no body cap (nor has the adapter's client)
                decoder = layers(None, codings.encode("latin-1"), None, self.status).content
        payload = self._payload
        chunks: Iterator[bytes] = iter(payload) if payload is not None else self._chunks()
        if cut is not None:
            chunks = _cut(chunks, cut)
        while True:
            try:
                chunk = next(chunks, None)
            except Exception as e:
                raise _error(e, self._request, body=True) from None
            if chunk is None:
                break
            if decoder is None:
                if chunk:
                    yield chunk
            elif cut is None:
                yield from self._decoding(decoder.feed(chunk))
            else:
                yield from _cut(iter((b"".join(self._decoding(decoder.feed(chunk))),)), cut)
        if decoder is not None:
            yield from self._decoding(decoder.finish())

    def _decoding(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from pieces
        except RequestError as e:  # not what its Content-Encoding says
            raise rex.ContentDecodingError(str(e), request=self._request) from None

    def _chunks(self) -> Iterator[bytes]:
        if self._portal.closed:
            raise rex.ConnectionError("the adapter was closed", request=self._request)
        yield from self._response.iter_raw()

    def _let_go(self) -> None:
        if self._payload is None and not self._portal.closed:
            with contextlib.suppress(PortalClosed):  # closed meanwhile: nothing to let go
                self._response.close()
