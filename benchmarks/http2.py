"""HTTP/2 against HTTP/1.1: 5,000 GETs to one HTTPS host, surge beside its peers.

nginx (Debian's 1.22, ``listen ... ssl http2``, TLS 1.3 with a trustme ECDSA
certificate, ``keepalive_requests 100000`` so that no client meets a GOAWAY
after nginx's default 1,000 requests) serves a 3-byte body, and logs
``$server_protocol`` and a marker per request, so the protocol each client
used is counted at the server.  Each client runs in a child process of its
own and makes ``--requests`` (5,000) GETs, 100 in flight:

* the Python clients (surge's ``AsyncClient`` over HTTP/2 and over HTTP/1.1,
  httpx's ``AsyncClient(http2=True)``, pyreqwest's ``Client`` with
  ``.http2(True)``), and the floor under them - a bare client of ~60 lines,
  ``h2`` driven by an ``asyncio.Protocol`` over the loop's TLS, one future a
  stream, nothing else - run 100 workers on one event loop (asyncio's: httpx
  runs on it) and report the wall and CPU time (``time.process_time``) of the
  requests alone, from the client's construction to its close: not the imports;
* the command lines (``surge fetch -c 100`` with and without ``--http1.1``,
  ``curl --parallel --parallel-max 100 --http2``) are whole processes (CPU from
  ``wait4``), less the same command with one URL in the same round: what the
  other 4,999 requests cost.

Sections (``--only``):

* ``main``: the table above.
* ``perhost``: the same with 6 connections per host at most (a browser's
  bound): HTTP/1.1 then has 6 connections, HTTP/2 multiplexes on one.
* ``rtt``: nginx in a network namespace behind a veth pair with netem's 10 ms
  on each end (20 ms RTT), the clients in the root namespace.
* ``big``: one ``--big-mb`` (1,024) MB body over HTTP/2 and over HTTP/1.1 by
  surge (``AsyncClient.stream``, the body counted, not kept), curl beside it.
* ``floor``: the ``h2`` package alone, client side: the state machine's work
  for ``--requests`` requests (headers sent, a response's HEADERS and DATA
  received, its data acknowledged), batches of 100, fed recorded server bytes;
  no TLS, no sockets, no event loop.
* ``loaded``: ``main`` with two CPU-bound processes beside it.

Rounds are interleaved (``--rounds`` 3); the table gives medians.

    python benchmarks/http2.py [--requests 5000] [--rounds 3] [--only main,perhost,...]

Writes benchmarks/results/http2.json (``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import (
    PROXY_VARIABLES,
    Table,
    Target,
    announce,
    machine_info,
    parse_sections,
    payload,
    print_targets,
    progress,
    run_child,
    stop_process,
    surge_command,
    write_json,
)

HERE = Path(__file__).resolve().parent
SECTIONS = ("main", "perhost", "rtt", "big", "floor", "loaded")
INFLIGHT = 100
NETNS = "surgeh2b"
NS_HOST, NS_PEER = "10.213.0.1", "10.213.0.2"

CHILD = r"""
import asyncio, json, sys, time
spec = json.loads(sys.argv[1])
kind, url, cafile = spec["kind"], spec["url"], spec["cafile"]
n, inflight, per_host = spec["n"], spec["inflight"], spec.get("per_host")
if kind.startswith("surge"):
    from surge.http import AsyncClient
elif kind == "httpx":
    import httpx
elif kind == "pyreqwest":
    from pyreqwest.client import ClientBuilder
elif kind.startswith("bare-h2"):
    import ssl
    from urllib.parse import urlsplit
    import h2.config, h2.connection, h2.events, h2.settings
    from hpack import NeverIndexedHeaderTuple

