"""surge doctor: each bad environment is built for real in a fresh interpreter
(pyOpenSSL injected, gevent patched late or partially, a low open-files limit,
PyMySQL connections each with a context of their own), then checked there."""

from __future__ import annotations

import json
import os
import resource
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

import surge.doctor
from surge.doctor import checks
from surge.testing import DBServer

Findings = dict[str, dict[str, Any]]


def skip_outside_ci(reason: str) -> NoReturn:
    """Skip for want of what the test needs - except under CI (the environment
    variable ``CI`` set and not empty), where the setup must provide it and a
    skip would hide a broken one: there the test fails, saying why."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: this test must not be skipped)", pytrace=False)
    pytest.skip(reason)


def checked_after(
    setup: str, *only: str, timeout: float = 60, pythonpath: str | None = None
) -> Findings:
    """Run ``setup`` in a fresh interpreter, then ``run_checks(only=...)`` there
    (``pythonpath``: a folder put first on that interpreter's and its children's path)."""
    code = (
        f"{setup}\n"
        "import json, surge.doctor\n"
        f"findings = surge.doctor.run_checks(only={list(only)!r})\n"
        "print(json.dumps([finding.to_dict() for finding in findings]))\n"
    )
    # -W ignore: gevent's own MonkeyPatchWarning and urllib3's deprecations are not the point.
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=with_pythonpath(pythonpath),
    )
    assert done.returncode == 0, done.stderr
    findings = json.loads(done.stdout.splitlines()[-1])
    assert [finding["id"] for finding in findings] == list(only)
    return {finding["id"]: finding for finding in findings}


def printed_by(code: str) -> str:
    """What ``code`` prints in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def with_pythonpath(folder: str | None) -> dict[str, str]:
    """This environment, with ``folder`` first on the path (of children too)."""
    env = dict(os.environ)
    if folder is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
    return env


def doctor_cli(
    *args: str, preexec: Callable[[], None] | None = None, pythonpath: str | None = None
) -> tuple[int, Findings]:
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "doctor", "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=preexec,
        env=with_pythonpath(pythonpath),
    )
    assert done.returncode in (0, 1, 2), done.stderr
    payload = json.loads(done.stdout)
    assert payload["schema"] == 1
    findings = payload["findings"]
    # The shape scripts rely on: each id's measured keys, whatever the outcome; no fix on ok.
    for finding in findings:
        assert list(finding["measured"]) == list(checks._MEASURES[finding["id"]]), finding
        assert finding["status"] != "ok" or finding["fix"] == "", finding
    return done.returncode, {finding["id"]: finding for finding in findings}


def limit_open_files(soft: int, hard: int | None = None) -> Callable[[], None]:
    def preexec() -> None:
        _, current_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, current_hard if hard is None else hard))

    return preexec


GEVENT = ("pyopenssl-injected", "gevent-late-patch", "gevent-partial-patch")
INJECT = "import urllib3.contrib.pyopenssl; urllib3.contrib.pyopenssl.inject_into_urllib3()"


# -- the good environment ---------------------------------------------------------------------


def test_a_good_environment_passes_every_state_check_and_exits_0() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    enough = 2048
    if hard != resource.RLIM_INFINITY and hard < enough:
        skip_outside_ci(f"the hard open-files limit here is {hard}, below {enough}")
    status, findings = doctor_cli(preexec=limit_open_files(enough))
    assert list(findings) == surge.doctor.check_ids()
    assert status == 0
    for check_id in (*GEVENT, "fd-limit", "event-loop", "http-parser"):
        assert findings[check_id]["status"] == "ok", findings[check_id]
    # Measurements: a number whatever the status (OpenSSL 3 makes it a warn).
    cost = findings["ssl-context-cost"]
    assert cost["measured"]["ms"] > 0 and cost["status"] in ("ok", "warn")
    assert ("reuse" in cost["fix"]) == (cost["status"] == "warn")


def test_without_gevent_patching_the_gevent_checks_are_ok() -> None:
    findings = checked_after("import gevent", *GEVENT)
    assert {finding["status"] for finding in findings.values()} == {"ok"}


