"""The listing API's prefix=, start_after= and limit=, against boto3 on MinIO and moto."""

from __future__ import annotations

import math

import pytest
from tests.s3._buckets import Buckets

import surge.s3
from surge.errors import UsageError

SERVERS = ["buckets", "moto_buckets"]


def _where(request: pytest.FixtureRequest, server: str) -> Buckets:
    where: Buckets = request.getfixturevalue(server)
    return where


def _boto3_keys(where: Buckets, bucket: str, **kwargs: str) -> list[str]:
    keys: list[str] = []
    for page in where.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, **kwargs):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


@pytest.mark.parametrize("server", SERVERS)
def test_prefix_and_start_after_as_boto3(server: str, request: pytest.FixtureRequest) -> None:
    where = _where(request, server)
    by_url = sorted(o.key for o in surge.s3.list_all("s3://nested/dir1/", **where.options()))
    by_keyword = list(surge.s3.list_all("s3://nested", prefix="dir1/", **where.options()))
    assert (
        sorted(o.key for o in by_keyword) == by_url == _boto3_keys(where, "nested", Prefix="dir1/")
    )
    after = "dir2/sub3/obj-017.bin"
    got = [o.key for o in surge.s3.list_all("s3://nested", start_after=after, **where.options())]
    assert got == _boto3_keys(where, "nested", StartAfter=after)  # in key order
    with pytest.raises(UsageError, match="not both"):
        list(surge.s3.list_all("s3://nested/dir1/", prefix="dir2/", **where.options()))


@pytest.mark.parametrize("server", SERVERS)
def test_limit_is_the_first_keys_and_stops_asking(
    server: str, request: pytest.FixtureRequest
) -> None:
    where = _where(request, server)
    stats = surge.s3.Stats()
    got = list(
        surge.s3.list_all("s3://flat", limit=20, page_size=7, stats=stats, **where.options())
    )
    assert [o.key for o in got] == _boto3_keys(where, "flat")[:20]
    # three pages hold 20 keys; the pipeline may have asked for one more
    assert math.ceil(20 / 7) <= stats.requests <= math.ceil(20 / 7) + 1
    one_level = list(surge.s3.list_all("s3://nested", recursive=False, limit=3, **where.options()))
    names = [e.prefix if isinstance(e, surge.s3.CommonPrefix) else e.key for e in one_level]
    assert names == ["dir0/", "dir1/", "dir2/"]
    with pytest.raises(UsageError, match="limit"):
        list(surge.s3.list_all("s3://flat", limit=0, **where.options()))


@pytest.mark.parametrize(
    "options", [surge.s3.ListOptions, surge.s3.DownloadOptions, surge.s3.UploadOptions]
)
def test_every_s3_call_shares_the_endpoint_options(options: type[surge.s3.EndpointOptions]) -> None:
    keys = surge.s3.Credentials("AK", "SK")
    opts = options(endpoint_url="http://127.0.0.1:9", region="eu-west-3", credentials=keys)
    assert isinstance(opts, surge.s3.EndpointOptions)
    target = opts.target("bkt")
    assert (target.base_url, target.region, target.path) == (
        "http://127.0.0.1:9",
        "eu-west-3",
        "/bkt",
    )
    # the same place, for another call (a download's listing, a sync's)
    again = surge.s3.ListOptions(**opts.endpoint(target)).target("bkt")
    assert (again.base_url, again.region) == (target.base_url, target.region)
    assert again.signer is not None and again.signer.credentials == keys
    with pytest.raises(UsageError, match="proxy"):
        options(proxy="ftp://nowhere")
