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
import os
import warnings
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing, closing
from dataclasses import MISSING, dataclass, fields
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from surge._keywords import refuse_unknown, spelt_out
from surge._version import __version__
from surge.bulk.inputs import InputItem as Item
from surge.bulk.inputs import NotReady, PrefetchedInputs, not_a_url
from surge.bulk.limits import fit_open_files, open_files_limit
from surge.bulk.pacing import RUN, HostPacer
from surge.errors import SKIP_CLASSES, LocalResourceError, RequestError, UsageError
from surge.extras import missing
from surge.gc_tuning import relaxed_gc
from surge.http.client import AsyncClient, may_send
from surge.http.headers import check_method, header_line
from surge.http.resolver import parse_servers
from surge.http.timings import RECORD_PHASES, Timings, ms3
from surge.http.url import URL, parse_url
from surge.loops import iterate_in_thread
from surge.retry import RETRY_AFTER_STATUSES, RetryPolicy, retry_after_seconds
from surge.trace.redact import safe_record
from surge.trace.tracer import LAG_EVERY, Tracer

if TYPE_CHECKING:  # loaded by the options that use them: --output-dir, --warc, --robots...
    from http.cookiejar import CookieJar

    from surge.bulk.bodies import BodyFiles
    from surge.bulk.hostbudget import HostBudget, Origin
    from surge.bulk.robots import RobotsRules
    from surge.bulk.summary import Summary
    from surge.bulk.throttle import AutoThrottle, Ticket
    from surge.bulk.warc import WarcWriter

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
        The request method [-X]: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS or
        any other token; a JSONL input line's own ``method`` wins for its line.
    data
        A request body sent with every input [-d, --data-binary]: bytes, or text
        sent as UTF-8; with ``method`` "GET" it makes the method POST, and it
        is sent as ``application/x-www-form-urlencoded`` unless ``headers``
        name a Content-Type, as curl's -d does.  A JSONL line's own
        ``body``/``body_base64`` wins for its line.
    user_agent
        The User-Agent sent [-A]; None: ``surge/VERSION``.
    headers
        Sent with every request [-H]: a mapping or (name, value) pairs.
    user
        (user, password): Basic auth, sent to each input's own origin only [-u].
    location_trusted
        Send the credentials to other origins a redirect leads to [--location-trusted].
    resolve
        curl's overrides, "HOST:PORT:ADDR" (HOST may be * or *.suffix) [--resolve].
    dns_servers
        Nameservers to ask instead of the system's, "IP[:PORT]" items (a list, or
        one comma-separated string) [--dns-servers]; names then resolve through
        c-ares.
    dns_timeout
        Seconds a lookup may take once its query is sent (default: 5, or
        ``connect_timeout`` if less) [--dns-timeout].  The lookup is part of the
        connect phase, so a value above ``connect_timeout`` is cut to it.
    ip_version
        4 or 6: resolve names to addresses of that family only [-4, -6]; None:
        both, raced as RFC 8305's Happy Eyeballs.
    cafile
        CA certificates (PEM) to trust instead of the system's [--cacert].
    insecure
        Do not verify TLS certificates [-k].
    cert
        The client certificate shown to servers that ask for one [--cert,
        --key]: a PEM file with the certificate and its key, or (certificate
        file, key file).
    proxy
        The proxy every request goes through [--proxy]: ``http://``, ``https://``,
        ``socks5://`` (names resolved here) or ``socks5h://`` (by the proxy), with
        credentials as ``user:password@`` (percent-encoded).  None: the
        environment's ``http_proxy``, ``https_proxy``, ``all_proxy`` (as curl
        reads them, ``HTTP_PROXY`` never); "": none, the environment ignored.
    noproxy
        Hosts that go direct [--noproxy]: comma-separated names (each with the
        names under it), IP addresses and CIDR ranges, or ``*`` for all; None: the
        environment's ``no_proxy``; "": every host through the proxy.
    proxy_cafile
        CA certificates (PEM) to trust for an https:// proxy's own certificate,
        instead of those origins are checked with [--proxy-cacert].
    proxy_insecure
        Do not verify an https:// proxy's certificate [--proxy-insecure].
    http2
        Offer HTTP/2 by ALPN over TLS (False: HTTP/1.1 only) [--http1.1].
    http2_prior_knowledge
        Speak HTTP/2 in cleartext (h2c) to http:// origins [--http2-prior-knowledge].
    body_cap
        Body bytes at most; a larger body is ``body_too_large`` [--max-filesize].
    max_connecting
        TCP/TLS handshakes in flight at most [--max-connecting].
    keep_body
        Put the body, as text, into the record as ``body``.
    include_headers
        Put the response headers into the record as ``headers``: [name, value]
        pairs, in the order received [-i].
    output_dir
        Save each body to a file under this directory, decoded, streamed to
        disk; the record gains ``body_path`` and ``body_sha256``
        [--output-dir] (the naming: surge.bulk.bodies).
    byte_range
        Ask for these bytes of each body, curl's syntax: "0-499", "500-",
        "-500", or several joined by commas [-r, --range]; sent as
        ``Range: bytes=...`` with ``Accept-Encoding: identity`` (unless
        ``headers`` name one), a 206's body saved as it came.  A bad one is a
        UsageError naming it (the rules: surge.bulk.ranges).
    continue_at
        "-": with ``output_dir``, continue each body's partial file from its
        size with ``Range: bytes=SIZE-`` [-C -, --continue-at -]: a 206 is
        appended, a server that ignores Range rewrites the file from byte 0, a
        416 finds it complete; files are written in place, so a run stopped
        leaves partial files the next one continues.  The record gains
        ``continue_from`` and ``continued`` (surge.bulk.ranges).  None: off.
    warc
        Write each exchange to this WARC/1.1 file (gzipped per record), or to a
        :class:`~surge.bulk.warc.WarcWriter` of yours [--warc].
    warc_max_size
        Start a new WARC file (``NAME-00001.warc.gz``, ...) before one would grow
        past this many bytes [--warc-max-size].
    rate_per_host
        Requests a second at most to one host (the input URL's), spaced evenly;
        a 429 or 503 with Retry-After holds that host back as long as it asks
        (at most ``max_time``) [--rate-per-host].  None: no pacing.
    rate
        Requests a second at most across the whole run, spaced evenly: each try
        starts an interval after the one before or later, never in a burst
        [--rate N/s, N/m, N/h, N/d] (curl's --rate; the model: surge.bulk.pacing).
        A redirect hop is part of its try, as in curl.  None: no bound.
    max_host_errors
        After this many connection-level failures in a row (dns_error,
        connect_refused, connect_timeout, tls_error, read_timeout; a response
        of any status resets the count) of one origin, its remaining inputs are
        records with the error ``host_skipped``, sent no request
        [--max-host-errors] (the rules: surge.bulk.hostbudget).  None: off.
    robots
        "obey": each origin's robots.txt, fetched once for the run, decides
        which of its inputs are sent (the others are records with the error
        ``robots_disallowed``), and its Crawl-delay spaces that host's requests
        [--robots] (the rules, RFC 9309's: surge.bulk.robots).  "ignore" (the
        default, as curl's): not asked for.
    auto_throttle
        Adapt each host's concurrency (at most ``per_host``, else 8) and the
        delay between its requests to its latency and its 429 and 503 answers,
        additive increase and multiplicative decrease [--auto-throttle] (the
        model and its bounds: surge.bulk.throttle); a Retry-After holds the
        host back as ``rate_per_host``'s does.  False (the default): off.
    limit_rate
        Bytes a second at most per transfer, averaged from its body's start, as
        curl's [--limit-rate]: each request's body is read no faster (so the
        server sends no faster, past the buffers between), and ``max_time``
        still bounds it.  Not a bound on the whole run: ``concurrency``
        transfers may each go at it.  The body is streamed, so ``keep_body``
        keeps none.  None: no limit.
    cookies
        A ``http.cookiejar.CookieJar`` the run's requests share [-b FILE,
        --cookie-jar FILE]: its cookies go where its rules send them (domain,
        path, Secure, expiry), what responses set is kept by the client's rules
        (public suffixes refused, Secure only from a secure origin), and when
        the run ends - or is stopped - the jar holds what the client held.
        None: no cookie kept, each input a request of its own (as curl's).
        Not with a cluster.
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
    data: bytes | str | None = None
    user_agent: str | None = None
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = ()
    user: tuple[str, str] | None = None
    location_trusted: bool = False
    resolve: Sequence[str] = ()
    dns_servers: str | Sequence[str] | None = None
    dns_timeout: float | None = None
    ip_version: int | None = None
    cafile: str | None = None
    insecure: bool = False
    cert: str | tuple[str, str] | None = None
    proxy: str | None = None
    noproxy: str | None = None
    proxy_cafile: str | None = None
    proxy_insecure: bool = False
    http2: bool = True
    http2_prior_knowledge: bool = False
    body_cap: int = 10 * 1024 * 1024
    max_connecting: int = 256
    keep_body: bool = False
    include_headers: bool = False
    output_dir: str | None = None
    byte_range: str | None = None
    continue_at: str | None = None
    warc: str | WarcWriter | None = None
    warc_max_size: int | None = None
    rate_per_host: float | None = None
    rate: float | None = None
    max_host_errors: int | None = None
    robots: str = "ignore"
    auto_throttle: bool = False
    limit_rate: int | None = None
    cookies: CookieJar | None = None
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
        if self.dns_timeout is not None:
            _seconds("dns-timeout", self.dns_timeout)
        if isinstance(self.ip_version, bool) or self.ip_version not in (None, 4, 6):
            raise UsageError(f"ip-version must be 4, 6 or None, not {self.ip_version!r}")
        if self.dns_servers is not None:
            self.dns_servers = parse_servers(self.dns_servers)
        _seconds("retry-backoff", self.retry_backoff, zero=True)
        if self.proxy:  # a usage error now (exit 2), not when the client is made
            from surge.http.proxy import parse_proxy  # --proxy only

            parse_proxy(self.proxy)
        if isinstance(self.resolve, str):  # one --resolve entry, not its characters
            self.resolve = [self.resolve]
        if isinstance(self.headers, str):  # one 'Name: value' would be its characters
            raise UsageError("headers must be a mapping or (name, value) pairs, not a string")
        self.method = check_method(self.method)
        if isinstance(self.data, str):
            self.data = self.data.encode("utf-8")
        if self.data is not None:
            if not isinstance(self.data, bytes):
                raise UsageError(f"data must be bytes or str, not {type(self.data).__name__}")
            if self.method == "GET":
                self.method = "POST"  # curl's -d
        if self.user_agent is not None:
            header_line("User-Agent", self.user_agent)  # a usage error now, not per request
        _rate("rate-per-host", self.rate_per_host)
        _rate("rate", self.rate)
        if self.max_host_errors is not None:
            _count("max-host-errors", self.max_host_errors, least=1)
        if self.limit_rate is not None:
            _count("limit-rate", self.limit_rate, least=1)
        if not isinstance(self.auto_throttle, bool):
            raise UsageError(f"auto-throttle must be True or False, not {self.auto_throttle!r}")
        if self.robots not in ("obey", "ignore"):
            raise UsageError(f"robots must be 'obey' or 'ignore', not {self.robots!r}")
        if self.robots == "obey":
            try:
                import protego  # noqa: F401 - a usage error now, not per origin
            except ModuleNotFoundError as e:
                raise UsageError(str(missing(e, "--robots obey (robots.txt rules)"))) from None
        if self.warc_max_size is not None:
            _count("warc-max-size", self.warc_max_size, least=1)
        if isinstance(self.output_dir, os.PathLike):
            self.output_dir = os.fspath(self.output_dir)
        if self.byte_range is not None or self.continue_at is not None:
            from surge.bulk.ranges import check_range_options  # -r, -C only

            check_range_options(self.byte_range, self.continue_at, self.output_dir, self.headers)

    @property
    def extras(self) -> tuple[str, ...]:
        """The optional record fields these options add, in record order."""
        names = []
        if self.include_headers:
            names.append("headers")
        if self.output_dir is not None:
            names += ["body_path", "body_sha256"]
        if self.continue_at is not None:
            names += ["continue_from", "continued"]
        if self.keep_body:
            names.append("body")
        return tuple(names)

    @property
    def retry_policy(self) -> RetryPolicy:
        """``retries`` and ``retry_backoff`` as the one policy (surge.retry); made
        when a try failed, never on the path of a request that did not."""
        return RetryPolicy(self.retries, self.retry_backoff, max(30.0, self.retry_backoff))

    def request_headers(self) -> list[tuple[str, str]]:
        """``headers`` with ``user_agent`` (an -H User-Agent wins over -A, as in curl)."""
        items = self.headers.items() if isinstance(self.headers, Mapping) else self.headers
        pairs = list(items)
        if self.user_agent is not None and not any(
            name.lower() == "user-agent" for name, _ in pairs
        ):
            pairs.insert(0, ("User-Agent", self.user_agent))
        if self.byte_range is not None or self.continue_at is not None:
            from surge.bulk.ranges import range_headers  # -r, -C only

            pairs += range_headers(self.byte_range, pairs)
        return pairs

    @property
    def user_agent_sent(self) -> str:
        """The User-Agent the requests carry (an -H one, -A's, or surge's own)."""
        for name, value in self.request_headers():
            if name.lower() == "user-agent":
                return value
        return f"surge/{__version__}"

    @property
    def data_headers(self) -> tuple[tuple[str, str], ...]:
        """What a request carrying ``data`` adds: curl's -d Content-Type, unless
        ``headers`` name one."""
        items = self.headers.keys() if isinstance(self.headers, Mapping) else self.headers
        named = any((n if isinstance(n, str) else n[0]).lower() == "content-type" for n in items)
        return () if named else (("Content-Type", "application/x-www-form-urlencoded"),)

    def client(self) -> AsyncClient:
        return AsyncClient(
            max_connections=self.concurrency,
            per_host=self.per_host,
            connect_timeout=self.connect_timeout,
            max_time=self.max_time,
            follow_redirects=self.follow_redirects,
            max_redirects=self.max_redirects,
            headers=self.request_headers(),
            auth=self.user,
            location_trusted=self.location_trusted,
            cafile=self.cafile,
            insecure=self.insecure,
            cert=self.cert,
            # The environment's proxy variables too, as curl reads them: a job
            # run where a proxy is the way out works without flags.
            proxy=self.proxy,
            noproxy=self.noproxy,
            trust_env=True,
            proxy_cafile=self.proxy_cafile,
            proxy_insecure=self.proxy_insecure,
            http2=self.http2,
            http2_prior_knowledge=self.http2_prior_knowledge,
            resolve=self.resolve,
            dns_servers=self.dns_servers,
            dns_timeout=self.dns_timeout,
            ip_version=self.ip_version,
            body_cap=self.body_cap,
            max_connecting=self.max_connecting,
            # Each input is a request of its own, as curl's: no cookie set by one
            # host's response goes with another input's request (and a crawl
            # does not fill a jar) - unless the run shares a jar (-b, --cookie-jar).
            cookies=False if self.cookies is None else self.cookies,
        )


class FetchKeywords(TypedDict, total=False):
    """FetchOptions' fields as ``fetch``'s and ``fetch_all``'s keyword arguments,
    for type checkers (``**options: Unpack[FetchKeywords]``): the same names and
    types (tests/bulk/test_api_params.py fails if they part); the defaults, the
    checks and the documentation are FetchOptions' alone, and ``help()`` and
    ``inspect.signature()`` show its fields with their defaults."""

    concurrency: int
    per_host: int | None
    max_time: float
    connect_timeout: float
    retries: int
    retry_backoff: float
    follow_redirects: bool
    max_redirects: int
    method: str
    data: bytes | str | None
    user_agent: str | None
    headers: Mapping[str, str] | Sequence[tuple[str, str]]
    user: tuple[str, str] | None
    location_trusted: bool
    resolve: Sequence[str]
    dns_servers: str | Sequence[str] | None
    dns_timeout: float | None
    ip_version: int | None
    cafile: str | None
    insecure: bool
    cert: str | tuple[str, str] | None
    proxy: str | None
    noproxy: str | None
    proxy_cafile: str | None
    proxy_insecure: bool
    http2: bool
    http2_prior_knowledge: bool
    body_cap: int
    max_connecting: int
    keep_body: bool
    include_headers: bool
    output_dir: str | None
    byte_range: str | None
    continue_at: str | None
    warc: str | WarcWriter | None
    warc_max_size: int | None
    rate_per_host: float | None
    rate: float | None
    max_host_errors: int | None
    robots: str
    auto_throttle: bool
    limit_rate: int | None
    cookies: CookieJar | None
    relax_gc: bool
    trace: Tracer | None


def _count(name: str, value: object, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be a whole number, not {value!r}")
    if value < least:
        raise UsageError(f"{name} must be at least {least}, not {value}")


def _rate(name: str, value: object) -> None:
    if value is not None and not (
        isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf
    ):
        raise UsageError(f"{name} must be a positive number, not {value!r}")


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
    """Plain strings become items numbered from 1; items pass through.  What is
    neither (None, a number) is an input all the same: an ``invalid_url``
    record, as a JSONL line's is."""
    for n, url in enumerate(urls, 1):
        if isinstance(url, Item):
            yield url
        elif isinstance(url, str):
            yield Item(n, url, url.strip())
        else:
            yield not_a_url(n, url, "the input")


def fetch(
    urls: Iterable[str | Item],
    *,
    client: AsyncClient | None = None,
    options: FetchOptions | None = None,
    **given: Unpack[FetchKeywords],
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
    refuse_unknown("fetch()", given, _OPTION_NAMES)  # at the call, as Python's own
    return _records(urls, client, options, given)


async def _records(
    urls: Iterable[str | Item],
    client: AsyncClient | None,
    options: FetchOptions | None,
    given: Mapping[str, Any],
) -> AsyncGenerator[Record, None]:
    """``fetch``'s records: its arguments are checked when iteration starts."""
    check_urls(urls)
    opts = _chosen("fetch", options, given)
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
    client: AsyncClient, items: Iterator[Item], opts: FetchOptions, held: Summary | None = None
) -> AsyncGenerator[Record, None]:
    """Drive ``opts.concurrency`` workers over ``items`` with ``client``.

    ``held``: a summary told, when the run ends, what its pacing held back.

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
    made = RunState(opts)
    # The common case keeps nothing and paces nothing: no state to look at per input.
    state = made if made.needed else None
    source = iter(items)
    # inputs read ahead by a thread (stdin, a pipe): awaited, never waited for
    prefetched = source if isinstance(source, PrefetchedInputs) else None
    exhausted = False
    failure: list[BaseException] = []
    # Inputs read ahead of the slots, their names' lookups started (look_ahead):
    # a request then finds its answer ready, instead of every wave of a crawl
    # over many names waiting a DNS round trip in its slot.
    queued: deque[Item] = deque()
    depth = opts.concurrency
    look_ahead = client.look_ahead

    def read() -> Item | bool | None:
        """The source's next input, None at the end, or False: none read yet."""
        nonlocal exhausted
        if exhausted:
            return None
        try:
            return next(source)
        except NotReady:
            return False
        except StopIteration:
            exhausted = True
            return None
        except BaseException as e:  # a bad input file: stop feeding, report after the drain
            exhausted = True
            failure.append(e)
            return None

    def next_item() -> Item | bool | None:
        """The next input, None at the end, or False: none read yet (prefetched)."""
        item = queued.popleft() if queued else read()
        if isinstance(item, Item):
            while len(queued) < depth:
                more = read()
                if not isinstance(more, Item):
                    break
                queued.append(more)
                if more.problem is None:
                    look_ahead(more.url)
        return item

    async def worker() -> None:
        while (item := next_item()) is not None:
            if item is False:
                assert prefetched is not None
                await prefetched.ready()
                continue
            assert isinstance(item, Item)
            record = await fetch_one(client, item, opts, state)
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

    # A record is done only when every sink holds it: a WARC the run owns
    # (``warc=`` a path) has written the record's exchange out before the record
    # is yielded (a write per record); a WarcWriter of the caller's is the
    # caller's to flush first (surge fetch flushes it before each records write).
    hold = made.warc.flush if made.warc is not None and made.own_warc else None
    with relaxed_gc(opts.relax_gc):
        supervisor = asyncio.create_task(supervise())
        watcher = None if opts.trace is None else asyncio.create_task(watch_lag(opts.trace))
        try:
            while True:
                record = results.get_nowait() if results.qsize() else await results.get()
                if record is None:
                    break
                if hold is not None:
                    hold()
                yield record
            await supervisor  # re-raises a worker's unexpected exception
        finally:
            if watcher is not None:
                watcher.cancel()
            if not supervisor.done():
                supervisor.cancel()
                await asyncio.gather(supervisor, return_exceptions=True)
            if state is not None:
                state.close()
                if held is not None:
                    state.tell(held)
            if opts.cookies is not None:
                _keep_cookies(client, opts.cookies)
    if failure:
        raise failure[0]


def _keep_cookies(client: AsyncClient, jar: CookieJar) -> None:
    """``jar`` (the run's ``cookies``) as the client holds them at the run's end."""
    try:
        held = client.cookies
    except UsageError:  # a client of the caller's that keeps none
        return
    if held is jar:
        return
    kept = list(held)
    jar.clear()
    for cookie in kept:
        jar.set_cookie(cookie)


async def watch_lag(tracer: Tracer) -> None:
    """Tell the tracer how late the loop runs a timer: on a busy client every
    phase that ends with an event (a connect, a first byte) waits for the loop,
    and a trace that does not say so shows client CPU as network time."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LAG_EVERY
        await asyncio.sleep(LAG_EVERY)
        tracer.loop_lag(perf_counter(), max(0.0, loop.time() - due))


class RunState:
    """What a run keeps open besides its client: the body files, the WARC
    writer, the per-host pacer, the run's pacer (``--rate``), the hosts' error
    budget, the origins' robots.txt rules (each None unless its option is set)."""

    __slots__ = (
        "budget",
        "files",
        "limit_rate",
        "own_warc",
        "pacer",
        "robots",
        "run_pacer",
        "throttle",
        "warc",
    )

    def __init__(self, opts: FetchOptions) -> None:
        self.files: BodyFiles | None = None
        if opts.output_dir is not None:
            from surge.bulk.bodies import BodyFiles  # --output-dir only

            self.files = BodyFiles(opts.output_dir)
        self.pacer = HostPacer(opts.rate_per_host) if opts.rate_per_host is not None else None
        self.run_pacer = HostPacer(opts.rate) if opts.rate is not None else None
        self.limit_rate = opts.limit_rate
        self.robots: RobotsRules | None = None
        if opts.robots == "obey":
            from surge.bulk.robots import RobotsRules  # --robots obey only

            if self.pacer is None:  # a Crawl-delay spaces its host: a pacer without a rate
                self.pacer = HostPacer(None)
            self.robots = RobotsRules(
                opts.user_agent_sent, self.pacer, self.run_pacer, longest_delay=opts.max_time
            )
        self.throttle: AutoThrottle | None = None
        if opts.auto_throttle:
            from surge.bulk.throttle import AutoThrottle  # --auto-throttle only

            if self.pacer is None:  # its delay and Retry-After space the host: a pacer
                self.pacer = HostPacer(None)
            self.throttle = AutoThrottle(opts.per_host, self.pacer)
        self.budget: HostBudget | None = None
        if opts.max_host_errors is not None:
            from surge.bulk.hostbudget import HostBudget  # --max-host-errors only

            self.budget = HostBudget(opts.max_host_errors)
        self.own_warc = isinstance(opts.warc, str | os.PathLike)
        warc = opts.warc
        if isinstance(warc, str | os.PathLike):
            from surge.bulk.warc import WarcWriter  # --warc only

            # a file that cannot be written (or another run's) is a SinkError naming it
            warc = WarcWriter(warc, max_size=opts.warc_max_size)
        self.warc = warc
        if self.files is not None or warc is not None:
            from surge.bulk.bodies import return_large_buffers  # bodies kept: --output-dir, --warc

            return_large_buffers()

    @property
    def needed(self) -> bool:
        """Whether a request has anything here to look at (else the run passes None)."""
        return not (
            self.files is None
            and self.warc is None
            and self.pacer is None
            and self.run_pacer is None
            and self.budget is None
            and self.robots is None
            and self.throttle is None
            and self.limit_rate is None
        )

    def tell(self, summary: Summary) -> None:
        """What the pacers and the hosts' windows held back, into ``summary``."""
        if self.run_pacer is not None:
            summary.hold("--rate", self.run_pacer.waits, self.run_pacer.waited_s)
        if self.pacer is not None:
            summary.hold("per host", self.pacer.waits, self.pacer.waited_s)
        if self.throttle is not None:
            summary.hold("--auto-throttle", self.throttle.waits, self.throttle.waited_s)

    @property
    def keeps_bodies(self) -> bool:
        return self.files is not None or self.warc is not None

    def close(self) -> None:
        if self.warc is not None and self.own_warc:
            self.warc.close()


def _method(item: Item, opts: FetchOptions) -> str:
    """The method of one input's request: its JSONL line's, else the run's (a
    line's body without a method makes a GET run's request a POST, as -d)."""
    line = item.request
    if line is None:
        return opts.method
    if line.method is not None:
        return line.method
    if line.body is not None and opts.method == "GET":
        return "POST"
    return opts.method


def _request(client: AsyncClient, item: Item, opts: FetchOptions, state: RunState | None) -> Any:
    """The request of one input: the run's method and body, or its JSONL line's."""
    method, headers = _method(item, opts), None
    body = opts.data if not isinstance(opts.data, str) else opts.data.encode("utf-8")
    line = item.request
    if line is not None:
        headers = line.headers
        if line.body is not None:
            body = line.body
    if body is not None and (line is None or line.body is None):  # -d's body: its type
        own = headers or ()
        if not any(name.lower() == "content-type" for name, _ in own):
            headers = (*opts.data_headers, *own)
    if state is not None and (state.keeps_bodies or state.limit_rate is not None):
        from surge.bulk.bodies import fetch_kept  # a body streamed: kept, or read at a pace

        return fetch_kept(
            client,
            item.url,
            method,
            headers,
            body,
            opts.body_cap,
            state.files,
            state.warc,
            item.line,
            state.limit_rate,
            opts.max_time,
            opts.continue_at is not None,
        )
    return client.request(method, item.url, headers=headers, body=body, _discard=not opts.keep_body)


async def fetch_one(
    client: AsyncClient, item: Item, opts: FetchOptions, state: RunState | None = None
) -> Record:
    """One input to one record, with retries; never raises for a remote failure.

    The record handed out holds no secret (:func:`surge.trace.redact.safe_record`:
    no userinfo, no secret parameter's value, no cookie); the trace, which
    sanitises what it writes itself (and keeps what ``--har-with-secrets``
    asks for), is given it as it was.

    ``state``: what the run keeps open (body files, a WARC, the pacer); None
    for none of them."""
    attempts = 0
    retried = False
    start = perf_counter()
    short_until: float | None = None  # out of descriptors: wait for one until then
    extras: dict[str, Any] | None = None
    pacer = budget = run_pacer = robots = throttle = None
    ticket: Ticket | None = None  # a place in the host's window (--auto-throttle)
    origin: Origin | None = None
    gate: Callable[[], None] | None = None  # may it still be sent (--max-host-errors)
    last: RequestError | None = None  # the last try's error
    if state is not None:
        pacer, budget, run_pacer = state.pacer, state.budget, state.run_pacer
        robots, throttle = state.robots, state.throttle
        target = _target(item.url)
        if target is not None:
            origin = (target.scheme, target.host, target.port)
            if budget is not None:
                gate = partial(_not_over, budget, origin)
    host = origin[1] if origin is not None else None
    discard = not opts.keep_body
    while True:
        try:
            if item.problem is not None:  # a line past the input bound: nothing to send
                raise RequestError("invalid_url", item.problem)
            if attempts == 0:
                _not_over(budget, origin)  # at once; the client asks again as it sends
            if robots is not None and origin is not None and attempts == 0:
                refusal = await robots.refusal(client, origin, item.url)
                if refusal is not None:
                    raise RequestError("robots_disallowed", refusal)
            if throttle is not None and host is not None:
                ticket = await throttle.acquire(host)  # held to the try's end
            if pacer is not None and host is not None:
                await pacer.wait(host, 0.0 if ticket is None else ticket.delay)
            if run_pacer is not None:
                # after the host's slot: a slot of the run is never spent waiting
                await run_pacer.wait(RUN)
            if state is None and item.request is None and opts.data is None:
                # A record needs the body's size, not the body: it is counted
                # (and capped) as it comes, never held (100 bodies of 50 MB in
                # flight held 1.8 GB before) - unless keep_body wants it.
                response = await client.request(opts.method, item.url, _discard=discard)
            else:
                # Asked after every wait (these, the host's connection's): gate
                # is the one "may it still be sent?", at the last moment.
                token = may_send.set(gate)
                try:
                    outcome = await _request(client, item, opts, state)
                finally:
                    may_send.reset(token)
                if isinstance(outcome, tuple):
                    response, extras = outcome
                else:
                    response = outcome
        except LocalResourceError as e:
            if ticket is not None:
                ticket.end()
                ticket = None
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
            if ticket is not None:
                ticket.end(None, e.timings, e.error_class)
                ticket = None
            if e.error_class in SKIP_CLASSES:
                if last is not None:  # a retry not sent: the record keeps the last try's
                    e = last
            else:
                attempts += 1  # tries under --retries only (not hops, not a stale reuse)
                last = e
                if budget is not None and origin is not None:
                    _count_failure(budget, origin, e)
            if opts.retries and (policy := opts.retry_policy).error_worth_retrying(
                e.error_class, _method(item, opts)
            ):
                wait = policy.delay(attempts, time_left=opts.max_time)
                if _over(budget, origin):
                    wait = None  # not retried: its origin is over --max-host-errors
                if wait is not None:
                    await asyncio.sleep(wait)
                    retried = True  # (an origin gone over meanwhile: not sent, gate)
                    continue
            record = _record(
                item,
                start,
                attempts,
                e.status,
                e,
                e.final_url,
                e.bytes,
                e.timings,
                e.redirects,
                e.remote_ip,
                e.tls,
            )
            if opts.extras:
                _add_extras(record, opts, None, None)
            if opts.trace is not None:
                end = start + record["elapsed_ms"] / 1000
                opts.trace.add(record, start, end, e.timings, retried)
            return safe_record(record)
        except BaseException:  # cancelled: its place goes to the next
            if ticket is not None:
                ticket.end()
            raise
        attempts += 1
        if ticket is not None:
            ticket.end(response.status, response.timings)
            ticket = None
        if budget is not None and origin is not None:
            budget.answered(origin)
        if pacer is not None and host is not None and response.status in RETRY_AFTER_STATUSES:
            held = retry_after_seconds(response.header("retry-after"))
            if held is not None:
                pacer.hold(host, min(held, opts.max_time))
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
        conn = response.connection
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
            conn.address[0] if conn is not None and conn.address is not None else None,
            conn.tls_info() if conn is not None else None,
        )
        if opts.extras:
            _add_extras(record, opts, response, extras)
        if opts.trace is not None:
            end = start + record["elapsed_ms"] / 1000
            opts.trace.add(record, start, end, response.timings, retried)
        return safe_record(record)


def _add_extras(
    record: Record, opts: FetchOptions, response: Any, extras: dict[str, Any] | None
) -> None:
    """The optional fields (``FetchOptions.extras``), in their order; None where a
    failed request has none."""
    if opts.include_headers:
        record["headers"] = (
            None if response is None else [list(pair) for pair in response.headers.multi_items()]
        )
    if opts.output_dir is not None:
        record["body_path"] = extras.get("body_path") if extras else None
        record["body_sha256"] = extras.get("body_sha256") if extras else None
    if opts.continue_at is not None:
        record["continue_from"] = extras.get("continue_from") if extras else None
        record["continued"] = extras.get("continued") if extras else None
    if opts.keep_body:
        record["body"] = None if response is None or response._stream else response.text


def _over(budget: HostBudget | None, origin: Origin | None) -> bool:
    """Whether ``origin`` has gone over ``--max-host-errors``."""
    return budget is not None and origin is not None and budget.skipped(origin)


def _not_over(budget: HostBudget | None, origin: Origin | None) -> None:
    """Raise ``host_skipped`` if ``origin`` has gone over ``--max-host-errors``."""
    if _over(budget, origin):
        assert budget is not None and origin is not None
        raise RequestError("host_skipped", budget.detail(origin))


def _count_failure(budget: HostBudget, origin: Origin, error: RequestError) -> None:
    """A failure counts against the origin that failed: a redirect hop's own
    (its target's), while the input's origin, which answered with the
    redirect, is there (--max-host-errors: a response of any status resets)."""
    hop = _target(error.final_url) if error.redirects and error.final_url else None
    if hop is not None and (hop.scheme, hop.host, hop.port) != origin:
        budget.answered(origin)
        budget.failed((hop.scheme, hop.host, hop.port), error.error_class)
    else:
        budget.failed(origin, error.error_class)


def _target(url: str) -> URL | None:
    """The input's URL, parsed, for what is kept per host or origin (None: not a
    URL; its request will say so)."""
    try:
        return parse_url(url)
    except RequestError:
        return None


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
    remote_ip: str | None,
    tls: Any,
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
        "remote_ip": remote_ip,
        "tls": tls,
        "timings": phases,
    }


# -- the synchronous API ------------------------------------------------------------------


def fetch_all(
    urls: Iterable[str | Item],
    *,
    options: FetchOptions | None = None,
    **given: Unpack[FetchKeywords],
) -> Iterator[Record]:
    """``surge.fetch`` for synchronous code: a plain iterator of records.

    The engine runs on its own event loop in a background thread, so this works
    where a loop is already running (Jupyter, an async web framework's sync view).
    Records arrive as they complete; closing the iterator early stops the engine.
    It takes ``fetch``'s parameters but ``client``.  ``options``: a
    :class:`FetchOptions` made beforehand, in place of the options below (give
    one or the other).  A bad option value raises
    :class:`~surge.errors.UsageError` here, at the call.

    >>> import surge
    >>> urls = ["https://httpbin.org/get", "https://httpbin.org/redirect/2", "not a URL"]
    >>> records = surge.fetch_all(urls, concurrency=10, follow_redirects=True)
    >>> sorted((r["line"], r["status"], r["error"], r["redirects"]) for r in records)  # any order
    [(1, 200, None, 0), (2, 200, None, 2), (3, None, 'invalid_url', 0)]

    The options, as :class:`FetchOptions` documents them:
    """
    refuse_unknown("fetch_all()", given, _OPTION_NAMES)
    check_urls(urls)
    return _fetch_all(urls, _chosen("fetch_all", options, given))  # a bad option raises here


#: FetchOptions' fields: the keyword arguments of fetch() and fetch_all() besides
#: ``client`` and ``options`` (tests/bulk/test_api_params.py keeps them in step).
_OPTION_NAMES = frozenset(f.name for f in fields(FetchOptions))


def _chosen(api: str, options: FetchOptions | None, given: Mapping[str, Any]) -> FetchOptions:
    """The FetchOptions of a call: ``options``, or the options ``given`` one by
    one (the call's keywords but its own)."""
    if options is None:
        return FetchOptions(**given)
    if not isinstance(options, FetchOptions):
        raise TypeError(f"options must be a FetchOptions, not {type(options).__name__}")
    if given:  # both: one would silently lose
        raise TypeError(
            f"{api}() takes options= or the options one by one, not both "
            f"(options= and {', '.join(given)}): dataclasses.replace(options, ...) combines them"
        )
    return options


def _public(api: Any) -> None:
    """What ``help()``, ``inspect.signature()`` and ``typing.get_type_hints()``
    show of ``api``: FetchOptions' fields in place of ``**given``, each with its
    default and type, and the options' part of FetchOptions' docstring appended
    to ``api``'s: one text, so that help(surge.fetch) shows what each does."""
    table = [
        (f.name, f.default if f.default_factory is MISSING else f.default_factory(), f.type)
        for f in fields(FetchOptions)
    ]
    signature = api.__signature__ = spelt_out(api, table)
    api.__annotations__ = {
        **{p.name: p.annotation for p in signature.parameters.values()},
        "return": signature.return_annotation,
    }
    doc = FetchOptions.__doc__
    if api.__doc__ is None or doc is None:  # python -OO
        return
    options = doc[doc.index("\n\n    concurrency\n") :]
    api.__doc__ = api.__doc__.rstrip() + options


_public(fetch)
_public(fetch_all)


def _fetch_all(urls: Iterable[str | Item], opts: FetchOptions) -> Iterator[Record]:
    with closing(
        iterate_in_thread(lambda: fetch(urls, options=opts), name="surge-fetch", buffer=1024)
    ) as records:
        yield from records