def test_gevent_patched_first_is_ok_even_when_requests_comes_later() -> None:
    findings = checked_after(
        "from gevent import monkey; monkey.patch_all()\nimport requests, asyncio", *GEVENT
    )
    assert {finding["status"] for finding in findings.values()} == {"ok"}


def test_looking_imports_neither_ssl_nor_gevent_nor_urllib3() -> None:
    # A late gevent patch is about modules imported too early: run_checks() must not be
    # the one importing them (its children are spawned without subprocess, its versions
    # read without importlib.metadata).
    watched = (
        "ssl", "gevent", "urllib3", "asyncio", "pymysql", "uvloop", "httptools",
        "socket", "select", "selectors", "threading", "subprocess", "signal",
    )  # fmt: skip
    code = (
        "import sys, surge.doctor\n"
        "surge.doctor.run_checks()\n"
        f"print(sorted(m for m in {watched!r} if m in sys.modules))"
    )
    assert printed_by(code) == "[]"


# -- pyOpenSSL ----------------------------------------------------------------------------------


def test_pyopenssl_injected_into_urllib3_warns_and_extracting_it_clears_it() -> None:
    findings = checked_after(INJECT, "pyopenssl-injected")
    assert findings["pyopenssl-injected"]["status"] == "warn"
    assert "extract_from_urllib3" in findings["pyopenssl-injected"]["fix"]
    findings = checked_after(
        f"{INJECT}\nurllib3.contrib.pyopenssl.extract_from_urllib3()", "pyopenssl-injected"
    )
    assert findings["pyopenssl-injected"]["status"] == "ok"


def test_pyopenssl_under_grequests_patching_fails_both_checks() -> None:
    # The write-up's job: grequests' patch_all(thread=False, select=False), then pyOpenSSL,
    # whose TLS reads wait in the still-blocking select.
    findings = checked_after(f"import grequests\n{INJECT}", *GEVENT)
    assert findings["pyopenssl-injected"]["status"] == "fail"
    assert findings["gevent-partial-patch"]["status"] == "fail"
    assert "pyOpenSSL" in findings["gevent-partial-patch"]["message"]
    assert findings["gevent-late-patch"]["status"] == "ok"


# -- gevent ----------------------------------------------------------------------------------


def test_patching_after_importing_the_stdlibs_network_modules_is_ok() -> None:
    # gevent patches every ssl path that uses the ssl module's own references to socket's
    # originals: importing ssl, asyncio, http.client or urllib.request first is harmless.
    findings = checked_after(
        "import ssl, asyncio, http.client, urllib.request\n"
        "from gevent import monkey; monkey.patch_all()",
        *GEVENT,
    )
    assert findings["gevent-late-patch"]["status"] == "ok", findings["gevent-late-patch"]
    assert findings["gevent-late-patch"]["measured"]["bound"] == []
    assert findings["gevent-partial-patch"]["status"] == "ok"


def test_patching_after_import_requests_names_urllib3s_unpatched_sslcontext() -> None:
    findings = checked_after(
        "import requests\nfrom gevent import monkey; monkey.patch_all()", "gevent-late-patch"
    )
    late = findings["gevent-late-patch"]
    assert late["status"] == "fail"
    assert "RecursionError" in late["message"] and "patch_all()" in late["fix"]
    bound = late["measured"]["bound"]
    assert "urllib3.util.ssl_.SSLContext (ssl.SSLContext)" in bound
    # requests.packages.urllib3 is the same module under a second name: named once.
    assert not any(name.startswith("requests.packages.") for name in bound)


def test_a_context_made_before_patching_is_an_unpatched_object() -> None:
    findings = checked_after(
        "import ssl\ncontext = ssl.create_default_context()\n"
        "from gevent import monkey; monkey.patch_all()",
        "gevent-late-patch",
    )
    assert findings["gevent-late-patch"]["measured"]["objects"] == ["1 ssl.SSLContext"]


def test_grequests_partial_patch_warns_select_unpatched() -> None:
    findings = checked_after("import grequests", "gevent-partial-patch")
    partial = findings["gevent-partial-patch"]
    assert partial["status"] == "warn"
    assert partial["measured"]["unpatched_io"] == ["select", "selectors"]


