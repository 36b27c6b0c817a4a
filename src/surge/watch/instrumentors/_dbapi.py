"""DB-API connects and statements: PyMySQL, mysqlclient (``MySQLdb``), psycopg 3
(sync and async) and aiomysql.  None of these drivers has a hook for either, so
these are wrappers, one instrumentor per driver.

A connect is one operation (TCP, TLS and the login; the socket floor's TCP and
TLS events become its phases); a statement is one operation from ``execute``
until it returns (a buffered cursor has read its rows by then).

What a statement is recorded as: its verb and the table it names
(``SELECT users``), from :func:`statement`; never its text, which may carry
values, and never its parameters.
"""

from __future__ import annotations

import contextlib
import re
from types import ModuleType
from typing import Any

from surge.watch.instrument import Instrumentor, error_class, failed
from surge.watch.recorder import clock

#: Characters of a statement looked at for its verb and table.
LOOK = 2000
_LITERALS = re.compile(
    r"'(?:[^'\\]|\\.|'')*'?|\"(?:[^\"\\]|\\.)*\"?|--[^\n]*|/\*.*?(?:\*/|$)", re.S
)
_VERB = re.compile(r"\s*\(?\s*([A-Za-z]{2,20})\b")
_NAME = r"\s+((?:`[^`]{1,64}`|[A-Za-z_][\w$]{0,63})(?:\.(?:`[^`]{1,64}`|[A-Za-z_][\w$]{0,63}))?)"
_TABLE = {
    "SELECT": re.compile(r"\bFROM" + _NAME, re.I),
    "DELETE": re.compile(r"\bFROM" + _NAME, re.I),
    "INSERT": re.compile(r"\bINTO" + _NAME, re.I),
    "REPLACE": re.compile(r"\bINTO" + _NAME, re.I),
    "UPDATE": re.compile(r"^\s*\(?\s*UPDATE" + _NAME, re.I),
    "COPY": re.compile(r"^\s*COPY" + _NAME, re.I),
}


#: Statements parsed, kept by their text (as many at most; then begun afresh).
SEEN = 4096
_SEEN: dict[str, tuple[str, int | None]] = {}
#: Digits, dropped from a statement's shape (``WHERE id = 42`` is ``id = ``).
_DIGITS = str.maketrans("", "", "0123456789")


def statement(query: Any) -> str:
    """``SELECT users``: a statement's verb and table, with string literals and
    comments removed first, so that nothing of a value can come through."""
    return statement_and_shape(query)[0]


def statement_and_shape(query: Any) -> tuple[str, int | None]:
    """:func:`statement`, and the statement's shape: a hash of its text without
    literals, comments and digits, the same for statements that differ only in
    their values (what n-plus-one compares); None for a composed statement."""
    if isinstance(query, str):
        known = _SEEN.get(query)  # a loop's statement: parsed once
        if known is not None:
            return known
    elif isinstance(query, bytes | bytearray | memoryview):
        query = bytes(query[:LOOK]).decode("utf-8", "replace")
    else:
        return "SQL", None  # a composed statement (psycopg.sql): not rendered
    text = _LITERALS.sub(" ", query[:LOOK])
    parsed = _what(text), hash(text.translate(_DIGITS))
    if len(query) <= LOOK:
        if len(_SEEN) >= SEEN:
            _SEEN.clear()
        _SEEN[query] = parsed
    return parsed


def _values(query: Any, args: tuple[Any, ...]) -> int:
    """A hash of a statement and its parameters: the same for the same statement
    with the same values (a poll, a loop that asks the same thing again), which
    n-plus-one does not count."""
    params = args[0] if args else None
    try:
        return hash((query, params))
    except TypeError:  # a list or dict of parameters
        return hash((query, repr(params)[:LOOK]))


def _what(text: str) -> str:
    verb_match = _VERB.match(text)
    if verb_match is None:
        return "SQL"
    verb = verb_match.group(1).upper()
    table = _TABLE.get(verb)
    found = table.search(text) if table is not None else None
    if verb == "SELECT" and found is None:
        return "SELECT"
    return f"{verb} {found.group(1).strip('`')}" if found is not None else verb


def _first(args: tuple[Any, ...], result: Any) -> Any:
    """``link`` for a connection's own method: the connection is ``self``."""
    return args[0] if args else None


def _returned(args: tuple[Any, ...], result: Any) -> Any:
    """``link`` for a connect that returns its connection."""
    return result


