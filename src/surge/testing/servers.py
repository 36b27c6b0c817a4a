"""Real MariaDB and PostgreSQL servers, started and stopped by Python, for tests and benchmarks.

    with surge.testing.mariadb(settings={"wait_timeout": 5}) as server:
        conn = server.connect()             # PyMySQL over 127.0.0.1:server.port
        server.restart()                    # same data, port and socket; old connections die
        surge.db.pool(server.url)           # or server.socket_url for the unix socket

Each server runs from the distribution's binaries (Debian: ``mariadb-server``,
``postgresql``) in a fresh temporary directory that holds its data, its unix
socket, its log and (with ``tls=True``) a throwaway CA and certificate.  It
listens on a free port on 127.0.0.1 only and on the socket, never touches the
system service, ``/etc/mysql`` or ``/etc/postgresql``, and is gone with its
directory when the ``with`` block ends, whatever ended it.

Each has one database and one ordinary user (not a superuser: PostgreSQL keeps
``superuser_reserved_connections`` for superusers, so a pool-exhaustion test
would not meet ``max_connections`` as an application does).  The administrator
(MariaDB ``root``, PostgreSQL ``postgres``) needs no password over the socket:
``server.connect(admin=True)``.

Readiness means a real login: the server is ready when the test user has
connected over TCP, bounded by ``startup_timeout``.

Running as root (containers, CI): PostgreSQL refuses to run as root, so initdb
and the server run as an unprivileged user (``postgres``, created by the
Debian package) through ``subprocess``'s ``user=``/``group=`` -- no ``su`` or
``runuser`` in between, so ``pid`` is the postmaster's own and signals reach
it directly.  The directory is handed to that user.  mariadbd runs as root,
which it accepts only with ``--user=root``.

Durability settings are relaxed where only a power cut would lose data
(``fsync=off``, no doublewrite, ``innodb_flush_log_at_trx_commit=2``): a
commit still reaches the OS before it returns, so it survives :meth:`DBServer.kill`
(SIGKILL of the server), which is what the crash tests simulate.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import socket as socketlib
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from surge.extras import how_to_install

__all__ = [
    "DBServer",
    "ServerNotInstalled",
    "ServerStartError",
    "find_mariadb",
    "find_postgresql",
    "mariadb",
    "postgresql",
]

#: Setting values a server accepts on its command line.
SettingValue = str | int | float | bool

#: How long a graceful stop may take before the server is killed (seconds).
STOP_TIMEOUT = 30.0

#: A unix socket path longer than this does not fit in ``sockaddr_un.sun_path``.
MAX_SOCKET_PATH = 107


class ServerNotInstalled(RuntimeError):
    """A server binary or a Python driver is missing; ``hint`` says what to install."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(f"{message}: {hint}")
        self.hint = hint


class ServerStartError(RuntimeError):
    """The server did not initialise or did not accept a login in time; the
    message ends with the tail of its log."""


# --------------------------------------------------------------------------- binaries

#: Where server binaries live besides PATH (root's PATH has /usr/sbin, a user's may not).
SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/libexec", "/usr/local/mysql/bin")

#: Debian's and Ubuntu's home of PostgreSQL versions: ``<dir>/<version>/bin``.
POSTGRESQL_LIB_DIR = Path("/usr/lib/postgresql")