def test_socket_patched_without_ssl_fails() -> None:
    findings = checked_after(
        "from gevent import monkey; monkey.patch_all(ssl=False)", "gevent-partial-patch"
    )
    partial = findings["gevent-partial-patch"]
    assert partial["status"] == "fail"
    assert partial["measured"]["unpatched_io"] == ["ssl"]
    # It does not block: the standard ssl cannot wrap gevent's sockets at all.
    assert "TypeError" in partial["message"] and "blocks" not in partial["message"]


def test_gevent_in_use_with_socket_unpatched_fails() -> None:
    findings = checked_after("from gevent import monkey; monkey.patch_all(socket=False)", *GEVENT)
    partial = findings["gevent-partial-patch"]
    assert partial["status"] == "fail", partial
    assert partial["measured"]["unpatched_io"] == ["socket"]
    assert "_gevent_saved_patch_all_module_settings" not in partial["measured"]["patched"]
    assert "select" in partial["measured"]["patched"]


# -- limits and fast parts --------------------------------------------------------------------


def test_a_soft_limit_the_process_may_raise_warns() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1064:
        skip_outside_ci(f"the hard open-files limit here is {hard}, below 1064")
    status, findings = doctor_cli("--concurrency", "1000", preexec=limit_open_files(256))
    fd = findings["fd-limit"]
    assert fd["status"] == "warn", fd
    assert status == 0
    assert fd["measured"]["soft"] == 256 and fd["measured"]["needed"] == 1000 + checks.FD_HEADROOM
    assert "ulimit -n 1064" in fd["fix"]


def test_open_files_below_a_typical_concurrency_warns() -> None:
    _, findings = doctor_cli(preexec=limit_open_files(256))
    assert findings["fd-limit"]["status"] == "warn"
    _, findings = doctor_cli("--concurrency", "100", preexec=limit_open_files(256))
    assert findings["fd-limit"]["status"] == "ok"


def test_a_hard_limit_below_the_concurrency_fails_with_exit_1() -> None:
    status, findings = doctor_cli("-c", "500", preexec=limit_open_files(256, 256))
    assert findings["fd-limit"]["status"] == "fail"
    assert status == 1
    assert "LimitNOFILE" in findings["fd-limit"]["fix"]
    _, findings = doctor_cli(preexec=limit_open_files(256, 256))
    assert findings["fd-limit"]["status"] == "warn"  # below a typical concurrency only


def test_the_headroom_is_the_one_surge_fetch_keeps() -> None:
    from surge.bulk import limits

    assert checks.FD_HEADROOM is limits.FD_HEADROOM


def test_without_uvloop_and_httptools_both_warn() -> None:
    # A None in sys.modules makes a module unimportable, as if not installed.
    findings = checked_after(
        "import sys; sys.modules['uvloop'] = sys.modules['httptools'] = None",
        "event-loop",
        "http-parser",
    )
    assert findings["event-loop"]["status"] == "warn"
    assert "uvloop" in findings["event-loop"]["fix"]
    assert findings["http-parser"]["status"] == "warn"
    assert "httptools" in findings["http-parser"]["fix"]


def test_a_program_on_asyncios_own_loop_is_told_so_without_a_warning() -> None:
    findings = checked_after("import asyncio", "event-loop")
    loop = findings["event-loop"]
    assert loop["status"] == "ok"
    assert loop["measured"]["asyncio_policy"] is None
    assert "uvloop.run()" in loop["message"]


def test_looking_creates_no_event_loop_policy() -> None:
    code = (
        "import asyncio, surge.doctor\n"
        "surge.doctor.run_checks(only='event-loop')\n"
        "print(asyncio.events._event_loop_policy)"
    )
    assert printed_by(code) == "None"


def test_a_program_inside_uvloop_run_is_on_uvloop() -> None:
    findings = checked_after(
        "import uvloop, surge.doctor\n"
        "async def look():\n"
        "    return surge.doctor.run_checks(only='event-loop')\n"
        "inside = uvloop.run(look())[0]\n"
        "assert inside.measured['running_loop'].startswith('uvloop'), inside\n"
        "assert 'asyncio' not in inside.message, inside",
        "event-loop",
    )
    assert findings["event-loop"]["status"] == "ok"


def broken_package(folder: Path, name: str) -> str:
    """A package called ``name`` that is found but raises on import (a broken build)."""
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(
        f"raise ImportError('{name}: undefined symbol in the compiled extension')\n"
    )
    return str(folder)


