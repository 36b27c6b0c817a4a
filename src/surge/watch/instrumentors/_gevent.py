"""gevent: each greenlet is a caller of its own (the recorder keys callers by
``greenlet.getcurrent()``), and gevent's monkey-patching is followed through its
public hook, the ``gevent.events`` subscribers: when gevent replaces
``socket`` or ``ssl``, the socket floor is applied again to what they hold now.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from surge.watch.instrument import Instrumentor, failed
from surge.watch.instrumentors._socket import SocketInstrumentor


class GeventInstrumentor(Instrumentor):
    library = "gevent"
    modules = ("gevent",)
    shown = ("event loops", ("gevent",))

    def __init__(self, recorder: Any, sockets: SocketInstrumentor) -> None:
        super().__init__(recorder)
        self.sockets = sockets
        self.subscribers: list[Any] | None = None

    def apply(self, module: ModuleType) -> None:
        events = importlib.import_module("gevent.events")
        self.did_patch = (events.GeventDidPatchModuleEvent, events.GeventDidPatchAllEvent)
        self.subscribers = events.subscribers
        self.subscribers.append(self._patched)

    def _patched(self, event: Any) -> None:
        try:
            if not self.on or not isinstance(event, self.did_patch):
                return
            name = getattr(event, "module_name", None)
            if name is None or name in ("socket", "ssl"):
                self.sockets.reapply()
        except Exception:
            failed("gevent patch event")

    def removed(self) -> None:
        if self.subscribers is not None and self._patched in self.subscribers:
            self.subscribers.remove(self._patched)
        self.subscribers = None
