"""The registry behind ``surge doctor``: ``Finding``, ``run_checks()`` and the
``_check`` decorator.  The checks live by subject in ``_gevent`` (patching and
pyOpenSSL), ``_runtime`` (limits, event loop, parser) and ``_costs``
(measurements), imported at the end of this module in the order they run:
state checks before measurements."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    """One check's result: ``id`` is stable (scripts may match on it), ``fix`` says
    what to do (empty on ``ok``), ``measured`` holds the numbers (the same keys for
    every finding of one id, None where not known), ``error`` the exception the
    check itself raised (its status is then ``warn``), else None."""

    id: str
    status: Status
    message: str
    fix: str = ""
    measured: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Verdict:
    """What a check returns; ``run_checks`` adds the id it was registered under."""

    status: Status
    message: str
    fix: str = ""
    measured: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Context:
    concurrency: int | None
    measure: bool = True


_Check = Callable[[_Context], _Verdict]
_CHECKS: dict[str, _Check] = {}
#: Each check's ``measured`` keys: its findings carry exactly these.
_MEASURES: dict[str, tuple[str, ...]] = {}


def _check(check_id: str, measures: tuple[str, ...]) -> Callable[[_Check], _Check]:
    def register(function: _Check) -> _Check:
        _CHECKS[check_id] = function
        _MEASURES[check_id] = measures
        return function

    return register


def check_ids() -> list[str]:
    """Every check's id, in the order they run."""
    return list(_CHECKS)


def run_checks(
    *, concurrency: int | None = None, only: Iterable[str] | None = None, measure: bool = True
) -> list[Finding]:
    """Check this interpreter and return one ``Finding`` per check, in order.

    ``concurrency``: the number of connections the program means to hold open, an
    int >= 1 (``fd-limit`` then fails when the hard limit is below it; without it,
    warns below a typical 1,000).  ``only``: the id or ids of the checks to run (all
    by default).  ``measure=False``: run nothing that takes time or a child
    interpreter (the SSLContext cost, the uvloop/httptools import checks), report it
    as skipped.  A check that raises becomes a ``warn`` finding with its ``error``
    set; it never stops the others.
    """
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ValueError(f"concurrency must be an int >= 1, not {concurrency!r}")
    if isinstance(only, str):  # one id, not its characters
        only = [only]
    wanted = list(_CHECKS) if only is None else list(only)
    unknown = [check_id for check_id in wanted if check_id not in _CHECKS]
    if unknown:
        raise ValueError(f"unknown check id(s): {', '.join(unknown)}; known: {', '.join(_CHECKS)}")
    context = _Context(concurrency=concurrency, measure=measure)
    findings = []
    for check_id in _CHECKS:  # registration order: state checks before measurements
        if check_id not in wanted:
            continue
        keys = _MEASURES.get(check_id, ())
        try:
            verdict = _CHECKS[check_id](context)
            unregistered = sorted(set(verdict.measured) - set(keys))
            if unregistered:
                raise RuntimeError(f"measured keys not registered: {', '.join(unregistered)}")
        except Exception as e:  # a broken check is a finding, not a crash
            error = f"{type(e).__name__}: {e}"
            findings.append(
                Finding(
                    check_id,
                    "warn",
                    f"the check itself failed: {error}",
                    "report this to surge's maintainers with the message",
                    dict.fromkeys(keys),
                    error,
                )
            )
            continue
        findings.append(
            Finding(
                check_id,
                verdict.status,
                verdict.message,
                "" if verdict.status == "ok" else verdict.fix,
                {key: verdict.measured.get(key) for key in keys},
            )
        )
    return findings


# Registered in this order (imported last: they use the registry above).
from surge.doctor import _gevent, _runtime, _costs  # noqa: E402, F401, I001
from surge.bulk.limits import FD_HEADROOM  # noqa: E402, F401 - tests read it here