def test_uvloop_found_but_broken_warns_and_httptools_broken_fails(tmp_path: Path) -> None:
    pythonpath = broken_package(tmp_path, "uvloop")
    broken_package(tmp_path, "httptools")
    findings = checked_after("", "event-loop", "http-parser", pythonpath=pythonpath)
    loop, parser = findings["event-loop"], findings["http-parser"]
    assert loop["status"] == "warn", loop
    assert "undefined symbol" in loop["measured"]["uvloop_import_error"]
    assert "cannot be imported" in loop["message"]
    # surge's HTTP client imports httptools unconditionally: no fallback to run on.
    assert parser["status"] == "fail", parser
    assert "undefined symbol" in parser["measured"]["import_error"]


# -- measurements ------------------------------------------------------------------------------


def test_ssl_context_cost_is_measured_in_process_once_ssl_is_imported() -> None:
    findings = checked_after("import ssl", "ssl-context-cost")
    measured = findings["ssl-context-cost"]["measured"]
    assert measured["ms"] > 0 and measured["openssl"].startswith(("OpenSSL", "LibreSSL"))


def test_the_ssl_measurement_runs_in_an_interpreter_without_surge() -> None:
    # The child gets the measurement's own code, no surge import and no PYTHONPATH:
    # here it is the system Python, where surge is not installed.
    system_python = "/usr/bin/python3"
    if not os.access(system_python, os.X_OK):
        skip_outside_ci(f"no {system_python}")
    if subprocess.run([system_python, "-c", "import surge"], capture_output=True).returncode == 0:
        skip_outside_ci(f"surge is importable in {system_python}")
    findings = checked_after(f"import sys; sys.executable = {system_python!r}", "ssl-context-cost")
    measured = findings["ssl-context-cost"]["measured"]
    assert measured["skipped"] is None and measured["ms"] > 0


@pytest.mark.parametrize("where", ["in process", "in a child"])
def test_a_tls_handshake_is_measured_full_and_resumed(where: str) -> None:
    findings = checked_after(
        "import ssl" if where == "in process" else "pass", "tls-handshake-cost"
    )
    finding = findings["tls-handshake-cost"]
    measured = finding["measured"]
    assert measured["skipped"] is None
    assert measured["full_ms"] > 0 and measured["resumed_ms"] > 0
    assert measured["resumed_share"] == 1.0  # every second handshake resumed the first's
    assert measured["openssl"] == ssl.OPENSSL_VERSION
    slow = tuple(ssl.OPENSSL_VERSION_INFO[:2]) in ((3, 0), (3, 1))
    assert finding["status"] == ("warn" if slow else "ok"), finding
    assert ("OpenSSL 3.2 or newer" in finding["fix"]) == slow


def test_the_handshake_probe_is_skipped_when_not_measuring() -> None:
    _, findings = doctor_cli("--only", "tls-handshake-cost", "--no-measure")
    finding = findings["tls-handshake-cost"]
    assert finding["status"] == "ok" and finding["measured"]["full_ms"] is None
    assert "measuring was turned off" in finding["measured"]["skipped"]


def test_measurements_are_skipped_when_sys_executable_is_not_python() -> None:
    # Under uWSGI, mod_wsgi or PyInstaller sys.executable is the host program.
    findings = checked_after(
        "import sys; sys.executable = '/usr/bin/uwsgi'", "event-loop", "ssl-context-cost"
    )
    cost = findings["ssl-context-cost"]
    assert cost["status"] == "ok" and cost["measured"]["ms"] is None
    assert "not a Python interpreter" in cost["measured"]["skipped"]
    assert findings["event-loop"]["status"] == "ok"


def test_pymysql_installed_but_not_imported_is_ok() -> None:
    findings = checked_after("", "pymysql-ssl-per-connect")
    finding = findings["pymysql-ssl-per-connect"]
    assert finding["status"] == "ok" and finding["fix"] == ""
    assert finding["measured"]["imported"] is False
    assert "run_checks() inside the program" in finding["message"]


