"""Standard library only: http.client GETs one after another, a connection each
(runs on any Python 3 that surge watch's recording supports).

    python http_client_loop.py HTTP_PORT N [DELAY_MS]
"""

import http.client
import sys

port, n = int(sys.argv[1]), int(sys.argv[2])
delay = int(sys.argv[3]) if len(sys.argv) > 3 else 10
ok = 0
for i in range(n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", f"/item?id={i}", headers={"Host": f"host{i}--delay-{delay}.sim"})
    ok += conn.getresponse().read() is not None
    conn.close()
print("ok:", ok)
