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
"""

from __future__ import annotations

import _thread
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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

clock = time.perf_counter


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

    __slots__ = ("area", "count", "open", "peak", "since", "union")

    def __init__(self) -> None:
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
        self.open += 1
        self.count += 1
        if self.open > self.peak:
            self.peak = self.open

    def leave(self, now: float) -> None:
        self._advance(now)
        if self.open > 0:
            self.open -= 1

    def mean(self) -> float:
        return self.area / self.union if self.union > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "spans": self.count,
            "peak": self.peak,
            "busy_s": round(self.union, 6),
            "mean_open": round(self.mean(), 3),
        }


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

    def as_dict(self, zero: float) -> dict[str, Any]:
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
        return out


@dataclass
class HostTotals:
    """One HTTP peer's totals."""

    requests: int = 0
    errors: int = 0
    bytes: int = 0
    time_s: float = 0.0
    dns: int = 0
    connects: int = 0
    tls: int = 0
    tls_s: float = 0.0
    connect_s: float = 0.0
    wait_s: float = 0.0  # request sent -> first byte
    receive_s: float = 0.0
    libraries: set[str] = field(default_factory=set)
    pool_waits: int = 0
    pool_wait_s: float = 0.0
    pool_discards: int = 0
    pool_size: int | None = None
    in_flight: int = 0  # requests open now
    peak_in_flight: int = 0


@dataclass
class DatabaseTotals:
    connects: int = 0
    connect_s: float = 0.0
    connect_errors: int = 0
    queries: int = 0
    query_s: float = 0.0
    query_errors: int = 0
    libraries: set[str] = field(default_factory=set)


@dataclass
class NameTotals:
    lookups: int = 0
    time_s: float = 0.0
    failed: int = 0


@dataclass
class PageTotals:
    """A paginated AWS operation, per caller: each call after the first is a page
    that waited for the one before."""

    calls: int = 0
    pages: int = 0  # calls that carried a continuation token
    request_s: float = 0.0  # the HTTP requests' time, every call
    parse_s: float = 0.0  # botocore's parse, every call
    gap_s: float = 0.0  # a page's response -> the next page's request
    gaps: int = 0
    last_response: dict[str, float] = field(default_factory=dict)  # who -> time


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
        self.http = Overlap()  # HTTP requests, start to last byte
        self.active = Overlap()  # TLS handshakes, and requests from send to last byte
        self.network = Overlap()  # any network operation
        self._labels: dict[tuple[int, str], str] = {}
        self._numbered: dict[str, int] = {}  # callers labelled so far, per kind
        self._pending: dict[int, list[Operation]] = {}
        self._aws: dict[int, list[Operation]] = {}  # AWS calls open, per caller
        self._open: dict[int, Operation] = {}  # HTTP requests not ended yet
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
        ident, label = self.who()
        op = Operation(kind, library, peer, name or peer, start, label)
        op.end = end
        op.error = error
        with self.lock:
            self._add(op)
            self._pend(ident, op)
            if kind == "dns" and name is not None:
                row = _bounded(self.names, name, NameTotals)
                row.lookups += 1
                row.time_s += end - start
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
        ident, label = self.who()
        op = Operation("http", library, peer, what, start, label)
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
            row.time_s += end - op.start
            if error is not None:
                row.errors += 1
            if "dns_start" in marks:
                row.dns += 1
            if "connect_start" in marks:
                row.connects += 1
                row.connect_s += marks.get("tcp_end", end) - marks["connect_start"]
            if "tls_end" in marks:
                row.tls += 1
                row.tls_s += marks["tls_end"] - marks.get("tcp_end", op.start)
            sent, first = marks.get("sent"), marks.get("first_byte")
            if sent is not None and first is not None:
                row.wait_s += first - sent
                row.receive_s += end - first
            if op.parent is not None:
                self._page_request(op.parent, op.start, end)

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
        _, label = self.who()
        op = Operation("pool.wait", library, peer, "wait for a connection", start, label)
        op.end = end
        with self.lock:
            self._add(op)
            row = _bounded(self.hosts, peer, HostTotals)
            row.pool_waits += 1
            row.pool_wait_s += end - start
            if size is not None:
                row.pool_size = size
            if demand is not None and demand > row.peak_in_flight:
                row.peak_in_flight = demand

    @guarded
    def pool_discard(self, peer: str, size: int | None) -> None:
        """A pool was full: a connection was closed instead of kept."""
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
    ) -> None:
        """A database connect (``db.connect``: TCP, TLS and login) or query
        (``db.query``: the statement and its result) that ended."""
        ident, label = self.who()
        op = Operation(kind, library, peer, what, start, label)
        op.end = end
        op.error = error
        with self.lock:
            if kind == "db.connect":
                self._attach(op, self._claim(ident))
                op.start = start  # the connect's own span, its phases inside it
            self._add(op)
            self.network.leave(end)
            row = _bounded(self.databases, peer, DatabaseTotals)
            row.libraries.add(library)
            if kind == "db.connect":
                row.connects += 1
                row.connect_s += end - start
                if error is not None:
                    row.connect_errors += 1
            else:
                row.queries += 1
                row.query_s += end - start
                if error is not None:
                    row.query_errors += 1

    # -- AWS (botocore) ---------------------------------------------------------------
    @guarded
    def aws_start(self, service: str, operation: str, paginated: bool, start: float) -> None:
        ident, label = self.who()
        op = Operation("aws", "botocore", service, f"{service}.{operation}", start, label)
        op.status = 1 if paginated else 0  # until it ends: whether a token was passed
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
            row.calls += 1
            marks = op.marks or {}
            parse = marks.get("parse_start")
            if parse is not None:
                row.parse_s += end - parse
                row.last_response[label] = parse
                if len(row.last_response) > MAX_WHOS:
                    row.last_response.pop(next(iter(row.last_response)))
            if paginated:
                row.pages += 1

    def _page_request(self, call: Operation, start: float, end: float) -> None:
        """An HTTP request of an AWS call ended (the lock held)."""
        row = _bounded(self.pages, call.what, PageTotals)
        row.request_s += end - start
        if call.status == 1:  # a page after the first: the gap since the last response
            last = row.last_response.pop(call.who, None)
            if last is not None and start >= last:
                row.gap_s += start - last
                row.gaps += 1

    # -- the end ----------------------------------------------------------------------
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
            hosts = {k: _totals(v) for k, v in self.hosts.items()}
            databases = {k: _totals(v) for k, v in self.databases.items()}
            names = {k: _totals(v) for k, v in self.names.items()}
            pages = {
                k: {n: v for n, v in _totals(row).items() if n != "last_response"}
                for k, row in self.pages.items()
            }
            overlap = {
                "http": self.http.as_dict(),
                "active": self.active.as_dict(),
                "network": self.network.as_dict(),
            }
            counted, by_kind = self.counted, dict(self.by_kind)
        zero = self.zero
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
            "network_s": overlap["network"]["busy_s"],
            "operations": counted,
            "kept": len(kept),
            "by_kind": by_kind,
            "hosts": hosts,
            "databases": databases,
            "names": names,
            "pages": pages,
            "overlap": overlap,
            "doctor": list(self.doctor),
            "imported": list(self.imported),
            "ops": [op.as_dict(zero) for op in kept],
        }


def _totals(row: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in vars(row).items():
        if isinstance(value, float):
            value = round(value, 6)
        elif isinstance(value, set):
            value = sorted(value)
        out[name] = value
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