def test_looking_for_pymysql_connections_does_not_touch_proxies() -> None:
    # isinstance() would read __class__: evaluating Django's SimpleLazyObject, or raising.
    findings = checked_after(
        "import pymysql\n"
        "class Proxy:\n"
        "    @property\n"
        "    def __class__(self):\n"
        "        raise RuntimeError('evaluated')\n"
        "proxy = Proxy()",
        "pymysql-ssl-per-connect",
    )
    finding = findings["pymysql-ssl-per-connect"]
    assert finding["status"] == "ok", finding
    assert finding["measured"]["live_connections"] == 0


def _login(server: DBServer) -> str:
    """pymysql.connect()'s keyword arguments for ``server``, as source text."""
    return (
        f"user={server.user!r}, password={server.password!r}, host={server.host!r}, "
        f"port={server.port}, database={server.database!r}"
    )


def test_live_pymysql_connections_each_built_a_context_by_default_warn(
    start_mariadb: Callable[..., DBServer],
) -> None:
    mariadb_server = start_mariadb(tls=True)  # TLS optional: every way of connecting works
    login = _login(mariadb_server)
    findings = checked_after(
        f"import pymysql\nconnections = [pymysql.connect({login}) for _ in range(3)]",
        "pymysql-ssl-per-connect",
    )
    finding = findings["pymysql-ssl-per-connect"]
    assert finding["status"] == "warn", finding
    assert finding["measured"]["built_by_default"] == 3
    assert "ssl=context" in finding["fix"]
    # Correct code is ok: one shared context, a long-lived context each, TLS off.
    unverified = (
        "import ssl\n"
        "def unverified():\n"
        "    context = ssl.create_default_context()\n"
        "    context.check_hostname = False\n"
        "    context.verify_mode = ssl.CERT_NONE\n"
        "    return context\n"
        "shared = unverified()\n"
    )
    for made, given_tls in [
        ("[pymysql.connect(ssl=shared, {login}) for _ in range(3)]", 3),
        ("[pymysql.connect(ssl=unverified(), {login}) for _ in range(2)]", 2),
        ("[pymysql.connect(ssl_disabled=True, {login}) for _ in range(3)]", 0),
    ]:
        findings = checked_after(
            f"import pymysql\n{unverified}connections = {made.format(login=login)}",
            "pymysql-ssl-per-connect",
        )
        finding = findings["pymysql-ssl-per-connect"]
        assert finding["status"] == "ok", (made, finding)
        assert finding["measured"]["given_tls"] == given_tls
        assert finding["measured"]["built_by_default"] == 0
    # surge.db's pool with no TLS options hands every connection the one context it built.
    no_tls_options = mariadb_server.url.partition("?")[0]
    findings = checked_after(
        "import surge.db\n"
        f"pool = surge.db.pool({no_tls_options!r})\n"
        "held = [pool.acquire() for _ in range(3)]",
        "pymysql-ssl-per-connect",
    )
    finding = findings["pymysql-ssl-per-connect"]
    assert finding["status"] == "ok", finding
    assert finding["measured"]["live_connections"] == 3
    assert finding["measured"]["default_shared"] == 3


def test_connects_already_closed_are_counted_when_watched(
    start_mariadb: Callable[..., DBServer],
) -> None:
    """The MySQL write-up's own program: connect, query, close, over and over. No
    connection is open when the check looks; surge.doctor.watch(), called first
    (before PyMySQL is imported, or after), counted them."""
    mariadb_server = start_mariadb(tls=True)
    login = _login(mariadb_server)
    each_time = (
        "for _ in range(20):\n"
        f"    connection = pymysql.connect({login})\n"
        "    with connection.cursor() as cursor:\n"
        "        cursor.execute('SELECT 1')\n"
        "    connection.close()\n"
    )
    unwatched = checked_after(f"import pymysql\n{each_time}", "pymysql-ssl-per-connect")
    finding = unwatched["pymysql-ssl-per-connect"]
    assert finding["status"] == "ok"  # nothing open, nothing seen: and it says so
    assert "call surge.doctor.watch()" in finding["message"]
    assert finding["measured"]["watching"] is False
    for order in (
        "import surge.doctor; surge.doctor.watch(); import pymysql",
        "import pymysql, surge.doctor; surge.doctor.watch()",
    ):
        findings = checked_after(f"{order}\n{each_time}", "pymysql-ssl-per-connect")
        finding = findings["pymysql-ssl-per-connect"]
        assert finding["status"] == "warn", (order, finding)
        assert finding["measured"]["connects_made"] == 20
        assert finding["measured"]["made_built_by_default"] == 20
        assert finding["measured"]["live_connections"] == 0
        assert "20 of the 20 PyMySQL connects" in finding["message"]
    # A pool's connects share the one context it built: counted, and fine.
    no_tls_options = mariadb_server.url.partition("?")[0]
    findings = checked_after(
        "import surge.doctor; surge.doctor.watch()\n"
        "import surge.db\n"
        f"pool = surge.db.pool({no_tls_options!r}, max_size=3)\n"
        "held = [pool.acquire() for _ in range(3)]\n"
        "[pool.discard(connection) for connection in held]\n"
        "held = [pool.acquire() for _ in range(3)]",
        "pymysql-ssl-per-connect",
    )
    finding = findings["pymysql-ssl-per-connect"]
    assert finding["status"] == "ok", finding
    assert finding["measured"]["connects_made"] == 6
    assert finding["measured"]["made_built_by_default"] == 1


