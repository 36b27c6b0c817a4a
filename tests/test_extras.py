"""Optional dependencies: every part of the API that needs one says which extra
installs it, and every package the tests need is in ``[all]`` (or their skip
message says how to install it).

Each case runs in a fresh interpreter with the optional modules made
unimportable (``sys.modules[name] = None``, which is how Python itself marks a
module as not there), then calls the API as a user would.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tests.conftest import OUTSIDE_ALL

from surge.extras import EXTRAS, NOT_AN_EXTRA, MissingExtra, missing

ROOT = Path(__file__).resolve().parent.parent

#: (the module made missing, what the user runs, what the error must name).
CASES = [
    ("pymysql", "import surge.db; surge.db.pool('mysql://u:p@127.0.0.1:1/x')", "[db]"),
    ("psycopg", "import surge.db; surge.db.pool('postgresql://u@127.0.0.1:1/x')", "[db]"),
    ("psycopg", "import surge.db; surge.db.async_pool('postgresql://u@127.0.0.1:1/x')", "[db]"),
    ("aiomysql", "import surge.db; surge.db.async_pool('mysql://u:p@127.0.0.1:1/x')", "[db]"),
    (
        "MySQLdb",
        "import surge.db; surge.db.pool('mysql://u:p@127.0.0.1:1/x', driver='mysqlclient')",
        "pip install mysqlclient",
    ),
    ("sqlalchemy", "import surge.db.sqlalchemy", "[sqlalchemy]"),
    ("django", "import surge.db.django.postgresql.base", "[django]"),
    ("django", "import surge.db.django.mysql.base", "[django]"),
    ("botocore", "import surge.s3; list(surge.s3.list_all('s3://bucket/', profile='p'))", "[s3]"),
    ("distributed", "import surge; list(surge.fetch_on_cluster(None, ['http://x/']))", "[cluster]"),
    ("dask", "import surge; list(surge.fetch_on_cluster(None, ['http://x/']))", "[cluster]"),
    ("protego", "import surge; surge.fetch_all(['http://x/'], robots='obey')", "[crawl]"),
    ("pymysql", "import surge.testing; surge.testing.mariadb().__enter__()", "[db]"),
    ("psycopg", "import surge.testing; surge.testing.postgresql().__enter__()", "[db]"),
    ("httpx", "import surge.httpx", "[httpx]"),
    ("requests", "import surge.requests", "[requests]"),
    (
        "opentelemetry",
        "import sys; from surge.cli import main;"
        " sys.argv = ['surge', 'watch', '--otlp', 'http://127.0.0.1:4318', '--', 'true'];"
        " main()",
        "[watch]",
    ),
]

#: Optional modules only surge.bench uses: each peer runs in a process of its own,
#: and ``surge demo`` lists the peers it cannot run (tests/bench/test_demo.py).
BENCH_ONLY = {m for m, extra in EXTRAS.items() if extra == "bench"}


def run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.parametrize(("module", "code", "names"), CASES, ids=[f"{m}: {c}" for m, c, _ in CASES])
def test_a_missing_optional_dependency_is_one_error_naming_its_extra(
    module: str, code: str, names: str
) -> None:
    done = run_without(module, code)
    # an API call raises (exit 1); a command says it in one line (exit 2)
    assert done.returncode == (2 if "surge.cli" in code else 1), done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert names in last, done.stderr
    assert module in last or "OpenTelemetry" in last, done.stderr
    assert not last.startswith("ModuleNotFoundError: No module named"), done.stderr


def test_every_optional_dependency_of_the_api_has_a_case() -> None:
    covered = {module for module, _code, _names in CASES}
    assert set(EXTRAS) | set(NOT_AN_EXTRA) == covered | BENCH_ONLY


def test_missing_names_the_extra_and_leaves_other_errors_alone() -> None:
    error = missing(ModuleNotFoundError("No module named 'psycopg'", name="psycopg"), "it")
    assert isinstance(error, MissingExtra) and isinstance(error, ImportError)
    assert str(error) == (
        "it needs psycopg, which is not installed: install surge with its [db] extra "
        "(pip install '.[db]' in a checkout)"
    )
    bug = ModuleNotFoundError("No module named 'surge.nothing'", name="surge.nothing")
    assert missing(bug, "it") is bug


# -- the tests' own dependencies ---------------------------------------------------


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found is not None, requirement
    return re.sub(r"[-_.]+", "-", found.group()).lower()


def all_extra_closure() -> set[str]:
    """The distributions ``pip install -e '.[all]'`` installs by name (the core
    dependencies and every extra ``all`` names, followed through ``surge[...]``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    names = {_name(r) for r in project["dependencies"]}
    todo, seen = ["all"], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in extras[extra]:
            inner = re.fullmatch(r"surge\[([^\]]+)\]", requirement)
            if inner:
                todo += inner.group(1).split(",")
            else:
                names.add(_name(requirement))
    return names


def required_by_tests() -> set[str]:
    """The modules the tests ``require(...)``, by their top-level name."""
    found = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "require"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found.add(str(node.args[0].value).partition(".")[0])
    return found


def test_every_package_the_tests_require_is_in_all_or_says_how_to_install_it() -> None:
    modules = required_by_tests()
    assert {"MySQLdb", "boto3", "pycares"} <= modules  # the scan finds them
    distributions = importlib.metadata.packages_distributions()
    in_all = all_extra_closure()
    outside = []
    for module in sorted(modules - set(OUTSIDE_ALL)):
        dists = {_name(d) for d in distributions.get(module, [])}
        if not dists:
            continue  # not installed here: require() skips it with the [all] hint
        if not dists & in_all:
            outside.append(f"{module} ({', '.join(sorted(dists))})")
    assert not outside, f"required by tests but not in [all] nor OUTSIDE_ALL: {outside}"
