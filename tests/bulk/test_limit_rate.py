"""``--limit-rate BYTES`` (curl's): each transfer's body read at most that fast,
on average from its start.  Only lower bounds are asserted (a loaded machine makes a transfer
slower, never faster): a body of S bytes at R bytes/s takes at least S / R.
Two transfers at once each take that long: the limit is per transfer.

curl is not the reference here: curl 7.88's ``--limit-rate 1M`` let the sim's
4 MiB body through in 0.07 s, and ``100K`` in 0.96 s (on loopback, where a
read gets more than the limit's worth at once), so its times bound nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import RESOLVE

from surge.sim import SimInfo

SURGE = [sys.executable, "-m", "surge.cli"]
SIZE = 512 * 1024
RATE = 1024 * 1024  # --limit-rate 1M
LEAST_S = SIZE / RATE


def test_each_transfer_is_paced(sim: SimInfo, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(
        "".join(f"http://x{n}--big-512k.sim:{sim.http_port}/\n" for n in range(2))
        + f"http://status-200.sim:{sim.http_port}/\n"
    )
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), "--limit-rate", "1M", "--resolve", RESOLVE, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    big = [r for r in records if "big-512k" in r["url"]]
    assert [(r["status"], r["error"], r["bytes"]) for r in big] == [(200, None, SIZE)] * 2
    for r in big:  # both at once, each at the limit
        assert r["timings"]["body_ms"] + r["timings"]["ttfb_ms"] >= LEAST_S * 1000 * 0.95, r
