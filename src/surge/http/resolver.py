"""Name resolution for the client: overrides, a cache, and lookups off the loop.

* Overrides as curl's ``--resolve HOST:PORT:ADDR[,ADDR...]``, where HOST may
  also be ``*`` (every host) or ``*.suffix`` (a domain and its subdomains) and
  PORT may be ``*``.  The most specific match wins: exact host, then the longest
  suffix, then ``*``.
* IP literals and ``localhost`` never reach a resolver; names under ``.invalid``
  fail at once, as RFC 6761 section 6.4 asks of resolvers (and so tests can
  produce ``dns_error`` without sending a query anywhere).
* Answers are cached (dnscache.py: positive for ``ttl`` seconds, negative for
  ``negative_ttl``, at most ``cache_size`` names, failures kept as text), and
  concurrent lookups of one name share one query.
* Two backends.  ``cares`` (the default, surge.http.cares): c-ares on the
  event loop, no thread per lookup, the TTL of every answer kept, failures told
  apart (NXDOMAIN, SERVFAIL, REFUSED, no answer, timeout), and ``servers=``
  (curl's ``--dns-servers IP[:PORT],...``) to ask other nameservers.
  ``system``: ``getaddrinfo``, which blocks, so it runs in a thread pool of its
  own (the event loop's default executor has min(32, cores + 4) threads - six
  here - which would serialise a crawl's lookups); answers are kept for ``ttl``.
* ``backend="auto"`` picks ``cares`` unless one of these holds, then ``system``:
  pycares is not importable; or the ``hosts:`` line of /etc/nsswitch.conf names
  a source other than ``files`` and ``dns`` (``mdns4_minimal``, ``resolve``,
  ``myhostname``, ``wins``, ``ldap``...: answers only the C library's NSS
  modules give).  The rule is conservative for ``resolve``: c-ares would read
  it as ``dns`` and ask the nameserver in resolv.conf (systemd-resolved's stub
  listener), where the C library asks systemd-resolved through its module.
  An absent file or ``hosts:`` line means the C library's default, ``dns
  files``.  ``servers=`` always uses c-ares: getaddrinfo cannot be pointed
  elsewhere.  ``backend="cares"`` / ``"system"`` force one.  pycares (and
  surge.http.cares) load at the first lookup that needs them, not before: a
  run that only meets addresses, overrides and ``localhost`` never loads them.
* ``dns_timeout`` bounds each lookup from the moment its query is sent (for
  ``system``, from when a thread starts it): time spent waiting for a thread
  or a connection slot does not count.  The failure is ``dns_error`` with a
  detail saying timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from surge.errors import RequestError, UsageError
from surge.http.dnscache import DEFAULT_MAX_ENTRIES, DNSCache

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from surge.http.cares import CaresBackend

Address = tuple[str, int]  # (ip, family)
Backend = Literal["auto", "cares", "system"]

#: The hosts: sources of /etc/nsswitch.conf that c-ares serves itself.
CARES_SOURCES = frozenset({"files", "dns"})
NSSWITCH = "/etc/nsswitch.conf"
#: Seconds a lookup may take once its query is sent (glibc's per-try default).
DNS_TIMEOUT = 5.0


def parse_servers(servers: str | Iterable[str]) -> list[str]:
    """curl's ``--dns-servers``: ``IP[:PORT]`` items, IPv6 as ``[IP]:PORT``, ``[IP]``
    or a bare ``IP``; a string may hold several, comma-separated.  Returns them as
    c-ares takes them; ``UsageError`` names the first bad one."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    parsed = []
    for item in items:
        spec = item.strip()
        host, port_text = spec, ""
        if spec.startswith("["):
            host, sep, rest = spec[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise UsageError(f"--dns-servers {item!r}: expected IP[:PORT] or [IPv6]:PORT")
            port_text = rest[1:]
            if rest and not port_text:
                raise UsageError(f"--dns-servers {item!r}: empty port")
        elif spec.count(":") == 1:
            host, _, port_text = spec.partition(":")
            if not port_text:
                raise UsageError(f"--dns-servers {item!r}: empty port")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise UsageError(
                f"--dns-servers {item!r}: {host!r} is not an IP address"
                " (expected IP[:PORT] or [IPv6]:PORT)"
            ) from None
        if spec.startswith("[") and address.version != 6:
            raise UsageError(f"--dns-servers {item!r}: brackets are for IPv6 addresses")
        port = None
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise UsageError(f"--dns-servers {item!r}: port {port_text!r} is not 1-65535")
            port = int(port_text)
        text = f"[{address}]" if address.version == 6 else str(address)
        parsed.append(f"{text}:{port}" if port else text)
    return parsed


def nsswitch_sources(path: str = NSSWITCH) -> list[str]:
    """The sources of the ``hosts:`` line of nsswitch.conf, actions (``[...]``)
    left out; the C library's default when there is no file or no such line."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        database, sep, rest = line.partition("#")[0].partition(":")
        if sep and database.strip() == "hosts":
            sources = []
            depth = 0
            for token in rest.replace("[", " [ ").replace("]", " ] ").split():
                if token == "[":
                    depth += 1
                elif token == "]":
                    depth = max(0, depth - 1)
                elif depth == 0:
                    sources.append(token)
            return sources
    return ["dns", "files"]


def choose_backend(backend: Backend, servers: list[str] | None, nsswitch: str = NSSWITCH) -> str:
    """The backend ``auto`` stands for here (see the module's docstring)."""
    if backend not in ("auto", "cares", "system"):
        raise UsageError(f"DNS backend {backend!r}: expected auto, cares or system")
    if backend == "system":
        if servers:
            raise UsageError("--dns-servers needs the c-ares backend, not the system's")
        return "system"
    if importlib.util.find_spec("pycares") is None:  # found, not loaded (see above)
        if backend == "cares" or servers:
            raise UsageError(
                "--dns-servers and the c-ares backend need pycares: pip install pycares"
            )
        return "system"
    if backend == "cares" or servers:
        return "cares"
    if not set(nsswitch_sources(nsswitch)) <= CARES_SOURCES:
        return "system"
    return "cares"


@dataclass(frozen=True, slots=True)
class Override:
    host: str  # "example.com", "*" or "*.example.com"
    port: int | None  # None: any port
    addresses: tuple[str, ...]

    @classmethod
    def parse(cls, spec: str) -> Override:
        """``HOST:PORT:ADDR[,ADDR...]``; an IPv6 ADDR may be bracketed."""
        host, sep1, rest = spec.partition(":")
        port_text, sep2, addr_text = rest.partition(":")
        if not (sep1 and sep2 and host and port_text and addr_text):
            raise UsageError(f"--resolve {spec!r}: expected HOST:PORT:ADDR[,ADDR...]")
        if port_text == "*":
            port = None
        else:
            try:
                port = int(port_text)
            except ValueError:
                raise UsageError(
                    f"--resolve {spec!r}: port {port_text!r} is not a number"
                ) from None
            if not 0 < port < 65536:
                raise UsageError(f"--resolve {spec!r}: port {port} out of range")
        addresses = []
        for addr in addr_text.split(","):
            addr = addr.strip().removeprefix("[").removesuffix("]")
            try:
                addresses.append(str(ipaddress.ip_address(addr)))
            except ValueError:
                raise UsageError(f"--resolve {spec!r}: {addr!r} is not an IP address") from None
        host = host.lower().rstrip(".")
        if "*" in host and host != "*" and not (host.startswith("*.") and "*" not in host[2:]):
            raise UsageError(f"--resolve {spec!r}: HOST may be a name, '*' or '*.suffix'")
        return cls(host, port, tuple(addresses))


def _zone_index(address: str) -> str:
    """An IPv6 address with its zone as an interface index (``::1%1``), which
    getaddrinfo takes for any address; glibc takes a zone's name (``%lo``) for
    a link-local address only, and asyncio's connect asks getaddrinfo."""
    ip, _, zone = address.partition("%")
    if zone.isdigit():
        return address
    try:
        return f"{ip}%{socket.if_nametoindex(zone)}"
    except OSError:
        detail = f"no network interface {zone!r} (the zone of {ip})"
        raise RequestError("dns_error", detail) from None


#: How long an answer that ``Resolver.prefetch`` got waits for its request
#: (seconds): past it, the request asks again.
HELD_FOR = 60.0


class Resolver:
    """Resolves host names to addresses, asynchronously and with a cache."""

    def __init__(
        self,
        overrides: Iterable[str | Override] = (),
        *,
        ttl: float = 300.0,
        negative_ttl: float = 30.0,
        family: int = socket.AF_UNSPEC,
        threads: int = 64,
        cache_size: int = DEFAULT_MAX_ENTRIES,
        servers: str | Iterable[str] | None = None,
        dns_timeout: float = DNS_TIMEOUT,
        backend: Backend = "auto",
        min_ttl: float = 5.0,
        max_ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
        concurrency: int = 1000,
    ) -> None:
        """``ttl``: how long a ``system`` answer is kept (c-ares answers keep their
        own TTL, clamped to [``min_ttl``, ``max_ttl``]: at least 5 s by default, so
        that a TTL of 0 -- /etc/hosts names have one -- still serves a burst of
        connections); ``negative_ttl``: how long a failure is kept.
        ``family``: AF_INET or AF_INET6 to ask for one family only (curl's -4/-6).
        ``servers``, ``dns_timeout``, ``backend``: see the module's docstring.
        ``clock``: the cache's, for tests.  ``concurrency``: how many lookups
        may be in flight at once (a client's ``max_connections``), which sizes
        c-ares's socket receive buffers (surge.http.cares.receive_buffer)."""
        self._exact: dict[tuple[str, int | None], tuple[str, ...]] = {}
        self._suffixes: list[tuple[str, int | None, tuple[str, ...]]] = []
        self._wildcard: dict[int | None, tuple[str, ...]] = {}
        for spec in overrides:
            self.add_override(spec)
        if family not in (socket.AF_UNSPEC, socket.AF_INET, socket.AF_INET6):
            raise UsageError(f"address family {family!r}: expected AF_UNSPEC, AF_INET or AF_INET6")
        if not dns_timeout > 0:
            raise UsageError(f"DNS timeout {dns_timeout!r}: must be more than 0 seconds")
        self.servers = parse_servers(servers) if servers else None
        self.backend = choose_backend(backend, self.servers)
        self.dns_timeout = dns_timeout
        self._family = family
        self._threads = threads
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"concurrency must be a whole number, 1 or more: {concurrency!r}")
        self.concurrency = concurrency
        self._executor: ThreadPoolExecutor | None = None
        self._cares: CaresBackend | None = None  # made by the first lookup that asks c-ares
        self.cache = DNSCache(
            max_entries=cache_size,
            ttl=ttl,
            negative_ttl=negative_ttl,
            min_ttl=min_ttl,
            max_ttl=max_ttl,
            clock=clock,
        )
        self._inflight: dict[str, asyncio.Future[tuple[str, ...]]] = {}
        #: Answers that prefetch got, held for the request they were asked for
        #: (taken by the first ask for the name: cached, or a resolve that joined
        #: the lookup; never served twice), whatever the cache keeps: name -> (addresses,
        #: until).  At most 2 x concurrency, the oldest dropped first.
        self._held: OrderedDict[str, tuple[tuple[str, ...], float]] = OrderedDict()
        self._clock = clock
        self.lookups = 0  # lookups sent to the backend (c-ares or getaddrinfo)

    def add_override(self, spec: str | Override) -> None:
        o = spec if isinstance(spec, Override) else Override.parse(spec)
        if o.host == "*":
            self._wildcard[o.port] = o.addresses
        elif o.host.startswith("*."):
            self._suffixes.append((o.host[1:], o.port, o.addresses))  # ".example.com"
            self._suffixes.sort(key=lambda s: -len(s[0]))
        else:
            self._exact[(o.host, o.port)] = o.addresses

    def override(self, host: str, port: int) -> tuple[str, ...] | None:
        """The addresses an override gives ``host:port``, if one does."""
        for p in (port, None):
            found = self._exact.get((host, p))
            if found:
                return found
        for suffix, p, addresses in self._suffixes:
            if (p is None or p == port) and (host.endswith(suffix) or host == suffix[1:]):
                return addresses
        return self._wildcard.get(port) or self._wildcard.get(None)

    def cached(self, host: str, port: int) -> tuple[str, ...] | None:
        """The answer if it needs no lookup (an override, an address, localhost, a
        cached answer), None if it does; raises ``dns_error`` for a known failure.

        Synchronous, so the common case costs no await and no timeout.
        """
        if self._exact or self._suffixes or self._wildcard:
            found = self.override(host, port)
            if found:
                return found
        if ":" in host or host[-1:].isdigit():
            try:
                address = str(ipaddress.ip_address(host))
            except ValueError:
                pass
            else:
                return (address,) if "%" not in address else (_zone_index(address),)
        if host == "localhost" or host.endswith(".localhost"):
            return ("127.0.0.1", "::1")
        if host == "invalid" or host.endswith(".invalid"):
            raise RequestError("dns_error", f"{host}: reserved name, never resolves (RFC 6761)")
        if self._held:  # an answer prefetch got for this name's next request: its, once
            held = self._held.pop(host, None)
            if held is not None and held[1] > self._clock():
                return held[0]
        return self.cache.get(host)

    def prefetch(self, host: str, port: int) -> None:
        """Start a lookup of ``host`` for a request that will come, and return at
        once.  The answer goes into the cache and is also held for that request
        (``HELD_FOR`` seconds at most), so that its ``resolve`` asks no second
        time whatever the cache did meanwhile (a TTL run out, a small cache).  A
        failure is neither cached nor held: the request asks again when its turn
        comes, as it would have (a name fixed meanwhile answers; a timeout states
        the request's own wait), and only a resolve that joined the lookup in
        flight shares it.  For c-ares only (a lookup is a callback, no task); a
        no-op for the system's resolver, for a name that needs no lookup, is
        held or is being looked up, and past 2 x ``concurrency`` in flight."""
        if self.backend != "cares" or host in self._inflight or host in self._held:
            return
        if len(self._inflight) >= 2 * self.concurrency:
            return
        try:
            if self.cached(host, port) is not None:
                return
        except RequestError:  # a failure known already
            return
        future: asyncio.Future[tuple[str, ...]] = asyncio.get_running_loop().create_future()
        self._inflight[host] = future
        self.lookups += 1
        answer = (self._cares or self._cares_backend()).lookup(host)

        def settle(done: asyncio.Future[Any]) -> None:
            if self._inflight.get(host) is future:
                del self._inflight[host]
            error = asyncio.CancelledError() if done.cancelled() else done.exception()
            if error is None:
                addresses, ttl = done.result()
                self.cache.put(host, addresses, ttl)
                held = self._held
                held[host] = (addresses, self._clock() + HELD_FOR)
                if len(held) > 2 * self.concurrency:
                    held.popitem(last=False)
                future.set_result(addresses)
                return
            if not isinstance(error, RequestError):
                error = RequestError("dns_error", f"{host}: lookup abandoned ({error!r})")
            future.set_exception(error)
            future.exception()  # retrieved: nobody may have joined it

        answer.add_done_callback(settle)

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        """Addresses for ``host``, IPv4 first; ``RequestError('dns_error')`` if none."""
        found = self.cached(host, port)
        if found is not None:
            return found
        inflight = self._inflight.get(host)
        if inflight is not None:
            answer = await asyncio.shield(inflight)
            self._held.pop(host, None)  # prefetch's answer, taken by this request
            return answer
        future: asyncio.Future[tuple[str, ...]] = asyncio.get_running_loop().create_future()
        self._inflight[host] = future
        self.lookups += 1
        try:  # the backend inline, not a coroutine of its own: one frame less a lookup
            if self.backend == "cares":
                answer, ttl = await (self._cares or self._cares_backend()).lookup(host)
            else:
                answer, ttl = await self._system_lookup(host, port), None
        except RequestError as e:
            self.cache.put_failure(host, e.detail)
            future.set_exception(e)
            future.exception()  # retrieved: no "never retrieved" warning if nobody shares it
            raise
        except BaseException as e:
            future.set_exception(RequestError("dns_error", f"{host}: lookup abandoned ({e!r})"))
            future.exception()
            raise
        finally:
            del self._inflight[host]
        self.cache.put(host, answer, ttl)
        future.set_result(answer)
        return answer

    def _cares_backend(self) -> CaresBackend:
        # Here, not at import: pycares costs ~8 ms to load, and most runs never ask it.
        from surge.http.cares import CaresBackend

        self._cares = CaresBackend(
            servers=self.servers,
            timeout=self.dns_timeout,
            family=self._family,
            concurrency=self.concurrency,
        )
        return self._cares

    async def _system_lookup(self, host: str, port: int) -> tuple[str, ...]:
        if self._executor is None:
            # Here: only getaddrinfo needs threads (concurrent.futures.thread, ~0.7 ms).
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="surge-dns")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[tuple[Any, ...]]] = loop.create_future()
        timeout = self.dns_timeout

        def fail(detail: str) -> None:
            if not answer.done():
                answer.set_exception(RequestError("dns_error", f"{host}: {detail}"))

        timer: list[asyncio.TimerHandle] = []

        def started() -> None:  # the thread has begun: the timeout starts now
            if not answer.done():
                timer.append(loop.call_later(timeout, fail, f"timeout after {timeout:g} s"))

        def finished(done: concurrent.futures.Future[list[tuple[Any, ...]]]) -> None:
            for handle in timer:
                handle.cancel()
            if answer.done():
                return
            if done.cancelled():  # the resolver was closed before a thread took it
                fail("lookup cancelled")
                return
            error = done.exception()
            if error is None:
                answer.set_result(done.result())
            elif isinstance(error, socket.gaierror):
                fail(str(error.strerror or error))
            elif isinstance(error, UnicodeError):
                fail(str(error))
            else:
                answer.set_exception(error)

        def work() -> list[tuple[Any, ...]]:
            loop.call_soon_threadsafe(started)
            return list(socket.getaddrinfo(host, port, self._family, socket.SOCK_STREAM))

        def hand_back(done: concurrent.futures.Future[list[tuple[Any, ...]]]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(finished, done)

        self._executor.submit(work).add_done_callback(hand_back)
        infos = await answer
        addresses: list[str] = []
        for family in (socket.AF_INET, socket.AF_INET6):  # IPv4 first, like most clients
            for info in infos:
                if info[0] == family and info[4][0] not in addresses:
                    addresses.append(str(info[4][0]))
        if not addresses:
            raise RequestError("dns_error", f"{host}: no addresses")
        return tuple(addresses)

    def forget_loop(self) -> None:
        """Drop, without closing, what this resolver holds on an event loop (the
        c-ares channel, the lookup threads, lookups in flight): in a forked
        child they are the parent's (their descriptors are registered with the
        parent's loop), so they are kept referenced and never touched again.
        Overrides and cached answers stay."""
        from surge.http.portal import _ABANDONED

        _ABANDONED.append((self._cares and self._cares._current, self._executor, self._inflight))
        if self._cares is not None:
            self._cares._current = None
        self._executor = None
        self._inflight = {}

    def close(self) -> None:
        """Release the threads or the c-ares channel; lookups in flight fail (call
        it from the event loop's thread, or once the loop has stopped)."""
        if self._cares is not None:
            self._cares.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
