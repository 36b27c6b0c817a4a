"""The client's HTTP/2 streams per origin, over its keyed pool: which request
takes which stream slot, the FIFO of requests waiting for one, and when a
second connection opens (http2.py's notes say how).  Apart from http2.py so
that a client that never meets HTTP/2 never loads the ``h2`` package: this
module knows an HTTP/2 connection only by what it does (``free``, ``active``,
``new_stream``, ``on_slots``, ...)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from surge.http.http2 import H2Stream, HTTP2Connection
    from surge.pool import AsyncKeyedPool


#: Origins remembered as HTTP/1.1 (see Multiplexer.h1), and origins whose
#: server cut a connection off after a number of streams (Multiplexer.limits).
H1_ORIGINS_KEPT = 4096
#: How long the streams a server processed on a connection before its GOAWAY
#: cut the rest off (nginx: keepalive_requests, 1 under keepalive_timeout 0)
#: bound each new connection to it: that many streams a connection, no more,
#: so requests are not sent to be turned away.  Learned again after it (a
#: graceful restart's GOAWAY teaches a bound that a minute later is gone).
STREAM_LIMIT_S = 60.0
#: A connection at its learned bound whose streams all ended without a GOAWAY
#: waits this long for one before the bound is taken as wrong and lifted (a
#: server that kept the connection open past it): nginx sends its GOAWAY right
#: after the last response, but a busy client may read the response, let the
#: stream go and hand its slot on before it reads the GOAWAY - which then cuts
#: that request off unsent, and the next, each connection over.
LIFT_S = 0.5
#: An HTTP/2 connection idle in the pool this long is asked with a PING whether
#: its server is still there before a request goes on it (Chromium's health
#: check of an HTTP/2 session idle 10 s); one that does not answer within
#: PING_TIMEOUT_S is closed and another opened - the request not yet sent, so
#: a POST as well.  A TCP connection that died silently (a NAT or firewall that
#: forgot it, a server gone without a FIN) would otherwise take the request
#: and hold it until its deadline.
PING_IDLE_S = 10.0
PING_TIMEOUT_S = 2.0

#: A waiter's result that leaves the opening of a new connection to it.
_OPEN = object()


class _Origin:
    """One origin's HTTP/2 connections in use, and the requests waiting for a slot."""

    __slots__ = ("conns", "free", "opening", "unsettled", "waiters")

    def __init__(self) -> None:
        #: Connections with a free slot (an ordered set: the oldest first).
        self.free: dict[HTTP2Connection, None] = {}
        #: Every live HTTP/2 connection of the origin checked out of the pool.
        self.conns: set[HTTP2Connection] = set()
        #: Requests waiting for a slot (or for an opening connection's protocol), FIFO.
        self.waiters: deque[asyncio.Future[Any]] = deque()
        self.opening = False
        #: Connections whose server's SETTINGS have not come yet: their stream
        #: limit is unknown, so no other connection opens meanwhile.
        self.unsettled: set[HTTP2Connection] = set()


