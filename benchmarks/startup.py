"""Issue #38's targets: how long a command takes from exec to its first
request's SYN, beside curl, s5cmd, the AWS CLI and the interpreter's own
floor; and the whole-process bars start-up decides.

Run it from the repository root::

    python benchmarks/startup.py                  # both sections (~5 minutes on 2 cores)
    python benchmarks/startup.py --only syn --runs 20
    python benchmarks/startup.py --only bars --quick
    python benchmarks/startup.py --only syn --baseline /tmp/old/src   # + an earlier surge

Section "syn".  A listening socket on 127.0.0.1, served by a thread of this
process that sits in ``accept()``, takes ``time.monotonic_ns()`` when a
connection arrives; the command was started by ``os.posix_spawn`` right after
this process read the same clock (CLOCK_MONOTONIC: one clock for every
process of the machine, so the two readings compare).  On loopback the
handshake completes within microseconds of the SYN, so "to accept" is "to the
SYN" plus the wake-up of the accepting thread, the same for every peer.  The
server answers each request (a short 200 for a URL, a ListBucketResult of
three keys for a bucket) and closes, so each command ends normally; a run
counts only if it exits 0 and its request reached the server.  Peers, one
process each, interleaved over ``--runs`` rounds (the order turned by one a
round), best and median:

* ``surge fetch FILE`` (one URL in FILE, records to /dev/null) and
  ``surge s3 ls s3://bucket/ --endpoint-url ...``, the console script pip made;
* ``curl -s URL`` and ``s5cmd ls`` (Go): what a compiled client costs;
* ``aws s3 ls`` (the AWS CLI, Python on botocore), when it is installed;
* the interpreter: ``python -c "import asyncio, ssl"`` (the issue's floor, to
  its exit: it sends nothing), ``python -c pass``, and "asyncio client floor":
  ``import asyncio, ssl, uvloop`` then a blocking connect, to the SYN - the
  least any asyncio client on this interpreter can do before its first SYN.

``--baseline DIR`` (another version's ``src/``, e.g. ``git archive main src``)
adds that version's two commands, run as ``python -c`` with DIR first on
``sys.path``: before and after, in the same run.

Targets: each surge command's median <= 60 ms; where the machine's floor is
above that, within 10% of the asyncio client floor measured in the same run
(the project's rule for a target below the machine's floor).

Section "bars" (MinIO, ``surge.s3.minio``, data kept in
``${XDG_CACHE_HOME:-~/.cache}/surge/minio-bench`` as ``benchmarks/s3.py``
keeps it): whole processes, wall from spawn to exit, interleaved ``--rounds`` (7)
times, medians; the copies after all the listings, each peer once untimed
first:

* ``surge s3 ls --recursive`` of the 20,000 keys of ``flat-20000`` against
  boto3's ``bucket.objects.all()`` in a ``python -c`` process (every key
  printed by both; counts checked).  Target: >= 5x.
* ``surge s3 cp`` of one 256 MB object to a file against ``s5cmd cp`` (after
  ``sync``, the file deleted after each run; sizes checked).  Target: surge's
  wall <= 1.1x s5cmd's.

Results: ``benchmarks/results/startup.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PROXY_VARIABLES,
    Table,
    Target,
    announce,
    fmt_s,
    machine_info,
    parse_sections,
    payload,
    print_targets,
    surge_command,
    write_json,
)

SECTIONS = ["syn", "bars"]
TARGET_SYN_S = 0.060
FLOOR_SLACK = 1.10  # within 10% of a measured floor counts as met
LS_BAR = 5.0
CP_BAR = 1.10
BUCKET = "bucket"
LIST_BUCKET = "flat-20000"
BIG_BUCKET = "startup-big"
BIG_KEY = "big-256mb"
HEAD_LIMIT = 64 * 1024  # a request head the server reads at most


def _listing_xml(bucket: str) -> bytes:
    contents = "".join(
        f"<Contents><Key>key-{i}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
        f'<ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><Size>{i}</Size>'
        "<StorageClass>STANDARD</StorageClass></Contents>"
        for i in range(3)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{bucket}</Name><Prefix></Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>"
        f"<IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
    ).encode()


class FirstConnection:
    """A listener on 127.0.0.1 that notes (CLOCK_MONOTONIC, ns) when the first
    connection since :meth:`arm` arrives, and answers every request."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port: int = self._socket.getsockname()[1]
        self.first_ns: int | None = None
        self.requests: list[str] = []
        self._thread = threading.Thread(target=self._serve, name="first-connection", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        self.first_ns = None
        self.requests = []

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:  # closed
                return
            arrived = time.monotonic_ns()  # first, before anything else
            if self.first_ns is None:
                self.first_ns = arrived
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        head = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.requests.append(line)
            method, _, rest = line.partition(" ")
            target = rest.rpartition(" ")[0]
            path = target.split("?", 1)[0]
            if path.strip("/") == BUCKET:
                body, kind = _listing_xml(BUCKET), "application/xml"
            else:
                body, kind = b"ok\n", "text/plain"
            response = (
                f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode() + (b"" if method == "HEAD" else body)
            conn.sendall(response)

    def close(self) -> None:
        self._socket.close()


def spawn(
    argv: list[str], env: dict[str, str], limit_s: float, stdout: str = os.devnull
) -> tuple[int, int, int, float]:
    """Start ``argv`` by posix_spawn and reap it: (start ns, end ns, exit status,
    CPU seconds).  Killed at ``limit_s``."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    started = time.monotonic_ns()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    killer = threading.Timer(limit_s, _kill_group, (pid,))
    killer.start()
    try:
        _, status, usage = os.wait4(pid, 0)
    finally:
        killer.cancel()
    ended = time.monotonic_ns()
    return started, ended, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env.update(
        AWS_ACCESS_KEY_ID="startup-key",
        AWS_SECRET_ACCESS_KEY="startup-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    return env


def _tool(name: str) -> str | None:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def syn_peers(port: int, url_file: str, baseline: str | None) -> dict[str, list[str] | None]:
    """name -> argv (None: not installed).  Every argv starts with a full path.
    ``baseline``: a directory holding another version's ``surge`` package (an
    earlier commit's ``src/``), whose two commands run too, from ``python -c``."""
    url = f"http://127.0.0.1:{port}/"
    endpoint = f"http://127.0.0.1:{port}"
    surge = surge_command()
    curl, s5cmd, aws = _tool("curl"), _tool("s5cmd"), _tool("aws")
    python = sys.executable
    connect = (
        "import asyncio, ssl, uvloop, socket; "
        f"socket.create_connection(('127.0.0.1', {port})).close()"
    )
    fetch = ["fetch", url_file, "-q"]
    ls = ["s3", "ls", f"s3://{BUCKET}/", "--endpoint-url", endpoint]
    old = None
    if baseline is not None:
        run = f"import sys; sys.path.insert(0, {baseline!r}); from surge.cli import main; main()"
        old = [python, "-c", run]
    return {
        "surge fetch": [*surge, *fetch],
        "surge s3 ls": [*surge, *ls],
        "surge fetch, baseline": [*old, *fetch] if old else None,
        "surge s3 ls, baseline": [*old, *ls] if old else None,
        "curl": [curl, "-s", "-o", os.devnull, url] if curl else None,
        "s5cmd ls": [s5cmd, "--endpoint-url", endpoint, "ls", f"s3://{BUCKET}/"] if s5cmd else None,
        "aws s3 ls": [aws, "s3", "ls", f"s3://{BUCKET}/", "--endpoint-url", endpoint]
        if aws
        else None,
        "asyncio client floor": [python, "-c", connect],
        'python -c "import asyncio, ssl"': [python, "-c", "import asyncio, ssl"],
        "python -c pass": [python, "-c", "pass"],
    }


#: The peers that send nothing: timed to their exit.
NO_REQUEST = ('python -c "import asyncio, ssl"', "python -c pass")


def _turned(names: list[str], round_: int) -> list[str]:
    k = round_ % len(names)
    return names[k:] + names[:k]


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "best": min(values) if values else None,
        "median": statistics.median(values) if values else None,
        "all": values,
    }


def run_syn(runs: int, quick: bool, baseline: str | None) -> tuple[dict[str, Any], list[Target]]:
    listener = FirstConnection()
    env = _environment()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="surge-startup-") as tmp:
        url_file = os.path.join(tmp, "one-url.txt")
        Path(url_file).write_text(f"http://127.0.0.1:{listener.port}/\n")
        every = syn_peers(listener.port, url_file, baseline)
        peers = {k: v for k, v in every.items() if v is not None}
        missing = [k for k, v in every.items() if v is None and "baseline" not in k]
        names = list(peers)
        syn: dict[str, list[float]] = {n: [] for n in names}
        wall: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        failed: dict[str, list[str]] = {n: [] for n in names}
        requests: dict[str, list[str]] = {}
        for name in names:  # one untimed run each: files in the page cache, bytecode written
            spawn(peers[name], env, 60.0)
        for round_ in range(runs):
            for name in _turned(names, round_):
                listener.arm()
                started, ended, status, used = spawn(peers[name], env, 60.0)
                first = listener.first_ns
                if status != 0:
                    failed[name].append(f"exit {status}")
                    continue
                if name not in NO_REQUEST:
                    if first is None:
                        failed[name].append("no connection")
                        continue
                    syn[name].append((first - started) / 1e9)
                    requests.setdefault(name, list(listener.requests))
                wall[name].append((ended - started) / 1e9)
                cpu[name].append(used)
    listener.close()
    table = Table(
        f"exec to the first request's SYN, {runs} runs each, interleaved",
        ["command", "SYN best", "SYN median", "exit median", "CPU median", "failed"],
    )
    for name in names:
        s, w, c = _stats(syn[name]), _stats(wall[name]), _stats(cpu[name])
        results[name] = {
            "argv": peers[name],
            "syn_s": s,
            "wall_s": w,
            "cpu_s": c,
            "failed": failed[name],
            "requests": requests.get(name, []),
        }
        table.add(
            name,
            fmt_s(s["best"]),
            fmt_s(s["median"]),
            fmt_s(w["median"]),
            fmt_s(c["median"]),
            len(failed[name]),
        )
    table.note("SYN: from posix_spawn to the server's accept (CLOCK_MONOTONIC in both)")
    table.note("exit: from posix_spawn to the process's end (what a shell loop pays)")
    for name in missing:
        table.note(f"{name}: not installed, not run")
    table.print()
    floor = results["asyncio client floor"]["syn_s"]["median"]
    targets = []
    for name in ("surge fetch", "surge s3 ls"):
        median = results[name]["syn_s"]["median"]
        if median is None or floor is None:
            targets.append(Target(f"{name}: exec to SYN", "<= 60 ms", "no runs", None))
            continue
        met = median <= TARGET_SYN_S or median <= floor * FLOOR_SLACK
        targets.append(
            Target(
                f"{name}: exec to SYN (median)",
                f"<= 60 ms, or within 10% of the asyncio client floor ({fmt_s(floor)})",
                f"{fmt_s(median)} ({median / floor:.2f}x the floor)",
                None if quick else met,
            )
        )
    return results, targets


