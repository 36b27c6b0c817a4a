"""``surge sim``: run the simulated web in the foreground.

Prints one line of JSON -- ``host``, ``http_port``, ``https_port``, ``cafile``,
``seed``, ``pid``, ``dns_port``, ``dns_servers`` -- once every port listens (and
after ``--write-hosts`` has written its file), then serves until SIGINT or
SIGTERM.  The same command is ``python -m surge.sim``.

Beside the web it runs a DNS server (surge.sim.dns, UDP and TCP on
``--dns-port``) answering every ``*.sim`` name with 127.0.0.1, so that a client
can reach the hosts through a real resolver rather than an override:
``surge fetch --dns-servers 127.0.0.1:PORT`` (``dns_servers`` of the JSON line;
on a terminal, stderr says it too).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys

import click

from surge.sim.behaviour import hosts
from surge.sim.dns import DNSServer, web_zone
from surge.sim.runner import loop_factory
from surge.sim.server import SimInfo, serve


def _write_hosts(path: str, info: SimInfo, count: int, tls: bool) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for name in hosts(count, info.seed):
            out.write(info.url(name, tls=tls) + "\n")


async def _serve_until_signalled(
    port: int,
    tls_port: int,
    seed: int,
    cafile: str | None,
    hosts_file: str | None,
    host_count: int,
    tls: bool,
    warm_tls: int,
    dns_port: int,
) -> None:
    try:
        server = await serve(
            port=port, tls_port=tls_port, seed=seed, cafile=cafile, warm_tls=warm_tls
        )
    except OSError as error:
        raise click.ClickException(f"cannot listen on 127.0.0.1: {error.strerror}") from error
    # No per-name counts: a long crawl against it would grow them without end.
    dns = DNSServer(web_zone(server.info.host), server.info.host, dns_port, count_names=False)
    try:
        try:
            await dns.start()
        except OSError as error:
            raise click.ClickException(
                f"cannot listen for DNS on 127.0.0.1: {error.strerror or error}"
            ) from error
        info = dataclasses.replace(server.info, dns_port=dns.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        if hosts_file is not None:
            _write_hosts(hosts_file, info, host_count, tls)
        sys.stdout.write(json.dumps(info.to_json()) + "\n")
        sys.stdout.flush()
        if sys.stdout.isatty():  # a person, not a program reading the JSON line
            sys.stderr.write(
                f"surge sim: *.sim resolves through the DNS server on {info.dns_servers}:"
                f" surge fetch --dns-servers {info.dns_servers}"
                f" (or --resolve '*.sim:*:{info.host}')\n"
            )
        await stop.wait()
    finally:
        await dns.close()
        await server.close()


#: The host grammar, for --help (the full one: surge.sim.behaviour's docstring).
GRAMMAR = """\b
Each *.sim host behaves as its name says; parts combine with '.' or '--'
(delay-200.status-404.sim = delay-200--status-404.sim), other names answer 200:
  status-<code>     final status (200-599)
  delay-<ms>        wait before every response (redirect hops included)
  redirect-<n>      n redirects (301 odd, 302 even), then the other parts
  redirect-loop     redirect to itself forever
  gzip, chunked     encodings (gzip only when Accept-Encoding allows it)
  big-<n>[k|m]      body size; slowbody-<ms>: the body trickles out over ms
  hang, hang-body   never answer / stall after half a body
  reset, close      TCP RST / FIN after the request; garbage: not HTTP
  badcert           over TLS, a certificate from an untrusted CA
  site<N>           a generic host: a realistic mix drawn from N and --seed
                    (85% 200, 5% 404/500, 4% redirects, 3% hangs, 2% resets
                    or closes, 1% garbage; latency median 70 ms, 5% 1-3 s)

\b
Point a client at it: surge fetch --dns-servers 127.0.0.1:DNS_PORT (its DNS
server, printed at start), or --resolve '*.sim:*:127.0.0.1' (curl's flags), or
surge.sim.patch_getaddrinfo() in-process for requests, aiohttp, httpx.
"""


@click.command("sim", epilog=GRAMMAR)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Plain HTTP port on 127.0.0.1 (0: any free port).",
)
@click.option(
    "--tls-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="HTTPS port on 127.0.0.1 (0: any free port).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the generic hosts' behaviours (site<N>.sim).",
)
@click.option(
    "--cafile",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the CA certificate here (default: a temporary file, removed at exit).",
)
@click.option(
    "--write-hosts",
    "hosts_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the URLs of the first --hosts generic hosts to this file, one a line.",
)
@click.option(
    "--hosts",
    "host_count",
    type=click.IntRange(min=0),
    default=None,
    help="How many URLs --write-hosts writes.",
)
@click.option(
    "--tls",
    is_flag=True,
    help="--write-hosts writes https:// URLs (and their certificates are issued up front).",
)
@click.option(
    "--dns-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="DNS port (UDP and TCP) on 127.0.0.1 answering *.sim (0: any free port).",
)
@click.option(
    "--warm-tls",
    type=click.IntRange(min=0),
    default=0,
    help="Issue the certificates of the first N generic sites before listening.",
)
def sim_command(
    port: int,
    tls_port: int,
    seed: int,
    cafile: str | None,
    hosts_file: str | None,
    host_count: int | None,
    tls: bool,
    warm_tls: int,
    dns_port: int,
) -> None:
    """Run the simulated web (*.sim hosts) on 127.0.0.1 until interrupted."""
    if (hosts_file is None) != (host_count is None):
        raise click.UsageError("--write-hosts and --hosts go together")
    if tls and host_count:
        warm_tls = max(warm_tls, host_count)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(
            _serve_until_signalled(
                port, tls_port, seed, cafile, hosts_file, host_count or 0, tls, warm_tls, dns_port
            )
        )
