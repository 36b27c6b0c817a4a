"""Benchmark surge's fetching against the HTTP clients people use today, on a simulated web.

Run it from the repository root::

    python benchmarks/fetch.py                    # full run (~20 minutes on 2 cores)
    python benchmarks/fetch.py --quick            # smoke run, small sizes (< 2 minutes)
    python benchmarks/fetch.py --only keepalive,tls
    python benchmarks/fetch.py --hosts 1000 --out /tmp/fetch.json --no-chart

Nothing leaves the machine: every host is a ``*.sim`` name of the simulated web
(:mod:`surge.sim`), which runs on 127.0.0.1 in a process of its own
(``surge.sim.background()``), so its CPU is never counted as a client's; every
client sends ``*.sim`` to 127.0.0.1 through its own resolver hook, and proxies
are off.  Every client runs in a fresh process of its own, so none inherits
another's warm pools, caches or monkey-patching.  Tables go to stdout, progress
to stderr, raw numbers plus the machine's description to
``benchmarks/results/fetch.json`` and a chart to ``benchmarks/results/fetch.png``
(next to ``--out``).  This machine kind is a shared 2-core Firecracker microVM
where system calls cost several microseconds and neighbours add noise: absolute
numbers are pessimistic, same-run ratios travel better.

Section 1, "sim": 1,000 and 10,000 generic hosts (``--hosts``)
    ``surge.sim.hosts(n)`` (seed 0): 85 % answer 200 after a long-tailed delay
    (median 70 ms, 5 % take 1-3 s), the rest are 404/500s, 1-3 hop redirect
    chains, hangs, stalled bodies, resets, clean closes and garbage.  Plain HTTP,
    a total timeout of 3 s (``--timeout``).  Every peer of
    ``surge.bench.peers.PEERS`` runs the same URL list, in order, through
    ``runner.run_peer`` (a process of its own, a hard time limit), at the same
    concurrency, 1,000 (``--concurrency``), except where the peer's documented
    pattern has a number of its own: ``aiohttp_gather`` keeps aiohttp's default
    connector limit of 100, ``multiprocessing_pool`` its 8 processes, and
    ``requests_seq`` runs one request at a time on ``--seq-sample`` hosts spread
    over the list (50), its wall and CPU multiplied up to the whole list (marked
    ``~``).  How each peer is configured is in its module's docstring
    (``src/surge/bench/peers/``); in short: requests with a Session per thread,
    ``multiprocessing.Pool(8).map(requests.get)``, ``grequests.map(size=c)`` on gevent
    greenlets, aiohttp's gather with all defaults, aiohttp with a fixed set of
    workers and ``TCPConnector(limit=c, limit_per_host=8)`` on uvloop, httpx
    ``AsyncClient`` behind a semaphore, pycurl ``CurlMulti`` with c easy handles,
    pyreqwest behind a semaphore, and surge's bulk engine (``surge fetch`` with
    ``-c c --max-time 3 -L``).  Redirects are followed by all.  One more row is
    not a peer but a reference: ``raw_floor`` (``surge.bench.peers.raw_floor``),
    ~80 lines of asyncio Protocol + httptools on uvloop with no pool, resolver,
    decoding or records - about the least CPU a Python client can spend on a
    new connection.  Where surge and the floor land at the same multiple of the
    lower bound, the rest of the distance is this machine's (two cores shared
    with the simulated web), not surge's design; the floor is never "the best
    peer".

    Columns: wall (the peer's ``run`` alone, from the child's clock: not the
    interpreter's start-up nor its imports), wall / the lower bound
    (``surge.sim.lower_bound(hosts, 1000, timeout)``: an ideal client with 1,000
    in flight, zero network and CPU cost), client CPU (user + system of the
    peer's process tree, imports excluded), ok (a status and no error), lost
    (hosts that answer within the deadline which the peer failed to get an
    answer from; ``runner.score``), borderline (hosts whose service time is
    within 0.25 s of the deadline, counted neither way), late (hosts a correct
    client times out on which the peer answered anyway: its timeout is per read,
    not per request).  "As fast as the best peer" compares surge with the peers
    that lost at most 1 % of the answerable hosts (a peer that times most hosts
    out is quick, not fast).  A peer is skipped at the next size when its run at this
    size predicts more than 5 minutes there (wall x the growth in hosts: linear,
    which over-predicts for a peer whose wall is mostly the timeout tail, and
    so only skips peers whose run already took tens of seconds).
    Then ``surge fetch`` runs once more, through the real command line in a
    subprocess, at the largest size, to show that the CLI path performs as the
    peer path does (its wall is the whole process: start-up, reading the URL
    file, writing JSONL records included).
    Targets: surge at 10,000 hosts: wall <= 1.1x the lower bound, 0 answerable
    hosts lost, and at least as fast as every other peer.

Section 2, "keepalive": one fast host over reused connections
    ``--requests`` GET requests (20,000) to ``status-200.sim`` (a 1 KiB body, no
    delay), 16 in flight, every client reusing its connections; what is measured
    is the client's CPU per request: ``getrusage(RUSAGE_SELF)`` of the client's
    process (every thread) around the requests and the client's close, after
    an unmeasured warm-up of 64 requests on the same client.  Clients
    (``benchmarks/fetch_clients.py``): surge's ``surge.http.AsyncClient`` on uvloop
    (16 worker tasks), aiohttp ``ClientSession`` with ``TCPConnector(limit=16)``
    on uvloop and on plain asyncio, httpx ``AsyncClient`` with
    ``Limits(max_connections=16)``, pycurl ``CurlMulti`` with 16 easy handles
    reused (libcurl keeps the connections), pyreqwest's async ``Client`` with
    ``max_connections(16)``, requests with one ``Session`` per thread on 16
    threads, and the reference ``raw_floor``: a protocol, httptools and a list
    of idle connections per host, nothing else (no timeouts, timings, decoding
    or pool limits) - the issue measured such a client at 0.018-0.021 ms a
    request.  Each client runs ``--repeat`` (3) times, interleaved with the
    others; the run with the least CPU per request is reported.  With two CPUs
    or more the simulated web runs on one and the clients on the others
    (``sim_on_own_cpu``; sections 2 and 3): sharing a CPU, every client was
    preempted by the server it had just woken, and how often depended on the
    two processes' rhythm more than on the client.  The JSON's ``cpus`` says
    which.  ``fetch_clients.py`` also reports minor faults and voluntary and
    involuntary context switches per run.
    Targets: surge's CPU per request <= 0.25x aiohttp's (the cheaper of its two
    loops) and <= pycurl's.

Section 3, "tls": a new TLS connection for every request
    ``--tls-hosts`` (2,000) HTTPS requests, one to each of ``h<i>--status-200.sim``,
    16 in flight, verifying the simulated web's CA (``cafile``).  Distinct names
    defeat connection reuse and TLS session resumption in every client (each
    keys its session cache by host name).  The server issues a certificate per
    name on first use; ``warm_tls`` only pre-issues the generic ``site<N>``
    blocks, so an unmeasured surge pass over every name runs first and the
    server's context cache (2,048 names) holds them for the measured runs.
    Warm-up: 16 requests to other names (the SSL context is built then).  CPU
    per request as in section 2, for surge, aiohttp (uvloop and asyncio),
    httpx, pycurl, pyreqwest and requests.  Clients close connections as they
    see fit (surge closes idle ones to stay within 16, aiohttp keeps them until
    the session closes); the measured window ends after the client's close, so
    every client pays for closing every connection.
    Target: surge's CPU per request <= 0.8x aiohttp's (the cheaper of its loops).

Section 4, "input": a 10-million-line URL file
    A text file in /tmp (deleted afterwards) whose lines are ``http://h<i>.invalid/``
    (surge's resolver fails ``.invalid`` at once without any query, RFC 6761,
    so almost no network work happens) except one line in 100,000, a real
    ``r<k>--status-200.sim`` URL.  ``surge fetch FILE -o /dev/null -q -c 1000
    --resolve '*.sim:*:127.0.0.1'`` runs under a psutil poll of its RSS every
    0.25 s; the peak is the larger of the polled maximum and the process's own
    high-water mark (``VmHWM`` of /proc/PID/status; not ``ru_maxrss``, which a
    child inherits from the benchmark's own address space at exec).  Sizes: 1M,
    3M and 10M lines (``--input-lines``); a size whose run the previous size
    predicts to take longer than ``--input-budget`` (600 s) is skipped and said
    so.  Records/s is lines / process wall.
    Target: peak RSS < 300 MB at 10M lines.

Section 5, "job": the whole ``surge fetch`` job against a bare aiohttp loop
    ``--requests`` (20,000) lines of one keep-alive URL (status-200.sim, 1 KiB)
    in a file; ``surge fetch FILE -o OUT.jsonl -q -c 64 --resolve ...`` runs as
    a process of its own, reading the file and writing every record.  Its CPU
    per request is (CPU of that run - CPU of the same command over a one-line
    file) / (requests - 1): start-up, imports and the first connection cancel
    out, the input's reading and the records' writing stay in.  Against it:
    aiohttp + uvloop as in section 2, with 64 in flight, which reads no file
    and writes nothing.  Then, in this process, the two ends alone over the same
    data: ``read_inputs`` over the file, and a ``RecordWriter`` writing the
    run's own records (parsed back from OUT) to a file; each best of three.
    Target: the job's CPU per request <= 0.5x aiohttp + uvloop's.

What is excluded: the simulated web's CPU everywhere; interpreter start-up and
imports (except in the CLI run of section 1 and in section 4, which time the
whole ``surge`` process, as a user sees it); building the client and its
warm-up (sections 2 and 3); the simulated server's certificate issuing; real
DNS (every name is answered locally, as a warm resolver cache would).
``--quick`` shrinks every size (and uses a 1 s timeout) to smoke-test the
script in under two minutes: its numbers judge nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter, process_time
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
    read_outcomes,
    run_child,
    surge_command,
    surge_fetch_sim,
    write_invalid_input,
    write_json,
)
from fetch_clients import CLIENTS

SECTIONS = ("sim", "keepalive", "tls", "input", "job")
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "fetch.json"
#: A peer predicted to take longer than this at the next size is skipped there.
SKIP_ABOVE_S = 300.0
#: Peers whose documented pattern fixes its own number in flight.
FIXED_INFLIGHT = {"requests_seq": 1, "aiohttp_gather": 100, "multiprocessing_pool": 8}
#: Clients of sections 2 and 3, in table order.
KEEPALIVE_CLIENTS = (
    "surge",
    "aiohttp_uvloop",
    "aiohttp",
    "httpx",
    "pycurl",
    "pyreqwest",
    "requests",
    "raw_floor",
)
TLS_CLIENTS = KEEPALIVE_CLIENTS
#: Requests in flight in sections 2 and 3.
INFLIGHT = 16
#: Requests in flight in section 5 (the whole job).
JOB_INFLIGHT = 64
#: One line in this many of the input file is a real simulated host.
REAL_EVERY = 100_000


def fmt_num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def fmt_counts(counter: dict[str, int] | Counter[str]) -> str:
    items = sorted(counter.items(), key=lambda kv: -kv[1])
    return " ".join(f"{k}={v}" for k, v in items) or "-"


# -- child processes -----------------------------------------------------------------------


def run_client(
    name: str,
    urls: list[str],
    warmup: list[str],
    cafile: str | None,
    limit_s: float,
    inflight: int = INFLIGHT,
) -> dict[str, Any]:
    """One run of ``fetch_clients.py`` for client ``name``: its JSON, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix=f"surge-bench-{name}-") as directory:
        spec_path = os.path.join(directory, "spec.json")
        out_path = os.path.join(directory, "out.json")
        with open(spec_path, "w") as spec:
            json.dump(
                {
                    "client": name,
                    "urls": urls,
                    "warmup": warmup,
                    "inflight": inflight,
                    "cafile": cafile,
                },
                spec,
            )
        command = [sys.executable, str(HERE / "fetch_clients.py"), spec_path]
        with open(out_path, "wb") as out:
            run, _ = run_child(command, limit_s, stdout=out.fileno())
        text = Path(out_path).read_text().strip()
    if run.killed:
        return {"error": f"killed at the {limit_s:g} s limit"}
    try:
        result: dict[str, Any] = json.loads(text.splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"exit status {run.status}, no result"}
    result["cpu_per_request_s"] = result["cpu_s"] / max(1, result["requests"])
    result["ok"] = int(result["outcomes"].get("200", 0))
    return result


