"""Benchmark surge's Python API one request at a time against requests, httpx and aiohttp.

Run it from the repository root::

    python benchmarks/api.py                  # full run (5-8 minutes on 2 cores, by load)
    python benchmarks/api.py --quick          # smoke run (< 1 minute): judges nothing
    python benchmarks/api.py --only sync,async --rounds 7

What a program pays per call when it uses an HTTP client as a library, not as a
bulk engine: the client CPU of one keep-alive GET (issue #22's targets), and of
a one-shot ``get()`` that builds a client of its own.  Every request goes to
``status-200.sim`` on the simulated web (:mod:`surge.sim`, a 1 KiB plain body,
no delay), which runs in a process of its own on 127.0.0.1, pinned to one CPU
while the clients run on the other when the box has two (``fetch.py``'s
``sim_on_own_cpu``); its CPU is never counted.  Each client sends the ``*.sim``
name to 127.0.0.1 through its own mechanism (surge's ``resolve``, aiohttp a
static resolver, requests and httpx a ``socket.getaddrinfo`` that maps ``*.sim``
to 127.0.0.1 and refuses every other name); proxies are off.

Each measurement is a child process of this script (``--child SPEC.json``) that
imports only its own client's library, builds the client, sends ``--warmup``
requests (200, not measured: the connection is opened, code paths are warm),
then reads ``getrusage(RUSAGE_SELF)`` (user + system CPU of every thread),
sends ``--requests`` requests (2,000), closes the client, reads it again, and
prints one line of JSON.  CPU per request = (CPU after - CPU before) / requests.
The cyclic garbage collector stays on, as in a program (its passes are part of
a client's cost).  Peers run in rounds (``--rounds``, 5): every peer once per
round, the order rotated each round, so that the box's drift and the other
engineers' load fall on every peer alike.  Reported: the median over rounds
and the range (min-max), and each peer's ratio to its section's reference
taken within each round (the median of those ratios, and their range).

Sections:

``sync``: keep-alive, one request at a time, in the calling thread
    ``surge.http.Client`` (its own asyncio loop, ``run_until_complete`` per
    call), ``requests.Session`` and ``httpx.Client``, each on one connection.
    Target (#22): surge's CPU per request <= 0.25x requests.Session's
    (measured before: requests 0.52 ms, httpx 0.29 ms).

``async``: keep-alive, one request at a time (each awaited in turn)
    ``surge.http.AsyncClient``, ``httpx.AsyncClient`` and ``aiohttp.ClientSession``
    (``TCPConnector(limit=1)``), all on asyncio's default loop; then surge and
    aiohttp again on uvloop (a note, not a peer: httpx runs on asyncio).
    Target (#22): surge's CPU per request <= 0.2x httpx.AsyncClient's (asyncio).

``async16``: keep-alive, 16 requests in flight (16 tasks on one client,
    ``max_connections``/``Limits``/``limit`` 16), asyncio's default loop.

``oneshot``: ``surge.get(url)``, ``requests.get(url)``, ``httpx.get(url)``: a new
    client, a new connection and its close on every call (``--oneshot-requests``,
    200, after a warm-up of 20).  No target; a secondary row.

``threads``: one client shared by threads (issue #33), ``surge.http.Client``,
    ``requests.Session`` and ``httpx.Client``, and with ``--baseline SRC`` the
    Client of another checkout of surge (its ``src`` first on PYTHONPATH: the
    code before #33, measured in the same run; ``sync`` and ``oneshot`` then
    get a baseline row too).  Two measurements per child:
    *throughput*, ``--threads`` (8) threads each sending ``--thread-requests``
    (500) keep-alive GETs to ``status-200.sim`` (after 20 each, unmeasured), the
    wall time and CPU of the lot and whether every response came back to its
    own thread (each thread checks its responses' URLs); *latency*, eight
    threads each sending one GET to ``delay-1000.sim`` (1 s) and, 0.2 s later,
    a ninth thread one GET to ``delay-10.sim`` (10 ms; a connection to it
    warmed first), the wall time of that one request.  Targets (#33): the
    10 ms request <= 50 ms; throughput no slower than the baseline's; and (the
    ``sync`` section) CPU per GET from one thread <= 0.25x requests.Session.

What is excluded: interpreter start-up and imports, building the client (except
in ``oneshot``), the warm-up, the server's CPU.  The machine is a shared 2-core
microVM where system calls cost several microseconds; absolute numbers are
pessimistic, same-run ratios travel better.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "api.json"
SECTIONS = (
    "sync",
    "async",
    "async16",
    "oneshot",
    "threads",
    "dropin",
    "dropin_async",
    "dropin_send",
    "dropin_get",
    "dropin_threads",
)
#: The simulated host every request goes to: 200, a 1 KiB plain body, no delay.
HOST = "status-200.sim"
#: A request slower than this fails the run (seconds).
REQUEST_TIMEOUT_S = 30.0


class Peer:
    """One row: which library, how it is driven, on which loop."""

    def __init__(
        self,
        name: str,
        label: str,
        section: str,
        library: str,
        *,
        loop: str = "asyncio",
        inflight: int = 1,
        reference: bool = False,
        baseline: bool = False,
        dropin: bool = False,
    ) -> None:
        self.name = name
        self.label = label
        self.section = section
        self.library = library
        self.loop = loop
        self.inflight = inflight
        self.reference = reference  # the section's denominator
        self.baseline = baseline  # surge from --baseline SRC
        self.dropin = dropin  # the library with surge's transport or adapter (issue #36)


PEERS = (
    Peer("surge_client", "surge.http.Client", "sync", "surge"),
    Peer("surge_client_baseline", "surge.http.Client (baseline)", "sync", "surge", baseline=True),
    Peer("requests_session", "requests.Session", "sync", "requests", reference=True),
    Peer("httpx_client", "httpx.Client", "sync", "httpx"),
    Peer("surge_async", "surge AsyncClient, asyncio", "async", "surge"),
    Peer("httpx_async", "httpx.AsyncClient, asyncio", "async", "httpx", reference=True),
    Peer("aiohttp", "aiohttp ClientSession, asyncio", "async", "aiohttp"),
    Peer("surge_async_uvloop", "surge AsyncClient, uvloop", "async", "surge", loop="uvloop"),
    Peer("aiohttp_uvloop", "aiohttp ClientSession, uvloop", "async", "aiohttp", loop="uvloop"),
    Peer("surge_async_16", "surge AsyncClient, 16 in flight", "async16", "surge", inflight=16),
    Peer(
        "httpx_async_16",
        "httpx.AsyncClient, 16 in flight",
        "async16",
        "httpx",
        inflight=16,
        reference=True,
    ),
    Peer("aiohttp_16", "aiohttp ClientSession, 16 in flight", "async16", "aiohttp", inflight=16),
    Peer("surge_get", "surge.get()", "oneshot", "surge"),
    Peer("surge_get_baseline", "surge.get() (baseline)", "oneshot", "surge", baseline=True),
    Peer("requests_get", "requests.get()", "oneshot", "requests", reference=True),
    Peer("httpx_get", "httpx.get()", "oneshot", "httpx"),
    Peer("surge_threads", "surge.http.Client", "threads", "surge"),
    Peer(
        "surge_threads_baseline",
        "surge.http.Client (baseline)",
        "threads",
        "surge",
        baseline=True,
        reference=True,
    ),
    Peer("requests_threads", "requests.Session", "threads", "requests"),
    Peer("httpx_threads", "httpx.Client", "threads", "httpx"),
    # Issue #36: the libraries with surge's transport or adapter, against their own.
    Peer("httpx_stock", "httpx.Client, its HTTPTransport", "dropin", "httpx", reference=True),
    Peer("httpx_dropin", "httpx.Client, surge.httpx.HTTPTransport", "dropin", "httpx", dropin=True),
    Peer(
        "httpx_async_stock",
        "httpx.AsyncClient, its AsyncHTTPTransport",
        "dropin_async",
        "httpx",
        reference=True,
    ),
    Peer(
        "httpx_async_dropin",
        "httpx.AsyncClient, surge.httpx.AsyncHTTPTransport",
        "dropin_async",
        "httpx",
        dropin=True,
    ),
    Peer("requests_send_stock", "HTTPAdapter.send()", "dropin_send", "requests", reference=True),
    Peer(
        "requests_send_dropin",
        "surge.requests.Adapter.send()",
        "dropin_send",
        "requests",
        dropin=True,
    ),
    Peer(
        "requests_get_stock", "Session.get(), HTTPAdapter", "dropin_get", "requests", reference=True
    ),
    Peer(
        "requests_get_dropin",
        "Session.get(), surge.requests.Adapter",
        "dropin_get",
        "requests",
        dropin=True,
    ),
    Peer("requests_threads_stock", "Session, HTTPAdapter", "dropin_threads", "requests"),
    Peer(
        "requests_threads_dropin",
        "Session, surge.requests.Adapter",
        "dropin_threads",
        "requests",
        dropin=True,
    ),
)
#: dropin_threads: a factor on its requests per thread (--quick: fewer).
THREAD_SCALE = [1.0]

#: The threads section's latency probe: eight of these in flight...
SLOW_HOST = "delay-1000.sim"
#: ... while one of these is timed.
FAST_HOST = "delay-10.sim"


# -- the child: one peer, one process ------------------------------------------------------


def _usage() -> tuple[float, float, int, int]:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime, u.ru_stime, u.ru_nvcsw, u.ru_nivcsw


class _Window:
    """The measured window: rusage and the clock before, then after."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}

    def start(self) -> None:
        self._usage = _usage()
        self._t = time.perf_counter()

    def stop(self, outcomes: Counter[Any], warm: Counter[Any]) -> None:
        wall = time.perf_counter() - self._t
        user, system, voluntary, involuntary = _usage()
        self.result = {
            "wall_s": wall,
            "user_s": user - self._usage[0],
            "sys_s": system - self._usage[1],
            "cpu_s": user - self._usage[0] + system - self._usage[1],
            "voluntary_switches": voluntary - self._usage[2],
            "involuntary_switches": involuntary - self._usage[3],
            "outcomes": {str(k): v for k, v in outcomes.items()},
            "warmup_outcomes": {str(k): v for k, v in warm.items()},
        }


