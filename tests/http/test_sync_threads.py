"""Threads sharing one synchronous ``Client``: their requests run at the same
time on one pool of connections, each returning in its own time.

Judged by what the server saw (tests/http/gate_server.py): how many requests it
held at once, on how many connections, and which were answered while others
still waited - never by wall-clock time.  The scenarios that a deadlock would
hang (a signal handler, Ctrl-C, a fork) run in a child process with a bound.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.http.gate_server import GateServer

from surge.http import Client, Request
from surge.http.portal import PortalClosed

HERE = Path(__file__).resolve().parent
THREADS = 8


@pytest.fixture
def server() -> GateServer:
    with GateServer() as gate:
        yield gate  # type: ignore[misc]


def test_a_thread_pool_shares_one_client_concurrently(server: GateServer) -> None:
    """Eight held requests from eight threads are at the server together, and a
    ninth thread's request is answered while all eight still wait."""
    with Client(max_time=30) as client, ThreadPoolExecutor(THREADS) as pool:
        held = [pool.submit(client.get, server.url(f"/hold/{n}")) for n in range(THREADS)]
        try:
            assert server.wait_holding(THREADS), server.snapshot()  # before: 1 at a time
            fast = client.get(server.url("/fast"))
            assert fast.text == f"held={THREADS}"  # answered while all eight waited
            assert not any(f.done() for f in held)
        finally:
            server.release()
        assert [f.result().status for f in held] == [200] * THREADS
    assert server.connections == THREADS + 1  # one pool: a connection per request in flight


def test_the_pool_limits_hold_across_threads(server: GateServer) -> None:
    """max_connections=2: eight threads' requests wait their turn in the pool's
    queue (no "pool is full", no ninth connection) and all succeed."""
    with Client(max_connections=2, max_time=30) as client, ThreadPoolExecutor(THREADS) as pool:
        held = [pool.submit(client.get, server.url(f"/hold/{n}")) for n in range(THREADS)]
        assert server.wait_holding(2)
        assert not server.wait_holding(3, timeout=0.3)  # the others wait in surge's queue
        server.release()
        assert [f.result().status for f in held] == [200] * THREADS
        assert client.stats()["open"] <= 2
    assert server.max_connections_open == 2 and server.connections == 2


def test_per_host_holds_across_threads(server: GateServer) -> None:
    with Client(per_host=3, max_time=30) as client, ThreadPoolExecutor(THREADS) as pool:
        held = [pool.submit(client.get, server.url(f"/hold/{n}")) for n in range(THREADS)]
        assert server.wait_holding(3)
        server.release()
        assert [f.result().status for f in held] == [200] * THREADS
    assert server.max_held == 3 and server.connections == 3


def test_close_from_another_thread_ends_the_requests_in_flight(server: GateServer) -> None:
    client = Client(max_time=30)
    with ThreadPoolExecutor(THREADS) as pool:
        held = [pool.submit(client.get, server.url(f"/hold/{n}")) for n in range(THREADS)]
        assert server.wait_holding(THREADS)
        client.close()
        for future in held:
            with pytest.raises(PortalClosed, match="closed"):
                future.result(timeout=10)
        assert server.wait_until(lambda s: s.closed_while_held == THREADS)  # sockets closed
    with pytest.raises(RuntimeError, match="the client is closed"):
        client.get(server.url("/fast"))
    client.close()  # again: nothing
    assert server.paths_answered() == []


def test_close_from_a_thread_before_any_request() -> None:
    client = Client()
    thread = threading.Thread(target=client.close)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        client.get("http://127.0.0.1:9/")


