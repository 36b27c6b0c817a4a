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

import html
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

#: Spans sent per OTLP request.
OTLP_BATCH = 512


def _ops(runs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for run in runs:
        for op in run["ops"]:
            yield run, op


def chrome_trace(runs: list[dict[str, Any]], command: list[str]) -> dict[str, Any]:
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
                "args": {"name": " ".join(command)[:200] or "python"},
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
                if k not in ("what", "start_s", "duration_s", "who", "id", "parent")
            }
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


def write_chrome_trace(runs: list[dict[str, Any]], command: list[str], path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(chrome_trace(runs, command), out, separators=(",", ":"))


def _scheme(op: dict[str, Any]) -> str:
    marks = op.get("marks") or {}
    return "https" if "tls_end" in marks or op["peer"].endswith(":443") else "http"


def trace_page_data(runs: list[dict[str, Any]], command: list[str]) -> dict[str, Any]:
    """The data of ``surge trace``'s page: each HTTP request and database call a
    row, its phases from the marks recorded."""
    from surge.http.timings import Timings
    from surge.trace.recorder import TraceRecorder

    recorder = TraceRecorder(title=" ".join(command)[:200])
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
    return recorder.data()


def findings_html(findings: list[dict[str, Any]]) -> str:
    """The findings as the section the page shows above its waterfall."""
    parts = ['<h2>surge watch: findings</h2>\n<div id="findings">']
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
            f"<p>fix: {html.escape(finding['fix'])}</p></div>"
        )
    parts.append("</div>")
    return "\n".join(parts)


def write_html(runs: list[dict[str, Any]], command: list[str], path: str) -> None:
    from surge.trace.html import render

    page = render(trace_page_data(runs, command))
    findings = [f for run in runs for f in run["findings"]]
    anchor = '<div class="verdict" id="verdict"></div>'
    page = page.replace(anchor, anchor + "\n" + findings_html(findings), 1)
    page = page.replace("<title>surge trace</title>", "<title>surge watch</title>", 1)
    with open(path, "w", encoding="utf-8") as out:
        out.write(page)


def otlp_endpoint(url: str) -> str:
    """An OTLP/HTTP collector's base URL (``http://host:4318``) as its traces
    endpoint (``.../v1/traces``); a URL with a path is taken as it is."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--otlp needs an http(s) URL, not {url!r}")
    if parts.path in ("", "/"):
        return url.rstrip("/") + "/v1/traces"
    return url


def _attributes(op: dict[str, Any]) -> dict[str, Any]:
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


def export_otlp(runs: list[dict[str, Any]], command: list[str], url: str) -> int:
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
    program = " ".join(command)[:200] or "python"
    provider = TracerProvider(
        resource=Resource.create({"service.name": "surge-watch", "process.command_line": program})
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
                attributes=_attributes(op),
            )
            if "error" in op:
                span.set_status(trace.Status(trace.StatusCode.ERROR, op["error"]))
            if op["kind"] == "aws":
                calls[op["id"]] = trace.set_span_in_context(span)
            span.end(end_time=end)
        root.end(end_time=zero_ns + int(run["wall_s"] * 1e9))
    spans = finished.get_finished_spans()
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=30)
    try:
        for i in range(0, len(spans), OTLP_BATCH):
            if exporter.export(spans[i : i + OTLP_BATCH]) is not SpanExportResult.SUCCESS:
                raise RuntimeError(f"the OTLP collector at {endpoint} did not accept the spans")
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
        provider.shutdown()
    return len(spans)
