"""What ``surge watch`` costs a program, beside ``opentelemetry-instrument``.

Run it from the repository root::

    python benchmarks/watch.py            # ~15 minutes on the shared 2-core machine
    python benchmarks/watch.py --quick    # smaller sizes, one run each
    python benchmarks/watch.py --only memory

``overhead``: each write-up re-lived by tests/watch/programs (the same unmodified
programs the tests run), against real servers on loopback (MariaDB from
surge.testing, MinIO, the simulated web in a process of its own), run
``--repeat`` times in each way, in turns:

``bare``                 ``python prog.py ...``
``python -m surge.watch`` the program recorded in its own interpreter, then the
                         summary and findings (the cost the 5% target is about)
``surge watch --``       the same through the command (a process more: click,
                         the bootstrap, the data handed back as JSON)
``opentelemetry-instrument``  OpenTelemetry's auto-instrumentation with the
                         requests, urllib3, botocore and PyMySQL instrumentors and
                         the console exporter (its output thrown away)

Wall time of the whole process, start-up included, and its CPU time (``wait4``,
children included: steadier than wall time on a shared machine); the median of
the runs.

``loops``: issue #44's own loops, each written here (``LOOPS``), against
MariaDB and PostgreSQL from surge.testing and the simulated web: 3,000 queries
on one PyMySQL connection, the same on one psycopg connection, 1,000
keep-alive GETs through one ``requests.Session``, and 2,000 PyMySQL
connect+query+close (the issue's 10,000: too long a run, see ``loops``); the
same ways in turns; targets <= 5% wall and <= 10% CPU (``python -m
surge.watch`` against bare).

``memory``: 1,000,000 operations fed to one recorder in a fresh interpreter (HTTP
requests with their phases to 1,000 hosts, and database queries), its RSS grown
and the time per operation; the target is under 150 MB.

Results go to ``benchmarks/results/watch.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Table,
    Target,
    announce,
    machine_info,
    payload,
    print_targets,
    progress,
    write_json,
)

PROGRAMS = Path(__file__).resolve().parent.parent / "tests" / "watch" / "programs"
PACKAGES = (
    "requests",
    "urllib3",
    "boto3",
    "pymysql",
    "psycopg",
    "grequests",
    "gevent",
    "opentelemetry-sdk",
    "opentelemetry-distro",
)
OVERHEAD_TARGET = 0.05
MEMORY_TARGET_MB = 150.0
BUCKET = "watch-bench"

_MEMORY_CHILD = """
import json, resource, sys, time
from surge.watch.recorder import Recorder

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
n = int(sys.argv[1])
before = rss()
rec = Recorder()
started = time.perf_counter()
for i in range(n):
    t = float(i)
    if i % 4 == 3:
        rec.db_start(t)
        rec.db_end("db.query", "pymysql", "db:3306", "SELECT users", t, t + 0.5)
        continue
    rec.network_event("tcp", "socket", f"10.0.{i % 1000 // 250}.{i % 250}:80", t, t + 0.1)
    op = rec.http_start("urllib3", f"host{i % 1000}:80", "GET /items", t)
    rec.mark(op, "sent", t + 0.2)
    rec.mark(op, "first_byte", t + 0.4)
    rec.http_end(op, t + 0.5, status=200, size=1024)
elapsed = time.perf_counter() - started
data = rec.data()
print(json.dumps({"operations": rec.counted, "kept": len(rec.kept), "rss_grown": rss() - before,
                  "seconds": elapsed}))
