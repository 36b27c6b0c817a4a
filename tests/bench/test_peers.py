"""The peer clients of surge/bench/peers: each one, run by the runner in a process of its
own, fetches a small list from the simulated web and reports what the sim predicts.

Quick on purpose (no hanging hosts): the benchmarks measure; this checks that every
peer runs, resolves ``*.sim``, reads whole bodies, follows redirects and names its
errors in surge's classes.  requests and aiohttp are required; the other peers'
libraries are optional (the ``bench`` extra) and their tests skip without them.
"""

from __future__ import annotations

import importlib.util

import pytest

from surge.bench.peers import PEERS
from surge.bench.peers._common import classify, sim_names
from surge.bench.peers.runner import run_peer, score
from surge.sim import SimInfo, behaviour

#: Libraries every environment that runs these tests must have.
REQUIRED = {"requests", "aiohttp"}

#: Hosts with a whole answer, then hosts whose error class every peer must name.
ANSWERING = [f"x{i}.sim" for i in range(10)] + [
    "status-404.sim",
    "status-500.sim",
    "redirect-1.sim",
    "redirect-3.sim",
    "gzip.sim",
    "chunked.sim",
    "gzip--chunked--big-100k.sim",
    "delay-50--status-404.sim",
]
FAILING = ["reset.sim", "close.sim", "garbage.sim"]
TIMEOUT = 5.0


def _needs(name: str) -> None:
    for module in PEERS[name][1]:
        if module in REQUIRED:
            continue
        # find_spec, not importorskip: importing grequests would monkey-patch pytest.
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")


@pytest.mark.parametrize("name", list(PEERS))
def test_peer_reports_what_the_sim_predicts(name: str, sim: SimInfo) -> None:
    _needs(name)
    urls = [sim.url(host) for host in ANSWERING + FAILING]
    result = run_peer(name, urls, concurrency=8, timeout=TIMEOUT, cafile=None, limit_s=60)
    assert result.available, result.note
    assert not result.killed and result.note == "", result.note
    assert sorted(o.url for o in result.outcomes) == sorted(urls)  # one outcome per URL
    assert result.wall_s is not None and 0 < result.wall_s < 30
    assert result.cpu_s is not None and result.cpu_s >= 0
    got = {o.url: (o.status, o.error) for o in result.outcomes}
    for host in ANSWERING + FAILING:
        assert got[sim.url(host)] == behaviour(host).expected(TIMEOUT), host
    s = score(result, urls, timeout=TIMEOUT)
    assert (s.answerable, s.lost, s.ok) == (len(ANSWERING), 0, len(ANSWERING))


@pytest.mark.parametrize("name", list(PEERS))
def test_peer_trusts_the_sims_ca_over_tls(name: str, sim: SimInfo) -> None:
    _needs(name)
    hosts = ["x1.sim", "status-404.sim", "reset.sim"]
    urls = [sim.url(host, tls=True) for host in hosts]
    result = run_peer(name, urls, concurrency=3, timeout=TIMEOUT, cafile=sim.cafile, limit_s=60)
    got = {o.url: (o.status, o.error) for o in result.outcomes}
    assert [got.get(url) for url in urls] == [(200, None), (404, None), (None, "connection_reset")]
    untrusted = run_peer(name, urls[:1], concurrency=1, timeout=TIMEOUT, cafile=None, limit_s=60)
    assert [o.error for o in untrusted.outcomes] == ["tls_error"]


def test_sample_is_spread_and_extrapolated(sim: SimInfo) -> None:
    urls = [sim.url(f"y{i}.sim") for i in range(12)]
    result = run_peer("requests_seq", urls, concurrency=1, timeout=TIMEOUT, cafile=None, sample=3)
    assert result.extrapolated and result.urls_run == 3
    assert [o.url for o in result.outcomes] == [urls[0], urls[4], urls[8]]
    assert "extrapolated from 3 of 12" in result.note


def test_a_peer_past_its_limit_is_killed_and_keeps_what_it_did(sim: SimInfo) -> None:
    urls = [sim.url("z.sim"), sim.url("hang.sim"), sim.url("z2.sim")]
    result = run_peer("requests_seq", urls, concurrency=1, timeout=30, cafile=None, limit_s=2)
    assert result.killed and result.wall_s == 2
    assert [o.url for o in result.outcomes] == urls[:1]
    assert result.note.startswith("killed at limit 2 s after 1 of 3")


def test_a_missing_library_is_unavailable_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PEERS, "missing", ("requests_seq", ("surge_no_such_library",)))
    result = run_peer("missing", ["http://x.sim/"], concurrency=1, timeout=1, cafile=None)
    assert not result.available and result.wall_s is None
    assert "surge_no_such_library" in result.note


def test_sim_names_follow_redirect_chains() -> None:
    names = sim_names(["http://redirect-2.sim:8080/", "http://example.com/", "https://a.sim/"])
    assert names == {
        ("redirect-2.sim", 8080),
        ("redirect-1.sim", 8080),
        ("redirect-0.sim", 8080),
        ("a.sim", 443),
    }


def test_classify_finds_the_cause_under_the_wrappers() -> None:
    class ProtocolError(Exception):  # urllib3's name; wraps the real cause
        pass

    class ConnectionError_(Exception):  # requests' wrapper
        pass

    assert classify(ConnectionError_(ProtocolError("aborted", ConnectionResetError()))) == (
        "connection_reset"
    )
    assert classify(ConnectionError_(ProtocolError("bad status line"))) == "protocol_error"
    assert classify(ConnectionError_(TimeoutError("read timed out"))) == "read_timeout"
    assert classify(ConnectionRefusedError()) == "connect_refused"
    assert classify(KeyError("x")) == "other:KeyError"
