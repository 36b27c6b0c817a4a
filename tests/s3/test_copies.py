"""Copies between buckets (``surge s3 cp|sync s3://a/... s3://b/...``,
:func:`surge.s3.copy`): CopyObject and UploadPartCopy by the server, keys as
bytes, metadata as the AWS CLI carries it, a 200 ``<Error>`` taken for the
failure it is.  aws s3 cp/sync is the reference for the lines and the objects
left; boto3 for what is on the server."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from tests.s3._buckets import AWKWARD_KEYS, Buckets
from tests.s3.deviant import deviant_server
from tests.s3.test_key_bytes import SHAPES
from tests.s3.test_rm import _aws, _env, new_bucket, stored

import surge.s3
from surge.s3 import Credentials
from surge.s3.copies import copy

MiB = 1024 * 1024


def objects(server: Buckets, bucket: str) -> dict[str, tuple[bytes, str | None, dict[str, str]]]:
    """Every object: key -> (body, Content-Type, user metadata)."""
    out = {}
    for key in server.boto3_keys(bucket):
        got = server.s3.get_object(Bucket=bucket, Key=key)
        out[key] = (got["Body"].read(), got.get("ContentType"), got.get("Metadata", {}))
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_one_key_of_every_shape(server: Buckets, shape: str) -> None:
    """A key of each shape copied to the same key of another bucket, by the
    server: the same bytes under exactly that key, nothing else made."""
    key = SHAPES[shape].format(V="other")
    if not stored(server, key):
        pytest.skip(f"the server refuses {key!r} from boto3 too")
    source, target = new_bucket(server, []), new_bucket(server, [])
    server.s3.put_object(Bucket=source, Key=key, Body=key.encode() + b"!")
    if key.endswith("/"):  # a "folder": copied by a recursive copy, as a download's
        with pytest.raises(surge.s3.UsageError, match="names no object"):
            copy(f"s3://{source}/{key}", f"s3://{target}/{key}", **server.options())
        return
    summary = copy(f"s3://{source}/{key}", f"s3://{target}/{key}", **server.options())
    assert (summary.objects, summary.failures) == (1, [])
    assert server.boto3_keys(target) == [key]
    body = server.s3.get_object(Bucket=target, Key=key)["Body"].read()
    assert body == key.encode() + b"!"


def test_a_prefix_of_every_shape_and_a_sync(server: Buckets) -> None:
    """A recursive copy of every shape the server stores, then a sync that
    finds them all the same, then a sync --delete of an extra (batched)."""
    keys = [k for k in (f"p/{s.format(V='v')}" for s in SHAPES.values()) if stored(server, k)]
    source, target = new_bucket(server, keys), new_bucket(server, ["q/extra"])
    options = server.options()
    summary = copy(f"s3://{source}/p/", f"s3://{target}/q/", recursive=True, **options)
    assert (summary.objects, summary.failures) == (len(keys), [])
    assert server.boto3_keys(target) == sorted(["q/extra"] + [f"q/{k[2:]}" for k in keys])
    again = surge.s3.sync(f"s3://{source}/p/", f"s3://{target}/q/", delete=True, **options)
    assert (again.objects, again.unchanged, again.deleted, again.failed) == (0, len(keys), 1, 0)
    assert server.boto3_keys(target) == sorted(f"q/{k[2:]}" for k in keys)


def test_a_multipart_copy_in_parallel_ranges(server: Buckets) -> None:
    """Over the threshold: UploadPartCopy of 5 MiB ranges (3 parts for 12
    MiB), the bytes the same, the source's metadata carried (COPY: the AWS
    CLI v2's default; CopyObject itself keeps them), or replaced."""
    body = os.urandom(12 * MiB)
    source, target = new_bucket(server, []), new_bucket(server, [])
    server.s3.put_object(
        Bucket=source, Key="big", Body=body, ContentType="app/big", Metadata={"m": "1"}
    )
    options = server.options(part_size=5 * MiB)
    summary = copy(f"s3://{source}/big", f"s3://{target}/", **options)
    assert (summary.objects, summary.parts, summary.failures) == (1, 3, [])
    replaced = copy(
        f"s3://{source}/big", f"s3://{target}/new", metadata_directive="REPLACE", **options
    )
    assert replaced.failures == []
    got = objects(server, target)
    assert got["big"] == (body, "app/big", {"m": "1"})
    assert got["new"][0] == body and got["new"][2] == {}
    etag = server.s3.head_object(Bucket=target, Key="big")["ETag"]
    assert etag.endswith('-3"')
    # no multipart upload left behind
    assert server.s3.list_multipart_uploads(Bucket=target).get("Uploads", []) == []


