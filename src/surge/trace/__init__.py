"""See where the time goes: per-request phases as waterfalls, HAR, and ``surge trace``.

    recorder = TraceRecorder()
    async for record in surge.fetch(urls, trace=recorder):
        ...
    write_html(recorder.data(), "trace.html")

:mod:`surge.trace.phases` cuts a request's time into phases (the one definition
every view uses), :mod:`surge.trace.recorder` gathers a run in bounded memory,
:mod:`surge.trace.html` draws the page, :mod:`surge.trace.har` streams HAR 1.2.
The names below load on first use: the engine imports only the small
:mod:`surge.trace.tracer`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PHASES": "surge.trace.phases",
    "HarWriter": "surge.trace.har",
    "TraceRecorder": "surge.trace.recorder",
    "Tee": "surge.trace.tracer",
    "render": "surge.trace.html",
    "write_html": "surge.trace.html",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'surge.trace' has no attribute {name!r}")
