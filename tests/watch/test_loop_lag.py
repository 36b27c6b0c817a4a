"""A busy machine is not a blocked loop: while another task holds the loop's CPU,
the loop's heartbeat runs late though nothing on the loop ran long.  A real-time
burner on the loop's one CPU makes that happen on cue: the program that only
awaits must get no blocked-loop, and the one that sleeps in a coroutine still
gets its finding under the same burner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROUNDS = 8  # waits of 150 ms: above blocked-loop's 0.2 s and 10% of the wall

PROGRAM = """
import asyncio, json, os, sys, time
from surge.watch import recording

os.sched_setaffinity(0, {{{cpu}}})
block = sys.argv[1] == "block"

async def main():
    for _ in range({rounds}):
        if block:
            time.sleep(0.15)  # the loop itself stuck
        else:
            await asyncio.sleep(0.15)

with recording() as rec:
    print("go", flush=True)
    sys.stdin.readline()  # the burner runs from here on
    asyncio.run(main())
print(json.dumps([f.id for f in rec.findings()]))
"""

#: A SCHED_FIFO task on that CPU: busy 150 ms, idle 50 ms, for at most 3 s.
BURNER = """
import os, sys, time
os.sched_setaffinity(0, {{{cpu}}})
sys.stdin.readline()
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
print("burning", flush=True)
end = time.monotonic() + 3.0
while time.monotonic() < end:
    busy = time.monotonic() + 0.15
    while time.monotonic() < busy:
        pass
    time.sleep(0.05)
"""


def _run_beside_burner(mode: str) -> list[str]:
    cpu = max(os.sched_getaffinity(0))
    burner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(BURNER.format(cpu=cpu))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    program = None
    try:
        program = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(PROGRAM.format(cpu=cpu, rounds=ROUNDS)),
                mode,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert program.stdout is not None and program.stdin is not None
        assert burner.stdout is not None and burner.stdin is not None
        assert program.stdout.readline().strip() == "go"
        burner.stdin.write("\n")
        burner.stdin.flush()
        started = burner.stdout.readline().strip()
        if started != "burning":
            burner.wait(10)
            if os.environ.get("CI"):
                pytest.fail("SCHED_FIFO refused: the test needs it under CI")
            pytest.skip("SCHED_FIFO is not permitted here")
        out, err = program.communicate("\n", timeout=60)
        assert program.returncode == 0, err[-3000:]
        ids: list[str] = json.loads(out.strip().splitlines()[-1])
        return ids
    finally:
        for process in (burner, program):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)


def test_a_loop_that_only_awaits_is_not_blocked_while_its_cpu_is_taken() -> None:
    assert "blocked-loop" not in _run_beside_burner("await")


def test_a_loop_that_sleeps_is_still_blocked_while_its_cpu_is_taken() -> None:
    assert "blocked-loop" in _run_beside_burner("block")
