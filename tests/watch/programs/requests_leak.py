"""Streamed responses kept and never closed: each holds its connection's
socket, until the process runs out of descriptors (run it under ulimit -n 64).
Given "closed", each response is read and closed (its well-written twin), 4 at
a time: one at a time, a loaded machine's slow turns make the requests most of
the wall time, and surge watch would rightly call them serial-requests.

python requests_leak.py HTTP_PORT N [closed]
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import requests

from surge.sim import patch_getaddrinfo

patch_getaddrinfo()  # *.sim -> the simulated web on 127.0.0.1
port, n = int(sys.argv[1]), int(sys.argv[2])
closed = sys.argv[3:] == ["closed"]
urls = [f"http://host{i % 10}.sim:{port}/page?id={i}" for i in range(n)]
kept: list[object] = []
errors = 0


def read_and_close(url: str) -> int | None:
    """The body's length (None if the GET failed); the response closed either way."""
    try:
        with requests.get(url, stream=True, timeout=10) as response:
            return len(response.content)
    except requests.ConnectionError:
        return None


if closed:
    with ThreadPoolExecutor(4) as pool:
        sizes = list(pool.map(read_and_close, urls))
    errors = sum(size is None for size in sizes)
else:
    for url in urls:
        try:
            kept.append(requests.get(url, stream=True, timeout=10))
        except requests.ConnectionError:
            errors += 1
print("errors:", errors)
