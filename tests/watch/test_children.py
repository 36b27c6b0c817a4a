"""Requests made in child processes of every kind are recorded and merged into
the one summary; a child killed before it could hand its recording back is
said to be missing, never silently left out."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.watch.conftest import watch

from surge.sim import SimInfo

N = 6

#: kind, what the report holds: every request ("whole"), a child said lost
#: ("lost"), or either, child by child, as the race went ("either": Pool's
#: ``with`` block terminates its workers, unless they took their end first)
KINDS = [
    ("fork-pool", "whole"),
    ("forkserver-pool", "whole"),
    ("spawn-pool", "whole"),
    ("fork-executor", "whole"),
    ("os-fork", "whole"),
    ("exec", "whole"),
    ("os-fork-killed", "lost"),
    ("fork-terminated", "either"),
]


@pytest.mark.parametrize(("kind", "holds"), KINDS, ids=[kind for kind, _ in KINDS])
def test_requests_in_children_are_counted_or_said_missing(
    sim: SimInfo, tmp_path: Path, kind: str, holds: str
) -> None:
    watched = watch("requests_in_children.py", str(sim.http_port), str(N), kind, tmp_path=tmp_path)
    assert watched.process.stdout == f"ok: {N}\n"
    report = watched.report
    peer = f"127.0.0.1:{sim.http_port}"
    requests = sum(run["hosts"].get(peer, {}).get("requests", 0) for run in report["processes"])
    lost = [pid for run in report["processes"] for pid in run["lost_children"]]
    if holds == "either" and not lost:
        holds = "whole"
    if holds == "whole":
        assert requests == N, watched.process.stderr
        assert not lost and not report["partial"], watched.process.stderr
        return
    # a child killed by a signal: what it recorded is gone with it, and the
    # summary says so, naming it
    assert lost, watched.process.stderr
    assert report["partial"] is True
    notes = [note for note in report["partial_notes"] if "handed back nothing" in note]
    assert len(notes) == 1 and all(str(pid) in notes[0] for pid in lost[:5]), notes
    assert "handed back nothing" in watched.process.stderr
    assert requests <= N
    if holds == "lost":
        assert requests == 0
