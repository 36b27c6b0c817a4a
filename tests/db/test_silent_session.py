"""A session that goes silent after its return is cut and replaced within the
pool's timeout, whatever the driver, wherever the checkout meets the silence.

The server itself stays up: a TCP proxy on loopback between the pool and the
server stops forwarding the connections it carries at the moment of the
return (a half-dead NAT entry, a partition of one flow), while new ones flow.
The checkout must then hand out a working connection - a new one: the silent
one discarded - rather than wait on the silent one (PyMySQL: still waiting 8 s
after an acquire with ``timeout=3``, reading a ping's answer with no limit).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from tests.conftest import require
from tests.db._sql import query

import surge.db
from surge.testing import DBServer

TIMEOUT = 3.0


class FreezingProxy:
    """Forwards TCP to ``upstream``; ``freeze()`` stops forwarding (in both
    directions, connections kept open) every connection it carries now."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flows: list[dict[str, Any]] = []
        self.opened = 0
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:  # the server is going away: so does this connection
                client.close()
                continue
            flow = {"socks": (client, server), "frozen": False}
            self.flows.append(flow)
            self.opened += 1
            threading.Thread(target=self._pump, args=(flow,), daemon=True).start()

    def _pump(self, flow: dict[str, Any]) -> None:
        client, server = flow["socks"]
        peer = {client: server, server: client}
        while not self.closing:
            if flow["frozen"]:
                time.sleep(0.02)
                continue
            try:  # close() closes the sockets under this thread: then it ends
                ready, _, _ = select.select([client, server], [], [], 0.02)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peer[sock].sendall(data)
            except (OSError, ValueError):
                return

    def freeze(self) -> None:
        for flow in self.flows:
            flow["frozen"] = True

    def close(self) -> None:
        self.closing = True
        self.listener.close()
        for flow in self.flows:
            for sock in flow["socks"]:
                with contextlib.suppress(OSError):
                    sock.close()


@pytest.fixture
def proxied(request: pytest.FixtureRequest) -> Iterator[tuple[str, FreezingProxy, dict[str, Any]]]:
    driver = request.param
    server: DBServer = request.getfixturevalue(
        "postgresql_server" if driver == "psycopg" else "mariadb_server"
    )
    if driver == "mysqlclient":
        require("MySQLdb")
    proxy = FreezingProxy((server.host, server.port))
    parts = urlsplit(server.url)
    netloc = parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{proxy.port}"
    url = urlunsplit(parts._replace(netloc=netloc))
    try:
        yield url, proxy, ({"driver": driver} if driver != "psycopg" else {})
    finally:
        proxy.close()


def bounded(fn: Any, within: float) -> Any:
    """``fn()`` in a thread, given ``within`` seconds (a generous bound that keeps a
    hang from hanging the test): its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as error:
            out.append(("raised", error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert out, f"still waiting {within} s later (the pool's timeout is {TIMEOUT} s)"
    return out[0]


DRIVERS = ["pymysql", "mysqlclient", "psycopg"]


@pytest.mark.parametrize("proxied", DRIVERS, indirect=True)
@pytest.mark.parametrize(
    "silent",
    [
        "before its reset was answered",  # the checkout reads the reset's answers
        "after its reset was answered",  # the checkout pings (idle past check_idle_after)
    ],
)
def test_a_session_silent_after_its_return_is_replaced_at_checkout(
    proxied: tuple[str, FreezingProxy, dict[str, Any]], silent: str
) -> None:
    url, proxy, options = proxied
    pool = surge.db.pool(url, max_size=1, timeout=TIMEOUT, check_idle_after=0.5, **options)
    try:
        with pool.connection() as conn:
            query(conn, "SELECT 1")  # a session used: its reset is written at return
        if silent == "before its reset was answered":
            proxy.freeze()
            time.sleep(0.2)  # past SOCKET_CHECK_AFTER: the checkout reads the answers
        else:
            time.sleep(0.2)  # the reset written and answered
            proxy.freeze()
            time.sleep(0.5)  # past check_idle_after: the checkout pings
        outcome, conn = bounded(pool.acquire, within=4 * TIMEOUT)
        assert outcome == "ok", conn
        try:
            assert query(conn, "SELECT 6 * 7") == [(42,)]
        finally:
            pool.release(conn)
        assert proxy.opened == 2, "the silent connection was replaced by one new one"
        stats = pool.stats()
        assert stats["discarded"] == 1 and stats["open"] == 1 and stats["in_use"] == 0
    finally:
        pool.close()


@pytest.mark.parametrize("proxied", ["pymysql"], indirect=True)
def test_a_session_silent_before_its_next_command_fails_it_within_the_timeout(
    proxied: tuple[str, FreezingProxy, dict[str, Any]],
) -> None:
    """Checked out again at once, the connection goes out unchecked (its reset's
    answers are read behind the next command, see surge.db._session): the silence
    is met by that command, which must fail within the pool's timeout as the
    connection's end (so that the pool drops it), and the next checkout works."""
    url, proxy, options = proxied
    pool = surge.db.pool(url, max_size=1, timeout=TIMEOUT, **options)
    try:
        with pool.connection() as conn:
            query(conn, "SELECT 1")
        proxy.freeze()

        def use() -> Any:
            with pool.connection() as conn:
                return query(conn, "SELECT 2")

        outcome, error = bounded(use, within=4 * TIMEOUT)
        assert outcome == "raised" and pool.driver.is_disconnect(error, None), error
        outcome, rows = bounded(use, within=4 * TIMEOUT)
        assert (outcome, rows) == ("ok", [(2,)])
        assert proxy.opened == 2
    finally:
        pool.close()
