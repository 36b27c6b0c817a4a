"""Checks of the runtime's limits and fast parts: the open-files limit, the event
loop, the HTTP parser."""

from __future__ import annotations

import sys
from typing import Any

# The descriptors surge fetch keeps free besides its sockets (limits.py imports
# nothing but ``resource``: looking still loads nothing the checks look at).
from surge.bulk.limits import FD_HEADROOM
from surge.doctor._probe import _import_error, _version
from surge.doctor.checks import _check, _Context, _Verdict

#: Sockets ``surge fetch`` asks for by default (``-c``), the "typical" concurrency.
TYPICAL_CONCURRENCY = 1000


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
            "pip install uvloop (a dependency of surge's: reinstall surge); surge uses it "
            "by itself when installed",
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
    fix = "pip install httptools (a dependency of surge's: reinstall surge)"
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
