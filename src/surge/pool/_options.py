"""What the thread and asyncio front-ends share: options, lifetimes, messages.

Every public constructor takes the same options (``PoolOptions``) with the same
defaults (``DEFAULTS``), checked here once, so the four front-ends cannot
drift apart in what they accept (tests/pool/test_front_ends.py drives all four
through one table of accepted and refused options).  The same table is each
constructor's signature (``FrontEnd.__init_subclass__``): ``help(Pool)`` and
``inspect.signature(Pool)`` show every option with its default, while type
checkers read ``**options: Unpack[PoolOptions[R]]``.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar

from surge._keywords import Entry, keywords_of, spelt_out, unexpected
from surge._log import logger as get_logger
from surge.errors import PoolTimeout
from surge.pool import _fork
from surge.pool._core import INF, AsKeyed, PoolCore
from surge.pool._keyed_core import KeyedCore

log = get_logger("surge.pool")

R = TypeVar("R")


class PoolOptions(TypedDict, Generic[R], total=False):
    """The keyword options every front-end takes besides its sizes (see
    :class:`surge.pool.Pool` for what each does; an async pool's callbacks may
    be coroutine functions)."""

    timeout: float
    max_idle: float | None
    max_lifetime: float | None
    lifetime_jitter: float
    check: Callable[[R, float], object] | None
    check_idle_after: float
    reset: Callable[[R], object] | None
    close: Callable[[R], object] | None
    sever: Callable[[R], object] | None
    lifo: bool
    clock: Callable[[], float]


#: Each option's default: what a constructor called without it gets.
DEFAULTS: dict[str, Any] = {
    "timeout": 30.0,
    "max_idle": None,
    "max_lifetime": None,
    "lifetime_jitter": 0.1,
    "check": None,
    "check_idle_after": 0.0,
    "reset": None,
    "close": None,
    "sever": None,
    "lifo": True,
    "clock": time.monotonic,
}


def _table() -> list[Entry]:
    """The options as signature entries: each name with its default and its type
    (as written in PoolOptions: a string, the form the rest of a signature has)."""
    hints = PoolOptions.__annotations__
    return [
        (name, DEFAULTS[name], getattr(hints[name], "__forward_arg__", hints[name]))
        for name in DEFAULTS
    ]


@dataclass(frozen=True, slots=True)
class Options:
    """The policy knobs of a pool, validated once."""

    timeout: float
    max_idle: float | None
    max_lifetime: float | None
    lifetime_jitter: float
    check_idle_after: float

    def __post_init__(self) -> None:
        if self.timeout < 0:
            raise ValueError(f"timeout must be 0 or more, not {self.timeout}")
        if self.max_lifetime is not None and self.max_lifetime <= 0:
            raise ValueError(f"max_lifetime must be positive, not {self.max_lifetime}")
        if not 0 <= self.lifetime_jitter < 1:
            raise ValueError(f"lifetime_jitter must be in [0, 1), not {self.lifetime_jitter}")
        if self.check_idle_after < 0:
            raise ValueError(f"check_idle_after must be 0 or more, not {self.check_idle_after}")

    def expires_at(self, now: float, rand: Callable[[], float] = random.random) -> float:
        """When a resource created at ``now`` reaches the end of its life.

        Lifetimes are shortened by up to ``lifetime_jitter`` (10% by default) at
        random, so resources created together (a pool warming up) do not all
        expire together; never lengthened, so a ``max_lifetime`` set below a
        server's idle timeout stays below it.
        """
        if self.max_lifetime is None:
            return INF
        return now + self.max_lifetime * (1.0 - self.lifetime_jitter * rand())

    def wants_check(self, now: float, idle_since: float) -> bool:
        return now - idle_since >= self.check_idle_after


def _with_defaults(owner: type, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` completed with the defaults; a name no front-end knows is refused
    as Python refuses an unknown keyword argument (with the closest of
    ``owner``'s keywords)."""
    for name in given:
        if name not in DEFAULTS:
            raise unexpected(f"{owner.__name__}()", name, keywords_of(owner))
    return {**DEFAULTS, **given}


