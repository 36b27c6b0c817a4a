"""``surge s3 ls --all-versions`` and ``surge.s3.list_versions``: every version
and delete marker, as boto3's ListObjectVersions paginator sees them, on MinIO
and moto."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner
from tests.s3._buckets import Buckets

import surge.s3
from surge.cli import main

SERVERS = ["buckets", "moto_buckets"]
BUCKET = "versioned"


def _versioned(where: Buckets) -> list[tuple[str, str, bool, bool]]:
    """A versioned bucket (made once per server): keys with several versions,
    delete markers, awkward names; boto3's (key, version id, latest, marker)."""
    s3 = where.s3
    names = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    if BUCKET not in names:
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        for i in range(12):
            for n in range(1 + i % 3):
                s3.put_object(Bucket=BUCKET, Key=f"k/{i:02d} é+&.txt", Body=b"v" * (n + 1))
        for i in (3, 7):
            s3.delete_object(Bucket=BUCKET, Key=f"k/{i:02d} é+&.txt")
    expected = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=BUCKET, MaxKeys=5):
        rows = [(v["Key"], v["VersionId"], v["IsLatest"], False) for v in page.get("Versions", [])]
        rows += [
            (d["Key"], d["VersionId"], d["IsLatest"], True) for d in page.get("DeleteMarkers", [])
        ]
        expected += rows
    return sorted(expected)


@pytest.mark.parametrize("server", SERVERS)
def test_every_version_and_delete_marker_as_boto3(
    server: str, request: pytest.FixtureRequest
) -> None:
    where: Buckets = request.getfixturevalue(server)
    expected = _versioned(where)
    assert len(expected) == 12 + 12 + 2  # 24 versions, 2 markers

    async def collect() -> list[Any]:
        got = []
        async for page in surge.s3.list_versions(f"s3://{BUCKET}", page_size=5, **where.options()):
            got += page
        return got

    got = asyncio.run(collect())
    assert sorted((v.key, v.version_id, v.is_latest, v.delete_marker) for v in got) == expected
    keys = [v.key for v in got]
    assert keys == sorted(keys)  # key order across pages

    runner = CliRunner()
    env = {
        "AWS_ACCESS_KEY_ID": where.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": where.credentials.secret_key,
    }
    args = ["s3", "ls", "--endpoint-url", where.endpoint_url, "--all-versions", "--page-size", "5"]
    done = runner.invoke(main, [*args, "--json", f"s3://{BUCKET}/k/"], env=env)
    assert done.exit_code == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert (
        sorted((v["key"], v["version_id"], v["is_latest"], v["delete_marker"]) for v in lines)
        == expected
    )
    text = runner.invoke(main, [*args, f"s3://{BUCKET}/k/"], env=env)
    assert text.exit_code == 0 and len(text.stdout.splitlines()) == len(expected)
    assert sum("DELETE" in line for line in text.stdout.splitlines()) == 2
    empty = runner.invoke(main, [*args, f"s3://{BUCKET}/nothing-here/"], env=env)
    assert empty.exit_code == 1 and empty.stdout == ""