# -- section 1: the simulated web -------------------------------------------------------------


def inflight_of(peer: str, concurrency: int) -> int:
    return FIXED_INFLIGHT.get(peer, concurrency)


def run_sim(args: argparse.Namespace) -> dict[str, Any]:
    from surge.bench.peers import PEERS
    from surge.bench.peers.runner import run_peer, score, spread
    from surge.sim import background, hosts, lower_bound

    timeout, concurrency = args.timeout, args.concurrency
    sizes = sorted(set(args.hosts))
    results: dict[str, Any] = {"timeout_s": timeout, "concurrency": concurrency, "sizes": {}}
    predicted: dict[str, float] = {}  # peer -> predicted seconds at the next size
    for index, n in enumerate(sizes):
        names = hosts(n)
        bounds = {c: lower_bound(names, c, timeout) for c in {concurrency, 100, 8, 1}}
        bound = bounds[concurrency]
        size: dict[str, Any] = {"hosts": n, "lower_bound_s": bound, "peers": {}}
        size["lower_bounds_by_inflight"] = {str(c): b for c, b in sorted(bounds.items())}
        table = Table(
            f"sim: {n:,} generic hosts, plain HTTP, timeout {timeout:g} s, "
            f"lower bound {bound:.2f} s at {concurrency:,} in flight",
            [
                "peer",
                "in flight",
                "wall s",
                "x bound",
                "cpu s",
                "ok",
                "lost",
                "borderline",
                "late",
                "lost by",
            ],
        )
        with background(seed=0) as sim:
            urls = [sim.url(host) for host in names]
            for peer in PEERS:
                flight = inflight_of(peer, concurrency)
                if predicted.get(peer, 0.0) > SKIP_ABOVE_S:
                    why = (
                        f"skipped: its {sizes[index - 1]:,}-host run predicts "
                        f"{predicted[peer]:,.0f} s here (> {SKIP_ABOVE_S:g} s)"
                    )
                    size["peers"][peer] = {"skipped": why, "in_flight": flight}
                    table.add(peer, f"{flight:,}", "-", "", "", "", "", "", "", "skipped")
                    table.note(f"{peer}: {why}")
                    continue
                sample = args.seq_sample if peer == "requests_seq" else None
                progress(f"sim {n:,}: {peer}")
                result = run_peer(
                    peer,
                    urls,
                    concurrency=concurrency,
                    timeout=timeout,
                    cafile=None,
                    sample=sample,
                    limit_s=args.limit,
                )
                row: dict[str, Any] = {
                    "in_flight": flight,
                    "wall_s": result.wall_s,
                    "cpu_s": result.cpu_s,
                    "process_s": result.process_s,
                    "extrapolated": result.extrapolated,
                    "killed": result.killed,
                    "urls_run": result.urls_run,
                    "note": result.note,
                }
                size["peers"][peer] = row
                if not result.available or result.wall_s is None or result.cpu_s is None:
                    table.add(peer, f"{flight:,}", "-", "", "", "", "", "", "", "no result")
                    table.note(f"{peer}: {result.note}")
                    continue
                wanted = spread(urls, sample) if sample is not None else urls
                s = score(result, wanted, timeout=timeout)
                row.update(score_fields(s, result.wall_s / bound))
                mark = "~" if result.extrapolated else ""
                of = f" (of {len(wanted)})" if sample is not None else ""
                detail = fmt_counts(s.lost_by)
                if result.note:
                    table.note(f"{peer}: {result.note}")
                table.add(
                    peer,
                    f"{flight:,}",
                    f"{mark}{result.wall_s:,.2f}",
                    f"{mark}{result.wall_s / bound:,.2f}",
                    f"{mark}{result.cpu_s:,.2f}",
                    f"{s.ok:,}{of}",
                    f"{s.lost:,}",
                    f"{s.borderline:,}",
                    f"{s.beyond_deadline:,}",
                    detail,
                )
                if index + 1 < len(sizes) and sample is None:
                    predicted[peer] = result.wall_s * sizes[index + 1] / n
                    row["predicted_next_s"] = predicted[peer]
            if index == len(sizes) - 1:
                progress(f"sim {n:,}: surge fetch (CLI)")
                cli = run_cli_sim(urls, concurrency, timeout, args.limit)
                wanted_cli = urls
                s = score(cli.pop("outcomes"), wanted_cli, timeout=timeout)
                cli.update(score_fields(s, cli["wall_s"] / bound))
                size["cli"] = cli
                table.add(
                    "surge fetch (CLI)",
                    f"{concurrency:,}",
                    f"*{cli['wall_s']:,.2f}",
                    f"*{cli['wall_s'] / bound:,.2f}",
                    f"*{cli['cpu_s']:,.2f}",
                    f"{s.ok:,}",
                    f"{s.lost:,}",
                    f"{s.borderline:,}",
                    f"{s.beyond_deadline:,}",
                    fmt_counts(s.lost_by),
                )
                peer_row = size["peers"].get("surge", {})
                if peer_row.get("process_s"):
                    table.note(
                        f"* whole process (start-up, input file, JSONL output): "
                        f"{cli['wall_s']:.2f} s vs {peer_row['process_s']:.2f} s for the "
                        f"surge peer's whole process ({peer_row['wall_s']:.2f} s of run)"
                    )
        surge_errors = size["peers"].get("surge", {}).get("errors")
        if surge_errors:
            table.note(
                f"surge's errors (the other peers' are in the JSON): {fmt_counts(surge_errors)}"
            )
        others = ", ".join(
            f"{b:.2f} s at {c:,}"
            for c, b in sorted(bounds.items(), reverse=True)
            if c != concurrency
        )
        table.note(f"lower bound at the peers' own concurrency: {others}")
        table.note("~ extrapolated from a sample; ok counts the sample. lost = answerable")
        table.note(
            "hosts not answered; borderline = within 0.25 s of the deadline; late = answered"
        )
        table.note("after a correct client's deadline (per-read timeouts).")
        table.print()
        results["sizes"][str(n)] = size
    return results


