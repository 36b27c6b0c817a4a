"""Every example in README.md and docs/ runs, as written, offline; so do the
``>>>`` examples in the public API's docstrings; and the site builds.

- Every ```python block runs in a fresh namespace, in a temporary directory; a
  block with top-level ``await`` runs as ``python -m asyncio`` runs it.
- Every ```sh block of a page runs, in order, as one bash script (``set -euo
  pipefail``) in a temporary directory, with this interpreter's ``bin`` (surge,
  python, mkdocs...) first on PATH and ``.venv`` pointing at its environment (the
  README's ``.venv/bin/surge``): a later block uses what an earlier one made or
  started (files, a ``surge sim &``), as a reader following the page would.
  The fixed ports the examples name (:data:`PORTS`) are each replaced by a free
  one, so that the test runs beside anything else on the machine.
- ``mkdocs build --strict`` builds the site (docs/hooks.py adds README.md and
  benchmarks/README.md): a broken link or anchor fails it.

A shell example is fenced ```sh, nothing else (```bash, ```console... would
not run). A block that cannot run is preceded by ``<!-- docs-test: skip:
REASON -->``: it is reported as a skip with that reason, and :data:`MARKED_SKIPS`
must name it, so that no block stops running unnoticed.  A server or package
the suite installs that is missing skips, as in tests/conftest.py (under CI it
fails).

The docstrings' ``>>>`` examples name ``https://httpbin.org``: :data:`STAND_INS`
points it at httpbin under gunicorn on 127.0.0.1 (tests/http/conftest.py), by
plain text replacement of that address and nothing else.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import doctest
import importlib
import inspect
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require
from tests.http.conftest import httpbin  # noqa: F401 - a fixture, used by name

from surge.s3.minio import MinioNotInstalled, find_minio
from surge.testing import ServerNotInstalled

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The pages whose examples run: the README and every page of the user guide.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: Public address in the docstrings -> the fixture whose value replaces it.
STAND_INS = {"https://httpbin.org": "httpbin"}

#: Fixed ports the shell examples name (surge sim's, MinIO's, Dask's), each
#: replaced by a free port when a page's examples run.
PORTS = ("8080", "8443", "8053", "9000", "9001", "8786", "8787")

#: The blocks marked not to run, by their page and first line of code.
MARKED_SKIPS: set[tuple[str, str]] = {
    (
        "README.md",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[all]' && .venv/bin/surge demo",
    ),
    ("README.md", ".venv/bin/python -m pytest"),
    (
        "README.md",
        ".venv/bin/ruff check src tests benchmarks && .venv/bin/ruff format --check src tests "
        "benchmarks && .venv/bin/mypy",
    ),
}

#: Fences that look like a shell or Python example but would not run.
NOT_RUN = re.compile(r"^```(py|pycon|python3|ipython|bash|shell|console|zsh|shell-session)\s*$")

#: Where the public API's ``>>>`` examples live (a module's docstring and its
#: functions' and classes'), and the docstrings that must have some.
DOCTEST_MODULES = [
    "surge",
    "surge.bulk.engine",
    "surge.trace.recorder",
    "surge.http",
    "surge.http.client",
    "surge.http.sync",
    "surge.http.response",
]
MUST_HAVE_EXAMPLES = {"surge", "surge.bulk.engine.fetch", "surge.bulk.engine.fetch_all"}

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_SKIP = re.compile(r"^<!--\s*(?:docs|readme)-test:\s*skip:\s*(.+?)\s*-->$")


@dataclass
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence
    language: str
    code: str
    skip: str | None  # the reason, if marked

    @property
    def first(self) -> str:
        return next(line for line in self.code.splitlines() if line.strip())

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def page_blocks(path: Path) -> list[Block]:
    """The ```python and ```sh blocks of one page (indented ones too, as in a list)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    blocks = []
    n = 0
    while n < len(lines):
        fence = _FENCE.match(lines[n])
        if fence is None:
            n += 1
            continue
        indent = fence.group(1)
        end = next(i for i in range(n + 1, len(lines)) if lines[i].strip().startswith("```"))
        if fence.group(2) in ("python", "sh"):
            marked = _SKIP.match(lines[n - 1].strip()) if n else None
            body = [line.removeprefix(indent) for line in lines[n + 1 : end]]
            code = "\n".join(body) + "\n"
            skip = marked.group(1) if marked else None
            blocks.append(Block(name, n + 1, fence.group(2), code, skip))
        n = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in page_blocks(page)]
PYTHON = [b for b in BLOCKS if b.language == "python"]
SHELL_PAGES = sorted({b.page for b in BLOCKS if b.language == "sh"})


def test_every_example_is_fenced_to_run_and_skips_are_counted() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        wrong = [line for line in text.splitlines() if NOT_RUN.match(line.strip())]
        assert not wrong, f"{page.name}: spell Python examples ```python, shell ones ```sh"
    assert len(PYTHON) >= 9 and len(SHELL_PAGES) >= 8
    marked = {(b.page, b.first) for b in BLOCKS if b.skip is not None}
    assert marked == MARKED_SKIPS


