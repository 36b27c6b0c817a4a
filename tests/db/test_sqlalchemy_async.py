"""surge.db.sqlalchemy.create_async_engine against real servers - asyncpg and
psycopg on PostgreSQL, aiomysql on MariaDB: SQLAlchemy's AsyncEngine and
AsyncSession as SQLAlchemy documents them, on surge's asyncio pool."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import String, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from surge.db import AsyncDBPool
from surge.db.sqlalchemy import AsyncSurgePool, create_async_engine
from surge.errors import UsageError
from surge.testing import DBServer

DRIVERS = {
    "asyncpg": ("postgresql", "postgresql+asyncpg"),
    "psycopg": ("postgresql", "postgresql+psycopg"),
    "aiomysql": ("mariadb", "mysql+aiomysql"),
}


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "sa_async_items"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(40))


@pytest.fixture(params=list(DRIVERS))
def server_url(request: pytest.FixtureRequest) -> tuple[DBServer, str]:
    kind, scheme = DRIVERS[request.param]
    server: DBServer = request.getfixturevalue(f"{kind}_server")
    return server, scheme + server.url[server.url.index("://") :]


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def surge_pool(engine: AsyncEngine) -> AsyncDBPool:
    pool = engine.sync_engine.pool
    assert isinstance(pool, AsyncSurgePool)
    return pool.db


def test_an_orm_round_trip_through_asyncsession(server_url: tuple[DBServer, str]) -> None:
    _, url = server_url

    async def main() -> tuple[list[str], list[str], dict[str, Any]]:
        engine = create_async_engine(url, pool_options={"max_size": 2})
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.drop_all)
                await conn.run_sync(Base.metadata.create_all)
            session_factory = async_sessionmaker(engine, expire_on_commit=False)
            async with session_factory() as session:
                session.add_all([Item(id=1, name="shirt"), Item(id=2, name="mug")])
                await session.commit()
            async with session_factory() as session:
                item = await session.get(Item, 2)
                assert item is not None
                item.name = "cup"
                session.add(Item(id=3, name="never"))
                await session.flush()
                await session.rollback()  # the rename and the insert undone
            async with session_factory() as session, session.begin():
                (await session.get(Item, 1)).name = "t-shirt"  # type: ignore[union-attr]
            async with session_factory() as session:
                names = list((await session.scalars(select(Item.name).order_by(Item.id))).all())
            async with AsyncSession(engine) as session:
                counted = await session.execute(text("SELECT COUNT(*) FROM sa_async_items"))
                again = [str(counted.scalar())]
            stats = surge_pool(engine).stats()
        finally:
            await engine.dispose()
        return names, again, stats

    names, again, stats = run(main())
    assert names == ["t-shirt", "mug"]
    assert again == ["2"]
    assert stats["in_use"] == 0 and stats["created"] <= 2


def _set_and_get(kind: str) -> tuple[str, str]:
    if kind == "mariadb":
        return "SET @surge_v = 5", "SELECT @surge_v"
    return "SELECT set_config('surge.v', '5', false)", "SELECT current_setting('surge.v', true)"


def test_every_checkout_is_a_fresh_session(server_url: tuple[DBServer, str]) -> None:
    server, url = server_url
    set_sql, get_sql = _set_and_get(server.kind)

    async def main() -> tuple[Any, Any, int, Any]:
        engine = create_async_engine(url, pool_options={"max_size": 1})
        try:
            async with engine.connect() as conn:
                await conn.execute(text(set_sql))
                assert str((await conn.execute(text(get_sql))).scalar()) == "5"
                first = conn.sync_connection.connection.driver_connection  # type: ignore[union-attr]
            async with engine.connect() as conn:
                got = (await conn.execute(text(get_sql))).scalar()
                same = conn.sync_connection.connection.driver_connection is first  # type: ignore[union-attr]
            stats = surge_pool(engine).stats()
        finally:
            await engine.dispose()
        return got, same, stats["created"], stats["resets"]

    got, same, created, resets = run(main())
    assert got in (None, "")  # PostgreSQL: an empty string, as after DISCARD ALL
    assert (same, created) == (True, 1)
    assert resets >= 1


def test_dispose_closes_the_idle_connections_and_the_engine_goes_on(
    server_url: tuple[DBServer, str],
) -> None:
    _, url = server_url

    async def main() -> tuple[int, int, int]:
        engine = create_async_engine(url, pool_options={"max_size": 2})
        try:
            async with engine.connect() as a, engine.connect() as b:
                await a.execute(text("SELECT 1"))
                await b.execute(text("SELECT 1"))
            db = surge_pool(engine)
            before = db.stats()["open"]
            await engine.dispose()
            after = db.stats()["open"]
            async with engine.connect() as conn:
                assert (await conn.execute(text("SELECT 2"))).scalar() == 2
            return before, after, db.stats()["created"]
        finally:
            await engine.dispose()

    assert run(main()) == (2, 0, 3)


#: Cancellations at seeded points (as tests/db/test_seeded_signals.py).
N = 60
SEED = 20261202


def test_cancellations_at_seeded_points_leave_the_engine_whole(
    server_url: tuple[DBServer, str],
) -> None:
    server, url = server_url
    rng = random.Random(f"{SEED}-{url.split(':', 1)[0]}")
    set_sql, get_sql = _set_and_get(server.kind)

    async def main() -> tuple[int, list[str], dict[str, Any]]:
        engine = create_async_engine(url, pool_options={"max_size": 1, "timeout": 10})
        interrupted, wrong = 0, []

        async def one() -> None:
            async with engine.connect() as conn:
                await conn.execute(text(set_sql))
                got = (await conn.execute(text(get_sql))).scalar()
                if str(got) != "5":
                    wrong.append(f"{got!r}")

        try:
            for _ in range(N):
                task = asyncio.create_task(one())
                await asyncio.sleep(rng.uniform(1e-6, 3e-3))
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    interrupted += 1
                except Exception as error:  # an interruption the driver turned into one
                    if not isinstance(error.__context__, asyncio.CancelledError):
                        wrong.append(repr(error)[:200])
            async with engine.connect() as conn:
                assert (await conn.execute(text("SELECT 6 * 7"))).scalar() == 42
                assert (await conn.execute(text(get_sql))).scalar() in (None, "")
            stats = surge_pool(engine).stats()
        finally:
            await engine.dispose()
        return interrupted, wrong, stats

    interrupted, wrong, stats = run(main(), 100)
    assert interrupted > N // 8, f"only {interrupted} cancellations landed"
    assert wrong == [], wrong[:5]
    assert stats["in_use"] == 0 and stats["waiting"] == 0, stats


def test_urls(postgresql_server: DBServer) -> None:
    with pytest.raises(UsageError, match="create_async_engine takes"):
        create_async_engine("postgresql+psycopg2://u@127.0.0.1/db")
    engine = create_async_engine(postgresql_server.url)  # postgresql://: psycopg
    assert engine.dialect.driver == "psycopg"
    assert surge_pool(engine).driver.name == "psycopg"
    assert isinstance(engine.sync_engine, sqlalchemy.Engine)


@pytest.mark.parametrize("dispose", ["none", "dispose(close=False)"])
def test_a_forked_child_never_uses_the_parents_connections(
    server_url: tuple[DBServer, str], dispose: str
) -> None:
    """SQLAlchemy documents ``engine.dispose(close=False)`` in the child; with
    surge the child is safe either way, and the parent's connection goes on."""
    server, url = server_url
    pid_sql = "SELECT CONNECTION_ID()" if server.kind == "mariadb" else "SELECT pg_backend_pid()"
    engine = create_async_engine(url, pool_options={"max_size": 1})

    async def backend() -> int:
        async with engine.connect() as conn:
            return int((await conn.execute(text(pid_sql))).scalar())  # type: ignore[arg-type]

    async def child(parent: int) -> int:
        if dispose != "none":
            await engine.dispose(close=False)
        return 0 if await backend() != parent else 3

    loop = asyncio.new_event_loop()
    try:
        parent = loop.run_until_complete(backend())
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's exit status is the test
            code = 1
            try:
                code = asyncio.run(asyncio.wait_for(child(parent), 20))
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert loop.run_until_complete(backend()) == parent  # the parent's, untouched
        loop.run_until_complete(engine.dispose())
    finally:
        loop.close()
