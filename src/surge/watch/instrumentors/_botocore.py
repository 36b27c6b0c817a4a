"""botocore's events: each AWS call as an operation named ``s3.ListObjectsV2``,
and the time between a page's response and the next page's request.

Handlers are registered on every ``botocore.session.Session`` when it is made
(the one wrapper: botocore has no global registry; a client copies its
session's handlers when created, boto3's included):

- ``before-parameter-build``: the call's own parameters: does it carry a
  continuation token (:data:`~surge.watch.recorder.PAGE_TOKENS`)?  Only the
  names are looked at, never the values;
- ``before-call``: the call begins;
- ``before-parse``: the response is in; parsing begins;
- ``after-call`` / ``after-call-error``: the call ends.

The HTTP requests in between are ``http.client``'s, recorded as the call's
children.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from surge.watch.instrument import Instrumentor, error_class, failed
from surge.watch.recorder import PAGE_TOKENS, clock

_UNIQUE = "surge-watch"


class BotocoreInstrumentor(Instrumentor):
    library = "botocore"
    modules = ("botocore.session",)
    shown = ("HTTP", ("botocore/boto3",))

    def apply(self, module: ModuleType) -> None:
        self.replace(module.Session, "__init__", self._session_init)

    def _session_init(self, original: Any) -> Any:
        instrumentor = self

        def __init__(session: Any, *args: Any, **kwargs: Any) -> None:
            original(session, *args, **kwargs)
            if instrumentor.on:
                try:
                    instrumentor.register(session)
                except Exception:
                    failed("botocore session")

        return __init__

    def register(self, session: Any) -> None:
        handlers = {
            "before-parameter-build": self._parameters,
            "before-call": self._before_call,
            "before-parse": self._before_parse,
            "after-call": self._after_call,
            "after-call-error": self._after_call_error,
        }
        for event, handler in handlers.items():
            session.register(event, handler, unique_id=f"{_UNIQUE}-{event}")

    def _parameters(self, params: Any = None, context: Any = None, **_: Any) -> None:
        try:
            if self.on and isinstance(context, dict) and isinstance(params, dict):
                context["surge_watch_page"] = not PAGE_TOKENS.isdisjoint(params)
        except Exception:
            failed("botocore before-parameter-build")

    def _before_call(self, model: Any = None, context: Any = None, **_: Any) -> None:
        try:
            if self.on and model is not None:
                paginated = bool(isinstance(context, dict) and context.get("surge_watch_page"))
                service = str(model.service_model.service_name)
                self.recorder.aws_start(service, str(model.name), paginated, clock())
        except Exception:
            failed("botocore before-call")

    def _before_parse(self, **_: Any) -> None:
        try:
            if self.on:
                self.recorder.aws_parse(clock())
        except Exception:
            failed("botocore before-parse")

    def _after_call(self, **_: Any) -> None:
        try:
            if self.on:
                self.recorder.aws_end(clock())
        except Exception:
            failed("botocore after-call")

    def _after_call_error(self, exception: Any = None, **_: Any) -> None:
        try:
            if self.on:
                error = error_class(exception) if exception is not None else "error"
                self.recorder.aws_end(clock(), error)
        except Exception:
            failed("botocore after-call-error")
