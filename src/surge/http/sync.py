"""The synchronous client, and ``surge.get``/``post``/... for one request.

``Client`` is :class:`AsyncClient` with the ``await`` taken out: it owns a
private event loop and runs each request on it to
completion in the calling thread - no helper thread, no hand-off, so a
keep-alive request costs about what the async client's does.  Its pooled
connections stay open between calls.  One request runs at a time per client
(a lock serialises threads that share one); for many at once, use
``AsyncClient`` or ``surge.fetch_all``.  Called where an event loop already runs
in the thread (Jupyter, or async code), it blocks as requests would, running
its loop on a short-lived thread: a loop cannot run inside another.  In async
code, ``AsyncClient`` is the one to use.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from surge.http.client import AsyncClient
from surge.http.response import Response

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    """asyncio's own loop, not uvloop: each call is a ``run_until_complete``,
    which costs ~21 us on asyncio's loop and ~59 us on uvloop's (its I/O is
    faster, but one request at a time has little I/O to win on). Measured per
    keep-alive GET, one at a time: 195 us on asyncio's loop, 228 on uvloop's."""
    return asyncio.new_event_loop()


class Client:
    """A synchronous HTTP/1.1 client: the options of :class:`AsyncClient`, the same
    :class:`Response`, the same errors.

    ``with Client(max_time=10) as client: client.get(url).raise_for_status()``
    """

    def __init__(self, **options: Any) -> None:
        self._loop = _new_loop()
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._client = AsyncClient(**options)
        except BaseException:
            self._loop.close()
            raise

    @property
    def async_client(self) -> AsyncClient:
        """The asynchronous client underneath (its ``stats()``, its options)."""
        return self._client

    def request(self, method: str, url: str, **kwargs: Any) -> Response:
        """As :meth:`AsyncClient.request`: ``params``, ``headers``, ``content``,
        ``data``, ``json``, ``timeout``, ``follow_redirects``, ..."""
        return self._run(method, url, **kwargs)

    def get(self, url: str, **kwargs: Any) -> Response:
        return self._run("GET", url, **kwargs)

    def head(self, url: str, **kwargs: Any) -> Response:
        return self._run("HEAD", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> Response:
        return self._run("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> Response:
        return self._run("PUT", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> Response:
        return self._run("PATCH", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> Response:
        return self._run("DELETE", url, **kwargs)

    def options(self, url: str, **kwargs: Any) -> Response:
        return self._run("OPTIONS", url, **kwargs)

    @contextlib.contextmanager
    def stream(self, method: str, url: str, **kwargs: Any) -> Iterator[Response]:
        """``with client.stream("GET", url) as response:`` a response whose body is
        read as it arrives: ``for chunk in response.iter_bytes()`` (or
        ``iter_raw``, ``iter_text``, ``iter_lines``, ``read()``).  The block's end
        lets go of the connection: back to the pool if the body was read, else
        closed.  Other requests may run on the client inside the block."""
        response = self._call(self._client.request(method, url, _stream=True, **kwargs))
        assert response._stream is not None
        response._stream.run = self._call
        try:
            yield response
        finally:
            response.close()

    def stats(self) -> dict[str, Any]:
        return self._client.stats()

    def close(self) -> None:
        """Close the pooled connections and the loop (again: nothing)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                _blocking(self._loop, self._client.close())
            finally:
                self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:  # a client dropped unclosed: free its sockets and loop
        if not getattr(self, "_closed", True) and not self._loop.is_running():
            with contextlib.suppress(Exception):  # at exit: nothing to report to
                self.close()

    def _run(self, method: str, url: str, **kwargs: Any) -> Response:
        return self._call(self._client.request(method, url, **kwargs))

    def _call(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` to its end on the client's loop, one at a time."""
        with self._lock:
            if self._closed:
                if inspect.iscoroutine(awaitable):
                    awaitable.close()
                raise RuntimeError("the client is closed")
            return _blocking(self._loop, awaitable)


def _blocking(loop: asyncio.AbstractEventLoop, coroutine: Awaitable[T]) -> T:
    """``loop.run_until_complete(coroutine)`` here, or - if this thread already
    runs an event loop, inside which another cannot run - on a thread of its
    own, waited for."""
    run = loop.run_until_complete
    if asyncio._get_running_loop() is None:
        return run(coroutine)
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, run(coroutine)))
        except BaseException as error:  # handed to the caller's thread
            outcome.append((False, error))

    thread = threading.Thread(target=target, name="surge-sync-client")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def request(method: str, url: str, **kwargs: Any) -> Response:
    """One request on a client of its own (as ``httpx.request``): keyword
    arguments go to :meth:`Client.request`, except the client's own options
    (``max_time``, ``cafile``, ``follow_redirects``, ...), which build it."""
    client_options = {k: kwargs.pop(k) for k in list(kwargs) if k in _CLIENT_OPTIONS}
    with Client(**client_options) as client:
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
