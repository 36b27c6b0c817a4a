"""The five write-ups, re-lived as unmodified programs against real servers:
each gets its finding, with the numbers, and its well-written twin none.

- PyMySQL connecting per query on MariaDB, and the same queries through a pool;
- boto3's ``bucket.objects.all()`` on MinIO, and surge.s3's listing;
- ``requests.get`` in a loop over 200 simulated hosts, and a thread pool;
- grequests + pyOpenSSL under gevent over HTTPS, and grequests on the ssl module;
- urllib3 with a pool of 2 under 16 threads, and a pool of 16.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.watch.conftest import LISTING_BUCKET, LISTING_KEYS, watch

from surge.sim import SimInfo
from surge.testing import DBServer

QUERIES = 200
HOSTS = 200


def test_connect_per_query(mariadb_server: DBServer, tmp_path: Path) -> None:
    watched = watch(
        "mysql_connect_per_query.py", mariadb_server.url, str(QUERIES), tmp_path=tmp_path
    )
    assert watched.ids() == ["connect-per-query"]
    evidence = watched.finding("connect-per-query")["evidence"]
    assert evidence["database"] == f"{mariadb_server.host}:{mariadb_server.port}"
    assert evidence["connects"] == QUERIES
    assert evidence["queries"] == QUERIES
    assert evidence["connect_s"] > evidence["query_s"] > 0
    assert 0 < evidence["connect_share_of_wall"] < 1
    assert "connect-per-query" in watched.process.stderr  # the terminal summary


def test_connect_per_query_twin_pooled(mariadb_server: DBServer, tmp_path: Path) -> None:
    watched = watch("mysql_pooled.py", mariadb_server.url, str(QUERIES), tmp_path=tmp_path)
    assert watched.ids() == []
    database = watched.report["processes"][0]["databases"][
        f"{mariadb_server.host}:{mariadb_server.port}"
    ]
    assert database["connects"] <= 2
    assert database["queries"] >= QUERIES


def test_serial_pages(listing_bucket: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    endpoint, env = listing_bucket
    watched = watch("s3_boto3_listing.py", endpoint, LISTING_BUCKET, tmp_path=tmp_path, env=env)
    assert f"objects: {LISTING_KEYS}" in watched.process.stdout
    assert watched.ids() == ["serial-pages"]
    evidence = watched.finding("serial-pages")["evidence"]
    print(evidence)
    assert evidence["operation"] == "s3.ListObjects"  # boto3's collections page with v1
    # 1,000 keys a page; MinIO may say "truncated" on the last full page: one more call
    assert LISTING_KEYS // 1000 <= evidence["pages"] <= LISTING_KEYS // 1000 + 1
    assert evidence["mean_gap_ms"] > evidence["mean_request_ms"] > 0
    assert evidence["mean_parse_ms"] > 0


def test_serial_pages_twin_surge_listing(
    listing_bucket: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    endpoint, env = listing_bucket
    watched = watch("s3_surge_listing.py", endpoint, LISTING_BUCKET, tmp_path=tmp_path, env=env)
    assert f"objects: {LISTING_KEYS}" in watched.process.stdout
    assert watched.ids() == []


def test_serial_requests(sim: SimInfo, tmp_path: Path) -> None:
    # 10 ms a host: the loop waits on the network, whatever the machine's load
    watched = watch("requests_loop.py", str(sim.http_port), str(HOSTS), "10", tmp_path=tmp_path)
    assert f"ok: {HOSTS}" in watched.process.stdout
    assert watched.ids() == ["serial-requests"]
    evidence = watched.finding("serial-requests")["evidence"]
    assert evidence["requests"] == HOSTS
    assert evidence["hosts"] == HOSTS
    assert evidence["peak_concurrency"] == 1
    assert evidence["assumed_concurrency"] == 32
    assert evidence["expected_s"] < evidence["wall_s"]  # its numbers: the gain it states
    assert 0 < evidence["idle_share"] <= 1


def test_serial_requests_twin_threads(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch("requests_threads.py", str(sim.http_port), str(HOSTS), tmp_path=tmp_path)
    assert f"ok: {HOSTS}" in watched.process.stdout
    assert watched.ids() == []
    assert watched.report["processes"][0]["by_kind"]["http"] == HOSTS


def _serialised(report: dict[str, Any]) -> dict[str, Any]:
    [finding] = [f for f in report["findings"] if f["id"] == "serialised-https"]
    evidence: dict[str, Any] = finding["evidence"]
    return evidence


def test_serialised_https(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch(
        "grequests_pyopenssl.py", str(sim.https_port), sim.cafile, "20", tmp_path=tmp_path
    )
    assert "ok: 20" in watched.process.stdout
    assert watched.ids() == ["serialised-https"]
    evidence = _serialised(watched.report)
    assert evidence["requests"] == 20
    assert evidence["callers"] == 20  # one greenlet each
    assert evidence["issued_mean_in_flight"] >= 2
    assert evidence["active_mean"] <= 1.15
    assert {d["id"] for d in evidence["doctor"]} & {"pyopenssl-injected", "gevent-partial-patch"}


def test_serialised_https_twin_ssl_module(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch(
        "grequests_pyopenssl.py",
        str(sim.https_port),
        sim.cafile,
        "20",
        "--no-pyopenssl",
        tmp_path=tmp_path,
    )
    assert "ok: 20" in watched.process.stdout
    assert watched.ids() == []


def test_pool_too_small(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch("urllib3_pool.py", str(sim.http_port), "2", "5", tmp_path=tmp_path)
    assert "ok: 80" in watched.process.stdout
    assert watched.ids() == ["pool-too-small"]
    evidence = watched.finding("pool-too-small")["evidence"]
    assert evidence["pool_size"] == 2
    assert evidence["peak_in_flight"] == evidence["enough"] == 16
    assert evidence["discarded_connections"] > 0


def test_pool_too_small_twin_pool_of_16(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch("urllib3_pool.py", str(sim.http_port), "16", "5", tmp_path=tmp_path)
    assert "ok: 80" in watched.process.stdout
    assert watched.ids() == []


def test_tls_per_request(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch(
        "requests_same_host.py", str(sim.https_port), sim.cafile, "40", tmp_path=tmp_path
    )
    assert "ok: 40" in watched.process.stdout
    evidence = watched.finding("tls-per-request")["evidence"]
    assert evidence["host"] == f"localhost:{sim.https_port}"
    assert evidence["requests"] == evidence["handshakes"] == 40
    assert evidence["tls_s"] > 0
    # resolved once per connection too: a finding if it cost 1% of the run
    names = watched.report["processes"][0]["by_kind"]
    assert names["dns"] == 40


def test_tls_per_request_twin_sessions(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch(
        "requests_same_host.py",
        str(sim.https_port),
        sim.cafile,
        "40",
        "--session",
        tmp_path=tmp_path,
    )
    assert "ok: 40" in watched.process.stdout
    assert watched.ids() == []
    host = watched.report["processes"][0]["hosts"][f"localhost:{sim.https_port}"]
    assert host["tls"] <= 8  # a connection per thread at most


def test_pool_too_small_sqlalchemy(mariadb_server: DBServer, tmp_path: Path) -> None:
    watched = watch("sqlalchemy_pool.py", mariadb_server.url, "2", tmp_path=tmp_path)
    assert "ok: 40" in watched.process.stdout
    assert watched.ids() == ["pool-too-small"]
    evidence = watched.finding("pool-too-small")["evidence"]
    assert evidence["host"].startswith("sqlalchemy QueuePool (mysql)")
    assert evidence["pool_size"] == 2
    # 8 threads: up to 8 wanted a connection at once (8 unless the load staggered them)
    assert 2 < evidence["peak_in_flight"] == evidence["enough"] <= 8
    assert evidence["waits"] > 0 and evidence["wait_s"] > 0


def test_pool_too_small_sqlalchemy_twin(mariadb_server: DBServer, tmp_path: Path) -> None:
    watched = watch("sqlalchemy_pool.py", mariadb_server.url, "8", tmp_path=tmp_path)
    assert "ok: 40" in watched.process.stdout
    assert watched.ids() == []


def test_repeated_dns(sim: SimInfo, tmp_path: Path) -> None:
    watched = watch("urllib_loop.py", str(sim.http_port), "1000", tmp_path=tmp_path)
    assert "ok: 1000" in watched.process.stdout
    evidence = watched.finding("repeated-dns")["evidence"]
    assert evidence["name"] == "localhost"
    assert evidence["lookups"] == 1000
    assert evidence["dns_s"] > 0 and evidence["share_of_wall"] >= 0.01
