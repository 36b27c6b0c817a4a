"""urllib3's pool and its pyOpenSSL shim: what ``http.client`` cannot see.

- ``HTTPConnectionPool._get_conn``: a caller that found every connection of the
  pool checked out (``pool.empty()``) and the pool blocking waits here: a
  ``pool.wait`` operation.
- ``HTTPConnectionPool._put_conn``: a connection returned to a full pool is
  closed ("Connection pool is full, discarding connection"): a discard.  urllib3
  logs it too, but its log line names the host without the port; the wrapper
  sees the pool.
- ``urllib3.contrib.pyopenssl.PyOpenSSLContext.wrap_socket``: the TLS handshake
  when pyOpenSSL is injected (``ssl`` is then not used at all).

Wrappers, as urllib3 has no hooks for these.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from surge.watch.instrument import Instrumentor, failed
from surge.watch.instrumentors._socket import timed_handshake
from surge.watch.recorder import clock


def _pool_state(pool: Any) -> tuple[str, int | None, bool]:
    """(host:port, maxsize, every connection checked out)."""
    queue = pool.pool
    size = getattr(queue, "maxsize", None)
    return f"{pool.host}:{pool.port}", size, queue is not None and queue.empty()


class Urllib3Instrumentor(Instrumentor):
    library = "urllib3"
    modules = ("urllib3.connectionpool", "urllib3.contrib.pyopenssl")
    shown = ("HTTP", ("urllib3",))

    def apply(self, module: ModuleType) -> None:
        if module.__name__ == "urllib3.connectionpool":
            pool = module.HTTPConnectionPool
            self.replace(pool, "_get_conn", self._get_conn)
            self.replace(pool, "_put_conn", self._put_conn)
        else:
            self.replace(module.PyOpenSSLContext, "wrap_socket", self._wrap_socket)

    def _get_conn(self, original: Any) -> Any:
        instrumentor = self

        def _get_conn(pool: Any, *args: Any, **kwargs: Any) -> Any:
            if not instrumentor.on:
                return original(pool, *args, **kwargs)
            try:
                peer, size, exhausted = _pool_state(pool)
                waits = exhausted and bool(pool.block)
            except Exception:
                waits = False
            if not waits:
                return original(pool, *args, **kwargs)
            start = clock()
            try:
                return original(pool, *args, **kwargs)
            finally:
                try:
                    instrumentor.recorder.pool_wait("urllib3", peer, start, clock(), size)
                except Exception:
                    failed("urllib3 _get_conn")

        return _get_conn

    def _put_conn(self, original: Any) -> Any:
        instrumentor = self

        def _put_conn(pool: Any, conn: Any, *args: Any, **kwargs: Any) -> Any:
            if instrumentor.on and conn is not None:
                try:
                    queue = pool.pool
                    if queue is not None and queue.full():
                        peer, size, _ = _pool_state(pool)
                        instrumentor.recorder.pool_discard(peer, size)
                except Exception:
                    failed("urllib3 _put_conn")
            return original(pool, conn, *args, **kwargs)

        return _put_conn

    def _wrap_socket(self, original: Any) -> Any:
        instrumentor = self

        def wrap_socket(context: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
            def handshake(raw: Any, *more: Any, **options: Any) -> Any:
                return original(context, raw, *more, **options)

            return timed_handshake(instrumentor, handshake, "pyopenssl")(sock, *args, **kwargs)

        return wrap_socket
