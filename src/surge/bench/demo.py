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
import textwrap
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
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
    #: The median of ``walls`` (extrapolated to every host when ``extrapolated``).
    wall_s: float | None
    cpu_s: float | None
    extrapolated: bool
    ok: int
    #: The most answerable hosts any of its runs lost.
    lost: int
    answerable: int
    note: str
    #: Every run's wall time.
    walls: list[float] = field(default_factory=list)
    #: What no run of this pattern can beat (an ideal client with its in-flight
    #: bound, :func:`surge.sim.lower_bound`), when it lost no host; else None.
    floor_s: float | None = None
    #: Wall time against surge's, when which is faster cannot flip from run to
    #: run (:func:`surge.bench.verdict.settled_ratio`); else None.
    vs_surge: float | None = None


@dataclass
class Skipped:
    """Patterns that cannot run in this install, and what adds them."""

    labels: list[str]
    modules: list[str]

    def line(self) -> str:
        from surge.extras import install_hint

        return (
            f"skipped, not installed here ({', '.join(self.modules)}): "
            f"{'; '.join(self.labels)}. To run them: {install_hint('bench')}."
        )


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
            rows, bound, skipped = _fetch(
                sim, n_hosts, timeout, concurrency, peer_concurrency, seq_sample, only, tls, limit
            )
            payload.update(
                lower_bound_s=bound,
                rows=[asdict(row) for row in rows],
                skipped=asdict(skipped) if skipped else None,
            )
            section(render(rows, bound, sample_of=n_hosts, skipped=skipped))
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
                    f"pyOpenSSL injected, {writeups.TLS_RUNS} times each (one request after "
                    f"another: about {writeups.serial_s(tls_names):.0f} s a run)"
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


#: A pattern whose first run took longer than this is not run again to settle
#: its comparison with surge (its floor usually settles it; else no ratio).
REPEAT_BELOW_S = 20.0


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
) -> tuple[list[Row], float, Skipped | None]:
    """The table's section: every chosen pattern over the same hosts of ``sim``.

    surge runs :data:`~surge.bench.verdict.MIN_RUNS` times; another pattern runs
    again (as many times) only when its floor does not already settle which of
    the two is faster, and it is quick enough to repeat."""
    from surge.bench.peers import PEERS
    from surge.bench.peers.runner import available, run_peer, score, spread
    from surge.bench.verdict import MIN_RUNS, median, settled_ratio
    from surge.sim import hosts, lower_bound

    chosen = [p for p in PATTERNS if only is None or p[0] in only.split(",")]
    runnable = [p for p in chosen if available(p[0])]
    missing = sorted(
        {m for p in chosen if p not in runnable for m in PEERS[p[0]][1] if not _found(m)}
    )
    skipped = Skipped([p[1] for p in chosen if p not in runnable], missing) if missing else None
    names = hosts(n_hosts)
    bound = lower_bound(names, concurrency, timeout)
    urls = [sim.url(h, tls=tls) for h in names]
    cafile = sim.cafile if tls else None
    click.echo(
        f"surge demo: {n_hosts:,} simulated hosts on 127.0.0.1, timeout {timeout:g} s; "
        f"an ideal client with {concurrency:,} in flight needs {bound:.2f} s",
        err=True,
    )
    rows: dict[str, Row] = {}

    def run(peer: str, label: str, in_flight: int | None, again: bool = False) -> None:
        flight = concurrency if in_flight == -1 else in_flight or peer_concurrency
        sample = seq_sample if peer == "requests_seq" else None
        with _progress(f"running {label}" + (" again" if again else "")):
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
        row = rows.get(peer)
        if row is None:
            rows[peer] = row = Row(
                peer,
                f"{label} ({flight})" if peer == "surge" else label,
                flight,
                None,
                result.cpu_s,
                result.extrapolated,
                s.ok,
                s.lost,
                s.answerable,
                note.strip(),
            )
        row.lost = max(row.lost, s.lost)
        if result.wall_s is not None and not result.killed:
            row.walls.append(result.wall_s)
            row.wall_s = median(row.walls)

    for peer, label, in_flight in runnable:
        run(peer, label, in_flight)
    surge_pattern = next((p for p in runnable if p[0] == "surge"), None)
    if surge_pattern is not None:
        for _ in range(MIN_RUNS - 1):
            run(*surge_pattern, again=True)
    for row in rows.values():
        if row.lost == 0 and row.walls:
            row.floor_s = lower_bound(names, row.in_flight, timeout)
    surge_row = rows.get("surge")
    if surge_row is not None and surge_row.walls:
        unsettled = [
            p
            for p in runnable
            if p[0] != "surge"
            and rows[p[0]].walls
            and rows[p[0]].walls[0] <= REPEAT_BELOW_S
            and not (rows[p[0]].floor_s or 0) > max(surge_row.walls)
        ]
        for _ in range(MIN_RUNS - 1):
            for pattern in unsettled:
                run(*pattern, again=True)
        for row in rows.values():
            if row.peer != "surge" and row.walls:
                row.vs_surge = settled_ratio(row.walls, surge_row.walls, a_floor=row.floor_s)
    return [rows[p[0]] for p in runnable], bound, skipped


