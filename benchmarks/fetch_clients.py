"""The client side of benchmarks/fetch.py's "keepalive" and "tls" sections, one client a process.

Run as ``python benchmarks/fetch_clients.py SPEC.json``; prints one line of JSON.
SPEC holds ``client`` (a key of :data:`CLIENTS`), ``urls`` (measured), ``warmup``
(URLs fetched first with the same client, not measured), ``inflight`` and
``cafile``.  The child:

1. imports only its own client's library and builds the client (not measured);
2. fetches ``warmup`` (not measured: connections opened, TLS context built, code
   paths warm);
3. reads ``getrusage(RUSAGE_SELF)`` (user + system CPU of every thread of this
   process: tokio's and libcurl's threads count, and so do requests' threads),
   fetches ``urls`` with ``inflight`` requests in flight, closes the client (so a
   client that leaves connections open to close later pays for closing them
   like one that closes them as it goes), and reads the clock and rusage again.

Every name is a ``*.sim`` name sent to 127.0.0.1 by the client's own mechanism
(surge ``resolve``, aiohttp a static resolver, pycurl ``CURLOPT_RESOLVE``,
pyreqwest ``resolve``, httpx and requests a patched ``socket.getaddrinfo``);
proxies are off in every client.  Nothing here ever connects elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

#: How long a single request may take before it counts as failed (seconds).
REQUEST_TIMEOUT_S = 30.0

#: Client name -> what it is, for the tables (fetch.py prints these).
CLIENTS: dict[str, str] = {
    "surge": "surge.http.AsyncClient on uvloop (surge's engine)",
    "aiohttp_uvloop": "aiohttp ClientSession + TCPConnector(limit=inflight), uvloop",
    "aiohttp": "aiohttp ClientSession + TCPConnector(limit=inflight), asyncio",
    "httpx": "httpx.AsyncClient(limits=max_connections=inflight), asyncio",
    "pycurl": "pycurl CurlMulti with inflight easy handles, reused",
    "pyreqwest": "pyreqwest async Client(max_connections=inflight), asyncio",
    "requests": "requests.Session per thread, inflight threads",
    "raw_floor": "reference: asyncio Protocol + httptools on uvloop, idle list per host",
}

Outcome = int | str  # a status, or the name of the exception


def _cpu() -> tuple[float, float, int, int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (
        usage.ru_utime,
        usage.ru_stime,
        usage.ru_minflt,
        usage.ru_nvcsw,
        usage.ru_nivcsw,
    )


def _loopback_only() -> None:
    """``socket.getaddrinfo`` in this process: ``*.sim`` -> 127.0.0.1, and any other
    name except a loopback literal fails at once, so that no lookup leaves the machine."""
    from surge.sim import is_sim_name, patch_getaddrinfo

    patch_getaddrinfo()
    sim_aware = socket.getaddrinfo

    def guarded(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("127.0.0.1", b"127.0.0.1") or is_sim_name(host):
            return sim_aware(host, port, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, f"fetch_clients: {host!r} is not a .sim name")

    socket.getaddrinfo = guarded


def _sim_names(urls: list[str]) -> set[tuple[str, int]]:
    names = set()
    for url in urls:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.hostname.endswith(".sim"), url
        names.add((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)))
    return names


# -- asyncio clients: `inflight` workers pulling from one iterator ---------------------


async def _drive(
    get: Callable[[str], Awaitable[Outcome]], urls: list[str], inflight: int
) -> Counter[Outcome]:
    outcomes: Counter[Outcome] = Counter()
    source: Iterator[str] = iter(urls)

    async def worker() -> None:
        for url in source:
            try:
                outcomes[await get(url)] += 1
            except Exception as exc:
                outcomes[type(exc).__name__] += 1

    await asyncio.gather(*(worker() for _ in range(min(inflight, len(urls)))))
    return outcomes


class _Measure:
    """Warm-up, then the measured phase (requests + the client's close)."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}

    def start(self) -> None:
        self._cpu = _cpu()
        self._t = time.perf_counter()

    def stop(self, outcomes: Counter[Outcome], warm: Counter[Outcome]) -> None:
        wall = time.perf_counter() - self._t
        user, system, faults, voluntary, involuntary = _cpu()
        self.result = {
            "wall_s": wall,
            "user_s": user - self._cpu[0],
            "sys_s": system - self._cpu[1],
            "cpu_s": user - self._cpu[0] + system - self._cpu[1],
            # What system time has in it besides system calls: page faults, and the
            # context switches (sleeps in epoll_wait; preemptions by other processes).
            "minor_faults": faults - self._cpu[2],
            "voluntary_switches": voluntary - self._cpu[3],
            "involuntary_switches": involuntary - self._cpu[4],
            "outcomes": {str(k): v for k, v in outcomes.items()},
            "warmup_outcomes": {str(k): v for k, v in warm.items()},
        }


async def _surge(spec: dict[str, Any], m: _Measure) -> None:
    from surge.http import AsyncClient

    client = AsyncClient(
        max_connections=spec["inflight"],
        resolve=["*.sim:*:127.0.0.1"],
        cafile=spec["cafile"],
        max_time=REQUEST_TIMEOUT_S,
    )

    async def get(url: str) -> Outcome:
        return (await client.get(url)).status

    warm = await _drive(get, spec["warmup"], spec["inflight"])
    m.start()
    outcomes = await _drive(get, spec["urls"], spec["inflight"])
    await client.close()
    m.stop(outcomes, warm)


async def _aiohttp(spec: dict[str, Any], m: _Measure) -> None:
    import ssl

    import aiohttp
    from aiohttp.abc import AbstractResolver, ResolveResult

    class Loopback(AbstractResolver):
        """Every ``*.sim`` name is 127.0.0.1 (called once per new connection)."""

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            assert host.endswith(".sim"), host
            return [
                ResolveResult(
                    hostname=host,
                    host="127.0.0.1",
                    port=port,
                    family=socket.AF_INET,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            ]

        async def close(self) -> None:
            pass

    tls: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=spec["cafile"]) if spec["cafile"] else True
    )
    connector = aiohttp.TCPConnector(limit=spec["inflight"], resolver=Loopback(), ssl=tls)
    session = aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    )

    async def get(url: str) -> Outcome:
        async with session.get(url) as response:
            await response.read()
            return response.status

    warm = await _drive(get, spec["warmup"], spec["inflight"])
    m.start()
    outcomes = await _drive(get, spec["urls"], spec["inflight"])
    await session.close()
    m.stop(outcomes, warm)


