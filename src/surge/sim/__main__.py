"""``python -m surge.sim``: the same command as ``surge sim``."""

from __future__ import annotations

from surge.sim.cli import sim_command

if __name__ == "__main__":
    sim_command(prog_name="python -m surge.sim")
