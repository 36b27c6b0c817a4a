"""What the environment problems ``surge doctor`` names cost, and what it says about each.

Run it from the repository root::

    python benchmarks/doctor.py              # ~15 s
    python benchmarks/doctor.py --hosts 40 --delay-ms 200

The write-up behind issue #6: a grequests job whose HTTPS requests ran one after
another, because pyOpenSSL had been injected into urllib3 and gevent's patching
(grequests calls ``patch_all(thread=False, select=False)``) left ``select``
blocking.  Here grequests fetches ``--hosts`` HTTPS hosts of the simulated web,
each answering after ``--delay-ms``, all at once, in a fresh interpreter per
environment (gevent patches a whole process):

``grequests``                      as installed: socket and ssl patched, select not
``grequests + pyOpenSSL``          ``urllib3.contrib.pyopenssl.inject_into_urllib3()``
``patch_all() first + pyOpenSSL``  ``gevent.monkey.patch_all()`` before grequests
``requests, then patch_all()``     requests imported before gevent patched (late)

Each child then calls ``surge.doctor.run_checks()`` on itself: the statuses in the
table are what the doctor says about the live process.  The lower bound of a run
is one delay.

Then ``pymysql-ssl-per-connect``: ``--connects`` PyMySQL connects (login, no query)
to a throwaway MariaDB on loopback that offers TLS (``surge.testing``; skipped
when MariaDB is not installed), with no TLS options (PyMySQL's "preferred" TLS:
a new SSLContext and the system CA store loaded per connect), with one shared
``ssl=context`` (the same unverified TLS, what ``surge.db`` does), and with
``ssl_disabled=True``; the median connect of each, and the doctor's verdict on
three connections of that kind held open.  Results go to
``benchmarks/results/doctor.json``.
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import Table, machine_info, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "doctor.json"

GEVENT_CHECKS = ["pyopenssl-injected", "gevent-late-patch", "gevent-partial-patch"]

ENVIRONMENTS = {
    "grequests": "import grequests",
    "grequests + pyOpenSSL": "import grequests\n{inject}",
    "patch_all() first + pyOpenSSL": (
        "from gevent import monkey; monkey.patch_all()\nimport grequests\n{inject}"
    ),
    "requests, then patch_all()": (
        "import requests\nfrom gevent import monkey; monkey.patch_all()\nimport grequests"
    ),
}

INJECT = "import urllib3.contrib.pyopenssl; urllib3.contrib.pyopenssl.inject_into_urllib3()"

CHILD = """
import json, sys, time
{setup}
import surge.doctor
from surge.sim import patch_getaddrinfo

patch_getaddrinfo()
port, cafile, hosts, delay_ms = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
urls = [f"https://delay-{{delay_ms}}--x{{i}}.sim:{{port}}/" for i in range(hosts)]
errors = []
started = time.perf_counter()
responses = grequests.map(
    [grequests.get(url, verify=cafile, timeout=60) for url in urls],
    size=hosts,
    exception_handler=lambda request, error: errors.append(type(error).__name__),
)
wall = time.perf_counter() - started
findings = surge.doctor.run_checks(only={checks!r})
print(json.dumps({{
    "wall_s": wall,
    "answered": sum(r is not None and r.status_code == 200 for r in responses),
    "errors": sorted(set(errors)),
    "doctor": {{f.id: f.status for f in findings}},
}}))
"""


def run_environment(setup: str, port: int, cafile: str, hosts: int, delay_ms: int) -> Any:
    code = CHILD.format(setup=setup.format(inject=INJECT), checks=GEVENT_CHECKS)
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, str(port), cafile, str(hosts), str(delay_ms)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def pymysql_connects(connects: int) -> dict[str, Any] | None:
    """Median seconds per PyMySQL connect in each TLS setup, and the doctor's verdict."""
    import pymysql

    import surge.doctor
    from surge.testing import ServerNotInstalled, mariadb

    shared = ssl.create_default_context()  # "preferred": encrypt, verify nothing
    shared.check_hostname = False
    shared.verify_mode = ssl.CERT_NONE
    setups: dict[str, dict[str, Any]] = {
        "no TLS options (PyMySQL default)": {},
        "ssl=<one shared SSLContext>": {"ssl": shared},
        "ssl_disabled=True": {"ssl_disabled": True},
    }
    try:
        with mariadb(tls=True) as server:
            login = {
                "host": server.host,
                "port": server.port,
                "user": server.user,
                "password": server.password,
                "database": server.database,
            }
            results = {}
            for name, options in setups.items():
                pymysql.connect(**login, **options).close()  # warm: the server's caches
                times = []
                for _ in range(connects):
                    started = time.perf_counter()
                    connection = pymysql.connect(**login, **options)
                    times.append(time.perf_counter() - started)
                    connection.close()
                held = [pymysql.connect(**login, **options) for _ in range(3)]
                [finding] = surge.doctor.run_checks(only=["pymysql-ssl-per-connect"])
                for connection in held:
                    connection.close()
                results[name] = {"median_s": statistics.median(times), "doctor": finding.status}
    except ServerNotInstalled as e:
        print(f"pymysql: skipped ({e})")
        return None
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=20, help="HTTPS hosts fetched at once")
    parser.add_argument("--delay-ms", type=int, default=300, help="each host's answer delay")
    parser.add_argument("--connects", type=int, default=30, help="PyMySQL connects per setup")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results path")
    args = parser.parse_args()
    try:
        from surge.sim import background
    except ImportError:
        raise SystemExit("surge is not installed: pip install -e '.[all]'") from None

    table = Table(
        f"grequests, {args.hosts} HTTPS hosts at once, each answering after {args.delay_ms} ms",
        ["environment", "wall s", "answered", "errors", *GEVENT_CHECKS],
    )
    results = {}
    with background() as sim:
        for name, setup in ENVIRONMENTS.items():
            result = run_environment(setup, sim.https_port, sim.cafile, args.hosts, args.delay_ms)
            results[name] = result
            doctor = result["doctor"]
            table.add(
                name,
                f"{result['wall_s']:.2f}",
                f"{result['answered']}/{args.hosts}",
                ", ".join(result["errors"]) or "-",
                *(doctor[check_id] for check_id in GEVENT_CHECKS),
            )
    table.note(f"lower bound: one delay, {args.delay_ms / 1000:.2f} s")
    table.print()

    connects = pymysql_connects(args.connects)
    if connects is not None:
        table = Table(
            f"PyMySQL connect to MariaDB on loopback (TLS offered), median of {args.connects}",
            ["setup", "ms per connect", "pymysql-ssl-per-connect (3 held open)"],
        )
        for name, result in connects.items():
            table.add(name, f"{result['median_s'] * 1000:.2f}", result["doctor"])
        table.note("warn: the connections held open each had PyMySQL build a context of")
        table.note("their own (no TLS options); ok: they were given one, or TLS is off")
        table.print()
    info = machine_info(["gevent", "grequests", "requests", "urllib3", "pyopenssl", "pymysql"])
    payload = {
        "machine": info,
        "hosts": args.hosts,
        "delay_ms": args.delay_ms,
        "grequests": results,
        "pymysql_connects": connects,
    }
    print(f"wrote {write_json(args.out, payload)}")


if __name__ == "__main__":
    main()
