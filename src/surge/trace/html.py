"""The trace page: one self-contained HTML file (inline script and style, the data
embedded as JSON), so it opens from disk, offline, in any browser."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from surge.sinks import Sink, open_replacement

_PLACEHOLDER = "/*SURGE_TRACE_DATA*/"


def render(data: dict[str, Any]) -> str:
    """The page for :meth:`TraceRecorder.data`'s output."""
    page = files("surge.trace").joinpath("page.html").read_text(encoding="utf-8")
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False)
    # Inside <script>, "</script>" (or "<!--") in a URL would end the block: JSON
    # may spell every "<" as \u003c, and the parser reads it back as "<".
    payload = payload.replace("<", "\\u003c")
    return page.replace(_PLACEHOLDER, payload, 1)


def write_html(data: dict[str, Any], path: str | Sink) -> None:
    """Write the page to ``path`` (or to a sink :func:`surge.sinks.open_replacement`
    opened for it): whole, or not at all - a write that fails is a
    ``SinkError`` naming the file, and any page there before stays."""
    sink = open_replacement(path) if isinstance(path, str) else path
    try:
        sink.write(render(data).encode("utf-8"))
        sink.commit()
    except BaseException:
        sink.discard()
        raise
