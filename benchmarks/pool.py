"""Benchmark surge's resource pool against the pools people use today.

Run it from the repository root::

    python benchmarks/pool.py                  # full run (a few minutes)
    python benchmarks/pool.py --quick          # smoke run, small sizes (seconds)
    python benchmarks/pool.py --only cycle     # one section: bulk, cycle, contention
    python benchmarks/pool.py --sizes 10k,1M --out /tmp/pool.json
    python benchmarks/pool.py --boto-path /tmp/boto249   # also measure the real boto 2.49

Every pool manages the same fake DB-API 2 connection (:class:`FakeConnection`: cursor,
commit, rollback and close do nothing), so what is measured is the pool's own
bookkeeping and nothing of the network. All peers run in the same process, in the
same run, interleaved by size; the cyclic garbage collector is paused inside timed
phases of sections 1 and 2 (as :mod:`timeit` does) so that one peer's allocations do
not bill a collection to the next. Tables go to stdout, progress to stderr, and every
raw number plus the machine's description to ``benchmarks/results/pool.json``.

The peers
---------
``surge``
    ``surge.pool.Pool(create, max_size=N)`` with its defaults (LIFO, no check,
    no reset). Cycle section: also through ``with pool.connection()``.
``lean``
    The floor: a ``threading.Lock`` and a ``collections.deque`` (:class:`LeanPool`,
    about 15 lines). No pool can do less work and still be thread-safe.
``sqlalchemy``
    ``sqlalchemy.pool.QueuePool(creator, pool_size=N, max_overflow=0)`` with its
    defaults: FIFO, ``reset_on_return="rollback"`` (a no-op here), no pre-ping.
    Checkout is ``pool.connect()``, return is ``fairy.close()``.
``dbutils``
    ``dbutils.pooled_db.PooledDB(creator, mincached=0, maxcached=0, maxshared=0,
    maxconnections=0)``: maxcached=0 means "unlimited idle connections" (its docs:
    "the default value of 0 or None means unlimited pool size"), so all N returned
    connections stay cached; maxshared=0 makes every connection dedicated; ``ping``
    and ``reset`` are left at their defaults (ping on checkout, which the fake
    connection turns off after the first try because it has no ping(); rollback on
    return). Checkout is ``pool.connection()``, return is ``conn.close()``. Its idle
    cache is a list used as a queue: checkout is ``list.pop(0)``, O(N).
``boto-style``
    :class:`BotoStylePool`, a re-implementation (written from a description, not
    copied) of boto 2's ``HostConnectionPool`` *as it ran on Python 2*: a list of
    (connection, time_put) tuples; ``put`` appends; ``get`` loops over
    ``range(len(queue))`` -- which on Python 2 built a list of len(queue) integers
    on every call (modelled with ``list(range(...))``) -- doing ``queue.pop(0)`` and
    returning the first connection that is not stale (a ``time.time()`` check). Each
    ``get`` is O(N), so draining N connections is O(N^2). Like the original it has no
    lock of its own (boto's ConnectionPool held one around it); sections 1 and 2 call
    it bare, which favours it.
``boto-2.49``
    The real ``boto.connection.HostConnectionPool`` from boto 2.49.0, when it can be
    imported (``--boto-path DIR`` names a ``pip install --target`` folder; boto is
    never needed). On Python 3 its ``range()`` is lazy, so only ``pop(0)`` is O(N).

Section 1, "bulk": put N, then get N (sizes 10k, 100k, 300k; 1M for surge and lean)
    Each phase is timed separately; "put" and "get" are the comparable ones:

    =============  ===============================  ===================  ==================
    peer           fill (untimed in the table)      put (timed)          get (timed)
    =============  ===============================  ===================  ==================
    surge, lean    ``acquire()`` N times, each      ``release(c)`` N     ``acquire()`` N
                   creating a connection            times                times
    sqlalchemy     ``pool.connect()`` N times       ``fairy.close()`` N  ``pool.connect()``
                   (pool_size=N, each creates)      times                N times
    dbutils        ``pool.connection()`` N times    ``conn.close()`` N   ``connection()``
                   (each creates)                   times                N times
    boto-style,    create N connections outside     ``pool.put(c)`` N    ``pool.get()`` N
    boto-2.49      the pool (boto did the same)     times                times
    =============  ===============================  ===================  ==================

    Every loop is the same shape (a ``for`` over the held list, or a list
    comprehension collecting what ``get`` returns, with the method bound to a local
    name), so loop overhead is equal across peers. Growth factor: time at this size
    divided by time at the previous size; linear code grows as much as N does.
    A peer is skipped at a size where the time predicted from its previous sizes
    (the exponent measured between its last two sizes, or 2 if only one is known)
    exceeds 30 s. A peer is measured up to 3 times per size (while a run takes
    under 0.5 s) and its fastest run kept. Target: surge's put+get time grows about
    linearly up to 1M (growth factor at most 1.5x the size factor at every step
    from 10k up; smaller phases last milliseconds and measure noise).

Section 2, "cycle": one thread, checkout + return of one idle connection
    ns per acquire+release, pool of 4 warmed with one connection, ``--iterations``
    cycles (default 200k), best of ``--repeat`` runs (default 5). Target: surge's
    ``acquire``/``release`` cycle costs at most 0.15x SQLAlchemy QueuePool's.

Section 3, "contention": 16 threads on a pool of 4
    Each thread loops acquire -> hold (``time.sleep(1 ms)``) -> release for ~2 s or
    until 20,000 checkouts in all (one shared count, not a quota per thread); the
    wait of every acquire is recorded. Reports
    throughput, mean / p99 / longest wait, the spread of checkouts per thread, and the
    fairness ratio longest_wait / (mean_hold x waiters), waiters = threads - pool size
    (12): the time a thread would wait if it were served strictly after everyone
    already queued. Target: ratio <= 5. Peers are bounded to 4 connections and block
    when none is free: surge ``Pool(max_size=4)``; ``QueuePool(pool_size=4,
    max_overflow=0, timeout=60)``; ``PooledDB(maxconnections=4, blocking=True)``;
    boto-style and boto-2.49 behind :class:`BlockingPool` (a ``threading.Condition``
    around ``get``/``put`` that creates up to 4 connections and otherwise waits --
    boto itself never waited, it opened another connection); lean behind the same
    Condition wrapper.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import os
import statistics
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Protocol

from _common import (
    Table,
    Target,
    best_of,
    fmt_ns,
    fmt_s,
    gc_paused,
    machine_info,
    percentile,
    write_json,
)

SECTIONS = ("bulk", "cycle", "contention")
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "pool.json"
SKIP_ABOVE_S = 30.0  # a peer predicted to take longer than this at a size is skipped
BIG_N = 300_000  # sizes above this are run for surge and lean only (the scope)
LINEARITY_MIN_N = 10_000  # the linearity target is judged on sizes from this one up


# -- what the pools manage ---------------------------------------------------------


class FakeDatabaseError(Exception):
    """The DB-API error class of the fake driver (DBUtils asks for one)."""


class FakeConnection:
    """A DB-API 2 connection that does nothing, so that only the pool is measured.

    Carries the optional DB-API extensions a real driver has (``threadsafety`` and
    the exception classes as attributes): DBUtils reads them to configure itself.
    """

    __slots__ = ("closed",)
    threadsafety = 1
    OperationalError = InterfaceError = InternalError = FakeDatabaseError

    def __init__(self) -> None:
        self.closed = False

    def cursor(self) -> None:
        return None

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def connect_fake() -> FakeConnection:
    """The ``create`` / ``creator`` function handed to every pool."""
    return FakeConnection()


# -- the floor and the boto-style peer -----------------------------------------------


class LeanPool:
    """The floor: a lock and a deque. LIFO, bounded, raises when exhausted."""

    def __init__(self, create: Callable[[], Any], max_size: int) -> None:
        self._create = create
        self._max_size = max_size
        self._open = 0
        self._idle: deque[Any] = deque()
        self._lock = threading.Lock()

    def acquire(self) -> Any:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if self._open >= self._max_size:
                raise RuntimeError("pool exhausted")
            self._open += 1
        return self._create()

    def release(self, conn: Any) -> None:
        with self._lock:
            self._idle.append(conn)


class BotoStylePool:
    """boto 2's HostConnectionPool algorithm as it ran on Python 2 (see module docs).

    Re-implemented from its description: a list of (connection, time_put) pairs,
    ``get`` walks a materialised ``range`` and shifts the list with ``pop(0)``.
    """

    def __init__(self, stale_after_s: float = 60.0) -> None:
        self.queue: list[tuple[Any, float]] = []
        self.stale_after_s = stale_after_s

    def size(self) -> int:
        return len(self.queue)

    def put(self, conn: Any) -> None:
        self.queue.append((conn, time.time()))

    def get(self) -> Any:
        # Python 2's range() returned a list: len(queue) integers built per call.
        for _ in list(range(len(self.queue))):
            conn, time_put = self.queue.pop(0)  # shifts every remaining pair: O(N)
            if time.time() - time_put < self.stale_after_s:
                return conn
            # a stale connection is dropped, and the walk goes on
        return None


class GetPut(Protocol):
    """What :class:`BlockingPool` wraps: boto's HostConnectionPool interface."""

    def get(self) -> Any: ...

    def put(self, conn: Any) -> None: ...


