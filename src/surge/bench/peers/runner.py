"""Run one peer in a fresh process, time it, and score its outcomes against the simulated web.

    >>> result = run_peer("aiohttp_gather", urls, concurrency=100, timeout=3.0, cafile=None)
    >>> result.wall_s, result.cpu_s, score(result, timeout=3.0).lost

Why a process per peer: grequests monkey-patches the standard library when it is
imported, multiprocessing forks, and a peer must not inherit another's warmed-up
pools or DNS cache.  The child raises its open-files limit to the hard limit, gets
its URLs from a temporary JSON file and streams its outcomes back as JSON lines
(see :mod:`._child`), so a peer killed at ``limit_s`` still tells how far it got.

What is measured:

- ``wall_s``: the wall time of the peer's ``run`` alone, from the child's own
  clock: not the interpreter's start-up nor its imports (``process_s`` has those).
- ``cpu_s``: user + system CPU of the child and every child of its own it waited
  for (multiprocessing's workers), from ``os.wait4``, less what the child had
  spent before ``run`` started (start-up, imports).

``sample=N`` runs the peer on N URLs spread evenly over the list and multiplies
wall and CPU by ``len(urls) / N`` (``extrapolated=True``): fair for
``requests_seq``, whose time is a sum over hosts, and for nothing concurrent.

Run as a module for a quick comparison on a simulated web of its own::

    python -m surge.bench.peers.runner --hosts 200 --concurrency 100 --timeout 3
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import PEERS
from ._common import Outcome

#: Default hard limit on one peer's process, in seconds.
LIMIT_S = 600.0
#: How often the runner looks whether the child has exited.
POLL_S = 0.01

_PACKAGE = __package__ or "surge.bench.peers"
# The directory to put on the child's sys.path so that _PACKAGE imports.
_ROOT = Path(__file__).resolve().parents[_PACKAGE.count(".") + 1]


@dataclass
class PeerResult:
    """One peer's run over one list of URLs."""

    name: str
    #: Wall time of the peer's ``run``, in seconds (extrapolated when ``extrapolated``;
    #: ``limit_s`` when killed; None when unavailable).
    wall_s: float | None
    #: CPU (user + system) the run cost its process tree, in seconds (same rules).
    cpu_s: float | None
    #: One per URL fetched (fewer when killed; only the sample when sampled).
    outcomes: list[Outcome] = field(default_factory=list)
    extrapolated: bool = False
    #: Why the numbers are not plain: "unavailable: ...", "killed at limit ...", a crash.
    note: str = ""
    available: bool = True
    killed: bool = False
    #: URLs handed to the peer (the sample's size when sampled).
    urls_run: int = 0
    #: Wall time of the whole child process, start-up and imports included.
    process_s: float = 0.0
    #: The child's event lines by name ("start", "done", and a wrapper's own).
    events: dict[str, dict[str, Any]] = field(default_factory=dict)


def available(name: str) -> bool:
    """Whether ``name``'s libraries are installed (found, not imported: importing
    grequests would monkey-patch this process)."""
    return all(importlib.util.find_spec(module) is not None for module in PEERS[name][1])