async def bare_h2_client(loop):
    # The least an HTTP/2 client on asyncio does: h2 driven by a Protocol over
    # the loop's TLS on one connection, the windows raised as surge raises them,
    # what h2 has to send written once per turn of the loop, each DATA
    # acknowledged, a future per stream. No pool, limits, timeouts, redirects,
    # decoding or validation of its own: the floor under surge's HTTP/2.
    parts = urlsplit(url)
    authority = parts.netloc.encode()
    context = ssl.create_default_context(cafile=cafile)
    context.set_alpn_protocols(["h2"])
    codes = h2.settings.SettingCodes
    class Bare(asyncio.Protocol):
        def __init__(self):
            # Its fields are constants, written as HTTP/2 wants them: no
            # outbound pass of h2's is needed (surge's own are off too).
            # -unchecked: nor what it receives (h2's inbound passes off too),
            # the floor under any client that checks a response's fields.
            checked = kind == "bare-h2"
            config = h2.config.H2Configuration(
                client_side=True, header_encoding=None,
                validate_outbound_headers=False, normalize_outbound_headers=False,
                validate_inbound_headers=checked, normalize_inbound_headers=checked)
            self.h2 = h2.connection.H2Connection(config)
            self.waiting, self.bodies, self.flushing = {}, {}, False
        def connection_made(self, transport):
            self.transport = transport
            self.h2.initiate_connection()
            self.h2.increment_flow_control_window(2**30)
            self.h2.update_settings({codes.INITIAL_WINDOW_SIZE: 2**24, codes.ENABLE_PUSH: 0})
            self.flush()
        def flush_soon(self):
            if not self.flushing:
                self.flushing = True
                loop.call_soon(self.flush)
        def flush(self):
            self.flushing = False
            data = self.h2.data_to_send()
            if data:
                self.transport.write(data)
        def data_received(self, data):
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    self.bodies[event.stream_id].append(event.data)
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.ResponseReceived):
                    assert dict(event.headers)[b":status"] == b"200", event.headers
                elif isinstance(event, h2.events.StreamEnded):
                    body = b"".join(self.bodies.pop(event.stream_id))
                    self.waiting.pop(event.stream_id).set_result(body)
            self.flush_soon()
        def connection_lost(self, exc):
            for future in self.waiting.values():
                future.set_exception(exc or ConnectionError("closed"))
    transport, bare = await loop.create_connection(
        Bare, parts.hostname, parts.port, ssl=context, server_hostname=parts.hostname)
    assert transport.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    async def get(u):
        target = urlsplit(u)
        path = f"{target.path or '/'}?{target.query}".encode()
        sid = bare.h2.get_next_available_stream_id()
        fields = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority),
                  NeverIndexedHeaderTuple(b":path", path), (b"user-agent", b"bare/0"),
                  (b"accept", b"*/*"), (b"accept-encoding", b"gzip, deflate, br, zstd")]
        bare.h2.send_headers(sid, fields, end_stream=True)
        future = bare.waiting[sid] = loop.create_future()
        bare.bodies[sid] = []
        bare.flush_soon()
        assert await future == b"ok\n"
        return "HTTP/2"
    async def close():
        bare.h2.close_connection()
        bare.flush()
        transport.close()
    return get, close

async def main():
    versions = {}
    if kind.startswith("surge"):
        options = {"cafile": cafile, "trust_env": False, "http2": kind == "surge-h2"}
        if per_host:
            options["per_host"] = per_host
        client = AsyncClient(**options)
        async def get(u):
            r = await client.get(u)
            assert r.content == b"ok\n", r.status
            return r.http_version
        close = client.aclose
    elif kind == "httpx":
        limits = httpx.Limits(max_connections=per_host or inflight)
        client = httpx.AsyncClient(http2=True, verify=cafile, trust_env=False, limits=limits)
        async def get(u):
            r = await client.get(u)
            assert r.content == b"ok\n", r.status_code
            return r.http_version
        close = client.aclose
    elif kind == "pyreqwest":
        with open(cafile, "rb") as ca:
            builder = ClientBuilder().add_root_certificate_pem(ca.read()).http2(True)
        if per_host:
            builder = builder.max_connections(per_host)
        client = builder.build()
        async def get(u):
            r = await client.get(u).build().send()
            assert bytes(await r.bytes()) == b"ok\n", r.status
            return r.version
        close = client.close
    elif kind.startswith("bare-h2"):
        get, close = await bare_h2_client(asyncio.get_running_loop())
    async def worker(first, count):
        for i in range(first, first + count):
            v = await get(f"{url}&i={i}")
            versions[v] = versions.get(v, 0) + 1
    shares = [n // inflight + (i < n % inflight) for i in range(inflight)]
    starts = [sum(shares[:i]) for i in range(inflight)]
    await asyncio.gather(*(worker(s, c) for s, c in zip(starts, shares)))
    await close()
    return versions

wall0, cpu0 = time.perf_counter(), time.process_time()
versions = asyncio.run(main())
print(json.dumps({"wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
                  "versions": versions}))
"""

FLOOR = r"""
import json, sys, time
import h2.config, h2.connection, h2.events
from hpack import NeverIndexedHeaderTuple
n, batch = int(sys.argv[1]), int(sys.argv[2])
# The request's fields as surge sends them, a path of its own each (as the clients' ``&i=``).
fields = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost:4443"),
          (b":path", b""), (b"user-agent", b"surge/0.1"), (b"accept", b"*/*"),
          (b"accept-encoding", b"gzip, deflate, br, zstd")]
