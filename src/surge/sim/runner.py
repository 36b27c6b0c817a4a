"""Ways to run the simulated web beside the code under test.

- :func:`running`: in this process, on a background thread with its own event
  loop (uvloop when importable) -- for pytest fixtures.
- :func:`background`: in a child process (``python -m surge.sim``), so that the
  server has a core of its own and never competes with the client for the GIL --
  for benchmarks and ``surge demo``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import surge
from surge.sim.server import SimInfo, SimServer, serve

#: How long :func:`running` and :func:`background` wait for the server to listen.
STARTUP_TIMEOUT_S = 20.0


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop constructor when uvloop is importable, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


@contextlib.contextmanager
def running(
    port: int = 0,
    tls_port: int = 0,
    seed: int = 0,
    *,
    cafile: str | None = None,
    warm_tls: int = 0,
    use_uvloop: bool = True,
) -> Iterator[SimInfo]:
    """Run the simulated web on a background thread for the duration of the block."""
    loop = loop_factory()() if use_uvloop else asyncio.new_event_loop()
    started = threading.Event()
    servers: list[SimServer] = []
    errors: list[BaseException] = []

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(
                serve(port=port, tls_port=tls_port, seed=seed, cafile=cafile, warm_tls=warm_tls)
            )
        except BaseException as error:  # handed to the waiting thread, which raises it
            errors.append(error)
            started.set()
            loop.close()
            return
        servers.append(server)
        started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(server.close())
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    thread = threading.Thread(target=main, name="surge-sim", daemon=True)
    thread.start()
    if not started.wait(STARTUP_TIMEOUT_S):
        raise RuntimeError("the simulated web did not start in time")
    if not servers:
        raise RuntimeError("the simulated web failed to start") from errors[0]
    server = servers[0]
    try:
        yield server.info
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STARTUP_TIMEOUT_S)


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(surge.__file__)))


@contextlib.contextmanager
def background(
    port: int = 0,
    tls_port: int = 0,
    seed: int = 0,
    *,
    cafile: str | None = None,
    warm_tls: int = 0,
    python: str = sys.executable,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
) -> Iterator[SimInfo]:
    """Run ``python -m surge.sim`` in a child process for the duration of the block.

    Returns once the child has printed its line of JSON (it listens by then); the
    child is terminated (then killed, if it lingers) on exit.  ``warm_tls``: see
    :func:`surge.sim.server.serve`.
    """
    command = [python, "-m", "surge.sim", "--port", str(port), "--tls-port", str(tls_port)]
    command += ["--seed", str(seed), "--warm-tls", str(warm_tls)]
    if cafile is not None:
        command += ["--cafile", cafile]
    env = dict(os.environ)
    # The child must import this very surge, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_package_root(), env.get("PYTHONPATH", "")) if p
    )
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    try:
        info = _read_info(child, startup_timeout_s)
        yield info
    finally:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def _read_info(child: subprocess.Popen[bytes], timeout_s: float) -> SimInfo:
    """Read the child's first line of stdout (its ports and CA file) within ``timeout_s``."""
    assert child.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"surge.sim did not report its ports within {timeout_s} s")
            if not selector.select(remaining):
                continue
            data = os.read(child.stdout.fileno(), 4096)
            if not data:
                raise RuntimeError(f"surge.sim exited with status {child.wait()} before listening")
            line += data
    fields = json.loads(line.split(b"\n", 1)[0])
    return SimInfo(
        http_port=int(fields["http_port"]),
        https_port=int(fields["https_port"]),
        cafile=str(fields["cafile"]),
        seed=int(fields["seed"]),
        host=str(fields["host"]),
        pid=child.pid,
        dns_port=int(fields["dns_port"]) if fields.get("dns_port") else None,
    )
