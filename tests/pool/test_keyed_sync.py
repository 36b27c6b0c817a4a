"""KeyedPool (threads): per-key and global limits under concurrency, idle expiry
across keys, and faults."""

from __future__ import annotations

import threading
import time

import pytest

from surge.pool import KeyedPool, PoolTimeout


class Conn:
    def __init__(self, key: int) -> None:
        self.key = key
        self.users = 0
        self.closed = False


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_16_threads_over_8_keys_respect_both_limits() -> None:
    pool: KeyedPool[int, Conn] = KeyedPool(
        Conn, max_size=6, max_per_key=2, timeout=10, close=lambda c: setattr(c, "closed", True)
    )
    guard = threading.Lock()
    per_key: dict[int, int] = {}
    total = [0]
    problems: list[str] = []

    def worker(seed: int) -> None:
        for i in range(200):
            key = (seed * 7 + i) % 8
            with pool.connection(key) as conn:
                with guard:
                    conn.users += 1
                    per_key[key] = per_key.get(key, 0) + 1
                    total[0] += 1
                    if conn.users != 1 or conn.key != key or conn.closed:
                        problems.append(f"bad checkout for {key}")
                    if per_key[key] > 2 or total[0] > 6:
                        problems.append(f"limit broken: {per_key[key]} / {total[0]}")
                time.sleep(0)
                with guard:
                    conn.users -= 1
                    per_key[key] -= 1
                    total[0] -= 1

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
    stats = pool.stats()
    assert stats["open"] <= 6 and stats["in_use"] == 0 and stats["waiting"] == 0


def test_idle_expiry_runs_across_keys() -> None:
    clock = FakeClock()
    pool: KeyedPool[int, Conn] = KeyedPool(
        Conn, max_size=10, max_per_key=2, max_idle=5.0, clock=clock
    )
    for key in range(4):
        pool.release(pool.acquire(key))
        clock.now += 1.0
    clock.now += 2.5  # keys 0 and 1 idle for 6.5 and 5.5 s; 2 and 3 for 4.5 and 3.5 s
    pool.expire()
    stats = pool.stats()
    assert stats["expired"] == 2 and stats["idle"] == 2 and stats["keys"] == 2


def test_failing_create_frees_room_for_a_waiter() -> None:
    calls = [0]

    def create(key: int) -> Conn:
        calls[0] += 1
        if key == 99:
            raise OSError("connect refused")
        return Conn(key)

    pool: KeyedPool[int, Conn] = KeyedPool(create, max_size=1, max_per_key=1, timeout=0.01)
    with pytest.raises(OSError):
        pool.acquire(99)
    conn = pool.acquire(1)  # nothing leaked: room for one
    with pytest.raises(PoolTimeout, match="max_size=1, max_per_key=1"):
        pool.acquire(2)
    pool.release(conn)
    assert pool.stats()["open"] == 1