class DequeGetPut:
    """The lean deque behind the :class:`GetPut` interface (LIFO)."""

    def __init__(self) -> None:
        self._idle: deque[Any] = deque()

    def get(self) -> Any:
        return self._idle.pop() if self._idle else None

    def put(self, conn: Any) -> None:
        self._idle.append(conn)


class BlockingPool:
    """A bounded, blocking pool around a get/put store, for the contention section.

    ``acquire`` takes an idle connection, else creates one while fewer than
    ``max_size`` exist, else waits on a Condition; ``release`` puts the connection
    back and wakes one waiter. CPython's Condition wakes waiters in arrival order,
    but a releasing thread that asks again at once may take the connection back
    first: this is how most hand-written pools behave.
    """

    def __init__(self, store: GetPut, create: Callable[[], Any], max_size: int) -> None:
        self._store = store
        self._create = create
        self._max_size = max_size
        self._open = 0
        self._cond = threading.Condition()

    def acquire(self) -> Any:
        with self._cond:
            while True:
                conn = self._store.get()
                if conn is not None:
                    return conn
                if self._open < self._max_size:
                    self._open += 1
                    return self._create()
                self._cond.wait()

    def release(self, conn: Any) -> None:
        with self._cond:
            self._store.put(conn)
            self._cond.notify()


