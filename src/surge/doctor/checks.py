"""The checks behind ``surge doctor``: one function per check, registered in the order they run."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
import textwrap
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]

#: Sockets ``surge fetch`` asks for by default (``-c``), the "typical" concurrency.
TYPICAL_CONCURRENCY = 1000

#: Descriptors kept free besides the sockets: the same allowance ``surge fetch``
#: makes (``surge.bulk.cli.FD_HEADROOM``; not imported: it would load the engine).
FD_HEADROOM = 64

#: Building an SSLContext with the default CAs above this is worth avoiding per
#: connection.  OpenSSL 1.1.1 loads a system CA bundle in ~4.5 ms, OpenSSL 3 in
#: ~50 ms (openssl/openssl#16878; measured here: 49 ms).
SSL_CONTEXT_WARN_MS = 10.0

#: Modules whose gevent patches decide whether network I/O blocks the process.
_IO_MODULES = ("socket", "ssl", "select", "selectors")


@dataclass(frozen=True)
class Finding:
    """One check's result: ``id`` is stable (scripts may match on it), ``fix`` says
    what to do (empty when there is nothing to do), ``measured`` holds the numbers."""

    id: str
    status: Status
    message: str
    fix: str = ""
    measured: dict[str, Any] = field(default_factory=dict)

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


_Check = Callable[[_Context], _Verdict]
_CHECKS: dict[str, _Check] = {}


def _check(check_id: str) -> Callable[[_Check], _Check]:
    def register(function: _Check) -> _Check:
        _CHECKS[check_id] = function
        return function

    return register


def check_ids() -> list[str]:
    """Every check's id, in the order they run."""
    return list(_CHECKS)


