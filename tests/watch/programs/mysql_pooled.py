"""The twin: the same queries through a pool (surge.db), connected once.

python mysql_pooled.py URL N
"""

import sys

import surge.db

url, n = sys.argv[1], int(sys.argv[2])
pool = surge.db.pool(url, max_size=2)
for i in range(n):
    with pool.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT %s", (i,))
        cur.fetchone()
pool.close()
print("queries:", n)