def _sim_to_loopback() -> None:
    """``socket.getaddrinfo``: ``*.sim`` -> 127.0.0.1, any other name but the loopback
    literal fails at once (for requests and httpx, which resolve through it)."""
    original = socket.getaddrinfo

    def loopback_only(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name == "127.0.0.1" or (name or "").endswith(".sim"):
            return original("127.0.0.1", port, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, f"api.py: {host!r} is not a .sim name")

    socket.getaddrinfo = loopback_only


def _loop_sync(get: Callable[[], int], n: int) -> Counter[Any]:
    outcomes: Counter[Any] = Counter()
    for _ in range(n):
        try:
            outcomes[get()] += 1
        except Exception as exc:
            outcomes[type(exc).__name__] += 1
    return outcomes


def _child_sync(spec: dict[str, Any], w: _Window) -> None:
    """Keep-alive on one client in this thread, or (oneshot) a new client per call."""
    url, library, oneshot = spec["url"], spec["library"], spec["section"] == "oneshot"
    close: Callable[[], None] = lambda: None  # noqa: E731
    if library == "surge":
        import surge
        from surge.http import Client

        resolve = ["*.sim:*:127.0.0.1"]
        if oneshot:
            get = lambda: surge.get(url, resolve=resolve, trust_env=False).status  # noqa: E731
        else:
            client = Client(resolve=resolve, trust_env=False, max_time=REQUEST_TIMEOUT_S)
            get, close = (lambda: client.get(url).status), client.close
    elif spec.get("dropin") is not None and library == "requests":
        get, close = _requests_session(spec)
    elif spec.get("dropin") is not None and library == "httpx":
        _sim_to_loopback()
        import httpx

        if spec["dropin"]:
            import surge.httpx

            transport: Any = surge.httpx.HTTPTransport(resolve=["*.sim:*:127.0.0.1"])
        else:
            transport = httpx.HTTPTransport()
        hclient = httpx.Client(transport=transport, trust_env=False, timeout=REQUEST_TIMEOUT_S)
        get = lambda: hclient.get(url).status_code  # noqa: E731
        close = hclient.close
    elif library == "requests":
        _sim_to_loopback()
        import requests

        if oneshot:  # the environment holds no proxy variables (main pops them)
            get = lambda: requests.get(url, timeout=REQUEST_TIMEOUT_S).status_code  # noqa: E731
        else:
            session = requests.Session()
            session.trust_env = False
            get = lambda: session.get(url, timeout=REQUEST_TIMEOUT_S).status_code  # noqa: E731
            close = session.close
    elif library == "httpx":
        _sim_to_loopback()
        import httpx

        if oneshot:
            get = lambda: httpx.get(url, timeout=REQUEST_TIMEOUT_S).status_code  # noqa: E731
        else:
            hclient = httpx.Client(trust_env=False, timeout=REQUEST_TIMEOUT_S)
            get = lambda: hclient.get(url).status_code  # noqa: E731
            close = hclient.close
    else:
        raise SystemExit(f"no sync peer for {library!r}")
    warm = _loop_sync(get, spec["warmup"])
    _SEND_CPU[0] = 0.0
    w.start()
    outcomes = _loop_sync(get, spec["requests"])
    close()
    w.stop(outcomes, warm)
    if spec["section"] == "dropin_send":  # the adapter's share: send() alone
        w.result["cpu_s"] = _SEND_CPU[0]


#: CPU (user + system, every thread) spent inside adapter.send(), summed.
_SEND_CPU = [0.0]


def _requests_session(spec: dict[str, Any]) -> tuple[Callable[[], int], Callable[[], None]]:
    """A requests.Session with HTTPAdapter or surge's Adapter (``spec["dropin"]``)
    whose adapter's send() CPU is summed into _SEND_CPU."""
    _sim_to_loopback()
    import requests

    session = requests.Session()
    session.trust_env = False
    if spec["dropin"]:
        import surge.requests

        adapter: Any = surge.requests.Adapter(resolve=["*.sim:*:127.0.0.1"])
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    adapter = session.get_adapter("http://x/")
    send = adapter.send

    def timed_send(*args: Any, **kwargs: Any) -> Any:
        before = resource.getrusage(resource.RUSAGE_SELF)
        try:
            return send(*args, **kwargs)
        finally:
            after = resource.getrusage(resource.RUSAGE_SELF)
            _SEND_CPU[0] += after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime

    if spec["section"] == "dropin_send":
        adapter.send = timed_send
    url = spec["url"]
    return (lambda: session.get(url, timeout=REQUEST_TIMEOUT_S).status_code), session.close


def _sync_client(library: str) -> tuple[Callable[[str], tuple[int, str]], Callable[[], None]]:
    """One client of ``library`` to share between threads: get(url) -> (status,
    the URL that answered), and its close."""
    if library == "surge":
        from surge.http import Client

        client = Client(resolve=["*.sim:*:127.0.0.1"], trust_env=False, max_time=30)

        def get(url: str) -> tuple[int, str]:
            response = client.get(url)
            return response.status, str(response.url)

        return get, client.close
    _sim_to_loopback()
    if library == "requests":
        import requests

        session = requests.Session()
        session.trust_env = False

        def rget(url: str) -> tuple[int, str]:
            response = session.get(url, timeout=REQUEST_TIMEOUT_S)
            return response.status_code, response.url

        return rget, session.close
    import httpx

    hclient = httpx.Client(trust_env=False, timeout=REQUEST_TIMEOUT_S)

    def hget(url: str) -> tuple[int, str]:
        response = hclient.get(url)
        return response.status_code, str(response.url)

    return hget, hclient.close


def _child_threads(spec: dict[str, Any]) -> dict[str, Any]:
    """Throughput of ``threads`` x ``requests`` GETs, then the 10 ms request's
    wall time while eight 1 s requests are in flight (see the module's notes)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    get, close = _sync_client(spec["library"])
    threads, count = spec["threads"], spec["requests"]
    base = spec["url"]  # http://status-200.sim:PORT/

    def url_for(host: str, path: str = "/") -> str:
        return base.replace(HOST, host).rstrip("/") + path

    def work(n: int, many: int) -> tuple[int, int]:
        ok = matched = 0
        for i in range(many):
            url = url_for(HOST, f"/t{n}/{i}")
            status, answered = get(url)
            ok += status == 200
            matched += answered == url
        return ok, matched

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads), [20] * threads))  # warm: a connection each
        before = _usage()
        started = time.perf_counter()
        results = list(pool.map(work, range(threads), [count] * threads))
        wall = time.perf_counter() - started
        after = _usage()
    get(url_for(FAST_HOST))  # a pooled connection to the fast host, as to the slow ones
    slow = [threading.Thread(target=get, args=(url_for(SLOW_HOST),)) for _ in range(8)]
    for thread in slow:
        thread.start()
    time.sleep(0.2)  # the eight are sent by now (1 s each: none has come back)
    fast: list[float] = []

    def timed() -> None:
        t = time.perf_counter()
        get(url_for(FAST_HOST))
        fast.append(time.perf_counter() - t)

    probe = threading.Thread(target=timed)
    probe.start()
    probe.join()
    for thread in slow:
        thread.join()
    close()
    return {
        "wall_s": wall,
        "cpu_s": after[0] + after[1] - before[0] - before[1],
        "requests": threads * count,
        "ok": sum(ok for ok, _ in results),
        "matched": sum(m for _, m in results),
        "fast_ms": fast[0] * 1000 if fast else None,
    }


async def _drive(get: Callable[[], Awaitable[int]], n: int, inflight: int) -> Counter[Any]:
    """``n`` requests, ``inflight`` at a time (1: each awaited in turn, no tasks)."""
    outcomes: Counter[Any] = Counter()

    async def worker(count: int) -> None:
        for _ in range(count):
            try:
                outcomes[await get()] += 1
            except Exception as exc:
                outcomes[type(exc).__name__] += 1

    if inflight == 1:
        await worker(n)
    else:
        shares = [n // inflight + (i < n % inflight) for i in range(inflight)]
        await asyncio.gather(*(worker(share) for share in shares))
    return outcomes


async def _child_async(spec: dict[str, Any], w: _Window) -> None:
    url, library, inflight = spec["url"], spec["library"], spec["inflight"]
    if library == "surge":
        from surge.http import AsyncClient

        client = AsyncClient(
            max_connections=inflight,
            resolve=["*.sim:*:127.0.0.1"],
            trust_env=False,
            max_time=REQUEST_TIMEOUT_S,
        )

        async def get() -> int:
            return (await client.get(url)).status

        close = client.close
    elif library == "httpx":
        _sim_to_loopback()
        import httpx

        transport: Any = None
        if spec.get("dropin"):
            import surge.httpx

            transport = surge.httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=inflight), resolve=["*.sim:*:127.0.0.1"]
            )
        hclient = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=inflight),
            timeout=REQUEST_TIMEOUT_S,
            trust_env=False,
            transport=transport,
        )

        async def get() -> int:
            return (await hclient.get(url)).status_code

        close = hclient.aclose
    elif library == "aiohttp":
        import aiohttp
        from aiohttp.abc import AbstractResolver, ResolveResult

        class Loopback(AbstractResolver):
            """Every ``*.sim`` name is 127.0.0.1 (asked once per new connection)."""

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

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=inflight, resolver=Loopback()),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        )

        async def get() -> int:
            async with session.get(url) as response:
                await response.read()
                return response.status

        close = session.close
    else:
        raise SystemExit(f"no async peer for {library!r}")
    warm = await _drive(get, spec["warmup"], inflight)
    w.start()
    outcomes = await _drive(get, spec["requests"], inflight)
    await close()
    w.stop(outcomes, warm)


#: dropin_threads: (threads, hosts, requests per thread, server delay ms) per scenario.
DROPIN_THREADS = {
    "many_hosts": (32, 200, 20, 20),
    "one_slow_host": (16, 1, 10, 200),
}


def _child_dropin_threads(spec: dict[str, Any]) -> dict[str, Any]:
    """Threads sharing one requests.Session (HTTPAdapter or surge's Adapter):
    wall time, CPU, and urllib3's "Connection pool is full" warnings, per
    scenario of DROPIN_THREADS; the floor is requests per thread x the delay."""
    import logging
    from concurrent.futures import ThreadPoolExecutor

    get_unused, close_unused = _requests_session(dict(spec, section="dropin_get"))
    close_unused()
    del get_unused
    full = [0]

    class Counter_(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "pool is full" in record.getMessage():
                full[0] += 1

    logging.getLogger("urllib3").addHandler(Counter_())
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    base = spec["url"]
    out: dict[str, Any] = {}
    for name, (threads, hosts, per_thread, delay) in DROPIN_THREADS.items():
        scale = spec.get("thread_scale", 1.0)
        per_thread = max(2, int(per_thread * scale))
        import requests

        session = requests.Session()
        session.trust_env = False
        if spec["dropin"]:
            import surge.requests

            adapter = surge.requests.Adapter(resolve=["*.sim:*:127.0.0.1"])
            session.mount("http://", adapter)
        urls = [
            base.replace(HOST, f"delay-{delay}.h{n}.sim" if hosts > 1 else f"delay-{delay}.sim")
            for n in range(hosts)
        ]

        def work(
            t: int, urls: list[str] = urls, session: Any = session, n: int = per_thread
        ) -> int:
            ok = 0
            for i in range(n):
                url = urls[(t * n + i) % len(urls)]
                ok += session.get(url, timeout=REQUEST_TIMEOUT_S).status_code == 200
            return ok

        full[0] = 0
        with ThreadPoolExecutor(threads) as pool:
            before = _usage()
            started = time.perf_counter()
            ok = sum(pool.map(work, range(threads)))
            wall = time.perf_counter() - started
            after = _usage()
        session.close()
        out[name] = {
            "wall_s": wall,
            "cpu_s": after[0] + after[1] - before[0] - before[1],
            "requests": threads * per_thread,
            "ok": ok,
            "pool_full_warnings": full[0],
            "floor_s": per_thread * delay / 1000,
        }
    return out


def child(spec_path: str) -> int:
    """Measure the peer of SPEC.json; print one line of JSON."""
    with open(spec_path) as f:
        spec = json.load(f)
    if spec["section"] == "dropin_threads":
        print(json.dumps(_child_dropin_threads(spec)), flush=True)
        sys.stderr.flush()
        os._exit(0)
    if spec["section"] == "threads":
        print(json.dumps(_child_threads(spec)), flush=True)
        sys.stderr.flush()
        os._exit(0)
    w = _Window()
    if spec["section"] in ("sync", "oneshot", "dropin", "dropin_send", "dropin_get"):
        _child_sync(spec, w)
    else:
        if spec["loop"] == "uvloop":
            import uvloop

            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        else:
            factory = asyncio.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(_child_async(spec, w))
    w.result["requests"] = spec["requests"]
    print(json.dumps(w.result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no finalisation: nothing left to measure


# -- the parent: rounds of children ---------------------------------------------------------


def run_peer(
    peer: Peer,
    url: str,
    requests: int,
    warmup: int,
    limit_s: float,
    threads: int = 8,
    baseline: str | None = None,
) -> dict[str, Any]:
    """One child run of ``peer``: its JSON (plus cpu/request), or {"error": ...}."""
    from _common import run_child

    env = None
    if peer.baseline:  # the other checkout's surge, ahead of this one
        assert baseline is not None
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.join(baseline, "src"), env.get("PYTHONPATH", "")) if p
        )

    with tempfile.TemporaryDirectory(prefix=f"surge-api-{peer.name}-") as directory:
        spec_path = os.path.join(directory, "spec.json")
        out_path = os.path.join(directory, "out.json")
        spec = {
            "peer": peer.name,
            "section": peer.section,
            "library": peer.library,
            "loop": peer.loop,
            "inflight": peer.inflight,
            "url": url,
            "requests": requests,
            "warmup": warmup,
            "threads": threads,
            "dropin": peer.dropin if peer.section.startswith("dropin") else None,
            "thread_scale": THREAD_SCALE[0],
        }
        Path(spec_path).write_text(json.dumps(spec))
        with open(out_path, "wb") as out:
            run, _ = run_child(
                [sys.executable, str(Path(__file__).resolve()), "--child", spec_path],
                limit_s,
                stdout=out.fileno(),
                env=env,
            )
        text = Path(out_path).read_text().strip()
    if run.killed:
        return {"error": f"killed at the {limit_s:g} s limit"}
    try:
        result: dict[str, Any] = json.loads(text.splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"exit status {run.status}, no result"}
    if peer.section in ("threads", "dropin_threads"):
        return result
    result["cpu_per_request_s"] = result["cpu_s"] / requests
    result["ok"] = int(result["outcomes"].get("200", 0))
    if result["ok"] != requests:
        result["note"] = f"only {result['ok']} of {requests} answered 200"
    return result


def summarise(peers: Sequence[Peer], runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per peer: its runs, the median and range of CPU/request, and its per-round
    ratio to its section's reference (median and range)."""
    out: dict[str, Any] = {}
    reference = {p.section: p.name for p in peers if p.reference}
    for peer in peers:
        got = runs[peer.name]
        per = [r.get("cpu_per_request_s") for r in got]
        good = [x for x in per if x is not None]
        entry: dict[str, Any] = {
            "label": peer.label,
            "section": peer.section,
            "loop": peer.loop,
            "inflight": peer.inflight,
            "runs": got,
            "cpu_per_request_s_by_round": per,
        }
        if good:
            entry["median_cpu_per_request_s"] = statistics.median(good)
            entry["min_cpu_per_request_s"] = min(good)
            entry["max_cpu_per_request_s"] = max(good)
            entry["median_user_per_request_s"] = statistics.median(
                r["user_s"] / r["requests"] for r in got if "cpu_s" in r
            )
            entry["median_sys_per_request_s"] = statistics.median(
                r["sys_s"] / r["requests"] for r in got if "cpu_s" in r
            )
            entry["median_wall_per_request_s"] = statistics.median(
                r["wall_s"] / r["requests"] for r in got if "cpu_s" in r
            )
        out[peer.name] = entry
    for peer in peers:  # a second pass: the reference's median exists by now
        entry, base = out[peer.name], reference.get(peer.section)
        if not base or "median_cpu_per_request_s" not in entry:
            continue
        pairs = zip(
            entry["cpu_per_request_s_by_round"],
            out[base]["cpu_per_request_s_by_round"],
            strict=True,
        )
        ratios = [a / b for a, b in pairs if a and b]
        if ratios:
            entry["reference"] = base
            entry["ratio_by_round"] = ratios
            entry["median_ratio"] = statistics.median(ratios)
            entry["min_ratio"] = min(ratios)
            entry["max_ratio"] = max(ratios)
            entry["ratio_of_medians"] = (
                entry["median_cpu_per_request_s"] / out[base]["median_cpu_per_request_s"]
            )
    return out


def summarise_threads(peers: Sequence[Peer], runs: dict[str, list[dict[str, Any]]]) -> Any:
    """Per threads peer: medians of wall time, CPU and the fast request's time,
    and whether every response came back whole to its own thread."""
    out: dict[str, Any] = {}
    for peer in peers:
        got = [r for r in runs[peer.name] if "wall_s" in r]
        entry: dict[str, Any] = {"label": peer.label, "section": "threads", "runs": runs[peer.name]}
        if got:
            entry["median_wall_s"] = statistics.median(r["wall_s"] for r in got)
            entry["wall_s_by_round"] = [r["wall_s"] for r in got]
            entry["median_cpu_per_request_s"] = statistics.median(
                r["cpu_s"] / r["requests"] for r in got
            )
            fast = [r["fast_ms"] for r in got if r.get("fast_ms") is not None]
            entry["fast_ms_by_round"] = fast
            entry["median_fast_ms"] = statistics.median(fast) if fast else None
            entry["max_fast_ms"] = max(fast) if fast else None
            entry["all_matched"] = all(r["ok"] == r["matched"] == r["requests"] for r in got)
        out[peer.name] = entry
    return out


def threads_table(title: str, peers: Sequence[Peer], results: dict[str, Any]) -> Any:
    from _common import Table

    table = Table(
        title,
        [
            "peer",
            "8 threads wall s",
            "rounds (s)",
            "cpu/req ms",
            "all matched",
            "10 ms request, ms",
            "rounds (ms)",
        ],
    )
    for peer in peers:
        r = results.get(peer.name)
        if not r or "median_wall_s" not in r:
            errors = "; ".join(str(x.get("error")) for x in (r or {}).get("runs", []))
            table.add(peer.label, "-", "", "", "", "", errors)
            continue
        fast = r["median_fast_ms"]
        table.add(
            peer.label,
            f"{r['median_wall_s']:.3f}",
            " ".join(f"{x:.2f}" for x in r["wall_s_by_round"]),
            _ms(r["median_cpu_per_request_s"]),
            "yes" if r["all_matched"] else "NO",
            "-" if fast is None else f"{fast:.1f}",
            " ".join(f"{x:.0f}" for x in r["fast_ms_by_round"]),
        )
    return table


def check_thread_targets(results: dict[str, Any], quick: bool) -> list[Any]:
    from _common import Target

    ours = results.get("surge_threads")
    base = results.get("surge_threads_baseline")
    if not ours or "median_wall_s" not in ours:
        return [Target("threads: surge.http.Client shared by threads", "run", "not run", None)]
    worst = ours["max_fast_ms"]
    targets = [
        Target(
            "threads: a 10 ms request while eight 1 s requests are in flight",
            "<= 50 ms, every round",
            f"{ours['median_fast_ms']:.1f} ms median, {worst:.1f} ms worst",
            None if quick else worst <= 50 and ours["all_matched"],
        )
    ]
    if base and "median_wall_s" in base:
        targets.append(
            Target(
                "threads: 8 threads x GETs on one client, wall time",
                "no slower than the baseline (before #33), same run",
                f"{ours['median_wall_s']:.3f} s against {base['median_wall_s']:.3f} s",
                None if quick else ours["median_wall_s"] <= base["median_wall_s"],
            )
        )
    else:
        targets.append(
            Target("threads: wall time against the baseline", "--baseline SRC", "not run", None)
        )
    return targets


def summarise_dropin_threads(
    peers: Sequence[Peer], runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Per peer and scenario: median wall, CPU per request, warnings, floor."""
    out: dict[str, Any] = {}
    for peer in peers:
        got = [r for r in runs[peer.name] if "error" not in r]
        entry: dict[str, Any] = {"label": peer.label, "section": peer.section, "runs": got}
        for scenario in DROPIN_THREADS:
            rows = [r[scenario] for r in got if scenario in r]
            if rows:
                entry[scenario] = {
                    "median_wall_s": statistics.median(r["wall_s"] for r in rows),
                    "wall_s_by_round": [r["wall_s"] for r in rows],
                    "median_cpu_per_request_s": statistics.median(
                        r["cpu_s"] / r["requests"] for r in rows
                    ),
                    "pool_full_warnings": sum(r["pool_full_warnings"] for r in rows),
                    "all_ok": all(r["ok"] == r["requests"] for r in rows),
                    "floor_s": rows[0]["floor_s"],
                }
        out[peer.name] = entry
    return out


def dropin_threads_table(title: str, peers: Sequence[Peer], results: dict[str, Any]) -> Any:
    from _common import Table

    table = Table(
        title,
        [
            "scenario",
            "peer",
            "wall s",
            "rounds (s)",
            "floor s",
            "x floor",
            "cpu/req ms",
            "pool-full warnings",
            "all 200",
        ],
    )
    for scenario, (threads, hosts, _, delay) in DROPIN_THREADS.items():
        for peer in peers:
            r = results.get(peer.name, {}).get(scenario)
            label = f"{threads} threads, {hosts} host{'s' * (hosts > 1)}, {delay} ms"
            if not r:
                table.add(label, peer.label, "-")
                continue
            table.add(
                label,
                peer.label,
                f"{r['median_wall_s']:.3f}",
                " ".join(f"{x:.2f}" for x in r["wall_s_by_round"]),
                f"{r['floor_s']:.2f}",
                f"{r['median_wall_s'] / r['floor_s']:.2f}",
                _ms(r["median_cpu_per_request_s"]),
                r["pool_full_warnings"],
                "yes" if r["all_ok"] else "NO",
            )
    table.note(
        "floor = requests per thread x the server's delay; target (#36): no pool-full warning,"
        " wall <= 0.5x HTTPAdapter's or within 15% of the floor"
    )
    return table


def check_dropin_targets(results: dict[str, Any], quick: bool) -> list[Any]:
    from _common import Target

    targets = []
    for name, reference, title in (
        ("httpx_dropin", "httpx's HTTPTransport", "httpx.Client + surge transport, CPU/GET"),
        (
            "httpx_async_dropin",
            "httpx's AsyncHTTPTransport",
            "httpx.AsyncClient + surge transport, CPU/GET",
        ),
        ("requests_send_dropin", "HTTPAdapter.send()", "surge Adapter.send() CPU"),
    ):
        r = results.get(name)
        if not r or "median_ratio" not in r:
            continue
        targets.append(
            Target(
                title,
                f"<= 0.5x {reference}",
                f"{r['median_ratio']:.2f}x (range {r['min_ratio']:.2f}-{r['max_ratio']:.2f}; "
                f"{_ms(r['median_cpu_per_request_s'])} ms/req)",
                None if quick else r["median_ratio"] <= 0.5,
            )
        )
    ours, stock = results.get("requests_threads_dropin"), results.get("requests_threads_stock")
    for scenario in DROPIN_THREADS:
        if not ours or scenario not in ours or not stock or scenario not in stock:
            continue
        mine, theirs = ours[scenario], stock[scenario]
        wall, floor = mine["median_wall_s"], mine["floor_s"]
        met = mine["pool_full_warnings"] == 0 and (
            wall <= 0.5 * theirs["median_wall_s"] or wall <= 1.15 * floor
        )
        targets.append(
            Target(
                f"threads sharing a Session, {scenario}",
                "no pool-full warning; wall <= 0.5x HTTPAdapter's or <= 1.15x the floor",
                f"{wall:.3f} s against {theirs['median_wall_s']:.3f} s, floor {floor:.2f} s; "
                f"{mine['pool_full_warnings']} warnings (HTTPAdapter: "
                f"{theirs['pool_full_warnings']})",
                None if quick else met,
            )
        )
    return targets


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def section_table(
    title: str, peers: Sequence[Peer], results: dict[str, Any], reference: str
) -> Any:
    from _common import Table

    table = Table(
        title,
        [
            "peer",
            "cpu/req ms",
            "range",
            f"x {reference}",
            "ratio range",
            "user",
            "sys",
            "wall/req",
            "rounds (ms/req)",
        ],
    )
    for peer in peers:
        r = results[peer.name]
        rounds = " ".join("x" if x is None else _ms(x) for x in r["cpu_per_request_s_by_round"])
        if "median_cpu_per_request_s" not in r:
            errors = "; ".join(str(x.get("error")) for x in r["runs"] if "error" in x)
            table.add(peer.label, "-", "", "", "", "", "", "", errors or rounds)
            continue
        ratio = f"{r['median_ratio']:.2f}x" if "median_ratio" in r else ""
        ratio_range = f"{r['min_ratio']:.2f}-{r['max_ratio']:.2f}" if "min_ratio" in r else ""
        table.add(
            peer.label,
            _ms(r["median_cpu_per_request_s"]),
            f"{_ms(r['min_cpu_per_request_s'])}-{_ms(r['max_cpu_per_request_s'])}",
            ratio,
            ratio_range,
            _ms(r["median_user_per_request_s"]),
            _ms(r["median_sys_per_request_s"]),
            _ms(r["median_wall_per_request_s"]),
            rounds,
        )
    return table


def check_targets(results: dict[str, Any], quick: bool) -> list[Any]:
    from _common import Target

    targets = []
    for name, reference, bound, title in (
        (
            "surge_client",
            "requests.Session",
            0.25,
            "sync: surge.http.Client CPU per keep-alive GET",
        ),
        (
            "surge_async",
            "httpx.AsyncClient",
            0.2,
            "async: surge AsyncClient CPU per keep-alive GET",
        ),
    ):
        r = results.get(name)
        if not r or "median_ratio" not in r:
            targets.append(Target(title, f"<= {bound}x {reference}", "not run", None))
            continue
        measured = (
            f"{r['median_ratio']:.2f}x {reference} (median of per-round ratios; "
            f"range {r['min_ratio']:.2f}-{r['max_ratio']:.2f}; "
            f"{_ms(r['median_cpu_per_request_s'])} ms/req)"
        )
        targets.append(
            Target(
                title,
                f"<= {bound}x {reference}",
                measured,
                None if quick else r["median_ratio"] <= bound,
            )
        )
    return targets


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from _common import parse_sections

    parser = argparse.ArgumentParser(
        description="CPU per request of surge's sync and async clients against requests, "
        "httpx and aiohttp, one request at a time (see the module docstring)."
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 round: a smoke run")
    parser.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--rounds", type=int, help="runs per peer, interleaved (5)")
    parser.add_argument("--requests", type=int, help="measured keep-alive requests per run (2,000)")
    parser.add_argument("--warmup", type=int, help="unmeasured requests first (200)")
    parser.add_argument("--oneshot-requests", type=int, help="oneshot: measured calls (200)")
    parser.add_argument(
        "--limit", type=float, default=120.0, help="seconds before a child is killed"
    )
    parser.add_argument("--threads", type=int, default=8, help="threads: threads sharing a client")
    parser.add_argument(
        "--thread-requests", type=int, help="threads: GETs per thread (500; quick: 50)"
    )
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="threads: a checkout of surge (its src/ is imported) measured as the baseline",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON path")
    args = parser.parse_args(argv)
    args.only = parse_sections(parser, args.only, SECTIONS)
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.requests = args.requests or (200 if args.quick else 2_000)
    args.warmup = args.warmup or (20 if args.quick else 200)
    args.oneshot_requests = args.oneshot_requests or (20 if args.quick else 200)
    args.thread_requests = args.thread_requests or (50 if args.quick else 500)
    if args.quick:
        THREAD_SCALE[0] = 0.2
    return args


TITLES = {
    "sync": "sync, keep-alive, one request at a time",
    "async": "async, keep-alive, one request at a time (each awaited in turn)",
    "async16": "async, keep-alive, 16 in flight, asyncio",
    "oneshot": "one-shot get(): a new client and connection per call",
    "threads": "one client shared by threads",
    "dropin": "httpx.Client, keep-alive, one request at a time: its transport against surge's",
    "dropin_async": "httpx.AsyncClient, keep-alive, one request at a time: transports",
    "dropin_send": "requests: adapter.send() alone, keep-alive, one request at a time",
    "dropin_get": "requests: the whole Session.get(), keep-alive, one request at a time",
    "dropin_threads": "threads sharing one requests.Session",
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return child(argv[1])
    from _common import (
        PROXY_VARIABLES,
        announce,
        machine_info,
        payload,
        print_targets,
        progress,
        write_json,
    )
    from fetch import sim_on_own_cpu

    args = parse_args(argv)
    for variable in PROXY_VARIABLES:  # every child inherits this environment
        os.environ.pop(variable, None)
    info = machine_info(
        ["surge", "requests", "httpx", "aiohttp", "uvloop", "httptools", "urllib3", "httpcore"]
    )
    announce("surge API benchmark (one request at a time)", info, args.quick)
    started = time.perf_counter()
    peers = [
        p for p in PEERS if p.section in args.only and (not p.baseline or args.baseline is not None)
    ]
    runs: dict[str, list[dict[str, Any]]] = {p.name: [] for p in peers}
    with sim_on_own_cpu(seed=0) as (sim, cpus):
        url = sim.url(HOST)
        for round_no in range(args.rounds):
            shift = round_no % len(peers)
            for peer in peers[shift:] + peers[:shift]:  # rotated: no peer always goes first
                oneshot = peer.section == "oneshot"
                n = args.oneshot_requests if oneshot else args.requests
                if peer.section == "threads":
                    n = args.thread_requests
                warm = max(1, args.warmup // 10) if oneshot else args.warmup
                progress(f"round {round_no + 1} of {args.rounds}: {peer.name}")
                result = run_peer(peer, url, n, warm, args.limit, args.threads, args.baseline)
                result["round"] = round_no + 1
                runs[peer.name].append(result)
    thread_peers = [p for p in peers if p.section == "threads"]
    dropin_thread_peers = [p for p in peers if p.section == "dropin_threads"]
    results = summarise([p for p in peers if p.section not in ("threads", "dropin_threads")], runs)
    results.update(summarise_threads(thread_peers, runs))
    results.update(summarise_dropin_threads(dropin_thread_peers, runs))
    by_section: dict[str, Any] = {}
    for section in SECTIONS:
        chosen = [p for p in peers if p.section == section]
        if not chosen:
            continue
        if section == "dropin_threads":
            table = dropin_threads_table(
                f"{TITLES[section]}: median of {args.rounds} rounds", chosen, results
            )
            by_section[section] = table.render()
            table.print()
            continue
        if section == "threads":
            table = threads_table(
                f"{TITLES[section]}: {args.threads} threads x {args.thread_requests:,} GETs to "
                f"{HOST}; then {FAST_HOST} while 8 x {SLOW_HOST} are in flight; "
                f"median of {args.rounds} rounds",
                chosen,
                results,
            )
            table.note("target (#33): the 10 ms request <= 50 ms; wall no slower than baseline")
            by_section[section] = table.render()
            table.print()
            continue
        reference = next(p for p in chosen if p.reference)
        n = args.oneshot_requests if section == "oneshot" else args.requests
        table = section_table(
            f"{TITLES[section]}: {n:,} GETs to {HOST} (1 KiB), median of {args.rounds} rounds",
            chosen,
            results,
            reference.label.split(",")[0].split(" ")[0],
        )
        if section == "sync":
            table.note(
                "before (#22): requests 0.52 ms, httpx 0.29 ms; target surge <= 0.25x requests"
            )
        if section == "async":
            table.note(
                "target surge (asyncio) <= 0.2x httpx; the uvloop rows are notes (httpx has none)"
            )
        by_section[section] = table.render()
        table.print()
    print(
        "cpu = user + sys of the client's process (getrusage, every thread) over the measured "
        "requests and the client's close;\nratios are taken within each round, then the median; "
        + (
            f"server pinned to CPU {cpus['server']}, clients to CPU {cpus['client']}."
            if cpus
            else "server and clients share the CPUs."
        )
        + "\n"
    )
    targets = check_targets(results, args.quick)
    if thread_peers:
        targets += check_thread_targets(results, args.quick)
    targets += check_dropin_targets(results, args.quick)
    print_targets(targets, args.quick)
    command = "python benchmarks/api.py" + "".join(f" {a}" for a in argv)
    path = write_json(
        args.out,
        payload(
            "api",
            info,
            vars(args),
            results,
            targets,
            started,
            command=command,
            date=info["date"][:10],
            url=url,
            cpus=cpus,
            tables=by_section,
        ),
    )
    print(f"\nwrote {path} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
