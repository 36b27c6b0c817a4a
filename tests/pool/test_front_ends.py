"""The four front-ends - Pool, KeyedPool, AsyncPool, AsyncKeyedPool - offer the
same public API and behave alike where it means something: the same method
names, the ``*_nowait`` forms, ``clear``, ``set_max_lifetime``, ``invalidate``,
a repr, ``check`` told how long a resource was idle, ``reset`` able to refuse
one, and a slot given back whichever callback a BaseException interrupts.

Each test runs every front-end through one driver: a sync pool's calls return
their result, an async pool's are run on the test's own event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import pydoc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._mypy import mypy_errors

from surge.pool import AsyncKeyedPool, AsyncPool, KeyedPool, Pool, PoolTimeout
from surge.pool._options import DEFAULTS, PoolOptions

FRONT_ENDS = [Pool, KeyedPool, AsyncPool, AsyncKeyedPool]
PUBLIC = {
    "acquire",
    "acquire_nowait",
    "release",
    "release_nowait",
    "discard",
    "connection",
    "expire",
    "clear",
    "set_max_lifetime",
    "close",
    "stats",
    "invalidate",
    "generation",
    "generation_of",
}


class Driver:
    """One pool of any front-end, driven the same way: ``key`` is passed to the
    keyed ones only, awaitables are run to completion on one loop."""

    def __init__(self, cls: type, loop: asyncio.AbstractEventLoop, **options: Any) -> None:
        self.keyed = cls in (KeyedPool, AsyncKeyedPool)
        self.loop = loop
        create = options.pop("create", None) or (lambda *_: object())
        if self.keyed:
            options.setdefault("max_per_key", options["max_size"])
            self.pool = cls(create, **options)
        else:
            self.pool = cls(lambda: create(), **options)

    def run(self, value: Any) -> Any:
        return self.loop.run_until_complete(value) if inspect.isawaitable(value) else value

    def acquire(self, timeout: float | None = None) -> Any:
        if self.keyed:
            return self.run(self.pool.acquire("k", timeout))
        return self.run(self.pool.acquire(timeout))

    def acquire_nowait(self) -> Any:
        return self.pool.acquire_nowait("k") if self.keyed else self.pool.acquire_nowait()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.pool, name)
        return lambda *args: self.run(method(*args))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_every_front_end_has_the_same_public_methods() -> None:
    for cls in FRONT_ENDS:
        names = {n for n in dir(cls) if not n.startswith("_")}
        assert names == PUBLIC, (cls.__name__, names ^ PUBLIC)


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
def test_nowait_clear_lifetime_and_repr(cls: type, loop: asyncio.AbstractEventLoop) -> None:
    closed: list[object] = []
    now = [0.0]
    pool = Driver(cls, loop, max_size=2, close=closed.append, clock=lambda: now[0])
    assert pool.acquire_nowait() is None  # nothing idle: never creates
    first, second = pool.acquire(), pool.acquire()
    pool.release_nowait(first)
    pool.release(second)
    assert pool.acquire_nowait() is second  # LIFO
    pool.release(second)
    pool.clear()  # both idle ones closed
    assert sorted(map(id, closed)) == sorted(map(id, [first, second]))
    pool.set_max_lifetime(10.0)
    young = pool.acquire()
    pool.release(young)
    now[0] = 20.0  # past its lifetime: retired, not handed out
    assert pool.acquire() is not young
    assert young in closed
    text = repr(pool.pool)
    assert text.startswith(f"<{cls.__name__} max_size=2 ") and "in_use=1" in text
    pool.close()


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("step", ["check", "reset", "create"])
def test_a_callback_interrupted_by_a_base_exception_gives_the_slot_back(
    cls: type, step: str, loop: asyncio.AbstractEventLoop
) -> None:
    """KeyboardInterrupt inside check, reset or create propagates, and the pool
    of one has its slot back: the next acquire does not time out."""
    interrupt = [False]

    def callback(*_: object) -> object:
        if interrupt[0]:
            interrupt[0] = False
            raise KeyboardInterrupt
        return object() if step == "create" else True

    options: dict[str, Any] = {"max_size": 1, "timeout": 0.5, step: callback}
    pool = Driver(cls, loop, **options)
    if step != "create":
        pool.release(pool.acquire())  # an idle resource for check to look at
    interrupt[0] = True
    with pytest.raises(KeyboardInterrupt):
        pool.release(pool.acquire())
    try:
        pool.release(pool.acquire())
    except PoolTimeout:
        pytest.fail(f"{cls.__name__}: the slot leaked after an interrupted {step}")
    assert pool.stats()["in_use"] == 0
    pool.close()


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
def test_invalidate_retires_everything_made_before_it(
    cls: type, loop: asyncio.AbstractEventLoop
) -> None:
    """A server restart: idle resources close at once, those in use are retired
    when they come back, and a second report of the same failure (naming the
    generation it saw) does not drop the fresh ones.  A resource on its way out
    is not reset (a rollback on a server that is gone can hang)."""
    closed: list[object] = []
    resets: list[object] = []
    pool = Driver(cls, loop, max_size=3, close=closed.append, reset=resets.append)
    idle, held = pool.acquire(), pool.acquire()
    pool.release(idle)
    seen = pool.pool.generation_of(held)
    assert seen == pool.pool.generation == 0
    assert pool.invalidate(seen) is True
    assert closed == [idle] and pool.pool.generation == 1
    fresh = pool.acquire()
    assert fresh is not idle and pool.pool.generation_of(fresh) == 1
    pool.release(fresh)
    assert pool.invalidate(seen) is False  # the same failure, reported again
    assert closed == [idle]
    resets.clear()
    pool.release(held)  # made before: retired, not kept, not reset
    assert closed == [idle, held] and resets == []
    assert pool.acquire() is fresh
    assert pool.stats()["generation"] == 1 and pool.stats()["open"] == 1
    assert pool.pool.generation_of(object()) is None


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
def test_a_resource_made_across_an_invalidate_is_used_once(
    cls: type, loop: asyncio.AbstractEventLoop
) -> None:
    """``create`` was running when the pool was invalidated: its caller gets the
    resource, which is retired when it comes back (it may be of the old server)."""
    closed: list[object] = []
    holder: list[Driver] = []
    is_async = cls in (AsyncPool, AsyncKeyedPool)

    async def restart_then_make() -> object:
        await holder[0].pool.invalidate()
        return object()

    def create(*_: object) -> object:
        if holder[0].pool.generation:
            return object()
        if is_async:
            return restart_then_make()  # the restart lands mid-connect
        holder[0].pool.invalidate()
        return object()

    pool = Driver(cls, loop, max_size=1, close=closed.append, create=create)
    holder.append(pool)
    made = pool.acquire()
    assert pool.pool.generation_of(made) == 0 and pool.pool.generation == 1
    pool.release(made)
    assert closed == [made]


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
def test_check_is_told_the_idle_time_and_reset_may_refuse(
    cls: type, loop: asyncio.AbstractEventLoop
) -> None:
    now = [0.0]
    idles: list[float] = []
    refuse: list[object] = []

    def check(resource: object, idle: float) -> bool:
        idles.append(idle)
        return True

    def reset(resource: object) -> bool:
        return resource not in refuse

    closed: list[object] = []
    pool = Driver(
        cls,
        loop,
        max_size=1,
        check=check,
        check_idle_after=1.0,
        reset=reset,
        close=closed.append,
        clock=lambda: now[0],
    )
    first = pool.acquire()
    pool.release(first)
    now[0] = 0.5
    assert pool.acquire() is first and idles == []  # idle 0.5 s: not checked
    pool.release(first)
    now[0] = 3.0
    assert pool.acquire() is first and idles == [2.5]
    refuse.append(first)
    pool.release(first)  # reset returned False: discarded, not kept
    assert closed == [first] and pool.stats()["idle"] == 0


#: (options, what every front-end does with them: None accepts, an exception
#: class refuses).  One table for all four constructors: an option added to,
#: dropped from or checked differently by one front-end fails here.
OPTION_CASES: list[tuple[dict[str, Any], type[Exception] | None]] = [
    ({}, None),
    ({"timeout": 0}, None),
    ({"timeout": -1}, ValueError),
    ({"max_idle": 5.0}, None),
    ({"max_idle": 0}, ValueError),
    ({"max_lifetime": 60}, None),
    ({"max_lifetime": 0}, ValueError),
    ({"lifetime_jitter": 0.0}, None),
    ({"lifetime_jitter": 1.0}, ValueError),
    ({"check": lambda r, idle: True, "check_idle_after": 2.0}, None),
    ({"check_idle_after": -1}, ValueError),
    ({"reset": lambda r: True, "close": lambda r: None, "sever": lambda r: None}, None),
    ({"lifo": False}, None),
    ({"clock": lambda: 0.0}, None),
    ({"max_size": 0}, ValueError),
    ({"timeout_s": 1}, TypeError),  # a misspelt option is refused, never ignored
    ({"max_inflight": 4}, TypeError),
]


def _constructed(cls: type, options: dict[str, Any]) -> Any:
    keyed = cls in (KeyedPool, AsyncKeyedPool)
    options = {"max_size": 2, **options}
    if keyed:
        options.setdefault("max_per_key", options["max_size"])
        return cls(lambda key: object(), **options)
    return cls(object, **options)


def _refusal(cls: type, options: dict[str, Any]) -> tuple[type[BaseException], str] | None:
    """What constructing ``cls`` with ``options`` raised (its message with the
    class's name taken out), or None if it was accepted."""
    try:
        _constructed(cls, options)
    except Exception as e:
        return type(e), str(e).replace(cls.__name__, "<pool>")
    return None


@pytest.mark.parametrize(
    "options, refused",
    OPTION_CASES,
    # ids with no repr in them: a function's address differs between xdist workers
    ids=[f"{i}-{'-'.join(options) or 'none'}" for i, (options, _) in enumerate(OPTION_CASES)],
)
def test_every_front_end_accepts_and_refuses_the_same_options(
    options: dict[str, Any], refused: type[Exception] | None
) -> None:
    answers = {cls.__name__: _refusal(cls, options) for cls in FRONT_ENDS}
    if refused is None:
        assert set(answers.values()) == {None}, answers
    else:
        assert len(set(answers.values())) == 1, answers  # the same error, word for word
        assert all(a is not None and a[0] is refused for a in answers.values()), answers


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda c: c.__name__)
def test_every_signature_spells_out_the_options_table(cls: type) -> None:
    """help(), inspect.signature() and IDEs show each option with its default and
    type - the table's, in its order - after the constructor's own parameters,
    not ``**options``; a misspelt one is refused with the close match."""
    parameters = list(inspect.signature(cls).parameters.values())
    own = ["create", "max_size", "max_per_key" if "Keyed" in cls.__name__ else "max_overflow"]
    assert [p.name for p in parameters[:3]] == own
    hints = PoolOptions.__annotations__
    table = [(name, default, hints[name].__forward_arg__) for name, default in DEFAULTS.items()]
    assert [(p.name, p.default, p.annotation) for p in parameters[3:]] == table
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters[1:])
    assert list(hints) == list(DEFAULTS)  # the table's two halves name the same options
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "timeout: 'float' = 30.0" in text and "**options" not in text
    with pytest.raises(TypeError) as refused:
        _constructed(cls, {"timout": 1})
    assert str(refused.value) == (
        f"{cls.__name__}() got an unexpected keyword argument 'timout'. Did you mean 'timeout'?"
    )


