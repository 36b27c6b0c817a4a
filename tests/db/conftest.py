"""Round trips counted on the server, for both backends, behind one interface.

``Counts`` is what a client cost the server between ``mark()`` and ``since()``:
statements run, ROLLBACKs, pings and logins.  MariaDB counts them itself
(``SHOW GLOBAL STATUS``: Questions, Com_rollback, Com_admin_commands - COM_PING
is one - and Connections, read by the administrator over the socket); PostgreSQL
logs each one (``log_min_duration_statement=0`` logs even the empty query used
as a ping, ``log_connections`` each login) and the log is read back.

Global counters see every client: a test counts only while nothing else talks
to the server (tests run one at a time).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.db._sql import settle

from surge.db import DBPool
from surge.testing import DBServer


@dataclass
class Counts:
    statements: int  # statements run (ROLLBACK and BEGIN included), pings and resets excluded
    rollbacks: int
    pings: int
    connects: int
    begins: int = 0  # PostgreSQL only: psycopg's BEGIN of an implicit transaction
    resets: int = 0  # session resets (surge.db._session), whatever they are made of


class MariaDBCounter:
    """A session reset is one to four commands (COM_RESET_CONNECTION, counted as
    an admin command as COM_PING is; COM_INIT_DB; a SET; init statements), each
    counted in Questions: the pools passed to ``mark`` and ``since`` say how many
    they wrote, and those are taken out of the statements and the pings."""

    NAMES = ("Questions", "Com_rollback", "Com_admin_commands", "Connections")

    def __init__(self, server: DBServer) -> None:
        self.server = server
        self.admin: Any = None
        self.mark()

    def _read(self) -> dict[str, int]:
        if self.admin is None or not self.admin.open:  # the server may have restarted
            self.admin = self.server.connect(admin=True, autocommit=True)
        cur = self.admin.cursor()
        names = ", ".join(f"'{n}'" for n in self.NAMES)
        cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
        return {name: int(value) for name, value in cur.fetchall()}

    def mark(self, *pools: Any) -> None:
        settle_all(pools)
        self.admin = None  # a fresh admin login now, so that none falls in the window
        self.written = written(pools)
        self.before = self._read()

    def since(self, *pools: Any) -> Counts:
        settle_all(pools)
        after = self._read()
        d = {n: after[n] - self.before[n] for n in self.NAMES}
        resets, commands = (a - b for a, b in zip(written(pools), self.written, strict=True))
        return Counts(
            # the SHOW that read the counters counts itself
            statements=d["Questions"] - 1 - commands,
            rollbacks=d["Com_rollback"],
            pings=d["Com_admin_commands"] - resets,
            connects=d["Connections"],
            resets=resets,
        )


def settle_all(pools: Any) -> None:
    """``settle`` the sync pools (an asyncio pool's test awaits ``asettle`` itself)."""
    for pool in pools:
        if isinstance(pool, DBPool):
            settle(pool)


def written(pools: Any) -> tuple[int, int]:
    """Resets the pools wrote, and the commands in them (pools of another kind:
    none)."""
    stats = [pool.stats() for pool in pools]
    return (
        sum(s.get("resets_written", 0) for s in stats),
        sum(s.get("reset_commands", 0) for s in stats),
    )


class PostgreSQLCounter:
    def __init__(self, server: DBServer) -> None:
        self.path = server.log_path
        self.mark()

    def mark(self, *pools: Any) -> None:
        settle_all(pools)
        self.offset = os.path.getsize(self.path)

    def lines(self) -> list[str]:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            return log.read().decode(errors="replace").splitlines()

    def since(self, *pools: Any) -> Counts:
        settle_all(pools)
        # "duration: 0.05 ms  statement: SELECT 1" (simple protocol), or parse, bind
        # and "execute _pg3_0: SELECT 1" (extended: psycopg prepares a statement run
        # 5 times); one statement run is a "statement" or an "execute" line.
        statements = []
        for line in self.lines():
            if " LOG:  duration: " not in line:
                continue
            what = line.split(" ms  ", 1)[1]
            if what.startswith(("statement: ", "execute ")):
                statements.append(what.split(": ", 1)[1].strip())
        run = [s for s in statements if s and not _reset(s)]
        keeping = [s for s in statements if _KEEPING in s]
        return Counts(
            statements=len(run),
            # a reset's own ROLLBACK is one, inside the query that keeps statements too
            rollbacks=run.count("ROLLBACK")
            + sum(s.startswith("ROLLBACK; ") or "; ROLLBACK; " in s for s in keeping),
            pings=sum(not s for s in statements),
            connects=sum("connection authorized" in line for line in self.lines()),
            begins=run.count("BEGIN"),
            resets=statements.count("DISCARD ALL") + len(keeping),
        )


#: The mark of surge's PostgreSQL reset that keeps psycopg's statements (one
#: query: surge.db._session.pg_reset); the other is DISCARD ALL.
_KEEPING = "DO $surge$"


def _reset(sql: str) -> bool:
    return sql == "DISCARD ALL" or _KEEPING in sql


Counter = MariaDBCounter | PostgreSQLCounter


@pytest.fixture(params=["mariadb", "postgresql"])
def db(request: pytest.FixtureRequest) -> Iterator[tuple[DBServer, Counter]]:
    """Each backend's session server with a counter of what clients cost it."""
    server: DBServer = request.getfixturevalue(f"{request.param}_server")
    counter: Counter = (
        MariaDBCounter(server) if server.kind == "mariadb" else PostgreSQLCounter(server)
    )
    yield server, counter
    if isinstance(counter, MariaDBCounter) and counter.admin is not None:
        counter.admin.close()


@pytest.fixture
def counter_for() -> Any:
    """``counter_for(server)``: a counter for a server a test started itself."""

    def make(server: DBServer) -> Counter:
        return MariaDBCounter(server) if server.kind == "mariadb" else PostgreSQLCounter(server)

    return make
