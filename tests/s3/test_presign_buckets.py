"""``surge s3 presign`` (SigV4 query signing, fetched with curl; botocore's
presigned URL as the reference) and ``surge s3 mb`` / ``rb``."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from tests.s3._buckets import Buckets
from tests.s3.test_rm import _env, new_bucket

from surge.s3.presigning import presign

KEYS = ["plain.txt", "with space+plus", "caf\u00e9/\u65e5\u672c", "a%2Fb", "q?x=1#f", "amp&<>"]


def _curl(url: str) -> tuple[int, bytes]:
    done = subprocess.run(
        ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--globoff", url],
        capture_output=True,
        timeout=30,
    )
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body


@pytest.mark.parametrize("key", KEYS)
def test_curl_gets_the_object_by_its_presigned_url(server: Buckets, key: str) -> None:
    """Fetched with curl (no credentials): the object; the URL of another key
    made from it, or one expired, is refused."""
    bucket = new_bucket(server, [])
    server.s3.put_object(Bucket=bucket, Key=key, Body=b"secret " + key.encode())
    url = presign(f"s3://{bucket}/{key}", expires_in=120, **server.options())
    assert _curl(url) == (200, b"secret " + key.encode())
    if server.credentials.access_key == "moto-key":
        return  # moto checks no signature: MinIO (the other run) does
    parts = urlsplit(url)
    other = parts._replace(path=parts.path + "x").geturl()
    assert _curl(other)[0] == 403
    old = datetime.now(UTC) - timedelta(hours=2)
    expired = presign(f"s3://{bucket}/{key}", expires_in=60, now=old, **server.options())
    assert _curl(expired)[0] == 403


def test_the_same_url_as_botocore(server: Buckets, monkeypatch: pytest.MonkeyPatch) -> None:
    """At one instant, botocore's generate_presigned_url and surge's: the same
    path and the same query, signature included."""
    import boto3
    import botocore.auth
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint_url,
        aws_access_key_id=server.credentials.access_key,
        aws_secret_access_key=server.credentials.secret_key,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    when = datetime(2026, 12, 1, 12, 0, 0)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    key = "dir/with space+plus/caf\u00e9"
    theirs = client.generate_presigned_url(
        "get_object", Params={"Bucket": "bkt", "Key": key}, ExpiresIn=900
    )
    ours = presign(
        f"s3://bkt/{key}",
        expires_in=900,
        now=when.replace(tzinfo=UTC),
        region="us-east-1",
        **server.options(),
    )
    a, b = urlsplit(theirs), urlsplit(ours)
    assert (a.scheme, a.netloc, a.path) == (b.scheme, b.netloc, b.path)
    assert parse_qs(a.query) == parse_qs(b.query)


def _surge(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surge", "s3", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_mb_and_rb(minio_buckets: Buckets) -> None:
    """mb then rb, with aws s3 mb/rb's lines; rb of a bucket with objects
    fails (BucketNotEmpty, exit 1) unless --force, which deletes them first."""
    server = minio_buckets
    env = _env(server)
    name = new_bucket(server, []) + "-mb"
    made = _surge(env, "mb", f"s3://{name}")
    assert (made.returncode, made.stdout) == (0, f"make_bucket: {name}\n"), made.stderr
    assert name in [b["Name"] for b in server.s3.list_buckets()["Buckets"]]
    server.s3.put_object(Bucket=name, Key="k", Body=b"x")
    refused = _surge(env, "rb", f"s3://{name}")
    assert refused.returncode == 1 and "BucketNotEmpty" in refused.stderr
    forced = _surge(env, "rb", f"s3://{name}", "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == f"delete: s3://{name}/k\nremove_bucket: {name}\n"
    assert name not in [b["Name"] for b in server.s3.list_buckets()["Buckets"]]


def test_presign_on_the_command_line(minio_buckets: Buckets) -> None:
    server = minio_buckets
    bucket = new_bucket(server, ["k"])
    done = _surge(_env(server), "presign", f"s3://{bucket}/k", "--expires-in", "60")
    assert done.returncode == 0, done.stderr
    assert _curl(done.stdout.strip()) == (200, b"x")
    bad = _surge(_env(server), "presign", f"s3://{bucket}/k", "--expires-in", "604801")
    assert bad.returncode == 2
