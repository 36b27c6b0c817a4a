"""What went wrong, with the numbers that show it, and the fix.

Each rule reads a recording's data (:meth:`Recorder.data`: totals that count
every operation of the run, however long) and returns findings only when its
evidence is there: a threshold of count *and* of cost, so that a program that
did a thing twice, or whose thing cost nothing, is not told about it.  The ids
are fixed (scripts match on them):

=====================  ===============================================================
id                     raised when
=====================  ===============================================================
connect-per-query      >= 10 connects to one database, at least one per two queries,
                       and connecting >= 25% of the time spent with that database
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
tls-per-request        >= 10 TLS handshakes to one host, one per request (>= 80%)
repeated-dns           one name resolved >= 10 times, the lookups >= 1% of wall time
=====================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

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

IDS = (
    "connect-per-query",
    "serial-requests",
    "serial-pages",
    "serialised-https",
    "pool-too-small",
    "tls-per-request",
    "repeated-dns",
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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["cost_s"]
        return out


def _pct(part: float, whole: float) -> int:
    return round(100.0 * part / whole) if whole > 0 else 0


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
        spent = db["connect_s"] + db["query_s"]
        if connects < MIN_CONNECTS or connects < CONNECTS_PER_QUERY * queries:
            continue
        if spent <= 0 or db["connect_s"] < CONNECT_SHARE * spent:
            continue
        evidence = {
            "database": peer,
            "library": ", ".join(db["libraries"]),
            "connects": connects,
            "queries": queries,
            "connect_s": round(db["connect_s"], 3),
            "query_s": round(db["query_s"], 3),
            "connect_share_of_wall": round(db["connect_s"] / wall, 3) if wall > 0 else 0.0,
            "mean_connect_ms": _ms(db["connect_s"] / connects),
            "mean_query_ms": _ms(db["query_s"] / queries) if queries else None,
        }
        ms = {k: _shown_ms(v) for k, v in evidence.items() if k.endswith("_ms")}
        out.append(
            Finding(
                "connect-per-query",
                "warn",
                f"{connects:,} connects to the database at {peer} for {queries:,} queries: "
                f"{_pct(db['connect_s'], wall)}% of the wall time ({db['connect_s']:.2f} s) "
                f"went to connecting (setup, TCP, TLS and login), {ms['mean_connect_ms']} ms "
                f"each, against {ms['mean_query_ms']} ms per query",
                evidence,
                "keep connections and reuse them: a pool (surge.db.pool(url), SQLAlchemy's "
                "QueuePool, psycopg_pool) opened once for the run, not a connect per query",
                db["connect_s"],
            )
        )
    return out


def _page_requests(data: dict[str, Any]) -> int:
    return sum(int(row["calls"]) for row in data["pages"].values() if row["pages"])


def serial_requests(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    http, issued = data["overlap"]["http"], data["overlap"]["issued"]
    requests = http["spans"]
    busy = http["busy_s"]
    if requests < MIN_REQUESTS or http["peak"] != 1 or issued["peak"] > 1:
        return []
    if wall <= 0 or busy < NETWORK_BOUND * wall:
        return []
    if _page_requests(data) * 2 > requests:
        return []  # pages of a listing: serial-pages says why
    hosts = data["hosts"]
    receive = sum(row["receive_s"] for row in hosts.values())
    idle = max(0.0, busy - receive)
    parallel = min(requests, PARALLEL)
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
            f"run them concurrently: `surge fetch` (or surge.fetch_all(urls, "
            f"concurrency={parallel})), or the same calls in a "
            "concurrent.futures.ThreadPoolExecutor with one requests.Session per thread",
            wall - expected,
        )
    ]


def serial_pages(data: dict[str, Any]) -> list[Finding]:
    out = []
    for operation, row in data["pages"].items():
        gaps, calls = row["gaps"], row["calls"]
        if gaps < MIN_GAPS or not calls:
            continue
        request = row["request_s"] / calls
        gap = row["gap_s"] / gaps
        if gap <= request:
            continue
        parse = row["parse_s"] / calls
        evidence = {
            "operation": operation,
            "pages": calls,
            "mean_request_ms": _ms(request),
            "mean_gap_ms": _ms(gap),
            "mean_parse_ms": _ms(parse),
            "gap_s": round(row["gap_s"], 3),
            "request_s": round(row["request_s"], 3),
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
                row["gap_s"],
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
        )
    ]


def pool_too_small(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    out = []
    for peer, row in data["hosts"].items():
        size, peak = row["pool_size"], row["peak_in_flight"]
        discards, waits, wait_s = row["pool_discards"], row["pool_waits"], row["pool_wait_s"]
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
                wait_s + (row["connect_s"] + row["tls_s"]) * (discards / max(row["requests"], 1)),
            )
        )
    return out


def tls_per_request(data: dict[str, Any]) -> list[Finding]:
    out = []
    for peer, row in data["hosts"].items():
        handshakes, requests = row["tls"], row["requests"]
        if handshakes < MIN_HANDSHAKES or handshakes < HANDSHAKE_SHARE * requests:
            continue
        evidence = {
            "host": peer,
            "requests": requests,
            "handshakes": handshakes,
            "tls_s": round(row["tls_s"], 3),
            "mean_handshake_ms": _ms(row["tls_s"] / handshakes),
            "share_of_request_time": round(row["tls_s"] / row["time_s"], 3)
            if row["time_s"] > 0
            else 0.0,
        }
        ms = {k: _shown_ms(v) for k, v in evidence.items() if k.endswith("_ms")}
        out.append(
            Finding(
                "tls-per-request",
                "warn",
                f"{handshakes:,} TLS handshakes to {peer} for {requests:,} requests: a new "
                f"connection per request, {ms['mean_handshake_ms']} ms of handshake "
                f"each ({_pct(row['tls_s'], row['time_s'])}% of those requests' time)",
                evidence,
                "reuse connections: one requests.Session (or urllib3.PoolManager, "
                "httpx.Client, boto3 client) for the whole run instead of one per request",
                row["tls_s"] + row["connect_s"],
            )
        )
    return out


def repeated_dns(data: dict[str, Any]) -> list[Finding]:
    wall = data["wall_s"]
    out = []
    for name, row in data["names"].items():
        lookups, spent = row["lookups"], row["time_s"]
        if lookups < MIN_LOOKUPS or wall <= 0 or spent < DNS_SHARE * wall:
            continue
        evidence = {
            "name": name,
            "lookups": lookups,
            "dns_s": round(spent, 3),
            "mean_lookup_ms": _ms(spent / lookups),
            "share_of_wall": round(spent / wall, 3),
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
            )
        )
    return out


RULES: tuple[Callable[[dict[str, Any]], list[Finding]], ...] = (
    connect_per_query,
    serial_requests,
    serial_pages,
    serialised_https,
    pool_too_small,
    tls_per_request,
    repeated_dns,
)


def analyse(data: dict[str, Any]) -> list[Finding]:
    """Every rule's findings for one recording's data, the costliest first."""
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(data))
    return sorted(found, key=lambda f: -f.cost_s)
