"""A hostile server on 127.0.0.1 that answers ``GET /NAME`` with exact bytes
given for NAME - what nginx would never send - for surge and curl alike.

Used by tests/http's conformance and coding-layer tests; standard library only.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class LoopbackServer:
    """A listener on 127.0.0.1 (port 0), with a thread per connection that runs
    :meth:`_serve` on it; :meth:`close` stops accepting."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self._accepted()
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _accepted(self) -> None:
        """Called for each connection, before it is served."""

    def _serve(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop = True
        self._listener.close()


def read_request(sock: socket.socket, buffer: bytes = b"") -> tuple[bytes, bytes] | None:
    """The next request's head (without its blank line) read from ``sock``,
    its body read and dropped (Content-Length or chunked), and what came after
    it; None if the client closed first.  ``buffer``: bytes already read."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        elif name.strip().lower() == b"transfer-encoding":
            chunked = True
    if chunked:  # read up to the last chunk
        while b"0\r\n\r\n" not in rest:
            data = sock.recv(65536)
            if not data:
                return None
            rest += data
        return head, rest[rest.index(b"0\r\n\r\n") + 5 :]
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            return None
        rest += data
    return head, rest[length:]


class RawServer(LoopbackServer):
    """A server on 127.0.0.1 that answers ``GET /NAME`` with ``answers[NAME]``
    (or ``default``), byte for byte, then closes the connection, or (``hold``)
    keeps it open and silent: what nginx would never send, for surge and curl
    alike.  ``requests``: the heads it received, in order."""

    def __init__(
        self,
        answers: dict[str, bytes],
        hold: frozenset[str] = frozenset(),
        default: bytes | None = None,
    ) -> None:
        self.answers = answers
        self.hold = hold
        self.default = default  # the answer to a NAME not in answers (None: none)
        self.requests: list[bytes] = []
        super().__init__()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            head = b""
            while b"\r\n\r\n" not in head:
                data = sock.recv(65536)
                if not data:
                    return
                head += data
            self.requests.append(head)
            name = head.split(b" ", 2)[1].decode().lstrip("/").partition("?")[0]
            answer = self.answers.get(name, self.default)
            if answer is None:
                return
            sock.sendall(answer)
            if name in self.hold:
                sock.settimeout(20)
                with contextlib.suppress(OSError):
                    sock.recv(1)  # until the client gives up (or 20 s)


def chunked(body: bytes, size: int = 7) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


class DroppingServer(LoopbackServer):
    """A keep-alive server on 127.0.0.1 that reads each request whole (head and
    Content-Length body) and counts it by (method, path), answers the first
    request of each connection (``200``, ``ok``, kept alive), and closes the
    connection - cleanly, everything read - after reading the second, without
    answering: the server that processed a request on a reused connection and
    went away before its answer."""

    def __init__(self, drop: int = 1) -> None:
        self.drop = drop  # which request of each connection is dropped (0: the first)
        self.seen: dict[tuple[str, str], int] = {}
        self.connections = 0
        self._lock = threading.Lock()
        super().__init__()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def count(self, method: str, path: str) -> int:
        with self._lock:
            return self.seen.get((method, path), 0)

    def _accepted(self) -> None:
        with self._lock:
            self.connections += 1

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(20)
        with sock, contextlib.suppress(OSError):
            buffer = b""
            for n in range(self.drop + 1):
                request = read_request(sock, buffer)
                if request is None:
                    return
                head, buffer = request
                method, path = head.split(b" ", 2)[:2]
                key = (method.decode(), path.decode())
                with self._lock:
                    self.seen[key] = self.seen.get(key, 0) + 1
                if n == self.drop:  # processed, and gone without a word
                    sock.shutdown(socket.SHUT_RDWR)
                    return
                body = b"" if method == b"HEAD" else b"ok"
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\n"
                    + body
                )
