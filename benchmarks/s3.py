"""Benchmark ``surge s3 ls`` against the S3 listers people use today, on MinIO.

Run it from the repository root::

    python benchmarks/s3.py                       # 7,500 and 100,000 objects, direct and at 20 ms
    python benchmarks/s3.py --sizes 7500 --latency-ms 20
    python benchmarks/s3.py --only surge,boto3_paginator --out /tmp/s3.json
    python benchmarks/s3.py --server moto         # the fan-out against --parallel 1 on moto
    python benchmarks/s3.py --sizes 100000 --rounds 3 --only surge,surge_seq,boto3_resource
    python benchmarks/s3.py --baseline /tmp/old/src ...   # + surge_base, surge_seq_base

Nothing leaves the machine. A MinIO server (:mod:`surge.s3.minio`; .ci/run
builds it) runs on 127.0.0.1 with its data in ``${XDG_CACHE_HOME:-~/.cache}/
surge/minio-bench``, so the buckets are filled once (parallel PUTs from boto3 in
threads) and reused by later runs:

* ``flat-7500``: 7,500 objects ``obj-0000000`` ... in one flat key space (the
  size of the boto3 listing measurements that started issue #5);
* ``nested-100000``: 100,000 objects in 100 prefixes of 1,000 (``p042/obj-...``).

Each lister runs in a process of its own, so none inherits another's warm
state, and reports its wall time and CPU (user + system, every thread of its
process; a Go binary's from the parent's ``RUSAGE_CHILDREN``) for the listing
alone, not the interpreter's start-up or imports, plus the count and a sha256
of its sorted keys: every lister must return boto3's key set exactly. One
untimed listing warms MinIO up before each table, so no lister pays for the
server's cold start.

"20 ms" runs go through a TCP proxy in a process of its own that delays every
chunk by 20 ms in each direction (netem is not available in this kernel), as a
client in another region of a cloud would see.

The listers: surge (``surge.s3.list_pages``, 16 requests in flight, and
``--parallel 1``: pipelined pages in key order), ``surge s3 ls`` through the
command line (output to a file), boto3's resource ``bucket.objects.all()`` and
its ListObjectsV2 paginator, obstore (``obstore.list``, 1,000 a chunk) and
obstore fanned out by prefix (``list_with_delimiter`` then 16 prefixes listed at
once on asyncio), and s5cmd (``s5cmd --json ls 's3://bucket/*'``).
Tables on stdout, everything in ``benchmarks/results/s3.json``. ``--rounds N``
runs every lister N times, interleaved (the order turned round every other
round), and reports each one's median round with every round's wall time: on
a shared machine one round says little. ``--baseline DIR`` (a directory holding
another version's ``surge`` package, e.g. a copy of an earlier commit's
``src/``) adds ``surge_base`` and ``surge_seq_base``: the same two listers on
that code, in the same run (on MinIO and on moto).

``--server moto``: moto's server (``ThreadedMotoServer``, in a ``python -c``
process of its own, so it does not share the lister's interpreter) answers
about one request at a time and spends each on the whole bucket (it walks and
sorts every key under the prefix, whatever max-keys or start-after), so a fan-out
that adds requests adds their time (issue #19: ``--parallel 16`` took 7.07 s
against 3.84 s for ``--parallel 1``; the plan must cost at most ~10% over a
sequential listing). moto keeps its buckets in memory: ``flat-20000`` (20,000
keys ``obj-0000000`` ...) and ``nested-20000`` (20 prefixes of 1,000) are
filled on every run (``--buckets`` picks some). Only surge (16 and ``--parallel 1``, interleaved for
``--rounds``, 3 by default, the order swapped every round; best and median
wall time, requests from ``ListOptions.stats``) and boto3's paginator (once,
the reference key set) are listed, every bucket directly and at
``--latency-ms``. moto's own CPU time a listing is measured too (from
/proc: a server that works one request at a time costs that much whatever the
load), and the machine's load average as each run ends (the box is shared).
Everything in ``benchmarks/results/s3-moto.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Table, machine_info, process_cpu, stop_process, write_json

ACCESS_KEY = "surgebench"
SECRET_KEY = "surgebench-secret-key"  # a throwaway server on 127.0.0.1 only
REGION = "us-east-1"
PEERS = [
    "surge",
    "surge_seq",
    "surge_cli",
    "boto3_resource",
    "boto3_paginator",
    "obstore",
    "obstore_fanout",
    "s5cmd",
]
BUCKETS = {7500: "flat-7500", 100_000: "nested-100000"}
MOTO_BUCKETS = ["flat-20000", "nested-20000"]
MOTO_PEERS = ["surge", "surge_seq", "boto3_paginator"]
MAX_ROUNDS = 20
#: surge's listers, and the same run with the code of ``--baseline`` (``_base``).
SURGE_PEERS = ("surge", "surge_seq", "surge_base", "surge_seq_base")


def bucket_keys(bucket: str) -> list[str]:
    """``flat-N``: N keys ``obj-0000000`` ...; ``nested-N``: N/1,000 prefixes of 1,000."""
    kind, size = bucket.rsplit("-", 1)
    if kind == "nested":
        return [f"p{p:03d}/obj-{i:04d}" for p in range(int(size) // 1000) for i in range(1000)]
    return [f"obj-{i:07d}" for i in range(int(size))]


# -- the listers, each run in a child process ---------------------------------------------


def _listing(
    peer: str, endpoint: str, bucket: str
) -> tuple[list[str], float, float, dict[str, Any]]:
    """(keys, wall seconds, CPU seconds, surge's Stats or {}) of one listing by ``peer``."""
    url = f"s3://{bucket}"
    if peer in SURGE_PEERS:
        from surge.loops import new_event_loop
        from surge.s3 import Credentials, ListOptions, list_pages

        options = ListOptions(
            parallel=1 if peer.startswith("surge_seq") else 16,
            endpoint_url=endpoint,
            region=REGION,  # as every peer is given it
            credentials=Credentials(ACCESS_KEY, SECRET_KEY),
        )

        async def run_surge() -> list[str]:
            keys: list[str] = []
            async for page in list_pages(url, options=options):
                keys.extend([o.key for o in page])  # type: ignore[union-attr]
            return keys

        loop = new_event_loop()
        cpu, wall = time.process_time(), time.perf_counter()
        keys = loop.run_until_complete(run_surge())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return keys, wall, cpu, dataclasses.asdict(options.stats)
    if peer.startswith("boto3"):
        import boto3
        from botocore.config import Config

        kwargs: dict[str, Any] = dict(
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}),
        )
        cpu, wall = time.process_time(), time.perf_counter()
        if peer == "boto3_resource":
            keys = [o.key for o in boto3.resource("s3", **kwargs).Bucket(bucket).objects.all()]
        else:
            paginator = boto3.client("s3", **kwargs).get_paginator("list_objects_v2")
            keys = []
            for page in paginator.paginate(Bucket=bucket):
                keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys, time.perf_counter() - wall, time.process_time() - cpu, {}
    if peer.startswith("obstore"):
        import obstore
        from obstore.store import S3Store

        cpu, wall = time.process_time(), time.perf_counter()
        store = S3Store(
            bucket,
            endpoint=endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region=REGION,
            virtual_hosted_style_request=False,
            client_options={"allow_http": True},
        )
        if peer == "obstore":
            keys = []
            for chunk in obstore.list(store, chunk_size=1000):
                keys.extend(o["path"] for o in chunk)
        else:

            async def fan_out() -> list[str]:
                top = await obstore.list_with_delimiter_async(store)
                keys = [o["path"] for o in top["objects"]]
                gate = asyncio.Semaphore(16)

                async def one(prefix: str) -> list[str]:
                    async with gate:
                        found = []
                        async for chunk in obstore.list(store, prefix, chunk_size=1000):
                            found.extend(o["path"] for o in chunk)
                        return found

                for found in await asyncio.gather(*(one(p) for p in top["common_prefixes"])):
                    keys.extend(found)
                return keys

            keys = asyncio.run(fan_out())
        return keys, time.perf_counter() - wall, time.process_time() - cpu, {}
    raise ValueError(f"unknown peer {peer}")


