"""Benchmark surge.db's pool against connecting per query, one reused connection,
and the pools people use today, on real MariaDB and PostgreSQL servers.

Run it from the repository root::

    python benchmarks/db.py              # both servers, ~1-2 minutes
    python benchmarks/db.py --quick      # fewer queries: a smoke run
    python benchmarks/db.py --only postgresql --queries 5000

The servers are started by ``surge.testing`` (the tests' fixtures module) from
the Debian packages, on 127.0.0.1, in temporary directories.  One "query" is
what a request handler does: check a connection out, run ``SELECT 1`` through a
cursor, fetch the row, give the connection back.  Each approach runs the same
loop in the same process, single-threaded, interleaved round by round; the
fastest of ``--repeat`` rounds is kept (noise only ever adds time).  The
``x reused`` column divides by the one-reused-connection time of the same run.

Connection mode: autocommit on for every approach, on both servers.  With
autocommit off a read opens a transaction (InnoDB: a snapshot; psycopg: a BEGIN)
that every pool must roll back before the next user - two round trips on
MariaDB, three on PostgreSQL, whatever the pool; the ``surge.db.pool,
autocommit off`` row shows that cost (MariaDB only).

The approaches
--------------
``connect per query``     connect, query, close (PyMySQL with ``ssl_disabled=True``;
                          psycopg over TCP, trust authentication)
``connect per query, PyMySQL defaults``  the same with PyMySQL's default
                          "preferred" TLS, which builds an SSLContext per connect
``one reused connection`` the floor: the query on one connection kept open
``surge.db.pool``         ``with pool.connection() as conn`` (defaults)
``surge.db.pool, autocommit off``  the same with the DB-API's default mode
``surge.db.sqlalchemy engine``  ``with engine.connect() as c: c.execute(text(...))``
``SQLAlchemy engine (QueuePool)``  the same on ``sqlalchemy.create_engine`` defaults
``SQLAlchemy engine, pool_pre_ping``  the same with ``pool_pre_ping=True``
``SQLAlchemy QueuePool``  ``pool.connect()`` / ``close()`` on the raw pool, defaults
                          (``reset_on_return="rollback"``)
``psycopg_pool``          ``with pool.connection() as conn`` (defaults: no check)
``psycopg_pool check``    the same with ``check=ConnectionPool.check_connection``
``DBUtils PooledDB``      ``pool.connection()`` / ``close()``, defaults (ping when
                          fetched, rollback on return)

MariaDB also reports the round trips each approach cost per query, counted on
the server (``SHOW GLOBAL STATUS``: Questions + Com_admin_commands, which counts
COM_PING; logins not included).  Results go to ``benchmarks/results/db.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from time import perf_counter, process_time
from typing import Any

from _common import Table, gc_paused, machine_info, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "db.json"
BACKENDS = ("mariadb", "postgresql")
#: Approaches that pool connections: the target is that surge is below all of them.
PEER_POOLS = (
    "SQLAlchemy engine (QueuePool)",
    "SQLAlchemy engine, pool_pre_ping",
    "SQLAlchemy QueuePool",
    "psycopg_pool",
    "psycopg_pool check",
    "DBUtils PooledDB",
)
TARGET_RATIO = 1.4  # surge's pooled query within this factor of a reused connection

Step = Callable[[], None]


def select_one(conn: Any) -> None:
    cur = conn.cursor()
    cur.execute("SELECT 1")
    cur.fetchall()
    cur.close()


class Approach:
    """One way to run a query: ``step()`` runs one; ``close()`` frees what it holds."""

    def __init__(self, name: str, step: Step, close: Callable[[], object], slow: bool = False):
        self.name = name
        self.step = step
        self.close = close
        #: Connects per query: measured on fewer queries (each costs milliseconds).
        self.slow = slow


def approaches(server: Any, warm: int) -> list[Approach]:
    import surge.db
    import surge.db.sqlalchemy

    out: list[Approach] = []
    kind = server.kind
    if kind == "mariadb":
        import pymysql

        params = dict(
            host=server.host,
            port=server.port,
            user=server.user,
            password=server.password,
            database=server.database,
        )

        def connect() -> Any:
            return pymysql.connect(**params, ssl_disabled=True, autocommit=True)

        def connect_default_tls() -> Any:
            return pymysql.connect(**params, autocommit=True)

        dbapi: Any = pymysql
        dbapi_kwargs: dict[str, Any] = {**params, "ssl_disabled": True, "autocommit": True}
        surge_options: dict[str, Any] = {"autocommit": True}
        sa_url = "mysql+pymysql" + server.url[server.url.index("://") :]
        sa_connect_args: dict[str, Any] = {"ssl_disabled": True, "autocommit": True}
    else:
        import psycopg

        def connect() -> Any:
            return psycopg.connect(server.url, autocommit=True)

        connect_default_tls = None  # type: ignore[assignment]
        dbapi = psycopg
        dbapi_kwargs = {"conninfo": server.url, "autocommit": True}
        surge_options = {"autocommit": True}
        sa_url = "postgresql+psycopg" + server.url[server.url.index("://") :]
        sa_connect_args = {"autocommit": True}

    def per_query(make: Callable[[], Any]) -> Step:
        def step() -> None:
            conn = make()
            select_one(conn)
            conn.close()

        return step

    out.append(Approach("connect per query", per_query(connect), lambda: None, slow=True))
    if connect_default_tls is not None:
        out.append(
            Approach(
                "connect per query, PyMySQL defaults",
                per_query(connect_default_tls),
                lambda: None,
                slow=True,
            )
        )

    reused = connect()
    out.append(Approach("one reused connection", lambda: select_one(reused), reused.close))

    pool = surge.db.pool(server.url, max_size=4, **surge_options)

    def surge_step() -> None:
        with pool.connection() as conn:
            select_one(conn)

    out.append(Approach("surge.db.pool", surge_step, pool.close))
    if kind == "mariadb":
        pool_off = surge.db.pool(server.url, max_size=4)

        def surge_off_step() -> None:
            with pool_off.connection() as conn:
                select_one(conn)

        out.append(Approach("surge.db.pool, autocommit off", surge_off_step, pool_off.close))

    from sqlalchemy import create_engine, text
    from sqlalchemy import pool as sa_pool

    query = text("SELECT 1")

    def engine_step(engine: Any) -> Step:
        def step() -> None:
            with engine.connect() as c:
                c.execute(query).fetchall()

        return step

    surge_engine = surge.db.sqlalchemy.create_engine(
        server.url, pool_options={"max_size": 4, **surge_options}
    )
    out.append(
        Approach("surge.db.sqlalchemy engine", engine_step(surge_engine), surge_engine.dispose)
    )
    for name, pre_ping in (
        ("SQLAlchemy engine (QueuePool)", False),
        ("SQLAlchemy engine, pool_pre_ping", True),
    ):
        sa_engine = create_engine(
            sa_url, pool_size=4, pool_pre_ping=pre_ping, connect_args=sa_connect_args
        )
        out.append(Approach(name, engine_step(sa_engine), sa_engine.dispose))

    qp = sa_pool.QueuePool(connect, pool_size=4)

    def qp_step() -> None:
        fairy = qp.connect()
        select_one(fairy)
        fairy.close()

    out.append(Approach("SQLAlchemy QueuePool", qp_step, qp.dispose))

    if kind == "postgresql":
        from psycopg_pool import ConnectionPool

        for name, check in (
            ("psycopg_pool", None),
            ("psycopg_pool check", ConnectionPool.check_connection),
        ):
            pp = ConnectionPool(
                server.url,
                min_size=1,
                max_size=4,
                kwargs={"autocommit": True},
                check=check,
                open=True,
            )
            pp.wait()

            def pp_step(pp: Any = pp) -> None:
                with pp.connection() as conn:
                    select_one(conn)

            out.append(Approach(name, pp_step, pp.close))

    from dbutils.pooled_db import PooledDB

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "mariadb":
            pdb = PooledDB(dbapi, maxconnections=4, **dbapi_kwargs)
        else:
            pdb = PooledDB(dbapi.connect, maxconnections=4, **dbapi_kwargs)

    def pdb_step() -> None:
        conn = pdb.connection()
        select_one(conn)
        conn.close()

    out.append(Approach("DBUtils PooledDB", pdb_step, pdb.close))

    for a in out:  # warm: connections open, statements prepared, code paths hot
        for _ in range(3 if a.slow else warm):
            a.step()
    return out


class RoundTrips:
    """MariaDB's own count of client commands (statements + pings)."""

    def __init__(self, server: Any) -> None:
        self.admin = server.connect(admin=True, autocommit=True)

    def read(self) -> int:
        cur = self.admin.cursor()
        cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_admin_commands')")
        return sum(int(v) for _, v in cur.fetchall())

    def per_query(self, step: Step, n: int) -> float:
        before = self.read()
        for _ in range(n):
            step()
        return (self.read() - before - 1) / n  # the second SHOW counts itself


