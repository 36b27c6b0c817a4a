"""surge's drop-ins inside httpx and requests (surge.httpx, surge.requests): the
behaviour their own suites do not cover (tests/dropins runs those): threads
sharing one httpx.Client or requests.Session run at once on one pool, with no
pool of 10 and no "Connection pool is full"; every error class has its
library's exception; the phase timings reach the library's response; and
importing a drop-in without its library names the extra to install.

Judged by what the server saw (gate_server.py), never by wall-clock time.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import requests
from tests.http.gate_server import GateServer

import surge.httpx
import surge.requests
from surge.errors import ERROR_CLASSES, RequestError

#: More threads than requests' HTTPAdapter pools by default (10).
THREADS = 16


@pytest.fixture
def server() -> GateServer:
    with GateServer() as gate:
        yield gate  # type: ignore[misc]


def test_threads_sharing_a_session_run_at_once_without_pool_full_warnings(
    server: GateServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Sixteen held requests from sixteen threads are at the server together on
    sixteen connections; a seventeenth is answered while they wait; afterwards
    every connection is kept (no pool of 10 discarding six, no warning)."""
    caplog.set_level(logging.WARNING)
    with requests.Session() as session, ThreadPoolExecutor(THREADS) as pool:
        adapter = surge.requests.Adapter()
        session.mount("http://", adapter)
        held = [pool.submit(session.get, server.url(f"/hold/{n}")) for n in range(THREADS)]
        try:
            assert server.wait_holding(THREADS), server.snapshot()
            assert session.get(server.url("/fast")).text == f"held={THREADS}"
        finally:
            server.release()
        assert [f.result().status_code for f in held] == [200] * THREADS
        assert adapter.client().stats()["idle"] == THREADS + 1
        again = list(pool.map(lambda n: session.get(server.url(f"/again/{n}")), range(THREADS)))
        assert [r.status_code for r in again] == [200] * THREADS
    assert server.connections == THREADS + 1  # the second round reused them all
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]


def test_threads_sharing_an_httpx_client_run_at_once(server: GateServer) -> None:
    transport = surge.httpx.HTTPTransport()
    with httpx.Client(transport=transport) as client, ThreadPoolExecutor(THREADS) as pool:
        held = [pool.submit(client.get, server.url(f"/hold/{n}")) for n in range(THREADS)]
        try:
            assert server.wait_holding(THREADS), server.snapshot()
            assert client.get(server.url("/fast")).text == f"held={THREADS}"
        finally:
            server.release()
        assert [f.result().status_code for f in held] == [200] * THREADS
    assert server.connections == THREADS + 1


def test_the_async_transport_shares_one_pool_between_tasks(server: GateServer) -> None:
    async def main() -> list[int]:
        transport = surge.httpx.AsyncHTTPTransport()
        async with httpx.AsyncClient(transport=transport) as client:
            tasks = [asyncio.ensure_future(client.get(server.url(f"/hold/{n}"))) for n in range(4)]
            while server.held < 4:
                await asyncio.sleep(0.01)
            server.release()
            return [r.status_code for r in await asyncio.gather(*tasks)]

    assert asyncio.run(main()) == [200] * 4
    assert server.connections == 4


def test_phase_timings_reach_the_libraries_responses(server: GateServer) -> None:
    seen = []

    def hook(response: httpx.Response) -> None:
        seen.append(response.extensions["surge_timings"].phases_ms())

    transport = surge.httpx.HTTPTransport()
    with httpx.Client(transport=transport, event_hooks={"response": [hook]}) as client:
        client.get(server.url("/a"))
    assert seen[0]["connect_ms"] is not None and seen[0]["ttfb_ms"] is not None
    with requests.Session() as session:
        session.mount("http://", surge.requests.Adapter())
        response = session.get(server.url("/b"))
    assert response.surge_timings.phases_ms()["ttfb_ms"] is not None  # type: ignore[attr-defined]


@pytest.mark.parametrize("table", [surge.httpx.ERRORS, surge.requests.ERRORS])
def test_every_error_class_has_the_librarys_exception(table: dict[str, object]) -> None:
    assert set(table) == set(ERROR_CLASSES)