def _external(peer: str, endpoint: str, bucket: str, workdir: Path) -> dict[str, Any]:
    """surge's CLI and s5cmd, run as commands: wall and CPU from outside."""
    env = dict(os.environ)
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION=REGION)
    bin_dir = Path(sys.executable).parent
    out = workdir / f"{peer}.out"
    if peer == "surge_cli":
        command = [str(bin_dir / "surge"), "s3", "ls", f"s3://{bucket}", "--recursive"]
        command += ["--endpoint-url", endpoint]
    else:
        command = [str(bin_dir / "s5cmd"), "--endpoint-url", endpoint, "--json"]
        command += ["ls", f"s3://{bucket}/*"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    with open(out, "wb") as f:
        subprocess.run(command, stdout=f, env=env, check=True)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    keys = []
    prefix = f"s3://{bucket}/"
    with open(out, encoding="utf-8") as f:
        for line in f:
            if peer == "surge_cli":
                keys.append(line.rstrip("\n").split(maxsplit=3)[3])
            else:
                keys.append(json.loads(line)["key"].removeprefix(prefix))
    out.unlink()
    return _summary(keys, wall, cpu)


def _summary(keys: list[str], wall: float, cpu: float) -> dict[str, Any]:
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()
    return {
        "objects": len(keys),
        "unique": len(set(keys)),
        "sha256": digest,
        "wall": wall,
        "cpu": cpu,
    }


def child_main(peer: str, endpoint: str, bucket: str) -> None:
    keys, wall, cpu, stats = _listing(peer, endpoint, bucket)
    summary = _summary(keys, wall, cpu)
    if stats:
        summary["stats"] = stats
        summary["requests"] = stats["requests"]
    print(json.dumps(summary))


def run_peer(peer: str, endpoint: str, bucket: str, workdir: Path) -> dict[str, Any]:
    if peer in ("surge_cli", "s5cmd"):
        return _external(peer, endpoint, bucket, workdir)
    command = [sys.executable, __file__, "child", peer, endpoint, bucket]
    env = None
    if peer.endswith("_base"):
        # The same lister on the code of --baseline (another checkout's src/),
        # found before the installed one.
        baseline = os.environ["SURGE_BENCH_BASELINE"]
        env = {**os.environ, "PYTHONPATH": baseline + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{peer} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A lister's rounds on MinIO: the round of median wall time (its keys, CPU,
    requests), with every round's wall time and the rounds themselves."""
    ordered = sorted(results, key=lambda r: r["wall"])
    median = dict(ordered[(len(ordered) - 1) // 2])
    median["walls"] = [r["wall"] for r in results]
    median["wall_best"] = ordered[0]["wall"]
    median["rounds"] = results
    # every round's keys must be boto3's, not only the median's
    if any(r["sha256"] != median["sha256"] for r in results):
        median["sha256"] = "rounds differ"
    return median


# -- the delay proxy -----------------------------------------------------------------------


async def _proxy(listen_port: int, target_port: int, delay: float) -> None:
    loop = asyncio.get_running_loop()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while data := await reader.read(1 << 16):
                queue.put_nowait((loop.time() + delay, data))
        except ConnectionError:
            pass  # the other side went away: deliver what is queued, then close
        queue.put_nowait((loop.time() + delay, b""))
        with contextlib.suppress(ConnectionError):
            await sender

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(delay)  # the SYN's trip: a connection costs a round trip too
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, backlog=1024)
    async with server:
        await server.serve_forever()


def start_proxy(target_port: int, delay: float) -> tuple[subprocess.Popen[bytes], int]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, __file__, "proxy", str(port), str(target_port), str(delay)]
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the delay proxy did not start")


# -- moto's server -------------------------------------------------------------------------

# Runs until its stdin closes (this process ended, however) or it is terminated.
_MOTO_SERVER = """
import logging
import sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()
server.stop()
"""


@contextlib.contextmanager
def moto_server(timeout: float = 60.0) -> Any:
    """moto's server on 127.0.0.1, in a ``python -c`` process of its own: (endpoint URL,
    port, process id)."""
    import selectors

    process = subprocess.Popen(
        [sys.executable, "-c", _MOTO_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                raise RuntimeError(f"moto's server did not start in {timeout:g} s")
        line = process.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"moto's server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line)}", int(line), process.pid
    finally:
        stop_process(process)


# -- filling the buckets ------------------------------------------------------------------


def ensure_bucket(endpoint: str, bucket: str) -> str:
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32),
    )
    try:
        s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError:
        s3.create_bucket(Bucket=bucket)
    present = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        present.update(o["Key"] for o in page.get("Contents", []))
    missing = [k for k in bucket_keys(bucket) if k not in present]
    if missing:
        print(f"filling {bucket}: {len(missing):,} objects ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b"x"), missing))
        print(f"  done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return bucket


# -- the run -------------------------------------------------------------------------------


LABELS = {
    "surge": "surge parallel=16",
    "surge_seq": "surge parallel=1",
    "surge_base": "baseline parallel=16",
    "surge_seq_base": "baseline parallel=1",
    "boto3_paginator": "boto3 paginator",
}
#: The issue's bound: the fan-out may cost at most about this much over --parallel 1.
MOTO_BOUND = 1.10


def _moto_rows(bucket: str, latency: float, runs: dict[str, list[dict[str, Any]]]) -> Any:
    """Best and median of each lister's rounds, its keys against boto3's."""
    references = runs.get("boto3_paginator")
    reference = references[0] if references else None
    rows: dict[str, dict[str, Any]] = {}
    for peer, results in runs.items():
        walls = [r["wall"] for r in results]
        same = reference is None or all(
            r["sha256"] == reference["sha256"] and r["unique"] == r["objects"] for r in results
        )
        rows[peer] = {
            "rounds": results,
            "wall_best": min(walls),
            "wall_median": statistics.median(walls),
            "cpu_median": statistics.median(r["cpu"] for r in results),
            "server_cpu_median": statistics.median(r.get("server_cpu", 0.0) for r in results),
            "requests": [r.get("requests") for r in results],
            "objects": results[0]["objects"],
            "same_keys_as_boto3": same,
        }
    seq, fan = rows.get("surge_seq"), rows.get("surge")
    ratio = None
    if seq and fan:
        ratio = {
            "best": fan["wall_best"] / seq["wall_best"],
            "median": fan["wall_median"] / seq["wall_median"],
            "server_cpu_median": fan["server_cpu_median"] / max(seq["server_cpu_median"], 1e-9),
            "rounds": [
                f["wall"] / q["wall"] for f, q in zip(fan["rounds"], seq["rounds"], strict=True)
            ],
        }
    table = Table(
        f"{bucket} on moto, {latency:g} ms each way, {len(next(iter(runs.values())))} rounds",
        [
            "lister",
            "wall best s",
            "wall median s",
            "each round s",
            "requests",
            "CPU s (median)",
            "moto CPU s (median)",
            "vs parallel=1 (median)",
            "keys",
        ],
    )
    for peer, r in rows.items():
        requests = sorted({n for n in r["requests"] if n is not None})
        table.add(
            LABELS.get(peer, peer),
            f"{r['wall_best']:.2f}",
            f"{r['wall_median']:.2f}",
            " / ".join(f"{x['wall']:.2f}" for x in r["rounds"]),
            "/".join(map(str, requests)) or "-",
            f"{r['cpu_median']:.2f}",
            f"{r['server_cpu_median']:.2f}",
            f"{r['wall_median'] / seq['wall_median']:.2f}x" if seq else "",
            f"{r['objects']:,} {'=' if r['same_keys_as_boto3'] else 'DIFFERENT'}",
        )
    if ratio:
        table.note(
            f"parallel=16 / parallel=1: best {ratio['best']:.2f}x, median {ratio['median']:.2f}x"
            f" (bound: {MOTO_BOUND:.2f}x, issue #19); moto's CPU, median"
            f" {ratio['server_cpu_median']:.2f}x"
        )
    table.note("keys: '=' when every round's sorted key set is boto3's exactly (count and sha256)")
    loads = [r["load_1min"] for results in runs.values() for r in results if "load_1min" in r]
    if loads:
        table.note(f"load average (1 min) as each run ended: {min(loads):.1f} to {max(loads):.1f}")
    table.print()
    return rows, ratio


def main_moto(args: argparse.Namespace, out: str) -> None:
    """surge's fan-out against its sequential listing on moto's server."""
    import tempfile

    peers = args.only.split(",") if args.only else MOTO_PEERS
    buckets = args.buckets.split(",") if args.buckets else MOTO_BUCKETS
    unknown = set(buckets) - set(MOTO_BUCKETS)
    if unknown:
        raise SystemExit(f"--buckets: {', '.join(sorted(unknown))}: not one of {MOTO_BUCKETS}")
    repeated = [p for p in peers if p in SURGE_PEERS]
    once = [p for p in peers if p not in repeated]
    rounds = min(max(1, args.rounds or 3), MAX_ROUNDS)
    latencies = [0.0] + ([args.latency_ms] if args.latency_ms > 0 else [])
    info = machine_info(["moto", "boto3", "botocore", "uvloop", "httptools"])
    print(f"run started {info['date']}", file=sys.stderr, flush=True)
    results: list[dict[str, Any]] = []
    summary = Table(
        f"moto: surge parallel=16 against parallel=1, {rounds} rounds each (interleaved)",
        [
            "bucket",
            "ms each way",
            "p=16 best/median s",
            "p=1 best/median s",
            "ratio best/median",
            "moto CPU ratio (median)",
            "requests p=16 / p=1",
            f"<= {MOTO_BOUND:.2f}x",
        ],
    )
    with moto_server() as (direct, port, server_pid), tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for bucket in buckets:
            ensure_bucket(direct, bucket)
        for bucket in buckets:
            for latency in latencies:
                proxy = None
                endpoint = direct
                if latency:
                    proxy, proxy_port = start_proxy(port, latency / 1000)
                    endpoint = f"http://127.0.0.1:{proxy_port}"
                runs: dict[str, list[dict[str, Any]]] = {}
                try:
                    run_peer("surge_seq", endpoint, bucket, workdir)  # untimed: warms moto up
                    for round_ in range(rounds):
                        order = repeated if round_ % 2 == 0 else repeated[::-1]
                        for peer in order + (once if round_ == 0 else []):
                            print(
                                f"{bucket} at {latency:g} ms, round {round_ + 1}: {peer} ...",
                                file=sys.stderr,
                                flush=True,
                            )
                            before = process_cpu(server_pid)
                            result = run_peer(peer, endpoint, bucket, workdir)
                            # moto's own CPU for the listing: a server that works
                            # one request at a time takes that long at the least,
                            # however busy the rest of the machine is.
                            result["server_cpu"] = process_cpu(server_pid) - before
                            # The box's load as the run ended: the machine is shared,
                            # and a busy one moved these times by a third.
                            result["load_1min"] = os.getloadavg()[0]
                            runs.setdefault(peer, []).append(result)
                finally:
                    if proxy is not None:
                        proxy.terminate()
                        proxy.wait()
                rows, ratio = _moto_rows(bucket, latency, runs)
                results.append(
                    {"bucket": bucket, "latency_ms": latency, "rows": rows, "ratio": ratio}
                )
                fan, seq = rows.get("surge"), rows.get("surge_seq")
                if fan and seq and ratio:
                    summary.add(
                        bucket,
                        f"{latency:g}",
                        f"{fan['wall_best']:.2f} / {fan['wall_median']:.2f}",
                        f"{seq['wall_best']:.2f} / {seq['wall_median']:.2f}",
                        f"{ratio['best']:.2f}x / {ratio['median']:.2f}x",
                        f"{ratio['server_cpu_median']:.2f}x",
                        f"{'/'.join(map(str, sorted(set(fan['requests']))))}"
                        f" / {'/'.join(map(str, sorted(set(seq['requests']))))}",
                        "yes" if ratio["median"] <= MOTO_BOUND else "NO",
                    )
    summary.note("ratio: parallel=16's wall time over parallel=1's (best/best, median/median)")
    summary.note("moto CPU: the server's own CPU seconds a listing, less moved by the load")
    summary.print()
    payload = {"machine": info, "server": "moto", "rounds": rounds, "scenarios": results}
    print(f"wrote {write_json(out, payload)}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["minio", "moto"], default="minio")
    parser.add_argument("--sizes", default="7500,100000", help="MinIO's buckets")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="one way; 0: none")
    parser.add_argument(
        "--latency-sizes",
        default="7500",
        help="sizes also listed through the delay proxy (MinIO; on moto: every bucket)",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated peers (default: all of {PEERS}; on moto {MOTO_PEERS})",
    )
    parser.add_argument(
        "--rounds", type=int, help=f"moto: rounds of surge's listers (default 3, <= {MAX_ROUNDS})"
    )
    parser.add_argument("--buckets", help=f"moto: some of {MOTO_BUCKETS} (default: all)")
    parser.add_argument(
        "--baseline",
        help="a directory holding another version's surge package (a copy of its src/): "
        "adds the peers surge_base and surge_seq_base, run on that code in the same run",
    )
    parser.add_argument("--out", help="default: benchmarks/results/s3.json (moto: s3-moto.json)")
    args = parser.parse_args()
    if args.baseline:
        if not (Path(args.baseline) / "surge" / "__init__.py").is_file():
            raise SystemExit(f"--baseline {args.baseline}: no surge package there")
        os.environ["SURGE_BENCH_BASELINE"] = str(Path(args.baseline).resolve())
    results_dir = Path(__file__).parent / "results"
    if args.server == "moto":
        main_moto(args, args.out or str(results_dir / "s3-moto.json"))
        return
    args.out = args.out or str(results_dir / "s3.json")

    from surge.s3.minio import cache_dir, minio_server

    peers = args.only.split(",") if args.only else PEERS
    rounds = min(max(1, args.rounds or 1), MAX_ROUNDS)
    sizes = [int(s) for s in args.sizes.split(",")]
    latency_sizes = {int(s) for s in args.latency_sizes.split(",") if s}
    workdir = cache_dir() / "bench-tmp"
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    cores = os.cpu_count() or 1
    with minio_server(
        cache_dir() / "minio-bench", access_key=ACCESS_KEY, secret_key=SECRET_KEY
    ) as server:
        scenarios: list[tuple[int, float]] = []
        for size in sizes:
            ensure_bucket(server.endpoint_url, BUCKETS[size])
            scenarios.append((size, 0.0))
            if args.latency_ms > 0 and size in latency_sizes:
                scenarios.append((size, args.latency_ms))
        for size, latency in scenarios:
            bucket = BUCKETS[size]
            proxy = None
            endpoint = server.endpoint_url
            if latency:
                proxy, port = start_proxy(server.port, latency / 1000)
                endpoint = f"http://127.0.0.1:{port}"
            try:
                # One listing first, untimed: the first listing after MinIO starts
                # (or after the bucket was filled) reads its metadata from disk,
                # and whichever lister went first paid for it (surge: 4.6 s cold,
                # 2.3-2.6 s warm on the 100,000-object bucket).
                _external("s5cmd", endpoint, bucket, workdir)
                runs: dict[str, list[dict[str, Any]]] = {}
                for round_ in range(rounds):
                    # interleaved, the order turned round every other round
                    for peer in peers if round_ % 2 == 0 else peers[::-1]:
                        print(
                            f"{bucket} at {latency:g} ms, round {round_ + 1}: {peer} ...",
                            file=sys.stderr,
                            flush=True,
                        )
                        before = process_cpu(server.process.pid)
                        result = run_peer(peer, endpoint, bucket, workdir)
                        result["server_cpu"] = process_cpu(server.process.pid) - before
                        result["load_1min"] = os.getloadavg()[0]
                        runs.setdefault(peer, []).append(result)
                rows = {peer: _median_run(results) for peer, results in runs.items()}
            finally:
                if proxy is not None:
                    proxy.terminate()
                    proxy.wait()
            reference = rows.get("boto3_paginator") or rows.get("boto3_resource")
            table = Table(
                f"{size:,} objects ({bucket}), {latency:g} ms each way, {rounds} round(s)",
                [
                    "lister",
                    "wall s (median)",
                    "each round s",
                    "objects/s",
                    "CPU s",
                    "CPU us/obj",
                    "MinIO CPU s",
                    "floor s",
                    "vs boto3 objects.all()",
                    "keys",
                ],
            )
            base = rows.get("boto3_resource", {}).get("wall")
            for peer, r in rows.items():
                same = reference is None or (
                    r["sha256"] == reference["sha256"] and r["unique"] == r["objects"]
                )
                r["same_keys_as_boto3"] = same
                table.add(
                    LABELS.get(peer, peer),
                    f"{r['wall']:.2f}",
                    " / ".join(f"{w:.2f}" for w in r["walls"]),
                    f"{r['objects'] / r['wall']:,.0f}",
                    f"{r['cpu']:.2f}",
                    f"{r['cpu'] / max(1, r['objects']) * 1e6:.1f}",
                    f"{r['server_cpu']:.2f}",
                    f"{(r['server_cpu'] + r['cpu']) / cores:.2f}",
                    f"{base / r['wall']:.1f}x" if base else "",
                    f"{r['objects']:,} {'=' if same else 'DIFFERENT'}",
                )
            table.note("keys: '=' when the sorted key set is boto3's exactly (count and sha256)")
            table.note(
                "MinIO CPU: the server's own CPU seconds during the listing (/proc); floor: "
                f"MinIO's and the lister's CPU over the {cores} cores they share, the wall "
                "time no lister could beat on this box"
            )
            loads = [x["load_1min"] for r in rows.values() for x in r["rounds"]]
            table.note(
                f"load average (1 min) as each run ended: {min(loads):.1f} to {max(loads):.1f}"
            )
            table.print()
            results.append({"size": size, "bucket": bucket, "latency_ms": latency, "rows": rows})
    packages = ["boto3", "botocore", "obstore", "s5cmd", "uvloop", "httptools"]
    path = write_json(args.out, {"machine": machine_info(packages), "scenarios": results})
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(*sys.argv[2:5])
    elif len(sys.argv) > 1 and sys.argv[1] == "proxy":
        asyncio.run(_proxy(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
    else:
        main()
