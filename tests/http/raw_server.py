"""A hostile server on 127.0.0.1 that answers ``GET /NAME`` with exact bytes
given for NAME - what nginx would never send - for surge and curl alike.

Used by tests/http's conformance and coding-layer tests; standard library only.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class RawServer:
    """A server on 127.0.0.1 that answers ``GET /NAME`` with ``answers[NAME]``,
    byte for byte, then closes the connection, or (``hold``) keeps it open
    and silent: what nginx would never send, for surge and curl alike."""

    def __init__(self, answers: dict[str, bytes], hold: frozenset[str] = frozenset()) -> None:
        self.answers = answers
        self.hold = hold
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

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
            sock.sendall(self.answers[name])
            if name in self.hold:
                sock.settimeout(20)
                with contextlib.suppress(OSError):
                    sock.recv(1)  # until the client gives up (or 20 s)

    def close(self) -> None:
        self._stop = True
        self._listener.close()


def chunked(body: bytes, size: int = 7) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
