"""Benchmark surge's Django backends against Django's own ways to keep connections,
on a realistic request cycle, with MariaDB and PostgreSQL on loopback.

Run it from the repository root::

    python benchmarks/django_cycle.py               # both servers, ~2 minutes
    python benchmarks/django_cycle.py --quick       # fewer requests: a smoke run
    python benchmarks/django_cycle.py --only postgresql --requests 3000
    python benchmarks/django_cycle.py --only mariadb --mysql-driver mysqlclient

One request is what a small Django view does, called through Django's WSGI
handler the way a WSGI server calls it (request_started, the view,
request_finished, which closes the connection): nine reads in ten run two
SELECTs; one in ten is a write in ``atomic()`` (an INSERT and an UPDATE).
``--threads`` worker threads (default 1, and 4) serve requests at once, as a
threaded WSGI server does.  Each peer is a Django process of its own; the
peers run interleaved, round by round, and the fastest round is kept.

The peers, per server
---------------------
``Django, CONN_MAX_AGE=0``   Django's default: a login per request
``Django, CONN_MAX_AGE=60``  a persistent connection per thread
``Django pool``              PostgreSQL only: Django 5.1+'s ``OPTIONS: {"pool": True}``
                             (psycopg_pool)
``surge``                    ``ENGINE: surge.db.django.mysql`` / ``.postgresql``

MariaDB's driver is PyMySQL (installed as ``MySQLdb``) unless ``--mysql-driver
mysqlclient``: the same driver for every peer.

Server commands per request are counted on the server: MariaDB's own counters
(Questions + Com_admin_commands; Connections for logins), PostgreSQL's log
(every statement and ping, with ``log_min_duration_statement=0``; every login).
MariaDB counts a statement, not a command: a query of several statements is
several; and COM_RESET_CONNECTION is in both counters.  So MariaDB's peers get
"commands sent" too (the general log's rows, less logins, plus
COM_RESET_CONNECTION and COM_PING), counted in an untimed round of their own:
each is a round trip with mysqlclient, which waits for every answer; PyMySQL's
reset rides in the send of the request's first query.
surge's include each request's session reset (PostgreSQL: DISCARD ALL and
Django's time zone; MariaDB: COM_RESET_CONNECTION and Django's session
settings), which is written without being waited for: commands, not round trips.
Results go to ``benchmarks/results/django_cycle.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from _common import Table, machine_info, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "django_cycle.json"
BACKENDS = ("mariadb", "postgresql")

#: The Django process: reads "N" lines, serves N requests on its threads, answers
#: with one JSON line (wall and CPU seconds).
CHILD = r"""
import json, os, sys, threading, time
from wsgiref.util import setup_testing_defaults

import django
from django.conf import settings
config = json.loads(os.environ["BENCH_DATABASE"])
settings.configure(
    DATABASES={"default": config}, ROOT_URLCONF="bench_urls", ALLOWED_HOSTS=["*"],
    SECRET_KEY="not-a-secret", INSTALLED_APPS=[], MIDDLEWARE=[], USE_TZ=True,
)
django.setup()
from django.core.wsgi import get_wsgi_application

app = get_wsgi_application()
THREADS = int(os.environ["BENCH_THREADS"])


def request(i):
    environ = {"PATH_INFO": "/write" if i % 10 == 0 else "/read", "QUERY_STRING": f"i={i}"}
    setup_testing_defaults(environ)
    status = []
    body = app(environ, lambda s, headers: status.append(s))
    b"".join(body)
    body.close()  # request_finished: Django closes (or keeps) the connection
    if not status[0].startswith("200"):
        raise SystemExit(f"request {i}: {status[0]}")


def serve(n):
    counter = iter(range(n))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            request(i)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


serve(50)  # warm: connections made, code paths hot
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    cpu0, t0 = time.process_time(), time.perf_counter()
    serve(n)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(json.dumps({"wall_s": wall, "cpu_s": cpu}), flush=True)
"""

URLS = """
from django.db import connection, transaction
from django.http import HttpResponse
from django.urls import path


def read(request):
    i = int(request.GET["i"]) % 100 + 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, name, hits FROM bench_items WHERE id = %s", [i])
        row = cursor.fetchone()
        cursor.execute("SELECT COUNT(*) FROM bench_items WHERE hits >= %s", [row[2]])
        return HttpResponse(f"{row[1]} {cursor.fetchone()[0]}")


def write(request):
    i = int(request.GET["i"]) % 100 + 1
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_log (item) VALUES (%s)", [i])
        cursor.execute("UPDATE bench_items SET hits = hits + 1 WHERE id = %s", [i])
    return HttpResponse("ok")


