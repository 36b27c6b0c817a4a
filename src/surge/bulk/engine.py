"""The bulk engine: many inputs in, one result record per input out, streamed.

    async for record in surge.fetch(urls, concurrency=500, max_time=10):
        ...
    for record in surge.fetch_all(urls):   # plain iterator, for synchronous code
        ...

Scheduling is ``concurrency`` worker tasks pulling from one input iterator:
memory is constant whatever the input's size (no list of a million tasks, no
``gather``), and a request's clock starts only when a worker holds it (the
client's timeouts start with the request's own network work, so waiting in
surge's queues never times a request out - the flaw that lost most hosts of a
5,000-host aiohttp ``gather`` run).  Records stream out as they complete,
through a bounded queue, so a slow consumer slows the workers instead of
growing memory.

Every input yields exactly one record, failures included: a remote failure is
``error`` (one of :data:`surge.errors.ERROR_CLASSES`), never an exception.
"""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing, closing
from dataclasses import MISSING, dataclass, fields
from time import perf_counter
from typing import Any

from surge.bulk.inputs import InputItem as Item
from surge.bulk.limits import fit_open_files, open_files_limit
from surge.errors import LocalResourceError, RequestError, UsageError
from surge.gc_tuning import relaxed_gc
from surge.http.client import AsyncClient
from surge.http.timings import RECORD_PHASES, Timings, ms3
from surge.loops import iterate_in_thread
from surge.retry import RETRY_AFTER_STATUSES, RetryPolicy, retry_after_seconds
from surge.trace.tracer import LAG_EVERY, Tracer

Record = dict[str, Any]

#: How long a request waits for this process to have a file descriptor free (one
#: comes back each time a request in flight ends) before the run stops.
LOCAL_WAIT_S = 30.0
#: How often it looks.
LOCAL_POLL_S = 0.02


