"""Name lookups with c-ares (pycares), driven by the event loop: no thread per lookup.

c-ares reads the system's configuration as the C library does -- nameservers,
search domains, ``ndots``, ``attempts`` from /etc/resolv.conf, the order of
``files`` and ``dns`` from /etc/nsswitch.conf, names from /etc/hosts -- and
does what a crawl needs from a stub resolver: A and AAAA queries in parallel,
CNAME chains, a truncated UDP answer asked again over TCP, retransmission, and
the TTL of every answer.

Why pycares on the loop rather than aiodns or c-ares's own event thread: CPU per
lookup (A + AAAA of distinct names against surge.sim.dns, 100 in flight, 2,000
lookups, uvloop, the 2-core gVisor development machine; noisy, ranges of runs):
pycares with its sockets on the loop ~115-175 us, pycares with the c-ares event
thread and ``call_soon_threadsafe`` ~140-175 us, aiodns 4 (the event thread,
plus RFC 6724 sorting) ~210-215 us.  Driving the sockets ourselves also keeps
every callback on the loop's thread.

Where a lookup's CPU goes (benchmarks/dns.py's "cpu" section and its floors;
benchmarks/README.md, "Name resolution"): about two thirds is c-ares itself (two
queries built, each duplicated, written and sent; two answers read and parsed;
the /etc/hosts check) and the kernel (two datagrams out, two in).  Of the rest,
pycares's Python wrapper was the largest part: per lookup a lock, a context
manager, a cffi handle in a global dict, hints allocated, and on the answer a
dataclass per address and per CNAME, each address via ``ares_inet_ntop`` into
a new buffer.  So lookups call c-ares's ``ares_getaddrinfo`` through pycares's
own cffi bindings (``pycares._cares``), with one C callback per channel (the
lookup's key its argument) that reads the addresses straight out of c-ares's
``struct ares_addrinfo`` and frees it: 128 -> 106 us per A + AAAA lookup,
103 -> 70 us A only (medians of 5 rounds, before and after in the same run),
about pycares's public API with a callback that does nothing (100 us), ~27 us
above c-ares alone (79 us).
Without those bindings (another pycares layout) the public API is used.

How it is set up, and why:

* The channel's query cache is off (``qcache_max_ttl = 0``): c-ares keeps every
  answer up to its TTL (1 hour at most) with no bound on their number, which at
  crawl scale is memory the bounded :class:`~surge.http.dnscache.DNSCache`
  exists to avoid, and it would answer for names that cache has let go.
  pycares does not expose that option, so the channel is built here from
  pycares's own C bindings (pycares 5.x; other versions fall back to
  ``pycares.Channel`` with the cache on).
* ``ARES_AI_NOSORT``: c-ares would otherwise sort addresses by RFC 6724, which
  connects a UDP socket per address to learn the source address; the resolver
  puts IPv4 first itself and keeps the server's order within a family.
* Bursts: a crawl starts a lookup per request in flight, so 1,000 in flight is
  2,000 queries at once and their answers arrive together.  On one UDP socket
  with the default 208 KB receive buffer about half of them were dropped on
  loopback (a lost answer costs a retransmission, ``timeout / 3`` later: 1,000
  lookups took 2.45 s and 33 failed, against 0.17 s and none here).  So the
  channel asks for a 4 MB receive buffer (the kernel caps it at
  ``net.core.rmem_max``; at that default, 208 KB, it gives twice the default)
  and moves to a new UDP socket every 256 queries (``udp_max_queries``, which
  also varies the source port), each socket a buffer of its own.  Neither
  costs anything measurable.  (The fallback for other pycares versions keeps
  c-ares's defaults.)
* The timeout: each lookup has ``timeout`` seconds from the moment its query is
  sent (a timer per 50 ms slot, surge.http.deadlines).  c-ares is given two
  tries of ``timeout / 3`` and ``2 * timeout / 3`` (it doubles the wait for a
  retry), so that it also gives up when the lookup does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from surge.errors import RequestError
from surge.http.deadlines import Deadlines

try:
    import pycares
except ImportError:  # surge runs without it: the resolver falls back to getaddrinfo
    pycares = None  # type: ignore[assignment]
try:  # pycares 5's cffi bindings of c-ares: the lookups' fast path (see above)
    from pycares import _cares

    _ffi: Any = _cares.ffi
    _lib: Any = _cares.lib
    #: Where the address is in a struct sockaddr_in (4 bytes) and a sockaddr_in6 (16).
    _V4 = _ffi.offsetof("struct sockaddr_in", "sin_addr")
    _V6 = _ffi.offsetof("struct sockaddr_in6", "sin6_addr")
except ImportError:
    _ffi = _lib = None

#: c-ares's ares.h values that pycares 5 does not export.
ARES_AI_NOSORT = 1 << 7
ARES_OPT_QUERY_CACHE = 1 << 21
ARES_OPT_UDP_MAX_QUERIES = 1 << 19
#: c-ares's "no socket" (pycares.ARES_SOCKET_BAD), for ares_process_fd.
ARES_SOCKET_BAD = -1
#: c-ares tries per server; the lookup's timeout is split over them (see above).
TRIES = 2
#: The receive buffer of c-ares's sockets, bytes, and the queries one UDP
#: socket carries before c-ares opens another (see above).
RECEIVE_BUFFER = 4 * 1024 * 1024
UDP_MAX_QUERIES = 256

Answer = tuple[tuple[str, ...], float | None]  # addresses (IPv4 first), TTL in seconds


def _detail(host: str, status: int, timeout: float) -> str:
    """The ``dns_error`` detail for a c-ares status (``timeout``: the seconds
    the lookup actually waited, for a timeout's)."""
    assert pycares is not None
    what: str | None = {
        pycares.errno.ARES_ENOTFOUND: "NXDOMAIN",
        pycares.errno.ARES_ENODATA: "no answer (NOERROR, no address records)",
        pycares.errno.ARES_ESERVFAIL: "SERVFAIL",
        pycares.errno.ARES_EREFUSED: "REFUSED",
        pycares.errno.ARES_ETIMEOUT: f"timeout after {timeout:.2f} s",
        pycares.errno.ARES_ECONNREFUSED: "connection refused by the DNS server",
        pycares.errno.ARES_EBADNAME: "not a valid host name",
        pycares.errno.ARES_ECANCELLED: "lookup cancelled",
        pycares.errno.ARES_EDESTRUCTION: "lookup cancelled",
    }.get(status)
    if what is None:
        what = str(pycares.errno.strerror(status))
    return f"{host}: {what}"


def _new_channel(state: Callable[[int, bool, bool], None], timeout: float) -> Any:
    """A channel whose sockets are reported to ``state``, with no query cache."""
    assert pycares is not None
    per_try_ms = max(1, int(timeout * 1000 / (2**TRIES - 1)))
    try:
        from pycares import _cares

        ffi, lib = _cares.ffi, _cares.lib
        channel = pycares.Channel.__new__(pycares.Channel)
        channel._channel = None
        channel._lock = threading.RLock()
        channel._flags = 0
        handle = ffi.new_handle(state)
        channel._sock_state_cb_handle = handle  # kept alive as long as the channel
        options = ffi.new("struct ares_options *")
        options.timeout = per_try_ms
        options.tries = TRIES
        options.sock_state_cb = lib._sock_state_cb
        options.sock_state_cb_data = handle
        options.qcache_max_ttl = 0
        options.socket_receive_buffer_size = RECEIVE_BUFFER
        options.udp_max_queries = UDP_MAX_QUERIES
        mask = lib.ARES_OPT_TIMEOUTMS | lib.ARES_OPT_TRIES | lib.ARES_OPT_SOCK_STATE_CB
        mask |= lib.ARES_OPT_SOCK_RCVBUF | ARES_OPT_UDP_MAX_QUERIES
        raw = ffi.new("ares_channel *")
        status = lib.ares_init_options(raw, options, mask | ARES_OPT_QUERY_CACHE)
        if status != lib.ARES_SUCCESS:
            raise pycares.AresError(status, pycares.errno.strerror(status))
        channel._channel = raw
        pycares._shutdown_manager.start()
        return channel
    except (ImportError, AttributeError, TypeError):  # not pycares 5's layout
        return pycares.Channel(sock_state_cb=state, timeout=per_try_ms / 1000, tries=TRIES)


class _Lookup:
    """One ``getaddrinfo`` in flight: its future, and the deadline's slot."""

    __slots__ = ("channel", "future", "host", "slot", "started")

    def __init__(self, channel: _LoopChannel, future: asyncio.Future[Answer], host: str) -> None:
        self.channel = channel
        self.future = future
        self.host = host
        self.slot: set[Any] | None = None
        self.started = channel.loop.time()

    def waited(self) -> float:
        """Seconds since the query was sent: what a timeout's message states
        (not the limit: a lookup cut short by its request's own connect
        timeout, or one that fired late on a busy loop, says how long it was)."""
        return self.channel.loop.time() - self.started

    def settle(self, status: int, v4: list[str], v6: list[str], ttl: float | None) -> None:
        """c-ares has answered: the addresses (IPv4 first) or a ``dns_error``."""
        if self.slot is not None:
            self.slot.discard(self)
        future = self.future
        if future.done():  # timed out or abandoned already
            return
        if status == 0 and not (v4 or v6):
            status = pycares.errno.ARES_ENODATA
        if status:
            detail = _detail(self.host, status, self.waited())
            future.set_exception(RequestError("dns_error", detail))
        else:
            future.set_result((tuple(dict.fromkeys(v4 + v6)), ttl))

    def __call__(self, result: Any, status: int | None) -> None:
        """pycares's own callback (the public API's path): its result objects."""
        channel = self.channel
        if channel.closed:  # a closed channel, destroyed on pycares's thread
            return
        channel.in_flight -= 1
        v4: list[str] = []
        v6: list[str] = []
        ttl: float | None = None
        if status is None:
            for node in result.nodes:
                address = node.addr[0]
                address = address.decode() if isinstance(address, bytes) else str(address)
                (v4 if node.family == socket.AF_INET else v6).append(address)
                ttl = node.ttl if ttl is None else min(ttl, node.ttl)
            for cname in result.cnames:  # the chain's records expire too
                ttl = cname.ttl if ttl is None else min(ttl, cname.ttl)
        self.settle(status or 0, v4, v6, ttl)

    def expire(self) -> None:
        if not self.future.done():
            status = pycares.errno.ARES_ETIMEOUT
            detail = _detail(self.host, status, self.waited())
            self.future.set_exception(RequestError("dns_error", detail))


class _LoopChannel:
    """A c-ares channel whose sockets and timer live on one event loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, servers: list[str] | None, timeout: float
    ) -> None:
        self.loop = loop
        self.timeout = timeout
        self.deadlines = Deadlines(loop)
        self.readers: set[int] = set()
        self.writers: set[int] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.in_flight = 0  # c-ares callbacks still to come
        self.closed = False
        self.channel = _new_channel(self._socket_state, timeout)
        if servers:
            self.channel.servers = servers
        # The fast path: c-ares called through pycares's bindings, with one C
        # callback for every lookup (the lookup's key its argument) that reads
        # the addresses straight from c-ares's answer.  pycares's own path
        # costs per lookup a lock, a cffi handle, hints allocated, and a
        # dataclass per address and per CNAME (module docstring: measured).
        self.raw: Any = None  # c-ares's channel, None: pycares's public API
        self.pending: dict[int, _Lookup] = {}
        self.next_key = 0
        raw = getattr(self.channel, "_channel", None)
        if _ffi is not None and raw is not None:
            # The bindings are the channel's own: its callback may still run
            # (on pycares's thread, as the channel is destroyed) when nothing
            # else uses them.
            self.ffi: Any = _ffi
            self.lib: Any = _lib
            self.hints = _ffi.new("struct ares_addrinfo_hints *")
            self.hints.ai_flags = ARES_AI_NOSORT
            # Kept alive by this object, which the channel's socket callback
            # keeps alive until pycares's thread has destroyed the channel.
            self.answered = _ffi.callback("ares_addrinfo_callback", self._answered)
            self.raw = raw[0]

    def lookup(self, host: str, family: int) -> asyncio.Future[Answer]:
        loop = self.loop
        future: asyncio.Future[Answer] = loop.create_future()
        lookup = _Lookup(self, future, host)
        if self.closed:
            lookup.settle(pycares.errno.ARES_ECANCELLED, [], [], None)
            return future
        self.in_flight += 1  # before: c-ares may call back at once (/etc/hosts)
        key = 0
        try:
            if self.raw is not None:
                # pycares's encoding: IDNA 2008 for a name that is not ASCII
                name = host.encode() if host.isascii() else pycares.utils.parse_name(host)
                key = self.next_key = self.next_key + 1
                self.pending[key] = lookup
                self.hints.ai_family = family  # c-ares copies the hints
                ffi = self.ffi
                arg = ffi.cast("void *", key)
                self.lib.ares_getaddrinfo(self.raw, name, ffi.NULL, self.hints, self.answered, arg)
            else:
                self.channel.getaddrinfo(
                    host, None, family=family, flags=ARES_AI_NOSORT, callback=lookup
                )
        except (pycares.AresError, ValueError, TypeError, UnicodeError, RuntimeError) as e:
            self.in_flight -= 1  # raised before c-ares had the query: no callback
            self.pending.pop(key, None)
            if not future.done():
                status = e.args[0] if isinstance(e, pycares.AresError) and e.args else None
                detail = (
                    _detail(host, status, self.timeout)
                    if isinstance(status, int)
                    else f"{host}: not a valid host name ({e})"
                )
                future.set_exception(RequestError("dns_error", detail))
            return future
        if future.done():  # answered at once: /etc/hosts, or an error c-ares saw first
            return future
        lookup.slot = self.deadlines.add(lookup, loop.time() + self.timeout)
        if self.timer is None:
            self._arm()
        return future

    def _answered(self, arg: Any, status: int, timeouts: int, result: Any) -> None:
        """c-ares's callback on the fast path.  (An exception here would only be
        printed by cffi; the lookup would end at its deadline.)"""
        v4: list[str] = []
        v6: list[str] = []
        ttl: float | None = None
        ffi = self.ffi
        if result != ffi.NULL:
            try:
                node = result.nodes
                buffer, ntop = ffi.buffer, socket.inet_ntop
                while node != ffi.NULL:
                    if node.ai_family == socket.AF_INET:
                        v4.append(ntop(socket.AF_INET, buffer(node.ai_addr, _V4 + 4)[_V4:]))
                    else:
                        v6.append(ntop(socket.AF_INET6, buffer(node.ai_addr, _V6 + 16)[_V6:]))
                    if ttl is None or node.ai_ttl < ttl:
                        ttl = node.ai_ttl
                    node = node.ai_next
                cname = result.cnames
                while cname != ffi.NULL:  # the chain's records expire too
                    if ttl is None or cname.ttl < ttl:
                        ttl = cname.ttl
                    cname = cname.next
            finally:
                self.lib.ares_freeaddrinfo(result)
        if self.closed:  # a closed channel, destroyed on pycares's thread
            return
        lookup = self.pending.pop(int(ffi.cast("uintptr_t", arg)), None)
        if lookup is not None:
            self.in_flight -= 1
            lookup.settle(status, v4, v6, ttl)

    def _socket_state(self, fd: int, readable: bool, writable: bool) -> None:
        # Called by c-ares as it runs on the loop's thread -- except when a closed
        # channel is destroyed on pycares's shutdown thread: nothing to do then.
        if self.closed:
            return
        loop = self.loop
        if readable:
            if fd not in self.readers:
                loop.add_reader(fd, self._process, fd, ARES_SOCKET_BAD)
                self.readers.add(fd)
        elif fd in self.readers:
            loop.remove_reader(fd)
            self.readers.discard(fd)
        if writable:
            if fd not in self.writers:
                loop.add_writer(fd, self._process, ARES_SOCKET_BAD, fd)
                self.writers.add(fd)
        elif fd in self.writers:
            loop.remove_writer(fd)
            self.writers.discard(fd)

    def _process(self, read_fd: int, write_fd: int) -> None:
        """Let c-ares read or write a socket, or (both ``ARES_SOCKET_BAD``) see
        to its timeouts."""
        if self.closed:
            return
        if self.raw is not None:
            self.lib.ares_process_fd(self.raw, read_fd, write_fd)
        else:
            self.channel.process_fd(read_fd, write_fd)

    def _arm(self) -> None:
        """Wake c-ares when its next retransmission or timeout is due."""
        delay = self.channel.timeout(1.0)
        self.timer = self.loop.call_later(max(delay, 0.001), self._tick)

    def _tick(self) -> None:
        self.timer = None
        if self.closed:
            return
        self._process(ARES_SOCKET_BAD, ARES_SOCKET_BAD)
        if self.in_flight > 0:
            self._arm()

    def close(self) -> None:
        """Fail the lookups in flight, unhook the sockets, release the channel: at
        once on the loop's thread (or with no loop running), else soon, on it."""
        loop = self.loop
        if self.closed:
            return
        if not loop.is_closed():
            try:
                here = asyncio.get_running_loop() is loop
            except RuntimeError:
                here = False
            if loop.is_running() and not here:
                loop.call_soon_threadsafe(self.close)
                return
            with contextlib.suppress(RuntimeError):  # destroyed already
                self.channel.cancel()  # the callbacks run now: every future is answered
            for fd in self.readers:
                loop.remove_reader(fd)
            for fd in self.writers:
                loop.remove_writer(fd)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.readers.clear()
        self.writers.clear()
        self.pending.clear()
        self.closed = True
        self.channel.close()