def test_called_from_inside_a_running_loop_and_from_to_thread(server: GateServer) -> None:
    """asyncio.to_thread callers share the client at once; a call made in the
    loop's own thread blocks that loop (as requests would) and is answered."""

    many = 4  # the default executor has min(32, cores + 4) threads: 6 on 2 cores

    async def main(client: Client) -> list[int]:
        held = [
            asyncio.ensure_future(asyncio.to_thread(client.get, server.url(f"/hold/{n}")))
            for n in range(many)
        ]
        assert await asyncio.to_thread(server.wait_holding, many)
        fast = client.get(server.url("/fast"))  # in the running loop's thread
        assert fast.text == f"held={many}"
        server.release()
        return [r.status for r in await asyncio.gather(*held)]

    with Client(max_time=30) as client:
        assert asyncio.run(main(client)) == [200] * many


def test_a_call_from_the_clients_own_loop_is_an_error_not_a_deadlock(server: GateServer) -> None:
    """An async iterator body runs on the client's loop (where async code runs):
    a synchronous call from it would wait for itself."""
    with Client() as client:

        async def body() -> AsyncIterator[bytes]:  # runs on the client's loop
            client.get(server.url("/inner"))
            yield b"x"

        with pytest.raises(RuntimeError, match="own event loop"):
            client.post(server.url("/outer"), content=body())
        assert client.get(server.url("/after")).status == 200
    assert "/inner" not in server.paths_answered()  # (the head of /outer went out)


def test_callers_code_may_call_the_client_again(httpbin: str) -> None:
    """An auth callable and a body generator run in the calling thread (as in
    httpx and requests), so they may make requests of their own on the same
    client - a token fetched through it - without waiting for themselves."""
    with Client(max_time=30) as client:

        def auth(request: Request) -> None:
            request.headers["Authorization"] = client.get(f"{httpbin}/base64/dG9rZW4=").text

        def body() -> Iterator[bytes]:
            yield client.get(f"{httpbin}/base64/cGFydA==").content

        echo = client.post(f"{httpbin}/anything", auth=auth, content=body()).json()
    assert (echo["headers"]["Authorization"], echo["data"]) == ("token", "part")


def test_many_threads_many_requests_all_match(server: GateServer) -> None:
    """Every thread gets its own responses back (no crossed wires)."""

    def work(n: int) -> list[str]:
        return [client.get(server.url(f"/t{n}/{i}")).url for i in range(25)]

    with Client() as client, ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(work, range(THREADS)))
    for n, urls in enumerate(results):
        assert urls == [server.url(f"/t{n}/{i}") for i in range(25)]
    assert server.connections <= THREADS


def test_streams_from_several_threads(server: GateServer) -> None:
    def work(n: int) -> bytes:
        with client.stream("GET", server.url(f"/s{n}")) as response:
            return b"".join(response.iter_bytes())

    with Client() as client, ThreadPoolExecutor(4) as pool:
        assert list(pool.map(work, range(8))) == [b"held=0"] * 8


# -- in a child process: what would hang if it deadlocked ---------------------------------


def run_script(body: str) -> str:
    """Run ``body`` in a child with the gate server importable; its stdout.  A
    deadlock is a failure at the bound, not a hung test run."""
    script = f"import sys\nsys.path.insert(0, {str(HERE)!r})\n" + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_signal_handler_calls_the_client_the_main_thread_is_waiting_on() -> None:
    out = run_script(
        """
        import os, signal, threading
        from gate_server import GateServer
        from surge.http import Client, Request

        with GateServer() as server, Client(max_time=30) as client:
            seen = []

            def handler(signum, frame):
                # the main thread is inside client.get below, waiting
                seen.append(client.get(server.url("/from-handler")).text)
                server.release()

            signal.signal(signal.SIGUSR1, handler)

            def poke():
                server.wait_holding(1)
                os.kill(os.getpid(), signal.SIGUSR1)

            threading.Thread(target=poke).start()
            outer = client.get(server.url("/hold")).text
            print(seen, outer, server.paths_answered())
        """
    )
    assert out.strip() == "['held=1'] held=0 ['/from-handler', '/hold']"