# -- optional imports ----------------------------------------------------------------


@dataclass
class Available:
    """The peers that could be imported, and why the others could not."""

    surge_pool: Any = None
    boto_pool: Any = None
    sqlalchemy_pool: Any = None
    dbutils_pool: Any = None
    missing: dict[str, str] = field(default_factory=dict)


def import_peers(boto_path: str | None) -> Available:
    """Import every optional peer; a missing one is recorded, never fatal."""
    found = Available()
    try:
        from surge.pool import Pool
    except ImportError:
        # Not installed: try the source tree this script lives in.
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        try:
            from surge.pool import Pool
        except ImportError as exc:
            Pool = None
            found.missing["surge"] = f"surge.pool not importable: {exc}"
    found.surge_pool = Pool
    try:
        from sqlalchemy.pool import QueuePool

        found.sqlalchemy_pool = QueuePool
    except ImportError as exc:
        found.missing["sqlalchemy"] = str(exc)
    try:
        from dbutils.pooled_db import PooledDB

        found.dbutils_pool = PooledDB
    except ImportError as exc:
        found.missing["dbutils"] = str(exc)
    if boto_path and boto_path not in sys.path:
        sys.path.append(boto_path)  # appended: it must not shadow anything installed
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # boto 2 predates Python 3.11's warnings
            import boto.connection

        found.boto_pool = boto.connection.HostConnectionPool
    except Exception as exc:  # boto 2 may fail in many ways on a modern Python
        found.missing["boto-2.49"] = f"boto 2 not importable ({exc}); see --boto-path"
    return found


# -- section 1: put N, then get N ------------------------------------------------------


@dataclass
class Phases:
    """Seconds spent in each phase of one bulk run of size ``n``."""

    n: int
    fill_s: float
    put_s: float
    get_s: float

    @property
    def total_s(self) -> float:
        return self.put_s + self.get_s


def bulk_acquire_release(pool: Any, n: int) -> Phases:
    """surge and lean: fill by acquire (creates), put = release N, get = acquire N."""
    acquire, release = pool.acquire, pool.release
    with gc_paused():
        t0 = perf_counter()
        held = [acquire() for _ in range(n)]
        t1 = perf_counter()
        for conn in held:
            release(conn)
        t2 = perf_counter()
        got = [acquire() for _ in range(n)]
        t3 = perf_counter()
    for conn in got:
        release(conn)
    return Phases(n, t1 - t0, t2 - t1, t3 - t2)


