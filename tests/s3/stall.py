"""A TCP relay in front of a real server that stalls on cue: the hung server
of issue #34, made on purpose.

Bytes are forwarded both ways as they come until the relay is told to stall;
then a stalled connection forwards nothing, either way, and keeps its sockets
open - the peer sees a silent server, not a closed one:

* ``black_hole()``: every connection stalls, and so does every one accepted
  from then on (a server stopped with SIGSTOP: the kernel still accepts).
* ``stall_in_flight()``: the connections open now stall; later ones pass (a
  load balancer whose backend died under the flows it held).
* ``heal()``: connections accepted from now on pass; those that stalled stay
  stalled (they were bound to the dead backend).
* ``stall_after(up=N)`` / ``stall_after(down=N)``: stall (as ``black_hole``,
  or as ``stall_in_flight`` with ``new=False``) once N bytes have crossed
  towards the server (an upload's body) or towards the client (a download's).
* ``trickle(interval, after=N)``: past the first N bytes of each answer's
  connection (its head, say), the server's bytes go one at a time,
  ``interval`` seconds apart.

The relay runs an event loop of its own in a thread; each connection's pumps
poll its state every few milliseconds, which is all a test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator

POLL = 0.01


class StallingRelay:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.up = 0  # bytes forwarded towards the server
        self.down = 0  # bytes forwarded towards the client
        self.accepted = 0
        self._ids = itertools.count()
        #: connections with an id below this stall (a black hole: every one)
        self._stall_below = 0
        self._stall_all = False
        self._healed_from: int | None = None
        self._after: tuple[str, int, bool] | None = None
        self._trickle: float | None = None
        self._trickle_after = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="stalling-relay")
        self._stop: asyncio.Future[None] | None = None

    # -- control, from the test's thread ---------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def black_hole(self) -> None:
        self._stall_all = True
        self._healed_from = None

    def stall_in_flight(self) -> None:
        self._stall_below = next(self._ids)

    def heal(self) -> None:
        self._healed_from = next(self._ids)

    def stall_after(
        self, *, up: int | None = None, down: int | None = None, new: bool = True
    ) -> None:
        direction, count = ("up", up) if up is not None else ("down", down)
        assert count is not None
        self._after = (direction, count, new)

    def trickle(self, interval: float | None, *, after: int = 0) -> None:
        self._trickle = interval
        self._trickle_after = after

    @property
    def stalled(self) -> bool:
        return self._stall_all or self._stall_below > 0

    # -- the relay ------------------------------------------------------------------------

    def _stalls(self, ident: int) -> bool:
        if self._healed_from is not None and ident >= self._healed_from:
            return False
        return self._stall_all or ident < self._stall_below

    def _count(self, direction: str, size: int) -> None:
        if direction == "up":
            self.up += size
        else:
            self.down += size
        after = self._after
        if after is not None and (self.up if after[0] == "up" else self.down) >= after[1]:
            self._after = None
            if after[2]:
                self.black_hole()
            else:
                self.stall_in_flight()

    async def _pump(
        self, ident: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str
    ) -> None:
        sent = 0
        try:
            while True:
                while self._stalls(ident):
                    await asyncio.sleep(POLL)
                data = await reader.read(65536)
                if not data:
                    break
                while self._stalls(ident):
                    await asyncio.sleep(POLL)
                if direction == "down" and self._trickle is not None:
                    head = data[: max(0, self._trickle_after - sent)]
                    writer.write(head)
                    sent += len(head)
                    for i in range(len(head), len(data)):
                        writer.write(data[i : i + 1])
                        await writer.drain()
                        self._count(direction, 1)
                        await asyncio.sleep(self._trickle)
                    continue
                writer.write(data)
                await writer.drain()
                self._count(direction, len(data))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ident = next(self._ids)
        self.accepted += 1
        try:
            while self._stalls(ident):  # a stopped server: accepted, never answered
                await asyncio.sleep(POLL)
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except (OSError, asyncio.CancelledError):
            writer.close()
            return
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pump(ident, reader, upstream_writer, "up"),
                self._pump(ident, upstream_reader, writer, "down"),
            )

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._stop = self._loop.create_future()
            self._ready.set()
            async with server:
                await self._stop
                others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in others:
                    task.cancel()
                await asyncio.gather(*others, return_exceptions=True)

        self._loop.run_until_complete(serve())
        self._loop.close()

    def start(self) -> StallingRelay:
        self._thread.start()
        self._ready.wait(10)
        return self

    def close(self) -> None:
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))
        self._thread.join(10)


@contextlib.contextmanager
def stalling_relay(upstream_port: int) -> Iterator[StallingRelay]:
    relay = StallingRelay(upstream_port).start()
    try:
        yield relay
    finally:
        relay.close()
