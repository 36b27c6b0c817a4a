"""Request boundaries in ``http.client``, which requests, urllib3 and botocore sit
on.  ``http.client`` has no hooks, so these are wrappers, on the base classes
whose methods urllib3's subclasses call through ``super()``:

- ``HTTPConnection.putrequest``: a request begins (its method and path, the
  query string cut off); the DNS, TCP and TLS its caller just did (urllib3
  connects before it writes) become its first phases;
- ``HTTPConnection.endheaders``: a failure while sending ends it;
- ``HTTPConnection.getresponse``: sent when called, the first byte when it
  returns (status line and headers read), with the status;
- ``HTTPResponse._close_conn`` / ``close``: the last byte (http.client calls
  ``_close_conn`` when the body has been read to its end), the request ends.

``bytes`` is the response's Content-Length as http.client read it (0 for a
chunked body).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from surge.trace.redact import without_query
from surge.watch.instrument import Instrumentor, error_class, failed
from surge.watch.recorder import Operation, clock

#: The attribute that carries a request's operation on its connection and response.
_OP = "_surge_watch_op"
#: Characters of a path kept.
MAX_PATH = 200


def request_line(method: Any, url: Any) -> str:
    """``GET /path``: the method and the path, without the query string or fragment
    (an absolute URL, as sent to a proxy, loses its scheme and host too)."""
    text = str(url)
    if "://" in text:
        text = "/" + text.split("://", 1)[1].partition("/")[2]
    text = without_query(text).partition(";")[0]
    return f"{str(method)[:16]} {text[:MAX_PATH] or '/'}"


class HTTPClientInstrumentor(Instrumentor):
    library = "http.client"
    modules = ("http.client",)
    shown = ("HTTP", ("http.client", "requests"))

    def apply(self, module: ModuleType) -> None:
        connection, response = module.HTTPConnection, module.HTTPResponse
        self.replace(connection, "putrequest", self._putrequest)
        self.replace(connection, "endheaders", self._endheaders)
        self.replace(connection, "getresponse", self._getresponse)
        self.replace(response, "_close_conn", self._done)
        self.replace(response, "close", self._done)

    def _library(self, connection: Any) -> str:
        module = type(connection).__module__.partition(".")[0]
        return module if module in ("urllib3", "botocore", "requests") else "http.client"

    def _end(self, op: Operation, **outcome: Any) -> None:
        self.recorder.http_end(op, clock(), active=True, **outcome)

    def _putrequest(self, original: Any) -> Any:
        instrumentor = self

        def putrequest(connection: Any, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
            if instrumentor.on:
                try:
                    previous = connection.__dict__.pop(_OP, None)
                    if previous is not None and previous.end is None:
                        instrumentor._end(previous, error="abandoned")
                    start = clock()
                    peer = f"{connection.host}:{connection.port}"
                    recorder = instrumentor.recorder
                    op = recorder.http_start(
                        instrumentor._library(connection),
                        peer,
                        request_line(method, url),
                        start,
                        active=True,
                    )
                    if op is not None:
                        recorder.mark(op, "connected", start)
                        connection.__dict__[_OP] = op
                except Exception:
                    failed("http.client putrequest")
            return original(connection, method, url, *args, **kwargs)

        return putrequest

    def _endheaders(self, original: Any) -> Any:
        instrumentor = self

        def endheaders(connection: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(connection, *args, **kwargs)
            except BaseException as e:
                op = connection.__dict__.pop(_OP, None) if instrumentor.on else None
                if op is not None and op.end is None:
                    try:
                        instrumentor._end(op, error=error_class(e))
                    except Exception:
                        failed("http.client endheaders")
                raise

        return endheaders

    def _getresponse(self, original: Any) -> Any:
        instrumentor = self

        def getresponse(connection: Any, *args: Any, **kwargs: Any) -> Any:
            op = connection.__dict__.get(_OP) if instrumentor.on else None
            if op is None:
                return original(connection, *args, **kwargs)
            recorder = instrumentor.recorder
            try:
                recorder.mark(op, "sent", clock())
                recorder.claim_into(op)  # a plain http.client connects while sending
            except Exception:
                failed("http.client getresponse")
            try:
                response = original(connection, *args, **kwargs)
            except BaseException as e:
                connection.__dict__.pop(_OP, None)
                try:
                    instrumentor._end(op, error=error_class(e))
                except Exception:
                    failed("http.client getresponse")
                raise
            try:
                recorder.mark(op, "first_byte", clock())
                op.status = response.status
                length = response.__dict__.get("length")  # Content-Length, as http.client read it
                op.bytes = length if isinstance(length, int) and length > 0 else 0
                if response.__dict__.get("fp") is None:  # nothing to read: done now
                    connection.__dict__.pop(_OP, None)
                    instrumentor._end(op, status=response.status, size=0)
                else:
                    response.__dict__[_OP] = op
            except Exception:
                failed("http.client getresponse")
            return response

        return getresponse

    def _done(self, original: Any) -> Any:
        instrumentor = self

        def done(response: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(response, *args, **kwargs)
            finally:
                op = response.__dict__.pop(_OP, None)
                if op is not None and op.end is None and instrumentor.on:
                    try:
                        instrumentor._end(op, status=op.status, size=op.bytes)
                    except Exception:
                        failed("http.client response close")

        return done