def has_global_ipv6(if_inet6: str = "/proc/net/if_inet6") -> bool:
    """Whether this host has an IPv6 address that reaches the Internet: one of
    global scope outside fc00::/7 (unique local addresses, RFC 4193, are not
    routed beyond their site), as glibc's AI_ADDRCONFIG asks before sending an
    AAAA query.  Linux lists its addresses in ``if_inet6``; elsewhere, a UDP
    socket connected to a global address (no datagram is sent) says whether
    there is a route."""
    try:
        with open(if_inet6) as table:
            lines = table.read().split("\n")
    except OSError:
        try:
            with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
                probe.connect(("2001:4860:4860::8888", 53))
            return True
        except OSError:
            return False
    for line in lines:
        fields = line.split()
        # address, interface index, prefix length, scope, flags, name
        if len(fields) >= 4 and fields[3] == "00" and int(fields[0][:2], 16) & 0xFE != 0xFC:
            return True
    return False


class CaresBackend:
    """c-ares lookups for the resolver: a channel per event loop that asks (the
    previous loop's is closed).  ``servers``: ``IP[:PORT]`` / ``[IPv6]:PORT``
    strings as c-ares takes them, None for the system's."""

    def __init__(
        self,
        *,
        servers: Sequence[str] | None = None,
        timeout: float = 5.0,
        family: int = socket.AF_UNSPEC,
    ) -> None:
        if pycares is None:
            raise RuntimeError("pycares is not installed")
        self.servers = list(servers) if servers else None
        self.timeout = timeout
        if family == socket.AF_UNSPEC and not has_global_ipv6():
            # No AAAA query where no IPv6 address could be used (AI_ADDRCONFIG):
            # half the queries, and their CPU, saved.  -6 still asks for them.
            family = socket.AF_INET
        self.family = family
        self._current: _LoopChannel | None = None

    def lookup(self, host: str) -> asyncio.Future[Answer]:
        """Send the query now; the future holds (addresses, TTL) or a ``dns_error``."""
        loop = asyncio.get_running_loop()
        current = self._current
        if current is None or current.loop is not loop or current.closed:
            if current is not None:
                current.close()
            current = self._current = _LoopChannel(loop, self.servers, self.timeout)
        return current.lookup(host, self.family)

    def close(self) -> None:
        """Fail the lookups in flight and release the channel."""
        if self._current is not None:
            self._current.close()
            self._current = None