class Multiplexer:
    """The client's HTTP/2 streams per origin, over its keyed pool (see the
    module's notes).  It is also what the client lets go of a stream through
    (``release_nowait``/``discard``), where it lets go of an HTTP/1.1
    connection through the pool."""

    def __init__(self, pool: AsyncKeyedPool[Any, Any], per_host: int) -> None:
        self.pool = pool
        self.per_host = per_host
        self.origins: dict[Any, _Origin] = {}
        #: Origins whose last new connection spoke HTTP/1.1 (the oldest forgotten
        #: first): requests to them go to the pool without waiting to multiplex.
        self.h1: dict[Any, None] = {}
        #: Origin -> (streams a connection may start, until when): see STREAM_LIMIT_S.
        self.limits: dict[Any, tuple[int, float]] = {}

    def ready(self, key: Any) -> H2Stream | None:
        """A stream on a connection to ``key`` with a free slot, at once, or None."""
        origin = self.origins.get(key)
        if origin is None or not origin.free:
            return None
        return self._stream_on(origin, next(iter(origin.free)))

    def take(self, key: Any, conn: HTTP2Connection) -> _Origin:
        """``conn``, just taken from the pool, joins its origin's connections."""
        origin = self.origins.get(key)
        if origin is None:
            origin = self.origins[key] = _Origin()
        self.h1.pop(key, None)
        origin.conns.add(conn)
        if not conn.settled:
            origin.unsettled.add(conn)
        if conn.started == 0:
            learned = self.limits.get(key)
            if learned is not None:
                if learned[1] > conn.loop.time():
                    conn.stream_limit = learned[0]
                else:
                    del self.limits[key]
        conn.on_slots = lambda c: self._slots_changed(key, c)
        return origin

    def adopt(self, key: Any, conn: HTTP2Connection) -> H2Stream:
        """A stream on ``conn``, just taken from the pool (new or idle)."""
        origin = self.take(key, conn)
        stream = self._stream_on(origin, conn)
        self._hand_out(origin, conn)
        return stream

    def adopted(self, key: Any, conn: HTTP2Connection) -> H2Stream | None:
        """:meth:`adopt`, unless the server's SETTINGS already allow no stream
        (a limit of 0): then it joins the origin's connections without one,
        and the request waits for a slot (None)."""
        if conn.settled and conn.free <= 0:
            self.take(key, conn)
            return None
        return self.adopt(key, conn)

    async def stream_for(self, key: Any, conn: HTTP2Connection) -> H2Stream | None:
        """A stream on ``conn``, just taken from the pool: :meth:`adopted`
        once :meth:`alive` says it may carry one; None if its server went
        silent (closed and discarded) or allows no stream now (the request
        waits for a slot)."""
        if not await self.alive(conn):
            return None
        return self.adopted(key, conn)

    def _stream_on(self, origin: _Origin, conn: HTTP2Connection) -> H2Stream:
        stream = conn.new_stream()
        if conn.free <= 0:
            origin.free.pop(conn, None)
        else:
            origin.free[conn] = None
        return stream

    def _hand_out(self, origin: _Origin, conn: HTTP2Connection) -> None:
        """Give ``conn``'s free slots to the requests waiting, first come first."""
        waiters = origin.waiters
        while waiters and conn.free > 0:
            waiter = waiters.popleft()
            if not waiter.done():
                conn.active += 1  # reserved for it: the waiter makes its stream
                waiter.set_result(conn)
        if conn.free > 0:
            origin.free[conn] = None
        else:
            origin.free.pop(conn, None)
            self._more(origin)

    def _more(self, origin: _Origin) -> None:
        """Requests wait and no connection has a free slot: the first waiting
        opens another connection (_OPEN), if the per-host bound allows one and
        none is being opened already."""
        if origin.opening or origin.free or origin.unsettled or len(origin.conns) >= self.per_host:
            return
        waiters = origin.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                origin.opening = True
                waiter.set_result(_OPEN)
                return

    def _slots_changed(self, key: Any, conn: HTTP2Connection) -> None:
        origin = self.origins.get(key)
        if origin is None:
            return
        if conn.processed is not None:  # its GOAWAY cut streams off: learn the bound
            limits = self.limits
            limits[key] = (max(1, conn.processed), conn.loop.time() + STREAM_LIMIT_S)
            conn.processed = None
            if len(limits) > H1_ORIGINS_KEPT:
                del limits[next(iter(limits))]
        if conn.settled or conn.closed:
            origin.unsettled.discard(conn)
        limit = conn.stream_limit
        if (
            limit is not None
            and conn.started >= limit
            and not conn.active
            and not (conn.closed or conn.draining)
        ):  # its streams all done, no GOAWAY yet: if none comes, the bound was wrong
            if not conn.lifting:
                conn.lifting = True
                conn.loop.call_later(LIFT_S, self._lift, key, conn)
                self._more(origin)  # meanwhile, the requests waiting open their own
            return
        if conn.closed or conn.draining:
            origin.free.pop(conn, None)
            if conn in origin.conns and (conn.closed or conn.active == 0):
                self._drop(key, origin, conn)
            return
        self._hand_out(origin, conn)
        if conn.active == 0:  # idle: back to the pool, which bounds and expires it
            origin.free.pop(conn, None)
            origin.conns.discard(conn)
            origin.unsettled.discard(conn)
            conn.on_slots = None
            if not origin.conns and not origin.waiters:
                del self.origins[key]
            self.pool.release_nowait(conn)

    def _lift(self, key: Any, conn: HTTP2Connection) -> None:
        """LIFT_S after a connection's streams ended at its bound: no GOAWAY came
        (else it is draining, or gone), so the bound goes, for it and its origin."""
        conn.lifting = False
        if conn.on_slots is None:  # dropped, or back in the pool, meanwhile
            return
        if not (conn.closed or conn.draining):
            conn.stream_limit = None
            self.limits.pop(key, None)
        self._slots_changed(key, conn)

    def _drop(self, key: Any, origin: _Origin, conn: HTTP2Connection) -> None:
        origin.conns.discard(conn)
        origin.unsettled.discard(conn)
        conn.on_slots = None
        self.loop_task(self.pool.discard(conn))
        if origin.waiters:
            self._more(origin)
        elif not origin.conns:
            self.origins.pop(key, None)

    @staticmethod
    def loop_task(coroutine: Any) -> None:
        asyncio.get_running_loop().create_task(coroutine)

    async def acquire(self, key: Any, timeout: float | None, may_multiplex: bool) -> Any:
        """A stream, or an HTTP/1.1 connection, for a request to ``key``: a free
        slot; else an idle connection of the pool; else a slot that frees, or a
        new connection where the per-host bound allows one (see the module's
        notes).  ``may_multiplex``: the connection may speak HTTP/2 (https with
        ALPN, or h2c with prior knowledge); if not, this is the pool's acquire."""
        pool = self.pool
        origins = self.origins
        while True:
            if not may_multiplex or key in self.h1:
                # (A caller's own ssl_context may negotiate h2 all the same.)
                conn = await pool.acquire(key, timeout)
                if not conn.multiplexed:
                    return conn
                stream = await self.stream_for(key, conn)
                if stream is not None:
                    return stream
                continue
            origin = origins.get(key)
            if origin is None:
                origin = origins[key] = _Origin()
            if origin.free:
                return self._stream_on(origin, next(iter(origin.free)))
            idle = pool.acquire_nowait(key)
            if idle is not None:
                if not idle.multiplexed:
                    return idle
                stream = await self.stream_for(key, idle)
                if stream is not None:
                    return stream
                continue
            if origin.opening or origin.unsettled or len(origin.conns) >= self.per_host:
                waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                origin.waiters.append(waiter)
                try:
                    got = await waiter
                except BaseException:
                    if waiter.done() and not waiter.cancelled():
                        got = waiter.result()
                        if got is _OPEN:  # the opening was left to it: to another
                            origin.opening = False
                            self._more(origin)
                        elif got is not None:  # a slot was given: give it back
                            got.active -= 1
                            self._slots_changed(key, got)
                    else:  # (a scan, on a cancel only)
                        with contextlib.suppress(ValueError):
                            origin.waiters.remove(waiter)
                        self._tidy(key, origin)
                    raise
                if got is None:
                    continue
                if got is not _OPEN:
                    return got.stream_for_reserved()
            origin.opening = True  # (already, if _OPEN)
            try:
                conn = await pool.acquire(key, timeout)
            except BaseException:
                origin.opening = False
                self._more(origin)
                self._tidy(key, origin)
                raise
            origin.opening = False
            if conn.multiplexed:
                stream = await self.stream_for(key, conn)
                if stream is not None:
                    return stream
                continue  # (closed, or no stream allowed: the next turn waits or opens)
            h1 = self.h1
            h1[key] = None
            if len(h1) > H1_ORIGINS_KEPT:
                del h1[next(iter(h1))]
            waiters = list(origin.waiters)
            origin.waiters.clear()
            for waiter in waiters:  # they go to the pool, as HTTP/1.1 requests do
                if not waiter.done():
                    waiter.set_result(None)
            self._tidy(key, origin)
            return conn

    @staticmethod
    def idle_long(conn: HTTP2Connection) -> bool:
        """``conn``, taken from the pool, was idle PING_IDLE_S or more: it is
        pinged (:meth:`alive`) before a request goes on it."""
        idle_since = conn.idle_since
        return idle_since is not None and conn.loop.time() - idle_since >= PING_IDLE_S

    async def alive(self, conn: HTTP2Connection) -> bool:
        """Whether an HTTP/2 connection taken from the pool may carry a request:
        yes unless it was idle long and its server then did not answer a PING
        within PING_TIMEOUT_S (it is then closed and discarded)."""
        if not self.idle_long(conn):
            return True
        try:
            if await conn.ping(PING_TIMEOUT_S):
                return True
        except BaseException:
            conn.close()
            await self.pool.discard(conn)
            raise
        conn.close()
        await self.pool.discard(conn)
        return False

    def _tidy(self, key: Any, origin: _Origin) -> None:
        """Forget an origin that holds nothing (a crawl meets each host once)."""
        if (
            not origin.conns
            and not origin.waiters
            and not origin.opening
            and self.origins.get(key) is origin
        ):
            del self.origins[key]

    # -- the client lets go of a stream ------------------------------------------------

    def release_nowait(self, stream: H2Stream) -> None:
        stream.conn.release(stream)

    async def discard(self, stream: H2Stream) -> None:
        stream.conn.release(stream)

    async def close(self) -> None:
        for origin in list(self.origins.values()):
            for conn in list(origin.conns):
                conn.close()
                await self.pool.discard(conn)
        self.origins.clear()
