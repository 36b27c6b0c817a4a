"""What the thread and asyncio front-ends share: options, lifetimes, messages."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from surge.errors import PoolTimeout
from surge.pool._core import INF

log = logging.getLogger("surge.pool")


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


#: FrontEnd's keyword arguments, which every public constructor takes.
FRONT_END_OPTIONS = (
    "timeout",
    "max_idle",
    "max_lifetime",
    "lifetime_jitter",
    "check",
    "check_idle_after",
    "reset",
    "close",
    "sever",
    "clock",
)


def front_end_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """FrontEnd's arguments out of a public constructor's (its ``locals()``)."""
    return {name: arguments[name] for name in FRONT_END_OPTIONS}


class FrontEnd:
    """What every front-end (thread or asyncio, plain or keyed) keeps of its
    options and callbacks, set once here; ``generation`` and ``generation_of``,
    read from its core."""

    _core: Any

    def __init__(
        self,
        *,
        timeout: float,
        max_idle: float | None,
        max_lifetime: float | None,
        lifetime_jitter: float,
        check: Callable[[Any, float], object] | None,
        check_idle_after: float,
        reset: Callable[[Any], object] | None,
        close: Callable[[Any], object] | None,
        sever: Callable[[Any], object] | None,
        clock: Callable[[], float],
    ) -> None:
        self._options = Options(timeout, max_idle, max_lifetime, lifetime_jitter, check_idle_after)
        self._check = check
        #: Seconds idle below which a reused resource skips ``check`` (inf: no check).
        self._unchecked_below = check_idle_after if check is not None else float("inf")
        self._reset = reset
        self._close = close
        self._sever = sever
        self._clock = clock
        #: In a forked child: the parent's checked-out resources, by id (kept
        #: alive so that no new resource takes an id), which release and discard
        #: drop without a word.
        self._inherited: dict[int, Any] = {}

    @property
    def generation(self) -> int:
        """How many times ``invalidate`` moved the pool on."""
        return int(self._core.generation)

    def generation_of(self, resource: Any) -> int | None:
        """The generation a checked-out resource was made in (None if it is not
        checked out from this pool): pass it to ``invalidate``."""
        return self._core.generation_of(resource)  # type: ignore[no-any-return]


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


def check_passed(result: object) -> bool:
    """A check passes unless it returns False (or raises, handled by the caller)."""
    return result is not False
