"""The checks behind ``surge doctor``: one function per check, registered in the order they run."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# The descriptors surge fetch keeps free besides its sockets (limits.py imports
# nothing but ``resource``: looking still loads nothing the checks look at).
from surge.bulk.limits import FD_HEADROOM
from surge.doctor import counters

Status = Literal["ok", "warn", "fail"]

#: Sockets ``surge fetch`` asks for by default (``-c``), the "typical" concurrency.
TYPICAL_CONCURRENCY = 1000

#: Building an SSLContext with the default CAs above this is worth avoiding per
#: connection.  OpenSSL 1.1.1 loads a system CA bundle in ~4.5 ms, OpenSSL 3 in
#: ~50 ms (openssl/openssl#16878; measured here: 49 ms).
SSL_CONTEXT_WARN_MS = 10.0

#: Modules whose gevent patches decide whether network I/O blocks the process.
_IO_MODULES = ("socket", "ssl", "select", "selectors")


@dataclass(frozen=True)
class Finding:
    """One check's result: ``id`` is stable (scripts may match on it), ``fix`` says
    what to do (empty on ``ok``), ``measured`` holds the numbers (the same keys for
    every finding of one id, None where not known), ``error`` the exception the
    check itself raised (its status is then ``warn``), else None."""

    id: str
    status: Status
    message: str
    fix: str = ""
    measured: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Verdict:
    """What a check returns; ``run_checks`` adds the id it was registered under."""

    status: Status
    message: str
    fix: str = ""
    measured: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Context:
    concurrency: int | None
    measure: bool = True


_Check = Callable[[_Context], _Verdict]
_CHECKS: dict[str, _Check] = {}
#: Each check's ``measured`` keys: its findings carry exactly these.
_MEASURES: dict[str, tuple[str, ...]] = {}


def _check(check_id: str, measures: tuple[str, ...]) -> Callable[[_Check], _Check]:
    def register(function: _Check) -> _Check:
        _CHECKS[check_id] = function
        _MEASURES[check_id] = measures
        return function

    return register


def check_ids() -> list[str]:
    """Every check's id, in the order they run."""
    return list(_CHECKS)


def run_checks(
    *, concurrency: int | None = None, only: Iterable[str] | None = None, measure: bool = True
) -> list[Finding]:
    """Check this interpreter and return one ``Finding`` per check, in order.

    ``concurrency``: the number of connections the program means to hold open, an
    int >= 1 (``fd-limit`` then fails when the hard limit is below it; without it,
    warns below a typical 1,000).  ``only``: the id or ids of the checks to run (all
    by default).  ``measure=False``: run nothing that takes time or a child
    interpreter (the SSLContext cost, the uvloop/httptools import checks), report it
    as skipped.  A check that raises becomes a ``warn`` finding with its ``error``
    set; it never stops the others.
    """
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ValueError(f"concurrency must be an int >= 1, not {concurrency!r}")
    if isinstance(only, str):  # one id, not its characters
        only = [only]
    wanted = list(_CHECKS) if only is None else list(only)
    unknown = [check_id for check_id in wanted if check_id not in _CHECKS]
    if unknown:
        raise ValueError(f"unknown check id(s): {', '.join(unknown)}; known: {', '.join(_CHECKS)}")
    context = _Context(concurrency=concurrency, measure=measure)
    findings = []
    for check_id in _CHECKS:  # registration order: state checks before measurements
        if check_id not in wanted:
            continue
        keys = _MEASURES.get(check_id, ())
        try:
            verdict = _CHECKS[check_id](context)
            unregistered = sorted(set(verdict.measured) - set(keys))
            if unregistered:
                raise RuntimeError(f"measured keys not registered: {', '.join(unregistered)}")
        except Exception as e:  # a broken check is a finding, not a crash
            error = f"{type(e).__name__}: {e}"
            findings.append(
                Finding(
                    check_id,
                    "warn",
                    f"the check itself failed: {error}",
                    "report this to surge's maintainers with the message",
                    dict.fromkeys(keys),
                    error,
                )
            )
            continue
        findings.append(
            Finding(
                check_id,
                verdict.status,
                verdict.message,
                "" if verdict.status == "ok" else verdict.fix,
                {key: verdict.measured.get(key) for key in keys},
            )
        )
    return findings


