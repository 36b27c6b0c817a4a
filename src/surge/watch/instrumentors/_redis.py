"""redis-py's connects and commands, sync and asyncio (``redis.asyncio``).

A connect is one attempt to open a connection: TCP (or a Unix socket), TLS and
the handshake redis-py runs on it (HELLO, AUTH, SELECT), from
``connect_check_health`` - where ``connect()`` and its retries come through -
on a connection that had none; a pooled connection asked again is no connect.
A command is one ``execute_command`` of a client, until its reply is parsed;
a pipeline's ``execute`` is one operation (one round trip for its commands),
``PIPELINE`` or ``MULTI``.

What a command is recorded as: its name (``GET``), never its keys or values.
The shape n-plus-one compares is the name; the values hash is of the whole
command, so a loop of ``GET item:1``, ``GET item:2`` is n-plus-one (an
``MGET`` or a pipeline would do) and a poll of the same key is not.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from surge.watch.instrumentors._dbapi import _Driver, _host_port

#: Characters of a command's name kept (a name is short; a hostile one is cut).
NAME = 40


def _peer(connection: Any) -> str:
    path = getattr(connection, "path", None)
    if path:
        return _host_port(None, None, 6379, path)
    return _host_port(getattr(connection, "host", None), getattr(connection, "port", None), 6379)


def _client_peer(client: Any) -> str:
    """host:port of a client's connection pool (what its commands go to)."""
    try:
        kwargs = client.connection_pool.connection_kwargs
    except Exception:
        return "?"
    path = kwargs.get("path")
    if path:
        return _host_port(None, None, 6379, path)
    return _host_port(kwargs.get("host"), kwargs.get("port"), 6379)


def _name(command: Any) -> str:
    """A command's name: the first word only - redis-py splits a name given with
    its arguments (``execute_command("AUTH secret")``, ``"CONFIG GET"``) and
    sends the words as arguments, which are never recorded."""
    if isinstance(command, bytes | bytearray | memoryview):
        command = bytes(command[:NAME]).decode("ascii", "replace")
    words = str(command)[: NAME * 4].split(None, 1)
    return words[0][:NAME].upper() if words else "?"


def _command(client: Any, *args: Any, **options: Any) -> tuple[str, str, tuple[int, int]]:
    name = _name(args[0]) if args else "?"
    try:
        values = hash(args)
    except TypeError:  # (a memoryview, say)
        values = hash(repr(args)[:2000])
    return _client_peer(client), name, (hash(name), values)


def _pipeline(pipeline: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    transaction = getattr(pipeline, "transaction", False) or getattr(
        pipeline, "explicit_transaction", False
    )
    return _client_peer(pipeline), "MULTI" if transaction else "PIPELINE"


def _connect(connection: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    return _peer(connection), "connect"


class RedisInstrumentor(_Driver):
    library = "redis"
    modules = (
        "redis.connection",
        "redis.client",
        "redis.asyncio.connection",
        "redis.asyncio.client",
    )
    shown = ("databases", ("redis-py",))

    def apply(self, module: ModuleType) -> None:
        asynchronous = module.__name__.startswith("redis.asyncio")
        timed = self.timed_async if asynchronous else self.timed
        if module.__name__.endswith(".connection"):
            cls = module.AbstractConnection
            name = "connect_check_health" if hasattr(cls, "connect_check_health") else "connect"
            connect = timed("db.connect", _connect)
            self.replace(cls, name, self._if_unconnected(connect, asynchronous))
        else:
            self.replace(module.Redis, "execute_command", timed("db.query", _command))
            self.replace(module.Pipeline, "execute", timed("db.query", _pipeline))

    @staticmethod
    def _if_unconnected(timed: Any, asynchronous: bool) -> Any:
        """``timed`` around the original, called only on a connection that has
        none yet (redis-py asks every connection it takes from its pool)."""

        def make(original: Any) -> Any:
            recorded = timed(original)
            if asynchronous:

                async def connect_async(connection: Any, *args: Any, **kwargs: Any) -> Any:
                    if connection.is_connected:
                        return await original(connection, *args, **kwargs)
                    return await recorded(connection, *args, **kwargs)

                return connect_async

            def connect(connection: Any, *args: Any, **kwargs: Any) -> Any:
                if getattr(connection, "_sock", None) is not None:
                    return original(connection, *args, **kwargs)
                return recorded(connection, *args, **kwargs)

            return connect

        return make
