"""The client CPU of receiving one large HTTP body: surge's Content-Length fast
path (reads handed to the body as they came) against the same client with every
read fed to llhttp, which slices a new bytes object out of each read.

Run it from the repository root::

    python benchmarks/http_body.py              # 512 MiB body, 5 rounds (~1 minute)
    python benchmarks/http_body.py --quick      # smoke run, 32 MiB, 2 rounds
    python benchmarks/http_body.py --loop asyncio

Nothing leaves the machine.  The origin is Debian's nginx (one process,
``sendfile on``, no access log) on 127.0.0.1 serving ``--size-mb`` MiB of
random bytes.  One ``surge.http.AsyncClient`` (on uvloop unless ``--loop
asyncio``) streams the body with ``client.stream("GET", ...)`` and
``aiter_raw()``, dropping each chunk; the same keep-alive connection carries
every round.  The two ways are switched with ``surge.http.connection._FAST_BODY``
(a switch kept for this script only) and interleaved, in ``--rounds`` rounds,
alternating which goes first.  CPU is this process's (``time.process_time``:
user + system; nginx is another process), per GiB received; the table gives
the median and the range.  Raw numbers go to ``benchmarks/results/http_body.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from _common import Table, announce, machine_info, payload, progress, write_json
from fetch_extras import nginx  # Debian's nginx, as the large-bodies benchmark runs it

GIB = 2**30
WAYS = {"fast": True, "llhttp": False}  # name -> surge.http.connection._FAST_BODY


async def measure(url: str, size: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    """``rounds`` streamed downloads each way, interleaved; each run's CPU, wall and chunks."""
    from surge.http import AsyncClient, connection

    runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    async with AsyncClient(max_time=600) as client:

        async def once() -> dict[str, float]:
            chunks = received = 0
            cpu, wall = time.process_time(), time.perf_counter()
            async with client.stream("GET", url) as response:
                async for chunk in response.aiter_raw():
                    received += len(chunk)
                    chunks += 1
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            if response.status_code != 200 or received != size:
                raise RuntimeError(f"got status {response.status_code}, {received:,} bytes")
            return {"cpu_s": cpu, "wall_s": wall, "chunks": chunks}

        await once()  # warm-up: the connection, the page cache, the allocator
        for n in range(rounds):
            order = list(WAYS) if n % 2 == 0 else list(reversed(WAYS))
            for way in order:
                connection._FAST_BODY = WAYS[way]
                try:
                    run = await once()
                finally:
                    connection._FAST_BODY = True
                runs[way].append(run)
                progress(
                    f"round {n + 1}/{rounds} {way}: {run['cpu_s']:.3f} s CPU, "
                    f"{run['wall_s']:.3f} s, {run['chunks']:.0f} chunks"
                )
        if client.stats()["created"] != 1:
            raise RuntimeError("the rounds did not share one connection")
    return runs


class _Sink(asyncio.Transport):
    """A transport that takes the request and is never read from: the "parse"
    section drives ``data_received`` itself."""

    def write(self, data: Any) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


