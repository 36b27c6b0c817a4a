"""What went wrong, with the numbers that show it, and the fix.

Each rule reads a recording's data (:meth:`Recorder.data`: totals that count
every operation of the run, however long) and returns findings only when its
evidence is there: a threshold of count *and* of cost, so that a program that
did a thing twice, or whose thing cost nothing, is not told about it.  The ids
are fixed (scripts match on them).

The time a finding states as spent ("x% of the wall time", "N s went to ...")
is a union on the wall clock: the seconds during which at least one operation
of that kind was open (the data's ``*_s`` fields; see
:mod:`surge.watch.recorder`), never a sum over threads or tasks, so no finding
can state more than the wall time or more than 100% of it.  Means per
operation are sums over the operations (``*_total_s``) divided by their count.
An expected time ("would take about N s") comes from the model the finding
names in its evidence, and never exceeds the wall time.

=====================  ===============================================================
id                     raised when
=====================  ===============================================================
connect-per-query      >= 10 connections to one database, half of all, that each ran
                       1 to 10 statements and were then replaced (a connect to that
                       database began after their last statement: a SET per
                       connection, an ORM's own statements do not hide it; a pool's
                       connections, used to the end, are not replaced), and
                       connecting >= 25% of the time spent with that database
serial-requests        >= 10 HTTP requests, never two in flight at once, and requests
                       >= 50% of the wall time (not pages of one listing: serial-pages)
serial-pages           >= 2 pages of one paginated AWS call where the gap between a
                       page's response and the next page's request exceeds the request
serialised-https       requests in flight at once (>= 2 on average) whose TLS and
                       transfers ran one at a time (<= 1.15 on average), and surge
                       doctor's pyopenssl-injected or gevent-partial-patch check fails
pool-too-small         a pool of known size with more callers wanting a connection at
                       once than it holds (requests in flight to its host; SQLAlchemy:
                       checked out and waiting), and connections discarded or waits
                       >= 5% of wall
tls-per-request        >= 10 TLS handshakes to one host, one per request (>= 80%),
                       whichever session made them (requests, httpx, aiohttp...),
                       counted past the connections the concurrency needed (P
                       requests in flight at most: >= 10 + P - 1 handshakes)
repeated-dns           one name resolved >= 10 times, the lookups >= 1% of wall time
n-plus-one             >= 5 statements of one shape (differing only in their values) in
                       a row from one caller, right after a different SELECT (in
                       Redis: a read of a collection, SMEMBERS, LRANGE, ...), their
                       values not all the same (not a poll),
                       time >= 50 ms in all and >= 5% of the wall time
blocked-loop           an asyncio loop's heartbeat ran >= 100 ms late (the loop ran
                       something else), >= 0.2 s and >= 10% of the wall time in all
fd-exhaustion          >= 1 call failed for want of a file descriptor (EMFILE: the
                       process's limit, ENFILE: the system's), with the limit and
                       the most descriptors seen open
=====================  ===============================================================
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from surge.watch.recorder import REPEATS, SHORT_CONNECTION

MIN_CONNECTS = 10
CONNECTS_PER_QUERY = 0.5
CONNECT_SHARE = 0.25
MIN_REQUESTS = 10
NETWORK_BOUND = 0.5
#: The concurrency serial-requests' expected gain assumes.
PARALLEL = 32
MIN_GAPS = 2
ISSUED_MEAN = 2.0
ACTIVE_MEAN = 1.15
#: surge doctor's checks that confirm serialised-https's cause.
SERIALISING_CHECKS = ("pyopenssl-injected", "gevent-partial-patch", "gevent-late-patch")
POOL_WAIT_SHARE = 0.05
MIN_HANDSHAKES = 10
HANDSHAKE_SHARE = 0.8
MIN_LOOKUPS = 10
DNS_SHARE = 0.01
#: n-plus-one: the repeated statements' time, at least (Sentry's N+1 detector: 5
#: repeats and 50 ms; each of a local database's queries is quicker than 50 ms,
#: so here the 50 ms is theirs together), and as a share of the wall time.
REPEATS_MIN_S = 0.05
REPEATS_SHARE = 0.05
#: blocked-loop: the time the loop was blocked, at least, and as a share of wall.
BLOCKED_MIN_S = 0.2
BLOCKED_SHARE = 0.1

IDS = (
    "connect-per-query",
    "serial-requests",
    "serial-pages",
    "serialised-https",
    "pool-too-small",
    "tls-per-request",
    "repeated-dns",
    "fd-exhaustion",
    "n-plus-one",
    "blocked-loop",
)


@dataclass(frozen=True)
class Finding:
    """One finding: ``id`` (one of :data:`IDS`), ``severity`` (``warn``),
    ``message`` (a sentence with the numbers), ``evidence`` (the numbers, by
    name), ``fix`` (what to change).  ``cost_s``: the time it cost the run, as
    far as it can be told (the order findings are listed in)."""

    id: str
    severity: str
    message: str
    evidence: dict[str, Any]
    fix: str
    cost_s: float = field(default=0.0, compare=False)
    #: the line to fix: where in the program's own code the calls were made
    #: (``file``, ``line``, ``function``, ``count``), the most calls first
    sites: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["cost_s"]
        return out


#: Call sites a finding lists at most.
SITES = 10


def _sites(*lists: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows' call sites (:func:`surge.watch.recorder.sites_list`) merged, the most
    calls first; the calls made from no frame of the program's come last."""
    counts: dict[tuple[Any, Any, Any], int] = {}
    for sites in lists:
        for site in sites or ():
            key = (site["file"], site["line"], site["function"])
            counts[key] = counts.get(key, 0) + site["count"]
    ranked = sorted(counts.items(), key=lambda item: (item[0][0] is None, -item[1]))
    return [
        {"file": file, "line": line, "function": function, "count": count}
        for (file, line, function), count in ranked[:SITES]
    ]


