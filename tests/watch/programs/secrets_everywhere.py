"""A program whose requests and queries carry a secret everywhere a secret goes:
a URL's userinfo and query, Authorization, cookies, a database password, SQL
literals and parameters.

    python secrets_everywhere.py HTTP_PORT MYSQL_URL SECRET
"""

import sys
from urllib.parse import urlsplit

import pymysql
import requests

port, url, secret = int(sys.argv[1]), urlsplit(sys.argv[2]), sys.argv[3]
with requests.Session() as session:
    session.cookies.set("session", secret)
    session.get(
        f"http://user:{secret}@127.0.0.1:{port}/plain/{'x'}?token={secret}#frag-{secret}",
        headers={"Authorization": f"Bearer {secret}", "X-Api-Key": secret},
        timeout=10,
    )
conn = pymysql.connect(
    host=url.hostname,
    port=url.port,
    user=url.username,
    password=url.password,
    database=url.path.lstrip("/"),
)
with conn.cursor() as cur:
    cur.execute("CREATE TEMPORARY TABLE accounts (name VARCHAR(64))")
    cur.execute("INSERT INTO accounts VALUES (%s)", (secret,))
    cur.execute(f"SELECT * FROM accounts WHERE name = '{secret}' OR name = \"{secret}\"")
    cur.execute(f"UPDATE /* {secret} */ accounts SET name = '{secret}'")
conn.close()
print("done")