async def measure_parse(size: int, read: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    """``data_received`` alone: a ``size``-byte response handed over in ``read``-byte
    reads, as uvloop hands a fast sender's bytes over, with no socket.  The reads
    are made once and handed over again each round (a transport makes a new bytes
    object per read: that cost is the same both ways and left out here)."""
    from surge.http import connection
    from surge.http.deadlines import Deadlines

    loop = asyncio.get_running_loop()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    head += b"Content-Length: %d\r\n\r\n" % size
    blocks = [os.urandom(read) for _ in range(4)]  # handed over in turn: little memory
    reads = [head + blocks[0][: read - len(head)]]
    left = size - (read - len(head))
    while left > 0:
        reads.append(blocks[len(reads) % 4][: min(left, read)])
        left -= len(reads[-1])
    conn = connection.HTTPConnection(("http", "bench", 80), Deadlines(loop), body_cap=2 * size)
    conn.connection_made(_Sink())
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for n in range(rounds + 1):  # the first round warms up
        order = list(WAYS) if n % 2 == 0 else list(reversed(WAYS))
        for way in order:
            connection._FAST_BODY = WAYS[way]
            try:
                response = conn.send(
                    b"GET / HTTP/1.1\r\n\r\n", False, loop.time() + 600, 600, discard=True
                )
                cpu = time.process_time()
                for data in reads:
                    conn.data_received(data)
                cpu = time.process_time() - cpu
            finally:
                connection._FAST_BODY = True
            if not response.done.done() or response.body_bytes != size:
                raise RuntimeError(
                    f"{way}: the response did not complete ({response.body_bytes:,} bytes)"
                )
            if n:
                runs[way].append({"cpu_s": cpu, "wall_s": cpu, "chunks": len(reads)})
    return runs


def summarise(
    title: str, runs: dict[str, list[dict[str, float]]], size: int
) -> tuple[Table, dict[str, Any]]:
    table = Table(
        title, ["way", "CPU s/GiB median", "range", "wall s/GiB median", "reads", "CPU us/read"]
    )
    results: dict[str, Any] = {}
    for way, way_runs in runs.items():
        cpu = [r["cpu_s"] * GIB / size for r in way_runs]
        wall = [r["wall_s"] * GIB / size for r in way_runs]
        chunks = statistics.median(r["chunks"] for r in way_runs)
        median = statistics.median(cpu)
        results[way] = {
            "cpu_s_per_gib_median": median,
            "cpu_s_per_gib": cpu,
            "wall_s_per_gib_median": statistics.median(wall),
            "wall_s_per_gib": wall,
            "reads_median": chunks,
            "runs": way_runs,
        }
        table.add(
            way,
            f"{median:.3f}",
            f"{min(cpu):.3f}-{max(cpu):.3f}",
            f"{statistics.median(wall):.3f}",
            f"{chunks:,.0f}",
            f"{statistics.median(r['cpu_s'] / r['chunks'] for r in way_runs) * 1e6:.1f}",
        )
    fast, slow = results["fast"]["cpu_s_per_gib_median"], results["llhttp"]["cpu_s_per_gib_median"]
    table.note(
        f"fast path: {fast / slow:.2f}x the CPU of feeding llhttp ({fast - slow:+.3f} s/GiB)"
    )
    return table, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=512, help="body size, MiB (512)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each way (5)")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument(
        "--read-kb", type=int, default=256, help="read size of the data_received section (256)"
    )
    parser.add_argument("--quick", action="store_true", help="32 MiB, 2 rounds")
    parser.add_argument("--json", default="benchmarks/results/http_body.json")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.rounds = 32, 2
    size = args.size_mb * 2**20
    started = time.perf_counter()
    info = machine_info(["surge", "httptools", "uvloop"])
    announce("surge http_body: client CPU per GiB of a streamed body", info, args.quick)
    with (
        tempfile.TemporaryDirectory(prefix="surge-http-body-") as tmp,
        nginx(Path(tmp), size, 0) as port,
    ):
        url = f"http://127.0.0.1:{port}/big.bin"
        if args.loop == "uvloop":
            runs = uvloop.run(measure(url, size, args.rounds))
        else:
            runs = asyncio.run(measure(url, size, args.rounds))
    e2e, e2e_results = summarise(
        f"end to end: {args.size_mb} MiB streamed from nginx on {args.loop}, "
        f"{args.rounds} rounds each (CPU: this process, user + system)",
        runs,
        size,
    )
    e2e.note("fast: _FAST_BODY = True (the default); llhttp: every read fed to the parser")
    e2e.note("reads: chunks the body came in (the socket reads after the head's)")
    e2e.print()
    runner = uvloop.run if args.loop == "uvloop" else asyncio.run
    parse, parse_results = summarise(
        f"data_received alone: {args.size_mb} MiB in {args.read_kb} KiB reads, no socket, "
        f"{args.rounds} rounds each",
        runner(measure_parse(size, args.read_kb * 1024, args.rounds)),
        size,
    )
    parse.print()
    results = {"end_to_end": e2e_results, "data_received": parse_results}
    settings = {
        "size_bytes": size,
        "rounds": args.rounds,
        "loop": args.loop,
        "read_bytes": args.read_kb * 1024,
        "quick": args.quick,
    }
    path = write_json(args.json, payload("http_body", info, settings, results, [], started))
    print(f"raw numbers: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
