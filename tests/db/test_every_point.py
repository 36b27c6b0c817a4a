"""An interruption at every point of surge's code in a checkout, two queries and
the return, on the real sync pool with each real driver (tests/_interrupt.py:
each point where CPython can run a signal handler, one run per point).

Afterwards the pool must be whole within its timeout: nothing in use, nobody
waiting, a checkout that gives the right answers in a fresh session - and no
lock of a connection left held (a held one stops that connection's next
checkout and its close for good: the check runs in a thread, bounded).
"""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests._interrupt import Interrupt, each_point, interrupted_at
from tests.db.test_seeded_signals import assert_whole, get_sql, options, run, server_for, set_sql

import surge
import surge.db
from surge.db._session import FLUSH_AFTER

SURGE_CODE = str(Path(surge.__file__).parent)
#: No checkout, two queries and a return reach this many points in surge's code.
LIMIT = 3_000

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def step(pool: Any, scheme: str, value: int) -> None:
    """What an application writes.  A driver may raise an error of its own in
    place of the interruption (mysqlclient's cursor close: 2014) - then the block
    ends with that Exception, as it would in the application."""
    try:
        with pool.connection(timeout=5) as conn:
            run(conn, set_sql(scheme, value))
            got = run(conn, get_sql(scheme))
            assert [tuple(str(v) for v in row) for row in got] == [(str(value),)], got
    except Exception as error:
        if not isinstance(error.__context__, Interrupt):
            raise


def whole_within(pool: Any, scheme: str, where: str, seconds: float = 20.0) -> None:
    failure: list[BaseException] = []

    def check() -> None:
        try:
            assert_whole(pool, scheme)
        except BaseException as error:  # reported below
            failure.append(error)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"interrupted at {where}: the pool is stuck"
    if failure:
        raise AssertionError(f"interrupted at {where}") from failure[0]


@pytest.mark.parametrize("written", [False, True], ids=["reset in the next send", "reset written"])
@pytest.mark.parametrize("driver", ["pymysql", "mysqlclient", "psycopg"])
def test_an_interruption_at_any_point_leaves_the_db_pool_whole(
    request: pytest.FixtureRequest, driver: str, written: bool
) -> None:
    """``written``: the checkout comes after the reset writer sent the last
    user's reset (its answers are read at checkout); else at once, before it
    (MySQL: the reset goes in front of the next query)."""
    server = server_for(request, driver)
    pool = surge.db.pool(server.url, max_size=1, timeout=5, **options(driver))
    scheme = pool.url.scheme

    def run(n: int) -> str | None:
        if written:
            time.sleep(FLUSH_AFTER * 5)
        where = interrupted_at(n, partial(step, pool, scheme, n + 1), step.__code__, SURGE_CODE)
        if where is not None:
            whole_within(pool, scheme, where)
        return where

    try:
        step(pool, scheme, 1)
        hit = each_point(run, LIMIT)
        assert hit > 20, f"only {hit} points were interrupted"
    finally:
        pool.close()
