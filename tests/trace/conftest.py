"""The simulated web, and a real headless Chromium, for the trace tests.

Chromium comes from Debian's ``chromium`` package (.ci/run installs it): under
CI (``CI`` set and not empty) a missing browser fails the tests that need it,
elsewhere they are skipped with the same hint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from surge.testing.browser import Chromium, find_chromium


@pytest.fixture(scope="session")
def browser() -> Iterator[Chromium]:
    if find_chromium() is None:
        hint = "no Chromium: apt-get install chromium (or set SURGE_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(f"{hint} (CI is set: the browser test must not be skipped)")
        pytest.skip(hint)
    with Chromium() as chromium:
        yield chromium


def surge(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The ``surge`` command, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "surge.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