@pytest.mark.parametrize(
    ("error_class", "sending", "expected"),
    [
        ("read_timeout", True, httpx.WriteTimeout),
        ("read_timeout", False, httpx.ReadTimeout),
        ("write_timeout", True, httpx.WriteTimeout),
        ("write_timeout", False, httpx.WriteTimeout),
        ("connection_reset", True, httpx.WriteError),
        ("connection_reset", False, httpx.ReadError),
        ("connect_timeout", False, httpx.ConnectTimeout),
        ("dns_error", False, httpx.ConnectError),
        ("protocol_error", False, httpx.RemoteProtocolError),
    ],
)
def test_httpx_exceptions_tell_writing_from_reading(
    error_class: str, sending: bool, expected: type[Exception]
) -> None:
    error = RequestError(error_class, "detail")
    error.sending = sending
    mapped = surge.httpx._error(error)
    assert type(mapped) is expected and mapped.__cause__ is error


def test_a_refused_connection_is_the_librarys_connect_error() -> None:
    with (
        httpx.Client(transport=surge.httpx.HTTPTransport()) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.get("http://127.0.0.1:1/")
    with requests.Session() as session:
        session.mount("http://", surge.requests.Adapter())
        with pytest.raises(requests.ConnectionError):
            session.get("http://127.0.0.1:1/")


@pytest.mark.parametrize(("module", "extra"), [("httpx", "httpx"), ("requests", "requests")])
def test_a_drop_in_without_its_library_names_the_extra(module: str, extra: str) -> None:
    code = f"import sys; sys.modules[{module!r}] = None; import surge.{module}"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert f"[{extra}] extra" in run.stderr.splitlines()[-1]


# -- no surge exception escapes a drop-in ----------------------------------------------------


def _every_surge_exception() -> list[BaseException]:
    """One instance of every exception class surge defines that a request may
    raise: the error taxonomy's (each error class's), and the portal's."""
    import surge.errors as errors
    from surge.http.portal import PortalClosed, PortalForked

    made: list[BaseException] = [RequestError(name, "detail") for name in ERROR_CLASSES]
    for value in vars(errors).values():
        if not (isinstance(value, type) and issubclass(value, errors.SurgeError)):
            continue
        if issubclass(value, RequestError):
            continue  # each made above, by its class name
        if value is errors.S3Error:
            made.append(value("NoSuchKey", "detail", status=404, bucket="b"))
        elif value is errors.HTTPStatusError:
            made.append(value("detail", response=None))
        else:
            made.append(value("detail"))
    made += [PortalClosed("the client was closed while the call ran"), PortalForked("forked")]
    return made


@pytest.mark.parametrize("error", _every_surge_exception(), ids=lambda e: type(e).__name__)
def test_every_surge_exception_is_the_librarys_own_in_a_drop_in(error: BaseException) -> None:
    mapped = surge.httpx._error(error)
    assert type(mapped).__module__.split(".")[0] == "httpx", type(mapped)
    assert isinstance(mapped, httpx.HTTPError | httpx.StreamError | httpx.InvalidURL)
    assert isinstance(error, Exception)
    mapped = surge.requests._error(error, None)
    assert type(mapped).__module__.split(".")[0] == "requests", type(mapped)
    assert isinstance(mapped, requests.RequestException)


def test_closing_a_client_from_another_thread_mid_request_raises_the_librarys_error(
    server: GateServer,
) -> None:
    """A request in flight when another thread closes the client: httpx's
    ReadError (what stock httpx raises: its socket closed under it), requests'
    ConnectionError; never surge.http.portal.PortalClosed.  Then a request
    through the closed transport or adapter: the library's error too."""

    def in_flight(send: Callable[[], object], close: Callable[[], object]) -> BaseException:
        assert server.wait_until(lambda s: s.held == 0)  # the last one's hold is over
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(send)
            assert server.wait_holding(1, timeout=10)
            close()
            error = future.exception(timeout=10)
        assert error is not None
        return error

    transport = surge.httpx.HTTPTransport()
    client = httpx.Client(transport=transport)
    error = in_flight(lambda: client.get(server.url("/hold-a")), client.close)
    assert type(error) is httpx.ReadError, repr(error)
    with pytest.raises(httpx.TransportError):
        transport.handle_request(httpx.Request("GET", server.url("/b")))
    session = requests.Session()
    session.mount("http://", surge.requests.Adapter())
    error = in_flight(lambda: session.get(server.url("/hold-c"), timeout=10), session.close)
    assert type(error) is requests.ConnectionError, repr(error)