def score_fields(s: Any, x_bound: float) -> dict[str, Any]:
    """A run's score (surge.bench.peers.runner.score) as the JSON row's fields."""
    return {
        "ok": s.ok,
        "lost": s.lost,
        "answerable": s.answerable,
        "borderline": s.borderline,
        "late": s.beyond_deadline,
        "errors": dict(s.errors),
        "lost_by": dict(s.lost_by),
        "x_bound": x_bound,
    }


def run_cli_sim(
    urls: list[str], concurrency: int, timeout: float, limit_s: float
) -> dict[str, Any]:
    """``surge fetch`` over ``urls`` through the command line: wall, CPU, outcomes."""
    with tempfile.TemporaryDirectory(prefix="surge-bench-cli-") as directory:
        in_path = os.path.join(directory, "urls.txt")
        out_path = os.path.join(directory, "out.jsonl")
        Path(in_path).write_text("".join(u + "\n" for u in urls))
        command = surge_fetch_sim(in_path, out_path, concurrency, timeout)
        run, _ = run_child(command, limit_s)
        outcomes = read_outcomes(out_path)
    return {
        "command": " ".join(command[-15:]),
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "exit_status": run.status,
        "killed": run.killed,
        "records": len(outcomes),
        "outcomes": outcomes,
    }