def bulk_surge(av: Available, n: int) -> Phases:
    pool = av.surge_pool(connect_fake, max_size=n, timeout=60.0)
    try:
        return bulk_acquire_release(pool, n)
    finally:
        pool.close()


def bulk_lean(av: Available, n: int) -> Phases:
    return bulk_acquire_release(LeanPool(connect_fake, max_size=n), n)


def bulk_get_put(pool: Any, n: int) -> Phases:
    """boto: connections made outside the pool, put = put N, get = get N."""
    put, get = pool.put, pool.get
    with gc_paused():
        t0 = perf_counter()
        held = [connect_fake() for _ in range(n)]
        t1 = perf_counter()
        for conn in held:
            put(conn)
        t2 = perf_counter()
        got = [get() for _ in range(n)]
        t3 = perf_counter()
    if any(conn is None for conn in got):
        raise AssertionError("boto pool returned None while connections were pooled")
    return Phases(n, t1 - t0, t2 - t1, t3 - t2)


def bulk_boto_style(av: Available, n: int) -> Phases:
    return bulk_get_put(BotoStylePool(), n)


def bulk_boto(av: Available, n: int) -> Phases:
    return bulk_get_put(av.boto_pool(), n)


def bulk_sqlalchemy(av: Available, n: int) -> Phases:
    pool = av.sqlalchemy_pool(connect_fake, pool_size=n, max_overflow=0, timeout=60.0)
    connect = pool.connect
    with gc_paused():
        t0 = perf_counter()
        held = [connect() for _ in range(n)]
        t1 = perf_counter()
        close = type(held[0]).close  # _ConnectionFairy.close, looked up once
        for fairy in held:
            close(fairy)
        t2 = perf_counter()
        got = [connect() for _ in range(n)]
        t3 = perf_counter()
    for fairy in got:
        close(fairy)
    pool.dispose()
    return Phases(n, t1 - t0, t2 - t1, t3 - t2)


def bulk_dbutils(av: Available, n: int) -> Phases:
    pool = av.dbutils_pool(connect_fake, mincached=0, maxcached=0, maxshared=0, maxconnections=0)
    connection = pool.connection
    with gc_paused():
        t0 = perf_counter()
        held = [connection() for _ in range(n)]
        t1 = perf_counter()
        close = type(held[0]).close  # PooledDedicatedDBConnection.close
        for conn in held:
            close(conn)
        t2 = perf_counter()
        got = [connection() for _ in range(n)]
        t3 = perf_counter()
    for conn in got:
        close(conn)
    # Untimed clean-up: PooledDB.close() empties its idle list with pop(0), O(N^2)
    # for N connections; the fake connections need no closing, so just drop them.
    pool._idle_cache.clear()
    return Phases(n, t1 - t0, t2 - t1, t3 - t2)


BULK_PEERS: dict[str, tuple[Callable[[Available, int], Phases], bool]] = {
    # name: (runner, runs above BIG_N)
    "surge": (bulk_surge, True),
    "lean": (bulk_lean, True),
    "sqlalchemy": (bulk_sqlalchemy, False),
    "dbutils": (bulk_dbutils, False),
    "boto-style": (bulk_boto_style, False),
    "boto-2.49": (bulk_boto, False),
}


def peer_available(av: Available, name: str) -> bool:
    needs = {
        "surge": av.surge_pool,
        "sqlalchemy": av.sqlalchemy_pool,
        "dbutils": av.dbutils_pool,
        "boto-2.49": av.boto_pool,
    }
    return name not in needs or needs[name] is not None


def predict_s(history: list[Phases], n: int) -> float:
    """Time predicted at size n from a peer's earlier runs (see module docs)."""
    if not history:
        return 0.0
    last = history[-1]
    exponent = 2.0
    if len(history) >= 2:
        prev = history[-2]
        if prev.total_s > 0 and last.total_s > 0 and last.n != prev.n:
            exponent = math.log(last.total_s / prev.total_s) / math.log(last.n / prev.n)
            exponent = min(2.0, max(1.0, exponent))
    last_all = last.fill_s + last.total_s
    return last_all * (n / last.n) ** exponent


