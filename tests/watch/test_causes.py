"""Causes by what happens on the wire, not by which API made it: each cause in
three disguises, each beside its fixed twin (which must get no finding at all),
recorded in this process against real servers on loopback."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import aiomysql
import asyncpg
import httpx
import psycopg
import pymysql
import pytest
import redis
import requests
import sqlalchemy
from sqlalchemy.pool import NullPool

import surge.db
from surge.sim import SimInfo
from surge.testing.servers import DBServer
from surge.watch import recording

N = 12  # above every count threshold (10), small enough to stay fast
PARALLEL = 4


# -- connect-per-query: a connect for each query, whatever made the connection ------
def _pymysql(db: DBServer) -> dict[str, Any]:
    return {
        "host": db.host,
        "port": db.port,
        "user": db.user,
        "password": db.password,
        "database": db.database,
    }


def _sqlalchemy_url(db: DBServer) -> str:
    return sqlalchemy.engine.URL.create(
        "mysql+pymysql", db.user, db.password, db.host, db.port, db.database
    ).render_as_string(hide_password=False)


def _with_set(engine: sqlalchemy.Engine) -> sqlalchemy.Engine:
    @sqlalchemy.event.listens_for(engine, "connect")
    def session_setup(dbapi_connection: Any, record: Any) -> None:
        with dbapi_connection.cursor() as cursor:  # a SET on every new connection
            cursor.execute("SET SESSION sql_mode = 'ANSI_QUOTES'")

    return engine


def pymysql_per_query(db: DBServer) -> None:
    for i in range(N):
        conn = pymysql.connect(**_pymysql(db))
        with conn.cursor() as cur:
            cur.execute("SELECT %s", (i,))
        conn.close()


def pymysql_one_connection(db: DBServer) -> None:
    conn = pymysql.connect(**_pymysql(db))
    for i in range(N):
        with conn.cursor() as cur:
            cur.execute("SELECT %s", (i,))
    conn.close()


def nullpool_with_set(db: DBServer) -> None:
    engine = _with_set(sqlalchemy.create_engine(_sqlalchemy_url(db), poolclass=NullPool))
    for i in range(N):
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT :i"), {"i": i})
    engine.dispose()


def queuepool_with_set(db: DBServer) -> None:
    engine = _with_set(sqlalchemy.create_engine(_sqlalchemy_url(db)))
    for i in range(N):
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT :i"), {"i": i})
    engine.dispose()


def engine_per_request(db: DBServer) -> None:
    for i in range(N):
        engine = sqlalchemy.create_engine(_sqlalchemy_url(db))
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT :i"), {"i": i})
        engine.dispose()


def asyncpg_per_query(db: DBServer) -> None:
    async def main() -> None:
        for i in range(N):
            conn = await asyncpg.connect(db.url)
            await conn.fetchval("SELECT $1::int", i)
            await conn.close()

    asyncio.run(main())


def asyncpg_pool(db: DBServer) -> None:
    async def main() -> None:
        async with asyncpg.create_pool(db.url, min_size=1, max_size=2) as pool:
            for i in range(N):
                await pool.fetchval("SELECT $1::int", i)

    asyncio.run(main())


POOL = 16  # connections a pool opens, each running a few of the queries
PER_TASK = 5


def asyncpg_wide_pool(db: DBServer) -> None:
    async def main() -> None:
        async with asyncpg.create_pool(db.url, min_size=POOL, max_size=POOL) as pool:

            async def task(t: int) -> None:
                for i in range(PER_TASK):
                    await pool.fetchval("SELECT $1::int", t * PER_TASK + i)

            await asyncio.gather(*(task(t) for t in range(POOL)))

    asyncio.run(main())


def _surge_wide_pool(db: DBServer, **options: Any) -> None:
    """surge's asyncio pool of 16, 16 tasks of 5 queries each (psycopg's,
    aiomysql's or asyncpg's connections)."""

    async def query(conn: Any, i: int) -> None:
        if hasattr(conn, "fetchval"):  # asyncpg
            await conn.fetchval("SELECT $1::int", i)
        elif hasattr(conn, "execute"):  # psycopg
            await conn.execute("SELECT %s", (i,))
        else:  # aiomysql
            async with conn.cursor() as cur:
                await cur.execute("SELECT %s", (i,))

    async def main() -> None:
        async with surge.db.async_pool(db.url, max_size=POOL, **options) as pool:

            async def task(t: int) -> None:
                for i in range(PER_TASK):
                    async with pool.connection() as conn:
                        await query(conn, t * PER_TASK + i)

            await asyncio.gather(*(task(t) for t in range(POOL)))

    asyncio.run(main())


def surge_asyncpg_wide_pool(db: DBServer) -> None:
    _surge_wide_pool(db, driver="asyncpg")


def surge_psycopg_wide_pool(db: DBServer) -> None:
    _surge_wide_pool(db)


def surge_aiomysql_wide_pool(db: DBServer) -> None:
    _surge_wide_pool(db)


def surge_pymysql_wide_pool(db: DBServer) -> None:
    with surge.db.pool(db.url, max_size=POOL) as pool:

        def task(t: int) -> None:
            for i in range(PER_TASK):
                with pool.connection() as conn, conn.cursor() as cur:
                    cur.execute("SELECT %s", (t * PER_TASK + i,))

        with ThreadPoolExecutor(POOL) as threads:
            list(threads.map(task, range(POOL)))


def psycopg_per_query(db: DBServer) -> None:
    async def main() -> None:
        for i in range(N):
            async with await psycopg.AsyncConnection.connect(db.url) as conn:
                await conn.execute("SELECT %s", (i,))

    asyncio.run(main())


def aiomysql_per_query(db: DBServer) -> None:
    async def main() -> None:
        for i in range(N):
            conn = await aiomysql.connect(
                host=db.host, port=db.port, user=db.user, password=db.password, db=db.database
            )
            async with conn.cursor() as cur:
                await cur.execute("SELECT %s", (i,))
            conn.close()

    asyncio.run(main())


def redis_client_per_call(url: str) -> None:
    for i in range(N):
        client = redis.Redis.from_url(url)  # a pool of its own, each time
        client.get(f"item:{i}")
        client.close()


def redis_one_client(url: str) -> None:
    client = redis.Redis.from_url(url)
    for i in range(N):
        client.get(f"item:{i}")
    client.close()


# -- n-plus-one: a query, then one more per row it returned -------------------------
ROWS = 60  # x ~1 ms each: past the 50 ms the finding asks of the repeats
ITEMS = f"SELECT seq FROM seq_1_to_{ROWS}"  # MariaDB's sequence engine: rows without a table


def per_row_parameters(db: DBServer) -> None:
    conn = pymysql.connect(**_pymysql(db))
    with conn.cursor() as cur:
        cur.execute(ITEMS)
        for (seq,) in cur.fetchall():
            cur.execute("SELECT SLEEP(0.001), %s", (seq,))  # the values as parameters
    conn.close()


def per_row_formatted(db: DBServer) -> None:
    conn = pymysql.connect(**_pymysql(db))
    with conn.cursor() as cur:
        cur.execute(ITEMS)
        for (seq,) in cur.fetchall():
            cur.execute(f"SELECT SLEEP(0.001), {seq} AS seq")  # the values in the text
    conn.close()


def per_row_sqlalchemy(db: DBServer) -> None:
    engine = sqlalchemy.create_engine(_sqlalchemy_url(db))
    with engine.connect() as conn:
        for seq in conn.execute(sqlalchemy.text(ITEMS)).scalars().all():
            conn.execute(sqlalchemy.text("SELECT SLEEP(0.001), :seq"), {"seq": seq})
    engine.dispose()


def one_query(db: DBServer) -> None:
    conn = pymysql.connect(**_pymysql(db))
    with conn.cursor() as cur:
        cur.execute(ITEMS)
        seqs = [seq for (seq,) in cur.fetchall()]
        cur.execute(f"SELECT SLEEP(0.001), seq FROM seq_1_to_{ROWS} WHERE seq IN %s", (seqs,))
    conn.close()


def per_row_asyncpg(db: DBServer) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(db.url)
        for (seq,) in await conn.fetch(f"SELECT generate_series(1, {ROWS})"):
            await conn.fetchrow("SELECT pg_sleep(0.001), $1::int", seq)
        await conn.close()

    asyncio.run(main())


def one_query_asyncpg(db: DBServer) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(db.url)
        await conn.fetch(f"SELECT pg_sleep(0.001), s FROM generate_series(1, {ROWS}) AS s")
        await conn.close()

    asyncio.run(main())


MEMBERS = 2000  # x 30-100 us a GET on loopback: past the 50 ms of repeats, idle box or busy


def _redis_members(url: str) -> Any:
    client = redis.Redis.from_url(url)
    client.delete("items")
    client.sadd("items", *range(MEMBERS))
    client.mset({f"item:{i}": i for i in range(MEMBERS)})
    return client


def per_member_redis(url: str) -> None:
    client = _redis_members(url)
    for member in client.smembers("items"):
        client.get(b"item:" + member)  # a round trip per member
    client.close()


def mget_redis(url: str) -> None:
    client = _redis_members(url)
    client.mget([b"item:" + member for member in client.smembers("items")])
    client.close()


def one_query_sqlalchemy(db: DBServer) -> None:
    engine = sqlalchemy.create_engine(_sqlalchemy_url(db))
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f"SELECT seq, SLEEP(0.001) FROM seq_1_to_{ROWS}")).all()
    engine.dispose()


# -- tls-per-request: a TLS handshake for each request, whatever session made it ---
def _context(sim: SimInfo) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=sim.cafile)


def _url(sim: SimInfo, i: int) -> str:
    return f"https://localhost:{sim.https_port}/item?i={i}"


def requests_get(sim: SimInfo) -> None:
    for i in range(N):
        requests.get(_url(sim, i), verify=sim.cafile, timeout=10).raise_for_status()


# the twins also run their requests 4 at a time: one at a time they would be
# serial-requests, rightly
def requests_session(sim: SimInfo) -> None:
    local = threading.local()

    def get(i: int) -> None:
        if not hasattr(local, "session"):
            local.session = requests.Session()  # one per thread, kept
        local.session.get(_url(sim, i), verify=sim.cafile, timeout=10).raise_for_status()

    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(get, range(N)))


def httpx_client_per_call(sim: SimInfo) -> None:
    for i in range(N):
        with httpx.Client(verify=_context(sim), timeout=10) as client:
            client.get(_url(sim, i)).raise_for_status()


def httpx_one_client(sim: SimInfo) -> None:
    client = httpx.Client(verify=_context(sim), timeout=10)  # one, shared by the threads
    with client, ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(lambda i: client.get(_url(sim, i)).raise_for_status(), range(N)))


def aiohttp_session_per_request(sim: SimInfo) -> None:
    async def main() -> None:
        context = _context(sim)
        for i in range(N):
            async with (
                aiohttp.ClientSession() as session,
                session.get(_url(sim, i), ssl=context) as response,
            ):
                await response.read()

    asyncio.run(main())


def aiohttp_one_session(sim: SimInfo) -> None:
    async def main() -> None:
        context = _context(sim)
        bound = asyncio.Semaphore(PARALLEL)

        async def get(session: aiohttp.ClientSession, i: int) -> None:
            async with bound, session.get(_url(sim, i), ssl=context) as response:
                await response.read()

        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(get(session, i) for i in range(N)))

    asyncio.run(main())


def aiohttp_wide_session(sim: SimInfo) -> None:
    async def main() -> None:
        context = _context(sim)

        async def get(session: aiohttp.ClientSession, i: int) -> None:
            async with session.get(_url(sim, i), ssl=context) as response:
                await response.read()

        # 16 at once on one session: a connection (and a handshake) each, all kept
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(get(session, i) for i in range(POOL)))

    asyncio.run(main())


# -- blocked-loop: a callback that keeps the event loop from everything else --------
BLOCKS = 3
BLOCK_S = 0.15  # past the 100 ms a callback may run; 3 of them past the 0.2 s


SLOW = {"Host": "delay-150.sim"}  # the simulated web answers a name like this late


def _http(sim: SimInfo) -> str:
    return f"http://127.0.0.1:{sim.http_port}/item"


def _spin() -> None:
    deadline = time.perf_counter() + BLOCK_S
    while time.perf_counter() < deadline:  # CPU work, bounded by the clock
        pass


def cpu_between_requests(sim: SimInfo) -> None:
    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(BLOCKS):
                async with session.get(_http(sim)) as response:
                    await response.read()
                deadline = time.perf_counter() + BLOCK_S
                while time.perf_counter() < deadline:  # parsing, in the loop's thread
                    pass

    asyncio.run(main())


def cpu_in_a_thread(sim: SimInfo) -> None:
    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(BLOCKS):
                async with session.get(_http(sim)) as response:
                    await response.read()
                await asyncio.to_thread(_spin)

    asyncio.run(main())


def sleep_in_a_coroutine(sim: SimInfo) -> None:
    async def main() -> None:
        for _ in range(BLOCKS):
            time.sleep(BLOCK_S)  # a blocking sleep where asyncio.sleep was meant

    asyncio.run(main())


def asyncio_sleep(sim: SimInfo) -> None:
    async def main() -> None:
        for _ in range(BLOCKS):
            await asyncio.sleep(BLOCK_S)

    asyncio.run(main())


def blocking_client_in_a_coroutine(sim: SimInfo) -> None:
    async def main() -> None:
        with requests.Session() as session:
            for _ in range(BLOCKS):  # a blocking client inside async code
                session.get(_http(sim), headers=SLOW, timeout=10).raise_for_status()

    asyncio.run(main())


def async_client(sim: SimInfo) -> None:
    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(BLOCKS):
                async with session.get(_http(sim), headers=SLOW) as response:
                    await response.read()

    asyncio.run(main())


CASES = [
    ("connect-per-query", pymysql_per_query, pymysql_one_connection),
    ("connect-per-query", nullpool_with_set, queuepool_with_set),
    ("connect-per-query", engine_per_request, queuepool_with_set),
    ("connect-per-query", asyncpg_per_query, asyncpg_pool),
    # a pool of 16, 16 callers of 5 queries each: 16 connects for 80 queries, none replaced
    ("connect-per-query", asyncpg_per_query, asyncpg_wide_pool),
    ("connect-per-query", asyncpg_per_query, surge_asyncpg_wide_pool),
    ("connect-per-query", psycopg_per_query, surge_psycopg_wide_pool),
    ("connect-per-query", aiomysql_per_query, surge_aiomysql_wide_pool),
    ("connect-per-query", pymysql_per_query, surge_pymysql_wide_pool),
    ("connect-per-query", redis_client_per_call, redis_one_client),
    ("n-plus-one", per_row_parameters, one_query),
    ("n-plus-one", per_row_formatted, one_query),
    ("n-plus-one", per_row_sqlalchemy, one_query_sqlalchemy),
    ("n-plus-one", per_row_asyncpg, one_query_asyncpg),
    ("n-plus-one", per_member_redis, mget_redis),
    ("blocked-loop", cpu_between_requests, cpu_in_a_thread),
    ("blocked-loop", sleep_in_a_coroutine, asyncio_sleep),
    ("blocked-loop", blocking_client_in_a_coroutine, async_client),
    ("tls-per-request", requests_get, requests_session),
    ("tls-per-request", httpx_client_per_call, httpx_one_client),
    ("tls-per-request", aiohttp_session_per_request, aiohttp_one_session),
    ("tls-per-request", aiohttp_session_per_request, aiohttp_wide_session),
]


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Any:
    cause = request.node.callspec.params["cause"]
    slow = request.node.callspec.params["slow"].__name__
    if "asyncpg" in slow or "psycopg" in slow:
        return request.getfixturevalue("postgresql_server")
    if "redis" in slow:
        return request.getfixturevalue("redis_url")
    database = cause in ("connect-per-query", "n-plus-one")
    return request.getfixturevalue("mariadb_server" if database else "sim")


@pytest.mark.parametrize(
    ("cause", "slow", "twin"),
    CASES,
    ids=[f"{cause}-{slow.__name__}-{twin.__name__}" for cause, slow, twin in CASES],
)
def test_each_disguise_is_found_and_its_twin_is_not(
    cause: str,
    slow: Callable[[Any], None],
    twin: Callable[[Any], None],
    server: Any,
) -> None:
    with recording() as rec:
        slow(server)
    found = [f for f in rec.findings() if f.id == cause]
    assert found, f"no {cause}: {[f.id for f in rec.findings()]}"
    [finding] = found
    assert finding.sites and finding.sites[0]["file"] == __file__
    assert finding.sites[0]["function"].endswith(slow.__name__) or slow.__name__ in str(
        finding.sites
    )
    with recording() as fixed:
        twin(server)
    assert [f.id for f in fixed.findings()] == []
