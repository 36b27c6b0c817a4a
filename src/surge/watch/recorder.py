"""The one recorder every instrumentor feeds: operations, and the running totals
the findings are drawn from, in bounded memory.

Imports only the standard library and nothing that changes what it watches: a
program run under ``surge watch`` may patch with gevent after this is loaded,
so neither ``socket`` nor ``ssl`` nor ``threading`` is imported here
(``_thread`` is, for the lock: the original, which gevent's patching leaves
alone; it is never held across a switch, so greenlets never contend for it).

Two kinds of state, each sized independently of the program's length:

- **operations kept one by one** (for the waterfall, the Chrome trace and the
  OTLP spans): the first :data:`KEEP` of them.  Past that they are counted, not
  kept; the outputs say so.  (~250 bytes each: 100,000 are ~25 MB.)
- **running totals** (for the findings and the tables), updated as each
  operation happens, exact for the whole run however long it is: per host, per
  database, per resolved name (each table :data:`MAX_KEYS` rows at most, and
  one ``(other)`` row for the rest), per paginated AWS operation, and three
  overlap meters (:class:`Overlap`) fed in real time as spans open and close.

Every figure in seconds that the outputs state as time of the run (``connect_s``,
``query_s``, ``time_s``, ``tls_s``, ``wait_s``, ``gap_s``, ``network_s``...) is
a **union on the wall clock**: the seconds during which at least one operation
of that kind was open (:class:`Busy` for spans reported when they end,
:class:`Overlap` for spans fed as they open and close), never a sum over
threads or tasks, so it cannot exceed the wall time however many ran at once.
Beside each, ``*_total_s`` is the sum over the operations, for means
(``connect_total_s / connects`` is the mean connect).

A peer (``host:port``, a name resolved) comes in through one of the methods
below and is kept without a userinfo
(:func:`surge.trace.redact.safe_peer`), whichever instrumentor named it:
``http.client`` keeps a redirect ``Location``'s ``user:pw@`` in its ``host``.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import os
import stat
import sys
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from surge.trace.redact import safe_peer
from surge.watch._log import guarded

#: Operations kept one by one; beyond, only counted and totalled.
KEEP = 100_000
#: Rows per table (hosts, databases, names, operations); beyond, one "(other)" row.
MAX_KEYS = 10_000
#: Network events (DNS, TCP, TLS) waiting for the request they belong to, per
#: thread/greenlet; a thread that resolves and connects without ever making a
#: request keeps only its last few.
MAX_PENDING = 16
#: Threads/greenlets with pending events at most (dead ones are dropped first-in).
MAX_WHOS = 4096
OTHER = "(other)"
#: Disjoint intervals a :class:`Busy` keeps before folding the oldest half.
BUSY_INTERVALS = 32
#: Intervals of network activity a recording hands back (for the union across
#: processes): past this, neighbours are merged pairwise, gaps and all.
SPANS_KEPT = 512

clock = time.perf_counter

#: A connection that ran at most this many statements and was then superseded (a
#: new connect to its database began after its last statement) is short-lived: a
#: connect for a query or a request's few, with what the framework runs on each
#: new connection beside them (a ``SET``; SQLAlchemy's dialect runs 6 statements
#: on an engine's first) - what connect-per-query counts.  A pool's connections,
#: opened up front and used to the end, are not superseded however few
#: statements each ran.
SHORT_CONNECTION = 10

#: Similar statements in a row, after a different SELECT, that make an N+1 run.
REPEATS = 5

#: Call sites kept per table row (the busiest first come); past this, one ``None`` row.
MAX_SITES = 32

#: A call site: the file, line and function of the innermost frame in the
#: program's own code (outside the standard library, site-packages and surge).
Site = tuple[str, int, str]

#: Per file name: whether a frame there is the program's own code (filled as met).
_USER_FILES: dict[str, bool] = {}
_NOT_USER: tuple[str, ...] | None = None
#: Per code object and line: its site (as many as the program has call sites).
_SITES: dict[tuple[Any, int], Site] = {}


def _not_user_dirs() -> tuple[str, ...]:
    global _NOT_USER
    if _NOT_USER is None:
        import sysconfig

        dirs = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # surge
        for name in ("stdlib", "platstdlib", "purelib", "platlib"):
            with contextlib.suppress(KeyError):
                dirs.add(sysconfig.get_paths()[name])
        _NOT_USER = tuple(os.path.join(d, "") for d in dirs if d)
    return _NOT_USER


def _is_user(filename: str) -> bool:
    if filename.startswith("<"):
        return not filename.startswith("<frozen")  # <string> (python -c), <stdin>: the program
    if "site-packages" in filename or "dist-packages" in filename:
        return False
    return not os.path.abspath(filename).startswith(_not_user_dirs())


def call_site() -> Site | None:
    """Where the program made the call being recorded: the innermost frame whose
    file is the program's own.  A walk up the stack, a dict lookup per frame (each
    file judged once): no stack is kept."""
    return site_in(sys._getframe(1))


def site_in(frame: Any) -> Site | None:
    """:func:`call_site` from ``frame`` outwards (another thread's, sampled)."""
    user = _USER_FILES
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        mine = user.get(name)
        if mine is None:
            mine = user[name] = _is_user(name)
        if mine:
            key = (code, frame.f_lineno)
            site = _SITES.get(key)
            if site is None:  # one tuple per site, shared by its operations
                site = _SITES[key] = (name, key[1], getattr(code, "co_qualname", code.co_name))
            return site
        frame = frame.f_back
    return None


def site_of(run: dict[str, Any], op: dict[str, Any]) -> dict[str, Any] | None:
    """Where the program made ``op`` (an operation in ``run``'s data): ``{"file",
    "line", "function"}``, or None."""
    index = op.get("site")
    sites = run.get("sites") or []
    if not isinstance(index, int) or not 0 <= index < len(sites):
        return None
    file, line, function = sites[index]
    return {"file": file, "line": line, "function": function}


def _count_site(sites: dict[Site | None, int], site: Site | None) -> None:
    if site not in sites and len(sites) >= MAX_SITES:
        site = None
    sites[site] = sites.get(site, 0) + 1


def sites_list(sites: dict[Site | None, int]) -> list[dict[str, Any]]:
    """A row's call sites as JSON values, the most calls first (``file`` null: the
    calls made from no frame of the program's, or past :data:`MAX_SITES`)."""
    ranked = sorted(sites.items(), key=lambda item: -item[1])
    return [
        {
            "file": None if site is None else site[0],
            "line": None if site is None else site[1],
            "function": None if site is None else site[2],
            "count": count,
        }
        for site, count in ranked
    ]


def _who_key() -> tuple[int, str]:
    """Who is running now: the greenlet (when greenlet is loaded: under gevent each
    greenlet is a caller of its own), else the thread; and its label."""
    greenlet = sys.modules.get("greenlet")
    if greenlet is not None:
        current = greenlet.getcurrent()
        if getattr(current, "parent", None) is not None:  # not a thread's main greenlet
            return id(current), "greenlet"
    events = sys.modules.get("asyncio.events")
    if events is not None and events._get_running_loop() is not None:
        task = sys.modules["asyncio"].current_task()
        if task is not None:
            return id(task), "task"
    return _thread.get_ident(), "thread"


class Overlap:
    """How many spans were open at once, fed as they open and close: the peak,
    the time with at least one open (``union``), and the integral of the count
    (``area``; ``area / union`` is the mean number open while any was)."""

    __slots__ = ("area", "began", "count", "open", "peak", "since", "spans", "union")

    def __init__(self, *, spans: bool = False) -> None:
        #: the intervals with at least one open (when asked: coarsened past SPANS_KEPT)
        self.spans: list[list[float]] | None = [] if spans else None
        self.began = 0.0
        self.open = 0
        self.peak = 0
        self.count = 0
        self.area = 0.0
        self.union = 0.0
        self.since = 0.0

    def _advance(self, now: float) -> None:
        if self.open > 0:
            dt = now - self.since
            if dt > 0.0:
                self.area += self.open * dt
                self.union += dt
        if now > self.since:
            self.since = now

    def enter(self, now: float) -> None:
        self._advance(now)
        if self.open == 0:
            self.began = self.since
        self.open += 1
        self.count += 1
        if self.open > self.peak:
            self.peak = self.open

    def leave(self, now: float) -> None:
        self._advance(now)
        if self.open > 0:
            self.open -= 1
            if self.open == 0 and self.spans is not None:
                self._close(self.began, self.since)

    def _close(self, began: float, ended: float) -> None:
        spans = self.spans
        assert spans is not None
        if spans and began <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], ended)
        else:
            spans.append([began, ended])
        if len(spans) > SPANS_KEPT:  # coarser: each pair of neighbours becomes one
            self.spans = [
                [spans[i][0], spans[min(i + 1, len(spans) - 1)][1]] for i in range(0, len(spans), 2)
            ]

    def mean(self) -> float:
        return self.area / self.union if self.union > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "spans": self.count,
            "peak": self.peak,
            "busy_s": round(self.union, 6),
            "mean_open": round(self.mean(), 3),
        }

    def intervals(self, zero: float) -> list[list[float]]:
        """The intervals with at least one open, since ``zero`` (the one open now
        until its last event)."""
        spans = [list(span) for span in self.spans or []]
        if self.open > 0 and self.since > self.began:
            spans.append([self.began, self.since])
        return [[round(a - zero, 6), round(b - zero, 6)] for a, b in spans]


