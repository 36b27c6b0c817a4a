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


def instrumentors(recorder: Recorder) -> list[Instrumentor]:
    """Every instrumentor, feeding ``recorder`` (none applied yet)."""
    sockets = SocketInstrumentor(recorder)
    return [
        sockets,
        GeventInstrumentor(recorder, sockets),
        HTTPClientInstrumentor(recorder),
        Urllib3Instrumentor(recorder),
        AiohttpInstrumentor(recorder),
        HttpxInstrumentor(recorder),
        BotocoreInstrumentor(recorder),
        PyMySQLInstrumentor(recorder),
        MySQLdbInstrumentor(recorder),
        PsycopgInstrumentor(recorder),
        AiomysqlInstrumentor(recorder),
        AsyncpgInstrumentor(recorder),
        RedisInstrumentor(recorder),
        SQLAlchemyInstrumentor(recorder),
        AsyncioInstrumentor(recorder),
    ]


__all__ = ["Instrumentor", "instrumentors"]
