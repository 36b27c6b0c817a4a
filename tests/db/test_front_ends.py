"""DBPool and AsyncDBPool are two front-ends of one pool: the same options, the
same refusals, the same decisions (surge.db._session.SessionResets).  One table
drives both, so that a check or a default added to one side only fails here -
the async pool once took a negative ``check_idle_after`` the sync pool refused.

Nothing here connects: a pool makes its first connection at its first checkout.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import ssl
from collections.abc import Callable
from typing import Any

import pytest

from surge.db import AsyncDBPool, DBPool
from surge.db._session import SOCKET_CHECK_AFTER

#: Port 1: nothing listens, and nothing here connects anyway.
URLS = {
    "postgresql": "postgresql://surge@127.0.0.1:1/surge",
    "mysql": "mysql://surge@127.0.0.1:1/surge",
}

GOOD: list[dict[str, Any]] = [
    {},
    {"check_idle_after": 0},
    {"check_idle_after": 2.5},
    {"max_lifetime": None},
    {"max_lifetime": 60.0},
    {"reset": "none"},
    {"init_sql": ["SET @surge = 1"]},
    {"autocommit": True},
    {"max_size": 1, "max_overflow": 2, "max_idle": 5.0, "lifo": False},
    {"timeout": 0, "lifetime_jitter": 0},
    {"connect_args": {"connect_timeout": 3}},
    {"ssl_context": ssl.create_default_context()},
]

BAD: list[dict[str, Any]] = [
    {"check_idle_after": -1},
    {"check_idle_after": math.nan},
    {"reset": "always"},
    {"init_sql": "SET @surge = 1"},
    {"init_sql": ["  "]},
    {"max_size": 0},
    {"max_overflow": -1},
    {"max_idle": 0},
    {"timeout": -1},
    {"max_lifetime": 0},
    {"lifetime_jitter": 1},
    {"no_such_option": 1},
]


def _named(options: dict[str, Any]) -> str:
    """A test id that is the same in every process (no object's address)."""
    return (
        ",".join(
            f"{k}={type(v).__name__ if isinstance(v, ssl.SSLContext) else v!r}"
            for k, v in options.items()
        )
        or "defaults"
    )


def _made(make: Callable[[], Any], close: Callable[[Any], None]) -> tuple[str, str] | None:
    """None if ``make()`` made a pool (closed again), else its error's class and text."""
    try:
        pool = make()
    except Exception as error:
        return type(error).__name__, str(error)
    close(pool)
    return None


def _sync(url: str, options: dict[str, Any]) -> tuple[str, str] | None:
    return _made(lambda: DBPool(url, **options), lambda pool: pool.close())


def _async(url: str, options: dict[str, Any]) -> tuple[str, str] | None:
    return _made(lambda: AsyncDBPool(url, **options), lambda pool: asyncio.run(pool.close()))


def test_both_constructors_have_one_signature() -> None:
    assert inspect.signature(DBPool) == inspect.signature(AsyncDBPool)


@pytest.mark.parametrize("scheme", sorted(URLS))
@pytest.mark.parametrize("options", GOOD, ids=_named)
def test_both_accept_the_same_options(scheme: str, options: dict[str, Any]) -> None:
    assert _sync(URLS[scheme], options) is None
    assert _async(URLS[scheme], options) is None


@pytest.mark.parametrize("scheme", sorted(URLS))
@pytest.mark.parametrize("options", BAD, ids=_named)
def test_both_refuse_the_same_options_alike(scheme: str, options: dict[str, Any]) -> None:
    refused = _sync(URLS[scheme], options)
    assert refused is not None
    assert _async(URLS[scheme], options) == refused


def test_both_keep_the_same_settings() -> None:
    options = {"check_idle_after": 0.5, "reset": "none", "init_sql": ["SET @surge = 1"]}
    sync, asynchronous = DBPool(URLS["mysql"], **options), AsyncDBPool(URLS["mysql"], **options)
    try:
        for name in ("reset", "init_sql", "autocommit", "check_idle_after", "timeout"):
            assert getattr(sync, name) == getattr(asynchronous, name), name
        assert sync.pool.stats() == asynchronous.pool.stats()
    finally:
        sync.close()
        asyncio.run(asynchronous.close())


class _Driver:
    """The two answers ``_checkout_steps`` reads from a driver, with no connection."""

    name = "stub"

    def __init__(self, reset_answers: str, pending: bool) -> None:
        self.reset_answers = reset_answers
        self.pending = pending

    def reset_pending(self, conn: Any) -> bool:
        return self.pending


#: (read the reset's answers first?, then ping? - None: if the socket got something)
@pytest.mark.parametrize(
    ("reset_answers", "pending", "idle", "steps"),
    [
        ("at checkout", False, 0.0, (False, False)),
        ("at checkout", True, 0.0, (True, False)),
        ("lazily", True, 0.0, (False, False)),  # the next command reads them
        ("lazily", True, SOCKET_CHECK_AFTER, (True, None)),
        ("at checkout", False, SOCKET_CHECK_AFTER, (False, None)),
        ("at checkout", True, 1.0, (True, True)),
        ("lazily", False, 5.0, (False, True)),
    ],
)
@pytest.mark.parametrize("front_end", [DBPool, AsyncDBPool])
def test_a_checkout_decides_alike_on_both_sides(
    front_end: type[Any],
    reset_answers: str,
    pending: bool,
    idle: float,
    steps: tuple[bool, bool | None],
) -> None:
    pool = front_end.__new__(front_end)  # the decisions only: no driver, no pool
    pool.driver, pool.check_idle_after = _Driver(reset_answers, pending), 1.0
    assert pool._checkout_steps(object(), idle) == steps
