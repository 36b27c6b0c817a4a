"""httpx (and anything else on httpcore) through httpcore's public hook, the
``trace`` request extension: each request that reaches a connection pool gets
a trace callback (chained after any the program set), added by a wrapper of
the pool's ``handle_request`` / ``handle_async_request``, the one place every
request passes.

The events used: ``connection.connect_tcp`` and ``connection.start_tls``
(connect, TLS), ``http11``/``http2`` ``send_request_headers.started``
(connected: the time before it, without a connect, was the wait for a pooled
connection), ``receive_response_headers.started/complete`` (sent, first byte,
status) and ``response_closed.complete`` (the last byte: the request ends).
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from surge.watch.instrument import Instrumentor, error_class, failed
from surge.watch.instrumentors._http_client import request_line
from surge.watch.recorder import Operation, clock

_MARKS = {
    "connection.connect_tcp.started": "connect_start",
    "connection.connect_tcp.complete": "tcp_end",
    "connection.start_tls.complete": "tls_end",
    "http11.receive_response_headers.started": "sent",
    "http2.receive_response_headers.started": "sent",
}


def _peer(request: Any) -> str:
    url = request.url
    host = url.host.decode("ascii", "replace") if isinstance(url.host, bytes) else url.host
    port = url.port or (443 if url.scheme in (b"https", "https") else 80)
    return f"{host}:{port}"


def _status(info: dict[str, Any]) -> int | None:
    value = info.get("return_value")
    if isinstance(value, tuple) and len(value) >= 2 and isinstance(value[1], int):
        return value[1]
    return None


class HttpxInstrumentor(Instrumentor):
    library = "httpx"
    modules = ("httpcore",)
    shown = ("HTTP", ("httpx",))

    def apply(self, module: ModuleType) -> None:
        self.replace(module.ConnectionPool, "handle_request", self._handle)
        self.replace(module.AsyncConnectionPool, "handle_async_request", self._handle_async)

    def _begin(self, request: Any) -> Operation | None:
        method = request.method
        method = method.decode("ascii", "replace") if isinstance(method, bytes) else method
        path = request.url.target
        path = path.decode("ascii", "replace") if isinstance(path, bytes) else path
        op = self.recorder.http_start(
            "httpx", _peer(request), request_line(method, path), clock(), claim=False
        )
        return op

    def _event(self, op: Operation, name: str, info: dict[str, Any]) -> None:
        if op.end is not None:
            return
        recorder = self.recorder
        now = clock()
        mark = _MARKS.get(name)
        if mark is not None:
            recorder.mark(op, mark, now)
        elif name.endswith("send_request_headers.started"):
            recorder.mark(op, "connected", now)
            recorder.enter_active(now)
        elif name.endswith("receive_response_headers.complete"):
            recorder.mark(op, "first_byte", now)
            op.status = _status(info)
        elif name.endswith("response_closed.complete"):
            self._finish(op, now)

    def _finish(self, op: Operation, end: float, error: str | None = None) -> None:
        try:
            self._finished(op, end, error)
        except Exception:
            failed("httpcore request end")

    def _finished(self, op: Operation, end: float, error: str | None) -> None:
        recorder = self.recorder
        if "connected" in (op.marks or {}):
            recorder.leave_active(end)
        recorder.http_end(op, end, status=op.status, error=error)
        recorder.drop_pending()  # the socket floor's view of this connect: seen above

    def _handle(self, original: Any) -> Any:
        instrumentor = self

        def handle_request(pool: Any, request: Any) -> Any:
            if not instrumentor.on:
                return original(pool, request)
            try:
                op = instrumentor._begin(request)
                if op is None:
                    raise RuntimeError("no operation")
                given = request.extensions.get("trace")

                def trace(name: str, info: dict[str, Any]) -> None:
                    try:
                        instrumentor._event(op, name, info)
                    except Exception:
                        failed("httpcore trace")
                    if given is not None:
                        given(name, info)

                request.extensions = {**request.extensions, "trace": trace}
            except Exception:
                failed("httpcore handle_request")
                return original(pool, request)
            try:
                return original(pool, request)
            except BaseException as e:
                instrumentor._finish(op, clock(), error_class(e))  # guarded: never raises
                raise

        return handle_request

    def _handle_async(self, original: Any) -> Any:
        instrumentor = self

        async def handle_async_request(pool: Any, request: Any) -> Any:
            if not instrumentor.on:
                return await original(pool, request)
            try:
                op = instrumentor._begin(request)
                if op is None:
                    raise RuntimeError("no operation")
                given = request.extensions.get("trace")

                async def trace(name: str, info: dict[str, Any]) -> None:
                    try:
                        instrumentor._event(op, name, info)
                    except Exception:
                        failed("httpcore trace")
                    if given is not None:
                        result = given(name, info)
                        if inspect.isawaitable(result):
                            await result

                request.extensions = {**request.extensions, "trace": trace}
            except Exception:
                failed("httpcore handle_async_request")
                return await original(pool, request)
            try:
                return await original(pool, request)
            except BaseException as e:
                instrumentor._finish(op, clock(), error_class(e))  # guarded: never raises
                raise

        return handle_async_request
