"""What a ``surge`` command imports: run it in a child interpreter and read its
``sys.modules`` when the command is done (issue #38: each command imports only
what it uses).  The tests count modules, they never time them.

``loaded_by(*args)`` returns the surge modules, the third-party packages (top
level) and the heavy standard-library modules the command loaded; a test
compares them with what the command uses, so that a new import on a command's
path - a module-level ``import`` of something only one option needs - fails
here, naming the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: Standard-library modules that cost a millisecond or more to import and that
#: most commands have no use for (each measured with ``python -X importtime``).
HEAVY_STDLIB = frozenset(
    {
        "asyncio",  # ~30 ms with what it imports: the event loop (no --help needs it)
        "ssl",
        "http.cookiejar",  # cookies: with urllib.request, http.client, email: ~15 ms
        "urllib.request",
        "http.client",
        "email.utils",
        "xml.sax",
        "tempfile",
        "ctypes",
        "configparser",
        "importlib.resources",  # the trace page's template
        "html.entities",
        "pathlib",
    }
)

#: Run the command as the console script does, then record what is loaded
#: (before importing json, which the record needs).
_CHILD = """
import sys
out = sys.argv[1]
sys.argv = ["surge", *sys.argv[2:]]
from surge.cli import main
try:
    main()
    status = 0
except SystemExit as e:
    status = e.code
loaded = sorted(sys.modules)
import gc, json
with open(out, "w") as f:
    json.dump({"status": status, "modules": loaded, "frozen": gc.get_freeze_count(),
               "collecting": gc.isenabled()}, f)
"""


@dataclass(frozen=True)
class Loaded:
    status: int | str | None
    surge: frozenset[str]  # surge's own modules
    third_party: frozenset[str]  # top-level packages neither surge's nor the standard library's
    heavy: frozenset[str]  # of HEAVY_STDLIB
    output: str
    frozen: int  # objects in the collector's permanent generation (gc.freeze)
    collecting: bool  # the collector on at the end (gc.isenabled)


def loaded_by(*args: str, tmp: Path, env: dict[str, str] | None = None) -> Loaded:
    """Run ``surge ARGS`` in a child interpreter; what it loaded."""
    record = tmp / "loaded.json"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(record), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    found = json.loads(record.read_text())
    modules = set(found["modules"])
    third = {
        name.partition(".")[0]
        for name in modules
        if not name.startswith(("_", "surge"))
        and name.partition(".")[0] not in sys.stdlib_module_names
        and name != "cython_runtime"  # made by every Cython extension (uvloop's, httptools')
    }
    return Loaded(
        status=found["status"],
        surge=frozenset(m for m in modules if m == "surge" or m.startswith("surge.")),
        third_party=frozenset(third),
        heavy=frozenset(modules & HEAVY_STDLIB),
        output=done.stdout + done.stderr,
        frozen=found["frozen"],
        collecting=found["collecting"],
    )


#: What every command loads: the package, the command line, and what it reports with.
COMMAND_LINE = frozenset(
    {"surge", "surge._version", "surge.cli", "surge.errors", "surge.extras", "surge.sinks"}
    | {"surge.terminal"}
)

#: The HTTP engine as a request to a plain http:// address uses it: no cookie
#: (until a response sets one), no c-ares (until a name is looked up), no proxy
#: (unless one is set), no sync front-end of the client or of the pool.
HTTP_ENGINE = frozenset(
    {
        "surge._keywords",  # the pool's and fetch's options as signatures and checks
        "surge._log",  # surge's loggers, their messages redacted
        "surge.http",
        "surge.http.arguments",
        "surge.http.auth",
        "surge.http.client",
        "surge.http.connection",
        "surge.http.deadlines",
        "surge.http.decoding",
        "surge.http.dnscache",
        "surge.http.gate",
        "surge.http.headers",
        "surge.http.multiplex",  # HTTP/2's streams per origin (h2 itself: not loaded)
        "surge.http.redirects",
        "surge.http.resolver",
        "surge.http.response",
        "surge.http.stream",
        "surge.http.timeout",
        "surge.http.timings",
        "surge.http.tlssession",  # TLS session resumption's per-origin cache (stdlib only)
        "surge.http.url",
        "surge.loops",
        "surge.pool",
        "surge.pool._async",
        "surge.pool._core",
        "surge.pool._fork",
        "surge.pool._keyed_core",
        "surge.pool._options",
        "surge.retry",  # may_resend: the at-most-once rule under every request
    }
)
#: The engine's third-party parts a plain request needs: the command line, the
#: event loop, the HTTP parser (and the namespace package that zstd's backport
#: is found in; found, not loaded).
ENGINE_PACKAGES = frozenset({"click", "uvloop", "httptools", "backports"})
