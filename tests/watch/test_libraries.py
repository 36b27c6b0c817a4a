"""Each instrumentor against its library and a real server, in this process
(``surge.watch.recording()``): the operations it records, named as the issue
lists them (library, host:port, method and path or SQL verb and table, status),
and nothing left patched afterwards."""

from __future__ import annotations

import asyncio
import http.client
import time
from typing import Any

import pytest
from tests.conftest import require

import surge.watch
from surge.sim import SimInfo
from surge.testing import DBServer


def _ops(rec: surge.watch.Recording, kind: str) -> list[dict[str, Any]]:
    return [op for op in rec.operations() if op["kind"] == kind]


def test_http_client_phases_and_nothing_left_patched(sim: SimInfo) -> None:
    before = http.client.HTTPConnection.putrequest
    with surge.watch.recording() as rec:
        assert http.client.HTTPConnection.putrequest is not before
        conn = http.client.HTTPConnection("127.0.0.1", sim.http_port, timeout=10)
        conn.request("GET", "/a/b?token=s3cr3t")
        response = conn.getresponse()
        body = response.read()
        conn.close()
    assert http.client.HTTPConnection.putrequest is before
    [op] = _ops(rec, "http")
    assert op["library"] == "http.client"
    assert op["peer"] == f"127.0.0.1:{sim.http_port}"
    assert op["what"] == "GET /a/b"
    assert op["status"] == 200 and op["bytes"] == len(body)
    assert {"connect_start", "tcp_end", "sent", "first_byte"} <= set(op["marks"])
    assert op["who"] == "thread 1"
    [tcp] = _ops(rec, "tcp")
    assert tcp["peer"] == f"127.0.0.1:{sim.http_port}"


def test_requests_over_tls(sim: SimInfo) -> None:
    requests = require("requests")
    with surge.watch.recording() as rec, requests.Session() as session:
        for _ in range(3):
            session.get(f"https://localhost:{sim.https_port}/x", verify=sim.cafile, timeout=10)
    ops = _ops(rec, "http")
    assert [op["library"] for op in ops] == ["urllib3"] * 3
    assert len(_ops(rec, "tls")) == 1  # one connection, kept alive
    assert "tls_end" in ops[0]["marks"] and "tls_end" not in ops[1].get("marks", {})
    host = rec.data()["hosts"][f"localhost:{sim.https_port}"]
    assert (host["requests"], host["connects"], host["tls"], host["dns"]) == (3, 1, 1, 1)
    assert rec.data()["names"]["localhost"]["lookups"] == 1


def test_httpx_sync_and_async(sim: SimInfo) -> None:
    httpx = require("httpx")
    url = f"http://127.0.0.1:{sim.http_port}/p?q=1"

    async def fetch() -> None:
        async with httpx.AsyncClient() as client:
            await asyncio.gather(*(client.get(url) for _ in range(4)))

    with surge.watch.recording() as rec:
        with httpx.Client() as client:
            client.get(url)
        asyncio.run(fetch())
    ops = _ops(rec, "http")
    assert len(ops) == 5
    assert {op["library"] for op in ops} == {"httpx"}
    assert {op["what"] for op in ops} == {"GET /p"}
    assert all(op["status"] == 200 for op in ops)
    assert sum("connect_start" in op["marks"] for op in ops) >= 2
    assert {op["who"].split()[0] for op in ops} == {"thread", "task"}


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_aiohttp(loop: str, sim: SimInfo) -> None:
    aiohttp = require("aiohttp")
    new_loop = require("uvloop").new_event_loop if loop == "uvloop" else asyncio.new_event_loop
    url = f"http://127.0.0.1:{sim.http_port}/r?secret=1"

    async def fetch() -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.get(url) as response:
                    await response.read()

    with surge.watch.recording() as rec, asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(fetch())
    ops = _ops(rec, "http")
    assert [(op["library"], op["what"], op["status"]) for op in ops] == [
        ("aiohttp", "GET /r", 200)
    ] * 3
    assert "connect_start" in ops[0]["marks"] and "connect_start" not in ops[1]["marks"]


def test_mysql_drivers(mariadb_server: DBServer) -> None:
    pymysql = require("pymysql")
    mysqldb = require("MySQLdb")
    aiomysql = require("aiomysql")
    s = mariadb_server
    peer = f"{s.host}:{s.port}"

    async def with_aiomysql() -> None:
        conn = await aiomysql.connect(
            host=s.host, port=s.port, user=s.user, password=s.password, db=s.database
        )
        async with conn.cursor() as cur:
            await cur.execute("SELECT %s FROM DUAL", ("x",))
        conn.close()

    with surge.watch.recording() as rec:
        conn = pymysql.connect(
            host=s.host, port=s.port, user=s.user, password=s.password, database=s.database
        )
        with conn.cursor() as cur:
            cur.execute("CREATE TEMPORARY TABLE watched (a INT)")
            cur.execute("INSERT INTO watched VALUES (%s)", (1,))
        conn.close()
        conn = mysqldb.connect(
            host=s.host, port=s.port, user=s.user, password=s.password, database=s.database
        )
        cur = conn.cursor()
        cur.execute("SELECT 1")
        conn.close()
        asyncio.run(with_aiomysql())
    connects = _ops(rec, "db.connect")
    assert [op["library"] for op in connects] == ["pymysql", "mysqlclient", "aiomysql"]
    assert {op["peer"] for op in connects} == {peer}
    assert "connect_start" in connects[0]["marks"]  # the socket floor's TCP, as a phase
    queries = [(op["library"], op["what"]) for op in _ops(rec, "db.query")]
    assert queries == [
        ("pymysql", "CREATE"),
        ("pymysql", "INSERT watched"),
        ("mysqlclient", "SELECT"),
        ("aiomysql", "SELECT DUAL"),
    ]
    assert rec.data()["databases"][peer]["connects"] == 3


