"""Checks that measure a cost: building an SSLContext, a TLS handshake, and
PyMySQL connections that each built a context."""

from __future__ import annotations

import gc
import sys
from typing import Any

from surge.doctor import counters
from surge.doctor._probe import _SSL_COST_PROBE, _TLS_HANDSHAKE_PROBE, _probe, _version
from surge.doctor.checks import _check, _Context, _Verdict

#: Building an SSLContext with the default CAs above this is worth avoiding per
#: connection.  OpenSSL 1.1.1 loads a system CA bundle in ~4.5 ms, OpenSSL 3 in
#: ~50 ms (openssl/openssl#16878; measured here: 49 ms).
SSL_CONTEXT_WARN_MS = 10.0


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


#: OpenSSL releases whose handshakes cost about 1.3-2x those of 3.2 and later,
#: aws-lc or rustls (HAProxy's "The state of SSL stacks", 2025, and OpenSSL's
#: own performance issues of 3.0, e.g. openssl/openssl#17627): 3.0 and 3.1.
SLOW_HANDSHAKE_OPENSSL: tuple[tuple[int, int], ...] = ((3, 0), (3, 1))


@_check(
    "tls-handshake-cost",
    ("full_ms", "resumed_ms", "resumed_share", "openssl", "openssl_info", "skipped"),
)
def _check_tls_handshake(context: _Context) -> _Verdict:
    result = _probe(_TLS_HANDSHAKE_PROBE, context, here="ssl" in sys.modules)
    if isinstance(result, str):
        return _Verdict(
            "ok",
            f"a TLS handshake's cost was not measured ({result})",
            "",
            dict.fromkeys(
                ("full_ms", "resumed_ms", "resumed_share", "openssl", "openssl_info"), None
            )
            | {"skipped": result},
        )
    measured = {**result, "skipped": None}
    full, resumed = measured["full_ms"], measured["resumed_ms"]
    message = (
        f"a full TLS 1.3 handshake costs the client {full:.2f} ms of CPU here, a resumed one "
        f"{resumed:.2f} ms ({measured['openssl']})"
    )
    major_minor = tuple(measured["openssl_info"][:2])
    if major_minor not in SLOW_HANDSHAKE_OPENSSL:
        return _Verdict("ok", message, "", measured)
    return _Verdict(
        "warn",
        message + f": OpenSSL {major_minor[0]}.{major_minor[1]}'s handshakes cost about "
        "1.3-2x those of OpenSSL 3.2+, aws-lc or rustls (pyreqwest's), and every new "
        "connection pays one",
        "keep connections open (one client or Session for the run, keep-alive); let TLS "
        "sessions resume (surge's clients do by default; a resumed handshake costs "
        f"{resumed:.2f} ms here); to cut the first handshake too, run a Python linked "
        "with OpenSSL 3.2 or newer (python-build-standalone's builds, as uv installs "
        "them, or a distribution that ships 3.2+)",
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
        origin = counters.tls_origin(connection)
        if origin == "default":
            context_id = id(connection.ctx)
            default_users[context_id] = default_users.get(context_id, 0) + 1
        else:
            counts[origin] += 1
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
