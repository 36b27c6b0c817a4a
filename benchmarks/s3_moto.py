"""The S3 fan-out on a server that answers one request at a time: moto's.

Run it from the repository root::

    python benchmarks/s3_moto.py                  # 20,000 flat keys, 2 rounds
    python benchmarks/s3_moto.py --keys 5000 --rounds 3 --out /tmp/s3_moto.json

moto's server (``moto_server``, a process of its own on 127.0.0.1) spends its
time per request on the whole bucket, one request at a time, so a fan-out that
adds requests adds their time (issue #19: ``--parallel 16`` took 7.07 s against
3.84 s for ``--parallel 1``). The fan-out must cost no more than ~10% over the
sequential listing here. Rounds interleave the listers; boto3's
``objects.all()`` is the peer. Table on stdout, JSON in
``benchmarks/results/s3_moto.json``.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import Table, machine_info, write_json

BUCKET = "flat"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "s3_moto.json"))
    args = parser.parse_args()

    import boto3
    from botocore.config import Config

    from surge.s3 import ListOptions, list_all

    port = free_port()
    server = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    keys = dict(aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1")
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        s3 = boto3.client(
            "s3", endpoint_url=endpoint, config=Config(max_pool_connections=16), **keys
        )
        s3.create_bucket(Bucket=BUCKET)
        names = [f"obj-{i:07d}" for i in range(args.keys)]
        print(f"filling {len(names):,} keys ...", file=sys.stderr, flush=True)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=b""), names))

        def surge(parallel: int) -> dict[str, Any]:
            options = ListOptions(endpoint_url=endpoint, no_sign_request=True, parallel=parallel)
            started = time.perf_counter()
            count = sum(1 for _ in list_all(f"s3://{BUCKET}", options=options))
            wall = time.perf_counter() - started
            stats = options.stats
            return {
                "wall": wall,
                "objects": count,
                "requests": stats.requests,
                "ranges": stats.ranges,
                "wasted_keys": stats.wasted_keys,
            }

        def boto3_all() -> dict[str, Any]:
            bucket = boto3.resource("s3", endpoint_url=endpoint, **keys).Bucket(BUCKET)
            started = time.perf_counter()
            count = sum(1 for _ in bucket.objects.all())
            return {"wall": time.perf_counter() - started, "objects": count, "requests": None}

        listers = {
            "surge --parallel 1": lambda: surge(1),
            "surge --parallel 16": lambda: surge(16),
            "boto3 objects.all()": boto3_all,
        }
        surge(1)  # untimed: moto's first listing of a bucket pays for warming up
        for round_ in range(args.rounds):
            for name, run in listers.items():
                print(f"round {round_ + 1}: {name} ...", file=sys.stderr, flush=True)
                result = run()
                assert result["objects"] == args.keys, (name, result)
                rows.setdefault(name, []).append(result)
    finally:
        proc.terminate()
        proc.wait()

    seq = [r["wall"] for r in rows["surge --parallel 1"]]
    table = Table(
        f"{args.keys:,} flat keys on moto_server, {args.rounds} rounds",
        ["lister", "wall s (each round)", "requests", "vs --parallel 1 (per round)"],
    )
    for name, results in rows.items():
        table.add(
            name,
            " / ".join(f"{r['wall']:.2f}" for r in results),
            " / ".join(str(r["requests"]) for r in results),
            " / ".join(f"{r['wall'] / s:.2f}x" for r, s in zip(results, seq, strict=True)),
        )
    table.note("target: --parallel 16 within ~10% of --parallel 1 (issue #19)")
    table.print()
    payload = {"machine": machine_info(["moto", "boto3"]), "keys": args.keys, "rows": rows}
    print(f"wrote {write_json(args.out, payload)}", file=sys.stderr)


if __name__ == "__main__":
    main()
