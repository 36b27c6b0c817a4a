"""The synchronous client, and ``surge.get``/``post``/... for one request.

``Client`` is :class:`AsyncClient` behind a :class:`~surge.http.portal.Portal`:
its requests run on an event loop in a thread of the client's own, which any
number of threads hand their requests to.  Threads that share a client (a
``ThreadPoolExecutor`` and one client, the most common way Python programs make
many requests) so run their requests at the same time on one pool of
connections - its limits hold across them all - and each returns when its own
response is in, however long the others take.  It works the same from a
thread that runs an event loop of its own (the call blocks it, as requests
would), from ``asyncio.to_thread`` and from a signal handler.  ``close()``
from any thread ends the requests still in flight (``RuntimeError``).

After ``os.fork()``, a client used in the parent starts afresh in the child on
its first call: a new loop and pool, its options and cookies kept; the
parent's connections are left to the parent, untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
import weakref
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from surge.http.client import AsyncClient
from surge.http.portal import _ABANDONED, Portal, PortalClosed, PortalForked
from surge.http.response import Response

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

T = TypeVar("T")


class Client:
    """A synchronous HTTP/1.1 client: the options of :class:`AsyncClient`, the same
    :class:`Response`, the same errors; safe to share between threads.

    ``with Client(max_time=10) as client: client.get(url).raise_for_status()``
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._client = AsyncClient(**options)  # checks the options now
        self._portal: Portal | None = None  # started by the first call
        self._starting = threading.RLock()  # reentrant: a signal handler may start it
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._closed = False
        _CLIENTS.add(self)

    @property
    def async_client(self) -> AsyncClient:
        """The asynchronous client underneath (its ``stats()``, its options).  Its
        coroutines run on this client's loop (``client.portal.call(...)``)."""
        if self._portal is not None and self._portal.forked:
            with self._starting:
                if self._portal is not None and self._portal.forked:
                    self._fresh_after_fork()
        return self._client

    @property
    def portal(self) -> Portal:
        """The loop this client's requests run on, and how to run more there."""
        portal = self._portal
        if portal is None or portal.closed:
            portal = self._start()
        return portal

    @property
    def cookies(self) -> CookieJar:
        """The cookies the client keeps (an ``http.cookiejar.CookieJar``), as
        :attr:`AsyncClient.cookies`."""
        return self.async_client.cookies

    def request(self, method: str, url: str, **kwargs: Any) -> Response:
        """As :meth:`AsyncClient.request`: ``params``, ``headers``, ``content``,
        ``data``, ``json``, ``timeout``, ``follow_redirects``, ..."""
        return self._run(method, url, kwargs)

    def get(self, url: str, **kwargs: Any) -> Response:
        return self._run("GET", url, kwargs)

    def head(self, url: str, **kwargs: Any) -> Response:
        return self._run("HEAD", url, kwargs)

    def post(self, url: str, **kwargs: Any) -> Response:
        return self._run("POST", url, kwargs)

    def put(self, url: str, **kwargs: Any) -> Response:
        return self._run("PUT", url, kwargs)

    def patch(self, url: str, **kwargs: Any) -> Response:
        return self._run("PATCH", url, kwargs)

    def delete(self, url: str, **kwargs: Any) -> Response:
        return self._run("DELETE", url, kwargs)

    def options(self, url: str, **kwargs: Any) -> Response:
        return self._run("OPTIONS", url, kwargs)

    @contextlib.contextmanager
    def stream(self, method: str, url: str, **kwargs: Any) -> Iterator[Response]:
        """``with client.stream("GET", url) as response:`` a response whose body is
        read as it arrives: ``for chunk in response.iter_bytes()`` (or
        ``iter_raw``, ``iter_text``, ``iter_lines``, ``read()``).  The block's end
        lets go of the connection: back to the pool if the body was read, else
        closed.  Other requests may run on the client inside the block."""
        portal = self.portal
        response = portal.call(self._client.request(method, url, _stream=True, **kwargs))
        assert response._stream is not None
        response._stream.run = portal.call
        try:
            yield response
        finally:
            if not portal.closed:  # closed: the client's close let go of the connection
                response.close()

    def stats(self) -> dict[str, Any]:
        """As :meth:`AsyncClient.stats`, read on the client's loop (its pool
        changes there)."""
        portal = self._portal
        if portal is None or portal.closed:
            return self.async_client.stats()
        return portal.call(_stats(self._client))

    def close(self) -> None:
        """Close the pooled connections and stop the client's loop, from any
        thread; requests still in flight raise ``RuntimeError``.  Again: nothing."""
        self._closed = True
        with self._starting:
            portal = self._portal
        if portal is not None:
            portal.close(self._client.close)
        else:
            self._client.resolver.close()  # never used: nothing on a loop to close

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, method: str, url: str, kwargs: dict[str, Any]) -> Response:
        portal = self._portal
        if portal is None:
            portal = self._start()
        try:
            return portal.call(self._client.request(method, url, **kwargs))
        except PortalForked:
            return self._start().call(self._client.request(method, url, **kwargs))

    def _start(self) -> Portal:
        """The portal, started on first use (and again in a forked child)."""
        with self._starting:  # two threads' first calls start one portal
            portal = self._portal
            if portal is not None and not portal.closed:
                return portal
            if self._closed or (portal is not None and not portal.forked):
                raise PortalClosed("the client is closed")
            if portal is not None:  # made in the parent of this forked process
                self._fresh_after_fork()
            portal = Portal()
            # An unclosed client that is dropped closes its connections and loop
            # (at exit too); the finalizer holds the portal, not the client.
            self._finalizer = weakref.finalize(self, portal.close, self._client.close)
            self._portal = portal
            return portal

    def _fresh_after_fork(self) -> None:
        """In a forked child: a new AsyncClient from the same options (and the
        cookies so far); the parent's is kept, untouched (portal.py's notes)."""
        old = self._client
        _ABANDONED.append(old)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        options = dict(self._options)
        if old._cookies is not None:
            options["cookies"] = old._cookies.jar
        resolver = options.get("resolver")
        if resolver is not None:  # the caller's own: its loop-bound parts are the parent's
            resolver.forget_loop()
        self._client = AsyncClient(**options)
        self._portal = None


