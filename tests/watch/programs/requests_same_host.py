"""One HTTPS host, asked N times with requests.get (a new Session, so a new
connection, each time) - or, with --session, from 8 threads that each keep one.

    python requests_same_host.py HTTPS_PORT CAFILE N [--session]
"""

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import requests

port, cafile, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
url = f"https://localhost:{port}/item"
if "--session" in sys.argv:
    local = threading.local()

    def get(_: int) -> int:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        return session.get(url, verify=cafile, timeout=10).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(get, range(n)))
else:
    statuses = [requests.get(url, verify=cafile, timeout=10).status_code for _ in range(n)]
print("ok:", statuses.count(200))