@pytest.mark.slow  # mypy, ~7 s
def test_type_checkers_see_the_options_by_name_and_type(tmp_path: Path) -> None:
    """The signature help() shows is for people; mypy reads Unpack[PoolOptions]
    (and surge.db's written-out keywords, through its refusal's wrapper): a
    misspelt option and a wrong type are errors on every constructor."""
    pytest.importorskip("mypy")
    errors = mypy_errors(
        tmp_path,
        "import surge.db\n"
        "from surge.db import AsyncDBPool, DBPool\n"
        "from surge.pool import AsyncKeyedPool, AsyncPool, KeyedPool, Pool\n"
        "def main() -> None:\n"
        "    Pool(object, max_size=2, timeout=3.0, lifo=False, check=lambda r, idle: True)\n"
        "    Pool(object, max_size=2, timout=3.0)\n"
        "    AsyncPool(object, max_size=2, lifo=1.5)\n"
        "    KeyedPool(lambda k: object(), max_size=2, max_per_key=1, max_idel=1.0)\n"
        "    AsyncKeyedPool(lambda k: object(), max_size=2, max_per_key=1, timeout='x')\n"
        "    DBPool('sqlite:///x', max_sise=3)\n"
        "    AsyncDBPool('sqlite:///x', timeout='x')\n"
        "    surge.db.pool('sqlite:///x', max_sise=3)\n"
        "    surge.db.async_pool('sqlite:///x', lifo='x')\n",
    )
    lines = [line.split(":")[1] for line in errors]
    assert lines == ["6", "7", "8", "9", "10", "11", "12", "13"], errors
    assert 'Unexpected keyword argument "timout" for "Pool"' in errors[0]
    assert 'Argument "lifo" to "AsyncPool"' in errors[1]
    assert 'Unexpected keyword argument "max_idel" for "KeyedPool"' in errors[2]
    assert 'Argument "timeout" to "AsyncKeyedPool"' in errors[3]
    assert 'Unexpected keyword argument "max_sise" for "DBPool"' in errors[4]
    assert 'Argument "timeout" to "AsyncDBPool"' in errors[5]
    assert 'Unexpected keyword argument "max_sise"' in errors[6]  # pool(): DBPool's
    assert 'Argument "lifo"' in errors[7] and 'expected "bool"' in errors[7]