def spread(urls: Sequence[str], n: int) -> list[str]:
    """``n`` URLs spread evenly over ``urls`` (all of them when n >= len(urls))."""
    if n >= len(urls):
        return list(urls)
    return [urls[i * len(urls) // n] for i in range(n)]


def run_peer(
    name: str,
    urls: Sequence[str],
    *,
    concurrency: int,
    timeout: float,
    cafile: str | None,
    sample: int | None = None,
    limit_s: float = LIMIT_S,
    python: str = sys.executable,
    child_module: str = "_child",
) -> PeerResult:
    """Run peer ``name`` over ``urls`` in a fresh process and measure it.

    ``child_module``: the module of this package the process runs (``_child``; a
    wrapper such as ``_doctor_child`` may also run peers not in ``PEERS``, by
    module name, and add event lines of its own to ``events``).  Never raises
    for a peer's failure: a missing library, a crash or the time limit end up
    in ``note`` (and ``available`` / ``killed``).
    """
    known = name in PEERS
    if not known and child_module == "_child":
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    if known and not available(name):
        missing = [m for m in PEERS[name][1] if importlib.util.find_spec(m) is None]
        return PeerResult(
            name,
            None,
            None,
            note=f"unavailable: {', '.join(missing)} not installed",
            available=False,
        )
    run_urls = spread(urls, sample) if sample is not None else list(urls)
    with tempfile.TemporaryDirectory(prefix=f"surge-peer-{name}-") as directory:
        spec_path = os.path.join(directory, "spec.json")
        out_path = os.path.join(directory, "outcomes.jsonl")
        err_path = os.path.join(directory, "stderr.txt")
        with open(spec_path, "w") as spec:
            json.dump(
                {
                    "urls": run_urls,
                    "concurrency": concurrency,
                    "timeout": timeout,
                    "cafile": cafile,
                },
                spec,
            )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
        command = [python, "-m", f"{_PACKAGE}.{child_module}", name, spec_path, out_path]
        started = time.perf_counter()
        with open(err_path, "wb") as err:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env,
                start_new_session=True,  # its own process group, killed whole at the limit
            )
        status, cpu_total, killed = _wait(child, limit_s)
        process_s = time.perf_counter() - started
        events, outcomes = _read_output(out_path)
        with open(err_path, "rb") as err:
            stderr = err.read().decode("utf-8", "replace").strip()

    result = PeerResult(
        name, None, None, outcomes, urls_run=len(run_urls), process_s=process_s, events=events
    )
    if "unavailable" in events:
        result.available = False
        result.note = f"unavailable: {events['unavailable'].get('detail', '')}"
        return result
    cpu_before = float(events.get("start", {}).get("cpu_s", 0.0))
    result.cpu_s = max(0.0, cpu_total - cpu_before)
    if killed:
        result.killed = True
        result.wall_s = limit_s
        result.note = f"killed at limit {limit_s:g} s after {len(outcomes)} of {len(run_urls)}"
    elif "done" in events:
        result.wall_s = float(events["done"]["wall_s"])
    else:
        last = stderr.splitlines()[-1] if stderr else "no output"
        result.note = f"crashed (exit status {status}): {last}"
        return result
    if sample is not None and 0 < len(run_urls) < len(urls):
        factor = len(urls) / len(run_urls)
        result.wall_s = result.wall_s * factor
        result.cpu_s = result.cpu_s * factor
        result.extrapolated = True
        note = f"extrapolated from {len(run_urls)} of {len(urls)} URLs"
        result.note = f"{result.note}; {note}" if result.note else note
    return result


def _wait(child: subprocess.Popen[bytes], limit_s: float) -> tuple[int, float, bool]:
    """Reap ``child`` (killing its process group at ``limit_s``): (exit status, CPU s, killed)."""
    deadline = time.monotonic() + limit_s
    killed = False
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid != 0:
            break
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            killed = True
            pid, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(POLL_S)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if killed:  # the child's own children die with its group; do not leave them behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    return child.returncode, usage.ru_utime + usage.ru_stime, killed


def _read_output(path: str) -> tuple[dict[str, dict[str, Any]], list[Outcome]]:
    events: dict[str, dict[str, Any]] = {}
    outcomes: list[Outcome] = []
    try:
        with open(path) as out:
            lines = out.readlines()
    except FileNotFoundError:
        return events, outcomes
    for line in lines:
        if not line.endswith("\n"):
            break  # the child was killed in the middle of this line
        record = json.loads(line)
        if "event" in record:
            events[str(record["event"])] = record
        else:
            outcomes.append(Outcome.from_json(record))
    return events, outcomes


# -- scoring against the simulated web ------------------------------------------------


@dataclass
class Score:
    """A peer's outcomes set against what :func:`surge.sim.behaviour` says a correct
    client with a total deadline of ``timeout`` reports."""

    #: Outcomes with a status and no error.
    ok: int
    #: Error class -> how many outcomes carried it.
    errors: Counter[str]
    #: Hosts a correct client gets a whole answer from (a status and no error).
    answerable: int
    #: Answerable hosts this peer did not get that answer from (no outcome at all
    #: counts: the peer never got to them).
    lost: int
    #: Error class (or "status <n>", or "no outcome") -> lost hosts it accounts for.
    lost_by: Counter[str]
    #: Hosts a correct client times out on that this peer answered anyway: a peer
    #: whose timeout is per read, not per request, waits out slow redirect chains.
    beyond_deadline: int
    #: Hosts that answer within ``margin_s`` of the deadline: whether a client makes
    #: it depends on connect time under load, so they count neither way.
    borderline: int = 0


def score(
    result: PeerResult | Sequence[Outcome],
    urls: Sequence[str] | None = None,
    *,
    timeout: float,
    seed: int = 0,
    margin_s: float = 0.25,
) -> Score:
    """Score ``result``'s outcomes; ``urls`` (default: those it has outcomes for) are
    the URLs it was meant to fetch (pass the sample for a sampled run).

    A host whose server time (all hops) comes within ``margin_s`` of the deadline
    is borderline, not answerable: the sim's clock starts when the request
    arrives, a client's when it starts connecting, and a thousand simultaneous
    connects to one loopback server take tens of milliseconds to be accepted.
    """
    from surge.sim import behaviour

    outcomes = result.outcomes if isinstance(result, PeerResult) else list(result)
    by_url = {outcome.url: outcome for outcome in outcomes}
    wanted = list(urls) if urls is not None else list(by_url)
    errors = Counter(o.error for o in outcomes if o.error is not None)
    lost_by: Counter[str] = Counter()
    answerable = beyond = borderline = 0
    for url in wanted:
        parts = urlsplit(url)
        got = by_url.get(url)
        host = behaviour(parts.hostname or "", seed)
        status, error = host.expected(timeout, tls=parts.scheme == "https")
        if error is not None:
            if error == "read_timeout" and got is not None and got.error is None:
                beyond += 1
            continue
        if host.service_ms > (timeout - margin_s) * 1000:
            borderline += 1
            continue
        answerable += 1
        if got is None:
            lost_by["no outcome"] += 1
        elif got.error is not None:
            lost_by[got.error] += 1
        elif got.status != status:
            lost_by[f"status {got.status}"] += 1
    return Score(
        ok=sum(1 for o in outcomes if o.status is not None and o.error is None),
        errors=errors,
        answerable=answerable,
        lost=sum(lost_by.values()),
        lost_by=lost_by,
        beyond_deadline=beyond,
        borderline=borderline,
    )


# -- a quick comparison from the command line -----------------------------------------


def _counts(counter: Counter[str]) -> str:
    return " ".join(f"{key}={n}" for key, n in counter.most_common()) or "-"


def main(argv: Sequence[str] | None = None) -> int:
    """Start a simulated web, run the chosen peers on its generic hosts, print a table."""
    parser = argparse.ArgumentParser(prog="python -m surge.bench.peers.runner")
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated names")
    parser.add_argument("--tls", action="store_true", help="https URLs")
    parser.add_argument(
        "--seq-sample",
        type=int,
        default=50,
        help="requests_seq runs on this many URLs and is extrapolated",
    )
    parser.add_argument("--limit", type=float, default=120.0, help="seconds per peer")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from surge.sim import background, hosts, lower_bound

    names = hosts(args.hosts)
    with background(seed=args.seed) as sim:
        urls = [sim.url(host, tls=args.tls) for host in names]
        cafile = sim.cafile if args.tls else None
        bound = lower_bound(names, args.concurrency, args.timeout, seed=args.seed)
        print(
            f"{len(urls)} hosts, concurrency {args.concurrency}, timeout {args.timeout:g} s, "
            f"ideal client {bound:.2f} s",
            file=sys.stderr,
        )
        header = (
            f"{'peer':<21} {'wall s':>8} {'cpu s':>7} {'ok':>5} {'lost':>5} {'late':>5}"
            "  errors | lost by"
        )
        print(header)
        for name in args.peers.split(","):
            sample = args.seq_sample if name == "requests_seq" else None
            result = run_peer(
                name,
                urls,
                concurrency=args.concurrency,
                timeout=args.timeout,
                cafile=cafile,
                sample=sample,
                limit_s=args.limit,
            )
            if not result.available or result.wall_s is None or result.cpu_s is None:
                print(f"{name:<21} {result.note}")
                continue
            wanted = spread(urls, sample) if sample is not None else urls
            s = score(result, wanted, timeout=args.timeout, seed=args.seed)
            mark = "~" if result.extrapolated else " "
            print(
                f"{name:<21} {mark}{result.wall_s:>7.2f} {result.cpu_s:>7.2f} {s.ok:>5} "
                f"{s.lost:>5} {s.beyond_deadline:>5}  {_counts(s.errors)} | {_counts(s.lost_by)}"
                + (f"  ({result.note})" if result.note else "")
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