# -- the API itself ----------------------------------------------------------------------------


def test_a_check_that_raises_is_a_warn_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(context: Any) -> Any:
        raise OSError("no /proc here")

    monkeypatch.setitem(checks._CHECKS, "fd-limit", broken)
    [finding] = surge.doctor.run_checks(only=["fd-limit"])
    assert finding.status == "warn" and "OSError: no /proc here" in finding.message
    assert finding.error == "OSError: no /proc here"
    assert list(finding.measured) == list(checks._MEASURES["fd-limit"])
    assert surge.doctor.exit_status([finding]) == 2


def test_the_cli_exits_2_when_a_check_itself_crashed(tmp_path: Path) -> None:
    # A uvloop whose import kills the interpreter: the import probe's child dies, and
    # event-loop cannot say anything about it.
    (tmp_path / "uvloop").mkdir()
    (tmp_path / "uvloop" / "__init__.py").write_text("import os\nos._exit(3)\n")
    status, findings = doctor_cli(pythonpath=str(tmp_path))
    loop = findings["event-loop"]
    assert loop["status"] == "warn" and "child interpreter failed" in loop["error"], loop
    # Nothing fails here (no gevent, no -c for fd-limit to fail against): exit 2.
    assert status == 2


def test_the_cli_runs_only_the_checks_named_and_measures_nothing_when_told() -> None:
    _, findings = doctor_cli("--only", "ssl-context-cost,fd-limit", "--no-measure")
    assert list(findings) == ["fd-limit", "ssl-context-cost"]  # in the order they run
    cost = findings["ssl-context-cost"]
    assert cost["measured"]["ms"] is None and "turned off" in cost["measured"]["skipped"]
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "doctor", "--only", "fd-limit,no-such-check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "no-such-check" in done.stderr


@pytest.mark.parametrize("concurrency", [0, -5, 2.5, "1000", True])
def test_a_concurrency_that_is_not_a_positive_int_is_a_usage_error(concurrency: Any) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        surge.doctor.run_checks(concurrency=concurrency, only="fd-limit")


def test_an_unknown_check_id_is_a_usage_error_and_one_id_may_be_a_string() -> None:
    with pytest.raises(ValueError, match="no-such-check"):
        surge.doctor.run_checks(only=["no-such-check"])
    assert [finding.id for finding in surge.doctor.run_checks(only="fd-limit")] == ["fd-limit"]


def test_the_table_shows_a_fix_only_where_something_is_wrong() -> None:
    table = surge.doctor.format_table(
        [
            surge.doctor.Finding("a-check", "ok", "fine", "nothing to do"),
            surge.doctor.Finding("another", "fail", "broken", "do this"),
        ]
    )
    assert table.splitlines() == [
        "OK    a-check  fine",
        "FAIL  another  broken",
        "               fix: do this",
    ]
    assert surge.doctor.exit_status([surge.doctor.Finding("x", "warn", "m")]) == 0
    failed = surge.doctor.Finding("y", "fail", "m")
    crashed = surge.doctor.Finding("z", "warn", "m", error="OSError: x")
    assert surge.doctor.exit_status([failed, crashed]) == 1
