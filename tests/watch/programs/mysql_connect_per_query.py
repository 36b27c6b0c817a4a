"""The MySQL write-up: a connect, a query and a close for every query (PyMySQL).

python mysql_connect_per_query.py URL N
"""

import sys
from urllib.parse import urlsplit

import pymysql

url, n = urlsplit(sys.argv[1]), int(sys.argv[2])
for i in range(n):
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
print("queries:", n)
