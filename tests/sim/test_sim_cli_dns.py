"""``surge sim`` runs a DNS server for the simulated web: ``surge fetch
--dns-servers`` then reaches ``*.sim`` hosts with no ``--resolve`` at all."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import require

from surge.sim import background
from surge.sim.dns import web_zone


def test_the_web_zone_sends_every_sim_name_to_loopback() -> None:
    zone = web_zone()
    for name in ("site1.sim", "a.b.status-404.sim"):
        entry = zone.find(name)
        assert entry is not None and entry.a == ("127.0.0.1",) and entry.aaaa == ()
    assert zone.find("example.com") is None  # NXDOMAIN


def test_surge_fetch_resolves_sim_names_through_the_sims_dns_server() -> None:
    require("pycares")
    with background() as sim:
        assert sim.dns_port and sim.dns_servers == f"127.0.0.1:{sim.dns_port}"
        urls = [sim.url("status-404.sim"), sim.url("dns-check.status-200.sim")]
        command = [sys.executable, "-m", "surge.cli", "fetch", "-q", "--no-progress"]
        command += ["--dns-servers", sim.dns_servers, "--max-time", "10", "-"]
        done = subprocess.run(
            command,
            input="\n".join(urls).encode(),
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    records = sorted(
        (json.loads(line) for line in done.stdout.splitlines()), key=lambda r: r["line"]
    )
    assert [(r["status"], r["error"]) for r in records] == [(404, None), (200, None)]
