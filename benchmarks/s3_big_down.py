"""Issue #46's 2 GiB download, alone: one object downloaded again and again by
each peer in turn, with the kernel's own counts for every run.

Run it from the repository root::

    python benchmarks/s3_big_down.py                      # 2,048 MiB, surge and s5cmd, 6 rounds
    python benchmarks/s3_big_down.py --mb 512 --rounds 3
    python benchmarks/s3_big_down.py --peers 'surge,s5cmd,surge --part-size 50MiB'

``benchmarks/s3_transfer.py --only big`` times the same download between
uploads (their writeback, the source file in the page cache); this one uploads
the object once (s5cmd, untimed), deletes the local source, and then only
downloads: each run to a fresh directory, deleted after it, ``sync`` before
it, the peers' order turned by one each round.  A peer is ``surge``,
``s5cmd``, or ``surge`` followed by extra ``surge s3 cp`` arguments;
``surge@DIR`` runs the surge whose sources are in ``DIR`` (its PYTHONPATH), as
``surge@/tmp/old/src`` after ``git archive BASE src | tar -x -C /tmp/old``, to
compare a change with what it changed.

Each run's numbers come from ``wait4`` (the process's and its threads'):
wall, user and system CPU, minor and major page faults, voluntary and
involuntary context switches, and the load average (1 min) as it ended.  On
a shared 2-core box the wall follows the load; the CPU and the fault counts
much less, so they are the ones to compare first.  Every run's file is checked
for its size, and the last round's for its SHA-256 against the source.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine_info, progress, write_json
from s3_transfer import _env, _random_file, _s5cmd, command, s3_server

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "s3_big_down.json"
BUCKET = "bigdown"
FIELDS = ("wall", "cpu", "user", "sys", "minflt", "majflt", "nvcsw", "nivcsw")


def _peer_env(peer: str, env: dict[str, str]) -> dict[str, str]:
    name = shlex.split(peer)[0]
    if not name.startswith("surge@"):
        return env
    return {**env, "PYTHONPATH": name.partition("@")[2]}


def _argv(peer: str, endpoint: str, source: str, destination: str) -> list[str]:
    name, *extra = shlex.split(peer)
    name = name.partition("@")[0]
    if name not in ("surge", "s5cmd") or (extra and name != "surge"):
        raise SystemExit(f"unknown peer {peer!r}: surge [ARGS...] or s5cmd")
    return [*command(name, endpoint, source, destination, False), *extra]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(4 * 2**20):  # bounded: size / 4 MiB reads
            digest.update(block)
    return digest.hexdigest()


def one_run(argv: list[str], env: dict[str, str], out: Path, size: int) -> dict[str, Any]:
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir()
    subprocess.run(["sync"], check=False)
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    got = out.stat().st_size if out.exists() else None
    return {
        "wall": round(wall, 3),
        "cpu": round(usage.ru_utime + usage.ru_stime, 3),
        "user": round(usage.ru_utime, 3),
        "sys": round(usage.ru_stime, 3),
        "minflt": usage.ru_minflt,
        "majflt": usage.ru_majflt,
        "nvcsw": usage.ru_nvcsw,
        "nivcsw": usage.ru_nivcsw,
        "load": round(os.getloadavg()[0], 2),
        "ok": status == 0 and got == size,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [run for run in runs if run["ok"]]
    result: dict[str, Any] = {"runs": len(runs), "failed": len(runs) - len(good)}
    for field in FIELDS:
        values = [run[field] for run in good]
        if values:
            result[field] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=2048, help="the object's MiB (2048)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--peers", default="surge,s5cmd", help="comma-separated (surge,s5cmd)")
    parser.add_argument("--tmp", default=None, help="where MinIO's data and the downloads go")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    peers = [peer.strip() for peer in args.peers.split(",") if peer.strip()]
    size = args.mb * 2**20
    runs: dict[str, list[dict[str, Any]]] = {peer: [] for peer in peers}
    with (
        tempfile.TemporaryDirectory(prefix="s3-big-down-", dir=args.tmp) as tmp,
        s3_server("minio", Path(tmp)) as server,
    ):
        base = Path(tmp)
        env = _env(server)
        endpoint = server.endpoint_url
        source = base / "source.bin"
        progress(f"writing {args.mb:,} MiB of random bytes and uploading them (s5cmd)")
        _random_file(source, size, random.Random(46))
        want = _sha256(source)
        s5cmd = [_s5cmd(), "--endpoint-url", endpoint]
        subprocess.run(
            [*s5cmd, "mb", f"s3://{BUCKET}"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        url = f"s3://{BUCKET}/big.bin"
        subprocess.run(
            [*s5cmd, "cp", str(source), url], env=env, check=True, stdout=subprocess.DEVNULL
        )
        source.unlink()  # not in the page cache beside the downloads
        out = base / "down" / "big.bin"
        for round_ in range(args.rounds):
            turn = round_ % len(peers)
            for peer in peers[turn:] + peers[:turn]:
                argv = _argv(peer, endpoint, url, str(out))
                run = one_run(argv, _peer_env(peer, env), out, size)
                if run["ok"] and round_ == args.rounds - 1:
                    run["ok"] = _sha256(out) == want
                progress(f"round {round_ + 1}/{args.rounds} {peer}: {run}")
                runs[peer].append(run)
        shutil.rmtree(out.parent, ignore_errors=True)
    summaries = {peer: summary(peer_runs) for peer, peer_runs in runs.items()}
    print(f"{'peer':<32} {'wall s':>20} {'CPU s':>20} {'sys s':>20} {'minor faults':>22}")
    for peer, result in summaries.items():
        cells = []
        for field in ("wall", "cpu", "sys", "minflt"):
            cell = result.get(field)
            cells.append(
                "-"
                if cell is None
                else f"{cell['median']:.6g} ({cell['min']:.4g}-{cell['max']:.4g})"
            )
        print(f"{peer:<32} {cells[0]:>20} {cells[1]:>20} {cells[2]:>20} {cells[3]:>22}")
    payload = {
        "benchmark": "s3_big_down",
        "argv": ["benchmarks/s3_big_down.py", *os.sys.argv[1:]],
        "machine": machine_info(),
        "mb": args.mb,
        "peers": peers,
        "runs": runs,
        "summary": summaries,
    }
    progress(f"wrote {write_json(args.out, payload)}")


if __name__ == "__main__":
    main()
