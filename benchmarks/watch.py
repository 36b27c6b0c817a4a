"""What ``surge watch`` costs a program, beside ``opentelemetry-instrument``.

Run it from the repository root::

    python benchmarks/watch.py            # ~5 minutes (the S3 bucket is filled once)
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

Wall time of the whole process, start-up included; the median of the runs.

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


def _wall(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{done.stderr.decode(errors='replace')[-2000:]}")
    return wall


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
            [str(PROGRAMS / "mysql_connect_per_query.py"), db.url, str(300 // scale)],
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


def overhead(quick: bool, repeat: int) -> tuple[dict[str, Any], list[Target]]:
    results: dict[str, Any] = {}
    targets = []
    table = Table(
        f"wall time of each re-lived program, median of {repeat} (s; overhead against bare)",
        ["program", "bare", "python -m surge.watch", "surge watch --", "opentelemetry-instrument"],
    )
    with _servers(quick) as servers:
        for name, (program, extra) in _programs(servers, quick).items():
            env = _env(extra)
            ways = _ways(program)
            _wall(ways["bare"], env)  # warm: caches, the server's first connections
            walls: dict[str, list[float]] = {way: [] for way in ways}
            for _ in range(repeat):
                for way, command in ways.items():
                    progress(f"{name}: {way}")
                    walls[way].append(_wall(command, env))
            medians = {way: statistics.median(runs) for way, runs in walls.items()}
            bare = medians["bare"]
            cells = [name]
            for way in table.columns[1:]:
                if way not in medians:
                    cells.append("n/a")
                elif way == "bare":
                    cells.append(f"{bare:.2f}")
                else:
                    cells.append(f"{medians[way]:.2f} ({medians[way] / bare - 1:+.1%})")
            table.add(*cells)
            results[name] = {"runs": walls, "median_s": medians, "argv": program}
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
    target = Target(
        f"{n:,} operations", f"< {MEMORY_TARGET_MB:.0f} MB", f"{mb:.1f} MB", mb < MEMORY_TARGET_MB
    )
    return measured, [target]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one run each")
    parser.add_argument("--only", choices=("overhead", "memory"))
    parser.add_argument("--repeat", type=int, default=None, help="runs of each way (default 3)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
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
    print_targets(targets, args.quick)
    settings = {"quick": args.quick, "repeat": repeat, "only": args.only}
    out = Path(__file__).resolve().parent / "results" / "watch.json"
    if args.quick:
        out = Path(tempfile.gettempdir()) / "surge-watch-bench-quick.json"
    write_json(out, payload("watch", info, settings, results, targets, started))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