def test_a_200_error_document_is_a_failure() -> None:
    """S3 may answer a copy 200 with an <Error> document: a failure (retried,
    as its code says), never a copied object."""
    with deviant_server([]) as server:
        options: dict[str, Any] = {
            "endpoint_url": server.endpoint_url,
            "credentials": Credentials("k", "s"),
            "retries": 1,
        }
        up = surge.s3.upload(__file__, "s3://throttle/src.py", **options)
        assert up.failures == []
        summary = copy("s3://throttle/src.py", "s3://copy-error/dst.py", **options)
        assert [(f.code, f.destination) for f in summary.failures] == [
            ("InternalError", "s3://copy-error/dst.py")
        ]
        assert summary.objects == 0
        puts = [r for r in server.object_requests if r == ("PUT", "dst.py")]
        assert len(puts) == 2  # the try and its retry
        assert "copy-error/dst.py" not in server.stored


def test_lines_and_objects_as_aws_s3_cp(minio_buckets: Buckets) -> None:
    """cp --recursive with filters, and one object REPLACEd, beside aws s3 cp: the same
    'copy: ... to ...' lines and the same objects, metadata included (single
    part: CopyObject keeps it, REPLACE drops it, for both)."""
    server = minio_buckets
    keys = [f"p/{k}" for k in AWKWARD_KEYS if "\t" not in k] + ["p/sub/x.gz"]
    source = new_bucket(server, [])
    for key in keys:
        server.s3.put_object(
            Bucket=source, Key=key, Body=key.encode(), ContentType="text/x-k", Metadata={"k": "v"}
        )
    theirs, ours = new_bucket(server, []), new_bucket(server, [])
    env = _env(server)
    runs = [
        ["cp", "--recursive", "s3://S/p/", "s3://D/q/", "--exclude", "*.gz"],
        ["cp", "s3://S/p/plain.txt", "s3://D/r/", "--metadata-directive", "REPLACE"],
    ]
    for args in runs:

        def argv(bucket: str, args: list[str] = args) -> list[str]:
            return [
                a.replace("s3://S/", f"s3://{source}/").replace("s3://D/", f"s3://{bucket}/")
                for a in args
            ]

        aws = subprocess.run(
            [_aws(), "s3", *argv(theirs)], env=env, capture_output=True, text=True, timeout=60
        )
        surge = subprocess.run(
            [sys.executable, "-m", "surge", "s3", *argv(ours)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (surge.returncode, aws.returncode) == (0, 0), surge.stderr + aws.stderr

        def lines(text: str, bucket: str) -> list[str]:
            found = text.replace("\r", "\n").replace(bucket, "D").splitlines()
            return sorted(line.rstrip() for line in found if line.startswith("copy: "))

        assert lines(surge.stdout, ours) == lines(aws.stdout, theirs), args
    assert objects(server, ours) == objects(server, theirs)


def test_results_as_an_async_iterator(server: Buckets) -> None:
    """copy_results and move_results: one result as each object is done."""
    import asyncio

    keys = ["p/a", "p/b", "p/c"]
    source, target = new_bucket(server, keys), new_bucket(server, [])

    async def run() -> tuple[list[Any], list[Any]]:
        options = server.options(recursive=True)
        src, dst = f"s3://{source}/p/", f"s3://{target}/q/"
        copied = [r async for r in surge.s3.copy_results(src, dst, **options)]
        moved = [r async for r in surge.s3.move_results(dst, f"s3://{source}/r/", **options)]
        return copied, moved

    copied, moved = asyncio.run(run())
    assert sorted(r.destination for r in copied) == [f"s3://{target}/q/{k[2:]}" for k in keys]
    assert sorted(r.source for r in moved if r.moved) == [f"s3://{target}/q/{k[2:]}" for k in keys]
    assert server.boto3_keys(target) == []
    assert server.boto3_keys(source) == keys + [f"r/{k[2:]}" for k in keys]
