"""At most once: a request that is not idempotent (RFC 9110, section 9.2.2) is
never sent again unasked once a byte of it was written - whatever the
connection does - under every front end: surge's Client and AsyncClient,
``surge fetch`` (``-d``), the httpx transports and the requests adapter.
GET, HEAD, PUT, DELETE and OPTIONS keep the stale-connection retry.

The scenario: a keep-alive connection is reused, and the server reads the
request whole, then closes without answering (DroppingServer).  Judged by
what the server counted and what the caller got; stock httpx and requests, on
the same scenario, give the reference exception types.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from tests.http.raw_server import DroppingServer

import surge.httpx
import surge.requests
from surge.errors import RequestError
from surge.http import AsyncClient, Client

NOT_IDEMPOTENT = ("POST", "PATCH")
IDEMPOTENT = ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")
WITH_BODY = {"POST", "PATCH", "PUT"}


@pytest.fixture
def server() -> Iterator[DroppingServer]:
    dropping = DroppingServer()
    yield dropping
    dropping.close()


def _body(method: str) -> bytes | None:
    return b"data=1" if method in WITH_BODY else None


# Each front end: warm a connection with GET /warm, then send METHOD /x on it.
# Returns ("ok", status) or ("error", the exception).


def _surge_async(server: DroppingServer, method: str) -> tuple[str, Any]:
    async def run() -> tuple[str, Any]:
        async with AsyncClient(max_time=10) as client:
            assert (await client.get(server.url("/warm"))).status == 200
            try:
                response = await client.request(method, server.url("/x"), body=_body(method))
            except RequestError as e:
                return "error", e
            return "ok", response.status

    return asyncio.run(run())


def _surge_sync(server: DroppingServer, method: str) -> tuple[str, Any]:
    with Client(max_time=10) as client:
        assert client.get(server.url("/warm")).status == 200
        try:
            response = client.request(method, server.url("/x"), body=_body(method))
        except RequestError as e:
            return "error", e
        return "ok", response.status


def _httpx_sync(server: DroppingServer, method: str, transport: Any = None) -> tuple[str, Any]:
    with httpx.Client(transport=transport, timeout=10) as client:
        assert client.get(server.url("/warm")).status_code == 200
        try:
            response = client.request(method, server.url("/x"), content=_body(method))
        except httpx.HTTPError as e:
            return "error", e
        return "ok", response.status_code


def _httpx_async(server: DroppingServer, method: str, transport: Any = None) -> tuple[str, Any]:
    async def run() -> tuple[str, Any]:
        async with httpx.AsyncClient(transport=transport, timeout=10) as client:
            assert (await client.get(server.url("/warm"))).status_code == 200
            try:
                response = await client.request(method, server.url("/x"), content=_body(method))
            except httpx.HTTPError as e:
                return "error", e
            return "ok", response.status_code

    return asyncio.run(run())


def _requests(server: DroppingServer, method: str, adapter: Any = None) -> tuple[str, Any]:
    with requests.Session() as session:
        if adapter is not None:
            session.mount("http://", adapter)
        assert session.get(server.url("/warm"), timeout=10).status_code == 200
        try:
            response = session.request(method, server.url("/x"), data=_body(method), timeout=10)
        except requests.RequestException as e:
            return "error", e
        return "ok", response.status_code


def _fetch(server: DroppingServer, tmp: Path, *flags: str) -> dict[str, Any]:
    """``surge fetch`` of /warm then /x, one at a time: the record of /x."""
    inputs = tmp / "urls.txt"
    inputs.write_text(f"{server.url('/warm')}\n{server.url('/x')}\n")
    command = [sys.executable, "-m", "surge.cli", "fetch", str(inputs), "-c", "1", *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    records = {r["url"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert records[server.url("/warm")]["status"] == 200
    return records[server.url("/x")]


def _fetch_cli(server: DroppingServer, method: str, tmp: Path) -> tuple[str, Any]:
    body = ["-d", "data=1"] if _body(method) is not None else []
    record = _fetch(server, tmp, "-X", method, *body)
    if record["error"] is not None:
        return "error", record
    return "ok", record["status"]


def _surge_error(outcome: Any) -> bool:
    return isinstance(outcome, RequestError) and outcome.error_class == "connection_reset"


FRONT_ENDS: dict[str, tuple[Callable[..., tuple[str, Any]], Callable[[Any], bool]]] = {
    "AsyncClient": (_surge_async, _surge_error),
    "Client": (_surge_sync, _surge_error),
    "httpx HTTPTransport": (
        lambda s, m, _: _httpx_sync(s, m, surge.httpx.HTTPTransport()),
        lambda e: type(e) is httpx.RemoteProtocolError,
    ),
    "httpx AsyncHTTPTransport": (
        lambda s, m, _: _httpx_async(s, m, surge.httpx.AsyncHTTPTransport()),
        lambda e: type(e) is httpx.RemoteProtocolError,
    ),
    "requests Adapter": (
        lambda s, m, _: _requests(s, m, surge.requests.Adapter()),
        lambda e: type(e) is requests.ConnectionError,
    ),
    "surge fetch": (_fetch_cli, lambda r: r["error"] == "connection_reset"),
}


def _run(name: str, server: DroppingServer, method: str, tmp: Path) -> tuple[str, Any]:
    front_end = FRONT_ENDS[name][0]
    if name in ("AsyncClient", "Client"):
        return front_end(server, method)
    return front_end(server, method, tmp)


@pytest.mark.parametrize("method", NOT_IDEMPOTENT)
@pytest.mark.parametrize("front_end", list(FRONT_ENDS))
def test_a_request_that_is_not_idempotent_is_sent_once(
    server: DroppingServer, front_end: str, method: str, tmp_path: Path
) -> None:
    kind, outcome = _run(front_end, server, method, tmp_path)
    assert server.count(method, "/x") == 1  # processed once, answer lost: never again
    assert kind == "error", outcome
    assert FRONT_ENDS[front_end][1](outcome), repr(outcome)


@pytest.mark.parametrize("method", IDEMPOTENT)
@pytest.mark.parametrize("front_end", list(FRONT_ENDS))
def test_an_idempotent_request_is_sent_again_once_and_succeeds(
    server: DroppingServer, front_end: str, method: str, tmp_path: Path
) -> None:
    kind, outcome = _run(front_end, server, method, tmp_path)
    assert (kind, outcome) == ("ok", 200)
    assert server.count(method, "/x") == 2  # the lost one, and once more afresh
    assert server.connections == 2


def test_retries_do_not_send_a_post_again_after_a_reset_once_sent(
    server: DroppingServer, tmp_path: Path
) -> None:
    """``--retries`` retries a POST after a status or a failure to connect,
    never after the server had it whole and closed unanswered (docs/fetch.md):
    the server may have acted on it."""
    record = _fetch(server, tmp_path, "-d", "a=1", "--retries", "1")
    assert (record["status"], record["error"], record["attempts"]) == (None, "connection_reset", 1)
    assert server.count("POST", "/x") == 1


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_the_first_request_on_a_connection_is_never_sent_again(method: str) -> None:
    """Not a reused connection gone stale: the server had the request on a
    connection nothing else used (a new one, or a CONNECT-ed tunnel's first)."""
    dropping = DroppingServer(drop=0)
    try:
        with Client(max_time=10) as client, pytest.raises(RequestError) as caught:
            client.request(method, dropping.url("/x"), body=_body(method))
        assert caught.value.error_class == "connection_reset"
        assert dropping.count(method, "/x") == 1 and dropping.connections == 1
    finally:
        dropping.close()


# -- the reference: stock httpx and requests on the same scenario ------------------------


@pytest.mark.parametrize("method", NOT_IDEMPOTENT)
def test_stock_httpx_raises_remote_protocol_error(server: DroppingServer, method: str) -> None:
    kind, error = _httpx_sync(server, method)
    assert kind == "error" and type(error) is httpx.RemoteProtocolError
    assert str(error) == "Server disconnected without sending a response."
    assert server.count(method, "/x") == 1
    kind, error = _httpx_async(server, method)
    assert kind == "error" and type(error) is httpx.RemoteProtocolError


@pytest.mark.parametrize("method", NOT_IDEMPOTENT)
def test_stock_requests_raises_connection_error(server: DroppingServer, method: str) -> None:
    kind, error = _requests(server, method)
    assert kind == "error" and type(error) is requests.ConnectionError
    assert server.count(method, "/x") == 1
