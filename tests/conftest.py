"""Fixtures shared by every test directory: the simulated web, real MariaDB and
PostgreSQL servers, and ``require`` for the packages .ci/run installs.

``sim``: one simulated web (plain and TLS ports on 127.0.0.1) for the session;
``RESOLVE`` sends every ``*.sim`` name to it.

``mariadb_server`` / ``postgresql_server``: one server per test session, with
default settings (PostgreSQL's also logs every statement and login, for
counting); a test may restart it but must leave it running.
``start_mariadb`` / ``start_postgresql``: a server of the test's own, with
options (``settings=``, ``auth=``, ``tls=``), stopped when the test ends.

``served(httpd)``: an ``http.server`` server of a test's own, serving on a
thread until the block ends.

Every test runs with the machine's proxy variables (``http_proxy``...) unset.

When a server or its Python driver is not installed: under CI (the environment
variable ``CI`` set and not empty) the test fails, saying what to install --
.ci/run installs them, so a skip there would hide a broken setup; elsewhere it
is skipped with the same hint.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from socketserver import BaseServer
from types import ModuleType
from typing import Any, NoReturn, TypeVar

import pytest

from surge.sim import SimInfo, running
from surge.testing import DBServer, ServerNotInstalled, mariadb, postgresql

#: curl's --resolve for surge: every simulated host on loopback.
RESOLVE = "*.sim:*:127.0.0.1"

StartServer = Callable[..., DBServer]

S = TypeVar("S", bound=BaseServer)


@contextlib.contextmanager
def served(httpd: S) -> Iterator[S]:
    """``httpd`` serving on a daemon thread; shut down and closed on exit."""
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def memory_device(directory: Path, name: str) -> Path:
    """A character device of the memory driver - ``null`` (1, 3) or ``full``
    (1, 7) - made in ``directory`` (the tests run as root in CI).  A test that
    gives surge a device to write names one of these, never the machine's
    /dev: a sink bug that replaced its destination with a file would replace
    /dev/null itself (it has)."""
    path = directory / name
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, {"null": 3, "full": 7}[name]))
    return path


#: Packages the tests use that ``pip install -e '.[all]'`` does not install, by
#: the module the tests import -> how to install it (as .ci/run does).  Every
#: other package the tests ``require`` is in the ``all`` extra
#: (tests/test_extras.py checks that).
OUTSIDE_ALL = {
    "MySQLdb": "pip install mysqlclient (it is built against MariaDB's client library: "
    "apt-get install libmariadb-dev pkg-config gcc python3-dev first)",
    "httpbin": "pip install --no-deps 'httpbin>=0.10' (it pins greenlet<3, which gevent "
    "cannot run on; its dependencies are in the dev extra)",
}


def install_hint(module: str) -> str:
    """How to install what ``import module`` needs, for a test's skip message."""
    top = module.partition(".")[0]
    return OUTSIDE_ALL.get(top, "pip install -e '.[all]'")


def require(module: str) -> ModuleType:
    """``pytest.importorskip``, except under CI: a package .ci/run installs must
    be there, and a skip would hide a broken setup."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        hint = f"{module} is not installed ({e}): {install_hint(module)}"
        if os.environ.get("CI"):
            pytest.fail(f"{hint} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(hint, allow_module_level=True)


def needs(binary: str) -> pytest.MarkDecorator:
    """A test of ``binary`` (a reference client: curl, wget): skipped where it is
    not installed, except under CI, where .ci/run installs it and the test runs
    (and fails without it): a skip must not hide a broken setup."""
    return pytest.mark.skipif(
        shutil.which(binary) is None and not os.environ.get("CI"),
        reason=f"{binary}, the reference, is not installed (under CI: a failure)",
    )


def sdist(project: str, version: str) -> Path:
    """The unpacked sdist of ``project`` ``version`` (its own tests run from it),
    downloaded from the package index once and kept in
    ``${XDG_CACHE_HOME:-~/.cache}/surge/``; under CI a failed download fails."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "surge"
    name = f"{project.lower()}-{version}"
    root = cache / name
    if root.is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
    fetched = subprocess.run(
        [*pip, f"{project}=={version}", "-d", str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = [p for p in cache.glob("*.tar.gz") if p.name.lower() == f"{name}.tar.gz"]
    if fetched.returncode or not found:
        message = f"{project} {version}'s sdist could not be downloaded: {fetched.stderr[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with tarfile.open(found[0]) as archive:
        top = archive.getnames()[0].split("/")[0]
        archive.extractall(cache, filter="data")
    if top != name:
        (cache / top).rename(root)
    return root


@pytest.fixture(autouse=True)
def _ipv6_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' DNS servers answer AAAA records (documentation and loopback
    addresses) and check that they come back: whether this machine has a
    global IPv6 address - which decides if the resolver asks for them
    (surge.http.cares.has_global_ipv6) - is not what they test, so it is taken
    to have one; test_dns_resolver.py tests the rule itself."""
    from surge.http import cares

    monkeypatch.setattr(cares, "has_global_ipv6", lambda: True)


#: The environment's proxy variables (surge reads them as curl does, by default).
PROXY_VARIABLES = (
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
)


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests talk to servers on loopback: a proxy set on the machine that runs
    them is not theirs (a test of proxies sets the variables it means)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def sim() -> Iterator[SimInfo]:
    """The simulated web, on a thread, for the whole session."""
    with running() as info:
        yield info


def _not_installed(error: ServerNotInstalled) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{error} (CI is set: database tests must not be skipped)", pytrace=False)
    pytest.skip(str(error))


@contextlib.contextmanager
def _serving(
    factory: Callable[..., contextlib.AbstractContextManager[DBServer]],
) -> Iterator[StartServer]:
    """A ``start(**options)`` whose servers are stopped and removed on exit."""
    with contextlib.ExitStack() as servers:

        def start(**options: Any) -> DBServer:
            try:
                return servers.enter_context(factory(**options))
            except ServerNotInstalled as error:
                _not_installed(error)

        yield start


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[DBServer]:
    with _serving(mariadb) as start:
        yield start()


#: The session's PostgreSQL logs every statement (with its duration, so even an
#: empty query, a ping, shows) and every login: tests count round trips in its log.
COUNTING_SETTINGS = {"log_min_duration_statement": 0, "log_connections": True}


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[DBServer]:
    with _serving(postgresql) as start:
        yield start(settings=COUNTING_SETTINGS)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server on 127.0.0.1 (a port free when asked: Redis reads
    port 0 as "no TCP"; a start that lost it to a race tries another), nothing
    saved to disk; its URL.  Under CI a missing redis-server fails."""
    from surge.testing.servers import ServerStartError, free_port, wait_listening

    binary = shutil.which("redis-server")
    if binary is None:
        hint = "redis-server is not installed (Debian: apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(f"{hint} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(hint)
    directory = tmp_path_factory.mktemp("redis")
    for attempt in range(3):
        port = free_port()
        argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(directory), "--protected-mode", "no"]
        argv += ["--logfile", str(directory / "redis.log")]  # (it logs to stdout otherwise)
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_listening(port, process, "redis-server")
        except ServerStartError as error:
            process.kill()
            process.wait(10)
            if attempt == 2:
                log = (directory / "redis.log").read_text(errors="replace")[-2000:]
                raise ServerStartError(f"{error}; its log: {log}") from None
            continue
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)
        return


@pytest.fixture
def start_mariadb() -> Iterator[StartServer]:
    with _serving(mariadb) as start:
        yield start


@pytest.fixture
def start_postgresql() -> Iterator[StartServer]:
    with _serving(postgresql) as start:
        yield start