async def _httpx(spec: dict[str, Any], m: _Measure) -> None:
    import ssl

    import httpx

    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=spec["cafile"]) if spec["cafile"] else True
    )
    client = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=spec["inflight"]),
        timeout=REQUEST_TIMEOUT_S,
        verify=verify,
        trust_env=False,
    )

    async def get(url: str) -> Outcome:
        return (await client.get(url)).status_code

    warm = await _drive(get, spec["warmup"], spec["inflight"])
    m.start()
    outcomes = await _drive(get, spec["urls"], spec["inflight"])
    await client.aclose()
    m.stop(outcomes, warm)


async def _pyreqwest(spec: dict[str, Any], m: _Measure) -> None:
    from datetime import timedelta

    from pyreqwest.client import ClientBuilder

    builder = (
        ClientBuilder()
        .max_connections(spec["inflight"])
        .timeout(timedelta(seconds=REQUEST_TIMEOUT_S))
        .no_proxy()
    )
    for host, port in _sim_names(spec["urls"] + spec["warmup"]):
        builder = builder.resolve(host, "127.0.0.1", port)
    if spec["cafile"]:
        with open(spec["cafile"], "rb") as ca:
            builder = builder.add_root_certificate_pem(ca.read())
    client = builder.build()

    async def get(url: str) -> Outcome:
        response = await client.get(url).build().send()
        await response.bytes()
        return response.status

    warm = await _drive(get, spec["warmup"], spec["inflight"])
    m.start()
    outcomes = await _drive(get, spec["urls"], spec["inflight"])
    await client.close()
    m.stop(outcomes, warm)


