"""TLS session resumption: the context that offers a kept session, and its
bounded per-origin cache of sessions.

A reconnect to a host seen before can skip the full handshake (its key
exchange and the certificate chain's verification) by offering the session
the last connection to it ended with: a TLS 1.3 ticket, or a TLS 1.2 ticket
or session id.  ``asyncio``'s ``loop.start_tls`` cannot pass ``session=``
(CPython #79152), but both asyncio's and uvloop's SSL protocols make their
``SSLObject`` with ``context.wrap_bio(incoming, outgoing, server_side=...,
server_hostname=...)``, and ``wrap_bio`` takes ``session=``.  So the context
here fills ``session`` in its ``wrap_bio`` from the connection's
:class:`Offer`, found through a context variable: asyncio calls the
protocol's ``connection_made`` (which calls ``wrap_bio``) with ``call_soon``
from ``start_tls``, in a copy of the caller's context; uvloop calls it in the
transport's context, copied when the TCP connection was made.  So the
connection sets the variable to its ``Offer`` both when it connects and around
``start_tls``, and fills the ``Offer`` just before the handshake.  A context
per connection would avoid the variable, but building one costs ~0.3 ms of
CPU with OpenSSL 3.0 (``timeit ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)``).

What a session may cross: the cache lives on the context, so a session is
only offered under the settings it was made with (CA store and verification,
client certificate, ALPN offer, protocol versions: all the context's; and
Python refuses a session from another context anyway), and it is keyed by
the name sent as SNI and the port.  A changed context (a certificate loaded
after use) keeps its sessions: build a new one instead.

A server that does not take the session simply does a full handshake.
"""

from __future__ import annotations

import ssl
import time
from collections import OrderedDict
from contextlib import suppress
from contextvars import ContextVar
from typing import Final

#: Origins whose sessions a context keeps, least recently used dropped first:
#: a bulk run over many hosts stays bounded (a session is ~1-2 KB in OpenSSL).
MAX_SESSIONS: Final = 1000


class Offer:
    """The session one connection offers on its next handshake (None: none).
    ``wrap_bio`` takes it, so it is offered once."""

    __slots__ = ("session",)

    def __init__(self) -> None:
        self.session: ssl.SSLSession | None = None


#: The connection being opened's Offer (see the module's notes for why a variable).
offer_var: ContextVar[Offer | None] = ContextVar("surge_tls_offer", default=None)


class ResumingContext(ssl.SSLContext):
    """An ``ssl.SSLContext`` that keeps the last session of each (SNI name,
    port) it connected to, up to ``max_sessions``, and offers it on the next
    handshake to that origin.  Made by :func:`resuming` (and so by
    ``surge.http.make_ssl_context``)."""

    #: (SNI name, port) -> its session; None: seen, no session kept yet.
    sessions: OrderedDict[tuple[str, int], ssl.SSLSession | None]
    max_sessions: int

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        if session is None and not server_side:
            offer = offer_var.get()
            if offer is not None:
                session, offer.session = offer.session, None
        try:
            return super().wrap_bio(
                incoming, outgoing, server_side, server_hostname, session=session
            )
        except ValueError:  # a session this context cannot take: a full handshake
            if session is None:
                raise
            return super().wrap_bio(incoming, outgoing, server_side, server_hostname)

    def sighting(self, host: str, port: int) -> tuple[ssl.SSLSession | None, bool]:
        """A connection to ``host`` (the SNI name) and ``port`` begins: the session
        kept for it (None: none), and whether to keep this connection's.  The
        first connection to an origin keeps nothing, only that it was seen:
        reading a session costs (see :meth:`keep`), and a run over many hosts
        seen once would pay that on every handshake for nothing.  The second
        keeps its session, and the third and later resume."""
        sessions = self.sessions
        key = (host, port)
        try:
            session = sessions[key]
        except KeyError:
            self._put(key, None)
            return None, False
        if session is not None and session.time + session.timeout < time.time():
            session = sessions[key] = None  # the server would refuse it: keep a new one
        with suppress(KeyError):  # dropped by another thread meanwhile
            sessions.move_to_end(key)
        return session, True

    def _put(self, key: tuple[str, int], session: ssl.SSLSession | None) -> None:
        sessions = self.sessions
        sessions[key] = session
        sessions.move_to_end(key)
        while len(sessions) > self.max_sessions:
            try:
                sessions.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                break

    def keep(self, host: str, port: int, ssl_object: ssl.SSLObject) -> bool:
        """Keep ``ssl_object``'s session for the next connection to the origin,
        if it can be resumed: a TLS 1.3 session only once a ticket came (they
        come after the handshake), a TLS 1.2 one with a ticket or an id.
        Returns False while a TLS 1.3 ticket may yet come (ask again later).

        A connection that resumed keeps nothing: the session it offered stays
        kept and is offered again (as libcurl does), because reading a session
        costs as much as a good part of the handshake saved - CPython copies it
        through DER both ways, ``SSLObject.session`` and ``wrap_bio(session=)``
        (its workaround for OpenSSL issue 1550), parsing the server's
        certificate each time.  A server that takes each ticket only once then
        refuses it, and the full handshake that follows keeps a new one."""
        if ssl_object.session_reused:
            return True
        session = ssl_object.session
        if session is None:
            return True
        if not (session.has_ticket or (session.id and ssl_object.version() != "TLSv1.3")):
            return ssl_object.version() != "TLSv1.3"
        self._put((host, port), session)
        return True

    def forget(self, host: str, port: int) -> None:
        """Drop the origin's session (its handshake failed)."""
        with suppress(KeyError):
            self.sessions[(host, port)] = None


#: Where a connection's session is kept: its context, the SNI name, the port.
Resume = tuple[ResumingContext, str, int]


def keep_session(resume: Resume, ssl_object: ssl.SSLObject | None) -> bool:
    """Keep a connection's TLS session for the next connection to its origin
    (:meth:`ResumingContext.keep`); True: done with this connection.  Called
    after the handshake, when its first response is complete (a TLS 1.3
    ticket comes after the handshake, read with the first bytes after it) and
    when it is lost, until it returns True."""
    return ssl_object is None or resume[0].keep(resume[1], resume[2], ssl_object)


def resuming(context: ssl.SSLContext, max_sessions: int = MAX_SESSIONS) -> ResumingContext:
    """``context`` (one just made, e.g. by ``ssl.create_default_context``, and
    not yet used) as a :class:`ResumingContext`: the same object and settings,
    its class changed, so it is built exactly as the stdlib builds it."""
    if not isinstance(context, ResumingContext):
        context.__class__ = ResumingContext
    assert isinstance(context, ResumingContext)
    context.sessions = OrderedDict()
    context.max_sessions = max_sessions
    return context