def _which(names: tuple[str, ...], extra_dirs: tuple[str, ...] = ()) -> str | None:
    """The first of ``names`` found in PATH, then in ``extra_dirs``."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *extra_dirs])
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def find_mariadb() -> tuple[str, str]:
    """(mariadbd, mariadb-install-db); raises :class:`ServerNotInstalled`."""
    server = _which(("mariadbd", "mysqld"), SBIN_DIRS)
    install_db = _which(("mariadb-install-db", "mysql_install_db"), ("/usr/bin", *SBIN_DIRS))
    if server is None or install_db is None:
        missing = "mariadbd (or mysqld)" if server is None else "mariadb-install-db"
        raise ServerNotInstalled(
            f"MariaDB server not found: no {missing} in PATH or {', '.join(SBIN_DIRS)}",
            "install the Debian package mariadb-server (apt-get install mariadb-server)",
        )
    return server, install_db


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name))


def find_postgresql() -> Path:
    """The directory holding ``postgres`` and ``initdb``, newest version first:
    ``/usr/lib/postgresql/<version>/bin`` (Debian, Ubuntu), then PATH (Fedora,
    Homebrew); raises :class:`ServerNotInstalled`."""
    candidates = sorted(POSTGRESQL_LIB_DIR.glob("*/bin"), key=lambda p: _version_key(p.parent))
    candidates.reverse()
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in ("postgres", "initdb")):
            return bindir
    raise ServerNotInstalled(
        "PostgreSQL server not found: no postgres and initdb in /usr/lib/postgresql/*/bin or PATH",
        "install the Debian package postgresql (apt-get install postgresql)",
    )


def _import_driver(name: Literal["pymysql", "psycopg"]) -> Any:
    try:
        return __import__(name)
    except ImportError:
        how = how_to_install(name)
        assert how is not None  # both are in the db extra
        raise ServerNotInstalled(f"the Python driver {name} is not installed", how) from None


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    """A port free on 127.0.0.1 now; the server may still lose it to a race
    before it binds, so the first start retries on "address in use"."""
    with socketlib.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


free_port = _free_port


def wait_listening(
    port: int, process: subprocess.Popen[bytes], what: str, *, timeout: float = 10.0
) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``; raise
    :class:`ServerStartError` if ``process`` exits first or ``timeout`` passes
    (with what it wrote to a stderr pipe, if it has one)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socketlib.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                error = process.stderr.read().decode() if process.stderr else ""
                raise ServerStartError(f"{what} did not start: {error[-2000:]}") from None
            time.sleep(0.05)


def _setting_args(
    settings: Mapping[str, SettingValue], style: Literal["mariadb", "pg"]
) -> list[str]:
    args = []
    for name, value in settings.items():
        if isinstance(value, bool):
            text = ("ON" if value else "OFF") if style == "mariadb" else ("on" if value else "off")
        else:
            text = str(value)
        args += [f"--{name}={text}"] if style == "mariadb" else ["-c", f"{name}={text}"]
    return args


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...), or None."""
    try:
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc; none elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _proc_stat(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped (it holds no memory, files or sockets)."""
    fields = _proc_stat(pid)
    if fields is not None:
        return fields[0] in ("Z", "X")
    try:
        os.kill(pid, 0)  # gone, or not Linux (where a zombie counts as alive)
    except ProcessLookupError:
        return True
    return False


def _check_reachable(directory: Path, user: str) -> None:
    """PostgreSQL, run as ``user``, must traverse every parent of its directory."""
    uid = pwd.getpwnam(user).pw_uid
    for parent in directory.parents:
        mode = parent.stat()
        if not (mode.st_mode & stat.S_IXOTH or mode.st_uid == uid):
            raise ServerStartError(
                f"PostgreSQL runs as {user!r}, who cannot enter {parent} "
                f"(mode {stat.filemode(mode.st_mode)}): pass base_dir='/tmp' or set TMPDIR"
            )


def _make_tls(directory: Path, owner: str | None) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost:
    (ca.pem, server-cert.pem, server-key.pem), the key readable by ``owner`` only."""
    try:
        import trustme
    except ImportError:
        raise ServerNotInstalled("tls=True needs trustme", "pip install trustme") from None
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    ca_path, cert_path, key_path = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(str(ca_path))
    with cert_path.open("wb") as f:
        for blob in leaf.cert_chain_pems:
            f.write(blob.bytes())
    leaf.private_key_pem.write_to_path(str(key_path))
    key_path.chmod(0o600)  # PostgreSQL refuses a key that others can read
    if owner is not None:
        for path in (ca_path, cert_path, key_path):
            shutil.chown(path, owner, owner)
    return ca_path, cert_path, key_path


# --------------------------------------------------------------------------- DBServer


@dataclass
class DBServer:
    """One running (or stopped) server and how to reach it.

    ``url`` reaches it over TCP, ``socket_url`` over the unix socket (MariaDB:
    ``?unix_socket=PATH``; PostgreSQL: ``?host=DIR``, libpq's form).  With TLS,
    ``tls_ca`` is the CA to verify the server with; PostgreSQL's ``url`` then
    asks for ``sslmode=verify-full``, MariaDB's carries ``ssl_ca``.
    ``pid`` is None while stopped.
    """

    kind: Literal["mariadb", "postgresql"]
    host: str
    port: int
    socket: str
    user: str
    password: str
    database: str
    url: str
    socket_url: str
    pid: int | None
    directory: str
    log_path: str
    settings: dict[str, SettingValue] = field(default_factory=dict)
    tls_ca: str | None = None
    startup_timeout: float = 30.0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # What the subclasses provide.
    _stop_signal = signal.SIGTERM

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _popen_options(self) -> dict[str, Any]:
        return {}

    def connect(self, *, via_socket: bool = False, admin: bool = False, **options: Any) -> Any:
        """A new DB-API connection (PyMySQL or psycopg, autocommit off) as the test user over
        TCP, or over the socket; ``admin=True``: as the administrator, over the socket."""
        raise NotImplementedError

    def _probe(self) -> None:
        """One login over TCP as the test user; raises the driver's error if refused."""
        self.connect(connect_timeout=2).close()

    # Lifecycle.

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server on its data directory, port and socket; return once the
        test user can log in.  Does nothing if it is running."""
        if self.running:
            return
        self._spawn()
        try:
            self._wait_ready(self._probe)
        except BaseException:
            self.kill()
            raise

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Shut down cleanly (connected clients are disconnected, in-flight
        statements fail); killed if it takes longer than ``timeout``."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(self._stop_signal)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_group(process)
        self._process = None
        self.pid = None

    def restart(self) -> None:
        """:meth:`stop`, then :meth:`start` on the same data, port and socket."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL the server and every process it started (PostgreSQL's backends):
        a crash.  :meth:`start` then runs the server's crash recovery."""
        process = self._process
        if process is None:
            return
        self._kill_group(process)
        self._process = None
        self.pid = None

    @staticmethod
    def _kill_group(process: subprocess.Popen[bytes]) -> None:
        """SIGKILL the server and all its descendants, and wait until they are dead.

        Not just its process group: PostgreSQL's backends each call setsid(), and a
        new postmaster refuses to start while old backends still hold shared memory.
        The server is stopped first so that it forks nobody while its children are
        listed."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGSTOP)
        victims = [process.pid, *_descendants(process.pid)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # and anything left in its group
        process.wait()
        deadline = time.monotonic() + 5.0
        while not all(_dead(pid) for pid in victims) and time.monotonic() < deadline:
            time.sleep(0.005)

    def _spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self._argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                # A session of its own: Ctrl-C at the terminal reaches pytest only,
                # which then stops the server in order.
                start_new_session=True,
                **self._popen_options(),
            )
        self.pid = self._process.pid

    def _wait_ready(self, probe: Callable[[], None]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.01
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise ServerStartError(
                    f"{self.kind} exited with status {code} while starting\n{self.log_tail()}"
                )
            try:
                probe()
                return
            except Exception as error:
                if time.monotonic() + delay > deadline:
                    raise ServerStartError(
                        f"{self.kind} did not accept a login within {self.startup_timeout} s "
                        f"({error})\n{self.log_tail()}"
                    ) from error
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _start_first(self, setup: Callable[[], None] | None = None, attempts: int = 3) -> None:
        """The first start: on a port lost to a race, try another free port."""
        for attempt in range(attempts):
            log_size = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
            self._spawn()
            try:
                if setup is None:
                    self._wait_ready(self._probe)
                else:
                    self._wait_ready(lambda: self.connect(admin=True, connect_timeout=2).close())
                    setup()
                    self._probe()
                return
            except ServerStartError:
                self.kill()
                with open(self.log_path, "rb") as log:
                    log.seek(log_size)
                    port_taken = b"already in use" in log.read()
                if not port_taken or attempt == attempts - 1:
                    raise
                self._set_port(_free_port())
            except BaseException:
                self.kill()
                raise

    def _set_port(self, port: int) -> None:
        self.url = self.url.replace(f":{self.port}/", f":{port}/", 1)
        self.socket_url = self.socket_url.replace(f":{self.port}/", f":{port}/", 1)
        if self.kind == "postgresql":
            self.socket = self.socket.replace(f".s.PGSQL.{self.port}", f".s.PGSQL.{port}")
        self.port = port

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        try:
            text = Path(self.log_path).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- MariaDB


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _sql_name(value: str) -> str:
    return "`" + value.replace("`", "``") + "`"


@dataclass
class _MariaDB(DBServer):
    binary: str = ""

    def _argv(self) -> list[str]:
        d = Path(self.directory)
        return [
            self.binary,
            *_mariadb_common_flags(d),
            f"--port={self.port}",
            f"--socket={self.socket}",
            f"--pid-file={d / 'mariadb.pid'}",
            # Loopback only: a test server must not be reachable from the network.
            "--bind-address=127.0.0.1",
            # No reverse DNS lookup per TCP login (slow, or hanging, without a resolver).
            "--skip-name-resolve",
            # What Debian's my.cnf sets and clients expect; the compiled-in default is latin1.
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            # A commit reaches the OS at once but is fsynced once a second: survives a
            # SIGKILL of the server, not a power cut; no doublewrite for the same reason.
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-doublewrite=0",
            *self._tls_flags(),
            *_setting_args(self.settings, "mariadb"),
        ]

    def _tls_flags(self) -> list[str]:
        if self.tls_ca is None:
            return []
        d = Path(self.directory)
        return [
            f"--ssl-ca={self.tls_ca}",
            f"--ssl-cert={d / 'cert.pem'}",
            f"--ssl-key={d / 'key.pem'}",
        ]

    def connect(self, *, via_socket: bool = False, admin: bool = False, **options: Any) -> Any:
        pymysql = _import_driver("pymysql")
        params: dict[str, Any] = {
            "user": self.user,
            "password": self.password,
            "database": self.database,
        }
        if admin:
            params = {"user": "root", "password": "", "unix_socket": self.socket}
        elif via_socket:
            params["unix_socket"] = self.socket
        else:
            params.update(host=self.host, port=self.port)
        if self.tls_ca is not None and "unix_socket" not in params:
            params.update(ssl_ca=self.tls_ca, ssl_verify_cert=True, ssl_verify_identity=True)
        else:
            # PyMySQL otherwise builds an SSLContext per connect for "preferred" TLS (~40 ms).
            params["ssl_disabled"] = True
        params.update(options)
        return pymysql.connect(**params)


def _mariadb_common_flags(directory: Path) -> list[str]:
    flags = [
        # First, or ignored: keeps Debian's /etc/mysql/my.cnf (socket in /run/mysqld,
        # datadir /var/lib/mysql, ...) out of the test server.
        "--no-defaults",
        f"--datadir={directory / 'data'}",
        f"--log-error={directory / 'mariadb.log'}",
        # Small InnoDB files: the default 96 MB redo log is written in full by init.
        "--innodb-log-file-size=8M",
        "--innodb-buffer-pool-size=32M",
        # Simulated AIO: native AIO/io_uring fails in some containers (io_setup EAGAIN
        # once aio-max-nr is used up by other servers on the host).
        "--innodb-use-native-aio=0",
    ]
    if os.geteuid() == 0:
        flags.insert(1, "--user=root")  # mariadbd refuses root without it
    return flags


@contextlib.contextmanager
def mariadb(
    *,
    user: str = "surge",
    password: str | None = None,
    database: str = "surge",
    settings: Mapping[str, SettingValue] | None = None,
    tls: bool = False,
    startup_timeout: float = 30.0,
    base_dir: str | None = None,
) -> Iterator[DBServer]:
    """A MariaDB server with ``database`` and ``user`` (password: given, or random),
    ready for logins over TCP and the socket; stopped and removed on exit.

    ``settings``: server variables, e.g. ``{"wait_timeout": 5, "max_connections": 20}``
    (passed as ``--name=value``, after and over surge's own flags).
    ``tls``: a throwaway CA (trustme) and a certificate for 127.0.0.1; TLS stays optional
    for clients.  The user logs in with a password (mysql_native_password), over TCP and
    the socket alike.
    """
    binary, install_db = find_mariadb()
    _import_driver("pymysql")
    password = secrets.token_hex(12) if password is None else password
    directory = Path(tempfile.mkdtemp(prefix="surge-mariadb-", dir=base_dir))
    try:
        socket_path = str(directory / "mariadb.sock")
        if len(socket_path) > MAX_SOCKET_PATH:
            raise ServerStartError(f"socket path too long for AF_UNIX: {socket_path}")
        server = _MariaDB(
            kind="mariadb",
            host="127.0.0.1",
            port=_free_port(),
            socket=socket_path,
            user=user,
            password=password,
            database=database,
            url="",
            socket_url="",
            pid=None,
            directory=str(directory),
            log_path=str(directory / "mariadb.log"),
            settings=dict(settings or {}),
            startup_timeout=startup_timeout,
            binary=binary,
        )
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}"
        db = quote(database, safe="")
        server.url = f"mysql://{credentials}@127.0.0.1:{server.port}/{db}"
        server.socket_url = f"mysql://{credentials}@localhost/{db}?unix_socket={socket_path}"
        if tls:
            ca, _, _ = _make_tls(directory, None)
            server.tls_ca = str(ca)
            server.url += f"?ssl_ca={ca}"
        _mariadb_install_db(install_db, directory, user, password, database)
        try:
            server._start_first()
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _mariadb_install_db(
    install_db: str, directory: Path, user: str, password: str, database: str
) -> None:
    """System tables plus our database and user, in one bootstrap run (no server start).

    Bootstrap runs with the grant tables unloaded; FLUSH PRIVILEGES loads them so
    that CREATE USER works.  The user exists for '%' (TCP) and for 'localhost' (the
    socket): without the latter, MariaDB's anonymous ''@'localhost' would win."""
    name, pw = _sql_string(user), _sql_string(password)
    setup = directory / "setup.sql"
    setup.write_text(
        "FLUSH PRIVILEGES;\n"
        f"CREATE DATABASE {_sql_name(database)};\n"
        + "".join(
            f"CREATE USER {name}@'{host}' IDENTIFIED BY {pw};\n"
            f"GRANT ALL ON {_sql_name(database)}.* TO {name}@'{host}';\n"
            for host in ("%", "localhost")
        )
    )
    argv = [
        install_db,
        *_mariadb_common_flags(directory),
        # root@localhost with a password-less native login over the socket (not
        # unix_socket auth, which would tie it to the OS user running the tests).
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
        f"--extra-file={setup}",
    ]
    result = subprocess.run(argv, capture_output=True, cwd=directory, timeout=120)
    setup.unlink()
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace")
        log = directory / "mariadb.log"
        raise ServerStartError(
            f"mariadb-install-db failed ({result.returncode}):\n{output[-3000:]}\n"
            + (log.read_text(errors="replace")[-3000:] if log.exists() else "")
        )


# --------------------------------------------------------------------------- PostgreSQL


@dataclass
class _PostgreSQL(DBServer):
    bindir: str = ""
    run_as: str | None = None
    # SIGINT is PostgreSQL's "fast" shutdown: disconnect clients, then stop.  SIGTERM
    # ("smart") would wait for every client to leave -- forever, with a pool open.
    _stop_signal = signal.SIGINT

    def _argv(self) -> list[str]:
        d = Path(self.directory)
        argv = [
            str(Path(self.bindir) / "postgres"),
            "-D",
            str(d / "data"),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",  # loopback only
            "-c",
            f"unix_socket_directories={d}",
            # Process crashes lose nothing (the OS has the data); only a power cut would.
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
        ]
        if self.tls_ca is not None:
            argv += ["-c", "ssl=on", "-c", f"ssl_cert_file={d / 'cert.pem'}"]
            argv += ["-c", f"ssl_key_file={d / 'key.pem'}"]
        return argv + _setting_args(self.settings, "pg")

    def _popen_options(self) -> dict[str, Any]:
        return _run_as_options(self.run_as)

    def connect(self, *, via_socket: bool = False, admin: bool = False, **options: Any) -> Any:
        psycopg = _import_driver("psycopg")
        params: dict[str, Any] = {
            "user": self.user,
            "password": self.password,
            "dbname": self.database,
            "port": self.port,
            "host": self.host,
        }
        if admin:
            params.update(user="postgres", password=None, dbname="postgres", host=self.directory)
        elif via_socket:
            params["host"] = self.directory
        elif self.tls_ca is not None:
            params.update(sslmode="verify-full", sslrootcert=self.tls_ca)
        params.update(options)
        return psycopg.connect(**{k: v for k, v in params.items() if v is not None})

    def _create_user_and_database(self) -> None:
        _import_driver("psycopg")
        from psycopg import sql

        with self.connect(admin=True, autocommit=True) as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(self.user), sql.Literal(self.password)
                )
            )
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(self.database), sql.Identifier(self.user)
                )
            )


