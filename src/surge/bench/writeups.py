"""``surge demo``'s sections for the write-ups other than "I/O patterns for 1,000 GETs".

Each section runs the write-up's finding at a small size, offline, and returns
numbers that :mod:`surge.bench.demo` prints in a short table:

- :func:`pool_drain` - "boto's quadratic connection pool": put N idle
  connections into a pool, take all N out, with :class:`BotoHostConnectionPool`
  (boto 2's algorithm) and :class:`surge.pool.Pool`.  In process.
- :func:`connect_per_query` - "MySQL connection cost": connect + ``SELECT 1`` +
  close per query against :func:`surge.db.pool`, on SQLite in a temporary
  directory.  In process.
- :func:`grequests_pyopenssl` - "grequests + pyOpenSSL under gevent": grequests
  over HTTPS hosts of the simulated web, plain and with pyOpenSSL injected into
  urllib3, each in a fresh process (the peers' machinery,
  :mod:`surge.bench.peers`), then ``surge doctor`` in the pyOpenSSL process.

Work is counted as well as timed, so that the tests assert the algorithm, not
the machine: the items a pool moves per checkout, the connections opened.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import operator
import os
import tempfile
import textwrap
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, SupportsIndex

from surge.bench.verdict import median, settled_growth, settled_ratio

if TYPE_CHECKING:
    import sqlite3

    from surge.bench.peers.runner import PeerResult
    from surge.sim import SimInfo

#: Sections ``surge demo --sections`` knows, in the order it prints them.
SECTIONS = ("fetch", "pool", "db", "pyopenssl")
#: Columns the sections' text is wrapped to.
WIDTH = 100

# -- the pool drain: "boto's quadratic connection pool" ---------------------------------

#: Connections put into each pool and taken out again, 5x apart: boto's drain moves
#: 25x the items, surge's 5x.  boto's time grows ~15-20x, not 25x: at 10,000 a
#: get's fixed cost still weighs.  (At 100,000 it grows ~45x for 10x, but boto's
#: drain alone then takes over a second, twice: timed, then counted.)
DRAIN_SIZES: tuple[int, ...] = (10_000, 50_000)

POOL_WRITE_UP = (
    "The write-up 'boto's quadratic connection pool': boto 2's HostConnectionPool takes a\n"
    "connection out with list.pop(0), which moves every connection behind it, so a get is\n"
    "O(N) and draining N connections O(N^2). surge.pool.Pool pops the most recently\n"
    "returned connection off the end of a deque: O(1). Put N idle connections in, take N out:"
)


class DummyConnection:
    """What the pools hold: an object with no response attached (boto's readiness
    check reads ``_HTTPConnection__response``; None means ready)."""

    __slots__ = ()


class BotoHostConnectionPool:
    """boto 2's ``boto.connection.HostConnectionPool``, re-implemented (not copied)
    for the demo; the algorithm is unchanged.

    The pool is a list of ``(connection, time_put)`` pairs.  ``put`` appends.
    ``get`` first drops stale pairs from the head (``clean``), then, up to
    ``len(queue)`` times, pops the head with ``list.pop(0)`` and returns the
    connection if it is ready (no response attached, or the response closed),
    else puts it back at the tail.  ``pop(0)`` shifts every pair behind the
    head, so each get is O(N).  (On Python 2 ``range(len(queue))`` also built a
    list of N integers per get; as boto runs on Python 3, only ``pop(0)`` is
    O(N).)  Like the original it has no lock: boto's ConnectionPool held one
    around it.
    """

    #: Seconds after which an idle connection is stale (boto's ConnectionPool.STALE_DURATION).
    STALE_DURATION = 60.0

    def __init__(self) -> None:
        self.queue: list[tuple[Any, float]] = []

    def size(self) -> int:
        return len(self.queue)

    def put(self, conn: Any) -> None:
        self.queue.append((conn, time.time()))

    def get(self) -> Any:
        self.clean()
        for _ in range(len(self.queue)):
            conn, _put_at = self.queue.pop(0)
            if self._ready(conn):
                return conn
            self.put(conn)  # someone is still reading its response: to the tail
        return None

    def clean(self) -> None:
        while self.queue and self._stale(self.queue[0]):
            self.queue.pop(0)

    @staticmethod
    def _ready(conn: Any) -> bool:
        response = getattr(conn, "_HTTPConnection__response", None)
        return response is None or bool(response.isclosed())

    def _stale(self, pair: tuple[Any, float]) -> bool:
        return pair[1] + self.STALE_DURATION < time.time()


class CountingList(list[Any]):
    """A list that counts the items its ``pop`` moves: the one taken and every one
    behind it that shifts to close the gap (``pop(0)`` of L items moves L)."""

    moved = 0

    def pop(self, index: SupportsIndex = -1) -> Any:
        length = len(self)
        if length:
            self.moved += length - (operator.index(index) % length)
        return super().pop(index)


class CountingDeque(deque[Any]):
    """A deque that counts the items its pops move: one each (nothing shifts)."""

    moved = 0

    def pop(self) -> Any:  # type: ignore[override]  # as typeshed's deque.pop
        self.moved += 1
        return super().pop()

    def popleft(self) -> Any:
        self.moved += 1
        return super().popleft()

    def __delitem__(self, index: Any) -> None:  # the core takes ``del idle[-1]``, not pop()
        self.moved += 1
        super().__delitem__(index)


@dataclass
class DrainRow:
    """One pool drained at one size."""

    pool: str
    n: int
    #: Seconds to take all ``n`` out (the median of ``runs``).
    get_s: float
    #: Items the pool's idle list or deque moved in those ``n`` gets (a counting run).
    moved: int
    #: Every timed run's seconds, in the order run.
    runs: list[float] = field(default_factory=list)

    @property
    def per_get_us(self) -> float:
        return self.get_s / self.n * 1e6

    @property
    def moved_per_get(self) -> float:
        return self.moved / self.n


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic collector off while timing, as :mod:`timeit` does."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _drain_boto(n: int, counting: bool) -> tuple[float, int]:
    """Put ``n`` connections into a boto pool, time taking all ``n`` out: (s, moved)."""
    pool = BotoHostConnectionPool()
    if counting:
        pool.queue = CountingList()
    for _ in range(n):  # boto put connections made elsewhere
        pool.put(DummyConnection())
    get = pool.get
    with _gc_paused():
        started = time.perf_counter()
        got = [get() for _ in range(n)]
        elapsed = time.perf_counter() - started
    if None in got or pool.size():
        raise RuntimeError("the boto pool did not give back every connection")
    return elapsed, pool.queue.moved if isinstance(pool.queue, CountingList) else 0


def _drain_surge(n: int, counting: bool) -> tuple[float, int]:
    """Fill a surge.pool.Pool with ``n`` idle connections, time taking them out: (s, moved)."""
    from surge.pool import Pool

    pool: Pool[DummyConnection] = Pool(DummyConnection, max_size=n)
    held = [pool.acquire() for _ in range(n)]  # creates them
    idle = CountingDeque() if counting else None
    if idle is not None:
        # The core's idle deque, instrumented to count; empty now, every
        # connection being checked out.
        pool._core.idle = idle
    for conn in held:
        pool.release(conn)
    acquire = pool.acquire
    with _gc_paused():
        started = time.perf_counter()
        got = [acquire() for _ in range(n)]
        elapsed = time.perf_counter() - started
    if len({id(conn) for conn in got}) != n or pool.stats()["created"] != n:
        raise RuntimeError("surge.pool did not give back every idle connection")
    return elapsed, idle.moved if idle is not None else 0


#: Pool label -> the function that drains it.
DRAINS: dict[str, Callable[[int, bool], tuple[float, int]]] = {
    "boto 2 HostConnectionPool": _drain_boto,
    "surge.pool.Pool": _drain_surge,
}


#: Timed runs of each pool at each size: enough that the comparisons the section
#: states cannot flip from run to run (:mod:`surge.bench.verdict`).
DRAIN_RUNS = 7


def pool_drain(sizes: Sequence[int] = DRAIN_SIZES, *, runs: int = DRAIN_RUNS) -> list[DrainRow]:
    """Drain each pool at each size ``runs`` times, interleaved (so that a change
    of the machine's load falls on every pool alike), then once counting."""
    times: dict[tuple[str, int], list[float]] = {(label, n): [] for label in DRAINS for n in sizes}
    for _ in range(runs):
        for (label, n), taken in times.items():
            taken.append(DRAINS[label](n, False)[0])
    rows = []
    for (label, n), taken in times.items():
        _elapsed, moved = DRAINS[label](n, True)
        rows.append(DrainRow(label, n, median(taken), moved, taken))
    return rows


def render_pool_drain(rows: Sequence[DrainRow]) -> str:
    lines = [
        POOL_WRITE_UP,
        "",
        f"{'pool':<28} {'N':>9} {'take all N':>11} {'per get':>10} {'items moved/get':>16}",
    ]
    for r in rows:
        lines.append(
            f"{r.pool:<28} {r.n:>9,} {r.get_s:>9.3f} s {r.per_get_us:>7.1f} us "
            f"{r.moved_per_get:>16,.0f}"
        )
    lines.append(
        f"take all N: the median of {max(len(r.runs) for r in rows) if rows else 0} runs; "
        "items moved: by the pops of the pool's idle list or deque\n"
        "(a counting run); boto 2 re-implemented in surge.bench.writeups, its algorithm unchanged."
    )
    lines += textwrap.wrap(conclude_pool_drain(rows), WIDTH)
    return "\n".join(lines)


def conclude_pool_drain(rows: Sequence[DrainRow]) -> str:
    """The section's one sentence: what the counts show, and the timings only
    where they cannot flip from run to run."""
    boto, surge = DRAINS  # the labels, boto's first
    by = {(r.pool, r.n): r for r in rows}
    sizes = sorted({r.n for r in rows})
    if not sizes or any((label, n) not in by for label in DRAINS for n in sizes):
        return "Conclusion: not every pool ran at every size, so there is nothing to compare."
    small, big = sizes[0], sizes[-1]
    said = (
        f"a get from boto's pool moved {by[boto, big].moved_per_get:,.0f} items at {big:,} "
        f"connections and surge.pool's {by[surge, big].moved_per_get:,.0f}"
    )
    if by[boto, big].moved_per_get > by[boto, small].moved_per_get and (
        by[surge, big].moved_per_get == by[surge, small].moved_per_get
    ):
        said += ": boto's work per get grows with the pool, surge's does not"
    ratio = settled_ratio(by[boto, big].runs, by[surge, big].runs)
    if ratio is not None and ratio > 1:
        said += f", and draining {big:,} took boto {ratio:,.0f}x surge.pool's time"
    elif ratio is not None:
        said += f", yet draining {big:,} took surge.pool {1 / ratio:,.1f}x boto's time"
    if small != big:
        growth = settled_growth(
            by[boto, small].runs, by[boto, big].runs, by[surge, small].runs, by[surge, big].runs
        )
        if growth is not None:
            said += (
                f" ({big / small:,.0f}x the connections took boto {growth[0]:,.1f}x "
                f"the time, surge.pool {growth[1]:,.1f}x)"
            )
    return f"Conclusion: {said}."


# -- connect per query: "MySQL connection cost" -------------------------------------------

#: Queries each way runs.
DB_QUERIES = 3_000

DB_WRITE_UP = (
    "The write-up 'MySQL connection cost': connecting per query costs more than the query\n"
    "(it measured connect 1 ms, a simple query 0.5 ms: 66% of the time spent connecting).\n"
    "surge.db.pool keeps connections open and hands them out again with no round trip the\n"
    "query does not need. {queries:,} x SELECT 1 on SQLite, in a temporary directory:"
)

DB_FOOTNOTE = (
    "SQLite's connect opens a file: no network, no login. A MySQL or PostgreSQL connect is a\n"
    "TCP handshake and a login of several round trips (a TLS handshake too with PyMySQL's\n"
    "default TLS); measured against MariaDB and PostgreSQL: benchmarks/README.md#databases."
)


@dataclass
class DBRow:
    """One way of running the queries."""

    way: str
    queries: int
    #: Connections opened while running them (the first run).
    connects: int
    #: The median of ``runs``.
    seconds: float
    #: Every run's seconds.
    runs: list[float] = field(default_factory=list)

    @property
    def per_query_us(self) -> float:
        return self.seconds / self.queries * 1e6


def _select_one(conn: Any) -> None:
    cursor = conn.cursor()
    cursor.execute("SELECT 1")
    if cursor.fetchone() != (1,):
        raise RuntimeError("SELECT 1 did not return 1")
    cursor.close()


#: Runs of the three ways, interleaved.
DB_RUNS = 5


def connect_per_query(
    queries: int = DB_QUERIES, directory: str | None = None, *, runs: int = DB_RUNS
) -> list[DBRow]:
    """Run ``queries`` x ``SELECT 1`` three ways on a SQLite file in ``directory``
    (a temporary one by default), ``runs`` times: connect + query + close each
    time; through ``surge.db.pool(url)``; on one connection kept open (the floor)."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="surge-demo-db-"))
        rows: list[DBRow] = []
        for _ in range(runs):
            for row in _connect_per_query_once(queries, directory):
                known = next((r for r in rows if r.way == row.way), None)
                if known is None:
                    rows.append(row)
                    known = row
                else:
                    known.runs.append(row.seconds)
                known.seconds = median(known.runs)
    return rows


def _connect_per_query_once(queries: int, directory: str) -> list[DBRow]:
    import sqlite3

    import surge.db

    path = os.path.join(directory, "demo.sqlite3")
    sqlite3.connect(path).close()  # the file exists before anything is timed
    connects = 0

    def connect() -> sqlite3.Connection:
        nonlocal connects
        connects += 1
        return sqlite3.connect(path)

    rows: list[DBRow] = []
    started = time.perf_counter()
    for _ in range(queries):
        conn = connect()
        _select_one(conn)
        conn.close()
    elapsed = time.perf_counter() - started
    rows.append(DBRow("connect + SELECT 1 + close", queries, connects, elapsed, [elapsed]))

    pool = surge.db.pool(f"sqlite:///{os.path.abspath(path)}")
    opened = 0
    make = pool.connector

    def counted() -> Any:  # every connection the pool opens goes through here
        nonlocal opened
        opened += 1
        return make()

    pool.connector = counted
    with pool:
        started = time.perf_counter()
        for _ in range(queries):
            with pool.connection() as conn:
                _select_one(conn)
        elapsed = time.perf_counter() - started
    rows.append(DBRow("surge.db.pool, pool.connection()", queries, opened, elapsed, [elapsed]))

    connects = 0
    conn = connect()
    started = time.perf_counter()
    for _ in range(queries):
        _select_one(conn)
    elapsed = time.perf_counter() - started
    conn.close()
    rows.append(DBRow("one connection, kept open", queries, connects, elapsed, [elapsed]))
    return rows


def render_db(rows: Sequence[DBRow]) -> str:
    queries = rows[0].queries if rows else DB_QUERIES
    lines = [
        DB_WRITE_UP.format(queries=queries),
        "",
        f"{'way':<36} {'queries':>8} {'connects':>9} {'total s':>8} {'per query':>10}",
    ]
    for r in rows:
        lines.append(
            f"{r.way:<36} {r.queries:>8,} {r.connects:>9,} {r.seconds:>8.3f} "
            f"{r.per_query_us:>7.1f} us"
        )
    runs = max((len(r.runs) for r in rows), default=0)
    lines.append(f"total s: the median of {runs} runs.")
    lines.append(DB_FOOTNOTE)
    lines += textwrap.wrap(conclude_db(rows), WIDTH)
    return "\n".join(lines)


def conclude_db(rows: Sequence[DBRow]) -> str:
    """The section's one sentence: the connections each way opened, and the time
    per query where which is faster cannot flip from run to run."""
    per_query = next((r for r in rows if r.way.startswith("connect +")), None)
    pooled = next((r for r in rows if r.way.startswith("surge.db.pool")), None)
    if per_query is None or pooled is None:
        return "Conclusion: not every way ran, so there is nothing to compare."
    said = (
        f"surge.db.pool opened {pooled.connects:,} connection{'s' * (pooled.connects != 1)} "
        f"for {pooled.queries:,} queries where connecting per query opened {per_query.connects:,}"
    )
    ratio = settled_ratio(per_query.runs, pooled.runs)
    if ratio is not None and ratio > 1:
        said += (
            f", and a query through the pool cost {pooled.per_query_us:.1f} us against "
            f"{per_query.per_query_us:.1f} us ({ratio:,.0f}x less) even on SQLite, "
            "where a connect is only a file open"
        )
    elif ratio is not None:
        said += (
            f", yet a query through the pool cost {pooled.per_query_us:.1f} us against "
            f"{per_query.per_query_us:.1f} us"
        )
    return f"Conclusion: {said}."


# -- grequests + pyOpenSSL under gevent ---------------------------------------------------

#: HTTPS hosts each grequests run fetches: one after another they take ~3.8 s.
TLS_HOSTS = 30
#: Runs of each (plain, pyOpenSSL injected), interleaved.
TLS_RUNS = 3

#: Import name -> distribution, of what the section needs (all in the ``bench`` extra).
TLS_NEEDS = {
    "grequests": "grequests",
    "gevent": "gevent",
    "requests": "requests",
    "OpenSSL": "pyOpenSSL",
}

TLS_WRITE_UP = (
    "The write-up 'grequests + pyOpenSSL under gevent': with pyOpenSSL injected into\n"
    "urllib3, grequests' HTTPS requests ran one after another. grequests patches with\n"
    "select=False, and urllib3's pyOpenSSL socket waits for TLS records in select/poll,\n"
    "which then blocks every greenlet. {hosts:,} HTTPS hosts of the simulated web,\n"
    "grequests.map(size={size:,}), each run in a fresh process:"
)

#: The doctor check that names the cause.
DOCTOR_CHECK = "pyopenssl-injected"


def tls_missing() -> list[str]:
    """Distributions the section needs that are not installed (found, not imported:
    importing grequests would monkey-patch this process)."""
    return [dist for module, dist in TLS_NEEDS.items() if importlib.util.find_spec(module) is None]


def answering_hosts(n: int, timeout: float, seed: int = 0) -> list[str]:
    """The first ``n`` generic hosts that answer over TLS within ``timeout`` with
    their ordinary latency (no hangs, no failures, none of the 1-3 s tail): a run
    whose requests go one after another then takes the sum of their latencies,
    seconds rather than minutes."""
    from surge.sim import behaviour, hosts

    fast_ms = min(1000.0, timeout * 1000 / 2)

    def answers(host: str) -> bool:
        fate = behaviour(host, seed)
        return fate.expected(timeout, tls=True)[1] is None and fate.service_ms < fast_ms

    looked_at = 4 * n + 16  # ~90% of generic hosts qualify
    while True:
        chosen = [host for host in hosts(looked_at, seed) if answers(host)]
        if len(chosen) >= n:
            return chosen[:n]
        looked_at *= 2


def serial_s(names: Sequence[str], seed: int = 0) -> float:
    """Seconds the hosts' answers take one after another: what the pyOpenSSL run
    is expected to take."""
    from surge.sim import behaviour

    return sum(behaviour(name, seed).service_ms for name in names) / 1000


def sites_to_warm(names: Sequence[str]) -> int:
    """How many generic sites' certificates the sim must issue up front
    (``background(warm_tls=...)``) for ``names``, so that neither run pays for them."""
    numbers = [int(name.split(".")[0].removeprefix("site")) for name in names]
    return max(numbers) + 1 if numbers else 0


@dataclass
class TLSRun:
    label: str
    #: The median of ``runs`` (None if no run completed).
    wall_s: float | None
    #: The fewest answers a run got.
    answered: int
    answerable: int
    note: str = ""
    #: Every completed run's wall time.
    runs: list[float] = field(default_factory=list)


@dataclass
class TLSResult:
    hosts: int
    size: int
    #: Seconds the hosts' answers take one after another (:func:`serial_s`).
    serial_s: float = 0.0
    runs: list[TLSRun] = field(default_factory=list)
    #: ``surge doctor``'s findings in the pyOpenSSL process (``Finding.to_dict()``).
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def doctor(self) -> dict[str, Any] | None:
        """The finding that names the cause, if doctor ran."""
        return next((f for f in self.findings if f.get("id") == DOCTOR_CHECK), None)


def _add_run(
    runs: list[TLSRun], label: str, result: PeerResult, urls: Sequence[str], timeout: float
) -> None:
    """Count ``result`` into the row ``label`` of ``runs`` (made on its first run)."""
    from surge.bench.peers.runner import score

    row = next((r for r in runs if r.label == label), None)
    if row is None:
        row = TLSRun(label, None, len(urls), len(urls), result.note)
        runs.append(row)
    if result.wall_s is None or result.killed:
        row.answered = 0
        row.note = row.note or result.note
        return
    s = score(result, urls, timeout=timeout)
    row.answerable = s.answerable
    row.answered = min(row.answered, s.answerable - s.lost)
    row.runs.append(result.wall_s)
    row.wall_s = median(row.runs)


def grequests_pyopenssl(
    sim: SimInfo,
    *,
    n_hosts: int = TLS_HOSTS,
    concurrency: int = 100,
    timeout: float = 3.0,
    limit_s: float = 120.0,
    runs: int = TLS_RUNS,
) -> TLSResult:
    """grequests over ``n_hosts`` HTTPS hosts of ``sim``, plain and with pyOpenSSL
    injected, ``runs`` times each, interleaved, each in a fresh process;
    ``surge doctor`` in the first pyOpenSSL process."""
    from surge.bench.peers.runner import run_peer

    names = answering_hosts(n_hosts, timeout, sim.seed)
    urls = [sim.url(host, tls=True) for host in names]
    result = TLSResult(len(urls), concurrency, serial_s(names, sim.seed))
    common: dict[str, Any] = {
        "concurrency": concurrency,
        "timeout": timeout,
        "cafile": sim.cafile,
        "limit_s": limit_s,
    }
    for run in range(runs):
        _add_run(result.runs, PLAIN, run_peer("grequests", urls, **common), urls, timeout)
        injected, events = run_with_doctor("grequests_pyopenssl", urls, **common)
        _add_run(result.runs, INJECTED, injected, urls, timeout)
        if run == 0:
            result.findings = list(events.get("doctor", {}).get("findings", []))
    return result


#: The two rows of the pyOpenSSL section.
PLAIN = "plain (the ssl module)"
INJECTED = "pyOpenSSL injected into urllib3"


def run_with_doctor(
    module: str,
    urls: Sequence[str],
    *,
    concurrency: int,
    timeout: float,
    cafile: str | None,
    limit_s: float,
) -> tuple[PeerResult, dict[str, dict[str, Any]]]:
    """:func:`surge.bench.peers.runner.run_peer` for a peer module that is not in
    ``PEERS`` (benchmarks/fetch.py runs every peer there), with ``surge doctor``
    run in its process after it (:mod:`surge.bench.peers._doctor_child`): the
    result and the child's events (``"doctor"``: its findings)."""
    from surge.bench.peers import runner

    result = runner.run_peer(
        module,
        urls,
        concurrency=concurrency,
        timeout=timeout,
        cafile=cafile,
        limit_s=limit_s,
        child_module="_doctor_child",
    )
    return result, result.events


def render_pyopenssl(result: TLSResult) -> str:
    lines = [
        TLS_WRITE_UP.format(hosts=result.hosts, size=result.size),
        "",
        f"{'grequests':<36} {'wall s':>8} {'runs':>4} {'vs plain':>9} {'answered':>9}",
    ]
    plain = result.runs[0] if result.runs else None
    for run in result.runs:
        if run.wall_s is None:
            lines.append(f"{run.label:<36} {'-':>8}  {run.note}")
            continue
        if run is plain:
            ratio = "1.0x"
        else:
            settled = settled_ratio(run.runs, plain.runs) if plain is not None else None
            ratio = f"{settled:,.1f}x" if settled is not None else "-"
        answered = f"{run.answered:,}/{run.answerable:,}"
        lines.append(
            f"{run.label:<36} {run.wall_s:>8.2f} {len(run.runs):>4} {ratio:>9} {answered:>9}"
        )
    lines.append(
        f"wall s: the median of the runs; one after another, the hosts' answers take "
        f"{result.serial_s:.2f} s."
    )
    finding = result.doctor
    if finding is None:
        lines.append("surge doctor did not run in the pyOpenSSL process (see the note above).")
    else:
        lines.append("surge doctor, run in the pyOpenSSL process, names the cause:")
        said = f"[{finding['status']}] {finding['id']}: {finding['message']}"
        lines += textwrap.wrap(said, WIDTH, initial_indent="  ", subsequent_indent="    ")
        if finding.get("fix"):
            fix = f"fix: {finding['fix']}"
            lines += textwrap.wrap(fix, WIDTH, initial_indent="  ", subsequent_indent="    ")
    lines += textwrap.wrap(conclude_pyopenssl(result), WIDTH)
    return "\n".join(lines)


def conclude_pyopenssl(result: TLSResult) -> str:
    """The section's one sentence: whether the injected runs went one request
    after another, against the plain runs where that cannot flip, and whether
    doctor named the cause."""
    rows = {run.label: run for run in result.runs}
    plain, injected = rows.get(PLAIN), rows.get(INJECTED)
    if plain is None or injected is None or not plain.runs or not injected.runs:
        return "Conclusion: a run did not complete (see its note), so there is nothing to compare."
    assert injected.wall_s is not None and plain.wall_s is not None
    said = (
        f"with pyOpenSSL injected, grequests took {injected.wall_s:.1f} s "
        f"for {result.hosts:,} hosts"
    )
    # One after another, a run takes at least the sum of the hosts' answers.
    if result.serial_s and min(injected.runs) >= 0.9 * result.serial_s:
        said += f", the sum of their answers' {result.serial_s:.1f} s: one request after another"
    ratio = settled_ratio(injected.runs, plain.runs)
    if ratio is not None:
        said += f", {ratio:,.1f}x the plain run's {plain.wall_s:.1f} s"
    finding = result.doctor
    if finding is not None and finding.get("status") == "fail":
        said += f"; surge doctor names the cause ({finding['id']})"
    return f"Conclusion: {said}."


def db_missing() -> list[str]:
    """What the connect-per-query section needs and this Python lacks (sqlite3 is
    in the standard library, but a Python may be built without it)."""
    return [] if importlib.util.find_spec("sqlite3") else ["sqlite3"]


def skipped(section: str, missing: Sequence[str], hint: str | None = None) -> str:
    """The one line a section prints when a library it needs is missing; ``hint``:
    how to get it (default: the ``bench`` extra)."""
    from surge.extras import install_hint

    how = hint or install_hint("bench")
    return f"{section}: skipped, {', '.join(missing)} not installed: {how}"