class FrontEnd:
    """What every front-end (thread or asyncio, plain or keyed) keeps of its
    options and callbacks, set once here; the cores built from them; and
    ``generation``, ``generation_of`` and the repr, read from its core.

    ``create`` is taken as ``create(key)`` (a plain pool's is wrapped, see
    :func:`keyless`); ``_ops`` is the core with the keyed core's signatures
    (:class:`surge.pool._core.AsKeyed` for a plain one), which every step but
    the hot paths calls, so that each step is written once for both kinds."""

    _core: Any  # PoolCore or KeyedCore
    _ops: Any  # KeyedCore, or AsKeyed(PoolCore)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A front-end whose constructor takes ``**options``: its help(),
        # inspect.signature() and IDEs' hints show each option of the table with
        # its default instead (type checkers read the Unpack[PoolOptions]).
        super().__init_subclass__(**kwargs)
        init: Any = cls.__dict__.get("__init__")
        options = None if init is None else inspect.signature(init).parameters.get("options")
        if options is not None and options.kind is inspect.Parameter.VAR_KEYWORD:
            init.__signature__ = spelt_out(init, _table())

    def __init__(self, create: Callable[[Any], Any], given: dict[str, Any]) -> None:
        options = _with_defaults(type(self), given)
        self._options = Options(
            options["timeout"],
            options["max_idle"],
            options["max_lifetime"],
            options["lifetime_jitter"],
            options["check_idle_after"],
        )
        self._make = create
        self._lifo: bool = options["lifo"]
        check = self._check = options["check"]
        #: Seconds idle below which a reused resource skips ``check`` (inf: no check).
        self._unchecked_below = options["check_idle_after"] if check is not None else INF
        self._reset = options["reset"]
        self._close = options["close"]
        self._sever = options["sever"]
        self._clock: Callable[[], float] = options["clock"]
        # Checkout reads the clock only when some option depends on time (or to
        # time a wait): a clock read is a tenth of a checkout's cost.
        self._timed = (
            self._options.max_idle is not None
            or self._options.max_lifetime is not None
            or check is not None
        )
        #: In a forked child: the parent's checked-out resources, by id (kept
        #: alive so that no new resource takes an id), which release and discard
        #: drop without a word.
        self._inherited: dict[int, Any] = {}
        _fork.track(self)

    def _plain_core(
        self, max_size: int, max_overflow: int, make_wake: Callable[[], Any]
    ) -> PoolCore[Any]:
        """A plain pool's core (``_core``, and ``_ops`` over it); ``make_wake``
        makes a waiter's wake (a lock, a future: the thread or asyncio side's)."""
        core: PoolCore[Any] = PoolCore(
            max_size,
            max_overflow,
            lifo=self._lifo,
            max_idle=self._options.max_idle,
            lifetimes=bool(self._options.max_lifetime),
            make_wake=make_wake,
        )
        self._ops = AsKeyed(core)
        return core

    def _keyed_core(
        self, max_size: int, max_per_key: int, make_wake: Callable[[], Any]
    ) -> KeyedCore[Any, Any]:
        """A keyed pool's core (``_core`` and ``_ops``: it takes keys already)."""
        core: KeyedCore[Any, Any] = KeyedCore(
            max_size,
            max_per_key,
            lifo=self._lifo,
            max_idle=self._options.max_idle,
            make_wake=make_wake,
        )
        self._ops = core
        return core

    @property
    def generation(self) -> int:
        """How many times ``invalidate`` moved the pool on."""
        return int(self._core.generation)

    def generation_of(self, resource: Any) -> int | None:
        """The generation a checked-out resource was made in (None if it is not
        checked out from this pool): pass it to ``invalidate``."""
        return self._core.generation_of(resource)  # type: ignore[no-any-return]

    def set_max_lifetime(self, seconds: float | None) -> None:
        """Change ``max_lifetime`` for resources created from now on."""
        self._options = dataclasses.replace(self._options, max_lifetime=seconds)
        if seconds is not None:  # checkout reads the clock from here on
            self._timed = True
            self._core.lifetimes_on()

    def _timed_out(self, timeout: float, key: Any) -> PoolTimeout:
        """The PoolTimeout of a waiter that waited ``timeout`` seconds for ``key``."""
        return timeout_error(timeout, self._core.stats(), key)

    def _forked(self) -> None:
        """In a forked child: forget the parent's resources, each handed to
        ``sever`` (see surge.pool._fork); its waiters are not this process's."""
        self._inherited = _fork.forget(self._core, self._sever)

    def _drop_inherited(self, resource: Any) -> bool:
        """Whether ``resource`` is the parent's (in a forked child): then it is
        forgotten here, and its slot was never this process's to give back."""
        return self._inherited.pop(id(resource), None) is not None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._core.describe()}>"


def keyless(create: Callable[[], Any]) -> Callable[[Any], Any]:
    """A plain pool's ``create()`` as ``create(key)``, the form the shared steps call."""
    return lambda key: create()


def timeout_error(timeout: float, stats: dict[str, Any], key: Any = None) -> PoolTimeout:
    """The message says how big the pool is, how many are in use, and how many wait."""
    size = f"max_size={stats['max_size']}"
    if stats.get("max_overflow"):
        size += f" + max_overflow={stats['max_overflow']}"
    if "max_per_key" in stats:
        size += f", max_per_key={stats['max_per_key']}"
    where = f" for key {key!r}" if key is not None else ""
    return PoolTimeout(
        f"no resource available{where} within {timeout:g} s: pool of {size}, "
        f"{stats['in_use']} in use, {stats['waiting']} waiting"
    )


def callback_raised(what: str, resource: object) -> None:
    """A ``check`` or ``reset`` raised an Exception: the resource fails (it is
    discarded), and the error is logged, not raised."""
    log.info("%s of %r raised; discarding it", what, resource, exc_info=True)


def close_failed(resource: object) -> None:
    """A ``close`` raised an Exception: logged, never raised (the pool is done with it)."""
    log.warning("closing %r failed", resource, exc_info=True)
