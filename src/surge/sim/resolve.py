"""Make ``*.sim`` names resolve to loopback inside a peer client's process.

surge itself takes curl-style ``--resolve`` overrides; clients that cannot
(requests, urllib3, http.client, asyncio's default loop) go through
:func:`socket.getaddrinfo`, which :func:`patch_getaddrinfo` wraps.  uvloop
resolves in C (libuv) without calling it, so a peer on uvloop needs its own
resolver hook (aiohttp: a custom ``AbstractResolver``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from surge.sim.behaviour import TLD

# list[Any]: typeshed's exact element type changes between versions; this one matches all.
_AddrInfo = list[Any]


def is_sim_name(host: str | bytes | None) -> bool:
    """Whether ``host`` is ``sim`` or a name under it."""
    if host is None:
        return False
    name = (host.decode("ascii", "replace") if isinstance(host, bytes) else host).lower()
    name = name.rstrip(".")
    return name == TLD or name.endswith("." + TLD)


def patch_getaddrinfo(address: str = "127.0.0.1") -> Callable[[], None]:
    """Resolve every ``*.sim`` name to ``address`` (IPv4) in this process.

    Other names go to the original :func:`socket.getaddrinfo`.  Patching twice is
    harmless.  Returns a function that undoes the patch.
    """
    current = socket.getaddrinfo
    if getattr(current, "surge_sim_original", None) is not None:
        return lambda: None
    original = current

    def getaddrinfo(
        host: bytes | str | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> _AddrInfo:
        if is_sim_name(host):
            # the simulated web listens on IPv4 loopback only, whatever was asked
            return original(address, port, socket.AF_INET, type, proto, flags)
        return original(host, port, family, type, proto, flags)

    getaddrinfo.surge_sim_original = original  # type: ignore[attr-defined]
    socket.getaddrinfo = getaddrinfo

    def unpatch() -> None:
        if socket.getaddrinfo is getaddrinfo:
            socket.getaddrinfo = original

    return unpatch
