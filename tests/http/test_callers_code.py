"""The caller's own code that a synchronous client runs for a request - an
``auth`` callable, a body's generator, iterator or file (its reads and the
seek of a resend) - runs in the calling thread, never on the event loop that
every thread's requests share: a callback that blocks holds its own request,
not the others'.

One table: every kind of such code, in each synchronous client on surge's
engine (``surge.http.Client``, httpx with ``surge.httpx.HTTPTransport``,
requests with ``surge.requests.Adapter``).  Each callback, once, notes the
thread it runs in and, while it holds its request, has another thread make a
GET on the same client: that GET must complete meanwhile (judged by whether it
came back within a bound meant for a hang, not by its speed).  The body must
still arrive whole (httpbin echoes it).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

import surge.httpx
import surge.requests
from surge.http import Client, Request
from surge.http.portal import PortalClosed

#: The bound on a GET that should take milliseconds (a hang, not a speed).
PATIENCE = 10.0


@dataclass
class Probe:
    """What a callback saw: the threads it ran in, and whether another thread's
    GET on the same client completed while it held its request."""

    other_get: Callable[[], int]
    threads: set[int] = field(default_factory=set)
    others: list[object] = field(default_factory=list)

    def checkpoint(self) -> None:
        self.threads.add(threading.get_ident())
        if self.others:
            return  # once per case is enough
        out: list[object] = []
        thread = threading.Thread(target=lambda: out.append(self.other_get()), daemon=True)
        thread.start()
        thread.join(PATIENCE)
        self.others.append(out[0] if out else "still running")


class SlowFile(io.FileIO):
    """A regular file whose second read, and every seek after a read, is a
    callback's checkpoint (a slow mount, a file behind a lock)."""

    def __init__(self, path: Path, probe: Probe) -> None:
        super().__init__(path, "rb")
        self.probe = probe
        self.reads = 0

    def read(self, size: int = -1, /) -> bytes:
        self.reads += 1
        if self.reads == 2:
            self.probe.checkpoint()
        return super().read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET, /) -> int:
        if self.reads:
            self.probe.checkpoint()
        return super().seek(offset, whence)