# -- sections 2 and 3: CPU per request ------------------------------------------------------


def cpu_table(title: str, results: dict[str, Any], clients: Sequence[str], requests: int) -> Table:
    table = Table(
        title,
        ["client", "cpu/request", "user/req", "sys/req", "x surge", "req/s", "ok", "runs (ms/req)"],
    )
    surge = results.get("surge", {}).get("best", {}).get("cpu_per_request_s")
    for name in clients:
        r = results.get(name, {})
        best = r.get("best")
        if not best:
            table.add(name, "-", "", "", "", "", "", r.get("error", "no run"))
            continue
        per = best["cpu_per_request_s"]
        runs = " ".join(
            f"{x['cpu_per_request_s'] * 1e3:.3f}" if "cpu_s" in x else "x" for x in r["runs"]
        )
        table.add(
            name,
            f"{per * 1e3:.3f} ms",
            f"{best['user_s'] / requests * 1e3:.3f}",
            f"{best['sys_s'] / requests * 1e3:.3f}",
            f"{per / surge:.2f}x" if surge else "-",
            f"{requests / best['wall_s']:,.0f}",
            f"{best['ok']:,}",
            runs,
        )
    return table


def best_runs(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per client: every run, and the one with the least CPU per request."""
    out: dict[str, Any] = {}
    for name, got in runs.items():
        good = [r for r in got if "cpu_s" in r]
        entry: dict[str, Any] = {"runs": got}
        if good:
            entry["best"] = min(good, key=lambda r: r["cpu_per_request_s"])
        else:
            entry["error"] = "; ".join(str(r.get("error")) for r in got)
        out[name] = entry
    return out


def interleaved(
    clients: Sequence[str],
    repeat: int,
    urls: list[str],
    warmup: list[str],
    cafile: str | None,
    limit_s: float,
    label: str,
) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in clients}
    for attempt in range(repeat):
        for name in clients:
            progress(f"{label}: {name} (run {attempt + 1} of {repeat})")
            result = run_client(name, urls, warmup, cafile, limit_s)
            if "cpu_s" in result and result["ok"] != len(urls):
                result["note"] = f"only {result['ok']} of {len(urls)} answered 200"
            runs[name].append(result)
    return runs


@contextmanager
def sim_on_own_cpu(**options: Any) -> Iterator[tuple[Any, dict[str, list[int]] | None]]:
    """The simulated web on one CPU and the clients on the others, for the CPU
    sections; with one CPU (or no affinity calls, as on macOS), both share.

    The affinity is this thread's (the benchmark starts no threads of its own),
    inherited by every process it starts.  Apart, a client is not preempted by
    the server it woke (on this 2-core box a shared CPU put 0.2-0.7 involuntary
    context switches into every keep-alive request, and their cost into the
    client's system time); what a client still pays is the loopback's cost of
    waking its server, which a server on another machine would not charge it.
    On a 2-core box the clients get one CPU: multi-threaded ones (requests'
    threads, pyreqwest's tokio) run their threads on it, so their req/s is not
    comparable with a run where they had both.
    """
    from surge.sim import background

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        with background(**options) as sim:
            yield sim, None
        return
    server, client = cpus[-1:], cpus[:-1]
    try:
        os.sched_setaffinity(0, server)  # the sim's process inherits it
        with background(**options) as sim:
            os.sched_setaffinity(0, client)
            yield sim, {"server": server, "client": client}
    finally:
        os.sched_setaffinity(0, cpus)


def run_keepalive(args: argparse.Namespace) -> dict[str, Any]:
    with sim_on_own_cpu(seed=0) as (sim, cpus):
        url = sim.url("status-200.sim")
        urls = [url] * args.requests
        warmup = [url] * 64
        runs = interleaved(
            KEEPALIVE_CLIENTS, args.repeat, urls, warmup, None, args.limit, "keepalive"
        )
    results = best_runs(runs)
    table = cpu_table(
        f"keepalive: {args.requests:,} GETs to status-200.sim (1 KiB), {INFLIGHT} in flight, "
        f"best of {args.repeat}",
        results,
        KEEPALIVE_CLIENTS,
        args.requests,
    )
    table.note("cpu = user + sys of the client process (all threads), requests + close;")
    table.note("the simulated server runs in another process and is not counted.")
    if cpus:
        table.note(f"server pinned to CPU {cpus['server']}, clients to CPU {cpus['client']}.")
    table.print()
    return {"requests": args.requests, "inflight": INFLIGHT, "cpus": cpus, "clients": results}


def run_tls(args: argparse.Namespace) -> dict[str, Any]:
    n = args.tls_hosts
    with sim_on_own_cpu(seed=0) as (sim, cpus):
        urls = [sim.url(f"h{i}--status-200.sim", tls=True) for i in range(n)]
        warmup = [sim.url(f"w{i}--status-200.sim", tls=True) for i in range(INFLIGHT)]
        progress(f"tls: issuing {n + INFLIGHT:,} certificates (an unmeasured pass)")
        started = perf_counter()
        warm = run_client("surge", urls, warmup, sim.cafile, args.limit)
        issue_s = perf_counter() - started
        runs = interleaved(TLS_CLIENTS, args.repeat, urls, warmup, sim.cafile, args.limit, "tls")
    results = best_runs(runs)
    table = cpu_table(
        f"tls: {n:,} HTTPS GETs, one new connection + full handshake each, {INFLIGHT} in "
        f"flight, best of {args.repeat}",
        results,
        TLS_CLIENTS,
        n,
    )
    table.note("distinct host names: no connection reuse and no session resumption;")
    table.note("certificates were issued by an unmeasured pass first. ECDSA P-256, TLS 1.3.")
    if cpus:
        table.note(f"server pinned to CPU {cpus['server']}, clients to CPU {cpus['client']}.")
    table.print()
    return {
        "hosts": n,
        "inflight": INFLIGHT,
        "cpus": cpus,
        "certificate_pass_s": issue_s,
        "certificate_pass_ok": warm.get("ok"),
        "clients": results,
    }


# -- section 4: a 10M-line input -------------------------------------------------------------


def run_input(args: argparse.Namespace) -> dict[str, Any]:
    from surge.sim import background

    table = Table(
        f"input: surge fetch FILE -o /dev/null -q -c 1000 (one line in {REAL_EVERY:,} "
        "a real host, the rest http://h<i>.invalid/)",
        ["lines", "wall s", "records/s", "cpu s", "peak RSS", "RSS at 10%", "RSS at 50%", "exit"],
    )
    results: dict[str, Any] = {"real_every": REAL_EVERY, "sizes": {}}
    rate: float | None = None
    with background(seed=0) as sim, tempfile.TemporaryDirectory(prefix="surge-bench-in-") as tmp:
        for lines in sorted(set(args.input_lines)):
            if rate is not None and lines / rate > args.input_budget:
                why = (
                    f"skipped: predicted {lines / rate:,.0f} s at {rate:,.0f} records/s "
                    f"(> --input-budget {args.input_budget:g} s)"
                )
                results["sizes"][str(lines)] = {"skipped": why}
                table.add(f"{lines:,}", "-", "", "", "", "", "", why)
                continue
            path = os.path.join(tmp, "urls.txt")
            progress(f"input: writing {lines:,} lines")
            started = perf_counter()
            write_invalid_input(path, lines, sim.http_port, REAL_EVERY)
            write_s = perf_counter() - started
            progress(f"input: surge fetch over {lines:,} lines")
            command = [*surge_command(), "fetch", path, "-o", os.devnull, "-q"]
            command += ["-c", "1000", "--resolve", "*.sim:*:127.0.0.1"]
            limit = max(120.0, 3 * args.input_budget)
            run, _ = run_child(command, limit, poll_rss=True)
            os.unlink(path)
            polled = [rss for _, rss in run.rss_samples]
            # Not ru_maxrss: a child's starts from this benchmark's own address
            # space at exec, so it reported the parent's peak, not surge's.
            peak = max([run.hwm_bytes, *polled])
            rate = lines / run.wall_s

            def at(fraction: float, samples: list[tuple[float, int]] = run.rss_samples) -> int:
                if not samples:
                    return 0
                return samples[min(len(samples) - 1, int(len(samples) * fraction))][1]

            results["sizes"][str(lines)] = {
                "lines": lines,
                "write_s": write_s,
                "wall_s": run.wall_s,
                "cpu_s": run.cpu_s,
                "records_per_s": rate,
                "peak_rss_bytes": peak,
                "ru_maxrss_bytes": run.maxrss_bytes,
                "vm_hwm_bytes": run.hwm_bytes,
                "polled_max_rss_bytes": max(polled, default=0),
                "rss_samples": run.rss_samples,
                "exit_status": run.status,
                "killed": run.killed,
            }
            table.add(
                f"{lines:,}",
                f"{run.wall_s:,.1f}",
                f"{rate:,.0f}",
                f"{run.cpu_s:,.1f}",
                f"{peak / 2**20:,.0f} MB",
                f"{at(0.1) / 2**20:,.0f} MB",
                f"{at(0.5) / 2**20:,.0f} MB",
                "killed" if run.killed else str(run.status),
            )
    table.note("peak = max(the child's VmHWM, RSS polled every 0.25 s); wall includes start-up;")
    table.note("the file lives in /tmp and is deleted after each size.")
    table.print()
    return results


# -- section 5: the whole job ------------------------------------------------------------------


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    from surge.bulk.inputs import read_inputs
    from surge.bulk.outputs import open_writer

    n = max(2, args.requests)
    runs: dict[str, list[dict[str, Any]]] = {"surge_fetch": [], "aiohttp_uvloop": []}
    with (
        sim_on_own_cpu(seed=0) as (sim, cpus),
        tempfile.TemporaryDirectory(prefix="surge-bench-job-") as tmp,
    ):
        url = sim.url("status-200.sim")
        inputs = {}
        for lines in (n, 1):
            inputs[lines] = os.path.join(tmp, f"urls-{lines}.txt")
            Path(inputs[lines]).write_text(f"{url}\n" * lines)
        out = os.path.join(tmp, "out.jsonl")

        def job(lines: int) -> Any:
            command = [*surge_command(), "fetch", inputs[lines], "-o", out, "-q"]
            command += ["-c", str(JOB_INFLIGHT), "--resolve", "*.sim:*:127.0.0.1"]
            run, _ = run_child(command, args.limit)
            return run

        for turn in range(args.repeat):
            progress(f"job: surge fetch over {n:,} lines, run {turn + 1} of {args.repeat}")
            full, one = job(n), job(1)
            runs["surge_fetch"].append(
                {
                    "cpu_s": full.cpu_s,
                    "one_line_cpu_s": one.cpu_s,
                    "cpu_per_request_s": (full.cpu_s - one.cpu_s) / (n - 1),
                    "exit_status": full.status,
                    "killed": full.killed,
                }
            )
            progress(f"job: aiohttp_uvloop, run {turn + 1} of {args.repeat}")
            runs["aiohttp_uvloop"].append(
                run_client(
                    "aiohttp_uvloop",
                    [url] * n,
                    [url] * JOB_INFLIGHT,
                    None,
                    args.limit,
                    JOB_INFLIGHT,
                )
            )
        # One more run for its records: each end is then timed alone on them.
        job(n)
        records = [json.loads(line) for line in Path(out).read_text().splitlines()]
        ok = sum(1 for record in records if record["status"] == 200)
        reader_s = writer_s = math.inf
        for _ in range(3):
            started = process_time()
            for _item in read_inputs(inputs[n]):
                pass
            reader_s = min(reader_s, process_time() - started)
            started = process_time()
            with open_writer(os.path.join(tmp, "written.jsonl"), "jsonl") as writer:
                for record in records:
                    writer.write(record)
            writer_s = min(writer_s, process_time() - started)
    surge_best = min(runs["surge_fetch"], key=lambda r: r["cpu_per_request_s"])
    aio_ok = [r for r in runs["aiohttp_uvloop"] if "cpu_per_request_s" in r]
    aio_best = min(aio_ok, key=lambda r: r["cpu_per_request_s"]) if aio_ok else None
    results: dict[str, Any] = {
        "requests": n,
        "inflight": JOB_INFLIGHT,
        "cpus": cpus,
        "runs": runs,
        "surge_fetch": surge_best,
        "surge_ok": ok,
        "aiohttp_uvloop": aio_best,
        "reader_per_request_s": reader_s / n,
        "writer_per_request_s": writer_s / len(records),
    }
    table = Table(
        f"job: {n:,} keep-alive GETs to status-200.sim (1 KiB), {JOB_INFLIGHT} in flight, "
        f"best of {args.repeat}",
        ["", "cpu us/request", "x aiohttp+uvloop", "runs (us)"],
    )
    aio_per = aio_best["cpu_per_request_s"] if aio_best else math.nan

    def row(name: str, per: float, spread: str = "") -> None:
        table.add(name, f"{per * 1e6:,.1f}", fmt_num(per / aio_per), spread)

    def spread(key: str) -> str:
        values = [r["cpu_per_request_s"] * 1e6 for r in runs[key] if "cpu_per_request_s" in r]
        return " / ".join(f"{v:.1f}" for v in values)

    row("surge fetch, whole job", surge_best["cpu_per_request_s"], spread("surge_fetch"))
    row("  of which: reading the input", results["reader_per_request_s"])
    row("  of which: writing the records", results["writer_per_request_s"])
    row("aiohttp + uvloop, writes nothing", aio_per, spread("aiohttp_uvloop"))
    table.note("surge fetch: (CPU of the run - CPU of a one-line run) / (requests - 1), so")
    table.note("start-up and imports cancel out; the input read and records written stay in.")
    table.note("The reader and writer rows: each alone, in the benchmark's process, best of 3.")
    if cpus:
        table.note(f"server pinned to CPU {cpus['server']}, clients to CPU {cpus['client']}.")
    table.print()
    return results


# -- targets ---------------------------------------------------------------------------------


def cheaper_aiohttp(clients: dict[str, Any]) -> tuple[str, float] | None:
    found = [
        (name, clients[name]["best"]["cpu_per_request_s"])
        for name in ("aiohttp_uvloop", "aiohttp")
        if clients.get(name, {}).get("best")
    ]
    return min(found, key=lambda x: x[1]) if found else None


def check_targets(results: dict[str, Any]) -> list[Target]:
    from surge.bench.peers import REFERENCES

    targets: list[Target] = []
    sim = results.get("sim")
    if sim:
        largest = max(sim["sizes"], key=int)
        size = sim["sizes"][largest]
        where = f"at {int(largest):,} hosts" + ("" if int(largest) >= 10_000 else " (not 10,000)")
        surge = size["peers"].get("surge", {})
        if surge.get("wall_s") is not None and "lost" in surge:
            ratio = surge["wall_s"] / size["lower_bound_s"]
            floor = size["peers"].get("raw_floor", {})
            floor_text = (
                f" (the raw floor: {floor['wall_s'] / size['lower_bound_s']:.2f}x)"
                if floor.get("wall_s") is not None
                else ""
            )
            targets.append(
                Target(
                    f"1a. surge wall vs lower bound {where}",
                    "<= 1.1x",
                    f"{surge['wall_s']:.2f} s / {size['lower_bound_s']:.2f} s = {ratio:.2f}x"
                    + floor_text,
                    ratio <= 1.1,
                )
            )
            targets.append(
                Target(
                    f"1b. surge answerable hosts lost {where}",
                    "0",
                    f"{surge['lost']} of {surge['answerable']:,}",
                    surge["lost"] == 0,
                )
            )
            # A peer that is fast because it failed its hosts is not "faster": only
            # peers that lost at most 1 % of the answerable hosts are compared.
            others = [
                (name, row["wall_s"])
                for name, row in size["peers"].items()
                if name != "surge"
                and name not in REFERENCES
                and row.get("wall_s") is not None
                and not row.get("killed")
                and row.get("lost", 0) <= 0.01 * row.get("answerable", 0)
            ]
            lossy = [
                f"{name} (lost {row['lost']:,})"
                for name, row in size["peers"].items()
                if name not in REFERENCES and row.get("lost", 0) > 0.01 * row.get("answerable", 0)
            ]
            skipped = [n for n, row in size["peers"].items() if "skipped" in row]
            if others:
                best_name, best_wall = min(others, key=lambda x: x[1])
                extra = f"; skipped as too slow: {', '.join(skipped)}" if skipped else ""
                extra += f"; not compared, lost > 1 %: {', '.join(lossy)}" if lossy else ""
                targets.append(
                    Target(
                        f"1c. surge at least as fast as the best peer {where}",
                        "wall <= best peer's",
                        f"surge {surge['wall_s']:.2f} s vs {best_name} {best_wall:.2f} s{extra}",
                        surge["wall_s"] <= best_wall,
                    )
                )
        else:
            targets.append(Target("1. surge on the simulated web", "all", "no surge run", None))
    for key, label, factor in (("keepalive", "2", 0.25), ("tls", "3", 0.8)):
        section = results.get(key)
        if not section:
            continue
        clients = section["clients"]
        surge_best = clients.get("surge", {}).get("best")
        aio = cheaper_aiohttp(clients)
        if surge_best is None or aio is None:
            targets.append(Target(f"{label}. {key}", "all", "surge or aiohttp missing", None))
            continue
        s = surge_best["cpu_per_request_s"]
        raw = clients.get("raw_floor", {}).get("best")
        floor_text = f" (the raw floor: {raw['cpu_per_request_s'] * 1e3:.4f} ms)" if raw else ""
        targets.append(
            Target(
                f"{label}a. {key}: surge CPU/request vs aiohttp ({aio[0]})",
                f"<= {factor}x",
                f"{s * 1e3:.4f} ms vs {aio[1] * 1e3:.4f} ms = {s / aio[1]:.2f}x" + floor_text,
                s <= factor * aio[1],
            )
        )
        curl = clients.get("pycurl", {}).get("best")
        if key == "keepalive" and curl:
            c = curl["cpu_per_request_s"]
            targets.append(
                Target(
                    "2b. keepalive: surge CPU/request vs pycurl",
                    "<= 1.0x",
                    f"{s * 1e3:.4f} ms vs {c * 1e3:.4f} ms = {s / c:.2f}x",
                    s <= c,
                )
            )
    job = results.get("job")
    if job and job.get("aiohttp_uvloop"):
        s = job["surge_fetch"]["cpu_per_request_s"]
        a = job["aiohttp_uvloop"]["cpu_per_request_s"]
        targets.append(
            Target(
                "5. job: surge fetch CPU/request (input and records in) vs aiohttp + uvloop",
                "<= 0.5x",
                f"{s * 1e6:.1f} us vs {a * 1e6:.1f} us = {s / a:.2f}x",
                s <= 0.5 * a and job["surge_ok"] == job["requests"],
            )
        )
    inputs = results.get("input")
    if inputs:
        measured = [v for v in inputs["sizes"].values() if "peak_rss_bytes" in v]
        if measured:
            top = max(measured, key=lambda v: v["lines"])
            rss = ", ".join(
                f"{v['lines'] / 1e6:g}M: {v['peak_rss_bytes'] / 2**20:.0f} MB" for v in measured
            )
            short = "" if top["lines"] >= 10_000_000 else f" (largest run {top['lines']:,} lines)"
            targets.append(
                Target(
                    f"4. peak RSS over a 10M-line input{short}",
                    "< 300 MB",
                    rss,
                    top["peak_rss_bytes"] < 300 * 2**20 and not top["killed"],
                )
            )
    return targets


# -- the chart -----------------------------------------------------------------------------------


def draw_chart(results: dict[str, Any], path: Path) -> Path | None:
    from surge.bench.peers import REFERENCES

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; no chart", file=sys.stderr)
        return None
    panels = [k for k in ("sim", "keepalive", "tls", "input") if results.get(k)]
    if not panels:
        return None
    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, 4.8 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(panels) :]:
        ax.axis("off")
    surge_color, other_color = "#d62728", "#7f7f7f"
    for ax, key in zip(flat, panels, strict=False):
        if key == "sim":
            sim = results["sim"]
            sizes = sorted(sim["sizes"], key=int)
            peers = list(sim["sizes"][sizes[0]]["peers"])
            width = 0.8 / len(sizes)
            colours = ["#9ecae1", "#3182bd", "#08519c"]
            reds = ["#fc9272", "#de2d26", "#a50f15"]
            for j, n in enumerate(sizes):
                size = sim["sizes"][n]
                for i, peer in enumerate(peers):
                    row = size["peers"].get(peer, {})
                    x = i + (j - (len(sizes) - 1) / 2) * width
                    wall = row.get("wall_s")
                    if wall is None:
                        ax.text(
                            x,
                            0.02,
                            "skipped",
                            rotation=90,
                            ha="center",
                            va="bottom",
                            fontsize=7,
                            transform=ax.get_xaxis_transform(),
                        )
                        continue
                    ax.bar(
                        x,
                        wall,
                        width,
                        color=(
                            reds[j % 3]
                            if peer == "surge"
                            else "white"
                            if peer in REFERENCES
                            else colours[j % 3]
                        ),
                        hatch="//" if row.get("extrapolated") else None,
                        edgecolor=(
                            "black" if row.get("extrapolated") or peer in REFERENCES else "white"
                        ),
                        label=f"{int(n):,} hosts" if i == 1 else None,
                    )
                    ax.annotate(
                        f"{wall:,.1f}"
                        + (
                            f" lost {row['lost']:,}"
                            if row.get("lost", 0) > 0.01 * row.get("answerable", 0)
                            else ""
                        ),
                        (x, wall),
                        ha="center",
                        va="bottom",
                        fontsize=6,
                        rotation=90,
                    )
                ax.axhline(
                    size["lower_bound_s"],
                    color=colours[j % 3],
                    linestyle="--",
                    linewidth=1,
                    label=f"lower bound, {int(n):,} hosts ({size['lower_bound_s']:.1f} s)",
                )
            ax.set_yscale("log")
            tallest = max(
                (
                    r.get("wall_s") or 0.0
                    for z in sim["sizes"].values()
                    for r in z["peers"].values()
                ),
                default=1.0,
            )
            ax.set_ylim(top=tallest * 2.5)
            ax.set_xticks(range(len(peers)))
            ax.set_xticklabels(
                [
                    f"{p}\n(reference)"
                    if p in REFERENCES
                    else f"{p}\n({inflight_of(p, sim['concurrency'])})"
                    for p in peers
                ],
                rotation=45,
                ha="right",
                fontsize=7,
            )
            ax.set_ylabel("wall time, s (log)")
            ax.set_title(
                "Simulated web: wall time per peer (in flight); hatched = extrapolated",
                fontsize=9,
            )
            ax.legend(fontsize=7, loc="upper right")
        elif key in ("keepalive", "tls"):
            clients = results[key]["clients"]
            names = [n for n in clients if clients[n].get("best")]
            scale, unit = (1e6, "µs") if key == "keepalive" else (1e3, "ms")
            values = [clients[n]["best"]["cpu_per_request_s"] * scale for n in names]
            bars = ax.bar(
                [f"{n}\n(reference)" if n in REFERENCES else n for n in names],
                values,
                color=[
                    surge_color if n == "surge" else "white" if n in REFERENCES else other_color
                    for n in names
                ],
                edgecolor=["black" if n in REFERENCES else "none" for n in names],
            )
            for bar, value in zip(bars, values, strict=True):
                ax.annotate(
                    f"{value:,.0f}" if key == "keepalive" else f"{value:.2f}",
                    (bar.get_x() + bar.get_width() / 2, value),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
            if key == "keepalive":
                ax.set_yscale("log")
                ax.set_title(
                    f"Keep-alive: client CPU per request, {results[key]['requests']:,} GETs, "
                    f"{INFLIGHT} in flight",
                    fontsize=9,
                )
                ax.set_ylabel(f"CPU per request, {unit} (log)")
            else:
                ax.set_title(
                    f"New TLS connection per request: client CPU, {results[key]['hosts']:,} hosts",
                    fontsize=9,
                )
                ax.set_ylabel(f"CPU per request, {unit}")
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        else:
            sizes_in = results["input"]["sizes"]
            for n in sorted(sizes_in, key=int):
                samples = sizes_in[n].get("rss_samples")
                if not samples:
                    continue
                ax.plot(
                    [t for t, _ in samples],
                    [r / 2**20 for _, r in samples],
                    label=f"{int(n) / 1e6:g}M lines: {sizes_in[n]['records_per_s']:,.0f}/s, "
                    f"peak {sizes_in[n]['peak_rss_bytes'] / 2**20:.0f} MB",
                )
            ax.axhline(300, color=surge_color, linestyle="--", linewidth=1, label="target 300 MB")
            ax.set_ylim(0, 320)
            ax.set_xlabel("seconds")
            ax.set_ylabel("RSS, MB")
            ax.set_title("surge fetch over a huge URL file: RSS over time", fontsize=9)
            ax.legend(fontsize=7, loc="center right")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("surge fetch benchmark (simulated web on 127.0.0.1, 2-core Firecracker microVM)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- command line ----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark surge fetch and surge.http.AsyncClient against requests, aiohttp, "
        "httpx, pycurl, pyreqwest and friends on the simulated web (see the module docstring)."
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run (< 2 min)")
    parser.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON path (chart: same, .png)")
    parser.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")
    parser.add_argument("--hosts", help="sim: host counts, comma-separated (1k,10k)")
    parser.add_argument("--timeout", type=float, help="sim: total seconds per request (3)")
    parser.add_argument("--concurrency", type=int, default=1000, help="sim: in flight (1000)")
    parser.add_argument("--seq-sample", type=int, help="sim: hosts requests_seq runs (50)")
    parser.add_argument("--limit", type=float, help="seconds before a child is killed (360)")
    parser.add_argument("--requests", type=int, help="keepalive, job: requests per run (20,000)")
    parser.add_argument("--tls-hosts", type=int, help="tls: hosts, one request each (2,000)")
    parser.add_argument("--repeat", type=int, help="keepalive, tls, job: runs per client (3)")
    parser.add_argument("--input-lines", help="input: sizes, comma-separated (1M,3M,10M)")
    parser.add_argument(
        "--input-budget", type=float, default=600.0, help="input: skip a size predicted longer"
    )
    args = parser.parse_args(argv)
    args.only = parse_sections(parser, args.only, SECTIONS)
    quick = args.quick
    args.hosts = [
        parse_count(h) for h in (args.hosts or ("100,300" if quick else "1k,10k")).split(",")
    ]
    args.timeout = args.timeout or (1.0 if quick else 3.0)
    args.seq_sample = args.seq_sample or (10 if quick else 50)
    args.limit = args.limit or (60.0 if quick else 360.0)
    args.requests = args.requests or (2_000 if quick else 20_000)
    args.tls_hosts = args.tls_hosts or (200 if quick else 2_000)
    args.repeat = args.repeat or (1 if quick else 3)
    default_lines = "100k,300k" if quick else "1M,3M,10M"
    args.input_lines = [parse_count(s) for s in (args.input_lines or default_lines).split(",")]
    if args.tls_hosts + INFLIGHT > 2048:
        parser.error("--tls-hosts: at most 2,032 (the simulated server caches 2,048 contexts)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for variable in PROXY_VARIABLES:  # every child inherits this environment
        os.environ.pop(variable, None)
    packages = ["surge", "aiohttp", "httpx", "pycurl", "pyreqwest", "requests", "grequests"]
    info = machine_info([*packages, "gevent", "uvloop", "httptools"])
    announce("surge fetch benchmark", info, args.quick)
    started = perf_counter()
    results: dict[str, Any] = {}
    if "sim" in args.only:
        results["sim"] = run_sim(args)
    if "keepalive" in args.only:
        results["keepalive"] = run_keepalive(args)
    if "tls" in args.only:
        results["tls"] = run_tls(args)
    if "input" in args.only:
        results["input"] = run_input(args)
    if "job" in args.only:
        results["job"] = run_job(args)
    targets = check_targets(results)
    print_targets(targets, args.quick)
    out = Path(args.out)
    path = write_json(
        out, payload("fetch", info, vars(args), results, targets, started, clients=CLIENTS)
    )
    print(f"\nwrote {path}", end="")
    if not args.no_chart:
        chart = draw_chart(results, out.with_suffix(".png"))
        if chart is not None:
            print(f" and {chart}", end="")
    print(f" in {perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
