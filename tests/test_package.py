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


#: The packages whose names load on first use (PEP 562 ``__getattr__``).
LAZY_PACKAGES = ("surge", "surge.http", "surge.pool", "surge.s3", "surge.trace")


def test_lazy_names_stay_what_they_name_whatever_is_imported_first() -> None:
    # Importing a submodule binds its name in the package: a submodule named as
    # an export (surge.s3's upload, once) would replace the function with the
    # module for every caller after it.  So: every submodule first, as a
    # program may import them, then each exported name.
    code = """
import importlib, pkgutil, sys, types
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    for info in pkgutil.iter_modules(package.__path__, name + "."):
        importlib.import_module(info.name)
    for attr in package.__all__:
        if isinstance(getattr(package, attr), types.ModuleType):
            print(f"{name}.{attr}")
"""
    done = subprocess.run(
        [sys.executable, "-c", code, *LAZY_PACKAGES], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""
