"""One instrumentor per library, all feeding one :class:`~surge.watch.recorder.Recorder`.

=================  ==================================================  ===============
instrumentor       what it hooks                                       how
=================  ==================================================  ===============
socket             getaddrinfo, blocking connect, ssl handshake        wrappers (the floor)
http.client        request boundaries (requests, urllib3, botocore)    wrappers
urllib3            pool waits and discards, pyOpenSSL handshakes       wrappers
aiohttp            every request's phases                              TraceConfig
httpx              every request's phases (httpcore)                   trace extension
botocore           operation names, parse time, pages                  botocore events
pymysql, ...       DB-API connect and execute                          wrappers
asyncpg            connect attempts, statements (pools' too)           wrappers
redis              connects, commands, pipelines (sync and asyncio)    wrappers
sqlalchemy         QueuePool waits (pool and overflow all in use)      a wrapper
gevent             re-hooks the floor after monkey-patching            gevent.events
asyncio            event loop lag (a beat >= 100 ms late), its stack    a heartbeat, a watchdog
=================  ==================================================  ===============
"""

from __future__ import annotations

from surge.watch.instrument import Instrumentor
from surge.watch.instrumentors._aiohttp import AiohttpInstrumentor
from surge.watch.instrumentors._asyncio import AsyncioInstrumentor
from surge.watch.instrumentors._botocore import BotocoreInstrumentor
from surge.watch.instrumentors._dbapi import (
    AiomysqlInstrumentor,
    AsyncpgInstrumentor,
    MySQLdbInstrumentor,
    PsycopgInstrumentor,
    PyMySQLInstrumentor,
)
from surge.watch.instrumentors._gevent import GeventInstrumentor
from surge.watch.instrumentors._http_client import HTTPClientInstrumentor
from surge.watch.instrumentors._httpx import HttpxInstrumentor
from surge.watch.instrumentors._redis import RedisInstrumentor
from surge.watch.instrumentors._socket import SocketInstrumentor
from surge.watch.instrumentors._sqlalchemy import SQLAlchemyInstrumentor
from surge.watch.instrumentors._urllib3 import Urllib3Instrumentor
from surge.watch.recorder import Recorder

#: Every instrumentor, in the order they are applied: the socket floor first, then
#: gevent's re-hooking of it, then one per library.
REGISTRY: tuple[type[Instrumentor], ...] = (
    SocketInstrumentor,
    GeventInstrumentor,
    HTTPClientInstrumentor,
    Urllib3Instrumentor,
    AiohttpInstrumentor,
    HttpxInstrumentor,
    BotocoreInstrumentor,
    PyMySQLInstrumentor,
    MySQLdbInstrumentor,
    PsycopgInstrumentor,
    AiomysqlInstrumentor,
    AsyncpgInstrumentor,
    RedisInstrumentor,
    SQLAlchemyInstrumentor,
    AsyncioInstrumentor,
)


def instrumentors(recorder: Recorder) -> list[Instrumentor]:
    """Every instrumentor of :data:`REGISTRY`, feeding ``recorder`` (none applied
    yet; gevent's is handed the socket floor it re-hooks)."""
    sockets = SocketInstrumentor(recorder)
    made: list[Instrumentor] = [sockets]
    for kind in REGISTRY[1:]:
        if kind is GeventInstrumentor:
            made.append(GeventInstrumentor(recorder, sockets))
        else:
            made.append(kind(recorder))
    return made


#: The order ``surge watch --help`` lists the instrumentors' groups in (a group
#: not here comes last).
GROUPS = ("HTTP", "databases", "DNS, TCP and TLS", "event loops")


def instrumented() -> str:
    """What the registry records, as ``surge watch --help`` lists it: ``HTTP
    (http.client, requests, ...), databases (PyMySQL, ...), ...``."""
    groups: dict[str, list[str]] = {group: [] for group in GROUPS}
    for kind in REGISTRY:
        group, names = kind.shown
        if group:
            groups.setdefault(group, []).extend(names)
    return ", ".join(f"{group} ({', '.join(names)})" for group, names in groups.items() if names)


__all__ = ["REGISTRY", "Instrumentor", "instrumented", "instrumentors"]