# -- pycurl: the retriever-multi pattern with `inflight` reusable easy handles ----------


def _pycurl(spec: dict[str, Any], m: _Measure) -> None:
    import pycurl

    multi = pycurl.CurlMulti()
    handles = []
    for _ in range(spec["inflight"]):
        handle = pycurl.Curl()
        handle.setopt(pycurl.NOSIGNAL, 1)
        handle.setopt(pycurl.TIMEOUT_MS, int(REQUEST_TIMEOUT_S * 1000))
        handle.setopt(pycurl.PROXY, "")
        handle.setopt(pycurl.WRITEFUNCTION, len)  # read the body, keep nothing
        if spec["cafile"]:
            handle.setopt(pycurl.CAINFO, spec["cafile"])
        handles.append(handle)

    def fetch(urls: list[str]) -> Counter[Outcome]:
        outcomes: Counter[Outcome] = Counter()
        free = handles[:]
        source = iter(urls)
        pending = True
        busy = 0
        deadline = time.monotonic() + REQUEST_TIMEOUT_S + len(urls)  # bounded however it goes
        while (pending or busy) and time.monotonic() < deadline:
            while pending and free:
                url = next(source, None)
                if url is None:
                    pending = False
                    break
                handle = free.pop()
                host, port = next(iter(_sim_names([url])))
                handle.setopt(pycurl.URL, url)
                handle.setopt(pycurl.RESOLVE, [f"{host}:{port}:127.0.0.1"])
                multi.add_handle(handle)
                busy += 1
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            while True:
                queued, succeeded, failed = multi.info_read()
                for handle in succeeded:
                    outcomes[handle.getinfo(pycurl.RESPONSE_CODE)] += 1
                for _handle, code, _message in failed:
                    outcomes[f"curl_{code}"] += 1
                for handle in [*succeeded, *(f[0] for f in failed)]:
                    multi.remove_handle(handle)
                    free.append(handle)
                    busy -= 1
                if queued == 0:
                    break
            if busy:
                wait_ms = multi.timeout()
                multi.select(1.0 if wait_ms < 0 else min(1.0, wait_ms / 1000.0))
        return outcomes

    warm = fetch(spec["warmup"])
    m.start()
    outcomes = fetch(spec["urls"])
    for handle in handles:
        handle.close()
    multi.close()
    m.stop(outcomes, warm)


# -- requests: one Session per thread, `inflight` threads --------------------------------