def run_bulk(av: Available, sizes: Sequence[int]) -> dict[str, Any]:
    history: dict[str, list[Phases]] = {name: [] for name in BULK_PEERS}
    skipped: dict[str, dict[int, str]] = {name: {} for name in BULK_PEERS}
    runs: dict[str, dict[int, list[Phases]]] = {name: {} for name in BULK_PEERS}
    for n in sizes:
        for name, (runner, big) in BULK_PEERS.items():
            if not peer_available(av, name):
                skipped[name][n] = "not installed"
                continue
            if n > BIG_N and not big:
                skipped[name][n] = f"not run above {BIG_N:,}"
                continue
            predicted = predict_s(history[name], n)
            if predicted > SKIP_ABOVE_S:
                skipped[name][n] = f"skipped (>{SKIP_ABOVE_S:.0f} s, ~{predicted:.0f} s)"
                continue
            attempts: list[Phases] = []
            progress(f"bulk: {name} N={n:,}")
            for _ in range(3):
                attempts.append(runner(av, n))
                gc.collect()
                if attempts[-1].fill_s + attempts[-1].total_s > 0.5:
                    break  # slow enough that noise matters less than the time spent
            runs[name][n] = attempts
            history[name].append(min(attempts, key=lambda p: p.total_s))

    table = Table(
        "1. put N then get N (put = return N idle; get = check N out)",
        ["peer", "N", "put", "put ns/op", "get", "get ns/op", "put+get", "growth"],
    )
    results: dict[str, Any] = {}
    for name in BULK_PEERS:
        best = {p.n: p for p in history[name]}
        prev: Phases | None = None
        for n in sizes:
            if n in skipped[name]:
                table.add(name, f"{n:,}", skipped[name][n])
                continue
            p = best[n]
            growth = ""
            if prev is not None:
                growth = f"x{p.total_s / prev.total_s:.1f} (N x{n / prev.n:.1f})"
            table.add(
                name,
                f"{n:,}",
                fmt_s(p.put_s),
                fmt_ns(p.put_s / n * 1e9),
                fmt_s(p.get_s),
                fmt_ns(p.get_s / n * 1e9),
                fmt_s(p.total_s),
                growth,
            )
            prev = p
        results[name] = {
            "best": [asdict(p) for p in history[name]],
            "runs": {str(n): [asdict(p) for p in ps] for n, ps in runs[name].items()},
            "skipped": {str(n): why for n, why in skipped[name].items()},
        }
    table.note("growth: put+get time at this N over the previous N (linear: same as N's).")
    table.note("fill (creating N connections) is untimed here; it is in the JSON.")
    table.print()
    return results


# -- section 2: one checkout + return, one thread ---------------------------------------


def loop_acquire_release(
    acquire: Callable[[], Any], release: Callable[[Any], Any], iterations: int
) -> float:
    with gc_paused():
        t0 = perf_counter()
        for _ in range(iterations):
            release(acquire())
        return perf_counter() - t0


def cycle_runners(av: Available) -> dict[str, Callable[[int], float]]:
    """name -> function(iterations) -> seconds, each on a warmed pool of 4."""
    runners: dict[str, Callable[[int], float]] = {}
    if av.surge_pool is not None:
        surge = av.surge_pool(connect_fake, max_size=4, timeout=60.0)
        surge.release(surge.acquire())
        runners["surge acquire/release"] = lambda it: loop_acquire_release(
            surge.acquire, surge.release, it
        )

        def surge_with(iterations: int) -> float:
            connection = surge.connection
            with gc_paused():
                t0 = perf_counter()
                for _ in range(iterations):
                    with connection():
                        pass
                return perf_counter() - t0

        runners["surge with connection()"] = surge_with
    lean = LeanPool(connect_fake, max_size=4)
    lean.release(lean.acquire())
    runners["lean lock+deque"] = lambda it: loop_acquire_release(lean.acquire, lean.release, it)
    if av.sqlalchemy_pool is not None:
        sa = av.sqlalchemy_pool(connect_fake, pool_size=4, max_overflow=0, timeout=60.0)
        fairy = sa.connect()
        sa_close = type(fairy).close
        sa_close(fairy)
        runners["sqlalchemy QueuePool"] = lambda it: loop_acquire_release(sa.connect, sa_close, it)
    if av.dbutils_pool is not None:
        db = av.dbutils_pool(connect_fake, maxcached=0, maxshared=0, maxconnections=4)
        conn = db.connection()
        db_close = type(conn).close
        db_close(conn)
        runners["dbutils PooledDB"] = lambda it: loop_acquire_release(db.connection, db_close, it)
    boto_style = BotoStylePool()
    boto_style.put(connect_fake())
    runners["boto-style (bare)"] = lambda it: loop_acquire_release(
        boto_style.get, boto_style.put, it
    )
    if av.boto_pool is not None:
        boto = av.boto_pool()
        boto.put(connect_fake())
        runners["boto-2.49 (bare)"] = lambda it: loop_acquire_release(boto.get, boto.put, it)
    return runners


