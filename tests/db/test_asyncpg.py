"""surge.db.async_pool(url, driver="asyncpg") on a real PostgreSQL, with
asyncpg.create_pool as the reference: asyncpg's own Connection handed out, a
fresh session at every checkout except asyncpg's statement cache (kept, as
asyncpg's pool keeps it), restarts survived, a silent server's bound, fork.
Cancellations at seeded points: tests/db/test_seeded_signals.py."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import asyncpg
import pytest
from tests.db.test_session_reset import POSTGRESQL_CASES, prepare_server

import surge.db
from surge.errors import UsageError
from surge.testing import DBServer


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def answer(conn: Any, probe: str) -> Any:
    """The probe's rows, or the name of the error it raised."""
    try:
        return [tuple(row) for row in await conn.fetch(probe)]
    except Exception as error:
        return type(error).__name__


async def dirty(conn: Any, setup: list[str]) -> None:
    for sql in setup:
        await conn.execute(sql)


async def _listen(conn: Any) -> None:
    await conn.add_listener("reset_channel", lambda *args: None)


async def _listening(conn: Any) -> Any:
    channels = await conn.fetchval("SELECT COUNT(*) FROM pg_listening_channels()")
    return len(conn._listeners), channels


async def _transaction(conn: Any) -> None:
    await conn.transaction().start()
    await conn.execute("INSERT INTO reset_t VALUES (99)")


async def _failed_transaction(conn: Any) -> None:
    await conn.execute("BEGIN")
    with pytest.raises(asyncpg.DivisionByZeroError):
        await conn.execute("SELECT 1 / 0")


#: asyncpg's own ways of changing a session: (setup on the connection, probe).
ASYNCPG_CASES: dict[str, tuple[Any, Any]] = {
    "add_listener (LISTEN and a callback)": (_listen, _listening),
    "transaction() left open": (_transaction, "SELECT COUNT(*) FROM reset_t"),
    "a failed transaction": (_failed_transaction, "SELECT COUNT(*) FROM reset_t"),
    "execute with a named PREPARE": (
        ["PREPARE app_stmt AS SELECT 1", 'PREPARE "Mixed Case" AS SELECT 2'],
        "SELECT name FROM pg_prepared_statements WHERE name NOT LIKE '\\_\\_asyncpg%'",
    ),
    "a sequence's currval": (
        ["CREATE TEMP SEQUENCE IF NOT EXISTS s", "SELECT nextval('s')"],
        "SELECT COUNT(*) FROM pg_class WHERE relname = 's' AND relpersistence = 't'",
    ),
    "SET ROLE, current and session user": (
        ["SET ROLE reset_role"],
        "SELECT current_user, session_user",
    ),
}


async def probe_answer(conn: Any, probe: Any) -> Any:
    if callable(probe):
        return await probe(conn)
    return await answer(conn, probe)


async def setup_on(conn: Any, setup: Any) -> None:
    if callable(setup):
        await setup(conn)
    else:
        await dirty(conn, setup)


def all_cases() -> dict[str, tuple[Any, Any]]:
    cases: dict[str, tuple[Any, Any]] = {
        name: (case.setup, case.probe)
        for name, case in POSTGRESQL_CASES.items()
        # asyncpg has no implicit transaction (autocommit off is psycopg's mode)
        if not callable(case.setup) and not callable(case.probe) and case.autocommit is not False
    }
    # PREPARE's own probe counts asyncpg's statements too: the application's only.
    cases["PREPARE"] = (
        ["PREPARE reset_p AS SELECT 1"],
        "SELECT COUNT(*) FROM pg_prepared_statements WHERE name NOT LIKE '\\_\\_asyncpg%'",
    )
    cases.update(ASYNCPG_CASES)
    return cases


def test_the_next_checkout_is_a_fresh_session_but_for_asyncpgs_cache(
    postgresql_server: DBServer,
) -> None:
    server = postgresql_server
    prepare_server(server)

    async def main() -> dict[str, Any]:
        found = {}
        async with surge.db.async_pool(server.url, driver="asyncpg", max_size=1) as pool:
            for name, (setup, probe) in all_cases().items():
                fresh = await asyncpg.connect(server.url)
                try:
                    expected = await probe_answer(fresh, probe)
                finally:
                    await fresh.close()
                async with pool.connection() as conn:
                    first = conn
                    await setup_on(conn, setup)
                async with pool.connection() as conn:
                    assert conn is first  # the same connection, reused
                    got = await probe_answer(conn, probe)
                if got != expected:
                    found[name] = (got, expected)
        return found

    assert run(main()) == {}


def test_asyncpgs_statement_cache_survives_the_reset(postgresql_server: DBServer) -> None:
    """What a checkout keeps: the statements asyncpg prepared for itself, as
    asyncpg.create_pool keeps them; no re-prepare on the next checkout."""
    server = postgresql_server

    async def prepared(pool: Any) -> tuple[list[str], type]:
        checkout = getattr(pool, "connection", None) or pool.acquire  # surge's, asyncpg's
        for _ in range(3):
            async with checkout() as conn:
                assert await conn.fetchval("SELECT $1::int + 1", 41) == 42
        async with checkout() as conn:
            names = await conn.fetch(
                "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%+ 1'"
            )
            return [row[0] for row in names], type(conn)

    async def main() -> tuple[Any, Any, dict[str, Any]]:
        async with surge.db.async_pool(server.url, driver="asyncpg", max_size=1) as pool:
            ours = await prepared(pool)
            stats = pool.stats()
        async with asyncpg.create_pool(server.url, min_size=1, max_size=1) as reference:
            theirs = await prepared(reference)
        return ours, theirs, stats

    (ours, cls), (theirs, _), stats = run(main())
    assert ours == theirs == ["SELECT $1::int + 1"]  # prepared once, kept
    assert issubclass(cls, asyncpg.Connection)
    assert stats["resets"] == 4 and stats["created"] == 1


