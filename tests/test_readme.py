"""Every ```python block of README.md runs, as written, against servers on loopback;
so do the ``>>>`` examples in the public API's docstrings.

The one rewrite: the examples name the services they talk to by their public
addresses, and :data:`STAND_INS` points each at a local stand-in (a fixture),
by plain text replacement of that address and nothing else:

- ``https://httpbin.org`` -> httpbin (the same application, under gunicorn on
  127.0.0.1: tests/http/conftest.py);
- ``mysql://app:secret@127.0.0.1:3306/shop`` -> a MariaDB with an ``items``
  table;
- ``http://127.0.0.1:9000`` -> a MinIO with a ``bucket`` of logs, its keys and
  endpoint in the environment (AWS_ENDPOINT_URL), as a user's would be, so that
  the calls that name no endpoint reach it too.

Blocks run in a temporary directory, each in a fresh namespace; a block with
top-level ``await`` runs as ``python -m asyncio`` runs it.  A block that cannot
run is preceded by ``<!-- readme-test: skip: REASON -->``: it is reported as a
skip with that reason, and :data:`MARKED_SKIPS` must name it, so that no block
stops running unnoticed.  A server or package the suite installs that is
missing skips, as in tests/conftest.py (under CI it fails).
"""

from __future__ import annotations

import ast
import asyncio
import doctest
import importlib
import inspect
import io
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require
from tests.http.conftest import httpbin  # noqa: F401 - a fixture, used by name

from surge.s3.minio import MinioNotInstalled, MinioServer, minio_server
from surge.testing import DBServer, ServerNotInstalled

README = Path(__file__).resolve().parent.parent / "README.md"

#: Public address in the examples -> the fixture whose value replaces it.
STAND_INS = {
    "https://httpbin.org": "httpbin",
    "mysql://app:secret@127.0.0.1:3306/shop": "readme_mariadb",
    "http://127.0.0.1:9000": "readme_minio",
}

#: The blocks marked not to run, by their first line of code (none today).
MARKED_SKIPS: set[str] = set()

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

_FENCE = re.compile(r"^```(\S*)\s*$")
_SKIP = re.compile(r"^<!--\s*readme-test:\s*skip:\s*(.+?)\s*-->$")


@dataclass
class Block:
    line: int  # of the opening fence
    code: str
    skip: str | None  # the reason, if marked

    @property
    def first(self) -> str:
        return next(line for line in self.code.splitlines() if line.strip())


def readme_blocks() -> list[Block]:
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks = []
    n = 0
    while n < len(lines):
        fence = _FENCE.match(lines[n])
        if fence is None:
            n += 1
            continue
        end = next(i for i in range(n + 1, len(lines)) if lines[i].startswith("```"))
        if fence.group(1) == "python":
            marked = _SKIP.match(lines[n - 1].strip()) if n else None
            code = "\n".join(lines[n + 1 : end]) + "\n"
            blocks.append(Block(n + 1, code, marked.group(1) if marked else None))
        n = end + 1
    return blocks


BLOCKS = readme_blocks()


def test_every_python_example_is_a_python_block_and_skips_are_counted() -> None:
    text = README.read_text(encoding="utf-8")
    # A ```py or ```pycon block would not be run: spell them ```python.
    assert not re.findall(r"^```(py|pycon|python3|ipython)\s*$", text, re.MULTILINE)
    assert len(BLOCKS) >= 9
    assert {b.first for b in BLOCKS if b.skip is not None} == MARKED_SKIPS


def _not_installed(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set: README examples must not be skipped)", pytrace=False)
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
    namespace: dict[str, Any] = {"__name__": "__readme__"}
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


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_example_runs(
    block: Block,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if block.skip is not None:
        pytest.skip(f"marked in README.md: {block.skip}")
    _require_imports(block.code)
    monkeypatch.chdir(tmp_path)
    code = stand_ins(block.code, request)
    try:
        run_code(code, f"README.md:{block.line}")
    except (ServerNotInstalled, MinioNotInstalled) as error:
        _not_installed(str(error))


# -- the stand-ins --------------------------------------------------------------------


@pytest.fixture
def readme_mariadb(mariadb_server: DBServer) -> Iterator[str]:
    """The session's MariaDB, with the shop's ``items`` table the example reads."""
    conn = mariadb_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40))")
            cur.execute("INSERT INTO items VALUES (42, 'surge t-shirt')")
        conn.commit()
        yield mariadb_server.url
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS items")
        conn.close()


@pytest.fixture(scope="module")
def _minio_with_logs() -> Iterator[MinioServer]:
    boto3 = require("boto3")
    try:
        with minio_server() as server:
            s3 = boto3.client(
                "s3",
                endpoint_url=server.endpoint_url,
                aws_access_key_id=server.access_key,
                aws_secret_access_key=server.secret_key,
                region_name="us-east-1",
            )
            s3.create_bucket(Bucket="bucket")
            for day in range(1, 4):
                s3.put_object(Bucket="bucket", Key=f"logs/2026-11-0{day}.log", Body=b"x")
            yield server
    except MinioNotInstalled as error:
        _not_installed(str(error))


@pytest.fixture
def readme_minio(
    _minio_with_logs: MinioServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> str:
    """The MinIO as a user's environment would name it (and nothing from this
    machine's ~/.aws)."""
    server = _minio_with_logs
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint_url)
    return server.endpoint_url


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


def test_the_mechanism_finds_blocks_markers_and_stand_ins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "# x\n```sh\nls\n```\n<!-- readme-test: skip: needs a GPU -->\n```python\nimport gpu\n"
        "```\n```python\nx = await f()\n```\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "README", readme)
    found = readme_blocks()
    assert [(b.line, b.first, b.skip) for b in found] == [
        (6, "import gpu", "needs a GPU"),
        (9, "x = await f()", None),
    ]

    namespace = run_code("async def f():\n    return 7\nx = await f()\n", "t")
    assert namespace["x"] == 7
