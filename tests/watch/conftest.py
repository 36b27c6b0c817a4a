"""Running programs under ``surge watch``, and the servers they talk to.

``watch(program, *args, options=(), env=None)`` runs ``surge watch --report R
[options] -- python tests/watch/programs/PROGRAM args...`` in a process of its
own and returns the completed process and the report.  The programs are
ordinary scripts (each re-lives one write-up, or is its well-written twin):
nothing in them knows surge watch is there.

``listing_bucket``: a MinIO bucket of :data:`LISTING_KEYS` keys (the S3
write-up's listing), filled once per session.  ``jaeger``: a Jaeger all-in-one
(surge.testing.jaeger); under CI a missing binary fails, elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.s3.conftest import minio, s3

from surge.testing.jaeger import JaegerNotInstalled, JaegerServer, jaeger_server

PROGRAMS = Path(__file__).parent / "programs"
#: Keys in the listing bucket: 5 pages of boto3's 1,000 (the write-up listed
#: 20,000; 5 pages give the 4 page-to-page gaps the finding is drawn from).
LISTING_KEYS = 5_000
LISTING_BUCKET = "watch-listing"

__all__ = ["minio", "s3"]  # MinIO and its boto3 client, from tests/s3


@dataclass
class Watched:
    process: subprocess.CompletedProcess[str]
    report: dict[str, Any]

    def ids(self) -> list[str]:
        return [f["id"] for f in self.report["findings"]]

    def finding(self, finding_id: str) -> dict[str, Any]:
        found = [f for f in self.report["findings"] if f["id"] == finding_id]
        assert found, f"no {finding_id} in {self.ids()}:\n{self.process.stderr[-3000:]}"
        return found[0]


def watch(
    program: str,
    *args: str,
    tmp_path: Path,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 120,
    python: str = sys.executable,
) -> Watched:
    report = tmp_path / "report.json"
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "surge.cli",
            "watch",
            "--report",
            str(report),
            *options,
            "--",
            python,
            str(PROGRAMS / program),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert process.returncode == 0, process.stderr[-5000:]
    return Watched(process, json.loads(report.read_text()))


@pytest.fixture(scope="session")
def listing_bucket(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """(endpoint, environment with the credentials) of a bucket of LISTING_KEYS keys."""
    minio = request.getfixturevalue("minio")
    s3 = request.getfixturevalue("s3")
    s3.create_bucket(Bucket=LISTING_BUCKET)
    keys = [f"logs/{i // 1000:02d}/{i:06d}.json" for i in range(LISTING_KEYS)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=LISTING_BUCKET, Key=key, Body=b"{}"), keys))
    env = {
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return minio.endpoint_url, env


@pytest.fixture(scope="session")
def jaeger() -> Iterator[JaegerServer]:
    try:
        with jaeger_server() as server:
            yield server
    except JaegerNotInstalled as error:
        if os.environ.get("CI"):
            pytest.fail(f"{error} (CI is set: the OTLP test must not be skipped)", pytrace=False)
        pytest.skip(str(error))