# -- pyOpenSSL and gevent -----------------------------------------------------------------


def _pyopenssl_injected() -> bool | None:
    """Whether urllib3 (already imported) runs on pyOpenSSL; None if urllib3 is not loaded."""
    ssl_util = sys.modules.get("urllib3.util.ssl_")
    if ssl_util is None:
        return None
    if getattr(ssl_util, "IS_PYOPENSSL", False):
        return True
    contrib = sys.modules.get("urllib3.contrib.pyopenssl")
    pyopenssl_context = getattr(contrib, "PyOpenSSLContext", None)
    return pyopenssl_context is not None and getattr(ssl_util, "SSLContext", None) is (
        pyopenssl_context
    )


def _gevent_saved() -> dict[str, dict[str, Any]]:
    """What gevent's monkey-patching replaced: module name -> {attribute: original}."""
    monkey = sys.modules.get("gevent.monkey")
    saved = getattr(monkey, "saved", None)
    if saved is None:  # where newer gevents keep it
        saved = getattr(sys.modules.get("gevent.monkey._state"), "saved", None)
    if not isinstance(saved, dict):
        return {}
    # gevent also keeps its patch_all() arguments there, under a key of its own.
    return {name: items for name, items in saved.items() if not name.startswith("_gevent")}


@_check("pyopenssl-injected", ("pyopenssl_installed", "injected", "gevent_select_patched"))
def _check_pyopenssl(context: _Context) -> _Verdict:
    injected = _pyopenssl_injected()
    installed = importlib.util.find_spec("OpenSSL") is not None
    select_patched = "select" in _gevent_saved()
    measured = {
        "pyopenssl_installed": installed,
        "injected": injected,
        "gevent_select_patched": select_patched,
    }
    if injected is None:
        return _Verdict(
            "ok",
            "urllib3 is not imported in this process, so nothing is injected into it"
            + (
                " (pyOpenSSL is installed: call surge.doctor.run_checks() inside the "
                "program, after its imports, to see)"
                if installed
                else ""
            ),
            "",
            measured,
        )
    if not injected:
        return _Verdict("ok", "urllib3 uses the standard ssl module", "", measured)
    fix = (
        "remove the call to urllib3.contrib.pyopenssl.inject_into_urllib3() (or call "
        "extract_from_urllib3()); the ssl module has had SNI since Python 3.2 and urllib3 "
        "no longer recommends pyOpenSSL"
    )
    if "socket" in _gevent_saved() and not select_patched:
        return _Verdict(
            "fail",
            "urllib3 is using pyOpenSSL under gevent with select unpatched: every TLS read "
            "that must wait calls the blocking select/poll (urllib3.util.wait_for_read), "
            "so HTTPS requests run one after another",
            fix + "; and let gevent patch select (patch_all() without select=False)",
            measured,
        )
    return _Verdict(
        "warn",
        "urllib3 is using pyOpenSSL: every TLS read and write goes through a Python "
        "wrapper over cffi instead of the ssl module's C code",
        fix,
        measured,
    )


