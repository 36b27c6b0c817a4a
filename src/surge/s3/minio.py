"""A MinIO server on loopback, for surge's tests and benchmarks.

    with minio_server() as server:
        print(server.endpoint_url, server.access_key, server.secret_key)

The binary is found in ``$SURGE_MINIO``, then on ``PATH``, then where
``.ci/run`` builds it once (``go install`` of :data:`MINIO_MODULE`, ~4.5
minutes on the 2-core machine): ``${XDG_CACHE_HOME:-~/.cache}/surge/bin/minio``,
outside the repository so that a fresh clone does not build it again. When it
is missing, :class:`MinioNotInstalled` says how to get it.

Each server gets a free port on 127.0.0.1, its own data directory (a temporary
one unless given - a benchmark keeps its populated buckets between runs), and
root credentials of its own; it is stopped (SIGTERM, then SIGKILL) on exit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: The MinIO that tests and benchmarks run, pinned so that every fresh machine
#: builds the same server (``@latest`` would change under CI from one day to the
#: next); .ci/run reads it from here.
MINIO_MODULE = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"


class MinioNotInstalled(RuntimeError):
    pass


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "surge"


def find_minio() -> str:
    """The path of a MinIO server binary, or raise :class:`MinioNotInstalled`."""
    candidates = [os.environ.get("SURGE_MINIO"), shutil.which("minio")]
    candidates.append(str(cache_dir() / "bin" / "minio"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise MinioNotInstalled(
        "no MinIO server binary (looked in $SURGE_MINIO, PATH and "
        f"{cache_dir() / 'bin' / 'minio'}); build it with "
        f"GOBIN={cache_dir() / 'bin'} go install {MINIO_MODULE}, "
        "as .ci/run does"
    )


@dataclass(frozen=True)
class MinioServer:
    endpoint_url: str
    access_key: str
    secret_key: str
    data_dir: Path
    process: subprocess.Popen[bytes]

    @property
    def port(self) -> int:
        return int(self.endpoint_url.rsplit(":", 1)[1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def minio_server(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    access_key: str = "surgeadmin",
    secret_key: str | None = None,
    start_timeout: float = 60.0,
    log: str | os.PathLike[str] | None = None,
    region: str | None = None,
) -> Iterator[MinioServer]:
    """Start a MinIO server on 127.0.0.1 and stop it on exit; ``region``: the
    region it says it is in (MINIO_SITE_REGION), refusing requests signed for
    another as S3 does (AuthorizationHeaderMalformed)."""
    binary = find_minio()
    secret_key = secret_key or secrets.token_hex(16)
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="surge-minio-"))
        data = Path(data_dir)
        data.mkdir(parents=True, exist_ok=True)
        port, console = _free_port(), _free_port()
        env = dict(os.environ)
        env.update(
            MINIO_ROOT_USER=access_key,
            MINIO_ROOT_PASSWORD=secret_key,
            MINIO_BROWSER="off",  # no console: nothing listens but the S3 port
            MINIO_UPDATE="off",  # never reach out for updates
            MINIO_CALLHOME_ENABLE="off",
        )
        if region is not None:
            env["MINIO_SITE_REGION"] = region
        out = stack.enter_context(open(log or os.devnull, "ab"))
        process = subprocess.Popen(
            [
                binary,
                "server",
                "--quiet",
                "--address",
                f"127.0.0.1:{port}",
                "--console-address",
                f"127.0.0.1:{console}",
                str(data),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        stack.callback(_stop, process)
        endpoint = f"http://127.0.0.1:{port}"
        _wait_ready(endpoint, process, start_timeout)
        yield MinioServer(endpoint, access_key, secret_key, data, process)


def _wait_ready(endpoint: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    # No proxy from the environment: this talks to 127.0.0.1 and nothing else.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"MinIO exited with status {process.returncode} while starting")
        try:
            with opener.open(f"{endpoint}/minio/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"MinIO did not become ready at {endpoint} within {timeout:g} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
