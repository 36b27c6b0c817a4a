"""The Django backends ``surge.db.django.mysql`` and ``surge.db.django.postgresql``,
driven through a minimal Django project in a process of its own (Django's
settings are once per process), with requests made the way a WSGI server makes
them: round trips counted on the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import surge
from surge.testing import DBServer

#: The surge under test (a worktree's src/, not only the installed checkout).
SURGE_PATH = str(Path(surge.__file__).resolve().parent.parent)

SETTINGS = """
import os
SECRET_KEY = "not-a-secret"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "urls"
INSTALLED_APPS = []
MIDDLEWARE = []
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": os.environ["DB_ENGINE"],
        "NAME": os.environ["DB_NAME"],
        "USER": os.environ["DB_USER"],
        "PASSWORD": os.environ["DB_PASSWORD"],
        "HOST": "127.0.0.1",
        "PORT": os.environ["DB_PORT"],
        "OPTIONS": {"pool": {"max_size": 4, "timeout": 5}},
    }
}
"""

URLS = """
from django.db import connection, transaction
from django.http import HttpResponse
from django.urls import path


def read(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return HttpResponse(str(cursor.fetchone()[0]))


def write(request):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("INSERT INTO dj_hits VALUES (1)")
    return HttpResponse("ok")


DIRTY = {
    "mysql": ["SET time_zone = '+03:00'", "SET sql_mode = 'ANSI_QUOTES'", "SET @v = 5"],
    "postgresql": [
        "SET TIME ZONE 'Asia/Tokyo'",
        "SET search_path = pg_catalog",
        "SET statement_timeout = '1s'",
        "SET ROLE NONE",
        "SELECT set_config('app.tenant', '42', false)",
    ],
}
PROBE = {
    "mysql": "SELECT @@time_zone, @@sql_mode, @v, @@tx_isolation",
    "postgresql": "SELECT current_setting('TimeZone'), current_setting('search_path'),"
    " current_setting('statement_timeout'), current_user,"
    " coalesce(nullif(current_setting('app.tenant', true), ''), 'unset')",
}


def dirty(request):
    with connection.cursor() as cursor:
        for sql in DIRTY[connection.vendor]:
            cursor.execute(sql)
    return HttpResponse("dirty")


def probe(request):
    with connection.cursor() as cursor:
        cursor.execute(PROBE[connection.vendor])
        return HttpResponse(repr(tuple(cursor.fetchone())))


urlpatterns = [
    path("read", read), path("write", write), path("dirty", dirty), path("probe", probe)
]
"""

# Reads "PATH N" lines; answers each with the statuses of N requests and the pool's stats.
SERVE = """
import json, os, sys
from wsgiref.util import setup_testing_defaults
os.environ["DJANGO_SETTINGS_MODULE"] = "settings"
from django.core.wsgi import get_wsgi_application
from surge.db.django import _pooled

app = get_wsgi_application()


def request(path):
    environ = {"PATH_INFO": "/" + path}
    setup_testing_defaults(environ)
    status = []
    body = app(environ, lambda s, headers: status.append(int(s.split()[0])))
    text = b"".join(body).decode()
    body.close()  # what a WSGI server does: request_finished closes the connection
    return status[0] if path != "probe" else text


def leak():  # what a worker thread that ends without closing its connection does
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def leaking_threads(n):
    import threading

    statuses = []
    for _ in range(n):
        thread = threading.Thread(target=leak)
        thread.start()
        thread.join()
        statuses.append(200)
    return statuses


for line in sys.stdin:
    path, n = line.split()
    if path == "leak":
        statuses = leaking_threads(int(n))
    else:
        statuses = [request(path) for _ in range(int(n))]
    (pool,) = _pooled._pools.values()
    # The session resets written at return, run by the server before the test
    # reads its counters (it counts what each batch cost, no more, no less).
    from surge.pool._core import IDLE

    for entry in list(pool.pool._core.idle):
        if entry.state == IDLE and pool.driver.reset_pending(entry.resource):
            pool.driver.finish_reset(entry.resource)
    stats = {k: v for k, v in pool.stats().items() if isinstance(v, int)}
    stats["init_sql"] = len(pool.init_sql)
    print(json.dumps({"statuses": statuses, "stats": stats}), flush=True)
"""


class Project:
    def __init__(self, directory: Path, server: DBServer) -> None:
        for name, text in (("settings.py", SETTINGS), ("urls.py", URLS), ("serve.py", SERVE)):
            (directory / name).write_text(textwrap.dedent(text))
        env = {
            "DB_ENGINE": f"surge.db.django.{'mysql' if server.kind == 'mariadb' else 'postgresql'}",
            "DB_NAME": server.database,
            "DB_USER": server.user,
            "DB_PASSWORD": server.password,
            "DB_PORT": str(server.port),
            "PYTHONPATH": os.pathsep.join([str(directory), SURGE_PATH]),
            "PATH": "/usr/bin:/bin",
        }
        self.process = subprocess.Popen(
            [sys.executable, str(directory / "serve.py")],
            cwd=directory,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def get(self, path: str, n: int) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{path} {n}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the Django process died"
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(30)


@pytest.fixture
def server(db: tuple[DBServer, Any]) -> DBServer:
    return db[0]


@pytest.fixture
def project(tmp_path: Path, server: DBServer) -> Any:
    with server.connect(autocommit=True) as conn:
        conn.cursor().execute("CREATE TABLE IF NOT EXISTS dj_hits (v INT)")
    p = Project(tmp_path, server)
    yield p
    p.close()


def test_requests_share_pooled_connections(project: Project, db: tuple[DBServer, Any]) -> None:
    warm = project.get("read", 2)  # the first request logs in and sets the session up
    assert warm["statuses"] == [200, 200] and warm["stats"]["created"] == 1
    server, counter = db
    counter.mark()
    result = project.get("read", 20)
    counts = counter.since()
    assert result["statuses"] == [200] * 20
    # per request: the view's SELECT and the session's reset with Django's settings
    # (MySQL: SQL_AUTO_IS_NULL, the isolation level; PostgreSQL: the time zone),
    # written without waiting - no login, no ping, no rollback; the one connection
    # went back to the pool after each request
    init = result["stats"]["init_sql"]
    assert init == (2 if server.kind == "mariadb" else 1)
    if server.kind == "mariadb":  # the server cannot tell a reset's commands apart
        resets = result["stats"]["resets_written"] - warm["stats"]["resets_written"]
        commands = result["stats"]["reset_commands"] - warm["stats"]["reset_commands"]
        statements, pings = counts.statements - commands, counts.pings - resets
    else:
        resets = counts.resets
        statements, pings = counts.statements - init * resets, counts.pings
    assert resets == 20
    assert (statements, counts.connects, pings, counts.rollbacks) == (20, 0, 0, 0)
    assert counts.begins == 0
    assert result["stats"]["created"] == 1 and result["stats"]["idle"] == 1

    counter.mark()
    result = project.get("write", 5)
    counts = counter.since()
    assert result["statuses"] == [200] * 5
    # Django's atomic(): autocommit off (MySQL: SET; psycopg: BEGIN), INSERT, COMMIT
    # (MySQL: autocommit on again); no ROLLBACK
    assert counts.rollbacks == 0 and counts.connects == 0


def test_requests_survive_a_server_restart(project: Project, server: DBServer) -> None:
    assert project.get("read", 3)["statuses"] == [200] * 3
    server.restart()
    result = project.get("read", 5)
    assert result["statuses"] == [200] * 5
    assert result["stats"]["generation"] == 1 and result["stats"]["created"] == 2


def test_connections_of_threads_that_ended_come_back(project: Project) -> None:
    """Django's connections are per thread: a thread that ends without closing its
    own must not keep a pool slot for ever (the pool has 4)."""
    result = project.get("leak", 7)
    assert result["statuses"] == [200] * 7  # the 5th would have waited 5 s, then failed
    assert result["stats"]["in_use"] <= 4
    assert result["stats"]["discarded"] >= 3
    assert project.get("read", 2)["statuses"] == [200, 200]


def test_a_request_never_sees_the_last_requests_session(project: Project) -> None:
    """One request changes its session (time zone, sql_mode / search_path, role,
    statement_timeout, a tenant id); the next request, on the same pooled
    connection, sees the session a fresh connection has - as with Django's stock
    backends, which connect per request."""
    fresh = project.get("probe", 1)["statuses"][0]
    assert project.get("dirty", 1)["statuses"] == [200]
    after = project.get("probe", 1)
    assert after["statuses"][0] == fresh
    assert after["stats"]["created"] == 1  # the same connection, reset
