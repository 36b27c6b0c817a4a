"""After ``fork()``, parent and child each have their own connections: 300 queries
each, at once, with unique answers, and not one answer wrong nor one error - for
the pool with each driver, the asyncio pool, SQLAlchemy's engine (with and
without its documented ``dispose(close=False)``), multiprocessing, and Django
under gunicorn ``--preload``.

Before surge.pool._fork, the child reused its parent's sockets: two clients on
one socket read each other's answers (MySQL: 202 of 300 wrong in the parent,
105 in the child, no error; PostgreSQL: wrong answers in the parent and a hung
child).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require
from tests.db._sql import query

import surge.db
from surge.testing import DBServer

N = 300


def hammer(run: Callable[[str], Any], base: int, n: int = N) -> tuple[int, list[str]]:
    """``n`` queries with unique answers through ``run``: (wrong answers, errors)."""
    wrong, errors = 0, []
    for i in range(n):
        value = base + i
        try:
            rows = run(f"SELECT {value}")
        except Exception as error:  # counted, not raised: the test reports them all
            errors.append(repr(error)[:200])
            continue
        if [tuple(int(v) for v in row) for row in rows] != [(value,)]:
            wrong += 1
    return wrong, errors


def in_both(parent: Callable[[], Any], child: Callable[[], Any]) -> tuple[Any, Any]:
    """Fork: ``child()`` runs in the child while ``parent()`` runs here, at once; both
    results (the child's through a pipe, as JSON).  A child that hangs is killed
    after 60 s and fails the test."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        code = 0
        try:
            result = child()
        except BaseException as error:
            result = {"raised": repr(error)}
            code = 1
        with os.fdopen(write, "w") as pipe:
            json.dump(result, pipe)
        os._exit(code)
    os.close(write)
    mine = parent()
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    with os.fdopen(read) as pipe:
        theirs = json.load(pipe)
    assert os.waitstatus_to_exitcode(done[1]) == 0, theirs
    return mine, theirs


def pool_runner(pool: Any) -> Callable[[str], Any]:
    def run(sql: str) -> Any:
        with pool.connection() as conn:
            return query(conn, sql)

    return run


@pytest.mark.parametrize("driver", ["pymysql", "mysqlclient", "psycopg"])
def test_parent_and_child_get_their_own_answers(
    mariadb_server: DBServer, postgresql_server: DBServer, driver: str
) -> None:
    if driver == "mysqlclient":
        require("MySQLdb")
    server = postgresql_server if driver == "psycopg" else mariadb_server
    options: dict[str, Any] = {"max_size": 4}
    if driver != "psycopg":
        options["driver"] = driver
    with surge.db.pool(server.url, **options) as pool:
        run = pool_runner(pool)
        # idle connections, and one held across the fork by the forking thread
        conns = [pool.acquire() for _ in range(3)]
        for conn in conns[1:]:
            pool.release(conn)
        held = conns[0]

        def child() -> dict[str, Any]:
            try:  # the parent's connection: refused, never another query's answer
                held_answer = query(held, "SELECT 1")
            except Exception as error:
                held_answer = type(error).__name__
            pool.release(held)  # the parent's: dropped without a byte sent
            wrong, errors = hammer(run, 1_000_000)
            return {"wrong": wrong, "errors": errors, "held": held_answer, **pool.stats()}

        (wrong, errors), theirs = in_both(lambda: hammer(run, 0), child)
        assert (wrong, errors) == (0, [])
        assert (theirs["wrong"], theirs["errors"]) == (0, [])
        assert theirs["held"] != [(1,)]  # an error, not an answer
        assert theirs["severed"] >= 3  # everything the parent had (never closed politely)
        # the parent's connections are still its own, the held one too
        assert query(held, "SELECT 2") == [(2,)]
        pool.release(held)
        assert pool.stats()["severed"] == 0


def test_asyncio_pool_in_a_forked_child(db: tuple[DBServer, Any]) -> None:
    server, _ = db

    async def queries(pool: Any, base: int) -> tuple[int, list[str]]:
        wrong, errors = 0, []
        for i in range(N):
            try:
                async with pool.connection() as conn:
                    if server.kind == "mariadb":
                        async with conn.cursor() as cur:
                            await cur.execute(f"SELECT {base + i}")
                            rows = await cur.fetchall()
                    else:
                        rows = await (await conn.execute(f"SELECT {base + i}")).fetchall()
            except Exception as error:
                errors.append(repr(error)[:200])
                continue
            wrong += [tuple(r) for r in rows] != [(base + i,)]
        return wrong, errors

    async def warm() -> Any:
        pool = surge.db.async_pool(server.url, max_size=3)
        conns = [await pool.acquire() for _ in range(3)]
        for conn in conns:
            await pool.release(conn)
        return pool

    loop = asyncio.new_event_loop()
    try:
        pool = loop.run_until_complete(warm())

        def child() -> dict[str, Any]:
            wrong, errors = asyncio.run(queries(pool, 1_000_000))
            return {"wrong": wrong, "errors": errors}

        mine, theirs = in_both(lambda: loop.run_until_complete(queries(pool, 0)), child)
        assert mine == (0, [])
        assert (theirs["wrong"], theirs["errors"]) == (0, [])
        loop.run_until_complete(pool.close())
    finally:
        loop.close()


@pytest.mark.parametrize("dispose", ["none", "dispose(close=False)", "dispose()"])
def test_sqlalchemy_engine_in_a_forked_child(db: tuple[DBServer, Any], dispose: str) -> None:
    """SQLAlchemy documents ``engine.dispose(close=False)`` in the child; with surge
    the child is safe whatever it does (its ``recreate()`` keeps surge's pool,
    which forgot the parent's connections at the fork)."""
    from sqlalchemy import text

    from surge.db.sqlalchemy import create_engine

    server, _ = db
    engine = create_engine(server.url, pool_options={"max_size": 3})

    def run(sql: str) -> Any:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql))]

    try:
        hammer(run, 0, 5)  # connections made, records made, idle

        def child() -> dict[str, Any]:
            if dispose == "dispose(close=False)":
                engine.dispose(close=False)
            elif dispose == "dispose()":
                engine.dispose()
            wrong, errors = hammer(run, 1_000_000)
            return {"wrong": wrong, "errors": errors}

        mine, theirs = in_both(lambda: hammer(run, 0), child)
        assert mine == (0, [])
        assert (theirs["wrong"], theirs["errors"]) == (0, [])
    finally:
        engine.dispose()