def _found(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


#: The write-up the patterns come from, named above the table.
WRITE_UP = (
    "The patterns of the write-up 'I/O patterns for 1,000 GETs' (requests in a loop:\n"
    "643 s; asyncio + aiohttp: 58 s, throttled by aiohttp's default of 100 connections)."
)


def render(
    rows: list[Row], bound: float, sample_of: int | None = None, skipped: Skipped | None = None
) -> str:
    """The table: one row a pattern, with its speed against surge's, then the
    patterns skipped, then the conclusion.

    ``answered`` counts the answerable hosts a pattern got an answer from, so
    answered + lost = answerable on every row (the sequential row: of its
    sample). A pattern that lost hosts is marked ``*``: it finished sooner by
    giving up on them, so its time is not the time to answer them all.  A ratio
    is printed only when it cannot flip from run to run (``vs_surge``)."""
    lines = [
        WRITE_UP,
        "",
        f"{'pattern':<38} {'in flight':>9} {'wall s':>9} {'runs':>4} {'vs surge':>9} "
        f"{'answered':>9} {'lost':>5} {'CPU s':>7}",
    ]
    unsettled = False
    for r in rows:
        label = r.label
        if r.peer == "requests_seq" and sample_of is not None and r.answerable < sample_of:
            label = f"{label} [sample]"
        if r.wall_s is None:
            lines.append(f"{label:<38} {'':>9} {'-':>9}  {r.note}")
            continue
        mark = "~" if r.extrapolated else ""
        gave_up = "*" if r.lost else ""
        if r.peer == "surge":
            ratio = "1.0x"
        elif r.vs_surge is not None:
            ratio = f"{mark}{_times(r.vs_surge)}{gave_up}"
        else:
            ratio, unsettled = "-" + gave_up, True
        cpu = f"{r.cpu_s:.2f}" if r.cpu_s is not None else "-"
        answered = f"{r.answerable - r.lost:,}/{r.answerable:,}"
        lines.append(
            f"{label:<38} {r.in_flight:>9,} {mark + f'{r.wall_s:,.2f}':>9} {len(r.walls):>4} "
            f"{ratio:>9} {answered:>9} {r.lost:>5,} {cpu:>7}" + (f"  ({r.note})" if r.note else "")
        )
    lines.append(
        "answered/answerable: hosts that answer within the timeout, and how many of "
        f"them the pattern got; lost = the rest. Lower bound {bound:.2f} s."
    )
    lines.append("wall s: the median of the runs; CPU s: the first run's.")
    if unsettled:
        lines.append("- : no ratio, as which of the two is faster changed between runs.")
    if any(r.lost for r in rows if r.wall_s is not None):
        lines.append("* lost hosts: it finished sooner by giving up on them.")
    if any(r.extrapolated for r in rows):
        lines.append("~ [sample]: a sample of the hosts, its time extrapolated to all of them.")
    if skipped is not None:
        lines.append(skipped.line())
    lines += textwrap.wrap(conclude(rows, bound), 100)
    return "\n".join(lines)


def _times(ratio: float) -> str:
    """A settled ratio, with a second decimal where one would read as 1.0x."""
    return f"{ratio:.2f}x" if f"{ratio:.1f}" == "1.0" else f"{ratio:,.1f}x"


def _duration(seconds: float) -> str:
    if seconds >= 90:
        return f"about {seconds / 60:,.0f} minutes"
    return f"{seconds:,.1f} s"


def _names(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


def _span(ratios: list[float]) -> str:
    low, high = _times(min(ratios)), _times(max(ratios))
    return low if low == high else f"{low[:-1]}-{high}"


def conclude(rows: list[Row], bound: float) -> str:
    """The table's one-sentence conclusion, from settled comparisons only: a
    pattern whose comparison with surge could flip from run to run is not named."""
    surge = next((r for r in rows if r.peer == "surge" and r.wall_s is not None), None)
    if surge is None:
        return "Conclusion: surge was not in this run (--only), so there is nothing to compare."
    got = surge.answerable - surge.lost
    answered = (
        f"all {surge.answerable:,}" if surge.lost == 0 else f"{got:,} of {surge.answerable:,}"
    )
    said = [
        f"surge answered {answered} answerable hosts in {surge.wall_s:.1f} s "
        f"(an ideal client: {bound:.2f} s)"
    ]
    others = [r for r in rows if r.peer != "surge" and r.wall_s is not None]
    settled = [r for r in others if r.vs_surge is not None and not r.lost]
    slower = sorted((r for r in settled if (r.vs_surge or 0) > 1), key=lambda r: -(r.vs_surge or 0))
    faster = [r for r in settled if (r.vs_surge or 0) < 1]
    if slower:
        slowest = slower[0]
        assert slowest.wall_s is not None
        said.append(f"{slowest.label} would need {_duration(slowest.wall_s)}")
    if slower[1:]:
        ratios = [r.vs_surge or 0 for r in slower[1:]]
        said.append(f"{_names([r.label for r in slower[1:]])} took {_span(ratios)} its time")
    if faster:
        ratios = [r.vs_surge or 0 for r in faster]
        said.append(
            f"{_names([r.label for r in faster])} finished sooner ({_span(ratios)} its time)"
        )
    for r in others:
        if r.lost and r.vs_surge is not None and r.vs_surge < 1:
            said.append(
                f"{r.label} finished in {_times(r.vs_surge)} its time by losing "
                f"{r.lost:,} answerable hosts"
            )
        elif r.lost:
            said.append(f"{r.label} lost {r.lost:,} answerable hosts")
    if len(said) == 1:
        return f"Conclusion: {said[0]}."
    return f"Conclusion: {'; '.join(said[:-1])}; and {said[-1]}."


def main() -> None:  # pragma: no cover
    demo_command.main(sys.argv[1:])