def test_init_sql_holds_in_every_session(postgresql_server: DBServer) -> None:
    async def main() -> list[Any]:
        async with surge.db.async_pool(
            postgresql_server.url,
            driver="asyncpg",
            max_size=1,
            init_sql=["SET statement_timeout = '7s'"],
        ) as pool:
            seen = []
            for _ in range(3):
                async with pool.connection() as conn:
                    seen.append(await conn.fetchval("SHOW statement_timeout"))
                    await conn.execute("SET statement_timeout = '1s'")
            return [seen, pool.stats()["created"]]

    assert run(main()) == [["7s", "7s", "7s"], 1]


def test_a_type_codec_set_on_a_connection_is_never_handed_on(postgresql_server: DBServer) -> None:
    async def main() -> tuple[Any, Any, dict[str, Any]]:
        async with surge.db.async_pool(postgresql_server.url, driver="asyncpg", max_size=1) as pool:
            async with pool.connection() as conn:
                first = conn
                await conn.set_type_codec(
                    "int4", encoder=str, decoder=lambda v: "decoded!", schema="pg_catalog"
                )
                assert await conn.fetchval("SELECT 7::int4") == "decoded!"
            async with pool.connection() as conn:
                return conn is first, await conn.fetchval("SELECT 7::int4"), pool.stats()

    same, value, stats = run(main())
    assert (same, value, stats["created"]) == (False, 7, 2)


def test_a_restart_is_survived_and_costs_one_connect(postgresql_server: DBServer) -> None:
    async def main() -> tuple[int, int]:
        async with surge.db.async_pool(postgresql_server.url, driver="asyncpg", max_size=2) as pool:
            async with pool.connection() as a, pool.connection() as b:
                assert await a.fetchval("SELECT 1") == await b.fetchval("SELECT 1") == 1
            created = pool.stats()["created"]
            await asyncio.to_thread(postgresql_server.restart)
            async with pool.connection() as conn:
                assert await conn.fetchval("SELECT 2") == 2
            return created, pool.stats()["created"]

    assert run(main()) == (2, 3)


def test_a_silent_server_bounds_the_checkout(postgresql_server: DBServer) -> None:
    """A reset whose answer never comes (its server process stopped): the
    checkout goes on with a new connection within RESET_WAIT, the old one cut."""

    async def main() -> tuple[int, int]:
        async with surge.db.async_pool(postgresql_server.url, driver="asyncpg", max_size=1) as pool:
            async with pool.connection() as conn:
                pid = await conn.fetchval("SELECT pg_backend_pid()")
                os.kill(pid, signal.SIGSTOP)  # the reset goes out to a silent server
            try:
                async with pool.connection(timeout=5) as fresh:
                    assert await fresh.fetchval("SELECT pg_backend_pid()") != pid
            finally:
                os.kill(pid, signal.SIGCONT)
            stats = pool.stats()
            return stats["created"], stats["severed"]

    assert run(main()) == (2, 1)


def test_driver_names(postgresql_server: DBServer) -> None:
    with pytest.raises(UsageError, match="psycopg or asyncpg"):
        surge.db.async_pool(postgresql_server.url, driver="pg8000")
    with pytest.raises(UsageError, match="aiomysql"):
        surge.db.async_pool("mysql://u@127.0.0.1/db", driver="asyncpg")


def test_rollback_with_reset_none(postgresql_server: DBServer) -> None:
    prepare_server(postgresql_server)

    async def main() -> tuple[Any, dict[str, Any]]:
        async with surge.db.async_pool(
            postgresql_server.url, driver="asyncpg", max_size=1, reset="none"
        ) as pool:
            async with pool.connection() as conn:
                await conn.execute("BEGIN; INSERT INTO reset_t VALUES (99)")
            async with pool.connection() as conn:
                return await conn.fetchval("SELECT COUNT(*) FROM reset_t"), pool.stats()

    count, stats = run(main())
    assert (count, stats["rollbacks"]) == (3, 1)


def test_fork_severs_the_parents_connections_in_the_child(postgresql_server: DBServer) -> None:
    """The child makes its own connection; the parent's goes on untouched."""
    url = postgresql_server.url

    async def parent_side(pool: Any) -> int:
        async with pool.connection() as conn:
            return int(await conn.fetchval("SELECT pg_backend_pid()"))

    async def child_side(pool: Any, parent_pid: int) -> int:
        async with pool.connection(timeout=5) as conn:
            pid = int(await conn.fetchval("SELECT pg_backend_pid()"))
        return 0 if pid != parent_pid and pool.stats()["severed"] == 1 else 3

    loop = asyncio.new_event_loop()
    try:
        pool = surge.db.async_pool(url, driver="asyncpg", max_size=1)
        pid = loop.run_until_complete(parent_side(pool))
        child = os.fork()
        if child == 0:  # pragma: no cover - the child's exit status is the test
            code = 1
            try:
                code = asyncio.run(asyncio.wait_for(child_side(pool, pid), 20))
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert loop.run_until_complete(parent_side(pool)) == pid  # the parent's, untouched
        loop.run_until_complete(pool.close())
    finally:
        loop.close()