# -- the bars, on MinIO -----------------------------------------------------------------


def _ensure_big(endpoint: str, access_key: str, secret_key: str, size: int) -> None:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
    )
    with contextlib.suppress(s3.exceptions.ClientError):
        if s3.head_object(Bucket=BIG_BUCKET, Key=BIG_KEY)["ContentLength"] == size:
            return
    with contextlib.suppress(s3.exceptions.ClientError):
        s3.create_bucket(Bucket=BIG_BUCKET)
    with tempfile.NamedTemporaryFile() as f:
        block = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(block)
        f.flush()
        s3.upload_file(f.name, BIG_BUCKET, BIG_KEY)


BOTO3_ALL = (
    "import os, sys, boto3; "
    "bucket = boto3.resource('s3', endpoint_url=os.environ['BENCH_ENDPOINT']).Bucket(sys.argv[1]); "
    "sys.stdout.writelines(o.key + '\\n' for o in bucket.objects.all())"
)


def run_bars(rounds: int, quick: bool) -> tuple[dict[str, Any], list[Target]]:
    from s3 import ACCESS_KEY, SECRET_KEY, ensure_bucket
    from surge.s3.minio import cache_dir, minio_server

    big = (16 if quick else 256) << 20
    results: dict[str, Any] = {}
    with (
        minio_server(
            cache_dir() / "minio-bench", access_key=ACCESS_KEY, secret_key=SECRET_KEY
        ) as server,
        tempfile.TemporaryDirectory(prefix="surge-startup-") as tmp,
    ):
        endpoint = server.endpoint_url
        ensure_bucket(endpoint, LIST_BUCKET)
        _ensure_big(endpoint, ACCESS_KEY, SECRET_KEY, big)
        env = _environment()
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, BENCH_ENDPOINT=endpoint
        )
        s5cmd = _tool("s5cmd")
        surge = surge_command()
        out = os.path.join(tmp, "out")
        at = ["--endpoint-url", endpoint]
        quiet = ["--only-show-errors", "--no-progress"]
        ls = {
            "surge s3 ls": [*surge, "s3", "ls", f"s3://{LIST_BUCKET}", "--recursive", *at],
            "boto3 objects.all()": [sys.executable, "-c", BOTO3_ALL, LIST_BUCKET],
        }
        cp = {
            "surge s3 cp": [*surge, "s3", "cp", f"s3://{BIG_BUCKET}/{BIG_KEY}", out, *at, *quiet],
        }
        if s5cmd:
            cp["s5cmd cp"] = [s5cmd, "--endpoint-url", endpoint, "cp"]
            cp["s5cmd cp"] += [f"s3://{BIG_BUCKET}/{BIG_KEY}", out]
        walls: dict[str, list[float]] = {n: [] for n in (*ls, *cp)}
        cpus: dict[str, list[float]] = {n: [] for n in walls}
        checks: dict[str, list[str]] = {n: [] for n in walls}
        for argv in ls.values():  # warm: MinIO's first listing, bytecode
            spawn(argv, env, 300.0, stdout=out)
        for round_ in range(rounds):
            for name in _turned(list(ls), round_):
                _, _, status, _ = _timed(name, ls[name], env, out, walls, cpus)
                with open(out, "rb") as listed:
                    lines = sum(1 for _ in listed)
                if status != 0 or lines != 20_000:
                    checks[name].append(f"exit {status}, {lines} lines")
        # The copies after all the listings (a copy right after boto3's 3 s
        # listing ran slower, whoever made it), each peer once untimed first.
        for argv in cp.values():
            os.sync()
            spawn(argv, env, 300.0)
            _remove(out)
        for round_ in range(rounds):
            for name in _turned(list(cp), round_):
                os.sync()  # nobody pays for the dirty pages of the run before
                _, _, status, _ = _timed(name, cp[name], env, os.devnull, walls, cpus)
                size = os.path.getsize(out) if os.path.exists(out) else -1
                if status != 0 or size != big:
                    checks[name].append(f"exit {status}, {size} bytes")
                _remove(out)
    table = Table(
        f"whole processes on MinIO, {rounds} rounds, interleaved",
        ["command", "wall median", "best", "worst", "CPU median", "bad runs"],
    )
    for name, values in walls.items():
        results[name] = {"wall_s": _stats(values), "cpu_s": _stats(cpus[name]), "bad": checks[name]}
        table.add(
            name,
            fmt_s(statistics.median(values)),
            fmt_s(min(values)),
            fmt_s(max(values)),
            fmt_s(statistics.median(cpus[name])),
            len(checks[name]),
        )
    table.note(f"ls: the 20,000 keys of {LIST_BUCKET}, every key printed, counts checked")
    table.note(f"cp: one {big >> 20} MB object to a file, after sync; its size checked")
    table.note("CPU: the client's (user + system, its threads too), not MinIO's")
    table.print()
    med = {n: statistics.median(v) for n, v in walls.items()}
    ratio = med["boto3 objects.all()"] / med["surge s3 ls"]
    targets = [
        Target(
            "surge s3 ls of 20,000 keys vs boto3 objects.all(), whole processes",
            f">= {LS_BAR:g}x",
            f"{ratio:.2f}x ({fmt_s(med['surge s3 ls'])} vs {fmt_s(med['boto3 objects.all()'])})",
            None if quick else ratio >= LS_BAR,
        )
    ]
    if "s5cmd cp" in med:
        cp_ratio = med["surge s3 cp"] / med["s5cmd cp"]
        targets.append(
            Target(
                f"surge s3 cp of {big >> 20} MB vs s5cmd cp, wall",
                f"<= {CP_BAR:g}x",
                f"{cp_ratio:.2f}x ({fmt_s(med['surge s3 cp'])} vs {fmt_s(med['s5cmd cp'])})",
                None if quick else cp_ratio <= CP_BAR,
            )
        )
    return results, targets


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _timed(
    name: str,
    argv: list[str],
    env: dict[str, str],
    stdout: str,
    walls: dict[str, list[float]],
    cpus: dict[str, list[float]],
) -> tuple[int, int, int, float]:
    started, ended, status, cpu = spawn(argv, env, 300.0, stdout=stdout)
    walls[name].append((ended - started) / 1e9)
    cpus[name].append(cpu)
    return started, ended, status, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help=f"sections, comma-separated: {', '.join(SECTIONS)}")
    parser.add_argument("--runs", type=int, default=10, help="runs of each SYN peer (10)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of the bars (7)")
    parser.add_argument("--quick", action="store_true", help="3 runs, a 16 MB object")
    parser.add_argument(
        "--baseline", help="another version's src/ (holding surge/): its commands run too"
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "startup.json"))
    args = parser.parse_args()
    sections = parse_sections(parser, args.only, SECTIONS)
    runs = 3 if args.quick else max(1, min(args.runs, 100))
    rounds = 2 if args.quick else max(1, min(args.rounds, 20))
    started = time.perf_counter()
    info = machine_info(["click", "uvloop", "awscli", "botocore", "boto3", "s5cmd"])
    announce("surge start-up", info, args.quick)
    results: dict[str, Any] = {}
    targets: list[Target] = []
    if "syn" in sections:
        results["syn"], found = run_syn(runs, args.quick, args.baseline)
        targets += found
    if "bars" in sections:
        results["bars"], found = run_bars(rounds, args.quick)
        targets += found
    print_targets(targets, args.quick)
    settings = {"runs": runs, "rounds": rounds, "sections": sections, "quick": args.quick}
    settings["baseline"] = args.baseline
    path = write_json(args.out, payload("startup", info, settings, results, targets, started))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