"""


def _python() -> str:
    return sys.executable


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra or {})
    return env


def _run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``command`` and its children (``wait4``)."""
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            errors.seek(0)
            raise RuntimeError(f"{command} failed:\n{errors.read().decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime


def _ways(program: list[str]) -> dict[str, list[str]]:
    python = _python()
    instrument = shutil.which("opentelemetry-instrument", path=os.path.dirname(python))
    ways = {
        "bare": [python, *program],
        "python -m surge.watch": [python, "-m", "surge.watch", *program],
        "surge watch --": [python, "-m", "surge.cli", "watch", "--", python, *program],
    }
    if instrument is not None:
        ways["opentelemetry-instrument"] = [
            instrument,
            "--traces_exporter",
            "console",
            "--metrics_exporter",
            "none",
            "--logs_exporter",
            "none",
            "--service_name",
            "bench",
            python,
            *program,
        ]
    return ways


@contextlib.contextmanager
def _servers(quick: bool) -> Iterator[dict[str, Any]]:
    from surge.s3.minio import minio_server
    from surge.sim import background
    from surge.testing import mariadb

    keys = 2_000 if quick else 20_000
    with contextlib.ExitStack() as stack:
        progress("starting the simulated web, MariaDB and MinIO")
        sim = stack.enter_context(background())
        db = stack.enter_context(mariadb())
        minio = stack.enter_context(minio_server())
        import boto3
        from botocore.config import Config

        s3 = boto3.client(
            "s3",
            endpoint_url=minio.endpoint_url,
            aws_access_key_id=minio.access_key,
            aws_secret_access_key=minio.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, max_pool_connections=16),
        )
        s3.create_bucket(Bucket=BUCKET)
        progress(f"filling s3://{BUCKET} with {keys:,} keys")
        names = [f"logs/{i // 1000:02d}/{i:06d}.json" for i in range(keys)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=b"{}"), names))
        yield {
            "sim": sim,
            "db": db,
            "minio": minio,
            "keys": keys,
            "s3_env": {
                "AWS_ACCESS_KEY_ID": minio.access_key,
                "AWS_SECRET_ACCESS_KEY": minio.secret_key,
                "AWS_EC2_METADATA_DISABLED": "true",
            },
        }


