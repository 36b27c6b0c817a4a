"""The 1,000-GETs write-up: requests.get in a loop, one host after another.

python requests_loop.py HTTP_PORT N
"""

import sys

import requests

from surge.sim import patch_getaddrinfo

patch_getaddrinfo()  # *.sim -> the simulated web on 127.0.0.1
port, n = int(sys.argv[1]), int(sys.argv[2])
delay = int(sys.argv[3]) if len(sys.argv) > 3 else 5
ok = 0
for i in range(n):
    response = requests.get(f"http://host{i}--delay-{delay}.sim:{port}/page?id={i}", timeout=10)
    ok += response.status_code == 200
print("ok:", ok)