@dataclass
class FetchOptions:
    """The options of ``surge.fetch``, ``surge.fetch_all`` and ``surge fetch``,
    checked once: a bad value raises :class:`~surge.errors.UsageError` (a
    ValueError; ``surge fetch`` exits 2).  ``fetch`` and ``fetch_all`` take each
    option as a keyword argument of the same name, or one ``FetchOptions`` made
    beforehand as ``options=``.

    Options (``surge fetch``'s flag in brackets):

    concurrency
        Requests in flight at most [-c]; fewer, with a RuntimeWarning, when the
        open-files limit cannot hold that many sockets.
    per_host
        Connections to one host at most [--per-host]; None: no bound of its own.
    max_time
        Seconds a try may take [--max-time]: from its DNS lookup (or a reused
        connection's checkout) to the last body byte, redirects included; not
        the wait for a free connection or handshake slot, nor the retries'
        back-off.
    connect_timeout
        Seconds for DNS, TCP and TLS together [--connect-timeout].
    retries
        Tries after the first, for transient failures only (dns_error,
        connect_refused, connect_timeout, read_timeout, connection_reset;
        statuses 408, 429, 500, 502, 503, 504) [--retries]; a Retry-After is
        waited for if the try could still finish within ``max_time``.
    retry_backoff
        Seconds: the first back-off's limit, doubling per try, with full jitter.
    follow_redirects
        Follow redirects [-L].
    max_redirects
        Redirects followed at most; one more is ``too_many_redirects`` [--max-redirs].
    method
        "GET" or "HEAD" [-X].
    headers
        Sent with every request [-H]: a mapping or (name, value) pairs.
    user
        (user, password): Basic auth, sent to each input's own origin only [-u].
    location_trusted
        Send the credentials to other origins a redirect leads to [--location-trusted].
    resolve
        curl's overrides, "HOST:PORT:ADDR" (HOST may be * or *.suffix) [--resolve].
    cafile
        CA certificates (PEM) to trust instead of the system's [--cacert].
    insecure
        Do not verify TLS certificates [-k].
    body_cap
        Body bytes at most; a larger body is ``body_too_large`` [--max-filesize].
    max_connecting
        TCP/TLS handshakes in flight at most [--max-connecting].
    keep_body
        Put the body, as text, into the record as ``body``.
    relax_gc
        Relax the cycle collector while the run is active (see surge.gc_tuning).
    trace
        A tracer given every record with its raw timings: a
        :class:`~surge.trace.TraceRecorder` (the --trace page) or a
        :class:`~surge.trace.HarWriter` (--har).
    """

    concurrency: int = 1000
    per_host: int | None = None
    max_time: float = 30.0
    connect_timeout: float = 10.0
    retries: int = 0
    retry_backoff: float = 0.5
    follow_redirects: bool = False
    max_redirects: int = 10
    method: str = "GET"
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = ()
    user: tuple[str, str] | None = None
    location_trusted: bool = False
    resolve: Sequence[str] = ()
    cafile: str | None = None
    insecure: bool = False
    body_cap: int = 10 * 1024 * 1024
    max_connecting: int = 256
    keep_body: bool = False
    relax_gc: bool = True
    trace: Tracer | None = None

    def __post_init__(self) -> None:
        # Every option checked here, once, for the CLI (exit 2) and the Python API
        # (UsageError, a ValueError) alike: NaN, infinities and negative sizes
        # would otherwise get as far as a socket.
        _count("concurrency", self.concurrency, least=1)
        if self.per_host is not None:
            _count("per-host", self.per_host, least=1)
        _count("retries", self.retries, least=0)
        _count("max-redirects", self.max_redirects, least=0)
        _count("max-connecting", self.max_connecting, least=1)
        _count("max-filesize", self.body_cap, least=0)
        _seconds("max-time", self.max_time)
        _seconds("connect-timeout", self.connect_timeout)
        _seconds("retry-backoff", self.retry_backoff, zero=True)
        if isinstance(self.resolve, str):  # one --resolve entry, not its characters
            self.resolve = [self.resolve]
        if isinstance(self.headers, str):  # one 'Name: value' would be its characters
            raise UsageError("headers must be a mapping or (name, value) pairs, not a string")
        self.method = self.method.upper()
        if self.method not in ("GET", "HEAD"):
            raise UsageError(f"method must be GET or HEAD, not {self.method}")

    @property
    def retry_policy(self) -> RetryPolicy:
        """``retries`` and ``retry_backoff`` as the one policy (surge.retry); made
        when a try failed, never on the path of a request that did not."""
        return RetryPolicy(self.retries, self.retry_backoff, max(30.0, self.retry_backoff))

    def client(self) -> AsyncClient:
        return AsyncClient(
            max_connections=self.concurrency,
            per_host=self.per_host,
            connect_timeout=self.connect_timeout,
            max_time=self.max_time,
            follow_redirects=self.follow_redirects,
            max_redirects=self.max_redirects,
            headers=self.headers,
            auth=self.user,
            location_trusted=self.location_trusted,
            cafile=self.cafile,
            insecure=self.insecure,
            resolve=self.resolve,
            body_cap=self.body_cap,
            max_connecting=self.max_connecting,
            # Each input is a request of its own, as curl's: no cookie set by one
            # host's response goes with another input's request (and a crawl
            # does not fill a jar).
            cookies=False,
        )


