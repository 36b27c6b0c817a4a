"""The bulk run over TLS with ALPN on (h2 offered) against HTTP/1.1 only.

``surge fetch`` offers ``h2,http/1.1`` by ALPN unless ``--http1.1``; the
simulated web answers HTTP/1.1 (it settles ALPN on ``http/1.1``), so this
measures what offering HTTP/2 costs a crawl of many hosts that each take one
request: the ALPN extension, the protocol check after each handshake, the
Multiplexer's bookkeeping.  ``--hosts`` (10,000) hosts of ``surge sim``, one
HTTPS request each, ``-c 1000``, ``--max-time 3``; each run a child process
(wall, and CPU from ``wait4``), the two interleaved over ``--rounds`` (3);
medians.  Target (issue 43): ALPN on no slower than HTTP/1.1 only, within 5%.

    python benchmarks/alpn_bulk.py [--hosts 10000] [--rounds 3]

Writes benchmarks/results/alpn_bulk.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine_info, surge_command, write_json

HERE = Path(__file__).resolve().parent
MODES = {"alpn h2,http/1.1": [], "http/1.1 only": ["--http1.1"]}


def _run(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of a child process."""
    began = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])}...: exit {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    info = machine_info(["surge"])
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        urls = base / "urls.txt"
        sim = subprocess.Popen(
            [*surge_command(), "sim", "--cafile", str(base / "ca.pem"), "--write-hosts",
             str(urls), "--hosts", str(args.hosts)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            assert sim.stdout is not None
            ports = json.loads(sim.stdout.readline())
            http, https = ports["http_port"], ports["https_port"]
            tls = base / "tls-urls.txt"
            tls.write_text(
                urls.read_text().replace("http://", "https://").replace(f":{http}/", f":{https}/")
            )
            for round_ in range(args.rounds):
                for mode, flags in MODES.items():
                    out = base / f"out-{round_}.jsonl"
                    wall, cpu = _run(
                        [*surge_command(), "fetch", str(tls), "--cacert", str(base / "ca.pem"),
                         "--resolve", "*.sim:*:127.0.0.1", "-c", "1000", "--max-time", "3",
                         "-q", "-o", str(out), *flags]
                    )  # fmt: skip
                    records = [json.loads(line) for line in out.read_text().splitlines()]
                    alpn = {(r.get("tls") or {}).get("alpn") for r in records}
                    ok = sum(r["status"] == 200 for r in records)
                    runs[mode].append(
                        {"wall_s": wall, "cpu_s": cpu, "records": len(records), "ok": ok,
                         "alpn": sorted(map(str, alpn)), "load": os.getloadavg()[0]}
                    )  # fmt: skip
                    print(f"round {round_ + 1} {mode:<18} wall {wall:6.2f} s  cpu {cpu:6.2f} s",
                          file=sys.stderr)  # fmt: skip
        finally:
            sim.terminate()
            sim.wait(timeout=30)
    print(f"{args.hosts:,} HTTPS hosts, one request each, -c 1000; medians of {args.rounds}")
    print(f"{'mode':<18} {'wall s':>7} {'CPU s':>7} {'200s':>6}")
    medians = {}
    for mode, results in runs.items():
        wall = statistics.median(r["wall_s"] for r in results)
        cpu = statistics.median(r["cpu_s"] for r in results)
        medians[mode] = {"wall_s": wall, "cpu_s": cpu}
        print(f"{mode:<18} {wall:>7.2f} {cpu:>7.2f} {results[-1]['ok']:>6}")
    on, off = medians["alpn h2,http/1.1"], medians["http/1.1 only"]
    print(f"ALPN on / HTTP/1.1 only: wall {on['wall_s'] / off['wall_s']:.3f}x,"
          f" CPU {on['cpu_s'] / off['cpu_s']:.3f}x (target <= 1.05x)")  # fmt: skip
    write_json(
        HERE / "results" / "alpn_bulk.json",
        {"machine": info, "hosts": args.hosts, "rounds": args.rounds, "runs": runs,
         "medians": medians},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
