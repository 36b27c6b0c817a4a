"""A keep-alive HTTP/1.1 server on 127.0.0.1, a thread per connection, that holds
the requests it is told to and records what it saw: the evidence the tests of
threads sharing one client judge by (which requests were in flight together,
on how many connections), instead of wall-clock times.

Paths: ``/hold...`` waits until :meth:`GateServer.release` (or a safety bound)
before it answers; anything else is answered at once.  Every answer's body
says how many held requests were still waiting when it was sent.

Imported by the tests, and by the scripts they run in child processes (from
this directory, by path): it uses nothing but the standard library.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable
from typing import Any

#: A held request is answered after this long even if never released: a test
#: that fails must not leave a thread waiting for ever.
SAFETY_S = 20.0


class GateServer:
    """``with GateServer() as server``: ``server.url(path)``, ``wait_holding(n)``,
    ``release()``, and the counts: ``connections``, ``max_connections_open``,
    ``max_held``, ``answers`` (path, held-while-answered, connection number)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._release = threading.Event()
        self.connections = 0  # accepted
        self.open = 0
        self.max_connections_open = 0
        self.held = 0  # requests waiting at the gate now
        self.max_held = 0
        self.answers: list[tuple[str, int, int]] = []
        self.closed_while_held = 0  # held requests whose client went away
        gate = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                gate._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> GateServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        self._release.set()

    def wait_until(self, predicate: Callable[[GateServer], bool], timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def wait_holding(self, count: int, timeout: float = 10.0) -> bool:
        """Whether ``count`` requests were held at once within ``timeout``."""
        return self.wait_until(lambda s: s.held >= count, timeout)

    def _changed(self, **deltas: int) -> None:
        with self._cond:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)
            self.max_connections_open = max(self.max_connections_open, self.open)
            self.max_held = max(self.max_held, self.held)
            self._cond.notify_all()

    def _serve(self, sock: socket.socket) -> None:
        with self._cond:
            self.connections += 1
            number = self.connections
        self._changed(open=1)
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                if path.startswith("/hold"):
                    self._changed(held=1)
                    gone = False
                    try:
                        gone = self._hold(sock)
                    finally:
                        # One change under the lock: a test that waits for the
                        # close never sees it while the request still counts as held.
                        self._changed(held=-1, closed_while_held=int(gone))
                    if gone:
                        return
                with self._cond:
                    waiting = self.held
                    self.answers.append((path, waiting, number))
                    self._cond.notify_all()
                body = b"held=%d" % waiting
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            return
        finally:
            sock.close()
            self._changed(open=-1)

    def _hold(self, sock: socket.socket) -> bool:
        """Wait for the release; whether the client closed meanwhile."""
        waited = 0.0
        while not self._release.wait(0.05):
            waited += 0.05
            if waited > SAFETY_S:
                return False
            try:
                sock.setblocking(False)
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        return True
                except BlockingIOError:
                    pass
            finally:
                sock.setblocking(True)
        return False

    def paths_answered(self) -> list[str]:
        with self._cond:
            return [path for path, _, _ in self.answers]

    def answer(self, path: str) -> tuple[str, int, int] | None:
        with self._cond:
            return next((a for a in self.answers if a[0] == path), None)

    def snapshot(self) -> dict[str, Any]:
        with self._cond:
            return {
                "connections": self.connections,
                "max_connections_open": self.max_connections_open,
                "max_held": self.max_held,
                "held": self.held,
            }
