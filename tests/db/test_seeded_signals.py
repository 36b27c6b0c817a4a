"""Interruptions at random points of the real pools, with each real driver.

A signal handler that raises (SIGALRM through ``signal.setitimer``, at seeded
offsets of 1 us to 1.5 ms) lands anywhere in a checkout, a query or a return:
in a socket read, in a wait for the pool, inside the pool's own bookkeeping.
The asyncio pools meet the same as a timeout or a cancellation at seeded
points.  Afterwards the pool must be whole: nothing in use, nobody waiting,
every slot there (a checkout within the timeout), and the connection it hands
out gives the right answers in a fresh session.

Before the fix the sync pools of PyMySQL and psycopg ended at 0 in use, 0
open, 0 idle, and every acquire failed with ``PoolTimeout ... 1 waiting``: a
waiter left in the queue by an interrupted acquire.  Later, run in the suite's
process, a watchdog left armed by an interruption cut whatever socket had taken
its descriptor number since (another test's connection), and a connection lock
taken just before an interruption stopped the next close for good.
tests/db/test_every_point.py tries every point of surge's code in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests._interrupt import Interrupt
from tests.conftest import require
from tests.db._sql import query

import surge.db
from surge.testing import DBServer

#: Interruptions that must land per driver (each iteration arms one; how many
#: land depends on the box's load, so iterations go on until this many did,
#: up to MAX_TRIES).
N = 300
MAX_TRIES = 10 * N
SEED = 20260411


DRIVERS = ["pymysql", "mysqlclient", "psycopg"]


def options(driver: str) -> dict[str, Any]:
    if driver == "mysqlclient":
        require("MySQLdb")
    return {} if driver == "psycopg" else {"driver": driver}


def run(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` as applications run it: in ``with conn.cursor()``, which closes the
    cursor whatever happens (mysqlclient's close of a cursor whose answer was
    interrupted raises "2014 Commands out of sync" in place of the interruption,
    and the block then sees an Exception: the connection must not go on)."""
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(row) for row in cur.fetchall()] if cur.description else []


def set_sql(scheme: str, value: int) -> str:
    if scheme == "mysql":
        return f"SET @surge_x = {value}"
    return f"SELECT set_config('surge.x', '{value}', false)"


def get_sql(scheme: str) -> str:
    if scheme == "mysql":
        return "SELECT @surge_x"
    return "SELECT nullif(current_setting('surge.x', true), '')"


def server_for(request: pytest.FixtureRequest, driver: str) -> DBServer:
    fixture = "postgresql_server" if driver in ("psycopg", "asyncpg") else "mariadb_server"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


@contextlib.contextmanager
def alarms() -> Iterator[None]:
    """SIGALRM raises Interrupt in the main thread inside the block."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupt

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def contender(pool: Any, scheme: str, stop: threading.Event) -> threading.Thread:
    """Another thread that keeps taking the pool's only connection for a moment,
    so that the main thread's checkouts often wait (and are interrupted waiting).
    It never receives SIGALRM."""

    def run() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        while not stop.is_set():
            with pool.connection(timeout=10) as conn:
                query(conn, set_sql(scheme, 1))
            time.sleep(0.0005)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def assert_whole(pool: Any, scheme: str) -> None:
    """Nothing in use, nobody waiting, the slot there; the connection right and fresh."""
    stats = pool.stats()
    assert stats["in_use"] == 0 and stats["waiting"] == 0, stats
    assert stats["open"] == stats["idle"] <= stats["max_size"], stats
    with pool.connection(timeout=5) as conn:
        assert query(conn, "SELECT 6 * 7") == [(42,)]
        assert query(conn, get_sql(scheme)) == [(None,)], "the last user's session"
    stats = pool.stats()
    assert stats["in_use"] == 0 and stats["waiting"] == 0, stats


@pytest.mark.parametrize("driver", DRIVERS)
def test_signals_raising_at_random_points_leave_the_sync_pool_whole(
    request: pytest.FixtureRequest, driver: str
) -> None:
    server = server_for(request, driver)
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    pool = surge.db.pool(server.url, max_size=1, timeout=10, **options(driver))
    scheme = pool.url.scheme
    rng = random.Random(f"{SEED}-{driver}")
    stop = threading.Event()
    other = contender(pool, scheme, stop)
    interrupted = 0
    wrong: list[str] = []
    try:
        with alarms():
            for _ in range(MAX_TRIES):
                if interrupted >= N // 2:
                    break
                value = rng.randrange(1, 10**6)
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 1.5e-3))
                    with pool.connection(timeout=10) as conn:
                        run(conn, set_sql(scheme, value))
                        got = run(conn, get_sql(scheme))
                        if [tuple(str(v) for v in row) for row in got] != [(str(value),)]:
                            wrong.append(f"{value}: {got}")
                    signal.setitimer(signal.ITIMER_REAL, 0)
                except Interrupt:
                    interrupted += 1
                except Exception as error:  # an interruption the driver turned into one
                    if error.__context__ is None or not isinstance(error.__context__, Interrupt):
                        wrong.append(repr(error)[:200])
                    else:
                        interrupted += 1
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        stop.set()
        other.join(15)
        assert not other.is_alive(), "the other thread is stuck in the pool"
        assert interrupted >= N // 2, f"{interrupted} interruptions landed in {MAX_TRIES} tries"
        assert_whole(pool, scheme)
        assert wrong == [], f"{len(wrong)} wrong answers or errors"
    finally:
        stop.set()
        pool.close()


@pytest.mark.parametrize("driver", ["pymysql", "mysqlclient"])
def test_a_connection_interrupted_mid_answer_is_cut_not_handed_on(
    request: pytest.FixtureRequest, driver: str
) -> None:
    """The signal arrives while the server is still answering (SELECT SLEEP): the
    handler runs as the driver's read returns, before the rows are read.  The
    cursor's close then fails (mysqlclient: 2014) and the block ends with an
    Exception, which returns the connection: it must be cut there, and the next
    user must get a connection in sync (before the fix, mysqlclient's next user
    got "2014 Commands out of sync")."""
    server = server_for(request, driver)
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    pool = surge.db.pool(server.url, max_size=1, timeout=10, **options(driver))
    try:
        with pool.connection() as conn:
            run(conn, "SELECT 1")
        with alarms(), contextlib.suppress(Interrupt, Exception), pool.connection() as conn:
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            run(conn, "SELECT SLEEP(0.3), 1")
        with pool.connection(timeout=5) as conn:
            assert run(conn, "SELECT 6 * 7") == [(42,)]
        stats = pool.stats()
        assert stats["in_use"] == 0 and stats["open"] == stats["idle"] == 1, stats
    finally:
        pool.close()


# -- the asyncio pools: a timeout or a cancellation at seeded points ------------------


async def arun(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    if hasattr(conn, "fetch"):  # asyncpg
        return [tuple(row) for row in await conn.fetch(sql)]
    cur = await conn.cursor() if not hasattr(conn, "execute") else conn.cursor()
    try:
        await cur.execute(sql)
        return [tuple(row) for row in await cur.fetchall()] if cur.description else []
    finally:
        await cur.close() if asyncio.iscoroutinefunction(cur.close) else cur.close()


async def acontender(pool: Any, scheme: str, stop: asyncio.Event) -> None:
    """Another task that keeps taking the pool's only connection for a moment."""
    while not stop.is_set():
        async with pool.connection(timeout=10) as conn:
            await arun(conn, set_sql(scheme, 1))
        await asyncio.sleep(0.0005)


