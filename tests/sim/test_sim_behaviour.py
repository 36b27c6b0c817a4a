"""The host-name grammar, the generic mix and lower_bound: pure functions, no server."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from surge.errors import ERROR_CLASSES
from surge.sim import GENERIC_FATES, Behaviour, behaviour, hosts, lower_bound
from surge.sim.behaviour import DEFAULT_BODY_BYTES, _behaviour

# -- grammar ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("status-404.sim", {"status": 404}),
        ("status-503.sim", {"status": 503}),
        ("delay-1500.sim", {"delay_ms": 1500}),
        ("redirect-3.sim", {"redirects": 3}),
        ("redirect-loop.sim", {"redirects": -1}),
        ("gzip.sim", {"gzip": True}),
        ("chunked.sim", {"chunked": True}),
        ("big-12345.sim", {"body_bytes": 12345}),
        ("big-2k.sim", {"body_bytes": 2048}),
        ("big-3m.sim", {"body_bytes": 3 * 1024 * 1024}),
        ("slowbody-700.sim", {"slowbody_ms": 700}),
        ("hang.sim", {"action": "hang"}),
        ("hang-body.sim", {"action": "hang_body"}),
        ("reset.sim", {"action": "reset"}),
        ("close.sim", {"action": "close"}),
        ("garbage.sim", {"action": "garbage"}),
        ("badcert.sim", {"badcert": True}),
    ],
)
def test_each_part_sets_its_field(name: str, fields: dict[str, object]) -> None:
    assert behaviour(name) == replace(Behaviour(host=name), **fields)  # type: ignore[arg-type]


def test_parts_combine_across_labels_and_within_a_label() -> None:
    dotted = behaviour("delay-200.status-404.x.sim")
    dashed = behaviour("delay-200--status-404--x.sim")
    assert (dotted.delay_ms, dotted.status) == (dashed.delay_ms, dashed.status) == (200, 404)
    assert replace(dotted, host="") == replace(dashed, host="")


def test_unknown_and_malformed_parts_are_free_names() -> None:
    malformed = ["status-99.sim", "status-600.sim", "delay-.sim", "gzipp.sim", "big-1g.sim"]
    for name in ["x.sim", "www.a1.sim", *malformed]:
        assert replace(behaviour(name), host="") == Behaviour(host=""), name


def test_rightmost_part_wins_and_names_are_case_insensitive() -> None:
    assert behaviour("status-404.status-500.sim").status == 500
    assert behaviour("reset--hang.sim").action == "hang"
    assert behaviour("STATUS-404.Sim.") == behaviour("status-404.sim")


def test_names_outside_sim_answer_200() -> None:
    for name in ["localhost", "127.0.0.1", "status-404.example.com"]:
        assert behaviour(name).expected() == (200, None)


def test_redirect_chain_walks_down_to_zero() -> None:
    chain = []
    b = behaviour("redirect-3.delay-5.sim")
    while b.next_host is not None:
        chain.append((b.redirect_status, b.next_host))
        b = behaviour(b.next_host)
    assert chain == [
        (301, "redirect-2.delay-5.sim"),
        (302, "redirect-1.delay-5.sim"),
        (301, "redirect-0.delay-5.sim"),
    ]
    assert (b.redirects, b.delay_ms, b.status) == (0, 5, 200)
    assert behaviour("redirect-loop.sim").next_host == "redirect-loop.sim"


_PARTS = st.sampled_from(
    [
        "status-404",
        "delay-10",
        "redirect-2",
        "redirect-loop",
        "gzip",
        "chunked",
        "big-10",
        "slowbody-5",
        "hang",
        "hang-body",
        "reset",
        "close",
        "garbage",
        "badcert",
        "site7",
        "site123",
        "x",
    ]
)


_LABELS = st.lists(st.lists(_PARTS, min_size=1, max_size=3), min_size=1, max_size=3)


@given(_LABELS, st.integers(0, 9))
def test_every_chain_ends_where_the_name_says(labels: list[list[str]], seed: int) -> None:
    name = ".".join("--".join(parts) for parts in labels) + ".sim"
    start = behaviour(name, seed)
    b, hops = start, 0
    while b.next_host is not None and b.redirects > 0:
        b = behaviour(b.next_host, seed)
        hops += 1
    assert hops == max(start.redirects, 0)
    # every hop is the same host but for its redirect count
    assert replace(b, host="", redirects=start.redirects) == replace(start, host="")
    status, error = start.expected()
    # A status comes with no error, except that a head which arrived keeps its
    # status when the body then fails (read_timeout, body_too_large).
    assert status is not None or error is not None
    if status is not None and error is not None:
        assert error in ("read_timeout", "body_too_large", "too_many_redirects")
    assert error is None or error in ERROR_CLASSES


# -- expected outcomes -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kwargs", "outcome"),
    [
        ("x.sim", {}, (200, None)),
        ("status-500.sim", {}, (500, None)),
        ("delay-1500.sim", {}, (200, None)),
        ("delay-1500.sim", {"timeout_s": 1.0}, (None, "read_timeout")),
        ("delay-1500.sim", {"timeout_s": 2.0}, (200, None)),
        ("redirect-3.delay-400.sim", {"timeout_s": 1.5}, (None, "read_timeout")),
        ("redirect-3.sim", {"max_redirects": 3}, (200, None)),
        ("redirect-3.sim", {"max_redirects": 2}, (301, "too_many_redirects")),
        ("redirect-4.sim", {"max_redirects": 2}, (302, "too_many_redirects")),
        ("redirect-loop.sim", {}, (302, "too_many_redirects")),
        ("hang.sim", {}, (None, "read_timeout")),
        ("hang-body.sim", {"timeout_s": 60}, (200, "read_timeout")),
        ("delay-500--hang-body.sim", {"timeout_s": 0.4}, (None, "read_timeout")),
        ("slowbody-2000.sim", {"timeout_s": 1.0}, (200, "read_timeout")),
        ("reset.sim", {}, (None, "connection_reset")),
        ("close.sim", {}, (None, "connection_reset")),
        ("garbage.sim", {}, (None, "protocol_error")),
        ("big-2m.sim", {"max_body": 1_000_000}, (200, "body_too_large")),
        ("big-2m.sim", {"max_body": 3_000_000}, (200, None)),
        ("badcert.sim", {}, (200, None)),
        ("badcert.sim", {"tls": True}, (None, "tls_error")),
        ("slowbody-900.delay-200.sim", {"timeout_s": 1.0}, (200, "read_timeout")),
    ],
)
def test_expected_outcome(name: str, kwargs: dict[str, object], outcome: tuple[int, str]) -> None:
    assert behaviour(name).expected(**kwargs) == outcome  # type: ignore[arg-type]


def test_service_time_counts_every_hop() -> None:
    assert behaviour("redirect-2.delay-100.slowbody-50.sim").service_ms == 350
    assert math.isinf(behaviour("hang.sim").service_ms)
    assert math.isinf(behaviour("redirect-loop.sim").service_ms)
    assert behaviour("delay-70.reset.sim").service_ms == 70


# -- generic hosts ----------------------------------------------------------------


def test_hosts_lists_site_names() -> None:
    assert hosts(3) == ["site0.sim", "site1.sim", "site2.sim"]
    assert hosts(3, seed=5) == hosts(3)
    assert hosts(0) == []


def test_behaviour_is_deterministic() -> None:
    names = hosts(500)
    first = [behaviour(name, 3) for name in names]
    _behaviour.cache_clear()
    assert [behaviour(name, 3) for name in names] == first
    assert [behaviour(name, 4) for name in names] != first


def test_generic_draw_is_stable_across_versions() -> None:
    # Benchmarks compare runs over time; a change of the draw must be deliberate.
    assert behaviour("site5.sim") == Behaviour(host="site5.sim", delay_ms=81, body_bytes=1485)
    assert behaviour("site5.sim", seed=1) != behaviour("site5.sim")


def _fate(b: Behaviour) -> str:
    if b.redirects > 0:
        return "redirect"
    if b.action != "respond":
        return b.action
    return "ok" if b.status == 200 else f"status_{b.status}"


def _within(count: int, n: int, p: float) -> bool:
    # five standard deviations of a binomial: a wrong table entry is caught, noise is not
    return abs(count / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_generic_mix_has_the_documented_proportions() -> None:
    n = 10_000
    drawn = [behaviour(name) for name in hosts(n)]
    fates = [_fate(b) for b in drawn]
    for fate, share in GENERIC_FATES:
        assert _within(fates.count(fate), n, share), (fate, fates.count(fate))
    assert set(fates) == {fate for fate, _ in GENERIC_FATES}
    assert _within(sum(b.gzip for b in drawn), n, 0.30)
    assert _within(sum(b.chunked for b in drawn), n, 0.20)
    assert _within(sum(b.delay_ms >= 1000 for b in drawn), n, 0.05)
    assert all(5 <= b.delay_ms < 3000 for b in drawn)
    assert all(300 <= b.body_bytes < 50_000 for b in drawn)
    assert {b.redirects for b in drawn if b.redirects} == {1, 2, 3}
    assert 60 <= statistics.median(b.delay_ms for b in drawn if b.delay_ms < 1000) <= 80
    # what a client with a 5 s deadline should lose to timeouts: the hangs, and the
    # few redirect chains of the slow tail whose hops add up to more than 5 s
    timed_out = [b for b in drawn if b.expected(5.0)[1] == "read_timeout"]
    slow_chains = [b for b in timed_out if b.action not in ("hang", "hang_body")]
    assert len(timed_out) - len(slow_chains) == fates.count("hang") + fates.count("hang_body")
    assert all(b.redirects > 0 and 5000 < b.service_ms < math.inf for b in slow_chains)
    assert len(slow_chains) < 0.002 * n


def test_explicit_parts_override_the_generic_draw() -> None:
    b = behaviour("status-418.site5.sim")
    assert (b.status, b.delay_ms, b.body_bytes) == (418, 81, 1485)
    assert behaviour("x.sim").body_bytes == DEFAULT_BODY_BYTES


# -- lower_bound ------------------------------------------------------------------


def test_lower_bound_schedules_greedily() -> None:
    names = ["delay-100.sim", "delay-200.sim", "delay-300.sim"]
    assert lower_bound(names, 1, 10) == pytest.approx(0.6)
    # slots: [0.1, 0.2]; the third host starts at 0.1 on the first slot
    assert lower_bound(names, 2, 10) == pytest.approx(0.4)
    assert lower_bound(names, 3, 10) == pytest.approx(0.3)
    assert lower_bound(names, 100, 10) == pytest.approx(0.3)
    assert lower_bound([], 4, 10) == 0.0


def test_lower_bound_caps_at_the_timeout_and_counts_hops() -> None:
    assert lower_bound(["hang.sim", "delay-100.sim"], 1, 1.0) == pytest.approx(1.1)
    assert lower_bound(["delay-5000.sim"], 1, 2.0) == pytest.approx(2.0)
    assert lower_bound(["redirect-2.delay-100.sim"], 1, 10) == pytest.approx(0.3)
    # a loop costs what the client spends before giving up: 11 responses
    assert lower_bound(["redirect-loop.delay-10.sim"], 1, 10) == pytest.approx(0.11)
    assert lower_bound(["redirect-loop.delay-10.sim"], 1, 10, max_redirects=2) == pytest.approx(
        0.03
    )
    assert lower_bound(["reset.delay-50.sim", "garbage.sim"], 1, 10) == pytest.approx(0.05)
    assert lower_bound([behaviour("slowbody-200.delay-100.sim")], 1, 10) == pytest.approx(0.3)


def test_lower_bound_uses_the_seed_and_checks_concurrency() -> None:
    names = hosts(200)
    assert lower_bound(names, 10, 5, seed=1) == lower_bound([behaviour(h, 1) for h in names], 10, 5)
    with pytest.raises(ValueError, match="concurrency"):
        lower_bound(names, 0, 5)


def test_surge_sim_help_names_every_part_of_the_grammar() -> None:
    """`surge sim --help` carries the host grammar; a part added to the grammar
    (behaviour's docstring table) and not to the help fails here."""
    import importlib
    import re

    from surge.sim.cli import GRAMMAR

    module = importlib.import_module("surge.sim.behaviour")  # the package exports a function
    table = (module.__doc__ or "").split("Generic hosts")[0]
    parts = {re.split(r"[-<\[]", name)[0] for name in re.findall(r"^``([a-z][^`]*)``", table, re.M)}
    assert {"status", "delay", "redirect", "hang", "badcert", "site"} <= parts
    missing = [part for part in sorted(parts) if part not in GRAMMAR]
    assert missing == []
