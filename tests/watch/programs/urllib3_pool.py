"""The pool write-up: urllib3 with a pool of MAXSIZE under 16 threads.

python urllib3_pool.py HTTP_PORT MAXSIZE REQUESTS_PER_THREAD
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import urllib3

from surge.sim import patch_getaddrinfo

patch_getaddrinfo()  # *.sim -> the simulated web on 127.0.0.1
port, maxsize, each = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
http = urllib3.PoolManager(maxsize=maxsize)
url = f"http://delay-20.sim:{port}/"


def work(_: int) -> int:
    return sum(http.request("GET", url).status == 200 for _ in range(each))


with ThreadPoolExecutor(16) as pool:
    print("ok:", sum(pool.map(work, range(16))))