async def aassert_whole(pool: Any, scheme: str) -> None:
    stats = pool.stats()
    assert stats["in_use"] == 0 and stats["waiting"] == 0, stats
    assert stats["open"] == stats["idle"] <= stats["max_size"], stats
    async with pool.connection(timeout=5) as conn:
        assert await arun(conn, "SELECT 6 * 7") == [(42,)]
        assert await arun(conn, get_sql(scheme)) == [(None,)], "the last user's session"


@pytest.mark.parametrize("how", ["timeout", "cancel"])
@pytest.mark.parametrize("driver", ["aiomysql", "psycopg", "asyncpg"])
def test_timeouts_and_cancellations_at_random_points_leave_the_async_pool_whole(
    request: pytest.FixtureRequest, driver: str, how: str
) -> None:
    server = server_for(request, "pymysql" if driver == "aiomysql" else driver)
    rng = random.Random(f"{SEED}-{driver}-{how}")

    async def main() -> tuple[int, list[str]]:
        choice = {"driver": driver} if driver == "asyncpg" else {}
        pool = surge.db.async_pool(server.url, max_size=1, timeout=10, **choice)
        scheme = pool.url.scheme
        stop = asyncio.Event()
        other = asyncio.create_task(acontender(pool, scheme, stop))
        interrupted, wrong = 0, []

        async def one(value: int) -> None:
            async with pool.connection(timeout=10) as conn:
                await arun(conn, set_sql(scheme, value))
                got = await arun(conn, get_sql(scheme))
                if [tuple(str(v) for v in row) for row in got] != [(str(value),)]:
                    wrong.append(f"{value}: {got}")

        try:
            for _ in range(MAX_TRIES // 2):
                if interrupted >= N // 4:
                    break
                value, delay = rng.randrange(1, 10**6), rng.uniform(1e-6, 1.5e-3)
                try:
                    if how == "timeout":
                        async with asyncio.timeout(delay):
                            await one(value)
                    else:
                        task = asyncio.create_task(one(value))
                        await asyncio.sleep(delay)
                        task.cancel()
                        await task
                except (TimeoutError, asyncio.CancelledError):
                    interrupted += 1
                except Exception as error:  # an interruption the driver turned into one
                    if not isinstance(error.__context__, asyncio.CancelledError):
                        wrong.append(repr(error)[:200])
                    else:
                        interrupted += 1
            stop.set()
            await asyncio.wait_for(other, 15)
            await aassert_whole(pool, scheme)
        finally:
            stop.set()
            other.cancel()
            await pool.close()
        return interrupted, wrong

    interrupted, wrong = asyncio.run(asyncio.wait_for(main(), 240))
    assert interrupted >= N // 4, f"{interrupted} landed in {MAX_TRIES // 2} tries"
    assert wrong == [], f"{len(wrong)} wrong answers or errors: {wrong[:5]}"
