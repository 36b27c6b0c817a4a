"""``surge.fetch_on_cluster`` on a real Dask LocalCluster (two worker processes on
127.0.0.1), against the simulated web on loopback."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

import surge
from surge.bulk.cluster import run_shards
from surge.bulk.engine import FetchOptions
from surge.bulk.inputs import InputItem
from surge.sim import SimInfo, running

distributed = pytest.importorskip("distributed")

RESOLVE = "*.sim:*:127.0.0.1"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimInfo]:
    with running() as info:
        yield info


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        yield dask_client


def test_input_is_read_a_few_shards_ahead_at_most(sim: SimInfo, client: distributed.Client) -> None:
    read = 0

    def inputs() -> Iterator[InputItem]:
        nonlocal read
        for i in range(1, 401):
            read += 1
            url = sim.url(f"b{i}--status-200.sim")
            yield InputItem(i, url, url)

    opts = FetchOptions(concurrency=10, resolve=[RESOLVE])
    merged = 0
    for shard in run_shards(client, inputs(), opts, shard_size=20, max_in_flight=3):
        merged += len(shard.records)
        # In flight: 3 shards at most, so the reading is never more than 3 ahead.
        assert read - merged <= 3 * 20
        assert shard.attempts == 1 and shard.last_line - shard.first_line == 19
    assert merged == read == 400


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(
    sim: SimInfo, client: distributed.Client
) -> None:
    # 600 hosts of 200 ms, 20 in flight per worker, shards of 50: ~3 s of work,
    # so the kill, after the first shard is back, lands with shards running.
    urls = [sim.url(f"k{i}--delay-200.sim") for i in range(600)]
    seen: list[int] = []
    killed = None
    for record in surge.fetch_on_cluster(
        client, urls, shard_size=50, concurrency=20, resolve=[RESOLVE]
    ):
        seen.append(record["line"])
        if killed is None:
            busy = [w for w, keys in client.processing().items() if keys]
            assert busy, "no shard running to kill a worker under"
            killed = client.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(killed, signal.SIGKILL)
    assert sorted(seen) == list(range(1, 601))  # each input exactly once
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it, for the next tests
    assert killed not in client.run(os.getpid).values()