def run_cycle(av: Available, iterations: int, repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, runner in cycle_runners(av).items():
        progress(f"cycle: {name} ({repeat} x {iterations:,})")
        runner(min(iterations, 10_000))  # warm-up
        best, times = best_of(lambda r=runner: r(iterations), repeat)
        results[name] = {
            "iterations": iterations,
            "best_ns": best / iterations * 1e9,
            "runs_ns": [t / iterations * 1e9 for t in times],
        }
    sa = results.get("sqlalchemy QueuePool", {}).get("best_ns")
    lean = results["lean lock+deque"]["best_ns"]
    table = Table(
        f"2. one thread: checkout + return of an idle connection "
        f"(best of {repeat} x {iterations:,})",
        ["peer", "ns/cycle", "median", "vs sqlalchemy", "vs lean"],
    )
    for name, r in results.items():
        table.add(
            name,
            fmt_ns(r["best_ns"]),
            fmt_ns(statistics.median(r["runs_ns"])),
            f"{r['best_ns'] / sa:.3f}x" if sa else "-",
            f"{r['best_ns'] / lean:.1f}x",
        )
    table.note("'bare': boto's HostConnectionPool has no lock; boto held one around it.")
    table.print()
    return results


# -- section 3: 16 threads on a pool of 4 ---------------------------------------------


@dataclass
class Blocking:
    """A peer for the contention section: blocking acquire/release, and its close."""

    acquire: Callable[[], Any]
    release: Callable[[Any], Any]
    close: Callable[[], Any] = lambda: None
    stats: Callable[[], dict[str, Any]] | None = None


def contention_peers(av: Available, size: int) -> dict[str, Callable[[], Blocking]]:
    peers: dict[str, Callable[[], Blocking]] = {}
    if av.surge_pool is not None:

        def surge() -> Blocking:
            pool = av.surge_pool(connect_fake, max_size=size, timeout=60.0)
            return Blocking(pool.acquire, pool.release, pool.close, pool.stats)

        peers["surge"] = surge
    if av.sqlalchemy_pool is not None:

        def sqlalchemy() -> Blocking:
            pool = av.sqlalchemy_pool(connect_fake, pool_size=size, max_overflow=0, timeout=60.0)
            return Blocking(pool.connect, lambda fairy: fairy.close(), pool.dispose)

        peers["sqlalchemy"] = sqlalchemy
    if av.dbutils_pool is not None:

        def dbutils() -> Blocking:
            pool = av.dbutils_pool(
                connect_fake, maxcached=0, maxshared=0, maxconnections=size, blocking=True
            )
            return Blocking(pool.connection, lambda conn: conn.close(), pool.close)

        peers["dbutils"] = dbutils

    def wrapped(store: Callable[[], GetPut]) -> Callable[[], Blocking]:
        def make() -> Blocking:
            pool = BlockingPool(store(), connect_fake, size)
            return Blocking(pool.acquire, pool.release)

        return make

    peers["boto-style+Condition"] = wrapped(BotoStylePool)
    if av.boto_pool is not None:
        peers["boto-2.49+Condition"] = wrapped(av.boto_pool)
    peers["lean deque+Condition"] = wrapped(DequeGetPut)
    return peers


def run_contention_one(
    make: Callable[[], Blocking], threads: int, hold_s: float, duration_s: float, max_checkouts: int
) -> dict[str, Any]:
    """Run ``threads`` workers against one pool; return waits, holds and throughput."""
    peer = make()
    # The count bound is shared, not per thread: a per-thread quota would make the
    # threads that barge ahead stop early and hand the pool to the starved ones.
    tickets = itertools.count()  # next() on it is atomic under the GIL
    waits: list[list[float]] = [[] for _ in range(threads)]
    holds: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)
    state = {"deadline": 0.0}
    acquire, release, sleep = peer.acquire, peer.release, time.sleep

    def worker(i: int) -> None:
        my_waits, my_holds = waits[i], holds[i]
        barrier.wait()
        deadline = state["deadline"]
        try:
            while next(tickets) < max_checkouts and perf_counter() < deadline:
                t0 = perf_counter()
                conn = acquire()
                t1 = perf_counter()
                sleep(hold_s)
                t2 = perf_counter()
                release(conn)
                my_waits.append(t1 - t0)
                my_holds.append(t2 - t1)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    state["deadline"] = perf_counter() + duration_s
    barrier.wait()
    start = perf_counter()
    for w in workers:
        w.join()
    elapsed = perf_counter() - start
    stats = peer.stats() if peer.stats is not None else None
    peer.close()
    if errors:
        raise RuntimeError(f"a worker failed: {errors[0]!r}") from errors[0]

    all_waits = sorted(w for ws in waits for w in ws)
    all_holds = [h for hs in holds for h in hs]
    count = len(all_waits)
    mean_hold = statistics.fmean(all_holds) if all_holds else math.nan
    return {
        "checkouts": count,
        "elapsed_s": elapsed,
        "throughput_per_s": count / elapsed if elapsed else math.nan,
        "mean_wait_s": statistics.fmean(all_waits) if all_waits else math.nan,
        "p50_wait_s": percentile(all_waits, 50),
        "p99_wait_s": percentile(all_waits, 99),
        "max_wait_s": all_waits[-1] if all_waits else math.nan,
        "mean_hold_s": mean_hold,
        "checkouts_per_thread": [len(ws) for ws in waits],
        "max_wait_per_thread_s": [max(ws) if ws else math.nan for ws in waits],
        "pool_stats": stats,
    }


