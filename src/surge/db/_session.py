"""A connection back in the pool becomes a fresh session, and nobody waits for it.

Whatever a user of a pooled connection set or held in its session reaches the
next user unless the pool undoes it: variables and modes (``sql_mode``,
``search_path``, the time zone, ``SET NAMES``, ``SET ROLE``, a tenant id an
application keeps in a custom setting), the current database, temporary
tables, prepared statements, cursors held open, named, table and advisory
locks, ``LISTEN``.  Judging from the statements sent whether a session may be
dirty cannot be made right (``SELECT GET_LOCK('x', 0)``, ``SELECT
set_config(...)``, or a stored function doing either), so every connection
that ran anything is reset when it comes back, by the server's own reset:

* MySQL/MariaDB: ``COM_RESET_CONNECTION`` (MySQL 5.7.3+, MariaDB 10.2.4+) rolls
  back, drops temporary tables, releases named and table locks, deallocates
  prepared statements and resets session variables to the server's defaults.
  It keeps the current database, restores the handshake's character set and the
  server's autocommit, so the pool sends after it ``COM_INIT_DB`` of the pool's
  database, one ``SET NAMES ..., autocommit=...`` (and ``sql_mode`` when the
  driver was given one), the driver's ``init_command`` and the pool's
  ``init_sql``.
* PostgreSQL: ``ROLLBACK`` (only if a transaction is open) and ``DISCARD ALL``
  (pgbouncer's ``server_reset_query``: ``CLOSE ALL``, ``SET SESSION
  AUTHORIZATION DEFAULT``, ``RESET ALL``, ``DEALLOCATE ALL``, ``UNLISTEN *``,
  ``pg_advisory_unlock_all()``, ``DISCARD PLANS/TEMP/SEQUENCES``), then the
  pool's ``init_sql``, each followed by a Sync in libpq's pipeline mode.  When
  psycopg's cache holds statements of its own, its parts instead, but for
  ``DEALLOCATE ALL``, in one simple-protocol query (init_sql in it too): the
  driver's statements are kept, every other one deallocated (``pg_reset``;
  asyncpg's reset shares the sequence).  A
  custom setting (``app.tenant``) survives ``DISCARD ALL`` as an empty string,
  which PostgreSQL gives no way to undo: empty is as good as unset to
  ``current_setting('app.tenant', true)``.

No round trip on anyone's path.  The reset is written at return, in one send,
without waiting for its answers: the returning thread pays a system call.  Its
answers are read at the next checkout when the connection idled long enough for
them to be there (MySQL), or at every checkout (PostgreSQL: libpq must leave
pipeline mode before psycopg can use the connection); on a connection checked
out again at once (MySQL), they are read just after the next command went out
behind them, so the server's reset overlaps the client's own work and costs no
wait.

The driver's side of the session is put back too (psycopg's ``row_factory``,
``isolation_level``, ``read_only``, ``prepare_threshold``, adapters and
handlers; PyMySQL's and mysqlclient's charset, autocommit and converters): a
``ClientState`` is taken when the session is ready (after the pool's init, and
again after glue's - SQLAlchemy's connect events, Django's connection setup)
and compared at every return, which costs one tuple comparison when nothing
changed.

A connection whose protocol state is unknown - results left unread, a COPY in
progress, a command interrupted mid-packet - is never waited on: it is
*severed* (its descriptor pointed at a dead socket, which closes the server's
end here at once) and discarded.  A forked child severs every connection it
inherited the same way (surge.pool._fork), so nothing the child does, not even
a polite close, reaches its parent's sessions.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
import re
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from surge._keywords import keywords_of, named_refusals, refuse_unknown
from surge._log import logger as get_logger
from surge.errors import UsageError
from surge.pool import _fork

log = get_logger("surge.db")
# -- the driver's side of the session --------------------------------------------------


class ClientState:
    """The values of a connection's client-side attributes when its session was
    ready; ``restore`` puts back whatever a user changed.  Attributes holding a
    dict or list (PyMySQL's converters, psycopg's handlers) are compared by
    content, since a user may change them in place."""

    __slots__ = ("containers", "get", "names", "values")

    def __init__(self, conn: Any, names: Sequence[str]) -> None:
        self.names = tuple(n for n in names if hasattr(conn, n))
        self.get = operator.attrgetter(*self.names) if len(self.names) > 1 else None
        self.values = tuple(getattr(conn, n) for n in self.names)
        self.containers = tuple(
            (n, _copy(v)) for n, v in zip(self.names, self.values, strict=True) if _mutable(v)
        )

    def restore(self, conn: Any) -> bool:
        """Put the attributes back; True if any had changed."""
        changed = False
        names, values = self.names, self.values
        get = self.get
        now = get(conn) if get is not None else tuple(getattr(conn, n) for n in names)
        if now != values:  # identity first, element by element: cheap when equal
            changed = True
            for name, old, new in zip(names, values, now, strict=True):
                if new is not old:
                    setattr(conn, name, old)
        for name, saved in self.containers:
            if getattr(conn, name) != saved:
                changed = True
                setattr(conn, name, _copy(saved))
                self.values = tuple(
                    getattr(conn, n) if n == name else v
                    for n, v in zip(names, self.values, strict=True)
                )
        return changed


def _mutable(value: Any) -> bool:
    return type(value) in (dict, list)


def _copy(value: Any) -> Any:
    return dict(value) if type(value) is dict else list(value)


def session_of(conn: Any) -> int:
    """Which session of ``conn`` this is: moved on by every reset sent (glue that
    set a session up compares it with what it saw)."""
    return int(getattr(conn, "_surge_session_no", 0))


def next_session(conn: Any) -> None:
    # A class without __dict__ (sqlite3) has no session number; try/except, not
    # contextlib.suppress, which costs 0.7 us on every return.
    try:  # noqa: SIM105
        conn._surge_session_no = getattr(conn, "_surge_session_no", 0) + 1
    except AttributeError:
        pass


# -- severing: a connection that must never be used again, whatever touches it ---------

_dead = threading.local()


def _dead_fd() -> int:
    """A socket whose peer is closed (writes fail with EPIPE, reads see EOF), one per
    process (a child makes its own: the parent's may be closed)."""
    pid = os.getpid()
    if getattr(_dead, "pid", None) != pid:
        alive, peer = socket.socketpair()
        peer.close()
        _dead.pid, _dead.sock = pid, alive
    fd: int = _dead.sock.fileno()
    return fd


def sever_fd(fd: int | None) -> None:
    """Point ``fd`` at a dead socket.  In the process that opened the connection,
    this closes it at the socket (the server sees the end at once, nothing is
    sent); in a forked child, only the child's copy: the parent's session goes
    on.  Whatever later writes to ``fd`` - a driver's polite close, its
    finaliser - reaches nothing."""
    if fd is None or fd < 0:
        return
    with contextlib.suppress(OSError):
        os.dup2(_dead_fd(), fd)


def socket_identity(fd: int | None) -> tuple[int, int] | None:
    """``fd`` and the inode of the socket it names now: what a cut made later
    (by the watchdog, after an interruption) checks, so that it never ends the
    socket that has since taken the same number (another connection's)."""
    if fd is None or fd < 0:
        return None
    try:
        return fd, os.fstat(fd).st_ino
    except OSError:
        return None


def cut_fd(fd: int | None) -> None:
    """``cut`` of the socket on ``fd`` now."""
    cut(socket_identity(fd))


def cut(identity: tuple[int, int] | None) -> None:
    """End the connection whose socket ``identity`` names (``socket_identity``),
    in the process that opened it, if that socket is still on its descriptor:
    shut it down (a thread blocked reading or polling it in C - libmariadb's
    reset - wakes with EOF; dup2 alone leaves it waiting on the old socket),
    then point the descriptor at a dead socket (``sever_fd``).  A descriptor
    that names another socket by now is left alone.  Never in a forked child:
    shutdown would end the parent's session too."""
    if identity is None:
        return
    fd, inode = identity
    # Through a descriptor of its own, which pins the socket while it is checked
    # (shutdown(2) ends the socket, whichever descriptor names it); a socket
    # object on ``fd`` itself, left undetached by an interruption, would close
    # ``fd`` when collected - when that number may be another connection's.
    try:
        own = os.dup(fd)
    except OSError:
        return  # closed: nothing to cut
    with contextlib.suppress(OSError), socket.socket(fileno=own) as sock:
        if os.fstat(own).st_ino != inode:
            return  # the number is another socket's now
        sock.shutdown(socket.SHUT_RDWR)
        if os.fstat(fd).st_ino == inode:
            sever_fd(fd)


def release_owned(lock: threading.RLock) -> None:
    """Release ``lock`` if this thread holds it (an RLock: a Lock cannot say who
    holds it): the ``finally`` of an ``acquire(timeout=...)`` made inside its
    ``try``, so that an interruption landing anywhere - before the lock is
    taken, or after it is and before the caller could note it - never leaves it
    held (a held connection lock stops every later checkout and close of that
    connection)."""
    if lock._is_owned():  # type: ignore[attr-defined]
        lock.release()


# -- MySQL: what the reset writes ---------------------------------------------------------

COM_INIT_DB = 0x02
COM_QUERY = 0x03
COM_RESET_CONNECTION = 0x1F
#: The largest payload of one protocol packet (a longer statement would be split).
_MAX_PAYLOAD = 2**24 - 2

_NAME = re.compile(r"[A-Za-z0-9_]+")


def _packet(command: int, payload: bytes = b"") -> bytes:
    size = len(payload) + 1
    if size > _MAX_PAYLOAD:
        raise UsageError("a statement of the pool's session set-up is longer than 16 MiB")
    return struct.pack("<I", size)[:3] + b"\x00" + bytes((command,)) + payload


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


#: What a fresh session's reset must set again after COM_RESET_CONNECTION, and
#: how each is read back: the character set and collation (the reset restores
#: the handshake's), autocommit (the server's default), sql_mode (ditto).
SESSION_PROBE = "SELECT @@character_set_client, @@collation_connection, @@autocommit, @@sql_mode"


@dataclass(frozen=True, eq=False)
class MySQLReset:
    """The bytes of one connection's session reset, built when its session is
    ready: ``COM_RESET_CONNECTION``; ``COM_INIT_DB`` of its database, sent only
    after the session may have changed databases (``USE``, ``COM_INIT_DB``: the
    reset keeps the current one); one ``SET`` of whatever the reset does not
    restore (None when nothing: see ``SESSION_PROBE``); then the driver's
    ``init_command`` and the pool's ``init_sql``, whose answers may be anything.
    Every answer but the last group is a plain OK packet."""

    reset: bytes
    init_db: bytes | None
    set: bytes | None
    init: bytes
    n_init: int
    #: The autocommit mode the reset leaves the session in (the pool's).
    autocommit: bool
    #: The pool's tally, shared by its connections: resets written, commands in them.
    written: list[int]

    def statements(self) -> list[str]:
        """The SET, as a statement to run (none if the reset restores everything)."""
        if self.set is None:
            return []
        return [self.set[5:].decode("utf-8")]

    def compose(self, db_changed: bool) -> tuple[bytes, int, int]:
        """The bytes to write, how many OK packets, how many other answers."""
        composed = self._composed[bool(db_changed and self.init_db is not None)]
        self.written[0] += 1
        self.written[1] += composed[1] + self.n_init
        return composed

    @_fork.cached_property
    def _composed(self) -> tuple[tuple[bytes, int, int], tuple[bytes, int, int]]:
        """Both forms, without and with COM_INIT_DB, built once."""
        forms = []
        for with_db in (False, True):
            parts = [self.reset]
            if with_db and self.init_db is not None:
                parts.append(self.init_db)
            if self.set is not None:
                parts.append(self.set)
            forms.append((b"".join([*parts, self.init]), len(parts), self.n_init))
        return forms[0], forms[1]


def mysql_reset(
    *,
    database: str | bytes | None,
    wanted: tuple[Any, ...],
    after_reset: tuple[Any, ...],
    init_statements: Sequence[str],
    encoding: str,
    written: list[int] | None = None,
) -> MySQLReset:
    """The reset of a session whose fresh state is ``wanted`` (``SESSION_PROBE``'s
    values) - where COM_RESET_CONNECTION leaves ``after_reset`` - with
    ``database`` selected and ``init_statements`` run in order."""
    charset, collation, autocommit, sql_mode = wanted
    assignments = []
    if (charset, collation) != tuple(after_reset[:2]):
        if not _NAME.fullmatch(str(charset)) or not _NAME.fullmatch(str(collation)):
            raise UsageError(f"unexpected character set {charset!r} / collation {collation!r}")
        assignments.append(f"NAMES {charset} COLLATE {collation}")
    if int(autocommit) != int(after_reset[2]):
        assignments.append(f"autocommit={int(autocommit)}")
    if sql_mode != after_reset[3]:
        assignments.append(f"sql_mode={_quoted(str(sql_mode))}")
    name = database if isinstance(database, bytes | None) else database.encode(encoding)
    statement = ("SET " + ", ".join(assignments)).encode(encoding) if assignments else None
    return MySQLReset(
        reset=_packet(COM_RESET_CONNECTION),
        init_db=None if not name else _packet(COM_INIT_DB, name),
        set=None if statement is None else _packet(COM_QUERY, statement),
        init=b"".join(_packet(COM_QUERY, sql.encode(encoding)) for sql in init_statements),
        n_init=len(init_statements),
        autocommit=bool(int(autocommit)),
        written=[0, 0] if written is None else written,
    )


#: A statement that may change the current database: ``USE`` first (after
#: comments), or anywhere in a text with an executable comment (``/*! ... */``).
_MAY_USE = re.compile(
    r"^\s*(?:(?:/\*(?![!M]).*?\*/|--[^\n]*(?:\n|$)|#[^\n]*(?:\n|$))\s*)*use\b|/\*!|/\*M!",
    re.IGNORECASE | re.DOTALL,
)


def may_change_database(command: int, sql: Any, multi_statements: bool) -> bool:
    """Whether a command may leave the session in another database, so that the
    next reset must select the pool's again.  Over-approximates: a text with
    several statements (a client that allows them) is searched whole."""
    if command == COM_INIT_DB:
        return True
    if command != COM_QUERY:
        return False
    text = sql if isinstance(sql, str) else bytes(sql).decode("latin-1")
    if multi_statements:
        return re.search(r"\buse\b|/\*!|/\*M!", text, re.IGNORECASE) is not None
    return _MAY_USE.match(text[:4096]) is not None  # USE comes first: no need to read on


#: Statements whose effect COM_RESET_CONNECTION does not undo: an XA branch (a
#: PREPAREd one outlives the reset and breaks the next user: MariaDB then fails
#: its INSERT and can crash on its next snapshot), profiling (the reset turns it
#: off but keeps the history, statement texts included), and SQL_CALC_FOUND_ROWS
#: (FOUND_ROWS() keeps its total).  A session that ran one is closed, not reset
#: (the server keeps a prepared XA branch for XA RECOVER, as it would for a
#: client that disconnected).  Searched anywhere in the text: a match in a
#: string or a comment costs a reconnect, never a leak.
_UNRESETTABLE = re.compile(r"\bxa\b|\bprofiling\b|\bsql_calc_found_rows\b", re.IGNORECASE)


def unresettable(command: int, sql: Any) -> bool:
    """Whether a command may leave what the server's reset does not undo."""
    if command != COM_QUERY:
        return False
    text = sql if isinstance(sql, str) else bytes(sql).decode("latin-1")
    return _UNRESETTABLE.search(text) is not None


# -- MySQL: a session set up in one query (multi-statements) -----------------------------

#: What joins two statements of one set-up query: a newline ends a ``--`` or
#: ``#`` comment the first may end with, before the ``;`` that ends it.
JOIN = "\n;\n"

#: What is never joined: the client's ``DELIMITER``, an executable comment
#: (``/*! ... */``: code the scan below would take for a comment).
_NOT_JOINED = re.compile(r"\bdelimiter\b|/\*!|/\*M!", re.IGNORECASE)

_SPACE = " \t\n\r\f\v"


def _ends_closed(sql: str, backslash: bool) -> bool:
    """Whether ``sql`` ends outside any string, quoted name or ``/* */`` comment
    (in a ``--`` or ``#`` comment is fine: JOIN's newline ends it) and with code
    after its last ``;``: a text the next statement can follow after JOIN.
    ``backslash``: whether a backslash escapes in a string (NO_BACKSLASH_ESCAPES
    off)."""
    i, n, code = 0, len(sql), False
    while i < n:
        c = sql[i]
        if c in "'\"`":
            j = i + 1
            while True:
                if j >= n:
                    return False  # an open string or name
                d = sql[j]
                if d == "\\" and backslash and c != "`":
                    j += 2
                elif d == c and j + 1 < n and sql[j + 1] == c:
                    j += 2  # a doubled quote
                elif d == c:
                    break
                else:
                    j += 1
            i, code = j + 1, True
        elif c == "#" or (
            sql.startswith("--", i) and (i + 2 == n or sql[i + 2] in _SPACE or sql[i + 2] < " ")
        ):
            j = sql.find("\n", i)
            if j < 0:
                return code  # a comment to the end, which JOIN's newline ends
            i = j + 1
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                return False  # an open comment
            i = j + 2
        else:
            if c == ";":
                code = False  # an empty statement after it would be an error
            elif c not in _SPACE:
                code = True
            i += 1
    return code


def joinable(sql: str) -> str | None:
    """``sql`` as a part of a joined set-up query (its trailing ``;`` taken off),
    or None if it cannot safely be one: it ends inside a string or a comment
    (whether backslashes escape or not), has nothing after its last ``;`` but
    comments, holds ``DELIMITER`` or an executable comment, or is not ASCII
    (after the set-up's SET NAMES the server may read the rest of the text in
    another character set)."""
    text = sql.rstrip(_SPACE + ";")
    if not text.isascii() or _NOT_JOINED.search(text):
        return None
    if not (_ends_closed(text, True) and _ends_closed(text, False)):
        return None
    return text


def quote_name(name: str) -> str:
    """A MySQL identifier in backticks (a backtick in it doubled)."""
    return "`" + name.replace("`", "``") + "`"


def mysql_set_up(
    database: str | None, set_sql: str, init_sql: Sequence[str], multi: bool
) -> tuple[str | None, tuple[str, ...]]:
    """What sets a session up after COM_RESET_CONNECTION: the database to select
    by COM_INIT_DB (None: none, or selected by a ``USE``), and the queries to
    run in order.  Without multi-statements: COM_INIT_DB, the SET, each init
    statement its own query.  With: one query of ``USE``, the SET and the init
    statements, joined (``joinable``); an init statement that cannot be joined
    and those after it are queries of their own, and a database whose name is
    not ASCII is selected by COM_INIT_DB.  The statements the server runs are the
    same, in the same order, either way."""
    if not multi:
        return database or None, (set_sql, *init_sql)
    joined = [set_sql]
    init_db = database or None
    if database and database.isascii():
        joined.insert(0, f"USE {quote_name(database)}")
        init_db = None
    rest = list(init_sql)
    while rest:
        text = joinable(rest[0])
        if text is None:
            break
        joined.append(text)
        rest.pop(0)
    return init_db, (JOIN.join(joined), *rest)


#: How long a checkout waits for the answers of a reset written long enough ago
#: to have them (seconds): a server silent past this is taken for gone.
RESET_WAIT = 1.0


def condition_on(lock: threading.Lock) -> threading.Condition:
    """A Condition on ``lock`` that a forked child finds free (as
    ``surge.pool._fork.condition()``), for a thread that may be interrupted to
    take as ``with lock:``, never ``with cond:``.  ``Condition.__enter__`` is
    Python code: a signal handler can run just after it took the lock and before
    the ``with`` holds it, and raise - leaving the lock held for ever, and the
    process-wide thread waiting on it (the watchdog, the reset writer) and every
    checkout after with it (a contender hung so in test_seeded_signals).  A C
    lock's own ``with`` has no such point.  Its own thread waits on ``cond``."""
    made = threading.Condition(lock)
    _fork._primitives.add(made)  # re-initialised in a forked child, as _fork's own
    return made


class Watchdog:
    """Calls ``on_timeout`` if a guarded block is still running ``timeout``
    seconds after it began: for calls into C that no timeout reaches (libmariadb
    polls without one), which severing the connection's socket ends.  One
    daemon thread per process, started at first use."""

    def __init__(self) -> None:
        self._lock = _fork.lock()  # free in a forked child (see surge.pool._fork)
        self._cond = condition_on(self._lock)
        self._armed: dict[int, tuple[float, Any]] = {}
        self._next = 0
        self._pid: int | None = None

    @contextlib.contextmanager
    def guard(self, timeout: float, on_timeout: Any) -> Iterator[None]:
        """Arm ``on_timeout`` for the block.  Interrupt-safe: a signal handler that
        raises anywhere in here (or in the block) leaves nothing armed - an armed
        call left behind would fire later, on a connection back in the pool or
        in another user's hands."""
        token = None
        try:
            with self._lock:  # not self._cond: see condition_on
                if self._pid != os.getpid():
                    self._pid = os.getpid()
                    self._armed = {}
                    watcher = threading.Thread(target=self._run, name="surge.db watchdog")
                    watcher.daemon = True
                    watcher.start()
                self._next += 1
                token = self._next
                self._armed[token] = (time.monotonic() + timeout, on_timeout)
                self._cond.notify()
            yield
        finally:
            self._disarm(token)

    def _disarm(self, token: int | None) -> None:
        """Take ``token`` off, even if an interruption lands while it does (the
        interruption is raised once it is off).  A dict's pop is atomic: no lock."""
        interrupted: BaseException | None = None
        while token in self._armed:
            try:
                self._armed.pop(token, None)
            except BaseException as error:
                interrupted = error
        if interrupted is not None:
            raise interrupted

    def _run(self) -> None:
        while True:
            fire = []
            with self._cond:
                now = time.monotonic()
                # A snapshot (list() of a dict is one step under the GIL): _disarm
                # pops without the lock, and a dict changed while a generator walks
                # it raised here, which ended this thread - and every timeout after.
                soonest = None
                try:
                    armed = list(self._armed.items())
                except RuntimeError:  # a collection ran Python mid-copy, and a pop came
                    continue
                for token, (when, call) in armed:
                    if when <= now:
                        if self._armed.pop(token, None) is not None:
                            fire.append(call)
                    elif soonest is None or when < soonest:
                        soonest = when
                if not fire:
                    self._cond.wait(None if soonest is None else max(0.0, soonest - now))
            for call in fire:
                with contextlib.suppress(Exception):
                    call()


WATCHDOG = Watchdog()


def drive_bounded(gen: Any, fileno: int, timeout: float) -> Any:
    """Run a psycopg generator (it yields ``Wait`` values, is sent ``Ready``) with
    at most ``timeout`` seconds of waiting; TimeoutError past it.  One poll(2) a
    wait: no selector to open and close on every checkout."""
    import select

    from psycopg.waiting import Ready, Wait

    readable = select.POLLIN | select.POLLERR | select.POLLHUP
    writable = select.POLLOUT | select.POLLERR | select.POLLHUP
    deadline = time.monotonic() + timeout
    poller = select.poll()
    try:
        wait = next(gen)
        while True:
            poller.register(
                fileno,
                (select.POLLIN if wait & Wait.R else 0) | (select.POLLOUT if wait & Wait.W else 0),
            )
            left = deadline - time.monotonic()
            ready = poller.poll(math.ceil(left * 1000)) if left > 0 else []
            if not ready:
                raise TimeoutError(f"the server answered nothing for {timeout:g} s")
            mask = ready[0][1]
            got = (Ready.R if mask & readable else 0) | (Ready.W if mask & writable else 0)
            wait = gen.send(Ready(got))
    except StopIteration as done:
        return done.value


def ok_packet_status(payload: bytes) -> int:
    """The server status of an OK packet's payload (after its two length-encoded
    integers: affected rows, last insert id)."""
    pos = 1
    for _ in range(2):
        first = payload[pos]
        pos += 1 if first < 0xFB else {0xFC: 3, 0xFD: 4, 0xFE: 9}.get(first, 1)
    return int(payload[pos] | payload[pos + 1] << 8)


#: A reset due at return is written this long after it (seconds), unless the
#: connection's next command takes it along first.  What a session holds (a
#: lock, a transaction) outlives its checkout by about this much.
FLUSH_AFTER = 0.002


class ResetWriter:
    """Writes the resets that connections' next commands did not take along.

    A reset written at return costs the returning thread a system call - on this
    machine's loopback a ``send`` costs 25-40 us, as much as the query - and one
    more wake-up of the server.  Written in front of the next command instead, in
    the same ``send``, it costs neither; but a connection may then idle in the
    pool holding what its last user took (a lock, a snapshot).  So a reset is
    left for the next command only ``FLUSH_AFTER``; then this one thread per
    process writes it (without waiting for the answers, which the next checkout
    or command reads).  A connection's ``_surge_flush()`` does the writing under
    the connection's own lock."""

    def __init__(self) -> None:
        self._due: deque[tuple[float, Any]] = deque()
        self._lock = _fork.lock()
        self._cond = condition_on(self._lock)
        self._idle = False
        self._started = False
        if hasattr(os, "register_at_fork"):  # a forked child has no thread: start anew
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._due = deque()
        self._idle = self._started = False

    def due(self, conn: Any, now: float) -> None:
        """``conn``'s reset is due: write it FLUSH_AFTER from ``now`` unless its
        next command takes it first.  (The hot path: a deque append, which is
        thread-safe, and the condition's lock only to wake an idle thread.)"""
        self._due.append((now + FLUSH_AFTER, conn))
        if self._idle or not self._started:
            with self._lock:  # not self._cond: see condition_on
                if not self._started:
                    self._started = True
                    threading.Thread(target=self._run, name="surge.db resets", daemon=True).start()
                self._idle = False
                self._cond.notify()

    def _run(self) -> None:
        clock = time.monotonic
        while True:
            with self._cond:
                while not self._due:
                    self._idle = True
                    # Timed: an append that read _idle just before it was set
                    # wakes nobody; this wait then ends on its own.
                    self._cond.wait(IDLE_RECHECK)
                self._idle = False
                when, conn = self._due[0]
                delay = when - clock()
                if delay > 0:
                    # Woken at most once per FLUSH_AFTER, whatever the rate of
                    # returns: waking for each (a connection back every 100 us,
                    # each due 2 ms later) cost more CPU than the queries.
                    self._cond.wait(max(delay, FLUSH_AFTER))
                    continue
                self._due.popleft()
            try:
                conn._surge_flush()
            except Exception:  # a connection's failure is its own: never the thread's
                log.warning("writing a reset failed", exc_info=True)


#: How long the idle writer sleeps before it looks again on its own (seconds): the
#: bound on a reset's delay when a return raced with the writer going idle.
IDLE_RECHECK = 0.05


RESET_WRITER = ResetWriter()


def send_without_waiting(sock: Any, data: bytes, timeout: float = 1.0) -> bool:
    """Write ``data`` to a connection's socket without ever waiting on the server:
    True if it all went out.  A plain socket takes it in one non-blocking send (a
    few hundred bytes into an idle connection's empty buffer); a TLS socket is
    given ``timeout`` seconds at most.  False: the server is not reading, and the
    caller must sever the connection (part of a packet may be on the wire)."""
    try:
        if hasattr(sock, "version"):  # ssl.SSLSocket: no MSG_DONTWAIT
            previous = sock.gettimeout()
            sock.settimeout(timeout)
            try:
                sock.sendall(data)
            finally:
                sock.settimeout(previous)
            return True
        return int(sock.send(data, socket.MSG_DONTWAIT)) == len(data)
    except (OSError, ValueError):
        return False


# -- PostgreSQL: the pipeline -------------------------------------------------------------


#: What a reset that keeps the driver's prepared statements runs, in order:
#: ``DISCARD ALL`` but for its ``DEALLOCATE ALL`` and ``DISCARD PLANS`` (asyncpg's
#: own pool reset - ``pg_advisory_unlock_all()``, ``CLOSE ALL``, ``UNLISTEN *``,
#: ``RESET ALL`` - and what DISCARD ALL does besides), with the DEALLOCATE of the
#: application's statements (``pg_deallocate_others``) where None stands: after
#: RESET ALL (the application's settings, a statement_timeout, are gone), before
#: DISCARD TEMP (whose tables the DEALLOCATE may ask about).
PG_RESET_KEEPING: tuple[str | None, ...] = (
    "CLOSE ALL",
    "SET SESSION AUTHORIZATION DEFAULT",
    "RESET ALL",
    "UNLISTEN *",
    "SELECT pg_advisory_unlock_all()",
    None,
    "DISCARD TEMP",
    "DISCARD SEQUENCES",
)


def pg_reset_keeping(kept: str) -> list[str]:
    """The statements of a PostgreSQL reset that keeps what the driver prepared for
    itself (``PG_RESET_KEEPING``; the ROLLBACK is the caller's): ``kept`` names
    the driver's statements (see ``pg_deallocate_others``)."""
    return [pg_deallocate_others(kept) if sql is None else sql for sql in PG_RESET_KEEPING]


def pg_deallocate_others(kept: str) -> str:
    """A DO block that deallocates every prepared statement of the session but the
    driver's own: ``kept``, an SQL condition on ``pg_prepared_statements.name``,
    names what the driver made; a statement made by SQL ``PREPARE`` (``from_sql``)
    is the application's, whatever its name (an application may name its own
    ``_pg3_0`` or ``__asyncpg_x``; the drivers prepare through the protocol).
    Names schema-qualified: the application's search_path may still be in force."""
    return (
        "DO $surge$ DECLARE s record; BEGIN FOR s IN SELECT name FROM"
        f" pg_catalog.pg_prepared_statements WHERE from_sql OR NOT ({kept}) LOOP"
        " EXECUTE 'DEALLOCATE ' || pg_catalog.quote_ident(s.name); END LOOP; END $surge$"
    )


#: Whether a session may have changed what the statements it prepared were planned
#: against, so that they cannot outlive it: its transaction wrote (DDL writes the
#: catalog: rolled back, the plans' tables or columns go with it; a read-only one
#: has no transaction id), or it holds temporary tables (DISCARD TEMP drops them).
#: Either way its statements would meet the next user as "cached plan must not
#: change result type" - psycopg itself drops its whole cache at every ROLLBACK
#: and DROP it sees.
_PG_UNSETTLED = (
    "(pg_catalog.txid_current_if_assigned() IS NOT NULL OR (pg_catalog.pg_my_temp_schema() <> 0"
    " AND EXISTS (SELECT FROM pg_catalog.pg_class"
    " WHERE relnamespace = pg_catalog.pg_my_temp_schema())))"
)


def _pg_names(names: Sequence[bytes]) -> str:
    """An SQL text[] literal of statement names (psycopg's: ``_pg3_N``)."""
    quoted = ",".join(
        '"' + n.decode().replace("\\", "\\\\").replace('"', '\\"') + '"' for n in names
    )
    return _quoted_pg("{" + quoted + "}") + "::text[]"


def _quoted_pg(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class PGReset:
    """One PostgreSQL session reset: ``steps`` sent in libpq's pipeline mode, each
    followed by a Sync (ROLLBACK, DISCARD ALL, then the pool's ``init_sql``); or
    ``query``, one simple-protocol query of many statements (the reset that
    keeps the driver's statements, with ``init_sql`` after it), whose answer
    number ``survivors`` names the driver's statements that did not survive it."""

    steps: tuple[bytes, ...] = ()
    query: bytes | None = None
    survivors: int = -1


def pg_reset(
    status: str, before: Sequence[bytes], made: Sequence[bytes], init_sql: Sequence[bytes] = ()
) -> PGReset:
    """The reset of a psycopg session whose transaction status is ``status``
    ("idle", "open", "failed") and whose driver's cache holds the statements
    ``before`` (prepared in earlier sessions) and ``made`` (in this one), then
    the pool's ``init_sql``.

    With nothing to keep: ROLLBACK (if a transaction is open) and DISCARD ALL.
    Else the reset that keeps them (``PG_RESET_KEEPING``) in one query - one
    message, as asyncpg's: a statement of its own each, in the pipeline, cost
    about 20 us more each on a loaded box - deallocating whatever else the
    session prepared, and ``made`` too where the session may have changed what
    they were planned against (``_PG_UNSETTLED``: asked inside an open
    transaction, before its ROLLBACK; a failed one is taken to have); its last
    statement a SELECT of which of them survived, NULL if all did.
    (Statements ``before`` were planned outside this session's transaction,
    against what a rollback returns to; an unsettled earlier session dropped
    its own.)"""
    rollback = [] if status == "idle" else [b"ROLLBACK"]
    if not before and not made:
        return PGReset(steps=(*rollback, b"DISCARD ALL", *init_sql))
    kept = f"name = ANY ({_pg_names(before)})"
    if made:
        unsettled = "true" if status == "failed" else _PG_UNSETTLED
        kept += f" OR (NOT {unsettled} AND name = ANY ({_pg_names(made)}))"
    keeping = [sql.encode() for sql in pg_reset_keeping(kept)]
    if status == "open":  # the transaction id is asked about before it rolls back,
        # under the application's settings still: none of its timeouts
        deallocate = keeping.pop(PG_RESET_KEEPING.index(None))
        rollback = [b"SET LOCAL statement_timeout = 0", deallocate, *rollback]
    survivors = PG_SURVIVORS_STEP.replace("$1", str(len(before) + len(made))).encode()
    statements = [*rollback, *keeping, survivors]
    return PGReset(
        query=b"; ".join(s.rstrip(b"; ") for s in (*statements, *init_sql)),
        survivors=len(statements) - 1,
    )


#: The last statement of a reset that keeps the driver's statements: which
#: survived it (all but what it deallocated: NULL when all of the $1 kept did).
PG_SURVIVORS_STEP = (
    "SELECT CASE WHEN count(*) = $1 THEN NULL ELSE"
    " coalesce(pg_catalog.string_agg(name, ' '), '') END FROM pg_catalog.pg_prepared_statements"
)


def pg_send_reset(conn: Any, reset: PGReset, psycopg: Any) -> int:
    """Write a PostgreSQL session reset (``pg_reset``) on psycopg connection
    ``conn`` without waiting: its steps in libpq's pipeline mode, a Sync after
    each, or its one query.  Returns how many Syncs to read back (1 for the
    query), or 0 if the connection's protocol state is unknown (a command in
    progress, a COPY, a psycopg pipeline left open): then the caller severs it."""
    pgconn = conn.pgconn
    if not pg_between_commands(conn, psycopg):
        return 0
    try:
        if reset.query is not None:
            pgconn.send_query(reset.query)
            return 1 if _pg_flush(pgconn) else 0
        pgconn.enter_pipeline_mode()
        for sql in reset.steps:
            pgconn.send_query_params(sql, None)
            pgconn.pipeline_sync()
        if not _pg_flush(pgconn):
            return 0
    except psycopg.Error:
        return 0
    return len(reset.steps)


def pg_status(conn: Any, psycopg: Any) -> str:
    """The transaction status ("idle", "open" or "failed") of psycopg connection
    ``conn``'s last ReadyForQuery, as ``pg_reset`` takes it."""
    statuses = psycopg.pq.TransactionStatus
    status = conn.pgconn.transaction_status
    return "idle" if status == statuses.IDLE else "open" if status == statuses.INTRANS else "failed"


def pg_between_commands(conn: Any, psycopg: Any) -> bool:
    """Whether psycopg connection ``conn`` is between commands: idle, in a
    transaction or a failed one, with no pipeline open."""
    pq = psycopg.pq
    statuses = pq.TransactionStatus
    pgconn = conn.pgconn
    return (
        pgconn.transaction_status in (statuses.IDLE, statuses.INTRANS, statuses.INERROR)
        and conn._pipeline is None
        and pgconn.pipeline_status == pq.PipelineStatus.OFF
    )


def _pg_flush(pgconn: Any, timeout: float = 1.0) -> bool:
    """libpq's non-blocking flush, given ``timeout`` seconds for a full buffer."""
    import select

    while True:
        pending = pgconn.flush()
        if pending == 0:
            return True
        if pending < 0:
            return False
        _, writable, _ = select.select([], [pgconn.socket], [], timeout)
        if not writable:
            return False


def pg_ping(pgconn: Any) -> Generator[Any, Any, Any]:
    """psycopg generator (driven by ``drive_bounded``): an empty query, one round
    trip; returns its result."""
    from psycopg.waiting import Wait

    pgconn.send_query(b"")
    while pgconn.flush() > 0:
        yield Wait.W
    result = None
    while True:
        if pgconn.is_busy():
            yield Wait.R
            pgconn.consume_input()
            continue
        got = pgconn.get_result()
        if got is None:
            return result
        result = got


def pg_finish_reset(
    pgconn: Any, syncs: int, psycopg: Any, survivors: int = -1
) -> Generator[Any, Any, bytes | None]:
    """psycopg generator (driven by ``conn.wait``, sync or async): read the answers
    of a reset that ``pg_send_reset`` wrote, leave pipeline mode, drop any
    notification meant for the last user.  A reset sent as one query
    (``survivors`` >= 0) returns the value of its answer number ``survivors``
    (the names of the driver's statements still prepared, None if all are).
    Raises OperationalError if a step of the reset failed (the pool then
    discards the connection)."""
    from psycopg.waiting import Wait

    pq = psycopg.pq
    statuses = pq.ExecStatus
    sync, fatal, tuples = statuses.PIPELINE_SYNC, statuses.FATAL_ERROR, statuses.TUPLES_OK
    failed: bytes | None = None
    answer, value = 0, None
    pipelined = survivors < 0
    while syncs:
        if pgconn.is_busy():
            while not (yield Wait.R):
                continue
            pgconn.consume_input()
            continue
        result = pgconn.get_result()
        if result is None:
            if not pipelined:  # the query's answers are all in
                syncs = 0
            continue
        if result.status == sync:
            syncs -= 1
        elif result.status == fatal and failed is None:
            failed = result.error_message or b"(no message)"
        elif answer == survivors and result.status == tuples and result.ntuples:
            value = result.get_value(0, 0)
        answer += 1
    if pipelined:
        pgconn.exit_pipeline_mode()
    while pgconn.notifies() is not None:
        pass
    if failed is not None:
        message = failed.decode(errors="replace").strip()
        raise psycopg.OperationalError(f"resetting the pooled session failed: {message}")
    return value


# -- the decisions: what a pool does with a connection, sync or async --------------------

#: A connection back in the pool for less than this (seconds) is handed out
#: without looking at its socket.  The look is a ``select()``, a system call
#: that lets go of the GIL: with four Django threads sharing a pool it cost a
#: request cycle ~30 us of its ~430 (``benchmarks/django_cycle.py``, 4 threads:
#: 427-460 us with it, 400 without, Django's own pool 393-427).  A server that
#: goes away in those 50 ms is met by the first statement instead, as a kill
#: that races the check always is.
SOCKET_CHECK_AFTER = 0.05

#: Share of the server's idle timeout that ``max_lifetime="auto"`` keeps below
#: (then jittered down by up to ``lifetime_jitter``).
LIFETIME_SHARE = 0.9

#: ``SessionResets._checkout_steps``' answers: (read the answers of the reset
#: written at return first?, then ping? - True, False, or None: only if the
#: socket got something while the connection idled, EOF or a goodbye).
_NOTHING = (False, False)
_ANSWERS = (True, False)
_PING = (False, True)
_ANSWERS_PING = (True, True)
_LOOK = (False, None)
_ANSWERS_LOOK = (True, None)

#: What a return leaves for the pool to do (``SessionResets._returned``).
Returned = Literal[True, False, "roll back", "restore autocommit", "server gone"]


class SessionResets:
    """Every decision DBPool and AsyncDBPool take about a connection, and none of
    their waiting; and their constructor.

    What a return does (``_returned``), what a checkout does first
    (``_checkout_steps``), whether a failure means the server is gone
    (``_gone``), what a block that raised leaves (``_after_error``), what a
    close does first (``_closing``); their options, checked here once for both
    (``__init__``); their counters and ``stats()``.  Each pool wraps its own
    surge.pool (Pool or AsyncPool) as ``pool`` and does the I/O these answers
    call for - a rollback, a ping, reading a reset's answers, closing, moving
    the generation on - sync or awaited.  What goes to a server without waiting
    for it (a reset's bytes, a sever) is done here: that is the same either way.
    psycopg_pool's ``check``/``reset`` callbacks are the model: one place for
    every connection.
    """

    driver: Any
    pool: Any
    url: Any  # surge.db._drivers.DatabaseURL
    reset: Literal["session", "none"]
    max_lifetime: float | Literal["auto"] | None
    #: Each front-end's own, sync or async (surge.pool awaits what returns an awaitable).
    _check: Callable[[Any, float], Any]
    _reset: Callable[[Any], Any]
    _close: Callable[[Any], Any]
    n_resets = 0
    n_severed = 0
    n_pings = 0
    n_rollbacks = 0

    @named_refusals
    def __init__(
        self,
        url: str,
        *,
        driver: str | None = None,
        max_size: int = 10,
        max_overflow: int = 0,
        timeout: float = 30.0,
        max_idle: float | None = None,
        max_lifetime: float | Literal["auto"] | None = "auto",
        lifetime_jitter: float = 0.1,
        check_idle_after: float = 1.0,
        autocommit: bool = False,
        lifo: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        connect_args: dict[str, Any] | None = None,
        reset: Literal["session", "none"] = "session",
        init_sql: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Both pools' constructor, so that both take the same options and refuse
        the same: see :class:`surge.db.DBPool`.  Ours are checked here before
        anything is made (a bad one raises UsageError), surge.pool's by it; each
        front-end makes its driver (``_driver_for``) and its pool (``_open``)."""
        if not check_idle_after >= 0:  # NaN too: it would never ping
            raise UsageError(f"check_idle_after must be 0 or more, not {check_idle_after}")
        if reset not in ("session", "none"):
            raise UsageError(f"reset={reset!r}: use 'session' (the default) or 'none'")
        if isinstance(init_sql, str | bytes):
            raise UsageError("init_sql is a list of statements, not one string")
        statements = tuple(init_sql)
        for sql in statements:
            if not isinstance(sql, str) or not sql.strip():
                raise UsageError(f"init_sql: {sql!r} is not a statement")
        self.url, self.driver = self._driver_for(url, driver, ssl_context)
        if reset == "session" and self.driver.name == "sqlite3":
            reset = "none"  # a file, not a server session: nothing outlives the transaction
        self.reset = reset
        self.init_sql = statements
        self.autocommit = autocommit
        self.check_idle_after = check_idle_after
        self._connect_args = dict(connect_args or {})
        self.timeout = timeout
        #: The lifetime in force; ``"auto"`` until the first connection has read it.
        self.max_lifetime = max_lifetime
        #: Called with each connection the pool closes (glue that keeps its own
        #: record per connection, as SQLAlchemy's, forgets it here).
        self.on_close: list[Callable[[Any], object]] = []
        # surge.pool's options (Pool's and AsyncPool's: the same), with this
        # pool's callbacks: the check, the reset and close at return, the sever
        # of a forked child's inherited connections.
        self._open(
            max_size=max_size,
            max_overflow=max_overflow,
            timeout=timeout,
            max_idle=max_idle,
            max_lifetime=None if max_lifetime == "auto" else max_lifetime,
            lifetime_jitter=lifetime_jitter,
            check=self._check,
            check_idle_after=self._checked_after(),
            reset=self._reset,
            close=self._close,
            sever=self._sever_inherited,
            lifo=lifo,
            clock=clock,
        )

    def _driver_for(
        self, url: str, name: str | None, ssl_context: ssl.SSLContext | None
    ) -> tuple[Any, Any]:
        """The parsed URL and the front-end's driver for it (``driver=name``)."""
        raise NotImplementedError

    def _open(self, **options: Any) -> None:
        """Make ``pool`` (surge.pool's Pool or AsyncPool) with ``options``, and
        whatever else the front-end keeps."""
        raise NotImplementedError

    def _checked_after(self) -> float:
        """How idle a connection must be for the pool to call ``check`` at checkout: at
        every checkout when a reset's answers must be read there (PostgreSQL), else
        from ``SOCKET_CHECK_AFTER`` (a look at the socket) or ``check_idle_after``."""
        if self.reset == "session" and self.driver.reset_answers == "at checkout":
            return 0.0
        return min(self.check_idle_after, SOCKET_CHECK_AFTER)

    @property
    def generation(self) -> int:
        return int(self.pool.generation)

    def generation_of(self, conn: Any) -> int | None:
        """The generation ``conn`` was made in (None if it is not checked out)."""
        generation: int | None = self.pool.generation_of(conn)
        return generation

    def stats(self) -> dict[str, Any]:
        """The pool's counters plus ``generation``, ``pings``, ``rollbacks`` and
        ``server_gone`` (how many times a disconnect moved the generation on)."""
        stats: dict[str, Any] = self.pool.stats()
        written = getattr(self.driver, "written", None) or [self.n_resets, self.n_resets]
        stats.update(
            pings=self.n_pings,
            rollbacks=self.n_rollbacks,
            resets=self.n_resets,
            resets_written=written[0],
            reset_commands=written[1],
            severed=self.n_severed,
            server_gone=stats["generation"],
            max_lifetime=self.max_lifetime,
        )
        return stats

    # -- the decisions ------------------------------------------------------------------

    def _checkout_steps(self, conn: Any, idle: float) -> tuple[bool, bool | None]:
        """What a checkout of ``conn``, idle ``idle`` seconds, does before it is
        handed out: (read the reset's answers?, then ping? - None: if the socket
        got something, looked at after the answers are read, which would show
        there too).  The answers are read unless the connection's next command
        may read them (``Driver.reset_answers`` "lazily", back in under
        SOCKET_CHECK_AFTER); a connection idle ``check_idle_after`` or more is
        pinged, one idle SOCKET_CHECK_AFTER or more looked at."""
        driver = self.driver
        if driver.reset_pending(conn) and not (
            driver.reset_answers == "lazily" and idle < SOCKET_CHECK_AFTER
        ):
            if idle >= self.check_idle_after:
                return _ANSWERS_PING
            return _ANSWERS_LOOK if idle >= SOCKET_CHECK_AFTER else _ANSWERS
        if idle >= self.check_idle_after:
            return _PING
        return _LOOK if idle >= SOCKET_CHECK_AFTER else _NOTHING

    def _returned(self, conn: Any) -> Returned:
        """The pool's reset at return, as far as it goes without waiting (see
        ``DBPool.release``): True (ready), False (discard: closed, or its protocol
        state is unknown - severed, never waited on), "server gone" (discard, and
        move the generation on), or with ``reset="none"`` "roll back" (then put
        autocommit back) or "restore autocommit", for the pool to do."""
        driver = self.driver
        if driver.is_closed(conn):
            return False
        if self.reset == "session":
            if not driver.used(conn):  # nothing went to the server since the last reset
                driver.restore_client(conn)
                return True
            try:
                sent = driver.send_reset(conn)
            except Exception as error:
                gone = self._gone(conn, error)
                self._sever(conn)
                return "server gone" if gone else False
            if sent:
                self.n_resets += 1
                next_session(conn)
                return True
            self._sever(conn)
            return False
        if not driver.protocol_idle(conn):
            self._sever(conn)
            return False
        try:
            open_transaction = driver.in_transaction(conn)
        except Exception as error:
            return "server gone" if self._gone(conn, error) else False
        if open_transaction:
            self.n_rollbacks += 1
            return "roll back"
        return "restore autocommit"

    def _gone(self, conn: Any, error: BaseException) -> bool:
        """Whether ``error`` (of a ping, a reset, a rollback) means the server is
        gone, so that the pool moves the generation on; another is logged.  Either
        way the pool discards the connection."""
        if self.driver.is_disconnect(error, conn):
            return True
        log.info("%r failed on %r; discarding it", error, conn)
        return False

    def _after_error(self, conn: Any, error: BaseException) -> Callable[..., Any]:
        """Which of the pool's own methods a checkout's block that raised ``error``
        ends with: ``lost`` (the server is gone: discard ``conn``, move the
        generation on), ``release`` (another exception: back, rolled back) or
        ``discard`` (an interruption that is not an Exception, KeyboardInterrupt
        or a cancel mid-read: its protocol state is unknown)."""
        if self.driver.is_disconnect(error, conn):
            return self.lost  # type: ignore[attr-defined, no-any-return]
        if isinstance(error, Exception):
            return self.release  # type: ignore[attr-defined, no-any-return]
        return self.discard  # type: ignore[attr-defined, no-any-return]

    def _closing(self, conn: Any) -> None:
        """Before the pool closes ``conn``: glue forgets it, and one that is not
        between commands is severed (a polite close could wait on the server)."""
        for forget in self.on_close:
            forget(conn)
        if not self.driver.protocol_idle(conn):
            self._sever(conn)

    def _lifetime_learned(self, idle_timeout: float | None) -> None:
        """The server's idle timeout, read with the first connection, sets
        ``max_lifetime="auto"`` to LIFETIME_SHARE of it (None: unlimited)."""
        if idle_timeout:
            self.pool.set_max_lifetime(idle_timeout * LIFETIME_SHARE)
            self.max_lifetime = idle_timeout * LIFETIME_SHARE
        else:
            self.max_lifetime = None

    def _connect_kwargs(self, budget: float) -> dict[str, Any]:
        """The driver's connect arguments for a connect within ``budget`` seconds."""
        return with_connect_timeout(self.url, self.driver.name, self._connect_args, budget)

    def _sever(self, conn: Any) -> None:
        """Cut a connection whose protocol state is unknown at its socket, without
        a byte to the server (once)."""
        if getattr(conn, "_surge_severed", False):
            return
        with contextlib.suppress(AttributeError):  # a class without __dict__ (sqlite3)
            conn._surge_severed = True
        self.n_severed += 1
        self.driver.sever(conn)

    def _sever_inherited(self, conn: Any) -> None:
        """The pool's ``sever`` in a forked child, for each connection of the parent."""
        self.n_severed += 1
        self.driver.sever_inherited(conn)


def with_connect_timeout(
    url: Any, driver: str, connect_args: dict[str, Any], budget: float
) -> dict[str, Any]:
    """``connect_args`` with a connect timeout no longer than ``budget`` (an
    acquire's timeout), unless the URL or the arguments set one: a server that
    accepts and then says nothing (a hung host) must not hold an acquire past
    its timeout.  (libpq has no default at all; PyMySQL's is 10 s.)"""
    if "connect_timeout" in connect_args or "connect_timeout" in url.options:
        return connect_args
    defaults = {
        "pymysql": 10.0,
        "aiomysql": 10.0,
        "mysqlclient": 10.0,
        "psycopg": None,
        "asyncpg": None,
    }
    if driver not in defaults:
        return connect_args
    default = defaults[driver]
    seconds = budget if default is None else min(default, budget)
    if driver in ("psycopg", "mysqlclient"):  # whole seconds (libpq: 2 at least)
        seconds = max(2 if driver == "psycopg" else 1, math.ceil(seconds))
    return {**connect_args, "connect_timeout": seconds}


#: What DBPool and AsyncDBPool take as keywords besides ``url``.
OPTIONS = keywords_of(SessionResets.__init__, method=True) - {"url"}


def refuse_unknown_options(caller: str, given: Iterable[str]) -> None:
    """What a front-end that hands its options on to a pool (surge.db.pool(),
    create_engine's ``pool_options``, Django's ``OPTIONS["pool"]``) calls first,
    so that a misspelt option is refused under the name the user wrote
    (``caller``), not the pool's."""
    refuse_unknown(caller, given, OPTIONS)