class Busy:
    """The union of spans reported when they end, in bounded memory: the seconds
    of the wall clock during which at least one was open.

    Kept as sorted, disjoint intervals; past :data:`BUSY_INTERVALS` of them, the
    oldest half is folded into a total and a ``horizon`` (a span reported later
    counts only from the horizon on: so the union may fall short by what a very
    late report overlapped, never exceed it).  Spans mostly end in order, so the
    usual add is an append or a merge with the last interval."""

    __slots__ = ("ends", "folded", "horizon", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.folded = 0.0
        self.horizon = float("-inf")

    def add(self, start: float, end: float) -> None:
        if start < self.horizon:
            start = self.horizon
        if end <= start:
            return
        starts, ends = self.starts, self.ends
        if not starts or start > ends[-1]:
            starts.append(start)
            ends.append(end)
            if len(starts) > BUSY_INTERVALS:
                self._fold()
            return
        first = bisect_left(ends, start)  # the first interval that ends at or after start
        past = bisect_right(starts, end)  # those that begin at or before end: [:past]
        if first >= past:
            starts.insert(first, start)
            ends.insert(first, end)
        else:
            starts[first:past] = [min(start, starts[first])]
            ends[first:past] = [max(end, ends[past - 1])]
        if len(starts) > BUSY_INTERVALS:
            self._fold()

    def _fold(self) -> None:
        starts, ends = self.starts, self.ends
        half = len(starts) // 2
        self.folded += sum(e - s for s, e in zip(starts[:half], ends[:half], strict=True))
        self.horizon = ends[half - 1]
        del starts[:half], ends[:half]

    @property
    def seconds(self) -> float:
        return self.folded + sum(e - s for s, e in zip(self.starts, self.ends, strict=True))

    def kept(self, zero: float) -> dict[str, Any]:
        """What a union across processes is drawn from: the intervals kept (since
        ``zero``) and the seconds folded before them."""
        return {
            "spans": [
                [round(s - zero, 6), round(e - zero, 6)]
                for s, e in zip(self.starts, self.ends, strict=True)
            ],
            "folded_s": round(self.folded, 6),
        }


def union_s(spans: list[list[float]]) -> float:
    """The union of ``spans`` ([start, end] each), in seconds."""
    busy = Busy()
    for start, end in sorted(spans):
        busy.add(start, end)
    return busy.seconds


class Operation:
    """One network operation.  ``marks`` (HTTP and database connects): the phase
    timestamps that happened, by name (``dns_start``, ``dns_end``,
    ``connect_start``, ``tcp_end``, ``tls_end``, ``sent``, ``first_byte``)."""

    __slots__ = (
        "bytes",
        "end",
        "error",
        "kind",
        "library",
        "marks",
        "parent",
        "peer",
        "site",
        "start",
        "status",
        "what",
        "who",
    )

    def __init__(
        self, kind: str, library: str, peer: str, what: str, start: float, who: str
    ) -> None:
        self.kind = kind  # http, db.connect, db.query, dns, tcp, tls, pool.wait, aws
        self.library = library
        self.peer = peer  # host:port (or the name resolved, for dns)
        self.what = what  # "GET /path", "SELECT users", "s3.ListObjectsV2"
        self.start = start
        self.end: float | None = None
        self.status: int | None = None
        self.bytes = 0
        self.error: str | None = None
        self.who = who
        self.marks: dict[str, float] | None = None
        self.parent: Operation | None = None  # an HTTP request's AWS call
        self.site: Site | None = None  # where the program made it

    def as_dict(self, zero: float, sites: dict[Site, int]) -> dict[str, Any]:
        """As JSON values; ``site``: its index in ``sites`` (added to as met: the
        recording's ``sites`` list, so each site is written once)."""
        end = self.end if self.end is not None else self.start
        out: dict[str, Any] = {
            "kind": self.kind,
            "library": self.library,
            "peer": self.peer,
            "what": self.what,
            "start_s": round(self.start - zero, 6),
            "duration_s": round(max(0.0, end - self.start), 6),
            "who": self.who,
        }
        if self.status is not None:
            out["status"] = self.status
        if self.bytes:
            out["bytes"] = self.bytes
        if self.error is not None:
            out["error"] = self.error
        if self.marks:
            out["marks"] = {k: round(v - zero, 6) for k, v in self.marks.items()}
        if self.kind == "aws":
            out["id"] = id(self)
        if self.parent is not None:
            out["parent"] = id(self.parent)
        if self.site is not None:
            out["site"] = sites.setdefault(self.site, len(sites))
        return out


@dataclass
class HostTotals:
    """One HTTP peer's totals: ``*_total_s`` summed over its operations (for
    means), ``*_busy`` the same spans' union on the wall clock (:class:`Busy`;
    ``time_s``, ``connect_s``... in the data)."""

    requests: int = 0
    errors: int = 0
    bytes: int = 0
    dns: int = 0
    connects: int = 0
    tls: int = 0
    time_total_s: float = 0.0
    tls_total_s: float = 0.0
    connect_total_s: float = 0.0
    wait_total_s: float = 0.0  # request sent -> first byte
    receive_total_s: float = 0.0
    time_busy: Busy = field(default_factory=Busy)
    tls_busy: Busy = field(default_factory=Busy)
    connect_busy: Busy = field(default_factory=Busy)
    wait_busy: Busy = field(default_factory=Busy)
    receive_busy: Busy = field(default_factory=Busy)
    libraries: set[str] = field(default_factory=set)
    pool_waits: int = 0
    pool_wait_total_s: float = 0.0
    pool_wait_busy: Busy = field(default_factory=Busy)
    pool_discards: int = 0
    pool_size: int | None = None
    in_flight: int = 0  # requests open now
    peak_in_flight: int = 0
    #: where the program made its requests; those that connected (TCP), that
    #: shook hands (TLS); and where it waited for a pooled connection
    request_sites: dict[Site | None, int] = field(default_factory=dict)
    connect_sites: dict[Site | None, int] = field(default_factory=dict)
    tls_sites: dict[Site | None, int] = field(default_factory=dict)
    pool_wait_sites: dict[Site | None, int] = field(default_factory=dict)


@dataclass
class DatabaseTotals:
    """One database's totals (as :class:`HostTotals`); ``busy``: connecting or
    querying, on the wall clock."""

    connects: int = 0
    connect_errors: int = 0
    queries: int = 0
    query_errors: int = 0
    connect_total_s: float = 0.0
    query_total_s: float = 0.0
    connect_busy: Busy = field(default_factory=Busy)
    query_busy: Busy = field(default_factory=Busy)
    busy: Busy = field(default_factory=Busy)
    libraries: set[str] = field(default_factory=set)
    connect_sites: dict[Site | None, int] = field(default_factory=dict)
    query_sites: dict[Site | None, int] = field(default_factory=dict)
    #: connections that ran 1 to SHORT_CONNECTION statements and were superseded,
    #: among those no longer in ``connections`` (see :meth:`short`)
    short_connections: int = 0
    #: when the latest connect here began (not in the data)
    last_connect: float = float("-inf")
    #: per connection (its key: see :meth:`Recorder.db_end`), the statements it
    #: ran and when the last one ended (not in the data)
    connections: dict[int, list[float]] = field(default_factory=dict)

    def connected(self, key: int, start: float) -> None:
        """A connection ``key`` opened at ``start``: a key seen before named a
        connection that is gone (its object freed, or its caller's previous one)."""
        self.last_connect = max(self.last_connect, start)
        connections = self.connections
        gone = connections.pop(key, None)
        if gone is None and len(connections) >= MAX_WHOS:
            gone = connections.pop(next(iter(connections)))
        if gone is not None and self._superseded(gone):
            self.short_connections += 1
        connections[key] = [0, start]

    def ran(self, key: int, end: float) -> None:
        """Connection ``key`` ran a statement that ended at ``end``."""
        connection = self.connections.get(key)
        if connection is not None:
            connection[0] += 1
            connection[1] = max(connection[1], end)

    def _superseded(self, connection: list[float]) -> bool:
        return 0 < connection[0] <= SHORT_CONNECTION and connection[1] < self.last_connect

    def short(self) -> int:
        """Short-lived connections: few statements, and a connect after the last."""
        now = sum(1 for connection in self.connections.values() if self._superseded(connection))
        return self.short_connections + now


@dataclass
class NameTotals:
    lookups: int = 0
    failed: int = 0
    time_total_s: float = 0.0
    time_busy: Busy = field(default_factory=Busy)
    sites: dict[Site | None, int] = field(default_factory=dict)


@dataclass
class PageTotals:
    """A paginated AWS operation, per caller: each call after the first is a page
    that waited for the one before."""

    calls: int = 0
    pages: int = 0  # calls that carried a continuation token
    request_total_s: float = 0.0  # the HTTP requests' time, every call
    parse_total_s: float = 0.0  # botocore's parse, every call
    gap_total_s: float = 0.0  # a page's response -> the next page's request
    request_busy: Busy = field(default_factory=Busy)
    parse_busy: Busy = field(default_factory=Busy)
    gap_busy: Busy = field(default_factory=Busy)
    gaps: int = 0
    last_response: dict[str, float] = field(default_factory=dict)  # who -> time
    sites: dict[Site | None, int] = field(default_factory=dict)


#: Redis commands that read a collection (members, a range, keys): what an N+1
#: run follows there, as a SELECT does in SQL (the redis instrumentor names a
#: command by its name alone).
COLLECTION_READS = frozenset(
    {
        "SMEMBERS", "SSCAN", "SINTER", "SUNION", "SDIFF", "LRANGE", "ZRANGE",
        "ZRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYSCORE", "ZSCAN", "KEYS", "SCAN",
        "HKEYS", "HVALS", "HGETALL", "HSCAN", "SORT", "XRANGE", "XREVRANGE", "MGET",
    }
)  # fmt: skip


def reads_rows(what: str) -> bool:
    """Whether a statement named ``what`` reads many rows: what N+1 runs follow."""
    return what.startswith("SELECT") or what in COLLECTION_READS


@dataclass
class RepeatTotals:
    """Runs of one statement shape repeated by one caller right after a different
    SELECT (the N+1 pattern: a query, then one more per row it returned), per
    database and shape: how many runs, the calls in them, and their time."""

    database: str = ""
    library: str = ""  # the driver of the repeated statements (redis: commands)
    what: str = ""  # the repeated statement (SELECT orders)
    source: str = ""  # the statement before the first run (SELECT users)
    runs: int = 0
    calls: int = 0
    longest: int = 0
    time_total_s: float = 0.0
    time_busy: Busy = field(default_factory=Busy)
    sites: dict[Site | None, int] = field(default_factory=dict)


class _Run:
    """One caller's current run of similar statements (see :class:`RepeatTotals`)."""

    __slots__ = ("count", "key", "pending", "row", "source", "values", "varied", "what")

    def __init__(self, key: tuple[str, int], what: str, source: str | None, values: int) -> None:
        self.key = key
        self.values = values  # the first statement's values (hashed)
        self.varied = False
        self.what = what
        self.source = source  # the different SELECT just before, if any
        self.count = 1
        self.pending: list[tuple[float, float, Site | None]] = []
        self.row: RepeatTotals | None = None


@dataclass
class BlockedTotals:
    """An event loop's callbacks that blocked it (see the asyncio instrumentor)."""

    count: int = 0
    time_total_s: float = 0.0
    time_busy: Busy = field(default_factory=Busy)
    longest_s: float = 0.0
    sites: dict[Site | None, int] = field(default_factory=dict)


class Descriptors:
    """Descriptor exhaustion: how many calls failed for want of a descriptor
    (EMFILE: the process's limit; ENFILE: the system's), the limit then, and the
    most descriptors (and sockets among them) seen open, counted at the first
    :data:`SAMPLES` failures by probing each number below the limit (``fstat``:
    at the limit, opening ``/proc/self/fd`` would itself fail)."""

    SAMPLES = 4
    #: Descriptor numbers probed at most per count.
    PROBE = 65536

    def __init__(self) -> None:
        self.exhausted = 0
        self.errnos: set[str] = set()
        self.limit: int | None = None
        self.peak_open = 0
        self.peak_sockets = 0
        self.sites: dict[Site | None, int] = {}

    def saw(self, error: OSError, site: Site | None = None) -> None:
        if getattr(error, "_surge_counted", False):
            return  # the same error, seen again where a library re-raised it
        with contextlib.suppress(AttributeError, TypeError):
            error._surge_counted = True  # type: ignore[attr-defined]
        self.exhausted += 1
        _count_site(self.sites, site)
        self.errnos.add(errno.errorcode.get(error.errno or 0, str(error.errno)))
        if self.exhausted > self.SAMPLES:
            return
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            self.limit = None if soft == resource.RLIM_INFINITY else int(soft)
        except (ImportError, OSError, ValueError):
            self.limit = None
        opened = sockets = 0
        for fd in range(min(self.limit or self.PROBE, self.PROBE)):
            try:
                mode = os.fstat(fd).st_mode
            except OSError:
                continue
            opened += 1
            sockets += stat.S_ISSOCK(mode)
        if opened > self.peak_open:
            self.peak_open, self.peak_sockets = opened, sockets

    def as_dict(self) -> dict[str, Any]:
        return {
            "exhausted": self.exhausted,
            "errnos": sorted(self.errnos),
            "limit": self.limit,
            "peak_open": self.peak_open,
            "peak_sockets": self.peak_sockets,
            "sites": sites_list(self.sites),
        }


#: Parameter names that carry a page's continuation token, in AWS's APIs.
PAGE_TOKENS = frozenset(
    {
        "ContinuationToken",
        "Marker",
        "NextToken",
        "NextMarker",
        "KeyMarker",
        "VersionIdMarker",
        "UploadIdMarker",
        "StartAfter",
        "ExclusiveStartKey",
        "PaginationToken",
        "StartingToken",
        "NextContinuationToken",
        "PartNumberMarker",
    }
)


def _bounded(table: dict[str, Any], key: str, make: Callable[[], Any]) -> Any:
    row = table.get(key)
    if row is None:
        if len(table) >= MAX_KEYS:
            key = OTHER
            row = table.get(key)
            if row is not None:
                return row
        row = table[key] = make()
    return row


class Recorder:
    """Gathers a run's operations: instrumentors call the methods below as things
    happen, from any thread, greenlet or task."""

    def __init__(self, *, keep: int = KEEP) -> None:
        self.keep = keep
        self.zero = clock()
        self.wall_zero = time.time()
        self.cpu_zero = time.process_time()
        self.stopped: float | None = None
        self.cpu_s: float | None = None
        self.lock = _thread.allocate_lock()
        self.kept: list[Operation] = []
        self.counted = 0  # every operation, kept or not
        self.by_kind: dict[str, int] = {}
        self.hosts: dict[str, HostTotals] = {}
        self.databases: dict[str, DatabaseTotals] = {}
        self.names: dict[str, NameTotals] = {}
        self.pages: dict[str, PageTotals] = {}
        self.repeats: dict[tuple[str, int], RepeatTotals] = {}
        self.blocked = BlockedTotals()
        self._runs: dict[int, _Run] = {}  # per caller, its run of similar statements
        self.http = Overlap()  # HTTP requests, start to last byte
        self.active = Overlap()  # TLS handshakes, and requests from send to last byte
        self.network = Overlap(spans=True)  # any network operation
        self._labels: dict[tuple[int, str], str] = {}
        self._numbered: dict[str, int] = {}  # callers labelled so far, per kind
        self._pending: dict[int, list[Operation]] = {}
        self._aws: dict[int, list[Operation]] = {}  # AWS calls open, per caller
        self._open: dict[int, Operation] = {}  # HTTP requests not ended yet
        self.descriptors = Descriptors()
        self.doctor: list[dict[str, Any]] = []  # surge doctor's findings, at stop
        self.imported: list[str] = []  # instrumented libraries seen imported

    # -- who ------------------------------------------------------------------------
    def who(self) -> tuple[int, str]:
        key = _who_key()
        label = self._labels.get(key)
        if label is None:
            with self.lock:  # a new caller: numbered once, whichever thread asks first
                label = self._labels.get(key)
                if label is None:
                    if len(self._labels) >= MAX_WHOS:
                        self._labels.clear()  # the oldest callers are likely gone
                    kind = key[1]
                    n = self._numbered[kind] = self._numbered.get(kind, 0) + 1
                    label = self._labels[key] = f"{kind} {n}"
        return key[0], label

    # -- the common path --------------------------------------------------------------
    def _add(self, op: Operation) -> None:
        """Count an operation that ended (the lock held)."""
        self.counted += 1
        self.by_kind[op.kind] = self.by_kind.get(op.kind, 0) + 1
        if len(self.kept) < self.keep:
            self.kept.append(op)

    def _pend(self, ident: int, op: Operation) -> None:
        pending = self._pending.get(ident)
        if pending is None:
            if len(self._pending) >= MAX_WHOS:
                self._pending.pop(next(iter(self._pending)))
            pending = self._pending[ident] = []
        if len(pending) >= MAX_PENDING:
            del pending[0]
        pending.append(op)

    def _claim(self, ident: int) -> list[Operation]:
        return self._pending.pop(ident, None) or []

    @guarded
    def network_event(
        self,
        kind: str,
        library: str,
        peer: str,
        start: float,
        end: float,
        error: str | None = None,
        *,
        name: str | None = None,
    ) -> None:
        """A DNS lookup (``name`` resolved), TCP connect or TLS handshake that ended;
        it becomes a phase of the next request or connect its caller makes."""
        peer = safe_peer(peer)
        name = None if name is None else safe_peer(name)
        ident, label = self.who()
        op = Operation(kind, library, peer, name or peer, start, label)
        op.end = end
        op.error = error
        if kind == "dns":  # a connect's and a handshake's site is their request's
            op.site = call_site()
        with self.lock:
            self._add(op)
            self._pend(ident, op)
            if kind == "dns" and name is not None:
                row = _bounded(self.names, name, NameTotals)
                _count_site(row.sites, op.site)
                row.lookups += 1
                row.time_total_s += end - start
                row.time_busy.add(start, end)
                if error is not None:
                    row.failed += 1

    @guarded
    def enter_active(self, now: float) -> None:
        with self.lock:
            self.active.enter(now)
            self.network.enter(now)

    @guarded
    def leave_active(self, now: float) -> None:
        with self.lock:
            self.active.leave(now)
            self.network.leave(now)

    # -- HTTP -------------------------------------------------------------------------
    @guarded
    def http_start(
        self,
        library: str,
        peer: str,
        what: str,
        start: float,
        *,
        claim: bool = True,
        active: bool = False,
    ) -> Operation:
        """A request began (its connection's DNS, TCP and TLS, if any happened just
        before on this caller, become its first phases); ``active``: it is
        sending already (:meth:`enter_active` too)."""
        peer = safe_peer(peer)
        ident, label = self.who()
        op = Operation("http", library, peer, what, start, label)
        op.site = call_site()
        with self.lock:
            if active:
                self.active.enter(start)
                self.network.enter(start)
            if claim:
                self._attach(op, self._claim(ident))
            stack = self._aws.get(ident)
            if stack:
                op.parent = stack[-1]
            self.http.enter(start)
            self.network.enter(start)
            if len(self._open) < MAX_WHOS:
                self._open[id(op)] = op
            row = _bounded(self.hosts, peer, HostTotals)
            row.in_flight += 1
            if row.in_flight > row.peak_in_flight:
                row.peak_in_flight = row.in_flight
        return op

    @staticmethod
    def _attach(op: Operation, events: list[Operation]) -> None:
        marks: dict[str, float] = {}
        for event in events:
            end = event.end if event.end is not None else event.start
            if event.kind == "dns":
                marks["dns_start"], marks["dns_end"] = event.start, end
            elif event.kind == "tcp":
                marks["connect_start"], marks["tcp_end"] = event.start, end
            elif event.kind == "tls":
                marks["tls_end"] = end
                marks.setdefault("tcp_end", event.start)
        if marks:
            if op.marks:
                for name, when in op.marks.items():
                    marks.setdefault(name, when)
            op.marks = marks
            op.start = min(op.start, *marks.values())

    @guarded
    def drop_pending(self) -> None:
        """Forget this caller's pending DNS/TCP/TLS (a library that times its own
        connects saw them already)."""
        ident, _ = self.who()
        with self.lock:
            self._pending.pop(ident, None)

    @guarded
    def claim_into(self, op: Operation) -> None:
        """The DNS, TCP and TLS its caller did since the request began become its
        phases (a plain http.client connects while it sends)."""
        if not self._pending:  # nothing pending for anyone: the usual case, no lock
            return
        ident, _ = self.who()
        with self.lock:
            events = self._claim(ident)
            if events:
                self._attach(op, events)

    @guarded
    def mark(self, op: Operation, name: str, when: float) -> None:
        marks = op.marks
        if marks is None:
            marks = op.marks = {}
        marks.setdefault(name, when)

    @guarded
    def http_end(
        self,
        op: Operation,
        end: float,
        *,
        status: int | None = None,
        size: int = 0,
        error: str | None = None,
        active: bool = False,
    ) -> None:
        """A request ended; ``active``: it was active (:meth:`leave_active` too)."""
        if op.end is not None:
            return  # ended already (closed twice)
        op.end = end
        op.status = status
        op.bytes = size
        op.error = error
        marks = op.marks or {}
        with self.lock:
            if active:
                self.active.leave(end)
                self.network.leave(end)
            self._open.pop(id(op), None)
            self._add(op)
            self.http.leave(end)
            self.network.leave(end)
            row = _bounded(self.hosts, op.peer, HostTotals)
            row.in_flight = max(0, row.in_flight - 1)
            row.requests += 1
            row.libraries.add(op.library)
            row.bytes += size
            row.time_total_s += end - op.start
            row.time_busy.add(op.start, end)
            _count_site(row.request_sites, op.site)
            if error is not None:
                row.errors += 1
            if "dns_start" in marks:
                row.dns += 1
            if "connect_start" in marks:
                row.connects += 1
                _count_site(row.connect_sites, op.site)
                began, ended = marks["connect_start"], marks.get("tcp_end", end)
                row.connect_total_s += ended - began
                row.connect_busy.add(began, ended)
            if "tls_end" in marks:
                row.tls += 1
                _count_site(row.tls_sites, op.site)
                began, ended = marks.get("tcp_end", op.start), marks["tls_end"]
                row.tls_total_s += ended - began
                row.tls_busy.add(began, ended)
            sent, first = marks.get("sent"), marks.get("first_byte")
            if sent is not None and first is not None:
                row.wait_total_s += first - sent
                row.wait_busy.add(sent, first)
                row.receive_total_s += end - first
                row.receive_busy.add(first, end)
            if op.parent is not None:
                self._page_request(op.parent, op.start, end)

    @guarded
    def fd_exhausted(self, error: OSError) -> None:
        """A call failed for want of a descriptor (EMFILE, ENFILE)."""
        site = call_site()
        with self.lock:
            self.descriptors.saw(error, site)

    # -- pools ------------------------------------------------------------------------
    @guarded
    def pool_wait(
        self,
        library: str,
        peer: str,
        start: float,
        end: float,
        size: int | None,
        demand: int | None = None,
    ) -> None:
        """A caller waited ``end - start`` for a connection from a pool of ``size``;
        ``demand``: how many wanted one then (held and waiting), where the pool
        knows and no request count tells it."""
        peer = safe_peer(peer)
        _, label = self.who()
        op = Operation("pool.wait", library, peer, "wait for a connection", start, label)
        op.end = end
        op.site = call_site()
        with self.lock:
            self._add(op)
            row = _bounded(self.hosts, peer, HostTotals)
            _count_site(row.pool_wait_sites, op.site)
            row.pool_waits += 1
            row.pool_wait_total_s += end - start
            row.pool_wait_busy.add(start, end)
            if size is not None:
                row.pool_size = size
            if demand is not None and demand > row.peak_in_flight:
                row.peak_in_flight = demand

    @guarded
    def pool_discard(self, peer: str, size: int | None) -> None:
        """A pool was full: a connection was closed instead of kept."""
        peer = safe_peer(peer)
        with self.lock:
            row = _bounded(self.hosts, peer, HostTotals)
            row.pool_discards += 1
            if size is not None:
                row.pool_size = size

    # -- databases --------------------------------------------------------------------
    @guarded
    def db_start(self, start: float) -> None:
        with self.lock:
            self.network.enter(start)

    @guarded
    def db_end(
        self,
        kind: str,
        library: str,
        peer: str,
        what: str,
        start: float,
        end: float,
        error: str | None = None,
        shape: tuple[int, int] | None = None,
        connection: int | None = None,
    ) -> None:
        """A database connect (``db.connect``: TCP, TLS and login) or query
        (``db.query``: the statement and its result) that ended; ``shape``: a
        hash of the statement without its values, and one of it with them (see
        :meth:`_repeat`); ``connection``: the ``id()`` of the connection it
        opened or ran on, where the driver names it (else the caller stands for
        its connection: one connection at a time per caller)."""
        peer = safe_peer(peer)
        ident, label = self.who()
        key = connection if connection is not None else ~ident  # ids and idents are >= 0
        op = Operation(kind, library, peer, what, start, label)
        op.end = end
        op.error = error
        op.site = call_site()
        with self.lock:
            if kind == "db.connect":
                self._attach(op, self._claim(ident))
                op.start = start  # the connect's own span, its phases inside it
            self._add(op)
            self.network.leave(end)
            row = _bounded(self.databases, peer, DatabaseTotals)
            row.libraries.add(library)
            row.busy.add(start, end)
            if kind == "db.connect":
                _count_site(row.connect_sites, op.site)
                row.connects += 1
                if error is None:
                    row.connected(key, start)
                self._runs.pop(ident, None)  # a new connection: a new sequence
                row.connect_total_s += end - start
                row.connect_busy.add(start, end)
                if error is not None:
                    row.connect_errors += 1
            else:
                _count_site(row.query_sites, op.site)
                row.queries += 1
                row.ran(key, end)
                if shape is not None:
                    self._repeat(
                        ident, (peer, shape[0]), shape[1], what, library, start, end, op.site
                    )
                row.query_total_s += end - start
                row.query_busy.add(start, end)
                if error is not None:
                    row.query_errors += 1

    def _repeat(
        self,
        ident: int,
        key: tuple[str, int],
        values: int,
        what: str,
        library: str,
        start: float,
        end: float,
        site: Site | None,
    ) -> None:
        """A statement of ``ident``'s (the lock held): the same shape as its last
        one continues a run; a run of :data:`REPEATS` right after a different
        SELECT, whose values changed within them (the same statement asked again
        with the same values is a poll, not N+1), is counted in :attr:`repeats`,
        and so is the rest of it."""
        run = self._runs.get(ident)
        if run is None or run.key != key:
            source = run.what if run is not None and reads_rows(run.what) else None
            if run is None and len(self._runs) >= MAX_WHOS:
                self._runs.pop(next(iter(self._runs)))
            run = self._runs[ident] = _Run(key, what, source, values)
        else:
            run.count += 1
            if values != run.values:
                run.varied = True
        if run.source is None:
            return
        row = run.row
        if row is None:
            run.pending.append((start, end, site))
            if run.count < REPEATS:
                return
            if not run.varied:
                run.source, run.pending = None, []  # the same values again and again
                return
            row = self.repeats.get(key)
            if row is None:
                if len(self.repeats) >= MAX_KEYS:
                    return
                row = self.repeats[key] = RepeatTotals(key[0], library, what, run.source)
            run.row = row
            row.runs += 1
            spans, run.pending = run.pending, []
        else:
            spans = [(start, end, site)]
        for began, ended, where in spans:
            row.calls += 1
            row.time_total_s += ended - began
            row.time_busy.add(began, ended)
            _count_site(row.sites, where)
        if run.count > row.longest:
            row.longest = run.count

    # -- event loops --------------------------------------------------------------------
    @guarded
    def loop_blocked(self, what: str, start: float, end: float, site: Site | None) -> None:
        """An event loop ran one callback (``what``) from ``start`` to ``end``,
        blocked for everything else; ``site``: where it was stuck."""
        _, label = self.who()
        op = Operation("loop.blocked", "asyncio", "event loop", what, start, label)
        op.end = end
        op.site = site
        with self.lock:
            self._add(op)
            blocked = self.blocked
            blocked.count += 1
            blocked.time_total_s += end - start
            blocked.time_busy.add(start, end)
            blocked.longest_s = max(blocked.longest_s, end - start)
            _count_site(blocked.sites, site)

    # -- AWS (botocore) ---------------------------------------------------------------
    @guarded
    def aws_start(self, service: str, operation: str, paginated: bool, start: float) -> None:
        ident, label = self.who()
        op = Operation("aws", "botocore", service, f"{service}.{operation}", start, label)
        op.status = 1 if paginated else 0  # until it ends: whether a token was passed
        op.site = call_site()
        with self.lock:
            stack = self._aws.setdefault(ident, [])
            if len(stack) < 8:
                stack.append(op)

    @guarded
    def aws_parse(self, when: float) -> None:
        """botocore began parsing the current call's response."""
        ident, _ = self.who()
        with self.lock:
            stack = self._aws.get(ident)
            if stack:
                self.mark(stack[-1], "parse_start", when)

    @guarded
    def aws_end(self, end: float, error: str | None = None) -> None:
        ident, label = self.who()
        with self.lock:
            stack = self._aws.get(ident)
            if not stack:
                return
            op = stack.pop()
            if not stack:
                del self._aws[ident]
            op.end = end
            op.error = error
            paginated = op.status == 1
            op.status = None
            self._add(op)
            row = _bounded(self.pages, op.what, PageTotals)
            _count_site(row.sites, op.site)
            row.calls += 1
            marks = op.marks or {}
            parse = marks.get("parse_start")
            if parse is not None:
                row.parse_total_s += end - parse
                row.parse_busy.add(parse, end)
                row.last_response[label] = parse
                if len(row.last_response) > MAX_WHOS:
                    row.last_response.pop(next(iter(row.last_response)))
            if paginated:
                row.pages += 1

    def _page_request(self, call: Operation, start: float, end: float) -> None:
        """An HTTP request of an AWS call ended (the lock held)."""
        row = _bounded(self.pages, call.what, PageTotals)
        row.request_total_s += end - start
        row.request_busy.add(start, end)
        if call.status == 1:  # a page after the first: the gap since the last response
            last = row.last_response.pop(call.who, None)
            if last is not None and start >= last:
                row.gap_total_s += start - last
                row.gap_busy.add(last, start)
                row.gaps += 1

    # -- the end ----------------------------------------------------------------------
    def seize_lock(self, timeout: float = 1.0) -> None:
        """At a forced ending (a signal's handler, ``os._exit``): wait for the lock
        to be free; if it is not by ``timeout``, it is held by the frame the signal
        interrupted, which never resumes: take a new one (the totals may miss that
        one update)."""
        if self.lock.acquire(timeout=timeout):
            self.lock.release()
        else:
            self.lock = _thread.allocate_lock()

    def stop(self) -> None:
        """The run ended: a request whose body was never read to its end ends at its
        last known moment, as ``unfinished``."""
        if self.stopped is not None:
            return
        self.stopped = clock()
        self.cpu_s = time.process_time() - self.cpu_zero
        for op in list(self._open.values()):
            last = max((op.marks or {}).values(), default=op.start)
            error = None if op.status else "unfinished"
            self.http_end(op, last, status=op.status, error=error, active=True)

    @property
    def wall_s(self) -> float:
        end = self.stopped if self.stopped is not None else clock()
        return end - self.zero

    # -- what the outputs read ----------------------------------------------------------
    def data(self) -> dict[str, Any]:
        """Everything recorded, as JSON-ready values (times in seconds since the
        recording began); what :mod:`surge.watch.findings` and the outputs read,
        and what a watched child process hands back to ``surge watch``."""
        with self.lock:
            kept = list(self.kept)
            zero = self.zero
            hosts = {k: _totals(v, zero=zero) for k, v in self.hosts.items()}
            databases = {
                k: {
                    **_totals(v, skip=("connections", "last_connect"), zero=zero),
                    "short_connections": v.short(),
                }
                for k, v in self.databases.items()
            }
            names = {k: _totals(v) for k, v in self.names.items()}
            pages = {k: _totals(row, skip=("last_response",)) for k, row in self.pages.items()}
            repeats = [_totals(row) for row in self.repeats.values()]
            blocked = _totals(self.blocked)
            overlap = {
                "http": self.http.as_dict(),
                "active": self.active.as_dict(),
                "network": self.network.as_dict(),
            }
            network_spans = self.network.intervals(self.zero)
            counted, by_kind = self.counted, dict(self.by_kind)
        zero = self.zero
        site_ids: dict[Site, int] = {}
        ops = [op.as_dict(zero, site_ids) for op in kept]
        http_ops = [op for op in kept if op.kind == "http"]
        overlap["issued"] = _sweep(http_ops)
        callers = {op.who for op in http_ops}
        kinds = sorted({who.partition(" ")[0] for who in callers})
        overlap["issued"]["callers"] = len(callers)
        overlap["issued"]["caller_kinds"] = kinds
        return {
            "started": self.wall_zero,
            "wall_s": round(self.wall_s, 6),
            "cpu_s": round(self.cpu_s if self.cpu_s is not None else 0.0, 6),
            "network_s": min(overlap["network"]["busy_s"], round(self.wall_s, 6)),
            "network_spans": network_spans,
            "operations": counted,
            "kept": len(kept),
            "by_kind": by_kind,
            "hosts": hosts,
            "databases": databases,
            "names": names,
            "pages": pages,
            "repeats": repeats,
            "blocked": blocked,
            "overlap": overlap,
            "descriptors": self.descriptors.as_dict(),
            "doctor": list(self.doctor),
            "imported": list(self.imported),
            "ops": ops,
            "sites": [list(site) for site in site_ids],
        }


def _totals(row: Any, skip: tuple[str, ...] = (), zero: float | None = None) -> dict[str, Any]:
    """A totals row as JSON values: each :class:`Busy` ``x_busy`` as ``x_s``, its
    seconds on the wall clock (``busy`` as ``busy_s``); ``skip``: fields left out;
    with ``zero``, also ``intervals``: each ``x_s``'s :meth:`Busy.kept` (what
    merges a row with another process's, :func:`surge.watch.report.merged_rows`)."""
    out: dict[str, Any] = {}
    intervals: dict[str, Any] = {}
    for name, value in vars(row).items():
        if name in skip:
            continue
        if isinstance(value, Busy):
            name = name.removesuffix("_busy") + "_s"
            if zero is not None:
                intervals[name] = value.kept(zero)
            value = round(value.seconds, 6)
        elif isinstance(value, float):
            value = round(value, 6)
        elif isinstance(value, set):
            value = sorted(value)
        elif name.endswith("sites"):
            value = sites_list(value)
        out[name] = value
    if zero is not None:
        out["intervals"] = intervals
    return out


def _sweep(ops: list[Operation]) -> dict[str, Any]:
    """Overlap of the operations' whole spans, from their first phase (a DNS
    lookup, a connect) to their end: how many were in flight at once."""
    events: list[tuple[float, int]] = []
    for op in ops:
        end = op.end if op.end is not None else op.start
        events.append((op.start, 1))
        events.append((max(end, op.start), -1))
    events.sort()
    meter = Overlap()
    if events:
        meter.since = events[0][0]
    for when, step in events:
        if step > 0:
            meter.enter(when)
        else:
            meter.leave(when)
    return meter.as_dict()