def _unpatched_references(saved: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Where the originals gevent replaced are still held: module globals bound before
    patching (``from ssl import SSLContext``), classes subclassing them, and live
    objects made from them (a socket or SSLContext created before patching).

    gevent itself looks for the first two for ``ssl.SSLContext`` when it patches
    (its MonkeyPatchWarning, gevent#1016); this looks for all of them, for every
    patched I/O module, at any time after.
    """
    originals: dict[int, str] = {}
    for module_name in _IO_MODULES:
        for name, original in saved.get(module_name, {}).items():
            if callable(original):
                originals.setdefault(id(original), f"{module_name}.{name}")

    def holds_them_on_purpose(module_name: str) -> bool:
        # gevent's own modules, and the C modules the originals come from (_socket).
        return module_name in ("gevent", "_socket", "_ssl") or module_name.startswith("gevent.")

    def patched_where_used(module_name: str, origin: str) -> bool:
        # A module holds its own originals under other names.  And the ssl module's
        # `socket` and `create_connection` (socket's originals when ssl was imported
        # first) are harmless: patch_ssl replaces every ssl path that uses them
        # (SSLSocket, SSLContext.sslsocket_class, wrap_socket, get_server_certificate),
        # and gevent itself only warns about SSLContext bound elsewhere.  Measured: ssl,
        # asyncio, http.client and urllib.request imported before patch_all(), five
        # greenlets' TLS handshakes and urlopen against a 1 s server took 1.3 s.
        owner = origin.partition(".")[0]
        return owner == module_name or (module_name == "ssl" and owner == "socket")

    bound: list[str] = []
    seen: set[int] = set()  # a module under two names (requests.packages.urllib3) once
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict) or holds_them_on_purpose(module_name):
            continue
        if id(module) in seen:
            continue
        seen.add(id(module))
        for attribute, value in list(namespace.items()):
            origin = originals.get(id(value))
            if origin is not None and not patched_where_used(module_name, origin):
                bound.append(f"{module_name}.{attribute} ({origin})")

    classes: list[type[Any]] = [
        original
        for module_name in _IO_MODULES
        for original in saved.get(module_name, {}).values()
        if isinstance(original, type)
    ]
    subclasses = sorted(
        f"{sub.__module__}.{sub.__qualname__} ({originals[id(base)]})"
        for base in classes
        for sub in base.__subclasses__()
        if id(sub) not in originals and not holds_them_on_purpose(sub.__module__)
    )

    objects: dict[str, int] = {}
    class_ids = {id(c) for c in classes}
    for referrer in gc.get_referrers(*classes) if classes else ():
        if id(type(referrer)) in class_ids:
            name = originals[id(type(referrer))]
            objects[name] = objects.get(name, 0) + 1
    return {
        "bound": sorted(bound),
        "subclasses": subclasses,
        "objects": [f"{count} {name}" for name, count in sorted(objects.items())],
    }


def _some(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


@_check("gevent-late-patch", ("bound", "subclasses", "objects"))
def _check_gevent_late(context: _Context) -> _Verdict:
    saved = _gevent_saved()
    if not any(module_name in saved for module_name in _IO_MODULES):
        return _Verdict(
            "ok",
            "gevent has not patched socket, ssl or select here",
            "",
            {"bound": [], "subclasses": [], "objects": []},
        )
    found = _unpatched_references(saved)
    if not any(found.values()):
        return _Verdict(
            "ok",
            "gevent patched before anything bound the originals of socket, ssl and select",
            "",
            found,
        )
    parts = []
    if found["bound"]:
        parts.append(f"bound before patching: {_some(found['bound'])}")
    if found["subclasses"]:
        parts.append(f"subclasses of unpatched classes: {_some(found['subclasses'])}")
    if found["objects"]:
        parts.append(f"objects of the unpatched classes: {_some(found['objects'])}")
    if any(name.endswith("(ssl.SSLContext)") for name in found["bound"]):
        # Measured with requests imported before patch_all(): 20 of 20 HTTPS requests
        # raised RecursionError in SSLContext's options setter.
        parts.append(
            "an SSLContext bound before patching makes HTTPS requests fail with "
            "RecursionError (gevent#1016)"
        )
    return _Verdict(
        "fail",
        "gevent patched after ssl/socket were imported and used; what was taken before "
        "is still the blocking original: " + "; ".join(parts),
        "patch first: make 'from gevent import monkey; monkey.patch_all()' the first lines "
        "of the program's entry point, before any other import (or run it with "
        "'python -m gevent.monkey script.py')",
        found,
    )


@_check("gevent-partial-patch", ("patched", "unpatched_io"))
def _check_gevent_partial(context: _Context) -> _Verdict:
    saved = _gevent_saved()
    missing = [module_name for module_name in _IO_MODULES if module_name not in saved]
    measured: dict[str, Any] = {"patched": sorted(saved), "unpatched_io": missing}
    if not saved:
        return _Verdict("ok", "gevent has patched nothing here", "", measured)
    if not missing:
        return _Verdict("ok", "gevent patched socket, ssl, select and selectors", "", measured)
    fix = (
        "patch all of them: gevent.monkey.patch_all() with socket, ssl and select left on "
        "(grequests patches with select=False: patch_all() yourself before importing it)"
    )
    if "socket" in missing:
        # Measured: after patch_all(socket=False), five greenlets that each connect and
        # wait 1 s for a reply took 5.02 s, one after another.
        return _Verdict(
            "fail",
            f"gevent patched {_some(sorted(saved))} but not socket: every connect, send "
            "and recv blocks the whole process, so greenlets doing network I/O run one "
            "after another",
            fix,
            measured,
        )
    if "ssl" in missing:
        # Measured: with ssl unpatched, ssl wraps gevent's socket in its own SSLSocket
        # and every handshake raises "TypeError: _wrap_socket() argument 'sock' must be
        # _socket.socket, not SSLSocket".
        return _Verdict(
            "fail",
            "gevent patched socket but not ssl: every HTTPS request fails with TypeError "
            "(_wrap_socket() argument 'sock' must be _socket.socket), as the standard "
            "ssl module cannot wrap gevent's sockets",
            fix,
            measured,
        )
    injected = _pyopenssl_injected()
    status: Status = "fail" if injected else "warn"
    return _Verdict(
        status,
        f"gevent patched socket but not {' or '.join(missing)}: whatever waits with "
        "select/poll blocks every greenlet"
        + (
            " - and urllib3's pyOpenSSL waits there on every TLS read, so HTTPS requests "
            "run one after another"
            if injected
            else " (urllib3's wait_for_read, pyOpenSSL, psycopg, ...)"
        ),
        fix,
        measured,
    )


# -- limits and fast parts ------------------------------------------------------------------


@_check("fd-limit", ("soft", "hard", "concurrency", "needed"))
def _check_fd_limit(context: _Context) -> _Verdict:
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return _Verdict("ok", "no RLIMIT_NOFILE on this platform")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    concurrency = context.concurrency or TYPICAL_CONCURRENCY
    needed = concurrency + FD_HEADROOM
    measured = {
        "soft": None if soft == unlimited else soft,
        "hard": None if hard == unlimited else hard,
        "concurrency": concurrency,
        "needed": needed,
    }
    if soft == unlimited or soft >= needed:
        return _Verdict(
            "ok",
            f"the open-files limit ({'unlimited' if soft == unlimited else soft}) holds "
            f"{concurrency:,} connections and {FD_HEADROOM} more files",
            "",
            measured,
        )
    given = context.concurrency is not None
    need = (
        f"{concurrency:,} connections"
        + ("" if given else " (a typical bulk concurrency)")
        + f" need {needed}"
    )
    if hard == unlimited or hard >= needed:
        # The process may raise its own soft limit up to the hard one: not a failure.
        return _Verdict(
            "warn",
            f"the open-files soft limit is {soft}: {need}, which the hard limit "
            f"({'unlimited' if hard == unlimited else hard}) allows, but until the soft "
            "limit is raised every connection past it fails with EMFILE ('Too many open "
            "files')",
            f"raise the soft limit: 'ulimit -n {needed}' in the shell, or "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({needed}, hard)) at start-up "
            "(surge fetch raises it to the hard limit itself)",
            measured,
        )
    return _Verdict(
        "fail" if given else "warn",
        f"the open-files limit is {soft} (hard: {hard}): {need}; past the limit every new "
        "connection fails with EMFILE ('Too many open files')",
        f"the hard limit ({hard}) is below {needed}: raise it for the service "
        f"(systemd LimitNOFILE={needed}, docker --ulimit nofile={needed}, "
        "/etc/security/limits.conf), then the soft one",
        measured,
    )


def _version(module: str) -> str | None:
    """The version of the distribution that installs ``module``, None when it is not
    found.  Read from the ``*.dist-info/METADATA`` beside the module, not with
    importlib.metadata: that imports email.utils and with it socket and threading."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    if not spec.origin or not os.path.isabs(spec.origin):
        return "unknown version"
    folder = os.path.dirname(spec.origin)
    if spec.submodule_search_locations is not None:  # a package: its parent folder
        folder = os.path.dirname(folder)
    prefix = module.lower().replace("-", "_") + "-"
    try:
        entries = os.listdir(folder)
    except OSError:
        return "unknown version"
    for entry in entries:
        if entry.lower().startswith(prefix) and entry.endswith(".dist-info"):
            try:
                with open(os.path.join(folder, entry, "METADATA"), encoding="utf-8") as lines:
                    for line in lines:
                        if line.startswith("Version:"):
                            return line.partition(":")[2].strip()
                        if not line.strip():  # end of the headers
                            break
            except OSError:
                continue
    return "unknown version"


# -- probes: code run here when what it imports is loaded, else in a child interpreter -------

#: A probe is source code that defines ``measure() -> dict``.  It is self-contained
#: (the child imports no surge: surge may not be importable there, and its
#: subpackages named like the standard library's must not shadow them).
_SSL_COST_PROBE = """
import ssl, time

def measure():
    costs = []
    for _ in range(3):
        started = time.perf_counter()
        ssl.create_default_context()
        costs.append((time.perf_counter() - started) * 1000)
    return {"ms": round(min(costs), 2), "openssl": ssl.OPENSSL_VERSION}
"""


def _import_probe(module: str) -> str:
    return f"""
import importlib

def measure():
    try:
        importlib.import_module({module!r})
    except Exception as e:
        return {{"error": f"{{type(e).__name__}}: {{e}}"}}
    return {{"error": None}}
"""


#: Seconds a child interpreter may take (one measurement or one import).
CHILD_TIMEOUT = 15.0

#: What ``sys.executable`` is called when it is a Python interpreter; under uWSGI,
#: mod_wsgi or a PyInstaller bundle it is the host program, which must not be run.
_PYTHON_NAME = re.compile(r"(python|pypy)[0-9.]*[a-z]?(\.exe)?", re.IGNORECASE)


def _child_interpreter() -> str | None:
    """``sys.executable`` when it looks like a Python interpreter, else None."""
    executable = sys.executable
    if not executable or getattr(sys, "frozen", False):
        return None
    if not _PYTHON_NAME.fullmatch(os.path.basename(executable)):
        return None
    return executable if os.access(executable, os.X_OK) else None


def _probe(code: str, context: _Context, *, here: bool) -> dict[str, Any] | str:
    """Run ``code``'s ``measure()`` in this process when ``here`` (what it imports is
    already loaded), else in a child interpreter.  A str says why it was not run."""
    if not context.measure:
        return "not run: measuring was turned off"
    if here:
        namespace: dict[str, Any] = {}
        exec(code, namespace)  # surge's own constant source, never input
        result: dict[str, Any] = namespace["measure"]()
        return result
    executable = _child_interpreter()
    if executable is None:
        return f"not run: sys.executable ({sys.executable or 'empty'}) is not a Python interpreter"
    status, out, err = _run_child(
        executable, code + "\nimport json\nprint(json.dumps(measure()))\n", CHILD_TIMEOUT
    )
    if status is None:
        return f"not run: the child interpreter took more than {CHILD_TIMEOUT:.0f} s"
    if status != 0:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the child interpreter failed: {last}")
    result = json.loads(out.strip().splitlines()[-1])
    return result


def _run_child(executable: str, code: str, timeout: float) -> tuple[int | None, str, str]:
    """Run ``executable -c code``: (exit status or None on timeout, stdout, stderr).

    os.posix_spawn, not subprocess: importing subprocess imports threading, select,
    selectors and signal into the program being looked at."""
    if not hasattr(os, "posix_spawn"):  # pragma: no cover - Windows
        import subprocess

        try:
            done = subprocess.run(
                [executable, "-c", code], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return None, "", ""
        return done.returncode, done.stdout, done.stderr
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        pid = os.posix_spawn(
            executable,
            [executable, "-c", code],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, out_write, 1),
                (os.POSIX_SPAWN_DUP2, err_write, 2),
            ],
        )
    finally:
        os.close(out_write)
        os.close(err_write)
    try:
        deadline = time.monotonic() + timeout
        status: int | None = None
        while status is None:
            # The output is one short JSON line or one traceback: the pipes do not fill.
            done_pid, wait_status = os.waitpid(pid, os.WNOHANG)
            if done_pid:
                status = os.waitstatus_to_exitcode(wait_status)
            elif time.monotonic() > deadline:
                os.kill(pid, 9)  # SIGKILL (the signal module is not imported here)
                os.waitpid(pid, 0)
                return None, "", ""
            else:
                time.sleep(0.005)
        return status, _read_all(out_read), _read_all(err_read)
    finally:
        os.close(out_read)
        os.close(err_read)


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _import_error(module: str, context: _Context) -> str | None:
    """Why ``module`` (found installed) cannot be imported, None when it can (or
    could not be tried).  Tried in a child: importing uvloop here would import
    asyncio and ssl into the program."""
    if sys.modules.get(module) is not None:
        return None
    result = _probe(_import_probe(module), context, here=False)
    return None if isinstance(result, str) else result["error"]


@_check("event-loop", ("uvloop", "uvloop_import_error", "running_loop", "asyncio_policy"))
def _check_event_loop(context: _Context) -> _Verdict:
    if sys.platform == "win32":  # pragma: no cover - no uvloop there
        return _Verdict("ok", "uvloop does not run on Windows; asyncio's loop it is")
    version = _version("uvloop")
    measured: dict[str, Any] = {"uvloop": version, "uvloop_import_error": None}
    measured.update(_asyncio_in_use())
    if version is None:
        return _Verdict(
            "warn",
            "uvloop is not installed: asyncio programs (and surge's engine) run on asyncio's "
            "default loop, which spends several times more CPU per socket event",
            "pip install uvloop (or 'surge[http]'); surge uses it by itself when installed",
            measured,
        )
    error = _import_error("uvloop", context)
    if error is not None:
        measured["uvloop_import_error"] = error
        return _Verdict(
            "warn",
            f"uvloop {version} is installed but cannot be imported ({error}): surge's engine "
            "falls back to asyncio's default loop",
            "reinstall it: pip install --force-reinstall uvloop",
            measured,
        )
    running = measured["running_loop"]
    if running is not None:
        on_default_loop = not running.startswith("uvloop")
        where = "the loop running this code is asyncio's own" if on_default_loop else ""
    else:
        policy = measured["asyncio_policy"]
        on_default_loop = policy is None or not policy.startswith("uvloop")
        where = (
            "asyncio.run() in this process still runs asyncio's own loop (uvloop.run() "
            "or uvloop.install() would not)"
            if on_default_loop and "asyncio" in sys.modules
            else ""
        )
    return _Verdict(
        "ok",
        f"uvloop {version} is installed and surge's engine uses it"
        + (f"; {where}" if where else ""),
        "",
        measured,
    )


def _asyncio_in_use() -> dict[str, str | None]:
    """The module of the loop running this code and of the installed event loop policy
    (None: none running / asyncio's default, not yet created).  Read without calling
    get_event_loop_policy(), which would create the policy it reports."""
    asyncio = sys.modules.get("asyncio")  # only when loaded: importing it imports ssl
    if asyncio is None:
        return {"running_loop": None, "asyncio_policy": None}
    loop = asyncio._get_running_loop()
    policy = getattr(getattr(asyncio, "events", None), "_event_loop_policy", None)
    return {
        "running_loop": None if loop is None else type(loop).__module__,
        "asyncio_policy": None if policy is None else type(policy).__module__,
    }


@_check("http-parser", ("httptools", "import_error"))
def _check_http_parser(context: _Context) -> _Verdict:
    version = _version("httptools")
    measured: dict[str, Any] = {"httptools": version, "import_error": None}
    fix = "pip install httptools (or 'surge[http]')"
    if version is None:
        return _Verdict(
            "warn",
            "httptools (the C llhttp parser) is not installed: surge's HTTP client (surge "
            "fetch, trace, s3) imports it and will not start without it",
            fix,
            measured,
        )
    error = _import_error("httptools", context)
    if error is not None:
        measured["import_error"] = error
        return _Verdict(
            "fail",
            f"httptools {version} is installed but cannot be imported ({error}): surge's "
            "HTTP client imports it unconditionally and fails to start",
            "reinstall it: pip install --force-reinstall httptools",
            measured,
        )
    return _Verdict("ok", f"httptools {version} (llhttp) is installed", "", measured)


# -- measurements ----------------------------------------------------------------------------


@_check("ssl-context-cost", ("ms", "openssl", "skipped"))
def _check_ssl_context(context: _Context) -> _Verdict:
    result = _probe(_SSL_COST_PROBE, context, here="ssl" in sys.modules)
    if isinstance(result, str):
        return _Verdict(
            "ok",
            f"building an SSLContext was not measured ({result})"
            + (
                "; surge.doctor.run_checks() inside the program measures it once ssl is imported"
                if context.measure
                else ""
            ),
            "",
            {"ms": None, "openssl": None, "skipped": result},
        )
    measured = {**result, "skipped": None}
    cost = measured["ms"]
    message = (
        f"building an SSLContext with the default CAs costs {cost:.1f} ms here "
        f"({measured['openssl']})"
    )
    if cost < SSL_CONTEXT_WARN_MS:
        return _Verdict("ok", message, "", measured)
    return _Verdict(
        "warn",
        message + f": 1,000 connections that each build one spend {cost:.0f} s on it "
        "(OpenSSL 3 loads CA stores ~5-10x slower than 1.1.1, cpython#95031)",
        "build one ssl.SSLContext per configuration and reuse it for every connection "
        "(requests/urllib3: one Session; aiohttp: one connector; PyMySQL: ssl=context)",
        measured,
    )


def _live_pymysql_connections() -> dict[str, int]:
    """The open PyMySQL connections in this process, by where their TLS context came
    from.  PyMySQL (1.1.1+) given no TLS options connects in its "preferred" mode:
    it builds a context with ``ssl.create_default_context()`` in the constructor and
    sets ``_ssl_required = False``; given ``ssl=`` (a context or a dict) or any
    ``ssl_*`` option it sets ``_ssl_required = True``, and ``ssl_disabled=True``
    leaves it without ``ctx``.  So a context next to ``_ssl_required is False`` is one
    PyMySQL built on that connect, whatever the server then chose - unless it is
    shared: surge.db's pool overrides ``_create_ssl_ctx`` to hand every connection of
    the pool one such context.  Counted: ``built_by_default`` (a context of its own),
    ``default_shared``, ``given_tls`` and ``without_tls``."""
    counts = {
        "live_connections": 0,
        "built_by_default": 0,
        "default_shared": 0,
        "given_tls": 0,
        "without_tls": 0,
    }
    base = getattr(sys.modules.get("pymysql.connections"), "Connection", None)
    if not isinstance(base, type):
        return counts
    default_users: dict[int, int] = {}  # id(context) -> connections holding it
    for connection in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, which evaluates lazy
        # proxies (Django's SimpleLazyObject) and raises from broken ones.
        if not issubclass(type(connection), base):
            continue
        if getattr(connection, "_sock", None) is None:  # closed, or never connected
            continue
        counts["live_connections"] += 1
        if getattr(connection, "ctx", None) is None:
            counts["without_tls"] += 1
        elif getattr(connection, "_ssl_required", True) is False:
            context_id = id(connection.ctx)
            default_users[context_id] = default_users.get(context_id, 0) + 1
        else:
            counts["given_tls"] += 1
    for users in default_users.values():
        counts["built_by_default" if users == 1 else "default_shared"] += users
    return counts


@_check(
    "pymysql-ssl-per-connect",
    (
        "version",
        "imported",
        "live_connections",
        "built_by_default",
        "default_shared",
        "given_tls",
        "without_tls",
        "watching",
        "connects_made",
        "made_built_by_default",
    ),
)
def _check_pymysql(context: _Context) -> _Verdict:
    pymysql = sys.modules.get("pymysql")
    if pymysql is None:
        version = _version("pymysql")
        return _Verdict(
            "ok",
            "PyMySQL is not installed"
            if version is None
            else f"PyMySQL {version} is installed but not imported here: call "
            "surge.doctor.run_checks() inside the program to see its connections",
            "",
            {"version": version, "imported": False, **_live_pymysql_connections(), **_watched()},
        )
    # pymysql.__version__ is the mysqlclient version it poses as (for Django).
    version = getattr(pymysql, "VERSION_STRING", None) or _version("pymysql")
    counts = _live_pymysql_connections()
    watched = _watched()
    measured: dict[str, Any] = {"version": version, "imported": True, **counts, **watched}
    built, live = counts["built_by_default"], counts["live_connections"]
    made, made_built = watched["connects_made"], watched["made_built_by_default"]
    if made_built is not None and made_built >= 2:
        return _Verdict(
            "warn",
            f"{made_built} of the {made} PyMySQL connects since surge.doctor.watch() were "
            "made with no TLS options, so PyMySQL built each its own SSLContext and loaded "
            "the system CA store (ssl-context-cost: what one costs here)",
            _PYMYSQL_FIX,
            measured,
        )
    if built >= 2:
        return _Verdict(
            "warn",
            f"{built} of the {live} open PyMySQL connections here were made with no TLS "
            "options, so PyMySQL built each its own SSLContext and loaded the system CA "
            "store on connect (ssl-context-cost: what one costs here); every new connect "
            "made that way pays it again",
            _PYMYSQL_FIX,
            measured,
        )
    if made is not None:
        seen = f"PyMySQL {version}: {made} connect(s) since surge.doctor.watch()"
    else:
        # Closed connections leave nothing to look at: say so, and how to count them.
        seen = (
            f"PyMySQL {version}: {live} open connection(s) here (connections already "
            "closed are not seen: call surge.doctor.watch() at the program's start to "
            "count every connect)"
        )
    return _Verdict(
        "ok",
        seen
        + (
            f"; open now: {counts['given_tls']} given their TLS options, "
            f"{counts['default_shared']} sharing one default context, "
            f"{counts['without_tls']} without TLS, {built} with a context PyMySQL built for it"
            if live
            else ""
        ),
        "",
        measured,
    )


_PYMYSQL_FIX = (
    "build one ssl.SSLContext and pass ssl=context to every pymysql.connect() (or "
    "ssl_disabled=True where TLS is not wanted), or use a pool that does: "
    "surge.db.pool('mysql://...') builds one per pool"
)


def _watched() -> dict[str, Any]:
    counts = counters.made()
    return {
        "watching": counts is not None,
        "connects_made": None if counts is None else counts["connects"],
        "made_built_by_default": None if counts is None else counts["built_by_default"],
    }


# -- output ----------------------------------------------------------------------------------


def exit_status(findings: Iterable[Finding]) -> int:
    """The CLI's exit status: 1 when any check failed, else 2 when a check itself
    raised (the report is incomplete), else 0."""
    findings = list(findings)
    if any(finding.status == "fail" for finding in findings):
        return 1
    return 2 if any(finding.error is not None for finding in findings) else 0


def format_table(findings: list[Finding], width: int = 100) -> str:
    """The human report: one block per finding, status and id first, the message and
    (when something is wrong) the fix wrapped to ``width`` columns below them."""
    id_width = max((len(finding.id) for finding in findings), default=0)
    indent = " " * (6 + id_width + 2)
    lines = []
    for finding in findings:
        head = f"{finding.status.upper():4}  {finding.id:{id_width}}  "
        lines += textwrap.wrap(
            finding.message, width, initial_indent=head, subsequent_indent=indent
        ) or [head.rstrip()]
        if finding.fix and finding.status != "ok":
            lines += textwrap.wrap(
                f"fix: {finding.fix}", width, initial_indent=indent, subsequent_indent=indent
            )
    return "\n".join(lines)