def _mp_work(base: int) -> tuple[int, list[str]]:  # pragma: no cover - in the workers
    return hammer(pool_runner(_MP_POOL), base, 100)


_MP_POOL: Any = None


def test_multiprocessing_with_fork(mariadb_server: DBServer) -> None:
    import multiprocessing

    global _MP_POOL
    with surge.db.pool(mariadb_server.url, max_size=2) as pool:
        _MP_POOL = pool
        hammer(pool_runner(pool), 0, 5)  # idle connections the workers inherit
        with multiprocessing.get_context("fork").Pool(3) as workers:
            results = workers.map(_mp_work, [1_000_000 * k for k in range(1, 7)])
        assert results == [(0, [])] * 6
        assert hammer(pool_runner(pool), 0, 50) == (0, [])
    _MP_POOL = None


# -- Django under gunicorn --preload ---------------------------------------------------

DJANGO_APP = """
import os
import django
from django.conf import settings

settings.configure(
    SECRET_KEY="not-a-secret",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=[],
    MIDDLEWARE=[],
    DATABASES={"default": {
        "ENGINE": os.environ["DB_ENGINE"], "NAME": os.environ["DB_NAME"],
        "USER": os.environ["DB_USER"], "PASSWORD": os.environ["DB_PASSWORD"],
        "HOST": "127.0.0.1", "PORT": os.environ["DB_PORT"],
        "OPTIONS": {"pool": {"max_size": 4}},
    }},
)
django.setup()

from django.db import connection
from django.http import HttpResponse
from django.urls import path


def echo(request, n):
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s", [n])
        return HttpResponse(str(cursor.fetchone()[0]))


urlpatterns = [path("echo/<int:n>", echo)]

# What a preloaded app often does at import: touch the database in the master,
# which then holds a pooled connection (idle, or still in Django's hands).
with connection.cursor() as cursor:
    cursor.execute("SELECT 1")

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_django_under_gunicorn_preload(db: tuple[DBServer, Any], tmp_path: Path) -> None:
    """4 workers forked from a master that used the pool: 300 requests with unique
    answers, from 8 client threads, every answer right."""
    server, _ = db
    (tmp_path / "app.py").write_text(textwrap.dedent(DJANGO_APP))
    port = free_port()
    engine = "mysql" if server.kind == "mariadb" else "postgresql"
    env = dict(
        os.environ,
        DB_ENGINE=f"surge.db.django.{engine}",
        DB_NAME=server.database,
        DB_USER=server.user,
        DB_PASSWORD=server.password,
        DB_PORT=str(server.port),
        PYTHONPATH=str(tmp_path),
    )
    gunicorn = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "--preload", "-w", "4"),
            *("-b", f"127.0.0.1:{port}", "--log-level", "warning", "app:application"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/echo/1", timeout=5).read()
                break
            except OSError:
                if gunicorn.poll() is not None or time.monotonic() > deadline:
                    out = gunicorn.stdout.read().decode() if gunicorn.stdout else ""
                    pytest.fail(f"gunicorn did not come up: {out[-2000:]}")
                time.sleep(0.1)

        def get(n: int) -> str:
            url = f"http://127.0.0.1:{port}/echo/{n}"
            try:
                return urllib.request.urlopen(url, timeout=30).read().decode()
            except Exception as error:
                return f"error: {error!r}"

        with ThreadPoolExecutor(8) as clients:
            answers = list(clients.map(get, range(1000, 1000 + N)))
        wrong = [(n, a) for n, a in zip(range(1000, 1000 + N), answers, strict=True) if a != str(n)]
        assert wrong == []
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        try:
            gunicorn.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            gunicorn.kill()
            gunicorn.wait()


def test_a_fork_while_another_thread_uses_the_pool(mariadb_server: DBServer) -> None:
    """A thread of the parent is mid-query when another forks: the child starts with
    an empty pool and a lock of its own, and the parent's thread is undisturbed."""
    with surge.db.pool(mariadb_server.url, max_size=3) as pool:
        run = pool_runner(pool)
        stop = threading.Event()
        busy: list[tuple[int, list[str]]] = []

        def keep_busy() -> None:
            while not stop.is_set():
                busy.append(hammer(run, 5_000_000, 20))

        thread = threading.Thread(target=keep_busy)
        thread.start()
        try:
            time.sleep(0.05)

            def child() -> dict[str, Any]:
                wrong, errors = hammer(run, 1_000_000, 100)
                return {"wrong": wrong, "errors": errors}

            mine, theirs = in_both(lambda: hammer(run, 0, 100), child)
        finally:
            stop.set()
            thread.join()
        assert mine == (0, []) and (theirs["wrong"], theirs["errors"]) == (0, [])
        assert all(result == (0, []) for result in busy)
