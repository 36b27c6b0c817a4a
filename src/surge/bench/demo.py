"""``surge demo``: the write-ups' ways of fetching a thousand sites, and surge's, side by side.

It starts the simulated web on 127.0.0.1 (no network needed), gives every
pattern the same thousand hosts - long-tailed latencies, hangs, resets, garbage
- and prints how long each took and how many answerable hosts it lost.  Each
pattern runs in a fresh process of its own (``surge.bench.peers``).  For the
rigorous, same-concurrency comparison with more peers, see benchmarks/fetch.py.

After the table, one short section for each of the other write-ups surge
answers (:mod:`surge.bench.writeups`): boto's pool drain, a connection per
query, grequests + pyOpenSSL.  ``--sections`` picks which run.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from surge.sim import SimInfo

#: (peer, how the write-ups ran it, in flight or None for the demo's --peer-concurrency)
PATTERNS: tuple[tuple[str, str, int | None], ...] = (
    ("requests_seq", "requests, one after another", 1),
    ("requests_threads", "requests + a thread pool", None),
    ("multiprocessing_pool", "multiprocessing (8) + requests", 8),
    ("grequests", "grequests (gevent)", None),
    ("aiohttp_gather", "aiohttp + gather, defaults", 100),
    ("surge", "surge fetch", -1),  # -1: the demo's --concurrency
)


@dataclass
class Row:
    peer: str
    label: str
    in_flight: int
    wall_s: float | None
    cpu_s: float | None
    extrapolated: bool
    ok: int
    lost: int
    answerable: int
    note: str


def _sections(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    """``--sections``: known names, in the demo's order, each once."""
    from surge.bench.writeups import SECTIONS

    wanted = {name.strip() for name in value.split(",") if name.strip()}
    unknown = sorted(wanted - set(SECTIONS))
    if unknown or not wanted:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}; choose from {', '.join(SECTIONS)}"
        )
    return tuple(name for name in SECTIONS if name in wanted)


@click.command("demo")
@click.option("--hosts", "n_hosts", default=1000, show_default=True, help="Simulated hosts.")
@click.option("--timeout", default=3.0, show_default=True, help="Seconds per request.")
@click.option("-c", "--concurrency", default=1000, show_default=True, help="surge's in flight.")
@click.option(
    "--peer-concurrency", default=100, show_default=True, help="Threads / pool size of the peers."
)
@click.option(
    "--seq-sample", default=30, show_default=True, help="Hosts the sequential run samples."
)
@click.option("--only", help="Comma-separated peers (default: all of the demo's).")
@click.option("--tls", is_flag=True, help="HTTPS hosts (a throwaway CA).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write JSON here.")
@click.option("--limit", default=300.0, show_default=True, help="Seconds before a pattern is cut.")
@click.option(
    "--sections",
    default="fetch,pool,db,pyopenssl",
    show_default=True,
    callback=_sections,
    help="Comma-separated sections to run: fetch (the table of patterns), pool (boto's pool "
    "drain), db (connect per query), pyopenssl (grequests + pyOpenSSL).",
)
def demo_command(
    n_hosts: int,
    timeout: float,
    concurrency: int,
    peer_concurrency: int,
    seq_sample: int,
    only: str | None,
    tls: bool,
    json_path: str | None,
    limit: float,
    sections: tuple[str, ...],
) -> None:
    """Fetch simulated sites the ways the write-ups did, then with surge; compare.

    Then, one short section each, the other write-ups surge answers: boto's pool
    drain, a connection per query, grequests + pyOpenSSL."""
    from surge.bench import writeups
    from surge.sim import background

    payload: dict[str, Any] = {
        "hosts": n_hosts,
        "timeout_s": timeout,
        "concurrency": concurrency,
        "tls": tls,
        "sections": list(sections),
    }
    tls_missing = writeups.tls_missing() if "pyopenssl" in sections else []
    tls_names: list[str] = []
    if "pyopenssl" in sections and not tls_missing:
        tls_names = writeups.answering_hosts(writeups.TLS_HOSTS, timeout)
    warm = max(n_hosts if tls and "fetch" in sections else 0, writeups.sites_to_warm(tls_names))
    printed = False

    def section(text: str) -> None:
        nonlocal printed
        if printed:
            click.echo("")
        click.echo(text)
        printed = True

    with contextlib.ExitStack() as stack:
        sim = None
        if "fetch" in sections or tls_names:
            sim = stack.enter_context(background(warm_tls=warm))
        if "fetch" in sections and sim is not None:
            rows, bound = _fetch(
                sim, n_hosts, timeout, concurrency, peer_concurrency, seq_sample, only, tls, limit
            )
            payload.update(lower_bound_s=bound, rows=[row.__dict__ for row in rows])
            section(render(rows, bound, sample_of=n_hosts))
        if "pool" in sections:
            sizes = " and ".join(f"{n:,}" for n in writeups.DRAIN_SIZES)
            with _progress(f"draining pools of {sizes} idle connections"):
                drained = writeups.pool_drain(writeups.DRAIN_SIZES)
            payload["pool_drain"] = [asdict(row) for row in drained]
            section(writeups.render_pool_drain(drained))
        if "db" in sections and writeups.db_missing():
            hint = "this Python was built without the standard library's sqlite3"
            section(writeups.skipped("connect per query", writeups.db_missing(), hint))
        elif "db" in sections:
            with _progress(f"running {writeups.DB_QUERIES:,} x SELECT 1 three ways on SQLite"):
                queried = writeups.connect_per_query(writeups.DB_QUERIES)
            payload["connect_per_query"] = [asdict(row) for row in queried]
            section(writeups.render_db(queried))
        if "pyopenssl" in sections:
            if tls_missing:
                section(writeups.skipped("grequests + pyOpenSSL", tls_missing))
            elif sim is not None:
                with _progress(
                    f"running grequests over {len(tls_names):,} HTTPS hosts, plain, then with "
                    "pyOpenSSL injected (one request after another: about "
                    f"{writeups.serial_s(tls_names):.0f} s)"
                ):
                    fetched = writeups.grequests_pyopenssl(
                        sim,
                        n_hosts=len(tls_names),
                        concurrency=peer_concurrency,
                        timeout=timeout,
                        limit_s=limit,
                    )
                payload["grequests_pyopenssl"] = asdict(fetched)
                section(writeups.render_pyopenssl(fetched))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(payload, f, indent=2)


