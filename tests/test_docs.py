"""Every example in README.md and docs/ runs, as written, offline; so do the
``>>>`` examples in the public API's docstrings; and the site builds.

- Every ```python block is saved as a file and run as a script (``python
  example.py``, in a temporary directory), as a reader who saves it runs it:
  what only works pasted into a REPL or exec'd in-process - top-level
  ``await``, a process pool or Dask cluster without ``if __name__ ==
  "__main__":`` - fails here.
- Every ```sh block of a page runs, in order, as one bash script (``set -euo
  pipefail``) in a temporary directory, with this interpreter's ``bin`` (surge,
  python, mkdocs...) first on PATH and ``.venv`` pointing at its environment (the
  README's ``.venv/bin/surge``): a later block uses what an earlier one made or
  started (files, a ``surge sim &``), as a reader following the page would.
  MinIO is where .ci/run builds it (``${XDG_CACHE_HOME:-~/.cache}/surge/bin``),
  not on PATH, unless this machine has it on PATH.
- An example never names a fixed port: it takes a free one (``surge sim``
  writes the ports it got to its JSON line) and the lines after it use that.
  While a page's examples run, the fixed ports examples used to name
  (:data:`PORTS`) are held by this test, so one that names them fails.
- Every wait loop (``until``/``while``) of a shell example is bounded: it runs
  under ``timeout``, so a server that never comes up is a message, not a hang.
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
import contextlib
import doctest
import importlib
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require
from tests.http.conftest import httpbin  # noqa: F401 - a fixture, used by name

from surge.s3.minio import MinioNotInstalled, cache_dir, find_minio

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The pages whose examples run: the README and every page of the user guide.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: Public address in the docstrings -> the fixture whose value replaces it.
STAND_INS = {"https://httpbin.org": "httpbin"}

#: Fixed ports examples used to name (surge sim's, MinIO's, Dask's): held while a
#: page's examples run.
PORTS = ("8080", "8443", "8053", "9000", "9001", "8786", "8787")

#: Seconds any one example (a Python block, a page's shell blocks) may take.
EXAMPLE_TIMEOUT = 300

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


def run_bounded(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = EXAMPLE_TIMEOUT
) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of ``argv`` in its own session; at ``timeout``
    the whole session (its background jobs, a cluster's workers) is killed and
    the status is None.  Whatever it started is stopped on return.

    The output goes to files, not pipes: a pipe's reader waits for every process
    that holds its write end, and a grandchild that left the session (a server
    that calls setsid) would hold it open after the kill, a wait with no end."""
    with (
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out_file,
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err_file,
    ):
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out_file,
            stderr=err_file,
            start_new_session=True,  # its background jobs (surge sim &) are stopped with it
        )
        status: int | None
        try:
            status = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            status = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        out_file.seek(0)
        err_file.seek(0)
        return status, out_file.read(), err_file.read()


def run_script(
    code: str, cwd: Path, timeout: float = EXAMPLE_TIMEOUT
) -> tuple[int | None, str, str]:
    """Run ``code`` as a reader who saved it runs it: ``python example.py``."""
    (cwd / "example.py").write_text(code, encoding="utf-8")
    return run_bounded([sys.executable, "example.py"], cwd, timeout=timeout)


#: The last line of a traceback that says a server the suite installs is missing.
_NOT_INSTALLED = re.compile(r"^(?:[\w.]+\.)?(?:MinioNotInstalled|ServerNotInstalled): (.+)$", re.M)


def stand_ins(text: str, request: pytest.FixtureRequest) -> str:
    """``text`` with each public address it names replaced by its stand-in's."""
    for address, fixture in STAND_INS.items():
        if address in text:
            text = text.replace(address, request.getfixturevalue(fixture))
    return text


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_example_runs_as_a_saved_script(block: Block, tmp_path: Path) -> None:
    if block.skip is not None:
        pytest.skip(f"marked in {block.page}: {block.skip}")
    _require_imports(block.code)
    status, out, err = run_script(block.code, tmp_path)
    missing = _NOT_INSTALLED.findall(err)
    if status != 0 and missing:
        _not_installed(missing[-1])
    assert status == 0, (
        f"{block.where}, saved as example.py, "
        + (f"still ran after {EXAMPLE_TIMEOUT} s" if status is None else f"exited {status}")
        + f":\n{err[-3000:]}\n--- stdout ---\n{out[-1000:]}"
    )


def shell_script(page: str) -> str:
    """A page's ```sh blocks as one script, each announced on stderr."""
    parts = ["set -euo pipefail"]
    for block in (b for b in BLOCKS if b.page == page and b.language == "sh"):
        if block.skip is not None:
            continue
        parts.append(f"echo '== {block.where}' >&2\n{block.code}")
    return "\n".join(parts) + "\n"


