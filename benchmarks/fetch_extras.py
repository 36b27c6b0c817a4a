"""Issue #21's two targets for ``surge fetch`` beyond records: large bodies kept on
disk, and throughput through a proxy.

Run it from the repository root::

    python benchmarks/fetch_extras.py              # full run (~14 minutes on 2 loaded cores)
    python benchmarks/fetch_extras.py --quick      # smoke run, tiny sizes
    python benchmarks/fetch_extras.py --only proxy --requests 2000

Nothing leaves the machine.  The origin is Debian's nginx (``/usr/sbin/nginx``,
one process, ``sendfile on``, no access log) on 127.0.0.1 with a configuration
of this script's own, serving ``big.bin`` (``--body-mb`` MB of random bytes)
and ``small.html`` (``--small-kb`` KB); the proxy is Debian's tinyproxy 1.11
(one thread per client connection, ``MaxClients`` = twice the concurrency).
Every client runs as its own process, reaped with ``wait4`` (its CPU, user +
system) and killed at ``--limit`` seconds; its peak RSS is its own VmHWM (read
from /proc while it runs: unlike ``ru_maxrss``, it does not count the parent's
pages at the fork).  Tables go to stdout, progress to stderr, raw numbers with
the command, the date and the machine to ``benchmarks/results/fetch_extras.json``.
Runs of a section are interleaved, in rounds; tables give the median and the
range.

Section 1, "bodies": large bodies
    ``--inputs`` (100) inputs ``big.bin?u=<i mod --distinct>`` (distinct: as
    many as the inputs), ``surge fetch -c 100 --max-filesize 100 MB`` three
    ways: records only (the body is read and counted, not kept), ``--output-dir
    DIR`` and ``--warc FILE.warc.gz``, ``--body-repeat`` (2) rounds.  Bytes
    written are the output's size on disk after the run (the folder's files, or
    the WARC); everything is deleted after each run, and the free space is
    checked first.  Repeated URLs are not the default: ``--output-dir`` names
    a body by its URL and its temporary file by URL and process id, so two
    downloads of one URL in flight at once share a ``.part`` file, and the
    second to finish ends the run ("cannot write: No such file or directory";
    seen on 2026-11-26 with 5 distinct URLs of 20).
    Target: with --output-dir, peak RSS < 100 MB at -c 100.

Section 2, "proxy": throughput through a proxy
    ``--requests`` (5,000) URLs ``small.html?i=<i>`` (distinct query strings),
    64 in flight, ``--repeat`` (3) rounds, through tinyproxy: ``surge fetch -x
    http://PROXY -c 64`` (records to a file) against ``curl --parallel
    --parallel-max 64 --proxy PROXY`` (a ``--config`` file of ``url`` and
    ``output = /dev/null`` pairs), and both straight to nginx for scale.
    Requests/s is requests over the process's wall time, start-up included
    (surge's start-up, a one-URL run, is reported beside it).  tinyproxy
    closes its client connection after every response (HTTP/1.0 upstream,
    ``Connection: close``), so neither client reuses a proxy connection: every
    request is a new TCP connection and a new tinyproxy thread.  The proxy's
    own CPU over each run is read from /proc.
    Target: surge through the proxy >= curl through the proxy.

Section 3, "warc": what ``--warc`` costs the client per request
    ``--warc-requests`` (20,000) URLs ``page.html?i=<i>``, a ``--small-kb``
    (10) KB text page that deflates like HTML (~0.38 at level 1, the text of
    benchmarks/warc.py), ``surge fetch -c 16`` over keep-alive connections to
    nginx, ``--warc-repeat`` (5) rounds interleaved, three ways: records only,
    ``--warc FILE.warc.gz`` (the default deflate: ISA-L when the ``warc`` extra
    is installed), and ``--warc`` with zlib (the same command through ``python
    -c`` with ``surge.bulk.warc.DEFLATE_ENGINES`` set to zlib alone).  The CPU is
    the surge process's own (user + system from ``wait4``; nginx is not in it),
    less a one-URL run of the same mode (start-up: imports, the warcinfo), over
    the requests: the fastest round of each.
    Target: --warc adds at most 20% to records only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any

from _common import (
    PROXY_VARIABLES,
    Table,
    Target,
    announce,
    machine_info,
    parse_count,
    parse_sections,
    payload,
    print_targets,
    progress,
    run_child,
    stop_process,
    surge_command,
    write_json,
)
from warc import text_body  # the page text of benchmarks/warc.py

SECTIONS = ("bodies", "proxy", "warc")
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "fetch_extras.json"
#: Seconds a server may take to accept connections.
STARTUP_S = 10.0
#: The memory target of issue #21, bytes.
RSS_TARGET = 100 * 2**20
#: Address-space cap of a client in the bodies section: a run that buffers its
#: bodies fails here instead of taking the machine's memory (shared with others).
ADDRESS_SPACE_CAP = 12 * 2**30

#: Runs of section 1, in table order: name -> what it is.
BODY_RUNS: dict[str, str] = {
    "records": "records only (bodies read, not kept)",
    "output_dir": "--output-dir DIR",
    "warc": "--warc FILE.warc.gz",
}
#: Runs of section 2, in table order.
PROXY_RUNS: dict[str, str] = {
    "surge_proxy": "surge fetch -x tinyproxy -c 64",
    "curl_proxy": "curl --parallel-max 64 --proxy tinyproxy",
    "surge_direct": "surge fetch -c 64, no proxy",
    "curl_direct": "curl --parallel-max 64, no proxy",
}


# -- servers ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"{what} did not start: {text}") from None
            time.sleep(0.05)


@contextmanager
def nginx(base: Path, body_bytes: int, small_bytes: int) -> Iterator[int]:
    """Debian's nginx on 127.0.0.1 serving ``big.bin`` and ``small.html``; yields its port."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    root = base / "root"
    root.mkdir()
    with open(root / "big.bin", "wb") as out:
        left = body_bytes
        while left:  # bounded: at most body_bytes / 1 MB writes
            block = os.urandom(min(left, 2**20))
            out.write(block)
            left -= len(block)
    (root / "small.html").write_bytes((b"<p>surge benchmark page</p>\n" * 40000)[:small_bytes])
    (root / "page.html").write_bytes(text_body(small_bytes))  # deflates like HTML
    for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (base / temp).mkdir()
    port = _free_port()
    config = base / "nginx.conf"
    config.write_text(
        f"""
daemon off;
master_process off;
worker_rlimit_nofile 4096;
pid {base / "nginx.pid"};
error_log {base / "error.log"} warn;
events {{ worker_connections 2048; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    client_body_temp_path {base / "body"};
    proxy_temp_path {base / "proxy"};
    fastcgi_temp_path {base / "fastcgi"};
    uwsgi_temp_path {base / "uwsgi"};
    scgi_temp_path {base / "scgi"};
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {root};
    }}
}}
"""
    )
    log = base / "error.log"
    process = subprocess.Popen(
        [binary, "-c", str(config), "-p", str(base), "-e", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(port, process, "nginx", log)
        yield port
    finally:
        stop_process(process)


@contextmanager
def tinyproxy(base: Path, max_clients: int) -> Iterator[tuple[int, int, Path]]:
    """Debian's tinyproxy on 127.0.0.1, logging each connection; yields (port, pid, log)."""
    binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
    port = _free_port()
    log = base / "tinyproxy.log"
    config = base / "tinyproxy.conf"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "Listen 127.0.0.1",
                "Timeout 30",
                f"MaxClients {max_clients}",
                "LogLevel Connect",
                f'LogFile "{log}"',
                "Allow 127.0.0.1",
                "DisableViaHeader Yes",
            ]
        )
        + "\n"
    )
    process = subprocess.Popen(
        [binary, "-d", "-c", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(port, process, "tinyproxy", log)
        yield port, process.pid, log
    finally:
        stop_process(process)


def _process_cpu_s(pid: int) -> float:
    """User + system seconds of ``pid`` and all its threads so far (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _connections_logged(log: Path) -> int:
    with open(log, errors="replace") as text:
        return sum("Connect (file descriptor" in line for line in text)


# -- helpers ---------------------------------------------------------------------------------


def _size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _records(path: Path) -> tuple[Counter[str], int]:
    """Outcomes (status or error class) and body bytes of a JSONL output."""
    outcomes: Counter[str] = Counter()
    body_bytes = 0
    with open(path) as out:
        for line in out:
            if not line.endswith("\n"):
                break
            record = json.loads(line)
            outcomes[str(record["error"] or record["status"])] += 1
            body_bytes += int(record.get("bytes") or 0)
    return outcomes, body_bytes


def _spread(values: Sequence[float], fmt: str) -> str:
    """``median (min-max)`` of the values, each formatted with ``fmt``."""
    if not values:
        return "-"
    middle = format(statistics.median(values), fmt)
    if len(values) == 1:
        return middle
    return f"{middle} ({format(min(values), fmt)}-{format(max(values), fmt)})"


# -- section 1: large bodies -------------------------------------------------------------------


def run_bodies(args: argparse.Namespace, base: Path, port: int) -> dict[str, Any]:
    inputs, distinct, concurrency = args.inputs, args.distinct, args.concurrency
    body_bytes = args.body_mb * 2**20
    cap = 2 * body_bytes
    input_path = base / "big-urls.txt"
    input_path.write_text(
        "".join(f"http://127.0.0.1:{port}/big.bin?u={i % distinct}\n" for i in range(inputs))
    )
    free = shutil.disk_usage(base).free
    needed = inputs * body_bytes + distinct * body_bytes  # the WARC, or the folder
    if free < 2 * needed:
        raise RuntimeError(f"{free / 2**30:.1f} GB free under {base}: too little for this run")
    results: dict[str, Any] = {
        "inputs": inputs,
        "distinct_urls": distinct,
        "concurrency": concurrency,
        "body_bytes": body_bytes,
        "max_filesize": cap,
        "disk_free_bytes": free,
        "runs": {name: [] for name in BODY_RUNS},
    }
    for round_ in range(args.body_repeat):
        for name in BODY_RUNS:
            progress(f"bodies: round {round_ + 1}/{args.body_repeat}, {name}")
            out = base / "records.jsonl"
            target = base / ("bodies" if name == "output_dir" else "run.warc.gz")
            extra: list[str] = []
            if name == "output_dir":
                extra = ["--output-dir", str(target)]
            elif name == "warc":
                extra = ["--warc", str(target)]
            command = [
                "prlimit",
                f"--as={ADDRESS_SPACE_CAP}",
                *surge_command(),
                "fetch",
                str(input_path),
                "-o",
                str(out),
                "-q",
                "-c",
                str(concurrency),
                "--max-filesize",
                str(cap),
                "--max-time",
                f"{args.limit:g}",
                *extra,
            ]
            run, _ = run_child(command, args.limit, poll_rss=True)
            outcomes, received = _records(out) if out.exists() else (Counter(), 0)
            written = _size_on_disk(target) if target.exists() else 0
            results["runs"][name].append(
                {
                    "status": run.status,
                    "killed": run.killed,
                    "wall_s": run.wall_s,
                    "cpu_s": run.cpu_s,
                    "hwm_bytes": run.hwm_bytes,
                    "maxrss_bytes": run.maxrss_bytes,
                    "rss_samples": run.rss_samples[:: max(1, len(run.rss_samples) // 40)],
                    "outcomes": dict(outcomes),
                    "body_bytes_received": received,
                    "bytes_written": written,
                }
            )
            out.unlink(missing_ok=True)
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
    table = Table(
        f"large bodies: {inputs} x {args.body_mb} MB ({distinct} distinct URLs), "
        f"-c {concurrency}, {args.body_repeat} rounds: median (range)",
        ["surge fetch", "peak RSS MB", "wall s", "CPU s", "MB/s", "ok", "written MB"],
    )
    for name, what in BODY_RUNS.items():
        runs = results["runs"][name]
        ok = [r["outcomes"].get("200", 0) for r in runs]
        table.add(
            what,
            _spread([r["hwm_bytes"] / 2**20 for r in runs], ".0f"),
            _spread([r["wall_s"] for r in runs], ".1f"),
            _spread([r["cpu_s"] for r in runs], ".1f"),
            _spread([r["body_bytes_received"] / 2**20 / r["wall_s"] for r in runs], ".0f"),
            f"{min(ok)}-{max(ok)}" if min(ok) != max(ok) else f"{ok[0]}",
            _spread([r["bytes_written"] / 2**20 for r in runs], ".0f"),
        )
    table.note("peak RSS: the process's own VmHWM; MB/s: body bytes received over wall")
    table.note(f"address space capped at {ADDRESS_SPACE_CAP / 2**30:.0f} GB (prlimit --as)")
    table.print()
    return results


# -- section 2: through a proxy ----------------------------------------------------------------


def run_proxy(args: argparse.Namespace, base: Path, origin: int) -> dict[str, Any]:
    n, concurrency = args.requests, args.proxy_concurrency
    urls = [f"http://127.0.0.1:{origin}/small.html?i={i}" for i in range(n)]
    url_file = base / "small-urls.txt"
    url_file.write_text("".join(u + "\n" for u in urls))
    curl_config = base / "curl.conf"
    curl_config.write_text("".join(f'url = "{u}"\noutput = "/dev/null"\n' for u in urls))
    one_url = base / "one-url.txt"
    one_url.write_text(urls[0] + "\n")
    results: dict[str, Any] = {
        "requests": n,
        "concurrency": concurrency,
        "body_bytes": args.small_kb * 1024,
        "runs": {name: [] for name in PROXY_RUNS},
        "surge_startup": [],
    }
    with tinyproxy(base, max_clients=2 * concurrency) as (proxy_port, proxy_pid, log):
        proxy = f"http://127.0.0.1:{proxy_port}"
        results["proxy_max_clients"] = 2 * concurrency

        def surge(urls_path: Path, through: bool) -> list[str]:
            return [
                *surge_command(),
                "fetch",
                str(urls_path),
                "-o",
                str(base / "records.jsonl"),
                "-q",
                "-c",
                str(concurrency),
                *(["-x", proxy] if through else []),
            ]

        def curl(through: bool) -> list[str]:
            return [
                "curl",
                "--silent",
                "--parallel",
                "--parallel-max",
                str(concurrency),
                *(["--proxy", proxy] if through else []),
                "--config",
                str(curl_config),
            ]

        for round_ in range(args.repeat):
            for name in PROXY_RUNS:
                progress(f"proxy: round {round_ + 1}/{args.repeat}, {name}")
                through = name.endswith("_proxy")
                command = surge(url_file, through) if name.startswith("surge") else curl(through)
                logged, proxy_cpu = _connections_logged(log), _process_cpu_s(proxy_pid)
                run, _ = run_child(command, args.limit)
                row: dict[str, Any] = {
                    "status": run.status,
                    "killed": run.killed,
                    "wall_s": run.wall_s,
                    "cpu_s": run.cpu_s,
                    "requests_per_s": n / run.wall_s,
                    "proxy_cpu_s": _process_cpu_s(proxy_pid) - proxy_cpu,
                    "proxy_connections": _connections_logged(log) - logged,
                }
                if name.startswith("surge"):
                    outcomes, _ = _records(base / "records.jsonl")
                    row["outcomes"] = dict(outcomes)
                results["runs"][name].append(row)
            run, _ = run_child(surge(one_url, True), args.limit)
            results["surge_startup"].append(run.wall_s)
    startup = statistics.median(results["surge_startup"])
    table = Table(
        f"through a proxy: {n:,} requests of {args.small_kb} KB, {concurrency} in flight, "
        f"{args.repeat} rounds interleaved: median (range)",
        ["client", "requests/s", "wall s", "client CPU s", "proxy CPU s", "via proxy", "ok"],
    )
    for name, what in PROXY_RUNS.items():
        runs = results["runs"][name]
        ok = "-"
        if name.startswith("surge"):
            counts = [r["outcomes"].get("200", 0) for r in runs]
            ok = f"{min(counts):,}" + ("" if min(counts) == max(counts) else f"-{max(counts):,}")
        else:
            ok = "exit " + ",".join(sorted({str(r["status"]) for r in runs}))
        table.add(
            what,
            _spread([r["requests_per_s"] for r in runs], ",.0f"),
            _spread([r["wall_s"] for r in runs], ".2f"),
            _spread([r["cpu_s"] for r in runs], ".2f"),
            _spread([r["proxy_cpu_s"] for r in runs], ".2f"),
            f"{statistics.median([r['proxy_connections'] for r in runs]):,.0f}",
            ok,
        )
    table.note(
        f"requests/s: over the process's wall, start-up included (surge's: "
        f"{startup:.2f} s, a one-URL run through the proxy)"
    )
    table.note("via proxy: connections tinyproxy logged during the run")
    table.print()
    return results


# -- section 3: the WARC's cost per request ----------------------------------------------------

#: Runs of section 3, in table order: name -> what it is.
WARC_RUNS: dict[str, str] = {
    "records": "records only",
    "warc": "--warc (default deflate)",
    "warc_zlib": "--warc, zlib deflate",
}
#: The same surge, its WARC writer limited to zlib.
ZLIB_ONLY = (
    "import sys; import surge.bulk.warc as w; w.DEFLATE_ENGINES = ('zlib',); "
    "from surge.cli import main; sys.exit(main())"
)


def run_warc(args: argparse.Namespace, base: Path, port: int) -> dict[str, Any]:
    n, concurrency = args.warc_requests, 16
    url_file = base / "page-urls.txt"
    url_file.write_text("".join(f"http://127.0.0.1:{port}/page.html?i={i}\n" for i in range(n)))
    one_url = base / "one-page.txt"
    one_url.write_text(f"http://127.0.0.1:{port}/page.html?i=0\n")
    warc_path = base / "run.warc.gz"
    results: dict[str, Any] = {
        "requests": n,
        "concurrency": concurrency,
        "body_bytes": args.small_kb * 1024,
        "runs": {name: [] for name in WARC_RUNS},
    }

    def command(name: str, urls: Path) -> list[str]:
        start = surge_command() if name != "warc_zlib" else [sys.executable, "-c", ZLIB_ONLY]
        extra = [] if name == "records" else ["--warc", str(warc_path)]
        out = str(base / "records.jsonl")
        return [*start, "fetch", str(urls), "-o", out, "-q", "-c", str(concurrency), *extra]

    for round_ in range(args.warc_repeat):
        for name in WARC_RUNS:
            progress(f"warc: round {round_ + 1}/{args.warc_repeat}, {name}")
            one, _ = run_child(command(name, one_url), args.limit)
            warc_path.unlink(missing_ok=True)
            run, _ = run_child(command(name, url_file), args.limit)
            outcomes, _ = _records(base / "records.jsonl")
            written = _size_on_disk(warc_path) if warc_path.exists() else 0
            warc_path.unlink(missing_ok=True)
            results["runs"][name].append(
                {
                    "status": run.status,
                    "killed": run.killed,
                    "wall_s": run.wall_s,
                    "cpu_s": run.cpu_s,
                    "startup_cpu_s": one.cpu_s,
                    "us_per_request": (run.cpu_s - one.cpu_s) / (n - 1) * 1e6,
                    "outcomes": dict(outcomes),
                    "warc_bytes": written,
                }
            )
    best = {name: min(r["us_per_request"] for r in results["runs"][name]) for name in WARC_RUNS}
    results["best_us_per_request"] = best
    table = Table(
        f"--warc's cost: {n:,} requests of {args.small_kb} KB text, -c {concurrency}, keep-alive, "
        f"{args.warc_repeat} rounds interleaved",
        ["surge fetch", "CPU us/request (best)", "range", "vs records", "ok", "WARC MB"],
    )
    for name, what in WARC_RUNS.items():
        runs = results["runs"][name]
        ok = [r["outcomes"].get("200", 0) for r in runs]
        table.add(
            what,
            f"{best[name]:.1f}",
            _spread([r["us_per_request"] for r in runs], ".1f"),
            f"{best[name] / best['records']:.2f}x",
            f"{min(ok):,}" + ("" if min(ok) == max(ok) else f"-{max(ok):,}"),
            f"{statistics.median(r['warc_bytes'] for r in runs) / 2**20:.1f}",
        )
    table.note("CPU: the surge process's user + system (wait4), less a one-URL run, over requests")
    table.print()
    return results


# -- targets, command line -------------------------------------------------------------------


def check_targets(results: dict[str, Any]) -> list[Target]:
    targets = []
    bodies = results.get("bodies")
    if bodies:
        runs = bodies["runs"]["output_dir"]
        peaks = [r["hwm_bytes"] for r in runs]
        complete = all(r["outcomes"].get("200", 0) == bodies["inputs"] for r in runs)
        targets.append(
            Target(
                f"--output-dir, {bodies['inputs']} x {bodies['body_bytes'] // 2**20} MB "
                f"bodies at -c {bodies['concurrency']}: peak RSS",
                "< 100 MB, every body saved",
                f"{statistics.median(peaks) / 2**20:.0f} MB median, "
                f"{max(peaks) / 2**20:.0f} MB at most"
                + ("" if complete else ", NOT every body saved"),
                max(peaks) < RSS_TARGET and complete,
            )
        )
    proxy = results.get("proxy")
    if proxy:
        surge = statistics.median(r["requests_per_s"] for r in proxy["runs"]["surge_proxy"])
        curl = statistics.median(r["requests_per_s"] for r in proxy["runs"]["curl_proxy"])
        targets.append(
            Target(
                f"through tinyproxy, {proxy['requests']:,} requests, -c {proxy['concurrency']}: "
                "surge vs curl --parallel",
                ">= 1.00x curl's requests/s",
                f"{surge:,.0f} vs {curl:,.0f} requests/s = {surge / curl:.2f}x (medians)",
                surge >= curl,
            )
        )
    warc = results.get("warc")
    if warc:
        best = warc["best_us_per_request"]
        targets.append(
            Target(
                f"--warc at {warc['body_bytes'] // 1024} KB bodies, keep-alive: client CPU "
                "per request vs records only",
                "<= 1.20x",
                f"{best['warc']:.1f} vs {best['records']:.1f} us = "
                f"{best['warc'] / best['records']:.2f}x (zlib: "
                f"{best['warc_zlib'] / best['records']:.2f}x; fastest rounds)",
                best["warc"] <= 1.2 * best["records"],
            )
        )
    return targets


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark surge fetch with large bodies kept (--output-dir, --warc) "
        "and through a proxy against curl (see the module docstring)."
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON path")
    parser.add_argument("--repeat", type=int, help="proxy: interleaved rounds (3)")
    parser.add_argument("--body-mb", type=int, help="bodies: MB per body (50)")
    parser.add_argument("--inputs", help="bodies: inputs (100)")
    parser.add_argument("--distinct", type=int, help="bodies: distinct URLs (all)")
    parser.add_argument("--body-repeat", type=int, help="bodies: interleaved rounds (2)")
    parser.add_argument("--concurrency", type=int, default=100, help="bodies: -c (100)")
    parser.add_argument("--requests", help="proxy: requests (5k)")
    parser.add_argument("--proxy-concurrency", type=int, default=64, help="proxy: -c (64)")
    parser.add_argument("--small-kb", type=int, default=10, help="proxy: body KB (10)")
    parser.add_argument("--warc-requests", help="warc: requests (20k)")
    parser.add_argument("--warc-repeat", type=int, help="warc: interleaved rounds (5)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per client run")
    parser.add_argument("--tmp", default=tempfile.gettempdir(), help="folder for the files")
    args = parser.parse_args(argv)
    args.only = parse_sections(parser, args.only, SECTIONS)
    quick = args.quick
    args.repeat = args.repeat or (1 if quick else 3)
    args.body_mb = args.body_mb or (5 if quick else 50)
    args.inputs = parse_count(args.inputs or ("20" if quick else "100"))
    args.distinct = args.distinct or args.inputs
    args.body_repeat = args.body_repeat or (1 if quick else 2)
    args.requests = parse_count(args.requests or ("300" if quick else "5k"))
    args.warc_requests = parse_count(args.warc_requests or ("1000" if quick else "20k"))
    args.warc_repeat = args.warc_repeat or (1 if quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for variable in (*PROXY_VARIABLES, "no_proxy", "NO_PROXY"):  # children inherit this
        os.environ.pop(variable, None)
    info = machine_info(["surge", "isal"])
    info["tools"] = {}
    for tool, command in {
        "nginx": [shutil.which("nginx") or "/usr/sbin/nginx", "-v"],
        "tinyproxy": [shutil.which("tinyproxy") or "/usr/bin/tinyproxy", "-v"],
        "curl": ["curl", "--version"],
    }.items():
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=10)
        info["tools"][tool] = (done.stdout + done.stderr).strip().splitlines()[0]
    announce("surge fetch extras: large bodies, a proxy", info, args.quick)
    print(f"{info['date']}  $ python {' '.join(sys.argv)}\n", flush=True)
    started = perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="surge-fetch-extras-", dir=args.tmp) as tmp:
        base = Path(tmp)
        with nginx(base, args.body_mb * 2**20, args.small_kb * 1024) as port:
            if "bodies" in args.only:
                results["bodies"] = run_bodies(args, base, port)
            if "proxy" in args.only:
                results["proxy"] = run_proxy(args, base, port)
            if "warc" in args.only:
                results["warc"] = run_warc(args, base, port)
    targets = check_targets(results)
    print_targets(targets, args.quick)
    path = write_json(
        Path(args.out), payload("fetch_extras", info, vars(args), results, targets, started)
    )
    print(f"\nwrote {path} in {perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
