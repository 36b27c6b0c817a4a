"""A pytest plugin that runs httpx's or requests' own test suite with surge's
drop-in as the library's default transport (``-p swap``, with this directory on
``sys.path``).

``SURGE_DROPIN=httpx``: every ``httpx.Client``/``AsyncClient`` built without a
``transport=`` gets surge's (``httpx.HTTPTransport`` and
``httpx.AsyncHTTPTransport`` are surge's classes, in ``httpx`` and in
``httpx._client``, which builds the default and the proxies' transports).
``SURGE_DROPIN=requests``: every ``requests.Session`` mounts surge's
``Adapter`` for http:// and https:// (an ``HTTPAdapter`` built by a test itself
stays requests' own).  Unset: the stock library, for the comparison.

Either way, uvicorn (httpx's test server) listens on a free port instead of
its default 8000: others on the machine may be running the same suite.
"""

from __future__ import annotations

import os
import socket
from typing import Any


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def pytest_configure(config: Any) -> None:
    try:
        import uvicorn.config
    except ImportError:
        pass
    else:
        original = uvicorn.config.Config.__init__

        def on_a_free_port(self: Any, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("port", _free_port())
            original(self, *args, **kwargs)

        uvicorn.config.Config.__init__ = on_a_free_port  # type: ignore[method-assign]
    which = os.environ.get("SURGE_DROPIN")
    if which == "httpx":
        import httpx
        import httpx._client

        import surge.httpx

        for module in (httpx, httpx._client):
            module.HTTPTransport = surge.httpx.HTTPTransport  # type: ignore[misc]
            module.AsyncHTTPTransport = surge.httpx.AsyncHTTPTransport  # type: ignore[misc]
    elif which == "requests":
        import requests.sessions

        import surge.requests

        requests.sessions.HTTPAdapter = surge.requests.Adapter  # type: ignore[misc]
    elif which:
        raise ValueError(f"SURGE_DROPIN={which!r}: httpx or requests")
