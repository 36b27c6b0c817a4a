"""Connect per query from 8 threads at once (PyMySQL): the connects overlap, so
their sum is several times the wall time; their union on the wall clock is not.

python mysql_threads_connect_per_query.py URL N
"""

import sys
import threading
from urllib.parse import urlsplit

import pymysql

THREADS = 8
url, n = urlsplit(sys.argv[1]), int(sys.argv[2])


def work(count: int) -> None:
    for i in range(count):
        conn = pymysql.connect(
            host=url.hostname,
            port=url.port,
            user=url.username,
            password=url.password,
            database=url.path.lstrip("/"),
        )
        with conn.cursor() as cur:
            cur.execute("SELECT %s", (i,))
            cur.fetchone()
        conn.close()


threads = [threading.Thread(target=work, args=(n // THREADS,)) for _ in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("queries:", n // THREADS * THREADS)