def _not_installed(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(
            f"{message} (CI is set: documented examples must not be skipped)", pytrace=False
        )
    pytest.skip(message)


def _require_imports(code: str) -> None:
    """The packages a block imports, as tests/conftest.py's ``require`` has them."""
    for node in ast.walk(ast.parse(code)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for name in names:
            if name.split(".")[0] != "surge":
                require(name.split(".")[0])


def run_code(code: str, name: str) -> dict[str, Any]:
    """Run ``code`` in a fresh namespace; top-level ``await`` as ``python -m
    asyncio`` runs it (on a fresh event loop)."""
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, namespace))
    else:
        exec(compiled, namespace)
    return namespace


def stand_ins(text: str, request: pytest.FixtureRequest) -> str:
    """``text`` with each public address it names replaced by its stand-in's."""
    for address, fixture in STAND_INS.items():
        if address in text:
            text = text.replace(address, request.getfixturevalue(fixture))
    return text


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_example_runs(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if block.skip is not None:
        pytest.skip(f"marked in {block.page}: {block.skip}")
    _require_imports(block.code)
    monkeypatch.chdir(tmp_path)
    try:
        run_code(block.code, block.where)
    except (ServerNotInstalled, MinioNotInstalled) as error:
        _not_installed(str(error))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def shell_script(page: str, ports: dict[str, str]) -> str:
    """A page's ```sh blocks as one script, each announced on stderr, with the
    fixed ports replaced."""
    parts = ["set -euo pipefail"]
    for block in (b for b in BLOCKS if b.page == page and b.language == "sh"):
        if block.skip is not None:
            continue
        code = block.code
        for fixed, free in ports.items():
            code = re.sub(rf"\b{fixed}\b", free, code)
        parts.append(f"echo '== {block.where}' >&2\n{code}")
    return "\n".join(parts) + "\n"


@pytest.mark.parametrize("page", SHELL_PAGES)
def test_shell_examples_run(page: str, tmp_path: Path) -> None:
    script = shell_script(page, {fixed: str(_free_port()) for fixed in PORTS})
    path = [str(Path(sys.executable).parent)]
    if re.search(r"^\s*minio ", script, re.MULTILINE):
        try:
            path.append(str(Path(find_minio()).parent))
        except MinioNotInstalled as error:
            _not_installed(str(error))
    if re.search(r"\bdask (scheduler|worker)\b|--cluster\b", script):
        require("distributed")
    env = {
        **os.environ,
        "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")]),
        "HOME": str(tmp_path),  # nothing from this machine's ~/.aws, ~/.config
    }
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        env.pop(name, None)
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (tmp_path / "script.sh").write_text(script)
    process = subprocess.Popen(
        ["bash", "script.sh"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its background jobs (surge sim &) are stopped with it
    )
    try:
        out, err = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{page}: examples still running after 300 s\n{err[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    announced = re.findall(r"^== (\S+)$", err, re.MULTILINE)
    assert process.returncode == 0, (
        f"the example at {announced[-1] if announced else page} failed "
        f"(exit status {process.returncode}):\n{err[-3000:]}\n--- stdout ---\n{out[-2000:]}"
    )


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    require("mkdocs")
    require("material")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "benchmarks" / "index.html").exists()


# -- docstring examples ---------------------------------------------------------------


def docstring_examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    tests: dict[str, doctest.DocTest] = {}
    for name in DOCTEST_MODULES:
        for test in finder.find(importlib.import_module(name)):
            if test.examples:
                tests.setdefault(test.name, test)
    return sorted(tests.values(), key=lambda t: t.name)


DOCTESTS = docstring_examples()


def test_the_public_api_has_examples_that_run() -> None:
    assert {t.name for t in DOCTESTS} >= MUST_HAVE_EXAMPLES


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_example_runs(
    test: doctest.DocTest, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    for example in test.examples:
        example.source = stand_ins(example.source, request)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    # doctest swaps sys.stdout for its own while it runs; pytest's capture is put back after.
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    result = runner.run(test, out=report.write, clear_globs=True)
    assert result.failed == 0, report.getvalue()
    assert result.attempted == len(test.examples) > 0


# -- the mechanism itself ----------------------------------------------------------


def test_the_mechanism_finds_blocks_markers_and_ports(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# x\n```text\nls\n```\n<!-- docs-test: skip: needs a GPU -->\n```python\nimport gpu\n"
        "```\n```python\nx = await f()\n```\n1. a step\n\n   ```sh\n   surge sim --port 8080 &\n"
        "   ```\n"
    )
    found = page_blocks(page)
    assert [(b.line, b.language, b.first, b.skip) for b in found] == [
        (6, "python", "import gpu", "needs a GPU"),
        (9, "python", "x = await f()", None),
        (14, "sh", "surge sim --port 8080 &", None),
    ]
    namespace = run_code("async def f():\n    return 7\nx = await f()\n", "t")
    assert namespace["x"] == 7
    global BLOCKS
    saved, BLOCKS = BLOCKS, found
    try:
        script = shell_script("page.md", {"8080": "41234"})
    finally:
        BLOCKS = saved
    assert "surge sim --port 41234 &" in script and script.startswith("set -euo pipefail")
