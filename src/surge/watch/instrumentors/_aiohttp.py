"""aiohttp through its public hook, ``TraceConfig``: one is added to every
``ClientSession`` when it is made (the wrapper only adds it to the session's
``trace_configs``).

The signals, and what each records: ``on_request_start`` (the request begins),
``on_connection_queued_start/end`` (a wait for the connector's limit: a
``pool.wait``), ``on_dns_resolvehost_start/end``, ``on_connection_create_start/
end`` (TCP and TLS together: aiohttp does not separate them; over https the
handshake is counted, its time inside the connect's),
``on_request_headers_sent`` (sent), ``on_request_end`` (status and headers in:
the request ends there; aiohttp has no signal for the body's end, so its
``receive`` phase is not seen) and ``on_request_exception``.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

from surge.watch.instrument import Instrumentor, error_class, failed
from surge.watch.instrumentors._http_client import request_line
from surge.watch.recorder import Operation, clock


def _peer(url: Any) -> str:
    port = url.port
    return f"{url.host}:{port}"


class AiohttpInstrumentor(Instrumentor):
    library = "aiohttp"
    modules = ("aiohttp",)
    shown = ("HTTP", ("aiohttp",))

    def apply(self, module: ModuleType) -> None:
        trace_config = module.TraceConfig()
        signals = {
            "on_request_start": self._start,
            "on_request_end": self._end,
            "on_request_exception": self._exception,
            "on_connection_queued_start": self._mark("queued"),
            "on_connection_queued_end": self._queued_end,
            "on_dns_resolvehost_start": self._mark("dns_start"),
            "on_dns_resolvehost_end": self._mark("dns_end"),
            "on_connection_create_start": self._mark("connect_start"),
            "on_connection_create_end": self._created,
            "on_request_headers_sent": self._sent,
        }
        for name, handler in signals.items():
            signal = getattr(trace_config, name, None)
            if signal is not None:
                signal.append(handler)
        trace_config.freeze()
        self.trace_config = trace_config
        self.replace(module.ClientSession, "__init__", self._session_init)

    def _session_init(self, original: Any) -> Any:
        instrumentor = self

        def __init__(session: Any, *args: Any, **kwargs: Any) -> None:
            if instrumentor.on:
                try:
                    given = list(kwargs.get("trace_configs") or ())
                    kwargs["trace_configs"] = [*given, instrumentor.trace_config]
                except Exception:
                    failed("aiohttp ClientSession")
            original(session, *args, **kwargs)

        return __init__

    @staticmethod
    def _op(context: SimpleNamespace) -> Operation | None:
        op = getattr(context, "surge_watch_op", None)
        return op if isinstance(op, Operation) and op.end is None else None

    async def _start(self, session: Any, context: SimpleNamespace, params: Any) -> None:
        try:
            if self.on:
                op = self.recorder.http_start(
                    "aiohttp",
                    _peer(params.url),
                    request_line(params.method, params.url.raw_path),
                    clock(),
                    claim=False,
                )
                context.surge_watch_op = op
                context.surge_watch_tls = params.url.scheme in ("https", "wss")
        except Exception:
            failed("aiohttp on_request_start")

    async def _created(self, session: Any, context: SimpleNamespace, params: Any) -> None:
        """A connection was made: TCP and, for https, its TLS handshake inside the
        same span (aiohttp does not separate them): the handshake is counted, its
        time is the connect's."""
        try:
            op = self._op(context)
            if op is not None:
                now = clock()
                self.recorder.mark(op, "tcp_end", now)
                if getattr(context, "surge_watch_tls", False):
                    self.recorder.mark(op, "tls_end", now)
        except Exception:
            failed("aiohttp on_connection_create_end")

    def _mark(self, name: str) -> Any:
        async def mark(session: Any, context: SimpleNamespace, params: Any) -> None:
            try:
                op = self._op(context)
                if op is not None:
                    self.recorder.mark(op, name, clock())
            except Exception:
                failed(f"aiohttp {name}")

        return mark

    async def _queued_end(self, session: Any, context: SimpleNamespace, params: Any) -> None:
        try:
            op = self._op(context)
            queued = (op.marks or {}).get("queued") if op is not None else None
            if op is not None and queued is not None:
                self.recorder.pool_wait("aiohttp", op.peer, queued, clock(), None)
        except Exception:
            failed("aiohttp on_connection_queued_end")

    async def _sent(self, session: Any, context: SimpleNamespace, params: Any) -> None:
        try:
            op = self._op(context)
            if op is not None:
                now = clock()
                marks = op.marks or {}
                if "connected" not in marks:
                    self.recorder.mark(op, "connected", marks.get("tcp_end", now))
                self.recorder.mark(op, "sent", now)
                self.recorder.enter_active(now)
        except Exception:
            failed("aiohttp on_request_headers_sent")

    def _finish(self, op: Operation, **outcome: Any) -> None:
        end = clock()
        if "sent" in (op.marks or {}):
            self.recorder.leave_active(end)
        self.recorder.http_end(op, end, **outcome)

    async def _end(self, session: Any, context: SimpleNamespace, params: Any) -> None:
        try:
            op = self._op(context)
            if op is not None:
                self.recorder.mark(op, "first_byte", clock())
                response = params.response
                size = response.content_length or 0
                self._finish(op, status=response.status, size=size)
        except Exception:
            failed("aiohttp on_request_end")

    async def _exception(self, session: Any, context: SimpleNamespace, params: Any) -> None:
        try:
            op = self._op(context)
            if op is not None:
                self._finish(op, error=error_class(params.exception))
        except Exception:
            failed("aiohttp on_request_exception")