def run_contention(
    av: Available, threads: int, size: int, hold_s: float, duration_s: float, max_checkouts: int
) -> dict[str, Any]:
    waiters = threads - size
    results: dict[str, Any] = {}
    table = Table(
        f"3. {threads} threads on a pool of {size}, hold {hold_s * 1e3:g} ms, "
        f"~{duration_s:g} s each",
        [
            "peer",
            "checkouts",
            "per s",
            "mean wait",
            "p99 wait",
            "max wait",
            "per thread",
            "max/(hold*waiters)",
        ],
    )
    for name, make in contention_peers(av, size).items():
        progress(f"contention: {name}")
        r = run_contention_one(make, threads, hold_s, duration_s, max_checkouts)
        r["waiters"] = waiters
        r["fairness_ratio"] = r["max_wait_s"] / (r["mean_hold_s"] * waiters)
        results[name] = r
        per_thread = r["checkouts_per_thread"]
        table.add(
            name,
            f"{r['checkouts']:,}",
            f"{r['throughput_per_s']:,.0f}",
            fmt_s(r["mean_wait_s"]),
            fmt_s(r["p99_wait_s"]),
            fmt_s(r["max_wait_s"]),
            f"{min(per_thread)}-{max(per_thread)}",
            f"{r['fairness_ratio']:.2f}",
        )
    table.note(f"waiters = threads - pool size = {waiters}; a strictly fair pool keeps the")
    table.note("longest wait near mean_hold x waiters (ratio ~1). Target: ratio <= 5.")
    table.note("A pool that lets a releasing thread take its connection straight back")
    table.note("starves others: their longest wait approaches the whole run's duration.")
    table.note(
        f"ideal throughput ~ pool size / hold = {size / hold_s:,.0f}/s "
        "(sleep overshoots the hold a little)."
    )
    table.print()
    return results


# -- targets ---------------------------------------------------------------------------


