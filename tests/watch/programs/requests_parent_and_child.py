"""N requests to one loopback host from this process, then N more from a Python
child it starts (the same program, with --child).

    python requests_parent_and_child.py HTTP_PORT N
"""

import subprocess
import sys

import requests

port, n = int(sys.argv[1]), int(sys.argv[2])
with requests.Session() as session:
    statuses = [
        session.get(f"http://127.0.0.1:{port}/item", timeout=10).status_code for _ in range(n)
    ]
print("child" if "--child" in sys.argv else "parent", "ok:", statuses.count(200))
if "--child" not in sys.argv:
    subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child"], check=True)