def _programs(servers: dict[str, Any], quick: bool) -> dict[str, tuple[list[str], dict[str, str]]]:
    sim, db = servers["sim"], servers["db"]
    scale = 5 if quick else 1
    return {
        "PyMySQL connect per query": (
            [str(PROGRAMS / "mysql_connect_per_query.py"), db.url, str(200 // scale)],
            {},
        ),
        "boto3 bucket.objects.all()": (
            [str(PROGRAMS / "s3_boto3_listing.py"), servers["minio"].endpoint_url, BUCKET],
            servers["s3_env"],
        ),
        "requests in a loop": (
            [str(PROGRAMS / "requests_loop.py"), str(sim.http_port), str(500 // scale)],
            {},
        ),
        "grequests + pyOpenSSL": (
            [
                str(PROGRAMS / "grequests_pyopenssl.py"),
                str(sim.https_port),
                sim.cafile,
                str(50 // scale),
            ],
            {},
        ),
        "urllib3 pool of 2, 16 threads": (
            [str(PROGRAMS / "urllib3_pool.py"), str(sim.http_port), "2", str(40 // scale)],
            {},
        ),
    }


def _in_turns(
    name: str, ways: dict[str, list[str]], env: dict[str, str], repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float], dict[str, float]]:
    """Each way of one program run ``repeat`` times, in turns, after a warm-up
    run bare: (walls, CPUs, their medians)."""
    _run(ways["bare"], env)  # warm: caches, the server's first connections
    walls: dict[str, list[float]] = {way: [] for way in ways}
    cpus: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeat):
        for way, command in ways.items():
            progress(f"{name}: {way}")
            wall, cpu = _run(command, env)
            walls[way].append(wall)
            cpus[way].append(cpu)
    medians = {way: statistics.median(runs) for way, runs in walls.items()}
    cpu_medians = {way: statistics.median(runs) for way, runs in cpus.items()}
    return walls, cpus, medians, cpu_medians


def overhead(quick: bool, repeat: int) -> tuple[dict[str, Any], list[Target]]:
    results: dict[str, Any] = {}
    targets = []
    columns = [
        "program",
        "bare",
        "python -m surge.watch",
        "surge watch --",
        "opentelemetry-instrument",
    ]
    table = Table(
        f"wall time of each re-lived program, median of {repeat} (s; against bare)", columns
    )
    cpu_table = Table(f"CPU time of the same runs, median of {repeat} (s; against bare)", columns)
    with _servers(quick) as servers:
        for name, (program, extra) in _programs(servers, quick).items():
            env = _env(extra)
            ways = _ways(program)
            walls, cpus, medians, cpu_medians = _in_turns(name, ways, env, repeat)
            for into, values in ((table, medians), (cpu_table, cpu_medians)):
                bare = values["bare"]
                cells = [name]
                for way in columns[1:]:
                    if way not in values:
                        cells.append("n/a")
                    elif way == "bare":
                        cells.append(f"{bare:.2f}")
                    else:
                        cells.append(f"{values[way]:.2f} ({values[way] / bare - 1:+.1%})")
                into.add(*cells)
            bare = medians["bare"]
            results[name] = {
                "wall_s": walls,
                "cpu_s": cpus,
                "median_wall_s": medians,
                "median_cpu_s": cpu_medians,
                "argv": program,
            }
            in_process = medians["python -m surge.watch"] / bare - 1
            targets.append(
                Target(
                    f"overhead on {name} (python -m surge.watch)",
                    f"<= {OVERHEAD_TARGET:.0%}",
                    f"{in_process:+.1%}",
                    in_process <= OVERHEAD_TARGET,
                )
            )
        results["s3_keys"] = servers["keys"]
    table.print()
    cpu_table.note(
        "CPU: the program's process and its children (surge watch --: and the command's)"
    )
    cpu_table.print()
    return results, targets


#: Issue #44's loops, as a program each: argv[1] the server (a URL or a port),
#: argv[2] the count.
LOOPS = {
    "pymysql_queries": """
import sys
from urllib.parse import urlsplit
import pymysql
u = urlsplit(sys.argv[1])
conn = pymysql.connect(host=u.hostname, port=u.port, user=u.username, password=u.password,
                       database=u.path.lstrip("/"))
with conn.cursor() as cur:
    for i in range(int(sys.argv[2])):
        cur.execute("SELECT %s", (i,))
        cur.fetchone()
conn.close()
""",
    "psycopg_queries": """
import sys
import psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    for i in range(int(sys.argv[2])):
        conn.execute("SELECT %s", (i,)).fetchone()
""",
    "requests_keepalive": """
import sys
import requests
with requests.Session() as session:
    for i in range(int(sys.argv[2])):
        session.get(f"http://127.0.0.1:{sys.argv[1]}/item/{i}", timeout=10).content
""",
    "pymysql_connect_per_query": """
import sys
from urllib.parse import urlsplit
import pymysql
u = urlsplit(sys.argv[1])
for i in range(int(sys.argv[2])):
    conn = pymysql.connect(host=u.hostname, port=u.port, user=u.username, password=u.password,
                           database=u.path.lstrip("/"))
    with conn.cursor() as cur:
        cur.execute("SELECT %s", (i,))
        cur.fetchone()
    conn.close()
""",
}
LOOP_CPU_TARGET = 0.10


def loops(quick: bool, repeat: int) -> tuple[dict[str, Any], list[Target]]:
    from surge.sim import background
    from surge.testing import mariadb, postgresql

    scale = 10 if quick else 1
    results: dict[str, Any] = {}
    targets: list[Target] = []
    columns = ["loop", "bare", "python -m surge.watch", "opentelemetry-instrument"]
    walls_table = Table(f"issue #44's loops, wall, median of {repeat} (s; against bare)", columns)
    cpu_table = Table(f"the same runs, CPU, median of {repeat} (s; against bare)", columns)
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as scripts:
        progress("starting MariaDB, PostgreSQL and the simulated web")
        db = stack.enter_context(mariadb())
        pg = stack.enter_context(postgresql())
        sim = stack.enter_context(background())
        cases = {
            "3,000 queries, one PyMySQL connection": ("pymysql_queries", db.url, 3000),
            "3,000 queries, one psycopg connection": ("psycopg_queries", pg.url, 3000),
            "1,000 keep-alive GETs, one requests.Session": (
                "requests_keepalive",
                str(sim.http_port),
                1000,
            ),
            # 2,000, not the 10,000: PyMySQL builds a default SSL context
            # (the system's CA store loaded) at every connect, ~17 ms of CPU here,
            # so 10,000 would be three minutes a run
            "2,000 PyMySQL connect+query+close": ("pymysql_connect_per_query", db.url, 2000),
        }
        for name, (script, server, count) in cases.items():
            path = Path(scripts) / f"{script}.py"
            path.write_text(LOOPS[script])
            program = [str(path), server, str(count // scale)]
            ways = {k: v for k, v in _ways(program).items() if k != "surge watch --"}
            env = _env()
            walls, cpus, medians, cpu_medians = _in_turns(name, ways, env, repeat)
            for into, values in ((walls_table, medians), (cpu_table, cpu_medians)):
                bare = values["bare"]
                cells = [name, f"{bare:.2f}"]
                for way in columns[2:]:
                    cells.append(
                        f"{values[way]:.2f} ({values[way] / bare - 1:+.1%})"
                        if way in values
                        else "n/a"
                    )
                into.add(*cells)
            results[name] = {
                "wall_s": walls,
                "cpu_s": cpus,
                "median_wall_s": medians,
                "median_cpu_s": cpu_medians,
                "count": count // scale,
            }
            wall_over = medians["python -m surge.watch"] / medians["bare"] - 1
            cpu_over = cpu_medians["python -m surge.watch"] / cpu_medians["bare"] - 1
            targets.append(
                Target(
                    f"{name}: wall",
                    f"<= {OVERHEAD_TARGET:+.0%}",
                    f"{wall_over:+.1%}",
                    wall_over <= OVERHEAD_TARGET,
                )
            )
            targets.append(
                Target(
                    f"{name}: CPU",
                    f"<= {LOOP_CPU_TARGET:+.0%}",
                    f"{cpu_over:+.1%}",
                    cpu_over <= LOOP_CPU_TARGET,
                )
            )
    walls_table.print()
    cpu_table.note("CPU: the program's process and its children (wait4), start-up included")
    cpu_table.print()
    return results, targets


def memory(quick: bool) -> tuple[dict[str, Any], list[Target]]:
    n = 100_000 if quick else 1_000_000
    progress(f"feeding {n:,} operations to one recorder")
    done = subprocess.run(
        [_python(), "-c", _MEMORY_CHILD, str(n)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=900,
        check=True,
    )
    measured = json.loads(done.stdout)
    mb = measured["rss_grown"] / 1e6
    table = Table(
        "one recorder fed synthetic operations", ["operations", "kept", "RSS grown", "us/op"]
    )
    table.add(
        f"{measured['operations']:,}",
        f"{measured['kept']:,}",
        f"{mb:.1f} MB",
        f"{measured['seconds'] / measured['operations'] * 1e6:.2f}",
    )
    table.note("an operation: a TCP connect event and an HTTP request with its phases, or a query")
    table.print()
    counted = measured["operations"]
    target = Target(
        f"{counted:,} operations",
        f"< {MEMORY_TARGET_MB:.0f} MB",
        f"{mb:.1f} MB",
        mb < MEMORY_TARGET_MB,
    )
    return measured, [target]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one run each")
    parser.add_argument("--only", choices=("overhead", "memory", "loops"))
    parser.add_argument("--repeat", type=int, default=None, help="runs of each way (default 5)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 5)
    started = time.perf_counter()
    info = machine_info(PACKAGES)
    announce("surge watch's cost", info, args.quick)
    results: dict[str, Any] = {}
    targets: list[Target] = []
    if args.only in (None, "memory"):
        results["memory"], more = memory(args.quick)
        targets += more
    if args.only in (None, "overhead"):
        results["overhead"], more = overhead(args.quick, repeat)
        targets += more
    if args.only in (None, "loops"):
        results["loops"], more = loops(args.quick, repeat)
        targets += more
    print_targets(targets, args.quick)
    settings = {"quick": args.quick, "repeat": repeat, "only": args.only}
    name = "watch.json" if args.only is None else f"watch-{args.only}.json"
    out = Path(__file__).resolve().parent / "results" / name
    if args.quick:
        out = Path(tempfile.gettempdir()) / "surge-watch-bench-quick.json"
    write_json(out, payload("watch", info, settings, results, targets, started))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
