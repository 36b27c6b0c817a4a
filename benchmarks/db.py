"""Benchmark surge.db's pool - every checkout a fresh session - against one reused
connection, against the floor that a reset on every checkout sets, and against
the pools people use today, on real MariaDB and PostgreSQL servers.

Run it from the repository root::

    python benchmarks/db.py              # both servers, both modes, ~3 minutes
    python benchmarks/db.py --quick      # fewer queries: a smoke run
    python benchmarks/db.py --only mariadb --queries 5000 --repeat 7

The servers are started by ``surge.testing`` from the Debian packages, on
127.0.0.1, in temporary directories; pgbouncer (Debian's package) is started by
the benchmark in front of PostgreSQL.  One "query" is what a request handler
does: check a connection out, run the query through a cursor, fetch the rows,
give the connection back.  Each approach runs the same loop in the same process,
single-threaded, interleaved round by round; the median of ``--repeat`` rounds is
reported (and the best).  Two queries: the 2013 write-up's ``select host from
mysql.user where user='root'`` (PostgreSQL: the same lookup in ``pg_roles``) and
``SELECT 1``.  Two modes: autocommit off (the DB-API's default) and on.

The approaches, and what each leaves of one user's session to the next
------------------------------------------------------------------------
``one reused connection``   the query on one connection kept open; with autocommit
                            off, then ``rollback()``, as a program that reads fresh
                            data each time must.  Leaves everything.
``reset floor``             the same connection, the query, and the reset surge
                            sends (MySQL: COM_RESET_CONNECTION [+ SET] written in
                            front of the next query, in its send; PostgreSQL:
                            ROLLBACK if open + DISCARD ALL, pipelined after the
                            query and read back before the next), by the driver's
                            own calls: what a checkout must cost at least when
                            every checkout is a fresh session, on this machine.
``surge.db.pool``           ``with pool.connection() as conn`` (defaults: reset
                            "session").  Leaves nothing (tests/db/test_session_reset.py).
``surge.db.pool, reset none``  the documented opt-out.  Rolls back; leaves the rest.
``SQLAlchemy QueuePool``    ``pool.connect()``/``close()``, defaults
                            (``reset_on_return="rollback"``).  Rolls back; leaves the rest.
``psycopg_pool + DISCARD ALL``  ``ConnectionPool(reset=...)`` running DISCARD ALL on
                            return (psycopg_pool's documented way).  Leaves nothing.
``pgbouncer session, DISCARD ALL``  a client login to pgbouncer per checkout
                            (``pool_mode=session``, ``server_reset_query=DISCARD
                            ALL``: pgbouncer's default).  Leaves nothing.
``surge.db.pool, prepare_threshold=0``  psycopg prepares every statement; the
                            reset keeps psycopg's own (docs/db.md).  Leaves nothing
                            else.
``same, re-prepared each checkout``  the same pool with psycopg's cache dropped at
                            each return: the reset is DISCARD ALL, as before #45,
                            and each checkout prepares the query again - the cost
                            the kept statements save.
``same, 5 statements ...``   the two above with five distinct statements a
                            checkout (the query with a comment 0-4): the time is
                            a checkout's, not a query's.

For asyncio on PostgreSQL (``--asyncio-only`` runs just these), the same loop
awaited, ``fetch`` of the query, autocommit (asyncpg has no other mode):
``asyncpg, one reused connection`` (leaves everything), the same with surge's
asyncpg reset awaited after each query (keeps asyncpg's statement cache) and
with ``DISCARD ALL`` instead (asyncpg re-prepares the query every time: the
cost the kept cache saves), ``asyncpg.create_pool``
(its reset: advisory unlock, CLOSE ALL, UNLISTEN, RESET ALL; leaves SET ROLE,
PREPARE, temporary tables and more), ``surge.db.async_pool, asyncpg`` (leaves
nothing but asyncpg's statement cache), and psycopg's AsyncConnection reused and
through ``surge.db.async_pool``.

The target: ``surge.db.pool`` at most 1.05x ``one reused connection``, or - where
the reset itself costs more than that on this machine - within 10% of the
``reset floor`` measured in the same run.  Results go to
``benchmarks/results/db.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter, process_time
from typing import Any

from _common import Table, gc_paused, machine_info, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "db.json"
BACKENDS = ("mariadb", "postgresql")
TARGET_RATIO = 1.05  # surge's checkout+query+return against a reused connection
FLOOR_SLACK = 1.10  # or within 10% of the reset floor measured in the same run
QUERIES = {
    "mariadb": {
        "write-up": "select host from mysql.user where user='root'",
        "SELECT 1": "SELECT 1",
    },
    "postgresql": {
        "write-up": "select rolname from pg_roles where rolname='postgres'",
        "SELECT 1": "SELECT 1",
    },
}

Step = Callable[[], None]


class Approach:
    """One way to run a query: ``step()`` runs one; ``close()`` frees what it holds."""

    def __init__(self, name: str, leaves: str, step: Step, close: Callable[[], object]) -> None:
        self.name = name
        self.leaves = leaves
        self.step = step
        self.close = close


def run_query(conn: Any, sql: str) -> None:
    cur = conn.cursor()
    cur.execute(sql)
    cur.fetchall()
    cur.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pgbouncer(server: Any) -> Iterator[str | None]:
    """pgbouncer in session mode in front of ``server`` (DISCARD ALL at each
    client's end); its URL, or None if pgbouncer is not installed."""
    binary = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if binary is None:
        yield None
        return
    directory = Path(tempfile.mkdtemp(prefix="surge-pgbouncer-"))
    port = free_port()
    (directory / "users.txt").write_text(f'"{server.user}" "{server.password}"\n')
    (directory / "pgbouncer.ini").write_text(
        f"[databases]\n{server.database} = host=127.0.0.1 port={server.port}"
        f" dbname={server.database}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"unix_socket_dir = {directory}\nauth_type = trust\n"
        f"auth_file = {directory}/users.txt\npool_mode = session\n"
        "server_reset_query = DISCARD ALL\ndefault_pool_size = 4\n"
        f"logfile = {directory}/pgbouncer.log\npidfile = {directory}/pgbouncer.pid\n"
    )
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
        for f in directory.iterdir():
            shutil.chown(f, "postgres", "postgres")
        argv = ["runuser", "-u", "postgres", "--", binary, str(directory / "pgbouncer.ini")]
    else:
        argv = [binary, str(directory / "pgbouncer.ini")]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("pgbouncer did not start") from None
                time.sleep(0.05)
        yield f"postgresql://{server.user}@127.0.0.1:{port}/{server.database}"
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


def mariadb_floor(server: Any, sql: str, autocommit: bool) -> tuple[Step, Callable[[], None]]:
    """The reset floor on MariaDB: surge's reset bytes (the same COM_RESET_CONNECTION
    and, for autocommit off, the SET that COM_RESET_CONNECTION does not restore)
    in front of the query in one send, read back with PyMySQL's own calls."""
    import pymysql

    conn = pymysql.connect(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        database=server.database,
        autocommit=autocommit,
        ssl_disabled=True,
    )
    reset = b"\x01\x00\x00\x00\x1f"  # COM_RESET_CONNECTION
    n_ok = 1
    if not autocommit:  # the server's default is on: the reset turns it back on
        statement = b"SET autocommit=0"
        reset += (len(statement) + 1).to_bytes(3, "little") + b"\x00\x03" + statement
        n_ok = 2
    query = (len(sql) + 1).to_bytes(3, "little") + b"\x00\x03" + sql.encode()

    def step() -> None:
        conn._sock.sendall(reset + query)
        for _ in range(n_ok):
            conn._next_seq_id = 1
            conn._read_packet()
        conn._next_seq_id = 1
        conn._read_query_result()
        conn._result = None

    return step, conn.close


def postgresql_floor(server: Any, sql: str, autocommit: bool) -> tuple[Step, Callable[[], None]]:
    """The reset floor on PostgreSQL: the query, then ROLLBACK (if open) and DISCARD
    ALL in libpq's pipeline mode, written at once and read back before the next
    query - what surge does, by psycopg's and libpq's own calls."""
    import psycopg

    # DISCARD ALL deallocates what psycopg prepared (it prepares a query run 5
    # times): a reset session never gets there, so the floor does not prepare.
    conn = psycopg.connect(server.url, autocommit=autocommit, prepare_threshold=None)
    pgconn = conn.pgconn
    idle = psycopg.pq.TransactionStatus.IDLE
    sync = psycopg.pq.ExecStatus.PIPELINE_SYNC

    def step() -> None:
        run_query(conn, sql)
        pgconn.enter_pipeline_mode()
        syncs = 0
        if pgconn.transaction_status != idle:
            pgconn.send_query_params(b"ROLLBACK", None)
            pgconn.pipeline_sync()
            syncs += 1
        pgconn.send_query_params(b"DISCARD ALL", None)
        pgconn.pipeline_sync()
        syncs += 1
        pgconn.flush()
        while syncs:
            if pgconn.is_busy():
                conn.wait(_readable())
                pgconn.consume_input()
                continue
            result = pgconn.get_result()
            if result is not None and result.status == sync:
                syncs -= 1
        pgconn.exit_pipeline_mode()

    return step, conn.close


def _readable() -> Any:
    from psycopg.waiting import Wait

    yield Wait.R


def approaches(server: Any, sql: str, autocommit: bool, bouncer: str | None) -> list[Approach]:
    import surge.db

    kind = server.kind
    out: list[Approach] = []
    if kind == "mariadb":
        import pymysql

        def connect() -> Any:
            return pymysql.connect(
                host=server.host,
                port=server.port,
                user=server.user,
                password=server.password,
                database=server.database,
                autocommit=autocommit,
                ssl_disabled=True,
            )
    else:
        import psycopg

        def connect() -> Any:
            return psycopg.connect(server.url, autocommit=autocommit)

    reused = connect()

    def reused_step() -> None:
        run_query(reused, sql)
        if not autocommit:
            reused.rollback()

    out.append(Approach("one reused connection", "everything", reused_step, reused.close))
    floor, floor_close = (mariadb_floor if kind == "mariadb" else postgresql_floor)(
        server, sql, autocommit
    )
    out.append(Approach("reset floor", "nothing", floor, floor_close))

    url = server.url + ("?ssl=false" if kind == "mariadb" else "")
    for name, reset, leaves in (
        ("surge.db.pool", "session", "nothing"),
        ("surge.db.pool, reset none", "none", "all but the transaction"),
    ):
        pool = surge.db.pool(url, max_size=4, autocommit=autocommit, reset=reset)

        def surge_step(pool: Any = pool) -> None:
            with pool.connection() as conn:
                run_query(conn, sql)

        out.append(Approach(name, leaves, surge_step, pool.close))

    from sqlalchemy import pool as sa_pool

    qp = sa_pool.QueuePool(connect, pool_size=4)

    def qp_step() -> None:
        fairy = qp.connect()
        run_query(fairy, sql)
        fairy.close()

    out.append(Approach("SQLAlchemy QueuePool", "all but the transaction", qp_step, qp.dispose))

    if kind == "postgresql":
        import psycopg
        from psycopg_pool import ConnectionPool

        def discard_all(conn: Any) -> None:
            mode = conn.autocommit
            conn.autocommit = True
            conn.execute("DISCARD ALL")
            conn.autocommit = mode

        pp = ConnectionPool(
            server.url,
            min_size=1,
            max_size=4,
            # DISCARD ALL deallocates what psycopg prepared: as for the floor
            kwargs={"autocommit": autocommit, "prepare_threshold": None},
            reset=discard_all,
            open=True,
        )
        pp.wait()

        def pp_step() -> None:
            with pp.connection() as conn:
                run_query(conn, sql)

        out.append(Approach("psycopg_pool + DISCARD ALL", "nothing", pp_step, pp.close))

        # psycopg preparing every statement: surge keeps its statements across
        # checkouts; dropping its cache at each return makes the reset DISCARD ALL,
        # as it was before #45, and the next checkout prepares the query again.
        prepared = surge.db.pool(
            server.url, max_size=4, autocommit=autocommit, connect_args={"prepare_threshold": 0}
        )

        # five distinct statements a checkout (an ORM's request): five prepares saved
        many = [f"{sql} /* {n} */" for n in range(5)]

        def kept_step(statements: Sequence[str] = (sql,)) -> None:
            with prepared.connection() as conn:
                for text in statements:
                    run_query(conn, text)

        def dropped_step(statements: Sequence[str] = (sql,)) -> None:
            with prepared.connection() as conn:
                for text in statements:
                    run_query(conn, text)
                conn._prepared._names.clear()

        kept = "nothing but psycopg's statements"
        out += [
            Approach("surge.db.pool, prepare_threshold=0", kept, kept_step, lambda: None),
            Approach("same, re-prepared each checkout", "nothing", dropped_step, lambda: None),
            Approach("same, 5 statements a checkout", kept, lambda: kept_step(many), lambda: None),
            Approach(
                "same, 5 statements, re-prepared",
                "nothing",
                lambda: dropped_step(many),
                prepared.close,
            ),
        ]
    return out


def measure(
    server: Any, sql: str, autocommit: bool, queries: int, repeat: int, bouncer: str | None
) -> dict[str, Any]:
    every = approaches(server, sql, autocommit, bouncer)
    rounds: dict[str, dict[str, list[float]]] = {a.name: {"wall": [], "cpu": []} for a in every}
    try:
        for a in every:  # warm: connections open, code paths hot
            for _ in range(min(200, queries // 10)):
                a.step()
        for _ in range(repeat):
            for a in every:
                n = queries // 10 if a.name.startswith("pgbouncer") else queries
                with gc_paused():
                    cpu0, t0 = process_time(), perf_counter()
                    for _ in range(n):
                        a.step()
                    wall, cpu = perf_counter() - t0, process_time() - cpu0
                rounds[a.name]["wall"].append(wall / n * 1e6)
                rounds[a.name]["cpu"].append(cpu / n * 1e6)
    finally:
        for a in every:
            a.close()
    out: dict[str, Any] = {}
    for a in every:
        walls = rounds[a.name]["wall"]
        out[a.name] = {
            "leaves": a.leaves,
            "wall_us_median": statistics.median(walls),
            "wall_us_best": min(walls),
            "wall_us_rounds": walls,
            "cpu_us_median": statistics.median(rounds[a.name]["cpu"]),
        }
    reused = out["one reused connection"]["wall_us_median"]
    floor = out["reset floor"]["wall_us_median"]
    for b in out.values():
        b["x_reused"] = b["wall_us_median"] / reused
        b["x_floor"] = b["wall_us_median"] / floor
    return out


def measure_asyncio(server: Any, sql: str, queries: int, repeat: int) -> dict[str, Any]:
    """The asyncio approaches (see the module's doc), interleaved round by round."""
    import asyncio

    import asyncpg
    import psycopg

    import surge.db
    from surge.db._asyncpg import RESET_SQL

    async def run() -> dict[str, Any]:
        reused = await asyncpg.connect(server.url)
        theirs = await asyncpg.create_pool(server.url, min_size=1, max_size=1)
        ours = surge.db.async_pool(server.url, driver="asyncpg", max_size=1)
        pg_reused = await psycopg.AsyncConnection.connect(server.url, autocommit=True)
        pg_ours = surge.db.async_pool(server.url, max_size=1, autocommit=True)

        async def reused_step() -> None:
            await reused.fetch(sql)

        async def keep_step() -> None:
            await reused.fetch(sql)
            await reused.execute(RESET_SQL)

        async def reprepare_step() -> None:
            await reused.fetch(sql)
            await reused.execute("DISCARD ALL")
            reused._drop_local_statement_cache()  # what DISCARD ALL deallocated

        async def theirs_step() -> None:
            async with theirs.acquire() as conn:
                await conn.fetch(sql)

        async def ours_step() -> None:
            async with ours.connection() as conn:
                await conn.fetch(sql)

        async def pg_reused_step() -> None:
            await (await pg_reused.execute(sql)).fetchall()

        async def pg_ours_step() -> None:
            async with pg_ours.connection() as conn:
                await (await conn.execute(sql)).fetchall()

        steps = {
            "asyncpg, one reused connection": ("everything", reused_step),
            "asyncpg reused + surge's reset": ("asyncpg's statement cache", keep_step),
            "asyncpg reused + DISCARD ALL": ("nothing (re-prepares)", reprepare_step),
            "asyncpg.create_pool": ("8 kinds of session state", theirs_step),
            "surge.db.async_pool, asyncpg": ("asyncpg's statement cache", ours_step),
            "psycopg AsyncConnection, reused": ("everything", pg_reused_step),
            "surge.db.async_pool, psycopg": ("nothing", pg_ours_step),
        }
        walls: dict[str, list[float]] = {name: [] for name in steps}
        cpus: dict[str, list[float]] = {name: [] for name in steps}
        try:
            for _, step in steps.values():  # warm
                for _ in range(min(200, queries // 10)):
                    await step()
            for _ in range(repeat):
                for name, (_, step) in steps.items():
                    with gc_paused():
                        cpu0, t0 = process_time(), perf_counter()
                        for _ in range(queries):
                            await step()
                        wall, cpu = perf_counter() - t0, process_time() - cpu0
                    walls[name].append(wall / queries * 1e6)
                    cpus[name].append(cpu / queries * 1e6)
        finally:
            await reused.close()
            await theirs.close()
            await ours.close()
            await pg_reused.close()
            await pg_ours.close()
        base = statistics.median(walls["asyncpg, one reused connection"])
        return {
            name: {
                "leaves": leaves,
                "wall_us_median": statistics.median(walls[name]),
                "wall_us_best": min(walls[name]),
                "wall_us_rounds": walls[name],
                "cpu_us_median": statistics.median(cpus[name]),
                "x_asyncpg_reused": statistics.median(walls[name]) / base,
            }
            for name, (leaves, _) in steps.items()
        }

    return asyncio.run(run())


def report_asyncio(title: str, best: dict[str, Any]) -> str:
    table = Table(title, ["approach", "leaves to the next user", "median", "x reused", "CPU"])
    for name, b in best.items():
        table.add(
            name,
            b["leaves"],
            f"{b['wall_us_median']:,.0f} us",
            f"{b['x_asyncpg_reused']:.2f}x",
            f"{b['cpu_us_median']:,.0f} us",
        )
    table.print()
    ours = best["surge.db.async_pool, asyncpg"]["wall_us_median"]
    theirs = best["asyncpg.create_pool"]["wall_us_median"]
    return (
        f"{title}: surge.db.async_pool(asyncpg) {ours / theirs:.2f}x asyncpg.create_pool, "
        f"{best['surge.db.async_pool, asyncpg']['x_asyncpg_reused']:.2f}x a reused connection"
    )


def report(title: str, best: dict[str, Any]) -> str:
    table = Table(
        title, ["approach", "leaves to the next user", "median", "x reused", "x floor", "CPU"]
    )
    for name, b in best.items():
        table.add(
            name,
            b["leaves"],
            f"{b['wall_us_median']:,.0f} us",
            f"{b['x_reused']:.2f}x",
            f"{b['x_floor']:.2f}x",
            f"{b['cpu_us_median']:,.0f} us",
        )
    table.print()
    surge = best["surge.db.pool"]
    if surge["x_reused"] <= TARGET_RATIO:
        verdict = f"PASS: {surge['x_reused']:.2f}x a reused connection (<= {TARGET_RATIO}x)"
    elif surge["x_floor"] <= FLOOR_SLACK:
        verdict = (
            f"AT FLOOR: {surge['x_reused']:.2f}x a reused connection, but the reset alone "
            f"costs {best['reset floor']['x_reused']:.2f}x here; surge is "
            f"{surge['x_floor']:.2f}x that floor (<= {FLOOR_SLACK}x)"
        )
    else:
        verdict = (
            f"MISS: {surge['x_reused']:.2f}x a reused connection, {surge['x_floor']:.2f}x "
            "the reset floor"
        )
    return f"{title}: {verdict}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer queries: a smoke run")
    parser.add_argument("--only", choices=BACKENDS, help="one backend")
    parser.add_argument("--queries", type=int, help="queries per round (default 2000)")
    parser.add_argument("--repeat", type=int, help="rounds, interleaved (default 5)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results path")
    parser.add_argument(
        "--asyncio-only", action="store_true", help="only the asyncio section (PostgreSQL)"
    )
    args = parser.parse_args(argv)
    queries = args.queries or (200 if args.quick else 2000)
    repeat = args.repeat or (2 if args.quick else 5)

    import surge.testing

    packages = ["surge", "pymysql", "psycopg", "sqlalchemy", "psycopg-pool", "asyncpg"]
    info = machine_info(packages)
    print(
        f"surge.db benchmark -- {info['cpu_model']}, {info['cpu_count']} cores, "
        f"load {info['load_average']}, Python {info['python']}\n",
        flush=True,
    )
    started = perf_counter()
    results: dict[str, Any] = {}
    verdicts: list[str] = []
    servers = {"mariadb": surge.testing.mariadb, "postgresql": surge.testing.postgresql}
    for kind in BACKENDS:
        if (args.only and kind != args.only) or (args.asyncio_only and kind != "postgresql"):
            continue
        with servers[kind]() as server:
            if kind == "mariadb":  # the write-up's query reads mysql.user
                with server.connect(admin=True, autocommit=True) as admin:
                    admin.cursor().execute(f"GRANT SELECT ON mysql.user TO '{server.user}'@'%'")
            if kind == "postgresql":
                for label, sql in QUERIES[kind].items():
                    title = f"postgresql, asyncio, {label}"
                    results[title] = measure_asyncio(server, sql, queries, repeat)
                    verdicts.append(report_asyncio(title, results[title]))
            if args.asyncio_only:
                continue
            with pgbouncer(server) if kind == "postgresql" else _nothing() as bouncer:
                for autocommit in (False, True):
                    for label, sql in QUERIES[kind].items():
                        mode = "autocommit on" if autocommit else "autocommit off"
                        title = f"{kind}, {mode}, {label}"
                        best = measure(server, sql, autocommit, queries, repeat, bouncer)
                        results[title] = best
                        verdicts.append(report(title, best))
    print("targets")
    for line in verdicts:
        print("  " + line)
    payload = {
        "benchmark": "db",
        "machine": info,
        "load_average_after": list(os.getloadavg()),
        "settings": {"queries": queries, "repeat": repeat},
        "results": results,
        "targets": verdicts,
        "elapsed_s": perf_counter() - started,
    }
    path = write_json(args.out, payload)
    print(f"\nwrote {path} in {perf_counter() - started:.1f} s")
    return 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
