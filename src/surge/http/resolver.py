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
* ``getaddrinfo`` blocks, so it runs in a thread pool of its own: the event
  loop's default executor has min(32, cores + 4) threads - six here - which
  would serialise a crawl's lookups.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from surge.errors import RequestError, UsageError
from surge.http.dnscache import DEFAULT_MAX_ENTRIES, DNSCache

Address = tuple[str, int]  # (ip, family)


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
    ) -> None:
        self._exact: dict[tuple[str, int | None], tuple[str, ...]] = {}
        self._suffixes: list[tuple[str, int | None, tuple[str, ...]]] = []
        self._wildcard: dict[int | None, tuple[str, ...]] = {}
        for spec in overrides:
            self.add_override(spec)
        self._family = family
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None
        self.cache = DNSCache(max_entries=cache_size, ttl=ttl, negative_ttl=negative_ttl)
        self._inflight: dict[str, asyncio.Future[tuple[str, ...]]] = {}
        self.lookups = 0  # queries that reached getaddrinfo

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
                return (str(ipaddress.ip_address(host)),)
            except ValueError:
                pass
        if host == "localhost" or host.endswith(".localhost"):
            return ("127.0.0.1", "::1")
        if host == "invalid" or host.endswith(".invalid"):
            raise RequestError("dns_error", f"{host}: reserved name, never resolves (RFC 6761)")
        return self.cache.get(host)

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        """Addresses for ``host``, IPv4 first; ``RequestError('dns_error')`` if none."""
        found = self.cached(host, port)
        if found is not None:
            return found
        inflight = self._inflight.get(host)
        if inflight is not None:
            return await asyncio.shield(inflight)
        future: asyncio.Future[tuple[str, ...]] = asyncio.get_running_loop().create_future()
        self._inflight[host] = future
        try:
            answer = await self._lookup(host, port)
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
        self.cache.put(host, answer)
        future.set_result(answer)
        return answer

    async def _lookup(self, host: str, port: int) -> tuple[str, ...]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="surge-dns")
        self.lookups += 1
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.run_in_executor(
                self._executor,
                socket.getaddrinfo,
                host,
                port,
                self._family,
                socket.SOCK_STREAM,
            )
        except socket.gaierror as e:
            raise RequestError("dns_error", f"{host}: {e.strerror or e}") from None
        except UnicodeError as e:
            raise RequestError("dns_error", f"{host}: {e}") from None
        addresses: list[str] = []
        for family in (socket.AF_INET, socket.AF_INET6):  # IPv4 first, like most clients
            for info in infos:
                if info[0] == family and info[4][0] not in addresses:
                    addresses.append(str(info[4][0]))
        if not addresses:
            raise RequestError("dns_error", f"{host}: no addresses")
        return tuple(addresses)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