paths = [b"/?m=main-surge-h2-0&i=%d" % i for i in range(n)]
def request(i):
    fields[3] = NeverIndexedHeaderTuple(b":path", paths[i])  # as surge sends it
    return fields
headers = request(0)
reply = [(b":status", b"200"), (b"server", b"nginx/1.22.1"),
         (b"date", b"Wed, 02 Dec 2026 15:00:00 GMT"),
         (b"content-type", b"text/plain"), (b"content-length", b"3")]
def client():
    config = h2.config.H2Configuration(client_side=True, header_encoding=None)
    c = h2.connection.H2Connection(config)
    c.initiate_connection()
    c.increment_flow_control_window(2**30)
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**24,
                       h2.settings.SettingCodes.ENABLE_PUSH: 0})
    return c
import h2.settings
# The server's bytes, recorded once, then replayed to a fresh client that is timed.
c = client()
s = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
s.initiate_connection()
s.receive_data(c.data_to_send())
recorded = [s.data_to_send()]
for first in range(0, n, batch):
    ids = []
    for i in range(first, min(first + batch, n)):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, request(i), end_stream=True)
        ids.append(sid)
    s.receive_data(c.data_to_send())
    for sid in ids:
        s.send_headers(sid, reply)
        s.send_data(sid, b"ok\n", end_stream=True)
    out = s.data_to_send()
    c.receive_data(out)
    recorded.append(out)
    s.receive_data(c.data_to_send())
    recorded[-1] += s.data_to_send()
cpu0 = time.process_time()
c = client()
c.data_to_send()
c.receive_data(recorded[0])
c.data_to_send()
got = 0
for k, first in enumerate(range(0, n, batch)):
    for i in range(first, min(first + batch, n)):
        c.send_headers(c.get_next_available_stream_id(), request(i), end_stream=True)
    c.data_to_send()
    for event in c.receive_data(recorded[k + 1]):
        if isinstance(event, h2.events.DataReceived):
            c.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            got += len(event.data)
    c.data_to_send()
cpu = time.process_time() - cpu0
assert got == 3 * n, got
# A large body: 256 MB as nginx sends it over HTTP/2 (DATA frames of its
# http2_chunk_size, 8 KB), read 256 KB at a time, each read acknowledged.
import hyperframe.frame
c = client()
s2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
s2.initiate_connection()
s2.receive_data(c.data_to_send())
c.receive_data(s2.data_to_send())
sid = c.get_next_available_stream_id()
c.send_headers(sid, headers, end_stream=True)
s2.receive_data(c.data_to_send())
s2.send_headers(sid, reply[:-1])
c.receive_data(s2.data_to_send())
c.data_to_send()
frame = hyperframe.frame.DataFrame(sid)
frame.data = bytes(8192)
read = frame.serialize() * 32
body_mb = 256
cpu0 = time.process_time()
for _ in range(body_mb * 4):
    for event in c.receive_data(read):
        if isinstance(event, h2.events.DataReceived):
            got += event.flow_controlled_length
    c.acknowledge_received_data(len(read) - 32 * 9, sid)
    c.data_to_send()
body_cpu = (time.process_time() - cpu0) * 1024 / body_mb
print(json.dumps({"cpu_s": cpu, "body_cpu_s_per_gb": body_cpu}))
"""

BIG = r"""
import asyncio, json, sys, time
spec = json.loads(sys.argv[1])
from surge.http import AsyncClient
async def main():
    client = AsyncClient(cafile=spec["cafile"], trust_env=False, http2=spec["kind"] == "surge-h2",
                         max_time=600)
    got = 0
    async with client.stream("GET", spec["url"]) as r:
        version = r.http_version
        async for chunk in r.aiter_raw():
            got += len(chunk)
    await client.aclose()
    return got, version
wall0, cpu0 = time.perf_counter(), time.process_time()
got, version = asyncio.run(main())
print(json.dumps({"wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
                  "bytes": got, "versions": {version: 1}}))
"""


RELAY = r"""
import asyncio, sys
port_file, host, port, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])

async def pump(loop, src, dst):
    queue = asyncio.Queue()
    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                dst.close()
                return
            dst.write(data)
            await dst.drain()
    sender = asyncio.ensure_future(send())
    while True:
        try:
            data = await src.read(262144)
        except OSError:
            data = b""
        queue.put_nowait((loop.time() + delay, data))
        if not data:
            break
    await sender

