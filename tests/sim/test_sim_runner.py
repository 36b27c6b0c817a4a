"""Starting the simulated web: in a loop, on a thread, in a child process, from the CLI;
and making ``*.sim`` resolve to loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import surge
from surge.sim import background, patch_getaddrinfo, running, serve
from surge.sim.cli import sim_command
from surge.sim.server import raise_open_files_limit


async def _fetch(port: int, host: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 3)
    writer.close()
    return data


async def test_serve_on_the_current_loop() -> None:
    server = await serve()
    try:
        assert (await _fetch(server.http_port, "status-404.sim")).startswith(b"HTTP/1.1 404")
        assert os.path.exists(server.cafile)
        # a hanging connection must not keep close() waiting
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"GET / HTTP/1.1\r\nHost: hang.sim\r\n\r\n")
        await writer.drain()
    finally:
        await asyncio.wait_for(server.close(), 3)
    assert not os.path.exists(server.cafile)
    # the hanging connection was dropped: EOF, or RST if the server had not yet
    # read the request out of its socket when close() came
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), 3) == b""
    writer.close()


async def test_serve_binds_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        await serve(host="0.0.0.0")


def test_running_on_asyncio_loop_resets_too() -> None:
    with (
        running(use_uvloop=False) as sim,
        socket.create_connection(("127.0.0.1", sim.http_port), timeout=3) as sock,
    ):
        sock.sendall(b"GET / HTTP/1.1\r\nHost: reset.sim\r\n\r\n")
        with pytest.raises(ConnectionResetError):
            sock.recv(1)


def test_background_runs_a_child_process(sim_urlopen) -> None:
    with background(seed=7) as sim:
        assert sim.pid is not None and sim.pid != os.getpid() and sim.seed == 7
        with sim_urlopen(sim.url("x.sim")) as response:
            assert response.status == 200
        with sim_urlopen(sim.url("site3.sim", tls=True), context=sim.ssl_context()) as response:
            assert response.headers["X-Sim-Host"] == "site3.sim"
        cafile = sim.cafile
    assert not os.path.exists(cafile)
    with pytest.raises(ProcessLookupError):
        os.kill(sim.pid, 0)


def test_cli_writes_hosts_then_reports(tmp_path: Path) -> None:
    hosts_file = tmp_path / "urls.txt"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(surge.__file__))
    command = [sys.executable, "-m", "surge.sim", "--write-hosts", str(hosts_file)]
    command += ["--hosts", "3", "--tls", "--seed", "2"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None
        info = json.loads(child.stdout.readline())
        assert info["seed"] == 2 and info["host"] == "127.0.0.1"
        port = info["https_port"]
        assert hosts_file.read_text().splitlines() == [
            f"https://site{i}.sim:{port}/" for i in range(3)
        ]
    finally:
        child.terminate()
        assert child.wait(5) == 0
        assert child.stdout is not None
        child.stdout.close()


def test_cli_usage_errors() -> None:
    result = CliRunner().invoke(sim_command, ["--hosts", "3"])
    assert result.exit_code == 2 and "--write-hosts" in result.output
    result = CliRunner().invoke(sim_command, ["--port", "70000"])
    assert result.exit_code == 2


def test_patch_getaddrinfo_maps_sim_names_only() -> None:
    original = socket.getaddrinfo
    unpatch = patch_getaddrinfo()
    try:
        assert patch_getaddrinfo()() is None  # patching twice is harmless
        for name in ["site1.sim", "a.b.sim", "SIM", b"x.sim"]:
            (family, _, _, _, address), *_ = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
            assert family == socket.AF_INET and address == ("127.0.0.1", 80)
        assert socket.getaddrinfo("x.sim", 80, socket.AF_INET6)[0][4][0] == "127.0.0.1"
        # other names reach the original (a numeric one: these tests resolve nothing)
        assert socket.getaddrinfo("127.0.0.2", 80, type=socket.SOCK_STREAM)[0][4][0] == "127.0.0.2"
    finally:
        unpatch()
    assert socket.getaddrinfo is original


def test_open_files_limit_is_raised() -> None:
    import resource

    limit = raise_open_files_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert limit == soft and (soft == hard or hard == resource.RLIM_INFINITY)
