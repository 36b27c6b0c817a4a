"""A response body read as it arrives (``client.stream(...)``).

The connection stays the response's until its body has been read to the end,
then goes back to the pool; closed early, the connection is closed (the rest of
the body would have to be read to reuse it, and may be large).  Memory is
bounded by the connection's read-ahead (``STREAM_HIGH_WATER``) and by the
decoder's piece size, not by the body: the client's body cap applies to a
body read whole (``read()``) and to what every coding decodes to - a
Transfer-Encoding's in ``aiter_raw``, a Content-Encoding's in ``aiter_bytes``
(decoding.py's ``layers``) - not to the wire's bytes of a stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

from surge.errors import StreamConsumed
from surge.http.connection import body_too_large
from surge.http.decoding import Decoder, layers

if TYPE_CHECKING:
    from surge.http.connection import HTTPConnection, WireResponse
    from surge.http.timings import Timings
    from surge.pool import AsyncKeyedPool


class BodyStream:
    """The unread body of one streamed response, and the connection it holds."""

    __slots__ = (
        "cap",
        "closed",
        "conn",
        "consumed",
        "decompress",
        "pool",
        "run",
        "timings",
        "wire",
    )

    def __init__(
        self,
        wire: WireResponse,
        conn: HTTPConnection,
        pool: AsyncKeyedPool[Any, HTTPConnection],
        timings: Timings,
        *,
        decompress: bool,
        cap: int,
    ) -> None:
        self.wire = wire
        self.conn = conn
        self.pool = pool
        self.timings = timings
        self.decompress = decompress
        self.cap = cap  # for a body read whole, and a decoded one
        self.closed = False
        self.consumed = False
        #: The synchronous client's way to run a coroutine on its loop (None: async).
        self.run: Callable[[Any], Any] | None = None

    def decoder(self, cap: int | None) -> Decoder | None:
        """The Content-Encoding's decoder (None: nothing to undo, or not asked)."""
        wire = self.wire
        if not self.decompress or wire.content_encoding is None:
            return None
        return layers(None, wire.content_encoding, cap, wire.status).content

    async def raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they came off the wire, its transfer codings
        undone (dechunked; a ``Transfer-Encoding: gzip`` inflated), its content
        codings not."""
        if self.consumed:
            raise StreamConsumed("the body of a streamed response is read once")
        self.consumed = True
        wire = self.wire
        # The transfer layer under the body cap, as every layer is (decoding.py).
        unframe = (
            layers(wire.transfer_coding, None, self.cap, wire.status).transfer
            if wire.transfer_coding is not None
            else None
        )
        try:
            while True:
                chunks = await wire.next_chunks()
                if not chunks:
                    break
                for chunk in chunks:
                    if unframe is None:
                        yield chunk
                    else:
                        for piece in unframe.feed(chunk):
                            yield piece
            if unframe is not None:
                for piece in unframe.finish():
                    yield piece
        finally:
            await self.aclose()

    async def complete(self) -> list[bytes] | None:
        """The whole body (transfer codings undone, content codings not) if all
        of it has come already, in the pieces it came in (each of a chunked
        body's chunks apart), the connection then let go; else None, and
        nothing taken.  A keep-alive response's small body comes with its head:
        this hands it on without the await per chunk that :meth:`raw` costs (the
        drop-in transports' fast path)."""
        wire = self.wire
        done = wire.done
        if self.consumed or not done.done() or done.exception() is not None:
            return None
        if wire.transfer_coding is not None:
            return [chunk async for chunk in self.raw()]
        self.consumed = True
        chunks = wire.body
        wire.body = []
        await self.aclose()
        return chunks

    async def aclose(self) -> None:
        """Give the connection back (the body was read) or close it (it was not)."""
        if self.closed:
            return
        self.closed = True
        wire, conn = self.wire, self.conn
        done = wire.done
        if done.done() and done.exception() is None:
            self.timings.done = perf_counter()
            if wire.keep_alive and not conn.closed:
                self.pool.release_nowait(conn)
                return
        else:
            done.cancel()  # nobody will read how it ends: nothing to report
            conn.abort()
        await self.pool.discard(conn)


async def drain(wire: WireResponse, cap: int, keep: list[bytes] | None = None) -> None:
    """Read a streamed body to its end and drop it (a redirect's, before the next
    hop), or append its chunks to ``keep``: at most ``cap`` bytes, as a body read
    whole."""
    read = 0
    while chunks := await wire.next_chunks():
        if keep is not None:
            keep.extend(chunks)
        read += sum(map(len, chunks))
        if read > cap:
            raise body_too_large(cap, wire.status)
