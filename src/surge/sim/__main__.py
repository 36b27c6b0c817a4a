"""``python -m surge.sim``: the same command as ``surge sim``."""

from __future__ import annotations

from surge.sim.cli import sim_command
from surge.sinks import guard_standard_streams

if __name__ == "__main__":
    guard_standard_streams()  # as `surge sim`: a closed 0, 1 or 2 gets /dev/null
    sim_command(prog_name="python -m surge.sim")
