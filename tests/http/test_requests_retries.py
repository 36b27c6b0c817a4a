"""``surge.requests.Adapter(max_retries=...)`` as ``HTTPAdapter(max_retries=...)``:
an int or a urllib3 ``Retry``, honoured as urllib3's urlopen honours it -
``total``, ``status_forcelist`` (with ``raise_on_status``: requests'
RetryError), ``allowed_methods`` (a POST's lost answer is not sent again
unless asked), ``read=False``, backoff and Retry-After.  Every case runs
against stock requests too, on a server that counts what it received.
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter
from tests.http.raw_server import LoopbackServer, read_request
from urllib3.util.retry import Retry

import surge.requests

#: What the server does for each request to a path, in turn (the last repeats):
#: "close" - read the request, close without answering; else a status.
Script = list[str]


class ScriptedServer(LoopbackServer):
    def __init__(self, scripts: dict[str, Script]) -> None:
        self.scripts = scripts
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()
        super().__init__()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(20)
        with sock, contextlib.suppress(OSError):
            request = read_request(sock)
            if request is None:
                return
            path = request[0].split(b" ", 2)[1].decode()
            with self._lock:
                n = self.seen.get(path, 0)
                self.seen[path] = n + 1
            script = self.scripts[path]
            action = script[min(n, len(script) - 1)]
            if action == "close":
                sock.shutdown(socket.SHUT_RDWR)
                return
            extra = b"Retry-After: 0\r\n" if action == "503-after" else b""
            status = action.partition("-")[0].encode()
            sock.sendall(
                b"HTTP/1.1 %s X\r\nContent-Length: 2\r\nConnection: close\r\n%s\r\nok"
                % (status, extra)
            )


SCRIPTS = {
    "/flaky": ["503", "503", "200"],
    "/down": ["503"],
    "/after": ["503-after", "200"],
    "/drop": ["close", "close", "200"],
}


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer(SCRIPTS)
    yield scripted
    scripted.close()


#: (max_retries, method, path) -> what the caller gets, and how many requests
#: the server saw: judged equal for stock requests and surge's adapter.
CASES: list[tuple[Any, str, str]] = [
    (Retry(total=2, status_forcelist=[503], backoff_factor=0), "GET", "/flaky"),
    (Retry(total=1, status_forcelist=[503], backoff_factor=0), "GET", "/flaky"),
    (Retry(total=3, status_forcelist=[503], backoff_factor=0), "GET", "/down"),
    (Retry(total=1, status_forcelist=[503], raise_on_status=False), "GET", "/down"),
    (Retry(total=2, status_forcelist=[503]), "POST", "/flaky"),  # not an allowed method
    (Retry(total=2, status_forcelist=[503], allowed_methods=None), "POST", "/flaky"),
    (Retry(total=2, backoff_factor=0), "GET", "/after"),  # Retry-After on a 503
    (Retry(total=2, status_forcelist=[503], allowed_methods=["PUT"]), "GET", "/flaky"),
    (2, "GET", "/drop"),  # an int: read errors retried for idempotent methods
    (1, "GET", "/drop"),
    (2, "POST", "/drop"),  # at most once: a POST's lost answer is not asked again
    (Retry(total=2, read=False), "GET", "/drop"),
    (0, "GET", "/drop"),
    (Retry(total=2, allowed_methods=None, backoff_factor=0), "POST", "/drop"),  # asked for
]


def _outcome(adapter: Any, server: ScriptedServer, method: str, path: str) -> tuple[Any, int]:
    server.reset()
    with requests.Session() as session:
        session.mount("http://", adapter)
        try:
            response = session.request(method, server.url(path), data=b"x", timeout=10)
            got: Any = response.status_code
        except requests.RequestException as e:
            got = type(e)
    return got, server.seen.get(path, 0)


@pytest.mark.parametrize(("max_retries", "method", "path"), CASES, ids=str)
def test_max_retries_is_honoured_as_httpadapter_honours_it(
    server: ScriptedServer, max_retries: Any, method: str, path: str
) -> None:
    stock = _outcome(HTTPAdapter(max_retries=max_retries), server, method, path)
    ours = _outcome(surge.requests.Adapter(max_retries=max_retries), server, method, path)
    assert ours == stock


def test_the_default_and_an_int_are_requests_own() -> None:
    assert surge.requests.Adapter().max_retries.total == HTTPAdapter().max_retries.total == 0
    assert surge.requests.Adapter().max_retries.read is False
    assert surge.requests.Adapter(max_retries=3).max_retries.total == 3
    kept = pickle.loads(pickle.dumps(surge.requests.Adapter(max_retries=3)))
    assert kept.max_retries.total == 3