def _cursor_attribute(name: str) -> Any:
    """``link`` for a cursor's method: its connection, in its attribute ``name``."""

    def link(args: tuple[Any, ...], result: Any) -> Any:
        return getattr(args[0], name, None) if args else None

    return link


class _Driver(Instrumentor):
    """What the drivers share: a call timed as a connect or a statement.
    ``describe(*args, **kwargs)`` names it: ``(peer, what)``; ``link(args,
    result)`` names the connection it opened or ran on (None: the caller stands
    for it), so that connect-per-query counts statements per connection
    whichever pool handed the connection out."""

    def _record(
        self,
        kind: str,
        describe: Any,
        link: Any,
        start: float,
        error: str | None,
        args: Any,
        kwargs: Any,
        result: Any = None,
    ) -> None:
        try:
            peer, what, *shape = describe(*args, **kwargs)
            connection = link(args, result) if link is not None else None
            self.recorder.db_end(
                kind,
                self.library,
                peer,
                what,
                start,
                clock(),
                error,
                shape[0] if shape else None,
                None if connection is None else id(connection),
            )
        except Exception:
            failed(f"{self.library} {kind}")

    def timed(self, kind: str, describe: Any, link: Any = None) -> Any:
        """A wrapper maker: ``original(*args, **kwargs)`` timed as ``kind``."""

        def make(original: Any) -> Any:
            instrumentor = self

            def call(*args: Any, **kwargs: Any) -> Any:
                if not instrumentor.on:
                    return original(*args, **kwargs)
                start = clock()
                instrumentor.recorder.db_start(start)
                try:
                    result = original(*args, **kwargs)
                except BaseException as e:
                    instrumentor._record(kind, describe, link, start, error_class(e), args, kwargs)
                    raise
                instrumentor._record(kind, describe, link, start, None, args, kwargs, result)
                return result

            call.__wrapped__ = original  # type: ignore[attr-defined]
            return call

        return make

    def timed_async(self, kind: str, describe: Any, link: Any = None) -> Any:
        """:meth:`timed` for a coroutine function."""

        def make(original: Any) -> Any:
            instrumentor = self

            async def call(*args: Any, **kwargs: Any) -> Any:
                if not instrumentor.on:
                    return await original(*args, **kwargs)
                start = clock()
                instrumentor.recorder.db_start(start)
                try:
                    result = await original(*args, **kwargs)
                except BaseException as e:
                    instrumentor._record(kind, describe, link, start, error_class(e), args, kwargs)
                    raise
                instrumentor._record(kind, describe, link, start, None, args, kwargs, result)
                return result

            return call

        return make


def _statement_of(peer_of: Any) -> Any:
    """``describe`` for ``execute(cursor, query, ...)``."""

    def describe(
        cursor: Any, query: Any = None, *args: Any, **kwargs: Any
    ) -> tuple[str, str, tuple[int, int] | None]:
        what, shape = statement_and_shape(query)
        if shape is None:
            return peer_of(cursor), what, None
        return peer_of(cursor), what, (shape, _values(query, args))

    return describe


def _connect_of(peer_of: Any) -> Any:
    def describe(*args: Any, **kwargs: Any) -> tuple[str, str]:
        return peer_of(*args, **kwargs), "connect"

    return describe


def _host_port(host: Any, port: Any, default_port: int, unix: Any = None) -> str:
    if unix:
        return f"unix:{str(unix)[:200]}"
    return f"{host or 'localhost'}:{port or default_port}"


