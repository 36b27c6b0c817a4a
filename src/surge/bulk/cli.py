"""``surge fetch``: the command line over :mod:`surge.bulk.engine`.

Flags take curl's names where curl has one (``-o``, ``-L``, ``--max-redirs``,
``-X``, ``-H``, ``--resolve``, ``--dns-servers``, ``-4``/``-6``, ``--cacert``,
``-k``, ``-E/--cert``, ``--key``, ``-x/--proxy``, ``--noproxy``, ``--proxy-cacert``,
``--proxy-insecure``, ``--connect-timeout``, ``--max-time``,
``--retry``-like ``--retries``).
Records go to stdout or ``-o``; progress and the summary go to stderr, progress
only on a terminal.

Exit status: 0 when the run completed (remote failures are data), 2 for a
usage error or an input that cannot be read or parsed (the message names the
file and line; records already written are kept), 130 when interrupted (143 for
SIGTERM; the records written so far are kept, and ``--resume`` carries on from them).

``--cluster ADDRESS`` (a Dask scheduler, or ``local:N``) runs the same job in
shards on a Dask cluster (:mod:`surge.bulk.cluster`); this process stays the
only writer, and everything above holds there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TextIO

import click

from surge.bulk.engine import FetchOptions, run
from surge.bulk.inputs import (
    InputItem,
    PrefetchedInputs,
    count_lines,
    read_inputs,
    reads_may_wait,
)
from surge.bulk.limits import fit_open_files, open_files_limit, raise_open_files_limit
from surge.bulk.outputs import (
    LineSet,
    RecordWriter,
    hold_output,
    open_writer,
    resumed_inputs,
)
from surge.bulk.pacing import parse_rate
from surge.bulk.summary import Summary
from surge.errors import LocalResourceError, UsageError
from surge.http.client import parse_header
from surge.http.headers import parse_user
from surge.loops import loop_descriptors, new_event_loop, require_descriptors
from surge.sinks import (
    claim,
    guard_standard_streams,
    names_stdin,
    open_replacement,
    protect_input,
    protect_stdin,
    read_capped,
)
from surge.terminal import ProgressLine, die, tell
from surge.trace.tracer import DEFAULT_ROWS, Tee, Tracer

if TYPE_CHECKING:  # loaded by the options that use them: --warc, --har, --trace
    from http.cookiejar import CookieJar

    from surge.bulk.warc import WarcWriter
    from surge.trace.har import HarWriter
    from surge.trace.recorder import TraceRecorder


class ByteSize(click.ParamType):  # type: ignore[type-arg]
    """A number of bytes, as curl's size options take one: ``100``, ``64K``,
    ``100M``, ``2G`` (suffixes of 1024)."""

    name = "bytes"
    _UNITS: ClassVar[dict[str, int]] = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        unit = text[-1:].upper() if text[-1:].isalpha() else ""
        number = text[: len(text) - len(unit)] if unit else text
        if unit not in self._UNITS or not number.isdigit():
            self.fail(f"{value!r} is not a size in bytes (such as 100, 64K, 100M, 2G)", param, ctx)
        return int(number) * self._UNITS[unit]


@click.command("fetch")
@click.argument("input_path", metavar="INPUT")
@click.option(
    "-o", "--output", "output", metavar="OUT", help="Write records here (default: stdout)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "csv"]),
    help="Record format (default: from OUT's extension, else jsonl).",
)
@click.option("-c", "--concurrency", default=1000, show_default=True, help="Requests in flight.")
@click.option("--per-host", type=int, help="Connections per host (default: no extra bound).")
@click.option(
    "--max-time",
    default=30.0,
    show_default=True,
    help="Seconds per try: from its DNS lookup (or a reused connection's checkout) to the "
    "last body byte, redirects included; not the wait for a free connection or handshake "
    "slot (-c, --per-host, --max-connecting), nor --retries' back-off.",
)
@click.option("--connect-timeout", default=10.0, show_default=True, help="Seconds for DNS+TCP+TLS.")
@click.option("--retries", default=0, show_default=True, help="Retries of transient failures.")
@click.option("-L", "--location", "follow", is_flag=True, help="Follow redirects.")
@click.option(
    "--location-trusted", is_flag=True, help="-L, sending credentials to other hosts too."
)
@click.option("-u", "--user", metavar="USER:PASSWORD", help="Basic auth, to each URL's own host.")
@click.option("--max-redirs", default=10, show_default=True, help="Redirects to follow at most.")
@click.option(
    "-X",
    "--request",
    "--method",
    "method",
    metavar="METHOD",
    help="GET (default; POST with -d), HEAD, POST, PUT, PATCH, DELETE, OPTIONS, ...",
)
@click.option(
    "-d",
    "--data",
    "data",
    multiple=True,
    metavar="DATA|@FILE",
    help="Send this body with every request (curl's -d: @FILE without its line ends; "
    "several join with &).",
)
@click.option(
    "--data-binary", multiple=True, metavar="DATA|@FILE", help="As -d, bytes as they are."
)
@click.option("-A", "--user-agent", metavar="NAME", help="User-Agent (default: surge/VERSION).")
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="'Name: value'",
    help="Send this header with every request (repeatable); it replaces surge's own of that "
    "name. Credentials in it go to each URL's own host only (see --location-trusted).",
)
@click.option(
    "-b",
    "--cookie",
    metavar="FILE|NAME=VALUE",
    help="Cookies: a Netscape/curl cookie file the run's requests share, or NAME=VALUE[; ...] "
    "sent to each URL's own host (as -H 'Cookie: ...').",
)
@click.option(
    "--cookie-jar",  # curl's -c is surge's --concurrency
    "cookie_jar",
    metavar="FILE",
    help="Write the run's cookies to FILE (Netscape/curl format) when it ends.",
)
@click.option("-i", "--include-headers", is_flag=True, help="Records carry the response headers.")
@click.option(
    "--output-dir",
    metavar="DIR",
    help="Save each body to DIR/HOST/SHA256-OF-URL; records gain body_path, body_sha256.",
)
@click.option(
    "-r",
    "--range",
    "byte_range",
    metavar="RANGE",
    help="Ask for these bytes of each body, as curl's -r: 0-499, 500-, -500, 0-1,5-9.",
)
@click.option(
    "-C",
    "--continue-at",
    "continue_at",
    metavar="-",
    help="With --output-dir: continue each partial body file from its size (Range: "
    "bytes=SIZE-); records gain continue_from, continued.",
)
@click.option("--warc", "warc_path", metavar="FILE.warc.gz", help="Write every exchange to a WARC.")
@click.option(
    "--warc-max-size",
    type=ByteSize(),
    metavar="BYTES",
    help="Start a new WARC file past this size (K, M, G suffixes).",
)
@click.option(
    "--rate-per-host", type=float, metavar="R", help="Requests a second at most to one host."
)
@click.option(
    "--rate",
    "rate",
    metavar="N/U",
    help="Requests at most N per U (s, m, h, d; h without /U, as curl) across the run, "
    "spaced evenly.",
)
@click.option(
    "--robots",
    type=click.Choice(["obey", "ignore"]),
    default="ignore",
    show_default=True,
    help="obey: each origin's robots.txt (fetched once) decides which inputs are sent "
    "(robots_disallowed records) and its Crawl-delay spaces the host.",
)
@click.option(
    "--auto-throttle",
    is_flag=True,
    help="Adapt each host's concurrency (up to --per-host, else 8) and delay to its latency "
    "and its 429/503 answers (AIMD).",
)
@click.option(
    "--limit-rate",
    type=ByteSize(),
    metavar="BYTES",
    help="Bytes a second at most per transfer, averaged (K, M, G suffixes), as curl's.",
)
@click.option(
    "--max-host-errors",
    type=int,
    metavar="N",
    help="After N connection-level failures in a row to one origin, its other inputs are "
    "host_skipped records, sent no request (default: off).",
)
@click.option(
    "--resolve", multiple=True, metavar="HOST:PORT:ADDR", help="HOST may be * or *.suffix."
)
@click.option(
    "--dns-servers",
    metavar="IP[:PORT],...",
    help="Ask these nameservers instead of the system's ([IPv6]:PORT for IPv6).",
)
@click.option(
    "--dns-timeout",
    type=float,
    help="Seconds per lookup once sent (default: 5, at most --connect-timeout).",
)
@click.option("-4", "--ipv4", is_flag=True, help="Resolve names to IPv4 addresses only.")
@click.option("-6", "--ipv6", is_flag=True, help="Resolve names to IPv6 addresses only.")
@click.option("--cacert", type=click.Path(dir_okay=False), help="CA certificates (PEM) to trust.")
@click.option("-k", "--insecure", is_flag=True, help="Do not verify TLS certificates.")
@click.option(
    "-E",
    "--cert",
    type=click.Path(dir_okay=False),
    help="Client certificate (PEM; with its key unless --key).",
)
@click.option("--key", type=click.Path(dir_okay=False), help="The --cert's private key (PEM).")
@click.option(
    "-x",
    "--proxy",
    metavar="[SCHEME://][USER:PASSWORD@]HOST[:PORT]",
    help="Go through this proxy: http, https, socks5 (names resolved here) or socks5h "
    "(by the proxy). Default: $http_proxy, $https_proxy, $all_proxy, as curl reads them.",
)
@click.option(
    "--noproxy",
    metavar="LIST",
    help="Hosts that go direct: names (and those under them), IPs, CIDR ranges, or *. "
    "Default: $no_proxy.",
)
@click.option(
    "--proxy-cacert",
    type=click.Path(dir_okay=False),
    help="CA certificates (PEM) to trust for an https:// proxy (default: as for origins).",
)
@click.option(
    "--proxy-insecure", is_flag=True, help="Do not verify an https:// proxy's certificate."
)
@click.option(
    "--http1.1",
    "http1_1",
    is_flag=True,
    help="HTTP/1.1 only: do not offer HTTP/2 (ALPN h2) over TLS.",
)
@click.option(
    "--http2-prior-knowledge",
    is_flag=True,
    help="Speak HTTP/2 in cleartext (h2c) to http:// URLs, without asking.",
)
@click.option("--template", help="Make URLs of bare domains, e.g. 'https://www.{}/'.")
@click.option("--column", help="CSV column (name or 1-based number) or JSONL field of the URL.")
@click.option(
    "--input-format", type=click.Choice(["text", "csv", "jsonl"]), help="Default: detected."
)
@click.option(
    "--max-filesize",
    type=ByteSize(),
    default="10M",
    show_default=True,
    help="Body cap, bytes (K, M, G suffixes: 1024s).",
)
@click.option(
    "--max-input-line",
    type=ByteSize(),
    default="64K",
    show_default=True,
    help="Longest input line (or CSV/JSONL record), bytes; a longer one is an invalid_url record.",
)
@click.option("--max-connecting", default=256, show_default=True, help="Handshakes in flight.")
@click.option(
    "--cluster",
    metavar="ADDRESS",
    help="Run on a Dask cluster: a scheduler (tcp://host:8786), or local:N worker processes.",
)
@click.option(
    "--shard-size",
    type=int,
    default=10_000,
    show_default=True,
    help="--cluster: inputs per task.",
)
@click.option("--resume", is_flag=True, help="Skip inputs already recorded in OUT; append.")
@click.option(
    "--trace",
    "trace_path",
    metavar="PAGE.html",
    help="Write a waterfall page: phases per request, requests in flight, time by phase.",
)
@click.option(
    "--trace-rows",
    default=DEFAULT_ROWS,
    show_default=True,
    help="Waterfall rows at most (a uniform sample beyond; the summary counts every request).",
)
@click.option("--har", "har_path", metavar="FILE.har", help="Write each request to a HAR 1.2 file.")
@click.option(
    "--har-with-secrets",
    is_flag=True,
    help="--har keeps cookies, Authorization and secret query values (sanitised by default).",
)
@click.option(
    "--fail-exit",
    is_flag=True,
    help="Exit 22 if any record has an error or a status >= 400 (default: 0, failures are data).",
)
@click.option("--no-progress", is_flag=True, help="No progress line, even on a terminal.")
@click.option("-q", "--quiet", is_flag=True, help="No summary or notices either: errors only.")
def fetch_command(
    input_path: str,
    output: str | None,
    fmt: str | None,
    concurrency: int,
    per_host: int | None,
    max_time: float,
    connect_timeout: float,
    retries: int,
    follow: bool,
    location_trusted: bool,
    user: str | None,
    max_redirs: int,
    method: str | None,
    data: tuple[str, ...],
    data_binary: tuple[str, ...],
    user_agent: str | None,
    headers: tuple[str, ...],
    cookie: str | None,
    cookie_jar: str | None,
    include_headers: bool,
    output_dir: str | None,
    byte_range: str | None,
    continue_at: str | None,
    warc_path: str | None,
    warc_max_size: int | None,
    rate_per_host: float | None,
    rate: str | None,
    limit_rate: int | None,
    max_host_errors: int | None,
    robots: str,
    auto_throttle: bool,
    resolve: tuple[str, ...],
    dns_servers: str | None,
    dns_timeout: float | None,
    ipv4: bool,
    ipv6: bool,
    cacert: str | None,
    insecure: bool,
    cert: str | None,
    key: str | None,
    proxy: str | None,
    noproxy: str | None,
    proxy_cacert: str | None,
    proxy_insecure: bool,
    http1_1: bool,
    http2_prior_knowledge: bool,
    template: str | None,
    column: str | None,
    input_format: str | None,
    max_filesize: int,
    max_input_line: int,
    max_connecting: int,
    cluster: str | None,
    shard_size: int,
    resume: bool,
    trace_path: str | None,
    trace_rows: int,
    har_path: str | None,
    har_with_secrets: bool,
    fail_exit: bool,
    no_progress: bool,
    quiet: bool,
) -> None:
    """Fetch every URL of INPUT (a file, or - for stdin): one record per input.

    INPUT holds one URL or domain per line, or is a CSV (such as a top-sites list
    'rank,domain') or JSONL with a 'url' field.
    """
    with contextlib.ExitStack() as resources:
        stop: _Stop | None = None
        if cluster is not None:
            # Installed before the cluster starts: a signal from here on stops the
            # job between shards, and the cluster is closed on the way out.
            stop = resources.enter_context(_stop_on_signals())
        try:
            opts = FetchOptions(
                concurrency=concurrency,
                per_host=per_host,
                max_time=max_time,
                connect_timeout=connect_timeout,
                retries=retries,
                follow_redirects=follow or location_trusted,  # as curl: it implies -L
                max_redirects=max_redirs,
                method=method or "GET",
                data=request_body(data, data_binary, input_path),
                user_agent=user_agent,
                include_headers=include_headers,
                output_dir=output_dir,
                byte_range=byte_range,
                continue_at=continue_at,
                warc_max_size=warc_max_size,
                rate_per_host=rate_per_host,
                rate=_rate(rate),
                limit_rate=limit_rate,
                max_host_errors=max_host_errors,
                robots=robots,
                auto_throttle=auto_throttle,
                headers=[parse_header(h) for h in headers] + _cookie_header(cookie),
                cookies=_cookie_jar(cookie, cookie_jar),
                user=parse_user(user) if user is not None else None,
                location_trusted=location_trusted,
                resolve=list(resolve),
                dns_servers=dns_servers,
                dns_timeout=dns_timeout,
                ip_version=_ip_version(ipv4, ipv6),
                cafile=cacert,
                insecure=insecure,
                cert=_client_cert(cert, key),
                proxy=proxy,
                noproxy=noproxy,
                proxy_cafile=proxy_cacert,
                proxy_insecure=proxy_insecure,
                http2=not http1_1,
                http2_prior_knowledge=http2_prior_knowledge,
                body_cap=max_filesize,
                max_connecting=max_connecting,
            )
            client = opts.client()  # validates --resolve and the headers now, not mid-run
            if cacert is not None or cert is not None:
                client.ssl_context  # noqa: B018 - loads --cacert, --cert now: exit 2
            if proxy_cacert is not None:
                client.proxy_ssl_context  # noqa: B018 - and --proxy-cacert
            fmt = fmt or ("csv" if output and output.lower().endswith(".csv") else "jsonl")
            if resume and not output:
                raise UsageError("--resume needs -o OUT (the file to resume)")
            if shard_size < 1:
                raise UsageError(f"--shard-size must be at least 1, not {shard_size}")
            if trace_rows < 1:
                raise UsageError(f"--trace-rows must be at least 1, not {trace_rows}")
            if max_input_line < 1:
                raise UsageError(f"--max-input-line must be at least 1, not {max_input_line}")
            if cluster is not None:
                from surge.bulk.cluster import refuse_on_a_cluster

                # --trace, --har and --warc are not in opts yet (nor ever, then)
                refuse_on_a_cluster(opts, trace=trace_path or har_path, warc=warc_path)
            _check_outputs(
                input_path,
                {
                    "-o": output,
                    "--warc": warc_path,
                    "--har": har_path,
                    "--trace": trace_path,
                    "--cookie-jar": cookie_jar,
                },
                warc_rotates=warc_max_size is not None,
                output_dir=output_dir,
            )
            if input_path != "-":
                # No output of the run - a body, a WARC's next part - may be it.
                protect_input(input_path)
            protect_stdin()  # nor the file on stdin (< st.txt), read or not
            read_cookies = None if _cookie_header(cookie) or cookie == cookie_jar else cookie
            files = (cacert, cert, key, proxy_cacert, read_cookies)
            for read in _files_read(data + data_binary, files):
                protect_input(read)  # nor a file the options read (-d @FILE, --cacert)
            if cluster is None:
                # Below what the loop and the files take, at once: one line, exit 2.
                raise_open_files_limit()
                needed = _descriptors_needed(
                    opts, input_path, (output, warc_path, har_path, trace_path), warc_path
                )
                require_descriptors(needed)
            # Every output is opened - locked, checked - before any of them
            # changes: one refused (another run's, not surge's records) leaves
            # all of them as they were.  The trace page and the HAR are written
            # beside their names and renamed at the end.
            jar_sink = None
            if cookie_jar is not None:  # written beside, renamed when the run ends
                jar_sink = open_replacement(cookie_jar)
                resources.callback(jar_sink.discard)
                resources.callback(claim(cookie_jar))  # no body may be it
            page = None
            if trace_path is not None:
                page = open_replacement(trace_path)
                resources.callback(page.discard)
                resources.callback(claim(trace_path))  # no body may be it
            warc: WarcWriter | None = None
            har = None
            if har_path is not None:
                from surge.trace.har import HarWriter  # --har only

                har = HarWriter(
                    har_path,
                    method=opts.method,
                    headers=opts.request_headers(),
                    keep_secrets=har_with_secrets,
                    trusted=location_trusted,
                    comment=RESUMED_NOTE if resume else "",
                )
                resources.callback(har.discard)  # (after close: nothing)
                resources.callback(claim(har_path))  # no body may be it
            held = hold_output(
                output,
                fmt,
                resume=resume,
                extras=opts.extras,
                input_lines=count_lines(input_path) if resume else None,
                held_elsewhere=_held_elsewhere(warc_path, output_dir) if resume else None,
            )
            resources.callback(held.close)  # undone if setup fails; the writer's after
            done = held.done if resume else None
            items = read_inputs(
                input_path,
                column=column,
                template=template,
                input_format=input_format,
                max_line=max_input_line,
            )
            skipped = 0
            if resume:
                # OUT's records must be of this input: read up to its last line
                # done, before anything changes (else one line, exit 2)
                assert output is not None
                skipped, items = resumed_inputs(items, held.seen, output, input_path)
            # The first input read before OUT changes: an input that cannot be
            # opened or parsed leaves an existing OUT as it was.
            first = next(items, None)
            if first is not None:
                items = itertools.chain((first,), items)
            dask_client = None
            if cluster is None:
                opts.concurrency = fit_concurrency(opts.concurrency, quiet)
            else:
                # Connected before OUT is opened: a wrong address leaves OUT alone.
                from surge.bulk.cluster import connect

                dask_client = resources.enter_context(connect(cluster))
            if warc_path is not None:
                opts.warc = warc = resources.enter_context(
                    _warc_writer(warc_path, warc_max_size, bool(resume), input_path)
                )
                if resume:
                    # exchanges whose records were lost with the run: done again
                    warc.cut_unrecorded(held.done)
            writer = open_writer(output, fmt, extras=opts.extras, held=held)
            if warc is not None:
                # A record is written only once the WARC holds its exchange:
                # every flush of the records flushes the WARC first.
                writer.before_flush = warc.flush
            recorder = _tracers(trace_path, trace_rows, har, opts, input_path, resume)
        except (UsageError, LocalResourceError) as e:
            _die(str(e))
        except KeyboardInterrupt:  # waiting for the first input (a pipe): nothing done yet
            tell("surge fetch: stopped by SIGINT before the first input")
            sys.exit(130)
        progress = Progress(input_path) if sys.stderr.isatty() and not no_progress else None
        summary = Summary()
        summary.skipped = skipped
        started = time.perf_counter()
        stopped_by: int | None = None
        failure: UsageError | LocalResourceError | None = None
        broken: Exception | None = None  # the cluster could not complete the job
        pending = _skip_done(items, done, summary)
        if dask_client is None and reads_may_wait(input_path):
            # stdin, a pipe, a FIFO: read ahead by a thread, so that waiting for
            # the next line holds neither the requests nor Ctrl-C
            pending = PrefetchedInputs(pending)
            resources.callback(pending.close)
        try:
            # A write that fails (a full disk) is one line and exit 2; the records
            # written before it stay, and --resume goes on after the last whole one.
            with _keep_first(writer) as first_failure:
                try:
                    if dask_client is None:
                        stopped_by = _run(opts, pending, writer, summary, progress)
                    else:
                        assert stop is not None
                        _run_on_cluster(
                            dask_client, opts, shard_size, pending, writer, summary, progress, stop
                        )
                        stopped_by = stop.signum
                except (UsageError, LocalResourceError) as e:
                    failure = e  # a bad input line, a write that failed, out of descriptors
                except Exception as e:
                    from surge.bulk.cluster import SchedulerLost, ShardFailed

                    if not isinstance(e, (ShardFailed, SchedulerLost)):
                        raise
                    broken = e
            failure = failure or first_failure.error
        finally:
            # Written whatever stopped the run: a trace of an interrupted run is still
            # a trace, and a HAR left without its closing brackets is not JSON.
            if har is not None:
                har.close()
            if jar_sink is not None and opts.cookies is not None:
                try:  # the cookies held when the run ended, whatever ended it
                    from surge.bulk.cookiefile import dump

                    jar_sink.write(dump(opts.cookies))
                    jar_sink.commit()
                except UsageError as e:
                    failure = failure or e
            if warc is not None:
                try:
                    warc.close()  # its last exchanges, or the failure to write them
                except UsageError as e:
                    failure = failure or e
            if recorder is not None and page is not None:
                from surge.trace.html import write_html  # --trace only

                if line := summary.held_line():  # within the rows' "queued" time
                    recorder.note = "; ".join(
                        filter(None, [recorder.note, f"queued includes the pacing's: {line}"])
                    )
                try:
                    write_html(recorder.data(), page)
                except UsageError as e:
                    failure = failure or e
        if progress is not None:
            progress.close()
        if not quiet:
            tell(summary.render(time.perf_counter() - started))
            if trace_path is not None:
                tell(f"  trace   {trace_path}")
            if har_path is not None:
                tell(f"  HAR     {har_path}")
        if har is not None and har.error is not None:
            failure = failure or har.error
        if failure is not None:
            _die(str(failure))
        if broken is not None:
            tell(f"surge fetch: {broken}; the records written are kept (--resume)")
            sys.exit(1)
        if stopped_by is not None:
            name = signal.Signals(stopped_by).name
            tell(f"surge fetch: stopped by {name}; the records written are kept (--resume)")
    if stopped_by is not None:  # after the cluster (if any) is closed
        sys.exit(128 + stopped_by)  # as a shell reports it: 130 for Ctrl-C, 143 for SIGTERM
    if fail_exit and (line := summary.failed_line()) is not None:
        # A completed run whose records say requests failed (curl --fail's 22):
        # said even under -q, since it is why the status is not 0.
        tell(f"surge fetch: {line}")
        sys.exit(FAILED_EXIT)


def _descriptors_needed(
    opts: FetchOptions, input_path: str, outputs: tuple[str | None, ...], warc: str | None
) -> int:
    """The descriptors a run cannot start without (beyond those open now): the
    loop's, one per file it writes or reads, and a request's (a socket, a
    second for Happy Eyeballs, its body file, the WARC's spool), plus one for
    what opens a file for a moment (a lazy import, /etc/hosts)."""
    files = sum(1 for path in outputs if path not in (None, "-")) + (input_path != "-")
    per_request = 2 + (opts.output_dir is not None) + (warc is not None)
    return loop_descriptors() + files + per_request + 1


class _WriteFailure:
    error: UsageError | None = None


@contextlib.contextmanager
def _keep_first(writer: RecordWriter) -> Iterator[_WriteFailure]:
    """``with writer`` whose closing flush may fail again after a failed write: the
    failure is kept (the first one), not raised from the exit."""
    failure = _WriteFailure()
    try:
        with writer:
            yield failure
    except UsageError as e:
        failure.error = e


def _check_outputs(
    input_path: str,
    outputs: dict[str, str | None],
    *,
    warc_rotates: bool = False,
    output_dir: str | None = None,
) -> None:
    """No output may be the input file (it would be emptied before it is read) -
    nor any name a rotating WARC will take (``w-00001.warc.gz``...) - nor two
    outputs one file (each would cut the other) - nor be, or be inside, the
    ``--output-dir`` (the bodies' names: a body could be it).  Checked before
    anything is created.  (What a name cannot tell - a body's file that is a
    hard link or a symlink to another output - the sinks refuse as the body
    is opened: :func:`surge.sinks.protect_input`, :func:`surge.sinks.claim`.)"""
    seen: list[tuple[str, str]] = []
    bodies = os.path.realpath(output_dir) if output_dir else None
    for flag, path in outputs.items():
        if not path or path == "-":
            continue
        if bodies is not None and _within(path, bodies):
            what = "records" if flag == "-o" else f"{flag} file"
            raise UsageError(
                f"{path}: is inside --output-dir {output_dir} (where the bodies go);"
                f" write the {what} elsewhere"
            )
        if input_path != "-" and _same_file(path, input_path):
            what = "records" if flag == "-o" else f"{flag} file"
            raise UsageError(f"{path}: is the input file; write the {what} elsewhere")
        if input_path != "-" and flag == "--warc" and warc_rotates:
            from surge.bulk.warc import rotation_index  # --warc's module: loaded when given

            index = rotation_index(path, input_path)
            if index is not None:
                raise UsageError(
                    f"{input_path}: is the input file, and part {index} of the --warc"
                    f" {path} rotation would overwrite it; write the WARC elsewhere"
                )
        for other_flag, other in seen:
            if _same_file(path, other):
                raise UsageError(f"{path}: given for both {other_flag} and {flag}")
        seen.append((flag, path))


def _within(path: str, folder: str) -> bool:
    """Whether ``path`` is the real directory ``folder`` or a name inside it
    (a device such as /dev/null is never refused)."""
    real = os.path.realpath(path)
    if real != folder and not real.startswith(folder.rstrip(os.sep) + os.sep):
        return False
    try:
        info = os.stat(real)
    except OSError:
        return True
    return stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)


def _same_file(one: str, other: str) -> bool:
    """Whether two paths name one regular file (or, missing, one path): a device
    such as /dev/null may take several outputs."""
    try:
        first, second = os.stat(one), os.stat(other)
    except OSError:
        return os.path.realpath(one) == os.path.realpath(other)
    return os.path.samestat(first, second) and stat.S_ISREG(first.st_mode)


#: The exit status of ``--fail-exit`` when a record failed: curl's for ``--fail``.
FAILED_EXIT = 22


#: What a HAR (its log comment) and a trace page written by --resume say.
RESUMED_NOTE = (
    "This run only (surge fetch --resume): the requests of the runs before it "
    "are in the records, not here."
)


def _tracers(
    trace_path: str | None,
    rows: int,
    har: HarWriter | None,
    opts: FetchOptions,
    input_path: str,
    resume: bool = False,
) -> TraceRecorder | None:
    """The --trace recorder; it and the --har writer hooked into ``opts``."""
    recorder = None
    if trace_path is not None:
        from surge.trace.recorder import TraceRecorder  # --trace only

        note = RESUMED_NOTE if resume else ""
        recorder = TraceRecorder(rows=rows, title=f"surge fetch {input_path}", note=note)
    tracers: list[Tracer] = [t for t in (recorder, har) if t is not None]
    if tracers:
        opts.trace = tracers[0] if len(tracers) == 1 else Tee(*tracers)
    return recorder


def _run(
    opts: FetchOptions,
    items: Iterator[InputItem],
    writer: RecordWriter,
    summary: Summary,
    progress: Progress | None,
) -> int | None:
    """Run the job on a fresh loop; return the signal that stopped it, if one did."""

    async def flush_now_and_then() -> None:
        # The writer flushes when records arrive; while the last slow hosts keep
        # the run waiting, this gets what is done onto disk.
        while True:
            await asyncio.sleep(0.5)
            writer.flush()

    async def main() -> None:
        flusher = asyncio.create_task(flush_now_and_then())
        try:
            async with (
                opts.client() as client,
                contextlib.aclosing(run(client, items, opts, summary)) as records,
            ):
                async for record in records:
                    writer.write(record)
                    summary.add(record)
                    if progress is not None:
                        progress.update(summary)
        finally:
            flusher.cancel()

    loop = new_event_loop()
    task = loop.create_task(main())
    stopped_by: int | None = None

    def stop(signum: int) -> None:
        # The loop takes the signal, rather than Python raising KeyboardInterrupt
        # wherever the main thread happens to be: uvloop runs protocol callbacks
        # from C, and an exception raised there is logged as a "fatal error on
        # transport" and swallowed, so an interrupted run went on to exit 0 (seen
        # in CI). Cancelling the task stops the engine between records instead.
        nonlocal stopped_by
        stopped_by = signum
        task.cancel()

    handled = []
    for signum in _STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, stop, signum)
            handled.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
            pass  # not the main thread, or no signals here: the default stays
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        if stopped_by is None:
            raise
    except KeyboardInterrupt:  # pragma: no cover - only where the signal is not ours
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        stopped_by = signal.SIGINT
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
        loop.close()
    return stopped_by


def _run_on_cluster(
    client: Any,
    opts: FetchOptions,
    shard_size: int,
    items: Iterator[InputItem],
    writer: RecordWriter,
    summary: Summary,
    progress: Progress | None,
    stop: _Stop,
) -> None:
    """Merge the cluster's shards into ``writer`` as they return, until done or stopped."""
    from surge.bulk.cluster import run_shards

    lowered = False
    shards = run_shards(client, items, opts, shard_size=shard_size, stop=stop, encode=writer.fmt)
    for shard in shards:
        # The worker formatted the records and counted them: nothing per record here.
        assert shard.encoded is not None and shard.summary is not None
        writer.write_encoded(shard.encoded)
        summary.merge(shard.summary)
        writer.flush()  # a shard at a time: on disk before the next one is awaited
        if progress is not None:
            progress.update(summary)
        if shard.concurrency < opts.concurrency and not lowered:
            lowered = True
            tell(
                f"surge fetch: worker {shard.worker} runs {shard.concurrency} requests at a "
                f"time, not {opts.concurrency}: its open-files limit is too low"
            )


class _Stop(threading.Event):
    """Set by SIGINT, SIGTERM or SIGHUP; ``signum`` says which came first."""

    signum: int | None = None


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[_Stop]:
    """SIGINT, SIGTERM and SIGHUP set the event instead of raising wherever the main thread is
    (half-way through a write, say); a second one kills at once, as the first would have."""
    stop = _Stop()

    def handle(signum: int, frame: object) -> None:
        if stop.is_set():
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        stop.signum = signum
        stop.set()

    previous = {signum: signal.signal(signum, handle) for signum in _STOP_SIGNALS}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


#: Ctrl-C, kill, and the terminal going away: each stops the run between
#: records, with what is done written (exit 128 + the signal's number).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _files_read(bodies: tuple[str, ...], files: tuple[str | None, ...]) -> Iterator[str]:
    """The files a run reads besides INPUT: ``-d @FILE``'s, ``--cacert``'s..."""
    for value in bodies:
        if value.startswith("@") and value != "@-":
            yield value[1:]
    yield from (name for name in files if name is not None)


def _held_elsewhere(
    warc_path: str | None, output_dir: str | None
) -> Callable[[Mapping[str, Any]], bool] | None:
    """For --resume: whether the run's other sinks still hold what a record
    says was done - the WARC has an exchange of its input line (a record with
    a response and no error class has one), the saved body is there.  None
    when there are no such sinks (or a WARC of a surge that named no lines)."""
    lines = None
    if warc_path is not None:
        from surge.bulk.warc import exchange_lines  # --warc only

        lines = exchange_lines(warc_path)
    if lines is None and output_dir is None:
        return None

    def held(record: Mapping[str, Any]) -> bool:
        answered = record.get("error") is None and record.get("status") is not None
        if lines is not None and answered and record["line"] not in lines:
            return False
        body = record.get("body_path")
        return output_dir is None or not isinstance(body, str) or os.path.isfile(body)

    return held


def _skip_done(
    items: Iterator[InputItem], done: LineSet | None, summary: Summary
) -> Iterator[InputItem]:
    if done is None:
        yield from items
        return
    for item in items:
        if item.line in done:
            summary.skipped += 1
        else:
            yield item


def fit_concurrency(wanted: int, quiet: bool = False) -> int:
    """Raise the open-files limit as far as it goes; if that still cannot hold
    ``wanted`` sockets, lower the concurrency and say so unless ``quiet`` (see
    surge.bulk.limits)."""
    fitted = fit_open_files(wanted)
    if fitted < wanted and not quiet:
        tell(
            f"surge fetch: the open-files limit is {open_files_limit()}; lowering concurrency "
            f"from {wanted} to {fitted} (raise it with 'ulimit -n')"
        )
    return fitted


#: The most ``-d @FILE``/``--data-binary @FILE`` reads: the body is held once
#: and sent with every request, so it is bounded, and a device such as
#: /dev/zero is refused after this much rather than read until memory runs out.
MAX_DATA = 64 * 1024 * 1024


def request_body(
    data: tuple[str, ...], binary: tuple[str, ...], input_path: str | None = None
) -> bytes | None:
    """The body of ``-d``/``--data-binary`` as curl makes it: each value as given,
    or ``@FILE``'s contents (``-d`` strips its carriage returns and newlines),
    several joined with ``&``; None without either.  A file is read up to
    :data:`MAX_DATA` bytes; ``@-`` reads stdin, which may not also be the input
    (``input_path`` ``-``, or another name of stdin's pipe)."""
    parts: list[bytes] = []
    for values, strip in ((data, True), (binary, False)):
        for value in values:
            if value.startswith("@"):
                name = value[1:]
                if input_path is not None and names_stdin(name) and names_stdin(input_path):
                    raise UsageError(
                        f"-d {value}: reads stdin, the input too; give the body from a file"
                    )
                content = read_capped(name, MAX_DATA, f"-d {value}")
                if strip:
                    content = content.replace(b"\r", b"").replace(b"\n", b"")
                parts.append(content)
            else:
                parts.append(value.encode("utf-8"))
    return b"&".join(parts) if parts else None


@contextlib.contextmanager
def _warc_writer(
    path: str, max_size: int | None, append: bool, input_path: str
) -> Iterator[WarcWriter]:
    """The --warc writer (appending under --resume), closed with the run."""
    from surge.bulk.warc import WarcWriter  # --warc only: ISA-L, the WARC writer

    # The command's name and a count of its arguments, never the arguments (-u,
    # -H 'Authorization: ...', a proxy's password): surge.trace.redact.
    from surge.trace.redact import command_label

    info = {"surge-command": command_label(["surge fetch", *sys.argv[2:]])}
    # a file that cannot be written, another run's, or not a WARC: a UsageError
    writer = WarcWriter(path, max_size=max_size, append=append, info=info)
    try:
        yield writer
    finally:
        writer.close()


def _rate(text: str | None) -> float | None:
    """--rate N/U as requests a second (a bad one: a usage error, exit 2)."""
    if text is None:
        return None
    try:
        return parse_rate(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _cookie_header(cookie: str | None) -> list[tuple[str, str]]:
    """-b NAME=VALUE[; ...]: a Cookie header (curl tells it from a file by its '=')."""
    if cookie is None or "=" not in cookie:
        return []
    return [parse_header(f"Cookie: {cookie}")]


def _cookie_jar(cookie: str | None, cookie_jar: str | None) -> CookieJar | None:
    """The jar the run shares: -b FILE's cookies, or an empty one for --cookie-jar
    alone (a -b FILE that does not exist yet and is the --cookie-jar: empty too,
    so that ``-b jar.txt --cookie-jar jar.txt`` starts a session)."""
    from_file = cookie is not None and "=" not in cookie
    if not from_file and cookie_jar is None:
        return None
    from surge.bulk.cookiefile import load  # -b FILE, --cookie-jar only

    if from_file:
        assert cookie is not None
        if not (cookie == cookie_jar and not os.path.exists(cookie)):
            return load(cookie)
    from http.cookiejar import CookieJar

    return CookieJar()


def _client_cert(cert: str | None, key: str | None) -> str | tuple[str, str] | None:
    if key is not None and cert is None:
        raise UsageError("--key needs --cert (the certificate it is the key of)")
    return cert if key is None or cert is None else (cert, key)


def _ip_version(ipv4: bool, ipv6: bool) -> int | None:
    if ipv4 and ipv6:
        raise UsageError("-4/--ipv4 and -6/--ipv6: give one or neither")
    return 4 if ipv4 else 6 if ipv6 else None


def _die(message: str) -> NoReturn:
    die("surge fetch", message)


class Progress(ProgressLine):
    """done/total, rate and errors, rewritten a few times a second."""

    def __init__(self, input_path: str, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self.total: int | None = None
        if input_path != "-" and os.path.isfile(input_path):
            threading.Thread(target=self._count_lines, args=(input_path,), daemon=True).start()

    def _count_lines(self, path: str) -> None:
        self.total = count_lines(path)

    def update(self, summary: Summary, *, force: bool = False) -> None:
        elapsed = self.due(force)
        if elapsed is None:
            return
        done = summary.records + summary.skipped
        total = f"/~{self.total:,}" if self.total else ""
        rate = summary.records / elapsed if elapsed > 0 else 0.0
        errors = sum(summary.errors.values())
        top = ", ".join(f"{e} {n:,}" for e, n in summary.errors.most_common(3))
        self.show(
            f"{done:,}{total} done  {rate:,.0f}/s  {errors:,} errors" + (f" ({top})" if top else "")
        )


def main(args: list[str] | None = None) -> Any:  # pragma: no cover - for python -m
    guard_standard_streams()  # as `surge fetch`: a closed 0, 1 or 2 gets /dev/null
    return fetch_command.main(args)