@contextlib.contextmanager
def holding(ports: tuple[str, ...]) -> Any:
    """Listen on each of ``ports`` of 127.0.0.1 meanwhile, so that an example that
    names one finds it taken, as on a machine where something else has it (one
    already taken is left to its owner: it is taken either way)."""
    with contextlib.ExitStack() as stack:
        for port in ports:
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind(("127.0.0.1", int(port)))
                sock.listen()
            except OSError:
                pass
        yield


def _wait_loops(code: str) -> list[str]:
    """The lines of ``code`` with an ``until`` or ``while`` loop not run under ``timeout``."""
    return [
        line.strip()
        for line in code.splitlines()
        if re.search(r"(^|[;&|(]\s*|\s)(until|while)\s", line.split("#", 1)[0])
        and not re.search(r"\btimeout\s+\S+\s+(ba)?sh\s+-c\s+['\"](until|while)\s", line)
    ]


@pytest.mark.parametrize("page", sorted({b.page for b in BLOCKS if b.language == "sh"}))
def test_every_wait_loop_is_bounded(page: str) -> None:
    unbounded = [
        line
        for block in BLOCKS
        if block.page == page and block.language == "sh" and block.skip is None
        for line in _wait_loops(block.code)
    ]
    assert not unbounded, f"{page}: a wait loop that may never end (run it under timeout)"


def _minio_path() -> list[str]:
    """What PATH needs for this machine's MinIO to be where a reader's is: nothing
    when it is on PATH or where .ci/run builds it (the examples look there), its
    directory when only $SURGE_MINIO names it."""
    try:
        binary = Path(find_minio())
    except MinioNotInstalled as error:
        _not_installed(str(error))
    if shutil.which("minio") or binary == cache_dir() / "bin" / "minio":
        return []
    return [str(binary.parent)]


@pytest.mark.parametrize("page", SHELL_PAGES)
def test_shell_examples_run(page: str, tmp_path: Path) -> None:
    script = shell_script(page)
    path = [str(Path(sys.executable).parent)]
    if "minio" in script:
        path += _minio_path()
    if re.search(r"\bdask (scheduler|worker)\b|--cluster\b", script):
        require("distributed")
    env = {
        **os.environ,
        "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")]),
        "HOME": str(tmp_path),  # nothing from this machine's ~/.aws, ~/.config
        # ... but its cache, where .ci/run built MinIO, as a reader's HOME has it
        "XDG_CACHE_HOME": str(cache_dir().parent),
    }
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        env.pop(name, None)
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (tmp_path / "script.sh").write_text(script)
    with holding(PORTS):
        status, out, err = run_bounded(["bash", "script.sh"], tmp_path, env)
    announced = re.findall(r"^== (\S+)$", err, re.MULTILINE)
    where = announced[-1] if announced else page
    assert status is not None, (
        f"{page}: examples still running after {EXAMPLE_TIMEOUT} s\n{err[-3000:]}"
    )
    assert status == 0, (
        f"the example at {where} failed (exit status {status}):\n{err[-3000:]}"
        f"\n--- stdout ---\n{out[-2000:]}"
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
    global BLOCKS
    saved, BLOCKS = BLOCKS, found
    try:
        script = shell_script("page.md")
    finally:
        BLOCKS = saved
    assert "surge sim --port 8080 &" in script and script.startswith("set -euo pipefail")


#: Code that runs exec'd in-process, or pasted into ``python -m asyncio``, but not
#: saved as a file and run: the examples the saved-script run catches.
NOT_SCRIPTS = {
    "top-level await": "import asyncio\nawait asyncio.sleep(0)\n",
    "a spawned pool without a main guard": (
        "import multiprocessing\nfrom concurrent.futures import ProcessPoolExecutor\n"
        "with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('spawn')) as pool:\n"
        "    print(pool.submit(abs, -1).result())\n"
    ),
}


@pytest.mark.parametrize("code", NOT_SCRIPTS.values(), ids=NOT_SCRIPTS)
def test_what_runs_only_in_process_fails_as_a_saved_script(code: str, tmp_path: Path) -> None:
    # The same code did run exec'd in this process, as the examples used to.
    status, _, err = run_script(code, tmp_path, timeout=120)
    assert status not in (0, None), err
    guarded = "if __name__ == '__main__':\n" + "".join(
        f"    {line}\n" for line in code.splitlines()
    )
    if "await" not in code:
        status, out, err = run_script(guarded, tmp_path, timeout=120)
        assert (status, out) == (0, "1\n"), err


def test_the_mechanism_finds_unbounded_wait_loops() -> None:
    assert _wait_loops(
        "until [ -s sim.json ]; do sleep 0.1; done\n"
        "x=1; while true; do :; done   # forever\n"
        "timeout 10 sh -c 'until [ -s sim.json ]; do sleep 0.1; done' || echo late\n"
        "for i in 1 2; do echo $i; done  # until ... in a comment\n"
    ) == ["until [ -s sim.json ]; do sleep 0.1; done", "x=1; while true; do :; done   # forever"]
