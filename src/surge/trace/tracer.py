"""What the bulk engine calls for every record of a traced run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from surge.http.timings import Timings


class Tracer(Protocol):
    """``add`` is called once per record, as it is made, on the engine's loop:
    ``start`` and ``end`` are ``time.perf_counter()`` seconds, ``timings`` the
    last attempt's (None when the input never became a request)."""

    def add(
        self, record: Mapping[str, Any], start: float, end: float, timings: Timings | None
    ) -> None: ...


class Tee:
    """Several tracers as one (the CLI's --trace and --har together)."""

    def __init__(self, *tracers: Tracer) -> None:
        self.tracers = tracers

    def add(
        self, record: Mapping[str, Any], start: float, end: float, timings: Timings | None
    ) -> None:
        for tracer in self.tracers:
            tracer.add(record, start, end, timings)
