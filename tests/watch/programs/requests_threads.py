"""The twin: the same GETs from a thread pool, a Session per thread.

python requests_threads.py HTTP_PORT N
"""

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import requests

from surge.sim import patch_getaddrinfo

patch_getaddrinfo()
port, n = int(sys.argv[1]), int(sys.argv[2])
local = threading.local()


def get(i: int) -> int:
    session = getattr(local, "session", None) or requests.Session()
    local.session = session
    return session.get(f"http://host{i}--delay-5.sim:{port}/page?id={i}", timeout=10).status_code


with ThreadPoolExecutor(32) as pool:
    ok = sum(status == 200 for status in pool.map(get, range(n)))
print("ok:", ok)
