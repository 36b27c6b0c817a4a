"""N requests to one loopback host, made by children of one kind:

    python requests_in_children.py HTTP_PORT N KIND

KIND: fork-pool, forkserver-pool, spawn-pool (multiprocessing Pool(2), closed
and joined), fork-executor (ProcessPoolExecutor over fork), os-fork (a child
that makes them all and ends by os._exit), os-fork-killed (that child
kills itself with SIGTERM once done: what it did is lost), fork-terminated
(Pool(2) as a ``with`` block: its workers are SIGTERMed unless they ended
first), exec (as os-fork, then each child runs commands that are not Python:
subprocess with a preexec_fn, and os.fork + os.execv - nothing is lost).
"""

import concurrent.futures
import multiprocessing
import os
import signal
import subprocess
import sys
import urllib.request


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()
        return response.status


def main() -> None:
    port, n, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    urls = [f"http://127.0.0.1:{port}/item/{i}" for i in range(n)]
    if kind == "exec":
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
        pid = os.fork()
        if pid == 0:
            os.execv("/bin/true", ["true"])
        os.waitpid(pid, 0)
        kind = "os-fork"
    if kind in ("os-fork", "os-fork-killed"):
        pid = os.fork()
        if pid == 0:
            statuses = [get(url) for url in urls]
            if kind == "os-fork-killed":
                os.kill(os.getpid(), signal.SIGTERM)
            os._exit(0 if statuses.count(200) == n else 1)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        statuses = [200] * n if code in (0, -signal.SIGTERM) else []
    elif kind == "fork-executor":
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
            statuses = list(pool.map(get, urls))
    elif kind == "fork-terminated":
        with multiprocessing.get_context("fork").Pool(2) as pool:
            statuses = pool.map(get, urls, chunksize=1)
    else:
        method = kind.removesuffix("-pool")
        pool = multiprocessing.get_context(method).Pool(2)
        statuses = pool.map(get, urls, chunksize=1)
        pool.close()
        pool.join()
    print("ok:", statuses.count(200))


if __name__ == "__main__":
    main()
