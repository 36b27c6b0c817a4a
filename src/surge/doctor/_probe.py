"""What the checks learn without importing what they look at: a package's
version from its metadata on disk, and code run in this process only when its
module is loaded here already, else in a child interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from typing import Any

from surge.doctor.checks import _Context


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


#: A full TLS 1.3 handshake and a resumed one, the client's side only, over
#: memory BIOs against an in-process server: what a new connection costs this
#: interpreter's OpenSSL in CPU, without a socket.  The certificate is a
#: throwaway self-signed P-256 one for the name ``surge-probe.invalid`` (never a
#: real host; the ``.invalid`` TLD cannot resolve), made for this probe only.
_TLS_HANDSHAKE_PROBE = """
import os, ssl, statistics, tempfile, time

PEM = \"\"\"
-----BEGIN CERTIFICATE-----
MIIBszCCAVmgAwIBAgIUZy9Wp5pHACJdfoTbfZ2HJTTp5UUwCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTc3VyZ2UtcHJvYmUuaW52YWxpZDAgFw0yNjEyMDIxNDUxNDJa
GA8yMTI2MTEwODE0NTE0MlowHjEcMBoGA1UEAwwTc3VyZ2UtcHJvYmUuaW52YWxp
ZDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABCmte9kfYDZ/k6enjyb1mn7yV3a/
c1cK2mXZeW25PHea+TW8NkRFjjUT3knYXgtglVL5plZ39QPyevLrlig/U8GjczBx
MB0GA1UdDgQWBBQkQWkl4K+iSzBFBomxyM0kn8jezzAfBgNVHSMEGDAWgBQkQWkl
4K+iSzBFBomxyM0kn8jezzAPBgNVHRMBAf8EBTADAQH/MB4GA1UdEQQXMBWCE3N1
cmdlLXByb2JlLmludmFsaWQwCgYIKoZIzj0EAwIDSAAwRQIhAP+XdFOWe+sCquZC
WRmU/rCaCIl0v4qD1pHuASg8sDvCAiA1S/9334z1s5IsVh0gsbNH4lKliRmVN9DC
A+Ot8/bdLA==
-----END CERTIFICATE-----
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRcMmsxh8BL3oA7Hw
eeS2JEorEUL2y3E4hUYbLN+KICahRANCAAQprXvZH2A2f5Onp48m9Zp+8ld2v3NX
Ctpl2XltuTx3mvk1vDZERY41E95J2F4LYJVS+aZWd/UD8nry65YoP1PB
-----END PRIVATE KEY-----
\"\"\"
NAME = "surge-probe.invalid"


def _handshake(client_context, server_context, session=None):
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, client_out, server_hostname=NAME, session=session)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    spent = 0.0
    client_done = server_done = False
    for _ in range(8):
        if not client_done:
            began = time.thread_time()
            try:
                client.do_handshake()
                client_done = True
            except ssl.SSLWantReadError:
                pass
            spent += time.thread_time() - began
        server_in.write(client_out.read())
        if not server_done:
            try:
                server.do_handshake()
                server_done = True
            except ssl.SSLWantReadError:
                pass
        client_in.write(server_out.read())
        if client_done and server_done:
            break
    began = time.thread_time()
    try:  # TLS 1.3: the session ticket comes after the handshake
        client.read(1)
    except ssl.SSLWantReadError:
        pass
    spent += time.thread_time() - began
    return spent, client.session, client.session_reused


def measure():
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "probe.pem")
    try:
        with open(path, "w") as out:
            out.write(PEM)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(path)
        client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_context.load_verify_locations(cadata=PEM[: PEM.index("-----BEGIN PRIVATE KEY")])
    finally:
        os.unlink(path)
        os.rmdir(folder)
    full, resumed, reused = [], [], 0
    for _ in range(30):
        cost, session, _ = _handshake(client_context, server_context)
        full.append(cost)
        cost, _, was = _handshake(client_context, server_context, session)
        resumed.append(cost)
        reused += was
    return {
        "full_ms": round(statistics.median(full) * 1000, 3),
        "resumed_ms": round(statistics.median(resumed) * 1000, 3),
        "resumed_share": round(reused / 30, 2),
        "openssl": ssl.OPENSSL_VERSION,
        "openssl_info": list(ssl.OPENSSL_VERSION_INFO[:3]),
    }
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