def check_targets(results: dict[str, Any], av: Available) -> list[Target]:
    targets: list[Target] = []
    if av.surge_pool is None:
        why = av.missing.get("surge", "surge.pool missing")
        return [Target("surge pool", "all targets", why, None)]
    bulk = results.get("bulk", {}).get("surge")
    if bulk:
        # Below 10k a whole phase lasts a few milliseconds: noise, not growth.
        best = [p for p in bulk["best"] if p["n"] >= LINEARITY_MIN_N]
        if len(best) < 2:
            targets.append(
                Target(
                    "1. surge put+get grows ~linearly",
                    "time factor <= 1.5 x N factor",
                    f"needs two sizes >= {LINEARITY_MIN_N:,}",
                    None,
                )
            )
        steps = []
        met = True
        for prev, cur in itertools.pairwise(best):
            size_factor = cur["n"] / prev["n"]
            prev_t = prev["put_s"] + prev["get_s"]
            time_factor = (cur["put_s"] + cur["get_s"]) / prev_t
            steps.append(f"N x{size_factor:.1f} -> time x{time_factor:.1f}")
            met = met and time_factor <= 1.5 * size_factor
        if steps:
            targets.append(
                Target(
                    "1. surge put+get grows ~linearly",
                    "time factor <= 1.5 x N factor",
                    "; ".join(steps),
                    met,
                )
            )
    cycle = results.get("cycle", {})
    surge_ns = cycle.get("surge acquire/release", {}).get("best_ns")
    sa_ns = cycle.get("sqlalchemy QueuePool", {}).get("best_ns")
    if surge_ns and sa_ns:
        ratio = surge_ns / sa_ns
        targets.append(
            Target(
                "2. surge cycle vs SQLAlchemy QueuePool",
                "<= 0.15x",
                f"{surge_ns:,.0f} ns vs {sa_ns:,.0f} ns = {ratio:.3f}x",
                ratio <= 0.15,
            )
        )
    surge_c = results.get("contention", {}).get("surge")
    if surge_c:
        ratio = surge_c["fairness_ratio"]
        targets.append(
            Target(
                "3. surge longest wait under contention",
                "<= 5x mean_hold x waiters",
                f"{fmt_s(surge_c['max_wait_s'])} / ({fmt_s(surge_c['mean_hold_s'])} x "
                f"{surge_c['waiters']}) = {ratio:.2f}x",
                ratio <= 5,
            )
        )
    return targets


# -- command line ------------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    return int(float(number) * scale)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark surge.pool.Pool against SQLAlchemy, DBUtils, boto 2 "
        "and a lock+deque floor (see the module docstring for what each phase does)."
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and short runs: a smoke test in seconds"
    )
    parser.add_argument("--sizes", help="bulk sizes, comma-separated (10k,100k,1M)")
    parser.add_argument("--only", help=f"comma-separated sections to run: {','.join(SECTIONS)}")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results path")
    parser.add_argument("--iterations", type=int, help="cycle section: cycles per run")
    parser.add_argument("--repeat", type=int, help="cycle section: runs (best is kept)")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--hold-ms", type=float, default=1.0)
    parser.add_argument("--duration", type=float, help="contention: seconds per peer")
    parser.add_argument(
        "--boto-path",
        default=os.environ.get("SURGE_BENCH_BOTO_PATH"),
        help="folder holding boto 2.49 (pip install --target DIR "
        "boto==2.49.0); default $SURGE_BENCH_BOTO_PATH",
    )
    args = parser.parse_args(argv)
    only = [s.strip() for s in (args.only or ",".join(SECTIONS)).split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(
            f"unknown section(s) {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}"
        )
    args.only = only
    if args.sizes:
        args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    else:
        args.sizes = [1_000, 2_000, 5_000] if args.quick else [10_000, 100_000, 300_000, 1_000_000]
    if args.iterations is None:
        args.iterations = 20_000 if args.quick else 200_000
    if args.repeat is None:
        args.repeat = 3 if args.quick else 5
    if args.duration is None:
        args.duration = 0.2 if args.quick else 2.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    av = import_peers(args.boto_path)
    for name, why in av.missing.items():
        print(f"note: {name} not measured: {why}", file=sys.stderr)
    info = machine_info(["surge", "sqlalchemy", "dbutils", "boto"])
    print(
        f"surge pool benchmark -- {info['cpu_model']}, {info['cpu_count']} cores, "
        f"load {info['load_average']}, Python {info['python']}, "
        f"{'quick' if args.quick else 'full'} run\n",
        flush=True,
    )
    started = perf_counter()
    results: dict[str, Any] = {}
    if "bulk" in args.only:
        results["bulk"] = run_bulk(av, sorted(set(args.sizes)))
    if "cycle" in args.only:
        results["cycle"] = run_cycle(av, args.iterations, args.repeat)
    if "contention" in args.only:
        results["contention"] = run_contention(
            av, args.threads, args.pool_size, args.hold_ms / 1e3, args.duration, 20_000
        )
    targets = check_targets(results, av)
    print("targets")
    for t in targets:
        print("  " + t.line())
    payload = {
        "benchmark": "pool",
        "machine": info,
        "load_average_after": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "settings": {k: v for k, v in vars(args).items() if k != "boto_path"},
        "missing": av.missing,
        "results": results,
        "targets": [asdict(t) for t in targets],
        "elapsed_s": perf_counter() - started,
    }
    path = write_json(args.out, payload)
    print(f"\nwrote {path} in {perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
