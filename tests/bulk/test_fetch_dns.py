"""The resolver's options through surge.fetch_all and ``surge fetch``: --dns-servers,
--dns-timeout, -4/-6, against the simulated DNS server (a name per test, so its
query counts say what each test caused), and the Happy Eyeballs race on the
engine's own loop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import require
from tests.http.test_happy_eyeballs import DEAD, LIVE, REFUSING, dead

import surge
from surge.bulk.engine import FetchOptions
from surge.errors import UsageError
from surge.sim import SimInfo
from surge.sim.dns import DNSServer, Entry, Zone, running

ZONE = Zone(
    {
        "fetch-dead.sim": Entry(a=(DEAD, REFUSING, LIVE)),
        "fetch-v4.sim": Entry(a=(LIVE,), aaaa=("::1",)),
        "fetch-v6.sim": Entry(a=(LIVE,)),
        "fetch-slow.sim": Entry(a=(LIVE,), latency=3.0),
        "*.cli.sim": Entry(a=(LIVE,)),
    }
)


@pytest.fixture(scope="module")
def dns() -> Iterator[DNSServer]:
    require("pycares")
    with running(ZONE) as server:
        yield server


def one(url: str, **options: Any) -> dict[str, Any]:
    (record,) = surge.fetch_all([url], concurrency=1, **options)
    return record


def test_dns_servers_and_a_dead_address_on_the_engines_loop(sim: SimInfo, dns: DNSServer) -> None:
    with dead(DEAD, sim.http_port):
        record = one(
            sim.url("fetch-dead.sim"), dns_servers=dns.server_spec, connect_timeout=10, max_time=10
        )
    assert (record["status"], record["error"]) == (200, None)
    assert record["remote_ip"] == LIVE
    assert dns.count("fetch-dead.sim", "A") == 1


def test_ip_version_asks_for_one_family_only(sim: SimInfo, dns: DNSServer) -> None:
    record = one(sim.url("fetch-v4.sim"), dns_servers=[dns.server_spec], ip_version=4)
    assert (record["status"], record["remote_ip"]) == (200, LIVE)
    assert dns.count("fetch-v4.sim", "AAAA") == 0
    record = one(sim.url("fetch-v6.sim"), dns_servers=dns.server_spec, ip_version=6)
    assert record["error"] == "dns_error"
    assert (dns.count("fetch-v6.sim", "A"), dns.count("fetch-v6.sim", "AAAA")) == (0, 1)


def test_dns_timeout(sim: SimInfo, dns: DNSServer) -> None:
    record = one(sim.url("fetch-slow.sim"), dns_servers=dns.server_spec, dns_timeout=0.3)
    assert record["error"] == "dns_error"
    waited = re.search(r"timeout after (\d+\.\d\d) s", record["error_detail"])
    assert waited and float(waited.group(1)) >= 0.3, record["error_detail"]  # what it waited


@pytest.mark.parametrize(
    "options",
    [
        {"dns_timeout": 0},
        {"dns_timeout": -1.0},
        {"dns_timeout": float("inf")},
        {"ip_version": 5},
        {"ip_version": "4"},
        {"dns_servers": "dns.example"},
        {"dns_servers": ["127.0.0.1:0"]},
    ],
)
def test_bad_options_are_usage_errors(options: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        FetchOptions(**options)


def test_options_keep_their_values() -> None:
    options = FetchOptions(dns_servers="127.0.0.1:5353,[::1]:53", dns_timeout=2, ip_version=6)
    assert options.dns_servers == ["127.0.0.1:5353", "[::1]:53"]
    client = options.client()
    assert client.resolver.servers == ["127.0.0.1:5353", "[::1]:53"]
    assert client.resolver.dns_timeout == 2


def surge_fetch(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", "-q", "--no-progress", *args, "-"],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_flags(sim: SimInfo, dns: DNSServer) -> None:
    urls = f"{sim.url('a.cli.sim')}\n{sim.url('b.cli.sim')}\n"
    done = surge_fetch("--dns-servers", dns.server_spec, "-4", "--dns-timeout", "2", stdin=urls)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted((r["status"], r["remote_ip"]) for r in records) == [(200, LIVE), (200, LIVE)]
    assert dns.count("a.cli.sim", "A") == 1 and dns.count("a.cli.sim", "AAAA") == 0


@pytest.mark.parametrize(
    "flags",
    [
        ["--dns-servers", "dns.example"],
        ["--dns-servers", ""],
        ["--dns-servers", "127.0.0.1:99999"],
        ["--dns-timeout", "0"],
        ["--dns-timeout", "nan"],
        ["--dns-timeout", "soon"],
        ["-4", "-6"],
    ],
)
def test_bad_cli_values_are_one_line_and_exit_2(flags: list[str]) -> None:
    done = surge_fetch(*flags, stdin="http://x.invalid/\n")
    assert done.returncode == 2
    assert done.stderr.startswith("surge fetch: error:") and done.stderr.count("\n") == 1
    assert done.stdout == ""
