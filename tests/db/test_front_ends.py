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
from functools import partial
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


def _made(
    make: Callable[[], Any], close: Callable[[Any], None], name: str
) -> tuple[str, str] | None:
    """None if ``make()`` made a pool (closed again), else its error's class and
    text (with the name of the callable, which the text names, taken out)."""
    try:
        pool = make()
    except Exception as error:
        return type(error).__name__, str(error).replace(f"{name}()", "<pool>()")
    close(pool)
    return None


def _sync(url: str, options: dict[str, Any]) -> tuple[str, str] | None:
    return _made(lambda: DBPool(url, **options), lambda pool: pool.close(), "DBPool")


def _async(url: str, options: dict[str, Any]) -> tuple[str, str] | None:
    return _made(
        lambda: AsyncDBPool(url, **options), lambda pool: asyncio.run(pool.close()), "AsyncDBPool"
    )


def test_both_constructors_have_one_signature() -> None:
    """And surge.db.pool() and async_pool() show it too (help(), IDEs, mypy), not
    ``**options``."""
    import surge.db

    assert inspect.signature(DBPool) == inspect.signature(AsyncDBPool)
    for function, cls in ((surge.db.pool, DBPool), (surge.db.async_pool, AsyncDBPool)):
        signature = inspect.signature(function)
        assert signature.parameters == inspect.signature(cls).parameters
        assert signature.return_annotation == cls.__name__


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


def _django(**options: Any) -> Any:
    from surge.db.django._pooled import pool_for  # the glue's one way to a pool

    return pool_for(URLS["postgresql"], "psycopg", "default", {}, options)


def _close_django(pool: Any) -> None:
    from surge.db.django._pooled import close_pools

    close_pools()


def _close_engine(engine: Any) -> None:
    if hasattr(engine, "sync_engine"):
        asyncio.run(engine.dispose())
    else:
        engine.dispose()


#: Every public way to a surge.db pool that takes its options, by the name an
#: error gives it (as the user called it): (a call with these options, how to
#: close what it made).  Django's OPTIONS["pool"] goes through the glue's pool_for.
def _front_ends() -> dict[str, tuple[Callable[..., Any], Callable[[Any], None]]]:
    import surge.db
    from surge.db import sqlalchemy as sa

    engine_url = "postgresql+psycopg://surge@127.0.0.1:1/surge"
    url = URLS["postgresql"]
    return {
        "DBPool()": (partial(DBPool, url), DBPool.close),
        "AsyncDBPool()": (partial(AsyncDBPool, url), lambda p: asyncio.run(p.close())),
        "pool()": (partial(surge.db.pool, url), DBPool.close),
        "async_pool()": (partial(surge.db.async_pool, url), lambda p: asyncio.run(p.close())),
        "create_engine(pool_options=...)": (
            lambda **options: sa.create_engine(engine_url, pool_options=options),
            _close_engine,
        ),
        "create_async_engine(pool_options=...)": (
            lambda **options: sa.create_async_engine(engine_url, pool_options=options),
            _close_engine,
        ),
        "DATABASES['default']['OPTIONS']['pool']": (_django, _close_django),
    }


#: (a misspelt option, the close match the error suggests, or None)
MISSPELT = [("max_sise", "max_size"), ("timout", "timeout"), ("no_such_option", None)]


@pytest.mark.parametrize("front_end", list(_front_ends()))
@pytest.mark.parametrize(("option", "suggested"), MISSPELT)
def test_an_unknown_option_is_refused_under_the_name_the_user_called(
    front_end: str, option: str, suggested: str | None
) -> None:
    """As Python's own TypeError for an unexpected keyword, naming what the user
    called (never SessionResets.__init__ or another internal), with the close
    match if there is one - the same mechanism on every front-end."""
    make, _ = _front_ends()[front_end]
    with pytest.raises(TypeError) as refused:
        make(**{option: 1})
    hint = f". Did you mean {suggested!r}?" if suggested else ""
    assert str(refused.value) == f"{front_end} got an unexpected keyword argument {option!r}{hint}"


@pytest.mark.parametrize("front_end", list(_front_ends()))
def test_every_front_end_takes_the_pools_options(front_end: str) -> None:
    """What the refusal knows are the pools' own keywords: a right one passes on
    every way in (nothing connects: a pool connects at its first checkout)."""
    make, close = _front_ends()[front_end]
    close(make(max_size=2, timeout=1.0, check_idle_after=0.5, reset="none", init_sql=["SELECT 1"]))


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
