"""Counters a program turns on at its start, for what ``run_checks()`` cannot see later.

A PyMySQL connection that was opened, used and closed leaves nothing behind for
a check to find: the MySQL write-up's own program (connect, query, close, 10,000
times, each connect building an SSLContext) has no connection open when it is
looked at. ``surge.doctor.watch()``, called first, counts every connect as it
happens; the ``pymysql-ssl-per-connect`` check then reports those counts.

Like the rest of surge.doctor it imports nothing it watches: if PyMySQL is not
imported yet, a finder on ``sys.meta_path`` wraps ``Connection.connect`` right
after ``pymysql.connections`` is first imported, and then leaves the path.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, cast

_MODULE = "pymysql.connections"

#: Connects counted since watch(), by where the connection's TLS context came
#: from (:func:`tls_origin`, as ``_costs._live_pymysql_connections`` counts them).
_made: dict[str, int] | None = None
_COUNTED = ("connects", "built_by_default", "default_shared", "given_tls", "without_tls")


def watch() -> None:
    """Count every PyMySQL connect from now on (idempotent, cheap: a few
    attribute reads per connect)."""
    global _made
    if _made is not None:
        return
    _made = dict.fromkeys(_COUNTED, 0)
    module = sys.modules.get(_MODULE)
    if module is not None:
        _wrap(module)
    else:
        sys.meta_path.insert(0, _AfterImport(_MODULE, _wrap))


def made() -> dict[str, int] | None:
    """The counts since :func:`watch` (None: not watching)."""
    return None if _made is None else dict(_made)


def tls_origin(connection: Any) -> str:
    """Where a connected PyMySQL connection's TLS context came from:
    ``without_tls`` (none), ``given_tls`` (the program passed ssl options), or
    ``default`` (PyMySQL built one on connect, unless it is shared)."""
    if getattr(connection, "ctx", None) is None:
        return "without_tls"
    if getattr(connection, "_ssl_required", True) is False:
        return "default"
    return "given_tls"


def _wrap(module: ModuleType) -> None:
    connection: Any = getattr(module, "Connection", None)
    original = getattr(connection, "connect", None)
    if not isinstance(connection, type) or original is None:
        return
    if getattr(original, "_surge_watch", False):
        return
    # Contexts seen so far: one PyMySQL built that is used again (surge.db's pool
    # hands every connection of a pool one) is shared, not built per connect.
    seen: weakref.WeakKeyDictionary[Any, None] = weakref.WeakKeyDictionary()

    def connect(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        counts = _made
        if counts is not None:
            counts["connects"] += 1
            origin = tls_origin(self)
            if origin != "default":
                counts[origin] += 1
            elif self.ctx in seen:
                counts["default_shared"] += 1
            else:
                seen[self.ctx] = None
                counts["built_by_default"] += 1
        return result

    connect._surge_watch = True  # type: ignore[attr-defined]
    cast(Any, connection).connect = connect


class _AfterImport:
    """A ``sys.meta_path`` finder that runs ``then(module)`` once ``name`` has been
    imported by whichever finder really finds it, then steps aside."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if name != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            run(module)
            self.then(module)

        loader.exec_module = exec_module
        return spec