@contextlib.contextmanager
def _progress(doing: str) -> Iterator[None]:
    click.echo(f"  {doing} ...", err=True)
    started = time.perf_counter()
    yield
    click.echo(f"    done in {time.perf_counter() - started:.1f} s", err=True)


def _fetch(
    sim: SimInfo,
    n_hosts: int,
    timeout: float,
    concurrency: int,
    peer_concurrency: int,
    seq_sample: int,
    only: str | None,
    tls: bool,
    limit: float,
) -> tuple[list[Row], float]:
    """The table's section: every chosen pattern over the same hosts of ``sim``."""
    from surge.bench.peers.runner import run_peer, score, spread
    from surge.sim import hosts, lower_bound

    chosen = [p for p in PATTERNS if only is None or p[0] in only.split(",")]
    names = hosts(n_hosts)
    rows: list[Row] = []
    bound = lower_bound(names, concurrency, timeout)
    urls = [sim.url(h, tls=tls) for h in names]
    cafile = sim.cafile if tls else None
    click.echo(
        f"surge demo: {n_hosts:,} simulated hosts on 127.0.0.1, timeout {timeout:g} s; "
        f"an ideal client with {concurrency:,} in flight needs {bound:.2f} s",
        err=True,
    )
    for peer, label, in_flight in chosen:
        flight = concurrency if in_flight == -1 else in_flight or peer_concurrency
        sample = seq_sample if peer == "requests_seq" else None
        click.echo(f"  running {label} ...", err=True)
        started = time.perf_counter()
        result = run_peer(
            peer,
            urls,
            concurrency=flight,
            timeout=timeout,
            cafile=cafile,
            sample=sample,
            limit_s=limit,
        )
        wanted = spread(urls, sample) if sample is not None else urls
        s = score(result, wanted, timeout=timeout)
        note = result.note or ""
        if result.killed:
            note = f"cut at {limit:g} s " + note
        rows.append(
            Row(
                peer,
                f"{label} ({flight})" if peer == "surge" else label,
                flight,
                result.wall_s,
                result.cpu_s,
                result.extrapolated,
                s.ok,
                s.lost,
                s.answerable,
                note.strip(),
            )
        )
        click.echo(f"    done in {time.perf_counter() - started:.1f} s", err=True)
    return rows, bound


#: The write-up the patterns come from, named above the table.
WRITE_UP = (
    "The patterns of the write-up 'I/O patterns for 1,000 GETs' (requests in a loop:\n"
    "643 s; asyncio + aiohttp: 58 s, throttled by aiohttp's default of 100 connections)."
)


def render(rows: list[Row], bound: float, sample_of: int | None = None) -> str:
    """The table: one row a pattern, with its speed against surge's.

    ``answered`` counts the answerable hosts a pattern got an answer from, so
    answered + lost = answerable on every row (the sequential row: of its
    sample). A pattern that lost hosts is marked ``*``: it finished sooner by
    giving up on them, so its time is not the time to answer them all."""
    surge_wall = next((r.wall_s for r in rows if r.peer == "surge" and r.wall_s), None)
    lines = [
        WRITE_UP,
        "",
        f"{'pattern':<38} {'in flight':>9} {'wall s':>9} {'vs surge':>9} "
        f"{'answered':>9} {'lost':>5} {'CPU s':>7}",
    ]
    for r in rows:
        label = r.label
        if r.peer == "requests_seq" and sample_of is not None and r.answerable < sample_of:
            label = f"{label} [sample]"
        if r.wall_s is None:
            lines.append(f"{label:<38} {'':>9} {'-':>9}  {r.note}")
            continue
        mark = "~" if r.extrapolated else ""
        gave_up = "*" if r.lost else ""
        ratio = f"{mark}{r.wall_s / surge_wall:,.1f}x{gave_up}" if surge_wall else "-"
        cpu = f"{r.cpu_s:.2f}" if r.cpu_s is not None else "-"
        answered = f"{r.answerable - r.lost:,}/{r.answerable:,}"
        lines.append(
            f"{label:<38} {r.in_flight:>9,} {mark + f'{r.wall_s:,.2f}':>9} {ratio:>9} "
            f"{answered:>9} {r.lost:>5,} {cpu:>7}" + (f"  ({r.note})" if r.note else "")
        )
    lines.append(
        "answered/answerable: hosts that answer within the timeout, and how many of "
        f"them the pattern got; lost = the rest. Lower bound {bound:.2f} s."
    )
    if any(r.lost for r in rows if r.wall_s is not None):
        lines.append("* lost hosts: it finished sooner by giving up on them.")
    if any(r.extrapolated for r in rows):
        lines.append("~ [sample]: a sample of the hosts, its time extrapolated to all of them.")
    return "\n".join(lines)


def main() -> None:  # pragma: no cover
    demo_command.main(sys.argv[1:])
