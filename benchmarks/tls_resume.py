"""Reconnects to one host that closes after each response: TLS session resumption.

nginx (Debian's) on loopback with ``keepalive_timeout 0`` serves a 3-byte body
over TLS 1.3 (trustme's ECDSA P-256 certificate) and logs ``$ssl_session_reused``
for every request, so each request is a new TCP connection and a new handshake,
and the server says which resumed.  Each client runs in a child process of its
own and makes ``--requests`` (200) sequential GETs with one client object; the
child reports the CPU time (all threads: ``time.process_time``) of the loop of
requests alone, not the imports or the client's construction.

Clients: surge's ``Client`` (its SSLContext resumes), surge given a plain
``ssl.SSLContext`` (no resumption: the full-handshake cost), requests (one
``Session``: urllib3 does not resume), pycurl (one easy handle: libcurl keeps
the session), pyreqwest (``SyncClient``: rustls resumes), ``stdlib-floor``
(a blocking socket and the ssl module: the resumed handshake, the request and
the read to the close, nothing else - what any CPython client on OpenSSL
pays at the least); and surge with each
request to a host name of its own (``surge-distinct-hosts``: never resumes, so
it measures what the resumption code costs a full handshake).  ``--old-src DIR``
adds the same two surge runs with another checkout's ``src`` (the code before
a change) first on ``sys.path``, to compare full-handshake costs.

    python benchmarks/tls_resume.py [--requests 200] [--repeat 3] [--old-src ../main/src]

Prints a table (best of ``--repeat`` runs by CPU, interleaved) and writes
benchmarks/results/tls_resume.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine_info, write_json

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, ssl, sys, time
kind, url, cafile, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
hosts = iter(range(n + 1))
if kind == "surge-distinct-hosts":  # every request to a host of its own: no resumption
    port = url.split(":")[2].split("/")[0]
    names = [f"h{i}.bench.test" for i in range(n + 1)]
    fixed = url.replace("localhost", "{}")
    url = fixed.format(names[0])
if kind.startswith("surge-async"):  # AsyncClient on the child's own loop: no portal hop
    # (surge-async-stdlib-loop: on asyncio's own loop, not uvloop)
    import asyncio
    from surge.http import AsyncClient
    from surge.loops import new_event_loop
    loop = asyncio.new_event_loop() if kind == "surge-async-stdlib-loop" else new_event_loop()
    client = AsyncClient(cafile=cafile)
    async def fetch(u):
        return (await client.get(u)).content
    get = lambda u: loop.run_until_complete(fetch(u))
elif kind.startswith("surge"):
    from surge.http import Client
    options = {"cafile": cafile}
    if kind == "surge-plain-context":
        options = {"ssl_context": ssl.create_default_context(cafile=cafile)}
    if kind == "surge-distinct-hosts":
        options["resolve"] = [f"{name}:{port}:127.0.0.1" for name in names]
        get = lambda u: client.get(fixed.format(names[next(hosts)]) + u[len(url):]).content
    else:
        get = lambda u: client.get(u).content
    client = Client(**options)
elif kind == "requests":
    import requests
    session = requests.Session()  # verify= per request: an env CA bundle wins over Session.verify
    get = lambda u: session.get(u, verify=cafile).content
elif kind == "pycurl":
    import io, pycurl
    curl = pycurl.Curl()
    curl.setopt(pycurl.CAINFO, cafile)
    def get(u):
        buffer = io.BytesIO()
        curl.setopt(pycurl.URL, u)
        curl.setopt(pycurl.WRITEDATA, buffer)
        curl.perform()
        return buffer.getvalue()
elif kind == "stdlib-floor":
    # The least a CPython + OpenSSL client does per reconnect: a blocking socket,
    # the resumed handshake (one context, the last session offered), the request
    # and the read to the close; no HTTP parsing, no pool, no event loop.
    import socket
    from urllib.parse import urlsplit
    context = ssl.create_default_context(cafile=cafile)
    parts = urlsplit(url)
    session = None
    def get(u):
        global session
        target = urlsplit(u)
        with socket.create_connection((parts.hostname, parts.port)) as raw:
            with context.wrap_socket(raw, server_hostname=parts.hostname, session=session) as tls:
                tls.sendall(b"GET %s?%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                            % (target.path.encode(), target.query.encode(), parts.netloc.encode()))
                chunks = []
                while data := tls.recv(65536):
                    chunks.append(data)
                if not tls.session_reused:
                    session = tls.session
        return b"".join(chunks).partition(b"\r\n\r\n")[2]
elif kind == "pyreqwest":
    from pyreqwest.client import SyncClientBuilder
    with open(cafile, "rb") as ca:
        client = SyncClientBuilder().add_root_certificate_pem(ca.read()).build()
    get = lambda u: client.get(u).build().send().bytes()
get(url + "&warm=1")  # imports, lazy setup, the first (full) handshake: not measured
start = time.process_time()
for i in range(n):
    assert get(f"{url}&n={i}") == b"ok\n"
cpu = time.process_time() - start
print(json.dumps({"cpu_s": cpu}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_nginx(base: Path) -> tuple[subprocess.Popen[bytes], int, str, Path]:
    import trustme

    ca = trustme.CA()
    cafile = str(base / "ca.pem")
    ca.cert_pem.write_to_path(cafile)
    cert = str(base / "cert.pem")
    ca.issue_cert("localhost", "*.bench.test").private_key_and_cert_chain_pem.write_to_path(cert)
    for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (base / temp).mkdir()
    port = free_port()
    log = base / "access.log"
    (base / "nginx.conf").write_text(f"""