def test_ctrl_c_while_waiting_cancels_the_request() -> None:
    out = run_script(
        """
        import os, signal, threading
        from gate_server import GateServer
        from surge.http import Client, Request

        # Python keeps an inherited SIG_IGN for SIGINT (a runner started with
        # `&` from a non-interactive shell ignores it): Ctrl-C's own handler here.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with GateServer() as server, Client(max_time=30) as client:
            def interrupt():
                server.wait_holding(1)
                os.kill(os.getpid(), signal.SIGINT)

            threading.Thread(target=interrupt).start()
            try:
                client.get(server.url("/hold"))
            except KeyboardInterrupt:
                print("interrupted")
            # the request's connection is closed on the loop, not left waiting
            print(server.wait_until(lambda s: s.closed_while_held == 1))
            print(client.get(server.url("/after")).text)
        """
    )
    assert out.split() == ["interrupted", "True", "held=0"]


def test_a_forked_child_gets_a_fresh_client_and_the_parent_keeps_its_own() -> None:
    out = run_script(
        """
        import os
        from gate_server import GateServer
        from surge.http import Client, Request

        with GateServer() as server, Client(max_time=30, cookies={"k": "v"}) as client:
            client.get(server.url("/parent-1"))
            pid = os.fork()
            if pid == 0:
                try:
                    response = client.get(server.url("/child"))
                    ok = response.status == 200 and client.stats()["created"] == 1
                    ok = ok and [c.name for c in client.cookies] == ["k"]
                    client.close()
                finally:
                    os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            print(os.waitstatus_to_exitcode(status))
            client.get(server.url("/parent-2"))
            print(client.stats()["created"])
            print([(path, conn) for path, _, conn in server.answers])
        """
    )
    code, created, answers = out.splitlines()
    assert code == "0" and created == "1"  # the parent's one connection, reused
    # the child asked on a connection of its own; the parent's went on untouched
    assert answers == "[('/parent-1', 1), ('/child', 2), ('/parent-2', 1)]"


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
def test_a_callback_that_raises_systemexit_leaves_the_client_working(
    server: GateServer, error: type[BaseException]
) -> None:
    """asyncio raises a task's SystemExit/KeyboardInterrupt out of the loop too:
    the caller gets it, and the loop goes on for everyone else."""

    def auth(request: object) -> object:
        raise error()

    with Client(max_time=10) as client, ThreadPoolExecutor(2) as pool:
        with pytest.raises(error):
            client.get(server.url("/x"), auth=auth)
        assert pool.submit(client.get, server.url("/after")).result(timeout=10).status == 200
    assert server.paths_answered() == ["/after"]


def test_unclosed_clients_let_go_of_their_threads(server: GateServer) -> None:
    import gc

    before = threading.active_count()
    for _ in range(20):
        Client().get(server.url("/dropped"))
    gc.collect()
    assert server.wait_until(lambda s: s.open == 0)  # their connections closed, too
    assert threading.active_count() <= before + 1


def test_a_stream_whose_client_closed_fails_at_once(server: GateServer) -> None:
    client = Client(max_time=10)
    with client.stream("GET", server.url("/s")) as response:
        closer = threading.Thread(target=client.close)
        closer.start()
        closer.join(10)
        with pytest.raises(PortalClosed):
            response.read()


def test_a_fork_while_another_thread_holds_the_clients_start_lock() -> None:
    """The thread that held it does not exist in the child: the child must
    not wait for it for ever."""
    out = run_script(
        """
        import os, threading
        from gate_server import GateServer
        from surge.http import Client, Request

        with GateServer() as server, Client(max_time=30) as client:
            held, go = threading.Event(), threading.Event()

            def hold():
                with client._starting:  # as a first call or a close() does
                    held.set()
                    go.wait()

            holder = threading.Thread(target=hold)
            holder.start()
            held.wait()
            pid = os.fork()
            if pid == 0:
                ok = client.get(server.url("/child")).status == 200
                os._exit(0 if ok else 1)
            go.set()
            holder.join()
            print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
            print(client.get(server.url("/parent")).status)
        """
    )
    assert out.split() == ["0", "200"]