def test_psycopg_sync_and_async(postgresql_server: DBServer) -> None:
    psycopg = require("psycopg")
    s = postgresql_server

    async def with_async() -> None:
        async with await psycopg.AsyncConnection.connect(s.url) as conn:
            await conn.execute("SELECT %s", (1,))

    with surge.watch.recording() as rec:
        with psycopg.connect(s.url) as conn:
            conn.execute("SELECT name FROM pg_settings WHERE name = %s", ("port",))
        asyncio.run(with_async())
    connects = _ops(rec, "db.connect")
    assert [(op["library"], op["peer"]) for op in connects] == [
        ("psycopg", f"{s.host}:{s.port}")
    ] * 2
    assert [op["what"] for op in _ops(rec, "db.query")] == ["SELECT pg_settings", "SELECT"]


def test_asyncpg_connects_statements_and_pools(postgresql_server: DBServer) -> None:
    asyncpg = require("asyncpg")
    s = postgresql_server

    async def with_asyncpg() -> None:
        conn = await asyncpg.connect(s.url)
        await conn.execute("CREATE TEMPORARY TABLE watched (a INT)")
        await conn.execute("INSERT INTO watched VALUES ($1)", 1)
        await conn.fetchrow("SELECT a FROM watched WHERE a = $1", 1)
        statement = await conn.prepare("SELECT a FROM watched WHERE a > $1")
        await statement.fetch(0)
        await conn.close()
        async with asyncpg.create_pool(s.url, min_size=2, max_size=2) as pool:
            await pool.fetchval("SELECT 1")

    before = asyncpg.Connection.fetch
    with surge.watch.recording() as rec:
        asyncio.run(with_asyncpg())
    assert asyncpg.Connection.fetch is before
    peer = f"{s.host}:{s.port}"
    connects = _ops(rec, "db.connect")
    assert [(op["library"], op["peer"]) for op in connects] == [("asyncpg", peer)] * 3
    queries = [(op["library"], op["what"]) for op in _ops(rec, "db.query")]
    assert queries == [
        ("asyncpg", "CREATE"),
        ("asyncpg", "INSERT watched"),
        ("asyncpg", "SELECT watched"),
        ("asyncpg", "SELECT watched"),  # prepare
        ("asyncpg", "SELECT watched"),  # the prepared statement's fetch
        ("asyncpg", "SELECT"),  # the pool's fetchval, on its connection
        ("asyncpg", "SELECT"),  # the pool's reset as it takes the connection back
    ]
    assert rec.data()["databases"][peer]["connects"] == 3


def test_redis_sync_and_async(redis_url: str) -> None:
    redis = require("redis")
    redis_asyncio = require("redis.asyncio")

    async def with_async() -> None:
        client = redis_asyncio.Redis.from_url(redis_url)
        await client.set("watched:b", "secret-value")
        async with client.pipeline(transaction=True) as pipe:
            await pipe.get("watched:a").get("watched:b").execute()
        await client.aclose()

    before = redis.Redis.execute_command
    with surge.watch.recording() as rec:
        client = redis.Redis.from_url(redis_url)
        client.set("watched:a", "secret-value")
        for _ in range(3):
            client.get("watched:a")  # one connection, taken from the pool each time
        client.pipeline(transaction=False).get("watched:a").incr("watched:n").execute()
        client.execute_command("SET watched:c secret-value")  # a name with its arguments
        client.close()
        asyncio.run(with_async())
    assert redis.Redis.execute_command is before
    peer = redis_url.split("//")[1].split("/")[0]
    connects = _ops(rec, "db.connect")
    assert [(op["library"], op["peer"]) for op in connects] == [("redis", peer)] * 2
    assert [op["what"] for op in _ops(rec, "db.query")] == [
        "SET",
        "GET",
        "GET",
        "GET",
        "PIPELINE",
        "SET",
        "SET",
        "MULTI",
    ]
    seen = str(rec.data()) + str(rec.operations())
    assert "secret" not in seen.lower() and "watched:" not in seen.lower()


def test_one_recording_at_a_time() -> None:
    with surge.watch.recording(), pytest.raises(RuntimeError, match="already running"):
        surge.watch.recording().__enter__()


def test_a_pymysql_connect_includes_building_its_tls_context(
    mariadb_server: DBServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyMySQL builds an SSLContext in ``Connection.__init__``, before ``connect()``
    (~30 ms here with no TLS options): that is part of what a connect costs."""
    pymysql = require("pymysql")
    build = pymysql.connections.Connection._create_ssl_ctx

    def slow_build(self: Any, sslp: Any) -> Any:
        time.sleep(0.2)  # a costly context: only a lower bound is asserted
        return build(self, sslp)

    monkeypatch.setattr(pymysql.connections.Connection, "_create_ssl_ctx", slow_build)
    s = mariadb_server
    options = {"host": s.host, "port": s.port, "user": s.user, "password": s.password}
    with surge.watch.recording() as rec:
        pymysql.connect(**options).close()
        deferred = pymysql.connect(defer_connect=True, **options)
        deferred.connect()
        deferred.close()
    connects = _ops(rec, "db.connect")
    assert len(connects) == 2  # one each: __init__ (with its connect), and connect()
    assert connects[0]["duration_s"] >= 0.2
