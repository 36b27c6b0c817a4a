"""A fork while another thread holds any lock of surge.db: the child must not hang.

A ``ProcessPoolExecutor`` with the fork context forks whenever it starts a
worker, whatever surge.db's threads are doing: the reset writer inside a
connection's reset (its ``_surge_io``), the watchdog's Condition, a first
``cached_property`` computation (Python 3.11's holds a lock per class), a
pool's lock.  A lock held at the fork stays held in the child for ever (the
thread that held it does not exist there), and the child hung at its first
checkout.

So: every lock, RLock and Condition reachable from the pools, their drivers,
their connections and surge.db's process-wide threads is found by walking the
objects (nothing listed by hand, so a new lock is covered too), each is held by
another thread, and a child forked then must use each driver's pool - its
inherited one and a new one: checkout, a query, a return with its session
reset, a discard, a close - within a few seconds.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import pytest
from tests.conftest import require
from tests.db._sql import query
from tests.pool._child import run_in_child

import surge.db
import surge.db._session
import surge.db.django._pooled
from surge.pool import _fork
from surge.testing import DBServer

LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()), threading.Condition)
CACHED = (functools.cached_property, getattr(_fork, "cached_property", functools.cached_property))

#: (driver option, server fixture)
DRIVERS = [
    ("pymysql", "mariadb_server"),
    ("mysqlclient", "mariadb_server"),
    ("psycopg", "postgresql_server"),
]


def reachable_locks(roots: dict[str, Any]) -> dict[str, Any]:
    """Every lock reachable from ``roots`` through surge's objects, containers and
    the ``_surge_*`` attributes of driver connections, plus the locks of
    ``cached_property`` descriptors on the classes met (by path, for messages)."""
    found: dict[int, tuple[str, Any]] = {}
    seen: set[int] = set()
    todo: deque[tuple[str, Any, int]] = deque((name, obj, 0) for name, obj in roots.items())
    while todo:
        path, obj, depth = todo.popleft()
        if id(obj) in seen or depth > 8:
            continue
        seen.add(id(obj))
        if isinstance(obj, LOCK_TYPES):
            found[id(obj)] = (path, obj)
            continue
        if isinstance(obj, dict | list | tuple | deque | set | frozenset):
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            for key, value in list(items)[:500]:
                todo.append((f"{path}[{key!r}]", value, depth + 1))
            continue
        cls = type(obj)
        ours = cls.__module__.startswith("surge")
        for klass in cls.__mro__:
            for name, attr in vars(klass).items():
                lock = getattr(attr, "lock", None) if isinstance(attr, CACHED) else None
                if isinstance(lock, LOCK_TYPES):
                    found[id(lock)] = (f"{klass.__qualname__}.{name} (cached_property)", lock)
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            for name, value in list(state.items()):
                if ours or name.startswith("_surge"):
                    todo.append((f"{path}.{name}", value, depth + 1))
        if ours:
            for klass in cls.__mro__:
                for name in getattr(klass, "__slots__", ()):
                    if hasattr(obj, name):
                        todo.append((f"{path}.{name}", getattr(obj, name), depth + 1))
    return {path: lock for path, lock in found.values()}


def options(driver: str) -> dict[str, Any]:
    if driver == "mysqlclient":
        require("MySQLdb")
    return {"driver": driver} if driver != "psycopg" else {}


def use(pool: Any) -> None:
    """What a worker does with a pool: every path that takes a lock."""
    with pool.connection() as conn:
        query(conn, "SET @x = 1" if pool.url.scheme == "mysql" else "SET application_name = 'x'")
    time.sleep(0.02)  # the reset writer writes the reset (mysqlclient: under the watchdog)
    with pool.connection() as conn:
        assert query(conn, "SELECT 41 + 1") == [(42,)]
    kept, dropped = pool.acquire(), pool.acquire()
    pool.discard(dropped)  # Connection.close under Pool.discard
    pool.release(kept)  # idle, its reset written
    pool.stats()


@pytest.fixture
def pools(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """One used pool per driver (an idle connection each, its reset written), and
    the servers' URLs."""
    made: dict[str, Any] = {}
    for driver, fixture in DRIVERS:
        server: DBServer = request.getfixturevalue(fixture)
        pool = surge.db.pool(server.url, max_size=2, **options(driver))
        pool._test_url = server.url  # to make a fresh pool from, in the child
        use(pool)
        made[driver] = pool
    yield made
    for pool in made.values():
        pool.close()


def hold(lock: Any) -> threading.Event:
    """Hold ``lock`` in another thread until the returned event is set."""
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            done.wait(30)

    threading.Thread(target=holder, daemon=True).start()
    assert held.wait(5), "could not take the lock"
    return done


def use_every_pool(pools: dict[str, Any]) -> None:
    """In the child: every pool (inherited and new) and Django's registry."""
    for driver, pool in pools.items():
        use(pool)
        fresh = surge.db.pool(pool._test_url, max_size=2, **options(driver))
        use(fresh)
        fresh.close()
    surge.db.django._pooled.pool_for("sqlite:///:memory:", "sqlite3", "x", {}, {})


def test_a_fork_while_any_lock_is_held_by_another_thread_does_not_hang_the_child(
    pools: dict[str, Any],
) -> None:
    roots: dict[str, Any] = {f"{driver} pool": pool for driver, pool in pools.items()}
    roots["drivers"] = [pool.driver for pool in pools.values()]
    roots["idle connections"] = [e.resource for p in pools.values() for e in p.pool._core.idle]
    roots["WATCHDOG"] = surge.db._session.WATCHDOG
    roots["RESET_WRITER"] = surge.db._session.RESET_WRITER
    roots["django registry"] = surge.db.django._pooled._pools_lock
    locks = reachable_locks(roots)
    # the walk finds what this test is about (a sanity check of the walk itself)
    assert any("WATCHDOG" in path for path in locks), sorted(locks)
    assert any("_surge_io" in path for path in locks), sorted(locks)
    assert any(path.endswith("._lock") for path in locks), sorted(locks)
    hung = {}
    for path, lock in sorted(locks.items()):
        release = hold(lock)
        try:
            outcome = run_in_child(lambda: use_every_pool(pools), within=8)
        finally:
            release.set()
        if outcome is not None:
            hung[path] = outcome
    assert hung == {}, "the child hung or failed with these locks held at the fork"


def _work(url: str, driver: str) -> int:
    pool = surge.db.pool(url, max_size=1, **({"driver": driver} if driver != "psycopg" else {}))
    try:
        with pool.connection() as conn:
            return int(query(conn, "SELECT 7")[0][0])
    finally:
        pool.close()


def test_a_fork_process_pool_after_the_parent_used_its_pools(pools: dict[str, Any]) -> None:
    """The reported case: ProcessPoolExecutor (fork) after PyMySQL, mysqlclient and
    psycopg pools were used in the parent, their threads busy meanwhile."""
    stop = threading.Event()

    def busy(pool: Any) -> None:  # resets written and read while the workers fork
        while not stop.is_set():
            with pool.connection() as conn:
                query(conn, "SELECT 1")

    threads = [threading.Thread(target=busy, args=(p,), daemon=True) for p in pools.values()]
    for thread in threads:
        thread.start()
    executor = ProcessPoolExecutor(4, mp_context=get_context("fork"))
    try:
        futures = [
            executor.submit(_work, pool._test_url, driver)
            for _ in range(4)
            for driver, pool in pools.items()
        ]
        assert [f.result(timeout=20) for f in futures] == [7] * len(futures)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        processes = list((executor._processes or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # a worker that hung must not outlive the test
            process.kill()
