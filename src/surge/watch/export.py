"""The trace outputs, from the operations kept one by one:

- :func:`chrome_trace`: the Chrome Trace Event Format (one complete event,
  ``"ph": "X"``, per operation; a track per thread, task or greenlet; a process
  per watched process), which Perfetto and the Firefox Profiler open;
- :func:`write_html`: ``surge trace``'s waterfall page (its recorder and page,
  reused), the findings above it;
- :func:`export_otlp`: OpenTelemetry spans over OTLP/HTTP through the
  OpenTelemetry SDK and its exporter (the ``watch`` extra): a root span for the
  run, a client span per operation, an HTTP request inside an AWS call as that
  call's child.
"""

from __future__ import annotations

import contextlib
import html
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from surge.trace.redact import safe_url
from surge.watch.recorder import site_of

#: Spans sent per OTLP request.
OTLP_BATCH = 512
#: Seconds to reach the collector before anything is sent: a collector that is
#: not there is said in one line at once, not after the exporter's retries.
OTLP_CONNECT_TIMEOUT = 3.0
#: Seconds the exporter may spend per batch, its retries included.
OTLP_TIMEOUT = 10.0


def _ops(runs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for run in runs:
        for op in run["ops"]:
            yield run, op


def chrome_trace(runs: list[dict[str, Any]], command: str) -> dict[str, Any]:
    """The runs' operations as a Chrome trace (times in microseconds since the
    first run began)."""
    zero = min((run["started"] for run in runs), default=0.0)
    events: list[dict[str, Any]] = []
    for run in runs:
        pid = run["pid"]
        offset = (run["started"] - zero) * 1e6
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "args": {"name": command[:200] or "python"},
            }
        )
        tids: dict[str, int] = {}
        for op in run["ops"]:
            tid = tids.get(op["who"])
            if tid is None:
                tid = tids[op["who"]] = len(tids) + 1
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": pid,
                        "tid": tid,
                        "args": {"name": op["who"]},
                    }
                )
            args = {
                k: v
                for k, v in op.items()
                if k not in ("what", "start_s", "duration_s", "who", "id", "parent", "site")
            }
            site = site_of(run, op)
            if site is not None:
                args["site"] = site
            events.append(
                {
                    "name": op["what"],
                    "cat": op["kind"],
                    "ph": "X",
                    "ts": round(offset + op["start_s"] * 1e6, 3),
                    "dur": round(op["duration_s"] * 1e6, 3),
                    "pid": pid,
                    "tid": tid,
                    "args": args,
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(runs: list[dict[str, Any]], command: str, path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(chrome_trace(runs, command), out, separators=(",", ":"))


def _scheme(op: dict[str, Any]) -> str:
    marks = op.get("marks") or {}
    return "https" if "tls_end" in marks or op["peer"].endswith(":443") else "http"


def trace_page_data(runs: list[dict[str, Any]], command: str) -> dict[str, Any]:
    """The data of ``surge trace``'s page: each HTTP request and database call a
    row, its phases from the marks recorded."""
    from surge.http.timings import Timings
    from surge.trace.recorder import TraceRecorder

    recorder = TraceRecorder(title=command[:200])
    zero = recorder.clock0
    line = 0
    for run, op in _ops(runs):
        kind = op["kind"]
        if kind not in ("http", "db.connect", "db.query"):
            continue
        line += 1
        base = zero + (run["started"] - runs[0]["started"])
        start = base + op["start_s"]
        end = start + op["duration_s"]
        marks = {k: base + v for k, v in (op.get("marks") or {}).items()}
        timings = Timings(start)
        if kind == "http":
            _method, _, path = op["what"].partition(" ")
            url = f"{_scheme(op)}://{op['peer']}{path}"
            for name in ("dns_start", "dns_end", "connect_start", "tcp_end", "tls_end"):
                setattr(timings, name, marks.get(name))
            timings.connected = marks.get("connected", marks.get("tls_end", marks.get("tcp_end")))
            timings.sent = marks.get("sent")
            timings.first_byte = marks.get("first_byte")
        else:
            url = f"{op['library']}://{op['peer']}/{op['what']}"
            timings.connect_start = start if kind == "db.connect" else None
            timings.tcp_end = marks.get("tcp_end") if kind == "db.connect" else None
            timings.connected = end if kind == "db.connect" else start
            timings.sent = None if kind == "db.connect" else start
        timings.done = end
        record = {
            "url": url,
            "status": op.get("status"),
            "error": op.get("error"),
            "bytes": op.get("bytes", 0),
            "line": line,
        }
        recorder.add(record, start, end, timings)
    page = recorder.data()
    page["headline"] = headline(runs)
    if any(run["by_kind"].get("db.connect") for run in runs):
        page["labels"] = {
            "connect": "connect (HTTP: TCP; a database's: TCP, TLS and login)"
            if any(run["by_kind"].get("http") for run in runs)
            else "database connect (TCP, TLS and login)"
        }
    return page


def headline(runs: list[dict[str, Any]]) -> str:
    """What the page's rows are, each kind counted apart: ``200 database connects,
    200 queries`` (never one count of "requests" for them all)."""
    kinds = {"http": 0, "db.connect": 0, "db.query": 0}
    for run in runs:
        for kind in kinds:
            kinds[kind] += run["by_kind"].get(kind, 0)
    parts = [
        f"{count:,} {one if count == 1 else many}"
        for kind, one, many in (
            ("http", "HTTP request", "HTTP requests"),
            ("db.connect", "database connect", "database connects"),
            ("db.query", "query", "queries"),
        )
        if (count := kinds[kind])
    ]
    return ", ".join(parts) or "0 HTTP requests"


def _sites_html(finding: dict[str, Any]) -> str:
    """A finding's call sites, each linked to its file (``file://``, the line in
    the fragment, as editors' URL handlers take it)."""
    from pathlib import Path

    from surge.watch.findings import site_label

    items = []
    for site in finding.get("sites") or ():
        label = html.escape(f"{site_label(site)} ({site['count']:,} calls)")
        path = site.get("file")
        if path and Path(path).is_absolute():
            href = html.escape(f"{Path(path).as_uri()}#L{site['line']}", quote=True)
            label = f'<a class="site" href="{href}">{label}</a>'
        items.append(f"<li>{label}</li>")
    if not items:
        return ""
    return '<p>the line to fix:</p><ul class="sites">' + "".join(items) + "</ul>"


def findings_html(findings: list[dict[str, Any]], partial: list[str] | None = None) -> str:
    """The findings as the section the page shows above its waterfall; ``partial``:
    why the recording is partial, a sentence each."""
    parts = ['<h2>surge watch: findings</h2>\n<div id="findings">']
    for note in partial or ():
        parts.append(f'<p class="partial"><b>partial:</b> {html.escape(note)}</p>')
    if not findings:
        parts.append('<p class="muted">None: nothing in this run matched a finding.</p>')
    for finding in findings:
        evidence = ", ".join(
            f"{html.escape(str(k))}: {html.escape(json.dumps(v))}"
            for k, v in finding["evidence"].items()
        )
        parts.append(
            '<div class="card alert finding">'
            f"<b>{html.escape(finding['id'])}</b>"
            f"<p>{html.escape(finding['message'])}</p>"
            f'<p class="muted">evidence: {evidence}</p>'
            f"<p>fix: {html.escape(finding['fix'])}</p>{_sites_html(finding)}</div>"
        )
    parts.append("</div>")
    return "\n".join(parts)


def write_html(
    runs: list[dict[str, Any]], command: str, path: str, partial: list[str] | None = None
) -> None:
    from surge.trace.html import render

    page = render(trace_page_data(runs, command))
    findings = [f for run in runs for f in run["findings"]]
    anchor = '<div class="verdict" id="verdict"></div>'
    page = page.replace(anchor, anchor + "\n" + findings_html(findings, partial), 1)
    page = page.replace("<title>surge trace</title>", "<title>surge watch</title>", 1)
    with open(path, "w", encoding="utf-8") as out:
        out.write(page)


def otlp_endpoint(url: str) -> str:
    """An OTLP/HTTP collector's base URL (``http://host:4318``) as its traces
    endpoint (``.../v1/traces``); a URL with a path is taken as it is."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--otlp needs an http(s) URL, not {safe_url(url)!r}")
    if parts.path in ("", "/"):
        return url.rstrip("/") + "/v1/traces"
    return url


def _attributes(op: dict[str, Any], site: dict[str, Any] | None = None) -> dict[str, Any]:
    host, _, port = op["peer"].rpartition(":")
    attributes: dict[str, Any] = {
        "surge.kind": op["kind"],
        "surge.library": op["library"],
        "surge.who": op["who"],
        "server.address": host or op["peer"],
    }
    if port.isdigit():
        attributes["server.port"] = int(port)
    kind = op["kind"]
    if kind == "http":
        method, _, path = op["what"].partition(" ")
        attributes["http.request.method"] = method
        attributes["url.path"] = path
    elif kind.startswith("db."):
        verb, _, table = op["what"].partition(" ")
        attributes["db.operation.name"] = verb
        if table:
            attributes["db.collection.name"] = table
    elif kind == "aws":
        service, _, method = op["what"].partition(".")
        attributes.update({"rpc.system": "aws-api", "rpc.service": service, "rpc.method": method})
    if "status" in op:
        attributes["http.response.status_code"] = op["status"]
    if "bytes" in op:
        attributes["http.response.body.size"] = op["bytes"]
    if "error" in op:
        attributes["error.type"] = op["error"]
    if site:  # OpenTelemetry's code.* attributes: where the program made the call
        attributes["code.filepath"] = site["file"]
        attributes["code.lineno"] = site["line"]
        attributes["code.function"] = site["function"]
    marks = op.get("marks") or {}
    for first, then, name in (
        ("dns_start", "dns_end", "dns"),
        ("connect_start", "tcp_end", "connect"),
        ("tcp_end", "tls_end", "tls"),
        ("sent", "first_byte", "wait"),
    ):
        if first in marks and then in marks:
            attributes[f"surge.{name}_ms"] = round((marks[then] - marks[first]) * 1000.0, 3)
    return attributes


def export_otlp(runs: list[dict[str, Any]], command: str, url: str) -> int:
    """Send every kept operation as a span to the OTLP/HTTP collector at ``url``;
    returns the number of spans sent.  Raises ``RuntimeError`` when the collector
    refuses them or cannot be reached."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    endpoint = otlp_endpoint(url)
    finished = InMemorySpanExporter()
    program = command[:200] or "python"
    # The program's name only (command_label), never process.command_line/_args.
    name = program.partition(" (+")[0]
    provider = TracerProvider(
        resource=Resource.create({"service.name": "surge-watch", "process.command": name})
    )
    provider.add_span_processor(SimpleSpanProcessor(finished))
    tracer = provider.get_tracer("surge.watch")
    for run in runs:
        zero_ns = int(run["started"] * 1e9)
        root = tracer.start_span(
            program, start_time=zero_ns, attributes={"process.pid": run["pid"]}
        )
        root_context = trace.set_span_in_context(root)
        calls: dict[int, Any] = {}
        ops = sorted(run["ops"], key=lambda op: op["kind"] != "aws")  # calls first
        for op in ops:
            start = zero_ns + int(op["start_s"] * 1e9)
            end = start + int(op["duration_s"] * 1e9)
            parent = calls.get(op.get("parent", -1), root_context)
            span = tracer.start_span(
                op["what"],
                context=parent,
                kind=trace.SpanKind.CLIENT,
                start_time=start,
                attributes=_attributes(op, site_of(run, op)),
            )
            if "error" in op:
                span.set_status(trace.Status(trace.StatusCode.ERROR, op["error"]))
            if op["kind"] == "aws":
                calls[op["id"]] = trace.set_span_in_context(span)
            span.end(end_time=end)
        root.end(end_time=zero_ns + int(run["wall_s"] * 1e9))
    spans = finished.get_finished_spans()
    provider.shutdown()
    _reachable(endpoint)
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=OTLP_TIMEOUT)
    try:
        with _quiet("opentelemetry.exporter"):
            for i in range(0, len(spans), OTLP_BATCH):
                if exporter.export(spans[i : i + OTLP_BATCH]) is not SpanExportResult.SUCCESS:
                    raise RuntimeError(
                        f"the OTLP collector at {safe_url(endpoint)} did not accept the spans"
                    )
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    return len(spans)


def _reachable(endpoint: str) -> None:
    """Raise ``RuntimeError`` (one line) if nothing listens at the collector."""
    import socket

    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), OTLP_CONNECT_TIMEOUT).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RuntimeError(
            f"the OTLP collector at {safe_url(endpoint)} cannot be reached: {reason}"
        ) from None


@contextlib.contextmanager
def _quiet(prefix: str) -> Iterator[None]:
    """The loggers under ``prefix`` silenced (the exporter logs each retry on
    stderr; the one line that matters is watch's own)."""
    import logging

    names = [n for n in logging.root.manager.loggerDict if n.startswith(prefix)]
    loggers = [logging.getLogger(prefix), *map(logging.getLogger, names)]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was in zip(loggers, before, strict=True):
            logger.disabled = was