def _requests(spec: dict[str, Any], m: _Measure) -> None:
    import requests

    verify: str | bool = spec["cafile"] or True
    sessions = []
    for _ in range(spec["inflight"]):
        session = requests.Session()
        session.trust_env = False
        sessions.append(session)

    def fetch(urls: list[str]) -> Counter[Outcome]:
        outcomes: Counter[Outcome] = Counter()
        lock = threading.Lock()
        source = iter(urls)

        def worker(session: requests.Session) -> None:
            mine: Counter[Outcome] = Counter()
            while True:
                with lock:
                    url = next(source, None)
                if url is None:
                    break
                try:
                    mine[
                        session.get(url, timeout=REQUEST_TIMEOUT_S, verify=verify).status_code
                    ] += 1
                except Exception as exc:
                    mine[type(exc).__name__] += 1
            with lock:
                outcomes.update(mine)

        threads = [threading.Thread(target=worker, args=(s,)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return outcomes

    warm = fetch(spec["warmup"])
    m.start()
    outcomes = fetch(spec["urls"])
    for session in sessions:
        session.close()
    m.stop(outcomes, warm)


async def _raw_floor(spec: dict[str, Any], m: _Measure) -> None:
    """The floor, not a client anyone uses: what a keep-alive GET costs in Python
    on uvloop with nothing but a protocol, httptools and a list of idle
    connections per host - no timeouts, no timings, no decoding (and no
    Accept-Encoding), no records; https needs the spec's ``cafile``.
    (The issue measured such a ~100-line client at 0.018-0.021 ms a request.)"""
    import ssl

    import httptools

    loop = asyncio.get_running_loop()
    tls = ssl.create_default_context(cafile=spec["cafile"])
    idle: dict[tuple[str, str, int], list[Any]] = {}

    class Conn(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpResponseParser(self)
            self.done: asyncio.Future[int] | None = None
            self.transport: Any = None
            self.open = True
            self.keep_alive = False

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            status = self.parser.get_status_code()
            if status < 200:  # a 1xx head: the response follows
                return
            self.keep_alive = self.parser.should_keep_alive()  # False once this returns
            if self.done is not None:
                self.done.set_result(status)

        def connection_lost(self, exc: Exception | None) -> None:
            self.open = False
            if self.done is not None and not self.done.done():
                self.done.set_exception(exc or ConnectionResetError("closed"))

    async def get(url: str) -> Outcome:
        parts = urlsplit(url)
        https = parts.scheme == "https"
        host = parts.hostname or ""
        key = (parts.scheme, host, parts.port or (443 if https else 80))
        conns = idle.setdefault(key, [])
        while conns:
            conn = conns.pop()
            if conn.open:
                break
        else:
            _, conn = await loop.create_connection(
                Conn,
                "127.0.0.1",
                key[2],
                ssl=tls if https else None,  # verified: the default context + the CA
                server_hostname=host if https else None,
            )
        conn.done = loop.create_future()
        conn.transport.write(
            f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
        )
        status: int = await conn.done
        conn.done = None
        if conn.keep_alive:
            conns.append(conn)
        else:
            conn.transport.close()
        return status

    warm = await _drive(get, spec["warmup"], spec["inflight"])
    m.start()
    outcomes = await _drive(get, spec["urls"], spec["inflight"])
    for conns in idle.values():
        for conn in conns:
            conn.transport.close()
    m.stop(outcomes, warm)


# -- the child's main ---------------------------------------------------------------------


def _run_async(
    main: Callable[[dict[str, Any], _Measure], Awaitable[None]],
    spec: dict[str, Any],
    m: _Measure,
    *,
    uvloop: bool,
) -> None:
    if uvloop:
        import uvloop as uv

        factory = uv.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(spec, m))  # type: ignore[arg-type]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec['client']`` over the spec's URLs; the measured numbers."""
    name = spec["client"]
    _loopback_only()
    m = _Measure()
    if name == "surge":
        _run_async(_surge, spec, m, uvloop=True)
    elif name == "aiohttp_uvloop":
        _run_async(_aiohttp, spec, m, uvloop=True)
    elif name == "aiohttp":
        _run_async(_aiohttp, spec, m, uvloop=False)
    elif name == "httpx":
        _run_async(_httpx, spec, m, uvloop=False)
    elif name == "pyreqwest":
        _run_async(_pyreqwest, spec, m, uvloop=False)
    elif name == "raw_floor":
        _run_async(_raw_floor, spec, m, uvloop=True)
    elif name == "pycurl":
        _pycurl(spec, m)
    elif name == "requests":
        _requests(spec, m)
    else:
        raise SystemExit(f"unknown client {name!r}; known: {', '.join(CLIENTS)}")
    m.result["requests"] = len(spec["urls"])
    m.result["warmup"] = len(spec["warmup"])
    return m.result


def main(argv: list[str]) -> int:
    (spec_path,) = argv
    with open(spec_path) as f:
        spec = json.load(f)
    result = run(spec)
    print(json.dumps(result), flush=True)
    # Skip interpreter finalisation: pyreqwest's tokio threads can abort it ("Fatal
    # Python error: PyGILState_Release") after the numbers are out.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