async def handle(reader, writer):
    loop = asyncio.get_running_loop()
    up_reader, up_writer = await asyncio.open_connection(host, port)
    await asyncio.gather(pump(loop, reader, up_writer), pump(loop, up_reader, writer),
                         return_exceptions=True)

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    with open(port_file, "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    await server.serve_forever()

try:
    import uvloop
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


@contextlib.contextmanager
def delay_relay(base: Path, host: str, port: int, delay_ms: float) -> Iterator[int]:
    """A TCP relay on 127.0.0.1 to ``host:port`` that holds every chunk
    ``delay_ms`` in each direction (so the RTT is twice it): netem's delay in
    user space, where the kernel has no netem (this machine's: no sch_netem,
    no modules to load)."""
    port_file = base / "relay.port"
    process = subprocess.Popen(
        [sys.executable, "-c", RELAY, str(port_file), host, str(port), str(delay_ms / 1000)]
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists() or not port_file.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the delay relay did not start")
            time.sleep(0.05)
        yield int(port_file.read_text())
    finally:
        stop_process(process)


# -- nginx, its certificate, the namespace --------------------------------------------


def nginx_config(base: Path, address: str, port: int, cert: str, big: Path | None) -> Path:
    for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (base / temp).mkdir(exist_ok=True)
    big_location = f"location = /big {{ alias {big}; }}" if big else ""
    config = base / "nginx.conf"
    config.write_text(f"""
daemon off; master_process off; pid {base}/nginx.pid; error_log {base}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {base}/body; proxy_temp_path {base}/proxy;
    fastcgi_temp_path {base}/fastcgi; uwsgi_temp_path {base}/uwsgi; scgi_temp_path {base}/scgi;
    log_format marked '$server_protocol $arg_m';
    keepalive_requests 100000;
    server {{
        listen {address}:{port} ssl http2;
        ssl_protocols TLSv1.3;
        ssl_certificate {cert}; ssl_certificate_key {cert};
        access_log {base}/access.log marked;
        location / {{ return 200 "ok\\n"; }}
        {big_location}
    }}
}}
""")
    return config


@contextlib.contextmanager
def nginx(
    base: Path, address: str, cert: str, big: Path | None = None, netns: str | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    base.mkdir(exist_ok=True)
    port = 18443 if netns else _free_port(address)
    config = nginx_config(base, address, port, cert, big)
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    command = [binary, "-c", str(config), "-p", str(base), "-e", str(base / "error.log")]
    if netns:
        command = ["ip", "netns", "exec", netns, *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        _wait_port(address, port, process)
        yield process, port
    finally:
        stop_process(process)


def _free_port(address: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _wait_port(address: str, port: int, process: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process)
                raise SystemExit(f"nginx did not start on {address}:{port}") from None
            time.sleep(0.05)


def certificates(base: Path) -> tuple[str, str]:
    import trustme

    ca = trustme.CA()
    cafile = str(base / "ca.pem")
    ca.cert_pem.write_to_path(cafile)
    cert = str(base / "cert.pem")
    issued = ca.issue_cert("localhost", "127.0.0.1", NS_PEER)
    issued.private_key_and_cert_chain_pem.write_to_path(cert)
    return cafile, cert


def _ip(*args: str) -> None:
    subprocess.run(args, check=True, timeout=30)


@contextlib.contextmanager
def namespace(delay_ms: float) -> Iterator[bool]:
    """nginx's side: a network namespace behind a veth pair, netem ``delay_ms`` on
    both ends (so the RTT is twice it); removed in the end whatever happened.
    Yields whether netem is there."""
    try:
        _ip("ip", "netns", "add", NETNS)
        _ip("ip", "link", "add", "h2b0", "type", "veth", "peer", "name", "h2b1")
        _ip("ip", "link", "set", "h2b1", "netns", NETNS)
        _ip("ip", "addr", "add", f"{NS_HOST}/24", "dev", "h2b0")
        _ip("ip", "link", "set", "h2b0", "up")
        inside = ("ip", "netns", "exec", NETNS)
        _ip(*inside, "ip", "addr", "add", f"{NS_PEER}/24", "dev", "h2b1")
        _ip(*inside, "ip", "link", "set", "h2b1", "up")
        _ip(*inside, "ip", "link", "set", "lo", "up")
        netem = ("root", "netem", "delay", f"{delay_ms}ms", "limit", "100000")
        try:
            _ip("tc", "qdisc", "add", "dev", "h2b0", *netem)
            _ip(*inside, "tc", "qdisc", "add", "dev", "h2b1", *netem)
        except subprocess.CalledProcessError:
            yield False  # no netem in this kernel: the caller adds the delay itself
        else:
            yield True
    finally:
        subprocess.run(["ip", "link", "del", "h2b0"], timeout=30, stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", NETNS], timeout=30, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def burners(count: int) -> Iterator[list[int]]:
    """``count`` CPU-bound processes beside the run, killed in the end."""
    started = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]
    try:
        yield [p.pid for p in started]
    finally:
        for process in started:
            process.kill()
            process.wait()


# -- the clients -------------------------------------------------------------------


def server_protocols(log: Path, marker: str, expected: int) -> dict[str, int]:
    """What nginx logged for ``marker``: requests per protocol."""
    deadline = time.monotonic() + 10
    while True:
        seen: Counter[str] = Counter()
        with open(log) as lines:
            for line in lines:
                protocol, _, mark = line.rstrip("\n").partition(" ")
                if mark == marker:
                    seen[protocol] += 1
        if sum(seen.values()) >= expected or time.monotonic() > deadline:
            return dict(seen)
        time.sleep(0.05)


class Bench:
    def __init__(self, base: Path, cafile: str, env: dict[str, str]) -> None:
        self.base, self.cafile, self.env = base, cafile, env
        self.count = 0

    def python_child(self, code: str, spec: dict[str, Any], limit_s: float = 600) -> dict[str, Any]:
        out = self.base / f"child-{self.count}.json"
        self.count += 1
        with open(out, "w") as sink:
            run, _ = run_child(
                [sys.executable, "-c", code, json.dumps(spec)],
                limit_s,
                stdout=sink.fileno(),
                env=self.env,
            )
        text = out.read_text().strip().splitlines()
        if not text:
            raise RuntimeError(f"{spec['kind']} failed (status {run.status})")
        result: dict[str, Any] = json.loads(text[-1])
        # pyreqwest 0.15 aborts now and then as the interpreter exits, after its
        # requests and their numbers ("PyGILState_Release: thread state ... must
        # be current"): the run counts, its exit status is kept.
        result["exit_status"] = run.status
        result["process_cpu_s"] = run.cpu_s
        result["process_wall_s"] = run.wall_s
        return result

    def command(self, argv: list[str], limit_s: float = 600) -> tuple[float, float]:
        run, _ = run_child(argv, limit_s, env=self.env)
        if run.status != 0:
            raise RuntimeError(f"{argv[0]} failed (status {run.status})")
        return run.wall_s, run.cpu_s

    def cli_argv(self, kind: str, urls: list[str], per_host: int | None) -> list[str]:
        tag = f"{self.count}"
        self.count += 1
        if kind == "curl-h2":
            config = self.base / f"curl-{tag}.txt"
            config.write_text("".join(f'url = "{u}"\noutput = /dev/null\n' for u in urls))
            return [
                "curl", "--silent", "--fail", "--http2", "--parallel",
                "--parallel-max", str(INFLIGHT), "--cacert", self.cafile, "--config", str(config),
            ]  # fmt: skip
        inputs = self.base / f"urls-{tag}.txt"
        inputs.write_text("".join(u + "\n" for u in urls))
        argv = [
            *surge_command(), "fetch", str(inputs), "-o", str(self.base / f"out-{tag}.jsonl"),
            "-q", "-c", str(INFLIGHT), "--cacert", self.cafile,
        ]  # fmt: skip
        if kind == "surge-fetch-h1":
            argv.append("--http1.1")
        if per_host:
            argv += ["--per-host", str(per_host)]
        return argv

    def cli(self, kind: str, url: str, n: int, per_host: int | None) -> dict[str, Any]:
        one = self.cli_argv(kind, [f"{url}-one&i=0"], per_host)
        full = self.cli_argv(kind, [f"{url}&i={i}" for i in range(n)], per_host)
        wall1, cpu1 = self.command(one)
        wall, cpu = self.command(full)
        return {
            "wall_s": wall - wall1,
            "cpu_s": cpu - cpu1,
            "process_wall_s": wall,
            "process_cpu_s": cpu,
            "one_url_wall_s": wall1,
            "one_url_cpu_s": cpu1,
            "per_request_of": n - 1,
        }


LIBRARY = ("surge-h2", "surge-h1", "httpx", "pyreqwest", "bare-h2", "bare-h2-unchecked")
COMMANDS = ("surge-fetch-h2", "surge-fetch-h1", "curl-h2")
LABELS = {
    "surge-h2": "surge AsyncClient, HTTP/2",
    "surge-h1": "surge AsyncClient, HTTP/1.1",
    "httpx": "httpx AsyncClient(http2=True)",
    "pyreqwest": "pyreqwest Client, http2(True)",
    "surge-fetch-h2": "surge fetch, HTTP/2",
    "surge-fetch-h1": "surge fetch --http1.1",
    "curl-h2": "curl --parallel --http2",
    "bare-h2": "h2 on asyncio's TLS, bare (floor)",
    "bare-h2-unchecked": "the same, received fields unchecked",
}


def run_case(
    bench: Bench,
    name: str,
    address: str,
    port: int,
    log: Path,
    kinds: tuple[str, ...],
    n: int,
    rounds: int,
    per_host: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    host = "localhost" if address == "127.0.0.1" else address
    for round_ in range(rounds):
        progress(f"{name}: round {round_ + 1}/{rounds}, load {os.getloadavg()[0]:.2f}")
        order = kinds if round_ % 2 == 0 else tuple(reversed(kinds))
        for kind in order:
            marker = f"{name}-{kind}-{round_}"
            url = f"https://{host}:{port}/?m={marker}"
            load = os.getloadavg()[0]
            try:
                if kind in COMMANDS:
                    result = bench.cli(kind, url, n, per_host)
                    requests = n - 1
                else:
                    spec = {
                        "kind": kind, "url": url, "cafile": bench.cafile,
                        "n": n, "inflight": INFLIGHT, "per_host": per_host,
                    }  # fmt: skip
                    result = bench.python_child(CHILD, spec)
                    requests = n
            except RuntimeError as e:
                print(f"  {name} {kind}: {e}", file=sys.stderr)
                continue
            result["load_before"] = load
            result["server"] = server_protocols(log, marker, n)
            result["cpu_us_per_request"] = result["cpu_s"] * 1e6 / requests
            runs[kind].append(result)
    return runs


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out = {}
    for kind, results in runs.items():
        if not results:
            continue
        out[kind] = {
            "wall_s": statistics.median(r["wall_s"] for r in results),
            "cpu_us_per_request": statistics.median(r["cpu_us_per_request"] for r in results),
            "process_cpu_s": statistics.median(r["process_cpu_s"] for r in results),
            "server": results[-1]["server"],
            "runs": results,
        }
    return out


def table(title: str, medians: dict[str, dict[str, Any]], n: int) -> Table:
    t = Table(
        title,
        ["client", "wall s", "req/s", "CPU us/req", "vs surge h2", "server saw"],
        notes=[
            "medians of the rounds; command lines: the run less one with 1 URL;",
            "Python clients: from the client's construction to its close, imports left out",
        ],
    )
    base = medians.get("surge-h2", {}).get("cpu_us_per_request")
    for kind, m in medians.items():
        ratio = f"{m['cpu_us_per_request'] / base:.2f}x" if base else "-"
        seen = ", ".join(f"{k} {v}" for k, v in sorted(m["server"].items()))
        t.add(
            LABELS[kind],
            f"{m['wall_s']:.2f}",
            f"{n / m['wall_s']:,.0f}",
            f"{m['cpu_us_per_request']:.0f}",
            ratio,
            seen,
        )
    return t


def judge(name: str, medians: dict[str, dict[str, Any]], floor_us: float | None) -> list[Target]:
    targets = []
    h2 = medians.get("surge-h2")
    if h2 is None:
        return targets
    cpu = h2["cpu_us_per_request"]
    floor = f"; h2 package's floor {floor_us:.0f} us" if floor_us else ""
    # (peer, what the target is, the factor of the peer's CPU/request allowed, its name)
    cpu_targets = [
        ("httpx", "<= 0.5x httpx h2", 0.5, f"httpx{floor}"),
        ("pyreqwest", "<= pyreqwest h2", 1.0, f"pyreqwest{floor}"),
        ("bare-h2", "within 10% of the bare h2 client (the floor)", 1.1, "the bare client"),
        ("bare-h2-unchecked", "within 10% of the bare client, unchecked", 1.1, "it"),
    ]
    for peer, what, factor, called in cpu_targets:
        if peer in medians:
            other = medians[peer]["cpu_us_per_request"]
            targets.append(
                Target(
                    f"{name}: CPU/request {what}",
                    f"<= {factor * other:.0f} us",
                    f"{cpu:.0f} us = {cpu / other:.2f}x {called}",
                    cpu <= factor * other,
                )
            )
    if "surge-h1" in medians:
        other = medians["surge-h1"]["wall_s"]
        targets.append(
            Target(
                f"{name}: wall <= surge HTTP/1.1",
                f"<= {other:.2f} s",
                f"{h2['wall_s']:.2f} s = {h2['wall_s'] / other:.2f}x",
                h2["wall_s"] <= other,
            )
        )
    return targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", help="only these clients, comma-separated: surge-h2,bare-h2")
    parser.add_argument("--only", help=f"sections, comma-separated: {', '.join(SECTIONS)}")
    parser.add_argument("--big-mb", type=int, default=1024)
    parser.add_argument("--delay-ms", type=float, default=10.0, help="netem delay per end")
    parser.add_argument("--out", default=str(HERE / "results" / "http2.json"))
    args = parser.parse_args()
    sections = parse_sections(parser, args.only, SECTIONS)
    started = time.perf_counter()
    info = machine_info(["surge", "h2", "httpx", "httpcore", "pyreqwest", "trustme"])
    info["nginx"] = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    info["curl"] = subprocess.run(["curl", "-V"], capture_output=True, text=True).stdout.split(
        "\n"
    )[0]
    announce("HTTP/2: 5,000 GETs to one HTTPS nginx", info, quick=False)
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    n, rounds = args.requests, args.rounds
    results: dict[str, Any] = {}
    targets: list[Target] = []
    floor_us = None
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cafile, cert = certificates(base)
        bench = Bench(base, cafile, env)
        if "floor" in sections:
            cpus, body_cpus = [], []
            for _ in range(rounds):
                done = subprocess.run(
                    [sys.executable, "-c", FLOOR, str(n), str(INFLIGHT)],
                    capture_output=True, timeout=300, env=env, check=True,
                )  # fmt: skip
                floor_run = json.loads(done.stdout)
                cpus.append(floor_run["cpu_s"])
                body_cpus.append(floor_run["body_cpu_s_per_gb"])
            floor_us = statistics.median(cpus) * 1e6 / n
            body_floor = statistics.median(body_cpus)
            results["floor"] = {"cpu_s": cpus, "cpu_us_per_request": floor_us,
                                "body_cpu_s_per_gb": body_cpus}  # fmt: skip
            print(f"floor: the h2 package alone, client side: {floor_us:.1f} us a request,")
            speed = 1024 / body_floor
            print(f"  {body_floor:.2f} s of CPU a GB of 8 KB DATA frames ({speed:.0f} MB/s)\n")
        local = [s for s in sections if s in ("main", "perhost", "loaded", "big")]
        if local:
            big = None
            if "big" in sections:
                big = base / "big.bin"
                with open(big, "wb") as f:
                    block = os.urandom(1 << 20)
                    for _ in range(args.big_mb):
                        f.write(block)
            with nginx(base / "local", "127.0.0.1", cert, big) as (process, port):
                log = base / "local" / "access.log"
                cases = [
                    ("main", LIBRARY + COMMANDS, None, 0),
                    ("perhost", ("surge-h2", "surge-h1", "httpx", "pyreqwest",
                                 "surge-fetch-h2", "surge-fetch-h1"), 6, 0),
                    ("loaded", (*LIBRARY, "curl-h2"), None, 2),
                ]  # fmt: skip
                for name, kinds, per_host, burn in cases:
                    if name not in sections:
                        continue
                    if args.clients:
                        kinds = tuple(k for k in kinds if k in args.clients.split(","))
                    cpu0 = _process_cpu(process.pid)
                    with burners(burn) as pids:
                        runs = run_case(bench, name, "127.0.0.1", port, log, kinds, n, rounds,
                                        per_host)  # fmt: skip
                    medians = summary(runs)
                    results[name] = {
                        "per_host": per_host,
                        "burners": len(pids),
                        "nginx_cpu_s": _process_cpu(process.pid) - cpu0,
                        "clients": medians,
                    }
                    title = {
                        "main": f"{n:,} GETs, {INFLIGHT} in flight, one HTTPS host (loopback)",
                        "perhost": f"{n:,} GETs, {INFLIGHT} in flight, 6 connections per host",
                        "loaded": f"{n:,} GETs, {INFLIGHT} in flight, 2 CPU burners beside",
                    }[name]
                    table(title, medians, n).print()
                    targets += judge(name, medians, floor_us)
                if "big" in sections:
                    results["big"] = big_case(bench, port, log, args.big_mb, rounds)
                    targets += results["big"].pop("targets")
        if "rtt" in sections:
            with (
                namespace(args.delay_ms) as netem,
                nginx(base / "netns", NS_PEER, cert, netns=NETNS) as (process, port),
                contextlib.ExitStack() as stack,
            ):
                address = NS_PEER
                if not netem:
                    port = stack.enter_context(delay_relay(base, NS_PEER, port, args.delay_ms))
                    address = "127.0.0.1"
                log = base / "netns" / "access.log"
                kinds = ("surge-h2", "surge-h1", "httpx", "pyreqwest", "curl-h2")
                runs = run_case(bench, "rtt", address, port, log, kinds, n, rounds)
                runs6 = run_case(bench, "rtt6", address, port, log, ("surge-h2", "surge-h1"),
                                 n, rounds, 6)  # fmt: skip
            medians = summary(runs)
            medians6 = summary(runs6)
            how = "netem" if netem else "a delaying TCP relay (no netem in this kernel)"
            results["rtt"] = {"delay_ms_each_way": args.delay_ms, "delay_by": how,
                              "clients": medians, "per_host_6": medians6}  # fmt: skip
            rtt = 2 * args.delay_ms
            table(f"{n:,} GETs, {INFLIGHT} in flight, {rtt:g} ms RTT ({how})", medians, n).print()
            table(f"{n:,} GETs, {rtt:g} ms RTT, 6 connections per host", medians6, n).print()
            targets += judge("rtt", medians, floor_us)
            targets += judge("rtt per-host 6", medians6, floor_us)
    print_targets(targets, quick=False)
    settings = {"requests": n, "rounds": rounds, "inflight": INFLIGHT, "sections": sections,
                "big_mb": args.big_mb}  # fmt: skip
    write_json(args.out, payload("http2", info, settings, results, targets, started,
                                 command=sys.argv))  # fmt: skip
    return 0


def _process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def big_case(bench: Bench, port: int, log: Path, mb: int, rounds: int) -> dict[str, Any]:
    url = f"https://localhost:{port}/big?m=big"
    runs: dict[str, list[dict[str, Any]]] = {"surge-h2": [], "surge-h1": [], "curl-h2": [],
                                             "curl-h1": []}  # fmt: skip
    size = mb << 20
    for round_ in range(rounds):
        progress(f"big: round {round_ + 1}/{rounds}, load {os.getloadavg()[0]:.2f}")
        for kind in runs:
            if kind.startswith("surge"):
                spec = {"kind": kind, "url": url, "cafile": bench.cafile}
                result = bench.python_child(BIG, spec)
            else:
                flag = "--http2" if kind == "curl-h2" else "--http1.1"
                argv = ["curl", "--silent", "--fail", flag, "--cacert", bench.cafile, "-o",
                        "/dev/null", "-w", "%{size_download} %{http_version}", url]  # fmt: skip
                t0 = time.perf_counter()
                done = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                                      env=bench.env, check=True)  # fmt: skip
                got, version = done.stdout.split()
                result = {"wall_s": time.perf_counter() - t0, "bytes": int(got),
                          "versions": {version: 1}}  # fmt: skip
            assert result["bytes"] == size, result
            result["mb_per_s"] = size / result["wall_s"] / 1e6
            runs[kind].append(result)
    medians = {k: statistics.median(r["mb_per_s"] for r in v) for k, v in runs.items()}
    t = Table(
        f"one {mb:,} MB body, TLS 1.3 (loopback)",
        ["client", "MB/s", "wall s", "CPU s"],
        notes=["medians of the rounds; surge: AsyncClient.stream, the body counted"],
    )
    for kind, values in runs.items():
        cpu = [r["cpu_s"] for r in values if "cpu_s" in r]
        t.add(
            kind,
            f"{medians[kind]:.0f}",
            f"{statistics.median(r['wall_s'] for r in values):.2f}",
            f"{statistics.median(cpu):.2f}" if cpu else "-",
        )
    t.print()
    ratio = medians["surge-h2"] / medians["surge-h1"]
    target = Target(
        "big: HTTP/2 throughput within 10% of HTTP/1.1",
        ">= 0.90x",
        f"{medians['surge-h2']:.0f} MB/s against {medians['surge-h1']:.0f} = {ratio:.2f}x",
        ratio >= 0.9,
    )
    return {"mb": mb, "mb_per_s": medians, "runs": runs, "targets": [target]}


if __name__ == "__main__":
    raise SystemExit(main())
