"""urllib.request.urlopen in a loop: a new connection, and a lookup of the
host's name, for every request.

    python urllib_loop.py HTTP_PORT N
"""

import sys
import urllib.request

port, n = int(sys.argv[1]), int(sys.argv[2])
ok = sum(
    urllib.request.urlopen(f"http://localhost:{port}/item", timeout=10).status == 200
    for _ in range(n)
)
print("ok:", ok)
