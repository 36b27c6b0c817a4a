"""The floor under every library: ``socket.getaddrinfo``, a blocking
``socket.connect`` and the ``ssl`` handshake, so that no lookup, connection or
handshake is missed whichever library made it.  Each is recorded as an
operation of its own and handed to the next request or database connect its
caller makes, as that operation's DNS, connect and TLS phases.

Non-blocking sockets (asyncio's, uvloop's) are not timed here: their connect
returns at once; aiohttp's and httpx's own traces time theirs.

gevent replaces ``socket.getaddrinfo``, ``socket.socket`` and ``ssl.SSLSocket``
when it patches; :mod:`._gevent` calls :meth:`SocketInstrumentor.apply` again
then, on gevent's objects.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from surge.watch.instrument import EXHAUSTED, Instrumentor, error_class, failed
from surge.watch.recorder import clock


def _numeric(host: str) -> bool:
    """An address literal (nothing to resolve): IPv6 has a colon, IPv4 only digits
    and dots."""
    return ":" in host or not host.strip("0123456789.")


def _peer(address: Any) -> str | None:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return None


class SocketInstrumentor(Instrumentor):
    library = "socket"
    modules = ("socket", "ssl")
    shown = ("DNS, TCP and TLS", ("getaddrinfo", "sockets", "ssl"))

    def apply(self, module: ModuleType) -> None:
        if module.__name__ == "socket":
            self.replace(module, "getaddrinfo", self._getaddrinfo)
            self.replace(module.socket, "connect", self._connect)
            self.replace(module.socket, "__init__", self._create)
        elif module.__name__ == "ssl":
            self.replace(module.SSLSocket, "do_handshake", self._handshake)

    def reapply(self) -> None:
        """After gevent patched: wrap what ``socket`` and ``ssl`` hold now."""
        for name in self.modules:
            module = sys.modules.get(name)
            if module is not None and self.on:
                try:
                    self.apply(module)
                except Exception:
                    failed(f"instrumenting {name} after gevent patched it")

    def _getaddrinfo(self, original: Any) -> Any:
        instrumentor = self

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if not instrumentor.on or host is None:
                return original(host, port, *args, **kwargs)
            start = clock()
            error = None
            try:
                return original(host, port, *args, **kwargs)
            except BaseException as e:
                error = error_class(e)
                raise
            finally:
                try:
                    name = host.decode("ascii", "replace") if isinstance(host, bytes) else host
                    if isinstance(name, str) and not _numeric(name):
                        name = name[:255].lower()
                        instrumentor.recorder.network_event(
                            "dns", "socket", f"{name}:{port}", start, clock(), error, name=name
                        )
                except Exception:
                    failed("socket.getaddrinfo")

        return getaddrinfo

    def _create(self, original: Any) -> Any:
        """A socket's creation: where a process out of descriptors first fails
        (EMFILE), whatever the library then makes of the error."""
        instrumentor = self

        def __init__(sock: Any, *args: Any, **kwargs: Any) -> None:
            try:
                original(sock, *args, **kwargs)
            except OSError as e:
                if instrumentor.on and e.errno in EXHAUSTED:
                    instrumentor.recorder.fd_exhausted(e)
                raise

        return __init__

    def _connect(self, original: Any) -> Any:
        instrumentor = self

        def connect(sock: Any, address: Any) -> Any:
            if not instrumentor.on:
                return original(sock, address)
            try:
                timed = sock.gettimeout() != 0.0 and _peer(address) is not None
            except Exception:
                timed = False
            if not timed:
                return original(sock, address)
            start = clock()
            error = None
            try:
                return original(sock, address)
            except BaseException as e:
                error = error_class(e)
                raise
            finally:
                try:
                    peer = _peer(address) or "?"
                    instrumentor.recorder.network_event(
                        "tcp", "socket", peer, start, clock(), error
                    )
                except Exception:
                    failed("socket.connect")

        return connect

    def _handshake(self, original: Any) -> Any:
        return timed_handshake(self, original, "ssl")


def timed_handshake(instrumentor: Instrumentor, original: Any, library: str) -> Any:
    """``original(sock, ...)`` (a TLS handshake on ``sock``) timed as a ``tls``
    operation; ``sock.server_hostname`` and its peer's port name it."""

    def handshake(sock: Any, *args: Any, **kwargs: Any) -> Any:
        if not instrumentor.on:
            return original(sock, *args, **kwargs)
        recorder = instrumentor.recorder
        start = clock()
        error = None
        recorder.enter_active(start)
        try:
            return original(sock, *args, **kwargs)
        except BaseException as e:
            error = error_class(e)
            raise
        finally:
            end = clock()
            recorder.leave_active(end)
            try:
                name = kwargs.get("server_hostname") or getattr(sock, "server_hostname", None)
                raw = getattr(sock, "socket", sock)  # pyOpenSSL wraps the socket given
                address = raw.getpeername() if hasattr(raw, "getpeername") else None
                port = address[1] if isinstance(address, tuple) else "?"
                host = name if name else (address[0] if isinstance(address, tuple) else "?")
                recorder.network_event("tls", library, f"{host}:{port}", start, end, error)
            except Exception:
                failed(f"{library} handshake")

    return handshake
