"""What the bulk engine calls for every record of a traced run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from surge.http.timings import Timings

#: How often a traced run measures its event loop's lag, seconds.
LAG_EVERY = 0.05
#: Requests a trace page draws in its waterfall, by default; a sample beyond
#: (recorder.py's; here so that ``surge fetch``'s options need no recorder).
DEFAULT_ROWS = 2000


class Tracer(Protocol):
    """``add`` is called once per record, as it is made, on the engine's loop:
    ``start`` and ``end`` are ``time.perf_counter()`` seconds, ``timings`` the
    last attempt's (None when the input never became a request; earlier hops of
    a redirect through ``Timings.previous``), ``retried``: earlier attempts came
    first (their time is between ``start`` and the last attempt's).
    ``loop_lag`` is called every :data:`LAG_EVERY` seconds while a traced run
    is active with how late the loop ran a timer: a busy client delays every
    phase that ends with an event, and the page says so."""

    def add(
        self,
        record: Mapping[str, Any],
        start: float,
        end: float,
        timings: Timings | None,
        retried: bool = False,
    ) -> None: ...

    def loop_lag(self, when: float, lag: float) -> None: ...


class Tee:
    """Several tracers as one (the CLI's --trace and --har together)."""

    def __init__(self, *tracers: Tracer) -> None:
        self.tracers = tracers

    def add(
        self,
        record: Mapping[str, Any],
        start: float,
        end: float,
        timings: Timings | None,
        retried: bool = False,
    ) -> None:
        for tracer in self.tracers:
            tracer.add(record, start, end, timings, retried)

    def loop_lag(self, when: float, lag: float) -> None:
        for tracer in self.tracers:
            tracer.loop_lag(when, lag)
