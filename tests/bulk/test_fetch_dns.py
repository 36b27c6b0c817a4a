"""The resolver's options through surge.fetch_all and ``surge fetch``: --dns-servers,
--dns-timeout, -4/-6, against the simulated DNS server (a name per test, so its
query counts say what each test caused), and the Happy Eyeballs race on the
engine's own loop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
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
        "*.ahead.sim": Entry(a=(LIVE,), latency=3.0),
        "gone.ahead.sim": Entry(failure="nxdomain", latency=3.0),
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


def test_queued_inputs_are_looked_up_before_a_slot_frees(sim: SimInfo, dns: DNSServer) -> None:
    """With 2 slots, the names of the inputs queued behind them are asked at
    once, not a DNS round trip (3 s here) after the slots' own: the server has
    4 questions (2 slots + 2 queued, the queue as deep as the concurrency)
    before it sends its first answer.  Each name is asked once (a request joins
    its look-ahead), and a queued name's failure is its request's record."""
    names = [f"h{i}.ahead.sim" for i in range(5)] + ["gone.ahead.sim"]
    records: list[dict[str, Any]] = []
    answered = sum(dns.responses.values())

    def run() -> None:
        urls = [sim.url(name) for name in names]
        options = {"dns_servers": dns.server_spec, "ip_version": 4, "max_time": 40}
        options["dns_timeout"] = 30  # one try each: c-ares asks again after 1/7 of it
        records.extend(surge.fetch_all(urls, concurrency=2, **options))

    worker = threading.Thread(target=run)
    worker.start()
    asked_before_an_answer = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        asked = sum(dns.count(name, "A") for name in names)
        if sum(dns.responses.values()) != answered:
            break
        asked_before_an_answer = asked
        time.sleep(0.005)
    worker.join(60)
    assert asked_before_an_answer >= 4
    assert [dns.count(name, "A") for name in names] == [1] * len(names)
    outcomes = {r["input"].split("//")[1].split(":")[0]: r["error"] or r["status"] for r in records}
    assert outcomes == {**{name: 200 for name in names[:-1]}, "gone.ahead.sim": "dns_error"}


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
