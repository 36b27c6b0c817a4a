"""A real MinIO server on loopback for the S3 tests, with buckets of every shape.

``minio``: one server per test session. When the binary is missing: under CI
(the environment variable ``CI`` set and not empty) the tests fail, saying how
to build it - .ci/run builds it, so a skip there would hide a broken setup;
elsewhere they are skipped with the same hint.

``server``: MinIO, then moto - a test that takes it runs against both (each
test makes its own buckets).

``buckets``: buckets filled once per session through boto3 (the reference
every listing is compared with): nested prefixes, a flat key space, keys that
need URL encoding or are not ASCII, and an empty bucket.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from tests.conftest import require
from tests.s3._buckets import BUCKETS, Buckets

from surge.s3 import Credentials
from surge.s3.minio import MinioNotInstalled, MinioServer, minio_server

boto3 = require("boto3")
from botocore.config import Config  # noqa: E402


@pytest.fixture(scope="session")
def minio() -> Iterator[MinioServer]:
    try:
        with minio_server() as server:
            yield server
    except MinioNotInstalled as error:
        if os.environ.get("CI"):
            pytest.fail(f"{error} (CI is set: S3 tests must not be skipped)", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def s3(minio: MinioServer) -> Any:
    """A boto3 client of the server: the reference implementation."""
    return boto3.client(
        "s3",
        endpoint_url=minio.endpoint_url,
        aws_access_key_id=minio.access_key,
        aws_secret_access_key=minio.secret_key,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"}, retries={"max_attempts": 5}, max_pool_connections=16
        ),
    )


@pytest.fixture(scope="session")
def buckets(minio: MinioServer, s3: Any) -> Buckets:
    def put(item: tuple[str, str]) -> None:
        bucket, key = item
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode()[:20])

    items = []
    for bucket, keys in BUCKETS.items():
        s3.create_bucket(Bucket=bucket)
        items += [(bucket, key) for key in keys()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, items))
    return Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)


@pytest.fixture(scope="session")
def moto_buckets() -> Iterator[Buckets]:
    """The same buckets on moto's server (a second S3 implementation, in this
    process, on loopback), filled through boto3 as on MinIO."""
    server_module = require("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        keys = Credentials("moto-key", "moto-secret")
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=keys.access_key,
            aws_secret_access_key=keys.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, max_pool_connections=8),
        )
        items = []
        for bucket, names in BUCKETS.items():
            client.create_bucket(Bucket=bucket)
            items += [(bucket, key) for key in names()]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: client.put_object(Bucket=i[0], Key=i[1], Body=b"x"), items))
        yield Buckets(endpoint, keys, client)
    finally:
        server.stop()


@pytest.fixture(params=["minio", "moto"])
def server(request: pytest.FixtureRequest) -> Buckets:
    """An S3 server: MinIO, then moto (each test runs against both)."""
    if request.param == "moto":
        moto: Buckets = request.getfixturevalue("moto_s3")
        return moto
    minio: MinioServer = request.getfixturevalue("minio")
    s3 = request.getfixturevalue("s3")
    return Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)


@pytest.fixture
def minio_buckets(minio: MinioServer, s3: Any) -> Buckets:
    """MinIO alone, the shape of ``server``: for what moto cannot show (it
    checks no signature, refuses no key in a DeleteObjects)."""
    return Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)


@pytest.fixture(autouse=True)
def _isolated_aws_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """No credentials, profiles or regions from the machine's environment or
    ~/.aws leak into a test; and botocore's credential chain, which ends by
    asking the instance metadata service (169.254.169.254), never does: these
    tests talk to 127.0.0.1 and nothing else."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[Buckets]:
    """An empty moto server (its own, on loopback) for tests that make their own
    buckets; the same shape as ``buckets``: endpoint, credentials, boto3 client."""
    server_module = require("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        keys = Credentials("moto-key", "moto-secret")
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=keys.access_key,
            aws_secret_access_key=keys.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, max_pool_connections=8),
        )
        yield Buckets(endpoint, keys, client)
    finally:
        server.stop()