async def _stats(client: AsyncClient) -> dict[str, Any]:
    return client.stats()


#: Every client alive, for the fork hook.
_CLIENTS: weakref.WeakSet[Client] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A thread of the parent may have held a client's start lock at the fork:
    in the child, where that thread does not exist, it would never be let go."""
    for client in list(_CLIENTS):
        client._starting = threading.RLock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def request(method: str, url: str, **kwargs: Any) -> Response:
    """One request on a client of its own (as ``httpx.request``): keyword
    arguments go to :meth:`Client.request`, except the client's own options
    (``max_time``, ``cafile``, ``follow_redirects``, ...), which build it."""
    client_options = {k: kwargs.pop(k) for k in list(kwargs) if k in _CLIENT_OPTIONS}
    if asyncio._get_running_loop() is None:
        # Nothing shares a one-shot client: it runs on a loop of its own here,
        # without a portal's thread to start and stop (0.60 ms of CPU a call
        # against 0.82 ms through a portal, benchmarks/api.py's oneshot rows).
        loop = asyncio.new_event_loop()
        try:
            one = AsyncClient(**client_options)
            try:
                return loop.run_until_complete(one.request(method, url, **kwargs))
            finally:
                loop.run_until_complete(one.close())
        finally:
            loop.close()
    with Client(**client_options) as client:  # in a thread whose loop runs: on a portal
        return client.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> Response:
    return request("GET", url, **kwargs)


def head(url: str, **kwargs: Any) -> Response:
    return request("HEAD", url, **kwargs)


def post(url: str, **kwargs: Any) -> Response:
    return request("POST", url, **kwargs)


def put(url: str, **kwargs: Any) -> Response:
    return request("PUT", url, **kwargs)


def patch(url: str, **kwargs: Any) -> Response:
    return request("PATCH", url, **kwargs)


def delete(url: str, **kwargs: Any) -> Response:
    return request("DELETE", url, **kwargs)


#: AsyncClient's options that are not also request arguments (read from the two
#: signatures, so that a new option needs no second list).
_CLIENT_OPTIONS = frozenset(inspect.signature(AsyncClient.__init__).parameters) - frozenset(
    inspect.signature(AsyncClient.request).parameters
)
