"""Django's own test suite, from the sdist of the installed Django, run through
surge's backends and through Django's stock ones on the same driver and server
(MariaDB with PyMySQL and with mysqlclient, PostgreSQL with psycopg): surge's
backend may fail no test the stock one passes.

The slice is the apps that exercise connections, transactions and the
driver's types (about 1,700 tests, ~20 s each way).  The sdist comes from the
package index once and is kept in ``${XDG_CACHE_HOME:-~/.cache}/surge/``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import django
import pytest
from tests.conftest import require, sdist

import surge
from surge.testing import DBServer

#: The surge under test (a worktree's src/, not only the installed checkout).
SURGE_PATH = str(Path(surge.__file__).resolve().parent.parent)

APPS = [
    *("backends", "basic", "queries", "transactions", "transaction_hooks"),
    *("model_fields", "select_for_update", "get_or_create", "update", "delete"),
]


def django_tests() -> Path:
    """The ``tests/`` directory of the installed Django's sdist."""
    return sdist("django", django.get_version()) / "tests"


#: What a settings module does first to have Django's MySQL backends use a driver.
PRELUDE = {
    # Django imports MySQLdb and its submodules: all of them PyMySQL's, even where
    # mysqlclient is installed too (else MySQLdb.constants is found on its path).
    "pymysql": textwrap.dedent("""
        import sys, pymysql, pymysql.constants.CLIENT, pymysql.constants.ER
        import pymysql.constants.FIELD_TYPE, pymysql.constants.FLAG, pymysql.converters
        pymysql.install_as_MySQLdb()
        for name in [n for n in sys.modules if n.startswith("pymysql.")]:
            sys.modules["MySQLdb." + name[len("pymysql."):]] = sys.modules[name]
        """),
    "mysqlclient": "import MySQLdb; assert MySQLdb.__name__ == 'MySQLdb'",
    "psycopg": "",
}

#: The stock backend and surge's, per driver.
ENGINES = {
    "pymysql": ("django.db.backends.mysql", "surge.db.django.mysql"),
    "mysqlclient": ("django.db.backends.mysql", "surge.db.django.mysql"),
    "psycopg": ("django.db.backends.postgresql", "surge.db.django.postgresql"),
}


def failures(engine: str, driver: str, server: DBServer, tests: Path, work: Path) -> set[str]:
    """The tests of APPS that fail or error through ``engine`` on ``driver``."""
    settings = work / f"settings_{engine.replace('.', '_')}_{driver}.py"
    settings.write_text(
        PRELUDE[driver]
        + textwrap.dedent(f"""
        DATABASES = {{
            alias: {{
                "ENGINE": {engine!r}, "NAME": name, "USER": {server.user!r},
                "PASSWORD": {server.password!r}, "HOST": "127.0.0.1",
                "PORT": "{server.port}", "TEST": {{"NAME": "test_" + name}},
            }}
            for alias, name in (("default", "dj_default"), ("other", "dj_other"))
        }}
        SECRET_KEY = "not-a-secret"
        PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
        DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
        USE_TZ = False
        """)
    )
    # PostgreSQL: two processes, as runtests.py's default on this machine - the
    # runner clones the test database for each (a pool still holding sessions to
    # it made the clone fail), and forks them from the one that used the pool.
    parallel = 2 if driver == "psycopg" else 1  # (MySQL clones with mysqldump)
    run = subprocess.run(
        [
            sys.executable,
            "runtests.py",
            f"--settings={settings.stem}",
            f"--parallel={parallel}",
            *APPS,
        ],
        cwd=tests,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(work), str(tests), SURGE_PATH])),
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = run.stderr + run.stdout
    ran = re.search(r"^Ran (\d+) tests?", out, re.M)
    assert ran and int(ran.group(1)) > 1000, out[-3000:]
    # After the summary, the runner drops the test databases: nothing may fail
    # there (a pool holding sessions to them made PostgreSQL refuse the DROP).
    summary = re.search(r"^(?:OK|FAILED)\b.*$", run.stderr, re.M)
    assert summary, run.stderr[-3000:]
    teardown = run.stderr[summary.end() :]
    assert "Traceback" not in teardown and "accessed by other users" not in teardown, teardown
    assert run.returncode == (0 if summary.group(0).startswith("OK") else 1), run.stderr[-3000:]
    return set(re.findall(r"^(?:FAIL|ERROR): (\S+ \(\S+\))", out, re.M))


#: Tests of Django's own PostgreSQL pool (psycopg_pool): surge's backend replaces
#: it on purpose - its OPTIONS["pool"] holds surge's pool options, and Django's
#: ``connection.pool`` is None - so these fail through it by design.
REPLACES_DJANGO_POOL = {
    f"{name} (backends.postgresql.tests.Tests.{name})"
    for name in (
        "test_connect_pool",
        "test_connect_pool_set_to_true",
        "test_connect_pool_with_timezone",
        "test_pooling_health_checks",
        "test_pooling_not_support_persistent_connections",
    )
}


def grant_test_databases(server: DBServer) -> None:
    """Let the test user create and drop databases, as Django's runner does."""
    with server.connect(admin=True, autocommit=True) as admin:
        cursor = admin.cursor()
        if server.kind == "mariadb":
            for host in ("%", "localhost"):
                cursor.execute(f"GRANT ALL ON *.* TO '{server.user}'@'{host}'")
        else:
            cursor.execute(f'ALTER ROLE "{server.user}" CREATEDB')


@pytest.mark.slow
@pytest.mark.parametrize("driver", list(PRELUDE))
def test_surge_backend_fails_nothing_the_stock_backend_passes(
    driver: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if driver == "mysqlclient":
        require("MySQLdb")  # .ci/run installs it (it needs libmariadb-dev to build)
    if driver == "psycopg":  # a server of its own: the session's logs every statement
        server: DBServer = request.getfixturevalue("start_postgresql")()
    else:
        server = request.getfixturevalue("mariadb_server")
    tests = django_tests()
    grant_test_databases(server)
    stock_engine, surge_engine = ENGINES[driver]
    stock = failures(stock_engine, driver, server, tests, tmp_path)
    surge = failures(surge_engine, driver, server, tests, tmp_path)
    if driver == "psycopg":
        surge -= REPLACES_DJANGO_POOL
    assert surge <= stock, sorted(surge - stock)
