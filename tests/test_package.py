"""The package root: cheap to import, and what it offers is visible to dir(),
help() and type checkers although it loads on first use."""

from __future__ import annotations

import pydoc
import subprocess
import sys


def test_import_surge_loads_no_engine() -> None:
    code = "import sys, surge; print(sorted(m for m in sys.modules if m.startswith('surge.')))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "['surge._version']"


def test_dir_and_help_show_the_lazy_functions() -> None:
    import surge

    names = dir(surge)
    for name in ("fetch", "fetch_all", "fetch_on_cluster", "get", "post", "request"):
        assert name in names
    text = pydoc.render_doc(surge, renderer=pydoc.plaintext)
    assert "fetch_all(urls" in text and "get(url" in text
    assert surge.get is surge.__getattr__("get")
