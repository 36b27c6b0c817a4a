"""``surge trace`` of a request that failed draws the phases that happened, then
the one it failed in, labelled with its error class: never a phase that did not
happen, and never a timer of one ("connect:0.00 ms" after a failed lookup)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tests.conftest import RESOLVE

from surge.sim import SimInfo

HEADINGS = (
    "DNS Lookup",
    "TCP Connection",
    "TLS Handshake",
    "Server Processing",
    "Content Transfer",
)
MARKS = ("namelookup", "connect", "pretransfer", "starttransfer", "total")

#: (URL, https?) -> the error class, the phases drawn, and the timers drawn.
FAILURES = {
    "refused": ("http://127.0.0.1:1/", "connect_refused", HEADINGS[:2], ("namelookup", "total")),
    "dns": ("http://nowhere.invalid/", "dns_error", HEADINGS[:1], ("total",)),
    "tls": (
        "https://badcert.sim:{https}/",
        "tls_error",
        HEADINGS[:3],
        ("namelookup", "connect", "total"),
    ),
    "no answer": (
        "http://hang.sim:{http}/",
        "read_timeout",
        (*HEADINGS[:2], "Server Processing"),
        ("namelookup", "connect", "total"),
    ),
    "half a body": (
        "http://hang-body.sim:{http}/",
        "read_timeout",
        (*HEADINGS[:2], "Server Processing", "Content Transfer"),
        ("namelookup", "connect", "starttransfer", "total"),
    ),
    "not a URL": ("not a url", "invalid_url", (), ()),
}


def trace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surge", "trace", "--no-headers", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("case", FAILURES.values(), ids=FAILURES)
def test_a_failed_trace_draws_only_what_happened(
    sim: SimInfo, case: tuple[str, str, tuple[str, ...], tuple[str, ...]]
) -> None:
    url, error, headings, marks = case
    url = url.format(http=sim.http_port, https=sim.https_port)
    done = trace("--resolve", RESOLVE, "--cacert", sim.cafile, "--max-time", "1", url)
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert f"FAILED: {error}: " in out
    drawn = tuple(h for h in HEADINGS if h in out)
    assert drawn == headings, out
    assert tuple(re.findall(r"\b([a-z]+):[0-9.]+ m?s\b", out)) == marks, out
    if headings:
        bar = next(line for line in out.splitlines() if line.startswith("["))
        cells = [cell.strip() for cell in bar.strip("[]").split("|")]
        assert cells[-1] == error and len(cells) == len(headings), out
        assert "-" not in cells  # a phase that did not happen is not drawn
    else:
        assert "[" not in out, out


def test_a_response_still_draws_every_phase(sim: SimInfo) -> None:
    done = trace("--resolve", RESOLVE, "-n", "2", sim.url("status-200.sim"))
    assert done.returncode == 0, done.stderr
    pictures = done.stdout.split("\n\nhttp")  # a new connection, then a reused one
    assert len(pictures) == 2 and "reused connection" in pictures[1]
    for picture in pictures:
        assert all(h in picture for h in HEADINGS)
        assert tuple(re.findall(r"\b([a-z]+):[0-9.]+ m?s\b", picture)) == MARKS