daemon off; master_process off; pid {base}/nginx.pid; error_log {base}/error.log warn;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {base}/body; proxy_temp_path {base}/proxy;
    fastcgi_temp_path {base}/fastcgi; uwsgi_temp_path {base}/uwsgi; scgi_temp_path {base}/scgi;
    log_format resumed '$ssl_session_reused $arg_m $arg_warm';
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_protocols TLSv1.3;
        ssl_certificate {cert}; ssl_certificate_key {cert};
        keepalive_timeout 0;
        access_log {log} resumed;
        location / {{ return 200 "ok\\n"; }}
    }}
}}
""")
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    process = subprocess.Popen([binary, "-c", str(base / "nginx.conf"), "-p", str(base)])
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise SystemExit("nginx did not start") from None
            time.sleep(0.05)
    return process, port, cafile, log


def resumed_share(log: Path, marker: str, n: int) -> float:
    deadline = time.monotonic() + 10
    while True:
        flags = [
            line.split()[0]
            for line in log.read_text().splitlines()
            if line.split()[1:2] == [marker] and len(line.split()) == 3 and line.split()[2] == "-"
        ]
        if len(flags) >= n or time.monotonic() > deadline:
            return sum(f == "r" for f in flags) / max(len(flags), 1)
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--old-src", help="another checkout's src/: surge before a change")
    args = parser.parse_args()
    info = machine_info(["surge", "requests", "pycurl", "pyreqwest", "uvloop"])
    kinds = ["surge", "surge-async", "surge-async-stdlib-loop", "surge-plain-context"]
    kinds += ["surge-distinct-hosts"]
    kinds += ["requests", "pycurl"]
    kinds += ["pyreqwest", "stdlib-floor"]
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        process, port, cafile, log = start_nginx(Path(tmp))
        labels = [(kind, kind, None) for kind in kinds]
        if args.old_src:
            old = str(Path(args.old_src).resolve())
            labels += [
                (f"old {k}", k, old)
                for k in ("surge", "surge-plain-context", "surge-distinct-hosts")
            ]
        try:
            for round_ in range(args.repeat):
                for label, kind, src in labels:
                    env = dict(os.environ)
                    if src is not None:
                        env["PYTHONPATH"] = src
                    marker = f"{label.replace(' ', '_')}-{round_}"
                    url = f"https://localhost:{port}/?m={marker}"
                    child = [sys.executable, "-c", CHILD, kind, url, cafile, str(args.requests)]
                    done = subprocess.run(child, capture_output=True, env=env, timeout=300)
                    if done.returncode != 0:
                        print(f"{label}: failed: {done.stderr.decode()[-300:]}", file=sys.stderr)
                        continue
                    result = json.loads(done.stdout.decode().splitlines()[-1])
                    result["resumed"] = resumed_share(log, marker, args.requests)
                    runs.setdefault(label, []).append(result)
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(
        f"{args.requests} reconnects to nginx (keepalive_timeout 0, TLS 1.3), best of {args.repeat}"
    )
    print(f"{'client':<28} {'CPU ms/reconnect: best':>23} {'median':>7} {'resumed':>8}")
    best = {}
    for label, results in runs.items():
        top = min(results, key=lambda r: r["cpu_s"])
        cpus = sorted(r["cpu_s"] for r in results)
        best[label] = {
            "cpu_ms_per_reconnect": top["cpu_s"] * 1000 / args.requests,
            "median_cpu_ms_per_reconnect": cpus[len(cpus) // 2] * 1000 / args.requests,
            "resumed": top["resumed"],
            "runs": results,
        }
        per, median = (
            best[label]["cpu_ms_per_reconnect"],
            best[label]["median_cpu_ms_per_reconnect"],
        )
        print(f"{label:<28} {per:>23.3f} {median:>7.3f} {top['resumed']:>7.1%}")
    write_json(
        HERE / "results" / "tls_resume.json",
        {"machine": info, "requests": args.requests, "repeat": args.repeat, "clients": best},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