def measure(server: Any, queries: int, slow_queries: int, repeat: int) -> dict[str, Any]:
    every = approaches(server, warm=min(200, queries // 10))
    best: dict[str, dict[str, float]] = {}
    try:
        for _ in range(repeat):
            for a in every:
                n = slow_queries if a.slow else queries
                with gc_paused():
                    cpu0, t0 = process_time(), perf_counter()
                    for _ in range(n):
                        a.step()
                    wall, cpu = perf_counter() - t0, process_time() - cpu0
                b = best.setdefault(a.name, {"wall_us": float("inf"), "cpu_us": float("inf")})
                b["wall_us"] = min(b["wall_us"], wall / n * 1e6)
                b["cpu_us"] = min(b["cpu_us"], cpu / n * 1e6)
                b["queries"] = n
        if server.kind == "mariadb":
            counter = RoundTrips(server)
            for a in every:
                best[a.name]["round_trips"] = counter.per_query(a.step, 5 if a.slow else 100)
            counter.admin.close()
    finally:
        for a in every:
            a.close()
    floor = best["one reused connection"]["wall_us"]
    for b in best.values():
        b["x_reused"] = b["wall_us"] / floor
    return best


def report(kind: str, best: dict[str, Any]) -> list[str]:
    table = Table(
        f"{kind}: per query (check out, SELECT 1, fetch, return), best of the rounds",
        ["approach", "wall", "x reused", "client CPU", "round trips"],
    )
    for name, b in best.items():
        trips = b.get("round_trips")
        table.add(
            name,
            f"{b['wall_us']:,.0f} us",
            f"{b['x_reused']:.2f}x",
            f"{b['cpu_us']:,.0f} us",
            "-" if trips is None else f"{trips:.2f}",
        )
    table.print()
    lines = []
    surge_x = best["surge.db.pool"]["x_reused"]
    ok = surge_x <= TARGET_RATIO
    lines.append(
        f"{'PASS' if ok else 'MISS'} {kind}: surge.db.pool {surge_x:.2f}x a reused connection "
        f"(target <= {TARGET_RATIO}x)"
    )
    peers = {n: best[n]["wall_us"] for n in PEER_POOLS if n in best}
    slower = [n for n, us in peers.items() if us <= best["surge.db.pool"]["wall_us"]]
    lines.append(
        f"{'PASS' if not slower else 'MISS'} {kind}: surge.db.pool below every peer pool"
        + (f" (not below: {', '.join(slower)})" if slower else "")
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer queries: a smoke run")
    parser.add_argument("--only", choices=BACKENDS, help="one backend")
    parser.add_argument("--queries", type=int, help="queries per round (pooled approaches)")
    parser.add_argument("--connects", type=int, help="queries per round, connect per query")
    parser.add_argument("--repeat", type=int, help="rounds (best kept)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results path")
    args = parser.parse_args(argv)
    queries = args.queries or (300 if args.quick else 2000)
    connects = args.connects or (10 if args.quick else 50)
    repeat = args.repeat or (2 if args.quick else 3)

    import surge.testing

    packages = ["surge", "pymysql", "psycopg", "sqlalchemy", "psycopg-pool", "dbutils"]
    info = machine_info(packages)
    print(
        f"surge.db benchmark -- {info['cpu_model']}, {info['cpu_count']} cores, "
        f"load {info['load_average']}, Python {info['python']}\n",
        flush=True,
    )
    started = perf_counter()
    results: dict[str, Any] = {}
    targets: list[str] = []
    servers = {"mariadb": surge.testing.mariadb, "postgresql": surge.testing.postgresql}
    for kind in BACKENDS:
        if args.only and kind != args.only:
            continue
        t0 = time.monotonic()
        with servers[kind]() as server:
            print(f"{kind} started in {time.monotonic() - t0:.1f} s", file=sys.stderr)
            version = server.connect(admin=True).get_server_info() if kind == "mariadb" else None
            best = measure(server, queries, connects, repeat)
        results[kind] = {"server_version": version, "approaches": best}
        targets += report(kind, best)
    print("targets")
    for line in targets:
        print("  " + line)
    payload = {
        "benchmark": "db",
        "machine": info,
        "load_average_after": list(os.getloadavg()),
        "settings": {"queries": queries, "connects": connects, "repeat": repeat},
        "results": results,
        "targets": targets,
        "elapsed_s": perf_counter() - started,
    }
    path = write_json(args.out, payload)
    print(f"\nwrote {path} in {perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
