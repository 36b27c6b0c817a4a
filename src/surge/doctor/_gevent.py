"""Checks of gevent's monkey-patching and of pyOpenSSL injected into urllib3:
what makes a gevent program's network I/O wait one request at a time."""

from __future__ import annotations

import gc
import importlib.util
import sys
from typing import Any

from surge.doctor.checks import Status, _check, _Context, _Verdict

#: Modules whose gevent patches decide whether network I/O blocks the process.
_IO_MODULES = ("socket", "ssl", "select", "selectors")


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