@pytest.mark.parametrize("options, refused", [c for c in OPTION_CASES if c[1] is None])
def test_every_front_end_reads_an_accepted_option_alike(
    options: dict[str, Any], refused: None
) -> None:
    """The same options end up as the same policy on every front-end."""
    pools = [_constructed(cls, options) for cls in FRONT_ENDS]
    seen = {
        (p._options, p._lifo, p._timed, p._unchecked_below, p._check, p._reset, p._close)
        for p in pools
    }
    assert len(seen) == 1, seen


@pytest.mark.parametrize(
    "sync, asynchronous", [(Pool, AsyncPool), (KeyedPool, AsyncKeyedPool)], ids=["plain", "keyed"]
)
def test_the_sync_and_async_twins_have_one_signature(sync: type, asynchronous: type) -> None:
    """The sizes each kind takes (``max_overflow`` for a plain pool, ``max_per_key``
    for a keyed one) are the same on both sides, and refused on the other kind."""

    def shape(cls: type) -> list[tuple[str, Any, Any]]:  # not the annotations: create's differ
        return [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]

    assert shape(sync) == shape(asynchronous)
    other = {"max_overflow": 1} if sync is KeyedPool else {"max_per_key": 1}
    assert _refusal(sync, other) == _refusal(asynchronous, other) is not None