def run_checks(
    *, concurrency: int | None = None, only: Iterable[str] | None = None
) -> list[Finding]:
    """Check this interpreter and return one ``Finding`` per check, in order.

    ``concurrency``: the number of connections the program means to hold open
    (``fd-limit`` then fails below it; without it, warns below a typical 1,000).
    ``only``: the id or ids of the checks to run (all by default).  A check that raises
    becomes a ``warn`` finding naming the error; it never stops the others.
    """
    if isinstance(only, str):  # one id, not its characters
        only = [only]
    wanted = list(_CHECKS) if only is None else list(only)
    unknown = [check_id for check_id in wanted if check_id not in _CHECKS]
    if unknown:
        raise ValueError(f"unknown check id(s): {', '.join(unknown)}; known: {', '.join(_CHECKS)}")
    context = _Context(concurrency=concurrency)
    findings = []
    for check_id in _CHECKS:  # registration order: state checks before measurements
        if check_id not in wanted:
            continue
        try:
            verdict = _CHECKS[check_id](context)
        except Exception as e:  # a broken check is a finding, not a crash
            verdict = _Verdict(
                "warn",
                f"the check itself failed: {type(e).__name__}: {e}",
                "report this to surge's maintainers with the message",
            )
        findings.append(
            Finding(check_id, verdict.status, verdict.message, verdict.fix, verdict.measured)
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


@_check("pyopenssl-injected")
def _check_pyopenssl(context: _Context) -> _Verdict:
    injected = _pyopenssl_injected()
    installed = importlib.util.find_spec("OpenSSL") is not None
    if injected is None:
        return _Verdict(
            "ok",
            "urllib3 is not imported in this process, so nothing is injected into it"
            + (" (pyOpenSSL is installed: check inside your program)" if installed else ""),
            "call surge.doctor.run_checks() inside the program, after its imports, to see"
            if installed
            else "",
            {"pyopenssl_installed": installed},
        )
    if not injected:
        return _Verdict("ok", "urllib3 uses the standard ssl module", "", {})
    fix = (
        "remove the call to urllib3.contrib.pyopenssl.inject_into_urllib3() (or call "
        "extract_from_urllib3()); the ssl module has had SNI since Python 3.2 and urllib3 "
        "no longer recommends pyOpenSSL"
    )
    select_patched = "select" in _gevent_saved()
    if "socket" in _gevent_saved() and not select_patched:
        return _Verdict(
            "fail",
            "urllib3 is using pyOpenSSL under gevent with select unpatched: every TLS read "
            "that must wait calls the blocking select/poll (urllib3.util.wait_for_read), "
            "so HTTPS requests run one after another",
            fix + "; and let gevent patch select (patch_all() without select=False)",
            {"gevent_select_patched": False},
        )
    return _Verdict(
        "warn",
        "urllib3 is using pyOpenSSL: every TLS read and write goes through a Python "
        "wrapper over cffi instead of the ssl module's C code",
        fix,
        {"gevent_select_patched": select_patched},
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


@_check("gevent-late-patch")
def _check_gevent_late(context: _Context) -> _Verdict:
    saved = _gevent_saved()
    if not any(module_name in saved for module_name in _IO_MODULES):
        return _Verdict("ok", "gevent has not patched socket, ssl or select here")
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


@_check("gevent-partial-patch")
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


@_check("fd-limit")
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
    if hard == unlimited or hard >= needed:
        fix = (
            f"raise the soft limit: 'ulimit -n {needed}' in the shell (the hard limit allows "
            f"it), or resource.setrlimit(resource.RLIMIT_NOFILE, ({needed}, hard)) at start-up"
            " (surge fetch raises it to the hard limit itself)"
        )
    else:
        fix = (
            f"the hard limit ({hard}) is below {needed}: raise it for the service "
            f"(systemd LimitNOFILE={needed}, docker --ulimit nofile={needed}, "
            "/etc/security/limits.conf), then the soft one"
        )
    given = context.concurrency is not None
    return _Verdict(
        "fail" if given else "warn",
        f"the open-files limit is {soft}: {concurrency:,} connections"
        + ("" if given else " (a typical bulk concurrency)")
        + f" need {needed}; past the limit every new connection fails with EMFILE"
        " ('Too many open files')",
        fix,
        measured,
    )


def _installed(module: str) -> str | None:
    """The installed version of ``module``'s distribution, or None if it cannot be imported."""
    if importlib.util.find_spec(module) is None:
        return None
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "unknown version"


@_check("event-loop")
def _check_event_loop(context: _Context) -> _Verdict:
    if sys.platform == "win32":  # pragma: no cover - no uvloop there
        return _Verdict("ok", "uvloop does not run on Windows; asyncio's loop it is")
    version = _installed("uvloop")
    if version is None:
        return _Verdict(
            "warn",
            "uvloop is not installed: asyncio programs (and surge's engine) run on asyncio's "
            "default loop, which spends several times more CPU per socket event",
            "pip install uvloop (or 'surge[http]'); surge uses it by itself when installed",
            {"uvloop": None},
        )
    measured: dict[str, Any] = {"uvloop": version}
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None:  # only when the program loaded it: importing it imports ssl
        with warnings.catch_warnings():  # policies are deprecated from Python 3.14
            warnings.simplefilter("ignore", DeprecationWarning)
            measured["asyncio_policy"] = type(asyncio.get_event_loop_policy()).__module__
    on_default_loop = not measured.get("asyncio_policy", "uvloop").startswith("uvloop")
    return _Verdict(
        "ok",
        f"uvloop {version} is installed and surge's engine uses it"
        + (
            "; asyncio.run() in this process still runs asyncio's own loop (uvloop.run() "
            "or uvloop.install() would not)"
            if on_default_loop
            else ""
        ),
        "",
        measured,
    )


@_check("http-parser")
def _check_http_parser(context: _Context) -> _Verdict:
    version = _installed("httptools")
    if version is None:
        return _Verdict(
            "warn",
            "httptools (the C llhttp parser) is not installed: surge's HTTP client needs it, "
            "and pure-Python parsing costs more CPU than the request itself at bulk rates",
            "pip install httptools (or 'surge[http]')",
            {"httptools": None},
        )
    return _Verdict("ok", f"httptools {version} (llhttp) is installed", "", {"httptools": version})


# -- measurements ----------------------------------------------------------------------------


def _measure_ssl_context() -> dict[str, Any]:
    import ssl

    costs = []
    for _ in range(3):
        started = time.perf_counter()
        ssl.create_default_context()
        costs.append((time.perf_counter() - started) * 1000)
    return {"ms": round(min(costs), 2), "openssl": ssl.OPENSSL_VERSION}


def _measure_pymysql() -> dict[str, Any]:
    """What PyMySQL's constructor does about TLS when given no TLS options: it builds
    its context there, so ``defer_connect=True`` measures it without a server."""
    import pymysql.connections

    contexts, costs = [], []
    for _ in range(2):
        started = time.perf_counter()
        connection = pymysql.connections.Connection(defer_connect=True)
        costs.append((time.perf_counter() - started) * 1000)
        contexts.append(getattr(connection, "ctx", None))
    per_connect = contexts[0] is not None and contexts[0] is not contexts[1]
    return {
        # pymysql.__version__ is the mysqlclient version it poses as (for Django).
        "version": getattr(pymysql, "VERSION_STRING", None),
        "context_per_connect": per_connect,
        "ms": round(min(costs), 2),
    }


_MEASUREMENTS: dict[str, Callable[[], dict[str, Any]]] = {
    "ssl": _measure_ssl_context,
    "pymysql": _measure_pymysql,
}


def _measure(name: str, needs: str) -> dict[str, Any]:
    """Run a measurement here if ``needs`` is already imported, else in a child
    interpreter, so that looking never imports ssl or a driver into the program."""
    if needs in sys.modules:
        return _MEASUREMENTS[name]()
    import subprocess

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    code = f"import json, surge.doctor.checks as d; print(json.dumps(d._MEASUREMENTS[{name!r}]()))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"measuring in a child interpreter failed: {last}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@_check("ssl-context-cost")
def _check_ssl_context(context: _Context) -> _Verdict:
    measured = _measure("ssl", needs="ssl")
    cost = measured["ms"]
    fix = (
        "build one ssl.SSLContext per configuration and reuse it for every connection "
        "(requests/urllib3: one Session; aiohttp: one connector; PyMySQL: ssl=context)"
    )
    message = (
        f"building an SSLContext with the default CAs costs {cost:.1f} ms here "
        f"({measured['openssl']})"
    )
    if cost < SSL_CONTEXT_WARN_MS:
        return _Verdict("ok", message, fix, measured)
    return _Verdict(
        "warn",
        message + f": 1,000 connections that each build one spend {cost:.0f} s on it "
        "(OpenSSL 3 loads CA stores ~5-10x slower than 1.1.1, cpython#95031)",
        fix,
        measured,
    )


def _live_pymysql_contexts() -> tuple[int, int]:
    """(open PyMySQL connections that built or were given an SSL context, how many of
    them hold a context no other one shares).  The context is built before the
    server says whether it offers TLS, so a connection that ended up in plain text
    counts too: it paid."""
    connections = sys.modules.get("pymysql.connections")
    base = getattr(connections, "Connection", None)
    if not isinstance(base, type):
        return 0, 0
    contexts = []
    for connection in gc.get_objects():
        if isinstance(connection, base):
            ctx = getattr(connection, "ctx", None)
            if ctx is not None and getattr(connection, "_sock", None) is not None:  # open
                contexts.append(ctx)
    users = Counter(id(ctx) for ctx in contexts)
    return len(contexts), sum(1 for count in users.values() if count == 1)


@_check("pymysql-ssl-per-connect")
def _check_pymysql(context: _Context) -> _Verdict:
    if "pymysql" not in sys.modules and importlib.util.find_spec("pymysql") is None:
        return _Verdict("ok", "PyMySQL is not installed")
    fix = (
        "build one ssl.SSLContext and pass ssl=context to every pymysql.connect() (or "
        "ssl_disabled=True where TLS is not wanted), or use a pool that does: "
        "surge.db.pool('mysql://...') builds one per pool"
    )
    live, own = _live_pymysql_contexts()
    measured = _measure("pymysql", needs="pymysql")
    measured.update(live_connections_with_context=live, live_own_contexts=own)
    if own >= 2:
        return _Verdict(
            "fail",
            f"{own} of the {live} open PyMySQL connections here hold an SSL context of their "
            f"own: each of those connects built one (~{measured['ms']:.0f} ms each here)",
            fix,
            measured,
        )
    if not measured["context_per_connect"]:
        return _Verdict(
            "ok",
            f"PyMySQL {measured['version']} builds no SSL context when given no TLS options",
            "",
            measured,
        )
    return _Verdict(
        "warn",
        f"PyMySQL {measured['version']} builds a new SSLContext and loads the system CA store "
        f"on every connect given no TLS options (its 'preferred' TLS): {measured['ms']:.1f} ms "
        "per connect here, many times the login itself",
        fix,
        measured,
    )


# -- output ----------------------------------------------------------------------------------


def exit_status(findings: Iterable[Finding]) -> int:
    """1 when any check failed, else 0 (the CLI's exit status)."""
    return 1 if any(finding.status == "fail" for finding in findings) else 0


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