class PyMySQLInstrumentor(_Driver):
    """A PyMySQL connect is ``Connection.__init__`` (which builds the TLS context,
    an SSLContext per connection unless one is given, then calls ``connect``),
    and ``connect`` called on its own (``defer_connect``, a reconnect)."""

    library = "pymysql"
    shown = ("databases", ("PyMySQL",))
    modules = ("pymysql.connections", "pymysql.cursors")
    _INIT = "_surge_watch_init"

    def apply(self, module: ModuleType) -> None:
        if module.__name__ == "pymysql.connections":
            self.replace(module.Connection, "__init__", self._init)
            connect = self.timed("db.connect", _connect_of(self._conn_peer), _first)
            self.replace(module.Connection, "connect", lambda f: self._outside_init(connect(f)))
        else:
            on = _cursor_attribute("connection")
            execute = self.timed("db.query", _statement_of(self._peer), on)
            self.replace(module.Cursor, "execute", execute)

    def _init(self, original: Any) -> Any:
        timed = self.timed("db.connect", _connect_of(self._conn_peer), _first)(original)
        init = self._INIT

        def __init__(connection: Any, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("defer_connect"):  # no connect here: connect() is timed later
                return original(connection, *args, **kwargs)  # type: ignore[no-any-return]
            connection.__dict__[init] = True
            try:
                timed(connection, *args, **kwargs)
            finally:
                connection.__dict__.pop(init, None)

        return __init__

    def _outside_init(self, timed: Any) -> Any:
        original = timed.__wrapped__ if hasattr(timed, "__wrapped__") else None
        init = self._INIT

        def connect(connection: Any, *args: Any, **kwargs: Any) -> Any:
            if connection.__dict__.get(init) and original is not None:
                return original(connection, *args, **kwargs)  # timed as the __init__
            return timed(connection, *args, **kwargs)

        return connect

    @staticmethod
    def _conn_peer(connection: Any, *args: Any, **kwargs: Any) -> str:
        return _host_port(
            getattr(connection, "host", kwargs.get("host")),
            getattr(connection, "port", kwargs.get("port")),
            3306,
            getattr(connection, "unix_socket", kwargs.get("unix_socket")),
        )

    def _peer(self, cursor: Any) -> str:
        connection = cursor.connection
        return self._conn_peer(connection) if connection is not None else "?"


class MySQLdbInstrumentor(_Driver):
    library = "mysqlclient"
    shown = ("databases", ("mysqlclient",))
    modules = ("MySQLdb.connections", "MySQLdb.cursors")

    def apply(self, module: ModuleType) -> None:
        if module.__name__ == "MySQLdb.connections":
            connect = self.timed("db.connect", _connect_of(self._conn_peer), _first)
            self.replace(module.Connection, "__init__", connect)
        else:
            on = _cursor_attribute("connection")
            execute = self.timed("db.query", _statement_of(self._peer), on)
            self.replace(module.BaseCursor, "execute", execute)

    @staticmethod
    def _conn_peer(connection: Any, *args: Any, **kwargs: Any) -> str:
        # MySQLdb.connect(host, user, passwd, db, port, unix_socket, ...) or keywords
        names = ("host", "user", "passwd", "db", "port", "unix_socket")
        given = dict(zip(names, args, strict=False))
        host = kwargs.get("host", given.get("host"))
        port = kwargs.get("port", given.get("port"))
        unix = kwargs.get("unix_socket", given.get("unix_socket"))
        peer = _host_port(host, port, 3306, unix)
        with contextlib.suppress(Exception):
            connection.__dict__["_surge_watch_peer"] = peer
        return peer

    @staticmethod
    def _peer(cursor: Any) -> str:
        try:
            return str(cursor.connection.__dict__.get("_surge_watch_peer", "?"))
        except Exception:
            return "?"


def _conninfo_peer(conninfo: Any = "", **kwargs: Any) -> str:
    """host:port of a psycopg connect's arguments (psycopg's own parser)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(conninfo or "", **kwargs)
    except Exception:
        return "?"
    host = str(params.get("host") or params.get("hostaddr") or "")
    if host.startswith("/"):
        return f"unix:{host[:200]}:{params.get('port') or 5432}"
    return _host_port(host, params.get("port"), 5432)


def _psycopg_cursor_peer(cursor: Any) -> str:
    try:
        info = cursor.connection.info
        host = info.host
        return f"unix:{host}:{info.port}" if host.startswith("/") else f"{host}:{info.port}"
    except Exception:
        return "?"


class PsycopgInstrumentor(_Driver):
    library = "psycopg"
    shown = ("databases", ("psycopg",))
    modules = ("psycopg",)

    def apply(self, module: ModuleType) -> None:
        def peer(cls: Any, conninfo: Any = "", **kwargs: Any) -> str:
            return _conninfo_peer(conninfo, **kwargs)

        def classmethod_of(make: Any) -> Any:
            def wrap(descriptor: Any) -> Any:
                return classmethod(make(descriptor.__func__))

            return wrap

        describe = _connect_of(peer)
        # psycopg.connect is Connection.connect bound when psycopg was imported
        unbound = _connect_of(_conninfo_peer)
        self.replace(module, "connect", self.timed("db.connect", unbound, _returned))
        connect = classmethod_of(self.timed("db.connect", describe, _returned))
        self.replace(module.Connection, "connect", connect)
        connect_async = classmethod_of(self.timed_async("db.connect", describe, _returned))
        self.replace(module.AsyncConnection, "connect", connect_async)
        query = _statement_of(_psycopg_cursor_peer)
        on = _cursor_attribute("connection")
        for name in ("execute", "executemany"):
            self.replace(module.Cursor, name, self.timed("db.query", query, on))
            self.replace(module.AsyncCursor, name, self.timed_async("db.query", query, on))


class AiomysqlInstrumentor(_Driver):
    library = "aiomysql"
    shown = ("databases", ("aiomysql",))
    modules = ("aiomysql.connection", "aiomysql.cursors")

    def apply(self, module: ModuleType) -> None:
        if module.__name__ == "aiomysql.connection":
            connect = self.timed_async("db.connect", _connect_of(self._conn_peer), _first)
            self.replace(module.Connection, "_connect", connect)
        else:
            on = _cursor_attribute("_connection")
            execute = self.timed_async("db.query", _statement_of(self._peer), on)
            self.replace(module.Cursor, "execute", execute)

    @staticmethod
    def _conn_peer(connection: Any, *args: Any, **kwargs: Any) -> str:
        return _host_port(
            getattr(connection, "_host", None),
            getattr(connection, "_port", None),
            3306,
            getattr(connection, "_unix_socket", None),
        )

    def _peer(self, cursor: Any) -> str:
        connection = getattr(cursor, "_connection", None)
        return self._conn_peer(connection) if connection is not None else "?"


def _asyncpg_addr(addr: Any) -> str:
    """host:port of an asyncpg address: a (host, port) pair, or a Unix socket's path."""
    if isinstance(addr, str):
        return f"unix:{addr[:200]}"
    try:
        host, port = addr[0], addr[1]
    except Exception:
        return "?"
    return _host_port(host, port, 5432)


def _asyncpg_peer(connection: Any) -> str:
    return _asyncpg_addr(getattr(connection, "_addr", None))


def _asyncpg_statement(
    connection: Any, query: Any = None, *args: Any, **kwargs: Any
) -> tuple[str, str, tuple[int, int] | None]:
    """``describe`` for ``Connection.fetch(query, *args)`` and the like: asyncpg's
    parameters are the positional arguments after the query, all of them."""
    what, shape = statement_and_shape(query)
    peer = _asyncpg_peer(connection)
    if shape is None:
        return peer, what, None
    return peer, what, (shape, _values(query, (args,)))


def _asyncpg_prepared(
    statement: Any, *args: Any, **kwargs: Any
) -> tuple[str, str, tuple[int, int] | None]:
    """``describe`` for a PreparedStatement's ``fetch(*args)`` and the like."""
    try:
        query, connection = statement.get_query(), statement._connection
    except Exception:
        return "?", "SQL", None
    return _asyncpg_statement(connection, query, *args)


class AsyncpgInstrumentor(_Driver):
    """asyncpg, which is no DB-API driver: a connect is one attempt at one
    address (``connect_utils._connect_addr``, which ``asyncpg.connect``, a
    pool's new connections and a ``connect=`` of a pool's own all come
    through; a list of hosts is an attempt each); a statement is a call of a
    Connection's ``execute``, ``executemany``, ``fetch``, ``fetchrow``,
    ``fetchval``, ``fetchmany`` or ``prepare`` (a Pool's are its connection's),
    or of a PreparedStatement's.  Not recorded: cursors' fetches and the COPY
    methods (their time shows in the socket floor only)."""

    library = "asyncpg"
    shown = ("databases", ("asyncpg",))
    modules = ("asyncpg.connect_utils", "asyncpg.connection", "asyncpg.prepared_stmt")
    STATEMENTS = ("execute", "executemany", "fetch", "fetchrow", "fetchval", "fetchmany")

    def apply(self, module: ModuleType) -> None:
        if module.__name__ == "asyncpg.connect_utils":
            describe = _connect_of(lambda *args, addr=None, **kwargs: _asyncpg_addr(addr))
            connect = self.timed_async("db.connect", describe, _returned)
            self.replace(module, "_connect_addr", connect)
        elif module.__name__ == "asyncpg.connection":
            query = self.timed_async("db.query", _asyncpg_statement, _first)
            for name in (*self.STATEMENTS, "prepare"):
                self.replace(module.Connection, name, query)
        else:
            on = _cursor_attribute("_connection")  # a PreparedStatement's
            prepared = self.timed_async("db.query", _asyncpg_prepared, on)
            for name in self.STATEMENTS[1:]:
                self.replace(module.PreparedStatement, name, prepared)