urlpatterns = [path("read", read), path("write", write)]
"""


def peers(kind: str) -> dict[str, dict[str, Any]]:
    """Each peer's DATABASES entry, less the server's address."""
    stock = "django.db.backends.mysql" if kind == "mariadb" else "django.db.backends.postgresql"
    surge = "surge.db.django.mysql" if kind == "mariadb" else "surge.db.django.postgresql"
    out = {
        "Django, CONN_MAX_AGE=0": {"ENGINE": stock, "CONN_MAX_AGE": 0},
        "Django, CONN_MAX_AGE=60": {"ENGINE": stock, "CONN_MAX_AGE": 60},
    }
    if kind == "postgresql":
        out["Django pool (psycopg_pool)"] = {"ENGINE": stock, "OPTIONS": {"pool": True}}
    out["surge"] = {"ENGINE": surge, "OPTIONS": {"pool": {"max_size": 8}}}
    return out


class ServerCounter:
    """Round trips (statements and pings) and logins, counted by the server."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.admin = (
            server.connect(admin=True, autocommit=True) if server.kind == "mariadb" else None
        )

    def read(self) -> tuple[int, int]:
        if self.admin is not None:
            cur = self.admin.cursor()
            cur.execute(
                "SHOW GLOBAL STATUS WHERE Variable_name IN"
                " ('Questions', 'Com_admin_commands', 'Connections')"
            )
            status = dict(cur.fetchall())
            trips = int(status["Questions"]) + int(status["Com_admin_commands"]) - 1
            return trips, int(status["Connections"])
        text = Path(self.server.log_path).read_text(errors="replace")
        # One line per statement run: "statement: ..." (simple protocol) or
        # "execute ...: ..." (extended: its parse and bind lines are not runs).
        runs = text.count("  statement: ") + text.count("  execute ")
        return runs, text.count("connection authorized")

    def commands_sent(self, run: Any) -> float:
        """MariaDB: the commands ``run()`` sent, one per round trip, whatever the
        statements in each: the general log's rows (one per COM_QUERY or
        COM_INIT_DB, a query of several statements once) less logins, plus the
        admin commands (COM_RESET_CONNECTION and COM_PING, which it does not log).
        Logging costs time: counted in a round of its own, never a timed one."""
        assert self.admin is not None
        cur = self.admin.cursor()
        cur.execute("SELECT CONNECTION_ID(), @@global.log_output")
        me, output = cur.fetchone()
        cur.execute("SET GLOBAL general_log = 0")
        cur.execute("SET GLOBAL log_output = 'TABLE'")
        cur.execute("TRUNCATE mysql.general_log")
        admin = "SHOW GLOBAL STATUS LIKE 'Com_admin_commands'"
        cur.execute(admin)
        admin0 = int(cur.fetchone()[1])
        cur.execute("SET GLOBAL general_log = 1")
        try:
            run()
        finally:
            cur.execute("SET GLOBAL general_log = 0")
            cur.execute(f"SET GLOBAL log_output = '{output}'")
        cur.execute(admin)
        admin1 = int(cur.fetchone()[1])
        cur.execute(
            "SELECT COUNT(*) FROM mysql.general_log WHERE thread_id != %s"
            " AND command_type NOT IN ('Connect', 'Quit')",
            (me,),
        )
        logged = int(cur.fetchone()[0])
        cur.execute("TRUNCATE mysql.general_log")
        return logged + admin1 - admin0


