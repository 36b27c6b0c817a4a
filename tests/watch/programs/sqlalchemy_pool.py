"""SQLAlchemy with a QueuePool of POOL_SIZE (no overflow) under 8 threads, each
running queries that take 50 ms.

    python sqlalchemy_pool.py URL POOL_SIZE
"""

import sys
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import create_engine, text

url, size = sys.argv[1].replace("mysql://", "mysql+pymysql://", 1), int(sys.argv[2])
engine = create_engine(url, pool_size=size, max_overflow=0)


def work(_: int) -> int:
    done = 0
    for _ in range(5):
        with engine.connect() as conn:
            done += conn.execute(text("SELECT SLEEP(0.05)")).scalar() == 0
    return done


with ThreadPoolExecutor(8) as pool:
    print("ok:", sum(pool.map(work, range(8))))