def site_label(site: dict[str, Any]) -> str:
    """A call site as the summary and the page show it: ``prog.py:12 in main``
    (the path relative to the working directory when under it)."""
    if site.get("file") is None:
        return "outside the program's own code"
    path = str(site["file"])
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(path)
        if not relative.startswith(".."):
            path = relative
    return f"{path}:{site['line']} in {site['function']}"


def _pct(part: float, whole: float) -> int:
    return round(100.0 * min(part / whole, 1.0)) if whole > 0 else 0


def _share(part: float, whole: float) -> float:
    """``part / whole`` as evidence states it: 0 to 1, three places."""
    return round(min(part / whole, 1.0), 3) if whole > 0 else 0.0


def _within(seconds: float, wall: float) -> float:
    """A union's seconds, never past the wall (rounding, a clock read late)."""
    return min(seconds, wall) if wall > 0 else seconds


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _shown_ms(ms: float | None) -> str:
    """Milliseconds as a message shows them: three significant digits."""
    return "?" if ms is None else f"{ms:.3g}"


def connect_per_query(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    out = []
    for peer, db in data["databases"].items():
        connects, queries = db["connects"], db["queries"]
        short = db.get("short_connections", 0)
        connecting = _within(db["connect_s"], wall)
        spent = _within(db["busy_s"], wall)  # connecting or querying
        # on the wire: connections that ran a query or a few (a SET per connection
        # does not hide it) and were then replaced by a new connect, counted per
        # connection whatever pool or driver made it; a pool's N connections, open
        # to the end, are not replaced however few queries each ran
        if short < MIN_CONNECTS or short < CONNECTS_PER_QUERY * connects:
            continue
        if spent <= 0 or connecting < CONNECT_SHARE * spent:
            continue
        evidence = {
            "database": peer,
            "library": ", ".join(db["libraries"]),
            "connects": connects,
            "queries": queries,
            "short_connections": short,
            "short_connection_statements": SHORT_CONNECTION,
            "connect_s": round(connecting, 3),
            "query_s": round(_within(db["query_s"], wall), 3),
            "connect_share_of_wall": _share(connecting, wall),
            "mean_connect_ms": _ms(db["connect_total_s"] / connects),
            "mean_query_ms": _ms(db["query_total_s"] / queries) if queries else None,
        }
        ms = {k: _shown_ms(v) for k, v in evidence.items() if k.endswith("_ms")}
        out.append(
            Finding(
                "connect-per-query",
                "warn",
                f"{connects:,} connects to the database at {peer} for {queries:,} queries"
                + (
                    f" ({short:,} connections ran {SHORT_CONNECTION} statements or fewer, "
                    "then a new one was opened)"
                )
                + ": "
                f"{_pct(connecting, wall)}% of the wall time ({connecting:.2f} s) "
                f"went to connecting (setup, TCP, TLS and login), {ms['mean_connect_ms']} ms "
                f"each, against {ms['mean_query_ms']} ms per query",
                evidence,
                "keep connections and reuse them: a pool (surge.db.pool(url), SQLAlchemy's "
                "QueuePool, psycopg_pool) opened once for the run, not a connect per query",
                connecting,
                _sites(db["connect_sites"]),
            )
        )
    return out


def _page_requests(data: dict[str, Any]) -> int:
    return sum(int(row["calls"]) for row in data["pages"].values() if row["pages"])


def serial_requests(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    http, issued = data["overlap"]["http"], data["overlap"]["issued"]
    requests = http["spans"]
    busy = _within(http["busy_s"], wall)
    if requests < MIN_REQUESTS or http["peak"] != 1 or issued["peak"] > 1:
        return []
    if wall <= 0 or busy < NETWORK_BOUND * wall:
        return []
    if _page_requests(data) * 2 > requests:
        return []  # pages of a listing: serial-pages says why
    hosts = data["hosts"]
    # one at a time (peak 1): the hosts' receiving never overlapped, so their sum is a union
    receive = min(busy, sum(row["receive_s"] for row in hosts.values()))
    idle = max(0.0, busy - receive)
    parallel = min(requests, PARALLEL)
    # the model: the time outside requests stays; the requests' time divides by the
    # concurrency (never more than the wall: busy <= wall)
    expected = (wall - busy) + busy / parallel
    evidence = {
        "requests": requests,
        "hosts": len(hosts),
        "peak_concurrency": 1,
        "network_s": round(busy, 3),
        "wall_s": round(wall, 3),
        "idle_share": round(idle / busy, 3) if busy > 0 else 0.0,
        "expected_s": round(expected, 3),
        "assumed_concurrency": parallel,
        "model": "wall - network_s + network_s / assumed_concurrency",
    }
    return [
        Finding(
            "serial-requests",
            "warn",
            f"{requests:,} HTTP requests to {len(hosts):,} hosts ran one at a time (peak "
            f"concurrency 1) for {_pct(busy, wall)}% of the wall time; the network was idle "
            f"{_pct(idle, busy)}% of it, waiting on DNS, handshakes and servers. "
            f"{parallel} at a time would take about {expected:.2f} s instead of {wall:.2f} s "
            f"({wall / expected if expected > 0 else 0:.0f}x)",
            evidence,
            _concurrently(issued.get("caller_kinds") or [], parallel),
            wall - expected,
            _sites(*(row["request_sites"] for row in hosts.values())),
        )
    ]


def _concurrently(kinds: list[str], parallel: int) -> str:
    """How to run the requests at once, in the program's own style: awaited one by
    one from coroutines, they want gather and a semaphore, not threads."""
    if kinds == ["task"]:
        return (
            f"run them concurrently: start the coroutines together with asyncio.gather "
            f"(or an asyncio.TaskGroup), bounded by an asyncio.Semaphore({parallel}) "
            "around each request, on one shared client session; or `surge fetch` / "
            "surge.fetch(urls)"
        )
    return (
        f"run them concurrently: `surge fetch` (or surge.fetch_all(urls, "
        f"concurrency={parallel})), or the same calls in a "
        "concurrent.futures.ThreadPoolExecutor with one requests.Session per thread"
    )


def serial_pages(data: dict[str, Any]) -> list[Finding]:
    out = []
    for operation, row in data["pages"].items():
        gaps, calls = row["gaps"], row["calls"]
        if gaps < MIN_GAPS or not calls:
            continue
        request = row["request_total_s"] / calls
        gap = row["gap_total_s"] / gaps
        if gap <= request:
            continue
        parse = row["parse_total_s"] / calls
        wall = data["wall_s"]
        gap_s = _within(row["gap_s"], wall)
        evidence = {
            "operation": operation,
            "pages": calls,
            "mean_request_ms": _ms(request),
            "mean_gap_ms": _ms(gap),
            "mean_parse_ms": _ms(parse),
            "gap_s": round(gap_s, 3),
            "request_s": round(_within(row["request_s"], wall), 3),
        }
        ms = {k: _shown_ms(v) for k, v in evidence.items() if k.endswith("_ms")}
        out.append(
            Finding(
                "serial-pages",
                "warn",
                f"{calls:,} pages of {operation} were fetched one after another, and between "
                f"a page's response and the next page's request {ms['mean_gap_ms']} ms "
                f"went by on average (parsing: {ms['mean_parse_ms']} ms), more than the "
                f"request itself ({ms['mean_request_ms']} ms)",
                evidence,
                "request the next page while this one is parsed: `surge s3 ls` / "
                "surge.s3's listing (pipelined pages, prefixes listed in parallel), or list "
                "separate prefixes concurrently",
                gap_s,
                _sites(row["sites"]),
            )
        )
    return out


def serialised_https(data: dict[str, Any]) -> list[Finding]:
    issued, active = data["overlap"]["issued"], data["overlap"]["active"]
    if issued["spans"] < 4 or issued["mean_open"] < ISSUED_MEAN:
        return []
    if active["spans"] < 4 or active["mean_open"] > ACTIVE_MEAN:
        return []
    causes = [
        d for d in data["doctor"] if d.get("id") in SERIALISING_CHECKS and d.get("status") == "fail"
    ]
    if not causes:
        return []
    kinds = issued.get("caller_kinds") or []
    evidence = {
        "requests": issued["spans"],
        "callers": issued.get("callers"),
        "issued_mean_in_flight": issued["mean_open"],
        "issued_peak": issued["peak"],
        "active_mean": active["mean_open"],
        "active_s": active["busy_s"],
        "doctor": [{"id": d["id"], "message": d["message"]} for d in causes],
    }
    return [
        Finding(
            "serialised-https",
            "warn",
            f"{issued['spans']:,} requests were issued concurrently from "
            f"{issued.get('callers')} {' and '.join(k + 's' for k in kinds) or 'callers'} "
            f"({issued['mean_open']} in flight on "
            f"average, {issued['peak']} at most), yet their TLS handshakes and transfers ran "
            f"one at a time ({active['mean_open']} active on average). surge doctor says why: "
            + causes[0]["message"],
            evidence,
            causes[0].get("fix")
            or "remove pyOpenSSL's injection into urllib3 and let gevent patch everything",
            active["busy_s"] * (1.0 - 1.0 / max(issued["mean_open"], 1.0)),
            _sites(*(row["request_sites"] for row in data["hosts"].values())),
        )
    ]


def pool_too_small(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    out = []
    for peer, row in data["hosts"].items():
        size, peak = row["pool_size"], row["peak_in_flight"]
        discards, waits = row["pool_discards"], row["pool_waits"]
        wait_s = _within(row["pool_wait_s"], wall)
        waited = wall > 0 and wait_s >= POOL_WAIT_SHARE * wall
        if not (discards or waited):
            continue
        if size is not None and peak <= size:
            continue
        enough = max(peak, (size or 0) + 1)
        evidence = {
            "host": peer,
            "pool_size": size,
            "peak_in_flight": peak,
            "discarded_connections": discards,
            "waits": waits,
            "wait_s": round(wait_s, 3),
            "enough": enough,
        }
        parts = []
        if discards:
            parts.append(
                f"{discards:,} connections were opened and then thrown away "
                "('Connection pool is full, discarding connection')"
            )
        if waited:
            parts.append(f"callers waited {wait_s:.2f} s for a connection ({waits:,} waits)")
        held = f"holds {size}" if size is not None else "is limited"
        out.append(
            Finding(
                "pool-too-small",
                "warn",
                f"the connection pool for {peer} {held} but {peak} callers wanted a connection "
                f"at once: {'; '.join(parts)}. A pool of {enough} would have been enough",
                evidence,
                f"size the pool for the concurrency: urllib3.PoolManager(maxsize={enough}), "
                f"requests.adapters.HTTPAdapter(pool_maxsize={enough}), botocore "
                f"Config(max_pool_connections={enough}), SQLAlchemy create_engine(pool_size="
                f"{enough}), aiohttp TCPConnector(limit=...)",
                _within(
                    wait_s
                    + (row["connect_s"] + row["tls_s"]) * (discards / max(row["requests"], 1)),
                    wall,
                ),
                _sites(row["pool_wait_sites"] if waited else row["request_sites"]),
            )
        )
    return out


def tls_per_request(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    out = []
    for peer, row in data["hosts"].items():
        handshakes, requests = row["tls"], row["requests"]
        # a connection per request, counted past what the concurrency needed: N
        # requests at once on one session open N connections, each kept (as a
        # pool's N database connections are not connect-per-query)
        needed = max(int(row.get("peak_in_flight") or 0), 1)
        if handshakes - (needed - 1) < MIN_HANDSHAKES or handshakes < HANDSHAKE_SHARE * requests:
            continue
        tls_s, time_s = _within(row["tls_s"], wall), _within(row["time_s"], wall)
        # a new connection's cost is its TCP connect and its handshake (aiohttp
        # times them as one span, the connect's)
        setup_s = _within(row["connect_s"] + row["tls_s"], time_s)
        evidence = {
            "host": peer,
            "requests": requests,
            "handshakes": handshakes,
            "connects": row["connects"],
            "peak_in_flight": row.get("peak_in_flight"),
            "tls_s": round(tls_s, 3),
            "setup_s": round(setup_s, 3),
            "mean_handshake_ms": _ms(row["tls_total_s"] / handshakes),
            "mean_setup_ms": _ms((row["connect_total_s"] + row["tls_total_s"]) / handshakes),
            "share_of_request_time": _share(setup_s, time_s),
        }
        ms = {k: _shown_ms(v) for k, v in evidence.items() if k.endswith("_ms")}
        out.append(
            Finding(
                "tls-per-request",
                "warn",
                f"{handshakes:,} TLS handshakes to {peer} for {requests:,} requests: a new "
                f"connection per request, {ms['mean_setup_ms']} ms to connect and shake hands "
                f"each ({_pct(setup_s, time_s)}% of the time requests to it were open)",
                evidence,
                "reuse connections: one session for the whole run, made once and shared, not "
                "one per request (requests.Session, urllib3.PoolManager, httpx.Client / "
                "AsyncClient, aiohttp.ClientSession, a boto3 client)",
                _within(row["tls_s"] + row["connect_s"], wall),
                _sites(row["tls_sites"]),
            )
        )
    return out


def repeated_dns(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    out = []
    for name, row in data["names"].items():
        lookups, spent = row["lookups"], _within(row["time_s"], wall)
        if lookups < MIN_LOOKUPS or wall <= 0 or spent < DNS_SHARE * wall:
            continue
        evidence = {
            "name": name,
            "lookups": lookups,
            "dns_s": round(spent, 3),
            "mean_lookup_ms": _ms(row["time_total_s"] / lookups),
            "share_of_wall": _share(spent, wall),
        }
        out.append(
            Finding(
                "repeated-dns",
                "warn",
                f"{name} was resolved {lookups:,} times ({spent:.2f} s, "
                f"{_pct(spent, wall)}% of the wall time): once would have done",
                evidence,
                "reuse connections (a Session) so that a name is resolved once per "
                "connection, or cache lookups (surge's resolver caches; or a local caching "
                "resolver)",
                spent * (lookups - 1) / lookups,
                _sites(row["sites"]),
            )
        )
    return out


def fd_exhaustion(data: dict[str, Any]) -> list[Finding]:
    descriptors = data.get("descriptors") or {}
    failed = descriptors.get("exhausted", 0)
    if failed < 1:
        return []
    limit, peak, sockets = (
        descriptors.get("limit"),
        descriptors.get("peak_open", 0),
        descriptors.get("peak_sockets", 0),
    )
    names = "/".join(descriptors.get("errnos") or ["EMFILE"])
    evidence = {
        "failed_calls": failed,
        "errno": names,
        "limit": limit,
        "peak_open": peak,
        "peak_sockets": sockets,
    }
    against = f"its limit of {limit:,} (ulimit -n)" if limit is not None else "its limit"
    system = names == "ENFILE"
    return [
        Finding(
            "fd-exhaustion",
            "warn",
            f"{failed:,} calls failed with {names} (too many open files"
            + (" in the system" if system else "")
            + f"): the process had {peak:,} descriptors open against {against}, "
            f"{sockets:,} of them sockets",
            evidence,
            "close what is opened (responses, sessions, cursors, files: `with` blocks; "
            "stream=True responses read or closed), reuse connections through one pool or "
            "session sized below the limit, and bound concurrency below it (a Semaphore, "
            "a pool's size); raise the limit (ulimit -n, resource.setrlimit) only if the "
            "program truly needs that many at once",
            float(data["wall_s"]),  # failed calls outrank slow ones
            _sites(descriptors.get("sites") or []),
        )
    ]


def n_plus_one(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    out = []
    for row in data.get("repeats") or ():
        spent = _within(row["time_s"], wall)
        if row["calls"] < REPEATS or spent < REPEATS_MIN_S or spent < REPEATS_SHARE * wall:
            continue
        calls, what, source = row["calls"], row["what"], row["source"]
        evidence = {
            "database": row["database"],
            "statement": what,
            "after": source,
            "calls": calls,
            "runs": row["runs"],
            "longest_run": row["longest"],
            "time_s": round(spent, 3),
            "share_of_wall": _share(spent, wall),
            "mean_ms": _ms(row["time_total_s"] / calls),
            "min_repeats": REPEATS,
        }
        redis = row.get("library") == "redis"
        out.append(
            Finding(
                "n-plus-one",
                "warn",
                f"{calls:,} {what} "
                + ("commands to Redis" if redis else "statements to the database")
                + f" at {row['database']} ran one "
                f"after another, differing only in their values, in {row['runs']:,} "
                f"run{'s' if row['runs'] != 1 else ''} (the longest {row['longest']:,}) after "
                f"a {source}: a "
                + ("command per member" if redis else "query per row")
                + f" of the one before (N+1). They took {_pct(spent, wall)}% of the wall time "
                f"({spent:.2f} s), {_shown_ms(evidence['mean_ms'])} ms each",
                evidence,
                (
                    "fetch them in one round trip: MGET / HMGET with the keys the first "
                    "command returned, or a pipeline (redis-py: "
                    "client.pipeline(transaction=False)), which sends every command at once"
                )
                if redis
                else "fetch the rows in one statement: a JOIN, or WHERE id IN (...) / = ANY(%s) "
                "with the ids the first query returned; with an ORM, load them eagerly "
                "(SQLAlchemy selectinload / joinedload, Django select_related / "
                "prefetch_related)",
                spent,
                _sites(row["sites"]),
            )
        )
    return out


def blocked_loop(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    blocked = data.get("blocked") or {}
    count = blocked.get("count", 0)
    spent = _within(blocked.get("time_s", 0.0), wall)
    if not count or spent < BLOCKED_MIN_S or spent < BLOCKED_SHARE * wall:
        return []
    evidence = {
        "blocks": count,
        "blocked_s": round(spent, 3),
        "share_of_wall": _share(spent, wall),
        "longest_ms": _ms(blocked["longest_s"]),
        "mean_ms": _ms(blocked["time_total_s"] / count),
        "threshold_ms": 100,
    }
    return [
        Finding(
            "blocked-loop",
            "warn",
            f"the asyncio event loop was blocked {count:,} times for 100 ms or more, "
            f"running one thing while nothing else moved ({_pct(spent, wall)}% of the wall "
            f"time, {spent:.2f} s; the "
            f"longest {_shown_ms(evidence['longest_ms'])} ms): no other task's request, "
            "timer or I/O advanced then",
            evidence,
            "take the work off the loop: await asyncio.to_thread(f, ...) or "
            "loop.run_in_executor(...) for blocking calls (a ProcessPoolExecutor for CPU "
            "work), or use an async client instead of a blocking one",
            spent,
            _sites(blocked.get("sites") or []),
        )
    ]


RULES: tuple[Callable[[dict[str, Any]], list[Finding]], ...] = (
    connect_per_query,
    serial_requests,
    serial_pages,
    serialised_https,
    pool_too_small,
    tls_per_request,
    repeated_dns,
    fd_exhaustion,
    n_plus_one,
    blocked_loop,
)


def analyse(data: dict[str, Any]) -> list[Finding]:
    """Every rule's findings for one recording's data, the costliest first."""
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(data))
    return sorted(found, key=lambda f: -f.cost_s)