def start_child(
    config: dict[str, Any], server: Any, threads: int, work: Path, mysql_driver: str
) -> subprocess.Popen[str]:
    database = {
        "NAME": server.database,
        "USER": server.user,
        "PASSWORD": server.password,
        "HOST": "127.0.0.1",
        "PORT": str(server.port),
        **config,
    }
    pymysql = server.kind == "mariadb" and mysql_driver == "pymysql"
    prelude = "import pymysql; pymysql.install_as_MySQLdb()\n" if pymysql else ""
    (work / "bench_child.py").write_text(prelude + textwrap.dedent(CHILD))
    (work / "bench_urls.py").write_text(textwrap.dedent(URLS))
    import surge

    # The surge this script runs (a checkout's src/, not only the installed one).
    here = str(Path(surge.__file__).resolve().parent.parent)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(work), here]),
        BENCH_DATABASE=json.dumps(database),
        BENCH_THREADS=str(threads),
    )
    child = subprocess.Popen(
        [sys.executable, str(work / "bench_child.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise SystemExit(f"the Django process for {config} did not start")
    return child


def serve(child: subprocess.Popen[str], n: int) -> dict[str, float]:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(f"{n}\n")
    child.stdin.flush()
    line = child.stdout.readline()
    if not line:
        raise SystemExit("a Django process died")
    result: dict[str, float] = json.loads(line)
    return result


def prepare(server: Any) -> None:
    with server.connect(autocommit=True) as conn:
        cur = conn.cursor()
        serial = "INT AUTO_INCREMENT" if server.kind == "mariadb" else "SERIAL"
        cur.execute("DROP TABLE IF EXISTS bench_items")
        cur.execute("DROP TABLE IF EXISTS bench_log")
        cur.execute("CREATE TABLE bench_items (id INT PRIMARY KEY, name VARCHAR(40), hits INT)")
        cur.execute(f"CREATE TABLE bench_log (id {serial} PRIMARY KEY, item INT)")
        for i in range(1, 101):
            cur.execute(f"INSERT INTO bench_items VALUES ({i}, 'item {i}', 0)")


def measure(
    server: Any, requests: int, threads: int, repeat: int, work: Path, mysql_driver: str
) -> dict[str, Any]:
    counter = ServerCounter(server)
    children = {
        name: start_child(config, server, threads, work, mysql_driver)
        for name, config in peers(server.kind).items()
    }
    best: dict[str, dict[str, float]] = {}
    try:
        for _ in range(repeat):
            for name, child in children.items():
                trips0, logins0 = counter.read()
                run = serve(child, requests)
                trips1, logins1 = counter.read()
                b = best.setdefault(name, {"wall_us": float("inf"), "cpu_us": float("inf")})
                b["wall_us"] = min(b["wall_us"], run["wall_s"] / requests * 1e6)
                b["cpu_us"] = min(b["cpu_us"], run["cpu_s"] / requests * 1e6)
                b["server_commands"] = (trips1 - trips0) / requests
                b["logins"] = (logins1 - logins0) / requests
        if server.kind == "mariadb":  # then round trips, in an untimed round
            counted = min(requests, 300)
            for name, child in children.items():
                sent = counter.commands_sent(lambda child=child: serve(child, counted))
                best[name]["commands_sent"] = sent / counted
    finally:
        for child in children.values():
            assert child.stdin is not None
            child.stdin.close()
            child.wait(30)
    for b in best.values():
        b["requests_per_s"] = 1e6 / b["wall_us"]
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests: a smoke run")
    parser.add_argument("--only", choices=BACKENDS, help="one server")
    parser.add_argument("--requests", type=int, help="requests per round and peer")
    parser.add_argument("--repeat", type=int, help="rounds (the fastest kept)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4], help="worker threads")
    parser.add_argument(
        "--mysql-driver",
        choices=("pymysql", "mysqlclient"),
        default="pymysql",
        help="MariaDB's driver, for every peer",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results path")
    args = parser.parse_args()
    requests = args.requests or (200 if args.quick else 1500)
    repeat = args.repeat or (2 if args.quick else 3)

    import tempfile

    import surge.testing

    info = machine_info(["surge", "django", "pymysql", "mysqlclient", "psycopg", "psycopg-pool"])
    print(
        f"Django request cycle -- {info['cpu_model']}, {info['cpu_count']} cores, "
        f"load {info['load_average']}, Python {info['python']}\n",
        flush=True,
    )
    started = time.perf_counter()
    results: dict[str, Any] = {}
    start = {
        "mariadb": lambda: surge.testing.mariadb(),
        "postgresql": lambda: surge.testing.postgresql(
            settings={"log_min_duration_statement": 0, "log_connections": True}
        ),
    }
    for kind in BACKENDS:
        if args.only and kind != args.only:
            continue
        with start[kind]() as server, tempfile.TemporaryDirectory() as work:
            prepare(server)
            results[kind] = {}
            for threads in args.threads:
                best = measure(server, requests, threads, repeat, Path(work), args.mysql_driver)
                results[kind][f"{threads} threads"] = best
                floor = best["Django, CONN_MAX_AGE=60"]["wall_us"]
                table = Table(
                    f"{kind}, {threads} worker thread(s): per request, fastest of {repeat} rounds"
                    f" of {requests}",
                    [
                        "peer",
                        "wall",
                        "req/s",
                        "vs persistent",
                        "client CPU",
                        "server commands",
                        "commands sent",
                        "logins",
                    ],
                )
                for name, b in best.items():
                    table.add(
                        name,
                        f"{b['wall_us']:,.0f} us",
                        f"{b['requests_per_s']:,.0f}",
                        f"{b['wall_us'] / floor:.2f}x",
                        f"{b['cpu_us']:,.0f} us",
                        f"{b['server_commands']:.2f}",
                        f"{b['commands_sent']:.2f}" if "commands_sent" in b else "-",
                        f"{b['logins']:.2f}",
                    )
                table.print()
    path = write_json(
        args.out,
        {
            "benchmark": "django",
            "machine": info,
            "load_average_after": list(os.getloadavg()),
            "settings": {
                "requests": requests,
                "repeat": repeat,
                "threads": args.threads,
                "mysql_driver": args.mysql_driver,
            },
            "results": results,
            "elapsed_s": time.perf_counter() - started,
        },
    )
    print(f"wrote {path} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