def _count(name: str, value: object, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be a whole number, not {value!r}")
    if value < least:
        raise UsageError(f"{name} must be at least {least}, not {value}")


def _seconds(name: str, value: object, *, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        wanted = "0 or more" if zero else "more than 0"
        raise UsageError(f"{name} must be a finite number of seconds, {wanted}, not {value}")


def check_urls(urls: object) -> None:
    """A single string where an iterable of URLs belongs would be fetched one
    character at a time."""
    if isinstance(urls, str | bytes):
        raise TypeError("urls must be an iterable of URLs, not one string: pass [url] for one URL")


def as_items(urls: Iterable[str | Item]) -> Iterator[Item]:
    """Plain strings become items numbered from 1; items pass through."""
    for n, url in enumerate(urls, 1):
        yield url if isinstance(url, Item) else Item(n, url, url.strip())


async def fetch(
    urls: Iterable[str | Item],
    *,
    client: AsyncClient | None = None,
    options: FetchOptions | None = None,
    concurrency: int = 1000,
    per_host: int | None = None,
    max_time: float = 30.0,
    connect_timeout: float = 10.0,
    retries: int = 0,
    retry_backoff: float = 0.5,
    follow_redirects: bool = False,
    max_redirects: int = 10,
    method: str = "GET",
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    user: tuple[str, str] | None = None,
    location_trusted: bool = False,
    resolve: Sequence[str] = (),
    cafile: str | None = None,
    insecure: bool = False,
    body_cap: int = 10 * 1024 * 1024,
    max_connecting: int = 256,
    keep_body: bool = False,
    relax_gc: bool = True,
    trace: Tracer | None = None,
) -> AsyncGenerator[Record, None]:
    """Fetch every URL; yield one record per input as results complete.

    ``urls`` is any iterable (a list, a generator over a file of millions) of URL
    strings or :class:`Item`; it is consumed lazily.  ``client``: an
    :class:`~surge.http.AsyncClient` of yours to fetch with (its connections,
    timeouts, TLS and headers; the connection options here are then not used),
    left open afterwards.  ``options``: a :class:`FetchOptions` made beforehand,
    in place of the options below (give one or the other).  A bad option value
    raises :class:`~surge.errors.UsageError` when iteration starts.

    >>> import asyncio, surge
    >>> async def statuses(urls):
    ...     return sorted([r["status"] async for r in surge.fetch(urls, concurrency=10)])
    >>> asyncio.run(statuses(["https://httpbin.org/get", "https://httpbin.org/status/404"]))
    [200, 404]

    The options, as :class:`FetchOptions` documents them:
    """
    check_urls(urls)
    opts = _chosen("fetch", options, locals())
    # aclosing: a caller that stops early (break, an exception) must stop the
    # workers before the client closes under them, not leave run() for the
    # garbage collector to finish on a loop that may be gone by then.
    if client is not None:
        async with aclosing(run(client, as_items(urls), opts)) as records:
            async for record in records:
                yield record
        return
    async with opts.client() as own, aclosing(run(own, as_items(urls), opts)) as records:
        async for record in records:
            yield record


async def run(
    client: AsyncClient, items: Iterator[Item], opts: FetchOptions
) -> AsyncGenerator[Record, None]:
    """Drive ``opts.concurrency`` workers over ``items`` with ``client``.

    Fewer when the open-files limit cannot hold that many sockets (raised as far
    as it goes first, as ``surge fetch`` does): a RuntimeWarning says so.
    """
    workers = fit_open_files(opts.concurrency)
    if workers < opts.concurrency:
        warnings.warn(
            f"surge: the open-files limit is {open_files_limit()}; running {workers} "
            f"requests at a time, not {opts.concurrency} (raise it with 'ulimit -n')",
            RuntimeWarning,
            stacklevel=2,
        )
    results: asyncio.Queue[Record | None] = asyncio.Queue(maxsize=max(opts.concurrency, 64))
    source = iter(items)
    exhausted = False
    failure: list[BaseException] = []

    def next_item() -> Item | None:
        nonlocal exhausted
        if exhausted:
            return None
        try:
            return next(source)
        except StopIteration:
            exhausted = True
            return None
        except BaseException as e:  # a bad input file: stop feeding, report after the drain
            exhausted = True
            failure.append(e)
            return None

    async def worker() -> None:
        while (item := next_item()) is not None:
            record = await fetch_one(client, item, opts)
            # put() is a coroutine around put_nowait(): called only when it must wait
            if results.full():
                await results.put(record)
            else:
                results.put_nowait(record)

    async def supervise() -> None:
        try:
            # A task group: a worker that fails (out of descriptors for good, a
            # bug) stops its siblings, instead of leaving them running unwatched.
            async with asyncio.TaskGroup() as group:
                for _ in range(workers):
                    group.create_task(worker())
        except asyncio.CancelledError:
            raise  # run() is closing: nobody reads the queue, which may be full
        except BaseExceptionGroup as failed:
            await results.put(None)
            raise failed.exceptions[0] from None
        except BaseException:  # KeyboardInterrupt, SystemExit: not grouped
            await results.put(None)
            raise
        await results.put(None)

    with relaxed_gc(opts.relax_gc):
        supervisor = asyncio.create_task(supervise())
        watcher = None if opts.trace is None else asyncio.create_task(watch_lag(opts.trace))
        try:
            while True:
                record = results.get_nowait() if results.qsize() else await results.get()
                if record is None:
                    break
                yield record
            await supervisor  # re-raises a worker's unexpected exception
        finally:
            if watcher is not None:
                watcher.cancel()
            if not supervisor.done():
                supervisor.cancel()
                await asyncio.gather(supervisor, return_exceptions=True)
    if failure:
        raise failure[0]


async def watch_lag(tracer: Tracer) -> None:
    """Tell the tracer how late the loop runs a timer: on a busy client every
    phase that ends with an event (a connect, a first byte) waits for the loop,
    and a trace that does not say so shows client CPU as network time."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LAG_EVERY
        await asyncio.sleep(LAG_EVERY)
        tracer.loop_lag(perf_counter(), max(0.0, loop.time() - due))


async def fetch_one(client: AsyncClient, item: Item, opts: FetchOptions) -> Record:
    """One input to one record, with retries; never raises for a remote failure."""
    attempts = 0
    retried = False
    start = perf_counter()
    short_until: float | None = None  # out of descriptors: wait for one until then
    while True:
        try:
            response = await client.request(opts.method, item.url)
        except LocalResourceError as e:
            # This process is out of descriptors (another part of it holds them):
            # wait for a request in flight to give one back and try again - not a
            # try under --retries, and never a remote error class on the record.
            now = perf_counter()
            if short_until is None:
                short_until = now + LOCAL_WAIT_S
            elif now > short_until:
                raise LocalResourceError(
                    f"{e}, still after {LOCAL_WAIT_S:g} s (open-files limit "
                    f"{open_files_limit()}: raise it with 'ulimit -n')"
                ) from None
            await asyncio.sleep(LOCAL_POLL_S)
            continue
        except RequestError as e:
            attempts += 1  # tries under --retries only (not hops, not a stale reuse)
            if opts.retries and (policy := opts.retry_policy).error_worth_retrying(e.error_class):
                wait = policy.delay(attempts, time_left=opts.max_time)
                if wait is not None:
                    await asyncio.sleep(wait)
                    retried = True
                    continue
            record = _record(
                item, start, attempts, e.status, e, e.final_url, e.bytes, e.timings, e.redirects
            )
            if opts.trace is not None:
                end = start + record["elapsed_ms"] / 1000
                opts.trace.add(record, start, end, e.timings, retried)
            return record
        attempts += 1
        if opts.retries and opts.retry_policy.status_worth_retrying(response.status):
            # A wait the server asks for (Retry-After) longer than a try may
            # take (--max-time) is not waited for: the try is the last.
            asked = (
                retry_after_seconds(response.header("retry-after"))
                if response.status in RETRY_AFTER_STATUSES
                else None
            )
            wait = opts.retry_policy.delay(attempts, retry_after=asked, time_left=opts.max_time)
            if wait is not None:
                await asyncio.sleep(wait)
                retried = True
                continue
        record = _record(
            item,
            start,
            attempts,
            response.status,
            None,
            response.final_url,
            response.bytes,
            response.timings,
            response.redirects,
        )
        if opts.trace is not None:
            end = start + record["elapsed_ms"] / 1000
            opts.trace.add(record, start, end, response.timings, retried)
        if opts.keep_body:
            record["body"] = response.text
        return record


def _record(
    item: Item,
    start: float,
    attempts: int,
    status: int | None,
    error: RequestError | None,
    final_url: str | None,
    body_bytes: int,
    timings: Timings | None,
    redirects: int,
) -> Record:
    phases = timings.phases_ms() if timings is not None else dict.fromkeys(RECORD_PHASES)
    hop_start = timings.hop_start if timings is not None else None
    return {
        "url": item.url,
        "input": item.input,
        "line": item.line,
        "status": status,
        "error": error.error_class if error is not None else None,
        "error_detail": error.detail if error is not None else None,
        "elapsed_ms": ms3(perf_counter() - start),
        "bytes": body_bytes,
        "attempts": attempts,
        "redirects": redirects,
        # curl's time_redirect (http.client.redirect_ms, inlined: a call per record)
        "redirect_ms": 0.0
        if hop_start is None or timings is None or timings.started is None
        else ms3(hop_start - timings.started),
        "final_url": final_url,
        "timings": phases,
    }


# -- the synchronous API ------------------------------------------------------------------


def fetch_all(
    urls: Iterable[str | Item],
    *,
    options: FetchOptions | None = None,
    concurrency: int = 1000,
    per_host: int | None = None,
    max_time: float = 30.0,
    connect_timeout: float = 10.0,
    retries: int = 0,
    retry_backoff: float = 0.5,
    follow_redirects: bool = False,
    max_redirects: int = 10,
    method: str = "GET",
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    user: tuple[str, str] | None = None,
    location_trusted: bool = False,
    resolve: Sequence[str] = (),
    cafile: str | None = None,
    insecure: bool = False,
    body_cap: int = 10 * 1024 * 1024,
    max_connecting: int = 256,
    keep_body: bool = False,
    relax_gc: bool = True,
    trace: Tracer | None = None,
) -> Iterator[Record]:
    """``surge.fetch`` for synchronous code: a plain iterator of records.

    The engine runs on its own event loop in a background thread, so this works
    where a loop is already running (Jupyter, an async web framework's sync view).
    Records arrive as they complete; closing the iterator early stops the engine.
    ``options``: a :class:`FetchOptions` made beforehand, in place of the options
    below (give one or the other).  A bad option value raises
    :class:`~surge.errors.UsageError` here, at the call.

    >>> import surge
    >>> urls = ["https://httpbin.org/get", "https://httpbin.org/redirect/2", "not a URL"]
    >>> records = surge.fetch_all(urls, concurrency=10, follow_redirects=True)
    >>> sorted((r["line"], r["status"], r["error"], r["redirects"]) for r in records)  # any order
    [(1, 200, None, 0), (2, 200, None, 2), (3, None, 'invalid_url', 0)]

    The options, as :class:`FetchOptions` documents them:
    """
    check_urls(urls)
    opts = _chosen("fetch_all", options, locals())  # a bad option raises here, at the call
    return _fetch_all(urls, opts)


#: FetchOptions' fields: the keyword arguments of fetch() and fetch_all() besides
#: ``client`` and ``options`` (tests/bulk/test_api_params.py keeps them in step).
_OPTION_NAMES = tuple(f.name for f in fields(FetchOptions))
_DEFAULTS = {
    f.name: f.default if f.default_factory is MISSING else f.default_factory()
    for f in fields(FetchOptions)
}


def _chosen(api: str, options: FetchOptions | None, arguments: dict[str, Any]) -> FetchOptions:
    """The FetchOptions of a call, from its arguments (``locals()`` at its start:
    the parameters are FetchOptions' fields, name for name)."""
    given = {name: arguments[name] for name in _OPTION_NAMES}
    if options is None:
        return FetchOptions(**given)
    if not isinstance(options, FetchOptions):
        raise TypeError(f"options must be a FetchOptions, not {type(options).__name__}")
    # Both: one would silently lose. (A value equal to the default cannot be told
    # from one not given; dataclasses.replace(options, ...) combines them.)
    both = [name for name in _OPTION_NAMES if given[name] != _DEFAULTS[name]]
    if both:
        raise TypeError(
            f"{api}() takes options= or the options one by one, not both "
            f"(options= and {', '.join(both)}): dataclasses.replace(options, ...) combines them"
        )
    return options


def _options_documented(api: Any) -> None:
    """The options' part of FetchOptions' docstring, appended to ``api``'s: one
    text, so that help(surge.fetch) shows what each option does."""
    doc = FetchOptions.__doc__
    if api.__doc__ is None or doc is None:  # python -OO
        return
    options = doc[doc.index("\n\n    concurrency\n") :]
    api.__doc__ = api.__doc__.rstrip() + options


_options_documented(fetch)
_options_documented(fetch_all)


def _fetch_all(urls: Iterable[str | Item], opts: FetchOptions) -> Iterator[Record]:
    with closing(
        iterate_in_thread(lambda: fetch(urls, options=opts), name="surge-fetch", buffer=1024)
    ) as records:
        yield from records
