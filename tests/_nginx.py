"""A real nginx (Debian's package) on loopback, with the test's own server blocks.

    with nginx(base, servers, wait_port=port):
        ...

``base`` holds the configuration, the logs and nginx's temporary directories;
``servers`` is the text of the ``http {}`` block's server blocks (and any
``http``-level directive).  Under CI a missing nginx fails the test, elsewhere
it is skipped with the same hint.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from surge.testing.servers import ServerStartError, wait_listening


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nginx_binary() -> str:
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if found is None:
        message = "nginx is not installed (apt-get install nginx; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(message)
    return found


@contextmanager
def nginx(base: Path, servers: str, *, wait_port: int) -> Iterator[subprocess.Popen[bytes]]:
    """nginx running ``servers`` until the block ends (ready: ``wait_port`` accepts)."""
    binary = nginx_binary()
    for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (base / temp).mkdir()
    config = base / "nginx.conf"
    config.write_text(
        f"""
daemon off;
master_process off;
pid {base / "nginx.pid"};
error_log {base / "error.log"} warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {base / "body"};
    proxy_temp_path {base / "proxy"};
    fastcgi_temp_path {base / "fastcgi"};
    uwsgi_temp_path {base / "uwsgi"};
    scgi_temp_path {base / "scgi"};
    {servers}
}}
"""
    )
    process = subprocess.Popen(
        [binary, "-c", str(config), "-p", str(base), "-e", str(base / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        try:
            wait_listening(wait_port, process, "nginx")
        except ServerStartError as e:
            pytest.fail(str(e), pytrace=False)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()