class Parts:
    """An iterator object (not a generator) whose second step is a checkpoint."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.left = [b"first;", b"second"]

    def __iter__(self) -> Parts:
        return self

    def __next__(self) -> bytes:
        if not self.left:
            raise StopIteration
        if len(self.left) == 1:
            self.probe.checkpoint()
        return self.left.pop(0)


def generator(probe: Probe) -> Iterator[bytes]:
    yield b"first;"
    probe.checkpoint()
    yield b"second"


@dataclass
class Sender:
    """One synchronous client: a POST (body, auth, redirects followed or not)
    and a GET, each giving what httpbin said."""

    post: Callable[..., Any]
    get: Callable[[str], int]


@contextmanager
def sender(kind: str) -> Iterator[Sender]:
    if kind in ("surge", "surge-stream"):
        with Client(max_time=60, follow_redirects=True) as client:

            def post(url: str, body: Any, auth: Any = None) -> Any:
                if kind == "surge":
                    return client.post(url, content=body, auth=auth).json()
                with client.stream("POST", url, content=body, auth=auth) as response:
                    return json.loads(response.read())

            yield Sender(post, lambda url: client.get(url).status_code)
    elif kind == "httpx":
        with httpx.Client(transport=surge.httpx.HTTPTransport(), timeout=60) as hclient:

            def hpost(url: str, body: Any, auth: Any = None) -> Any:
                assert auth is None
                return hclient.post(url, content=body).json()

            yield Sender(hpost, lambda url: hclient.get(url).status_code)
    else:
        with requests.Session() as session:
            session.mount("http://", surge.requests.Adapter())

            def rpost(url: str, body: Any, auth: Any = None) -> Any:
                assert auth is None
                return session.post(url, data=body, timeout=60).json()

            yield Sender(rpost, lambda url: session.get(url, timeout=60).status_code)


def body_for(case: str, probe: Probe, tmp_path: Path) -> tuple[Any, str]:
    """The body of a case, and the text httpbin should echo."""
    if case == "generator":
        return generator(probe), "first;second"
    if case == "iterator":
        return Parts(probe), "first;second"
    path = tmp_path / "body.bin"
    if case == "file-resent":
        # Under 64 KiB: httpbin's redirect-to answers without reading the body,
        # and gunicorn drains at most 64 KiB of an unread body before it closes
        # the connection after its 307 (no "Connection: close" said), a close
        # that a loaded machine let the next POST meet.  The seek back and the
        # second hop's read are the checkpoints here.
        path.write_bytes(b"0123456789" * 6_000)
    else:
        path.write_bytes(b"0123456789" * 20_000)  # 200 KB: several reads
    return SlowFile(path, probe), path.read_text()


CASES = [
    ("surge", "auth"),
    ("surge", "generator"),
    ("surge", "iterator"),
    ("surge", "file"),
    ("surge", "file-resent"),  # a 307: the file's seek back, then its reads again
    ("surge-stream", "auth"),  # client.stream(): the same
    ("surge-stream", "generator"),
    ("httpx", "generator"),
    ("httpx", "iterator"),
    ("httpx", "file"),
    ("requests", "generator"),
    ("requests", "iterator"),
    ("requests", "file"),
]


@pytest.mark.parametrize(("client", "case"), CASES)
def test_the_callers_code_runs_in_the_calling_thread(
    httpbin: str, tmp_path: Path, client: str, case: str
) -> None:
    with sender(client) as send:
        probe = Probe(lambda: send.get(f"{httpbin}/status/204"))
        url = f"{httpbin}/anything"
        auth = None
        if case == "auth":

            def sign(request: Request) -> None:
                probe.checkpoint()
                request.headers["Authorization"] = "Bearer t"

            body: Any
            body, expected, auth = b"plain", "plain", sign
        else:
            body, expected = body_for(case, probe, tmp_path)
        if case == "file-resent":
            url = f"{httpbin}/redirect-to?url=/anything&status_code=307"
            body.reads = 0  # the checkpoints: the seek back, and the second hop's read
        echoed = send.post(url, body, auth)
        if isinstance(body, io.IOBase):
            body.close()
    assert probe.threads == {threading.get_ident()}, "the caller's code ran in another thread"
    assert probe.others == [204], "another thread's GET waited for this request's callback"
    assert echoed["data"] == expected
    if case == "auth":
        assert echoed["headers"]["Authorization"] == "Bearer t"


def test_closing_the_client_from_the_callers_code_ends_its_request(httpbin: str) -> None:
    """The body's generator closes the client (from the calling thread, where
    it runs): the request ends with PortalClosed, nothing waits for ever."""
    client = Client(max_time=30)

    def body() -> Iterator[bytes]:
        yield b"x"
        client.close()
        yield b"y"

    outcome: list[object] = []

    def post() -> None:
        try:
            client.post(f"{httpbin}/anything", content=body())
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    thread.join(PATIENCE)
    assert len(outcome) == 1 and isinstance(outcome[0], PortalClosed), outcome


def test_a_body_that_fails_fails_its_request_alone(httpbin: str) -> None:
    """An exception in the caller's generator is its request's (raised to the
    caller as it is), a KeyboardInterrupt too; the client goes on, its
    connections accounted for."""

    def broken(error: BaseException) -> Iterator[bytes]:
        yield b"x"
        raise error

    with Client(max_time=30) as client:
        with pytest.raises(ValueError, match="disk on fire"):
            client.post(f"{httpbin}/anything", content=broken(ValueError("disk on fire")))
        with pytest.raises(KeyboardInterrupt):
            client.post(f"{httpbin}/anything", content=broken(KeyboardInterrupt()))
        assert client.get(f"{httpbin}/status/204").status_code == 204
        assert client.stats()["in_use"] == 0