def _run_as_options(user: str | None) -> dict[str, Any]:
    """Popen options that switch to ``user`` in the child, between fork and exec."""
    if user is None or os.geteuid() != 0:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


@contextlib.contextmanager
def postgresql(
    *,
    user: str = "surge",
    password: str | None = None,
    database: str = "surge",
    auth: Literal["trust", "scram-sha-256"] = "trust",
    settings: Mapping[str, SettingValue] | None = None,
    tls: bool = False,
    run_as: str | None = None,
    startup_timeout: float = 30.0,
    base_dir: str | None = None,
) -> Iterator[DBServer]:
    """A PostgreSQL server with ``database`` owned by ``user`` (password: given, or
    random), ready for logins over TCP and the socket; stopped and removed on exit.

    ``auth``: how the user logs in, over TCP and the socket alike: ``trust`` (no
    password asked) or ``scram-sha-256``.  The superuser ``postgres`` is trusted
    over the socket only.
    ``settings``: server parameters, e.g. ``{"max_connections": 20}`` (``-c name=value``).
    ``tls``: ``ssl=on`` with a throwaway CA (trustme) and a certificate for 127.0.0.1 and
    localhost; plain TCP is still accepted, and ``url`` asks for ``sslmode=verify-full``.
    ``run_as``: the OS user for the server; as root, defaults to ``postgres``.
    """
    bindir = find_postgresql()
    _import_driver("psycopg")
    if os.geteuid() != 0:
        run_as = None  # only root can switch users: the server runs as you
    elif run_as is None:
        run_as = "postgres"
    if run_as is not None:
        try:
            pwd.getpwnam(run_as)
        except KeyError:
            raise ServerNotInstalled(
                f"PostgreSQL refuses to run as root and there is no user {run_as!r} to run it as",
                "install the Debian package postgresql (it creates the user postgres), "
                "or pass run_as='<an unprivileged user>'",
            ) from None
    password = secrets.token_hex(12) if password is None else password
    directory = Path(tempfile.mkdtemp(prefix="surge-pg-", dir=base_dir))
    try:
        if run_as is not None:
            _check_reachable(directory, run_as)
            shutil.chown(directory, run_as, run_as)
        port = _free_port()
        server = _PostgreSQL(
            kind="postgresql",
            host="127.0.0.1",
            port=port,
            socket=str(directory / f".s.PGSQL.{port}"),
            user=user,
            password=password,
            database=database,
            url="",
            socket_url="",
            pid=None,
            directory=str(directory),
            log_path=str(directory / "postgresql.log"),
            settings=dict(settings or {}),
            startup_timeout=startup_timeout,
            bindir=str(bindir),
            run_as=run_as,
        )
        if len(str(directory / ".s.PGSQL.65535.lock")) > MAX_SOCKET_PATH:
            raise ServerStartError(f"socket directory too long for AF_UNIX: {directory}")
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}"
        db = quote(database, safe="")
        server.url = f"postgresql://{credentials}@127.0.0.1:{port}/{db}"
        server.socket_url = f"postgresql://{credentials}@:{port}/{db}?host={directory}"
        if tls:
            ca, _, _ = _make_tls(directory, run_as)
            server.tls_ca = str(ca)
            server.url += f"?sslmode=verify-full&sslrootcert={ca}"
        _initdb(bindir, directory, auth, run_as)
        try:
            server._start_first(setup=server._create_user_and_database)
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _initdb(bindir: Path, directory: Path, auth: str, run_as: str | None) -> None:
    argv = [
        str(bindir / "initdb"),
        "--pgdata",
        str(directory / "data"),
        "--username=postgres",
        # Independent of the machine's locale (a container's LANG may name a locale
        # that is not generated); UTF8 as applications expect.
        "--encoding=UTF8",
        "--locale=C",
        # No fsync of every file written: the cluster is thrown away anyway (~3x faster).
        "--no-sync",
        "--auth=trust",  # replaced by the pg_hba.conf below
    ]
    result = subprocess.run(
        argv, capture_output=True, cwd=directory, timeout=120, **_run_as_options(run_as)
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace")
        raise ServerStartError(f"initdb failed ({result.returncode}):\n{output[-3000:]}")
    # First match wins: the superuser over the socket without a password (setup and
    # admin=True), then everyone with ``auth``, over the socket and loopback TCP.
    hba = directory / "data" / "pg_hba.conf"
    hba.write_text(
        f"local all postgres trust\nlocal all all {auth}\nhost all all 127.0.0.1/32 {auth}\n"
    )
    if run_as is not None:
        shutil.chown(hba, run_as, run_as)
