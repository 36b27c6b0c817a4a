"""The recording in the Python versions surge supports (3.11 to 3.13): ``surge
watch`` runs a standard-library program under each interpreter found (the
recording itself imports only the standard library, so an interpreter without
surge's dependencies is enough): ``pythonX.Y`` on PATH, or the interpreters
listed in ``SURGE_PYTHONS`` (paths, separated by ``os.pathsep``), or pyenv's
builds; one that is not there skips (under CI it fails)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.watch.conftest import watch

from surge.sim import SimInfo

VERSIONS = ("3.11", "3.12", "3.13")


def _version(python: str) -> str | None:
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _interpreter(version: str) -> str | None:
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    given = [p for p in os.environ.get("SURGE_PYTHONS", "").split(os.pathsep) if p]
    # pyenv's builds (this machine kind has 3.6 to 3.13 there), newest patch first
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    built = sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)
    for python in [*given, shutil.which(f"python{version}"), *map(str, built)]:
        if python and _version(python) == version:
            return python
    return None


@pytest.mark.parametrize("version", VERSIONS)
def test_recording_under(version: str, sim: SimInfo, tmp_path: Path) -> None:
    python = _interpreter(version)
    if python is None:
        message = f"no python{version} on PATH, in SURGE_PYTHONS or among pyenv's versions"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    # 30 requests of 50 ms: the network is most of the wall time even when a
    # loaded box makes the interpreter's start slow (at 10 ms it was not, once)
    watched = watch(
        "http_client_loop.py", str(sim.http_port), "30", "50", tmp_path=tmp_path, python=python
    )
    assert "ok: 30" in watched.process.stdout
    [run] = watched.report["processes"]
    assert run["by_kind"] == {"http": 30, "tcp": 30}
    assert watched.ids() == ["serial-requests"]
