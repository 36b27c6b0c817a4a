"""``surge s3 cp PATH s3://...`` uploads and :func:`surge.s3.upload`, against
MinIO and moto (and the deviant server, for throttling).

boto3 (the reference client) reads back what surge uploaded; surge's own
download brings it home again, and the files are compared byte for byte.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import signal
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.s3._buckets import Buckets
from tests.s3.deviant import deviant_server
from tests.s3.test_cp import (
    AWKWARD,
    CLIENT,
    FILTER_CASES,
    FILTER_KEYS,
    _surge_cp,
    new_bucket,
    tree,
)

import surge.s3
from surge.cli import main
from surge.errors import RequestError, UsageError
from surge.http.client import AsyncClient
from surge.s3 import transfer
from surge.s3.minio import MinioServer
from surge.s3.uploads import MIN_PART_SIZE, part_size_for

MiB = 1024 * 1024


def cli(endpoint_url: str, credentials: surge.s3.Credentials, *args: str) -> tuple[int, str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
    }
    result = CliRunner().invoke(main, ["s3", "cp", "--endpoint-url", endpoint_url, *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


def stored(server: Buckets, bucket: str, prefix: str = "") -> dict[str, bytes]:
    """Every object under ``prefix``, read through boto3: key -> bytes."""
    return {
        key: server.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        for key in server.boto3_keys(bucket, prefix)
    }


def test_recursive_round_trip_is_byte_exact(server: Buckets, tmp_path: Path) -> None:
    write_tree(tmp_path / "src", AWKWARD)
    bucket = new_bucket(server, {})
    summary = surge.s3.upload(
        str(tmp_path / "src"), f"s3://{bucket}/up", recursive=True, **server.options()
    )
    assert summary.failures == []
    assert (summary.objects, summary.bytes) == (len(AWKWARD), sum(map(len, AWKWARD.values())))
    assert summary.verified == len(AWKWARD)  # each sent with its Content-MD5, ETag checked
    assert summary.requests == len(AWKWARD)  # one PUT each, no retries
    assert stored(server, bucket) == {f"up/{k}": v for k, v in AWKWARD.items()}
    # each single PUT's ETag is the MD5 of the file
    for key, body in AWKWARD.items():
        etag = server.s3.head_object(Bucket=bucket, Key=f"up/{key}")["ETag"]
        assert etag == f'"{hashlib.md5(body).hexdigest()}"'
    back = surge.s3.download(
        f"s3://{bucket}/up/", str(tmp_path / "back"), recursive=True, **server.options()
    )
    assert back.failures == []
    assert tree(tmp_path / "back") == AWKWARD


def test_single_file_to_a_key_and_into_a_prefix(server: Buckets, tmp_path: Path) -> None:
    bucket = new_bucket(server, {})
    source = tmp_path / "x y+z ü.txt"
    source.write_bytes(b"hello")
    code, out, err = cli(server.endpoint_url, server.credentials, str(source), f"s3://{bucket}/k")
    assert code == 0, err
    assert out == f"upload: {source} to s3://{bucket}/k\n"
    assert "uploaded 1 object, 5 B" in err
    code, _, err = cli(server.endpoint_url, server.credentials, str(source), f"s3://{bucket}/d/")
    assert code == 0, err
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    code, _, err = cli(server.endpoint_url, server.credentials, str(empty), f"s3://{bucket}")
    assert code == 0, err
    assert stored(server, bucket) == {"k": b"hello", "d/x y+z ü.txt": b"hello", "empty": b""}
    # the Content-Type is guessed from the file's name, as the AWS CLI does
    assert server.s3.head_object(Bucket=bucket, Key="k")["ContentType"] == "text/plain"
    assert server.s3.head_object(Bucket=bucket, Key="empty")["ContentType"] != "text/plain"


def test_a_big_file_goes_in_parallel_parts(server: Buckets, tmp_path: Path) -> None:
    data = os.urandom(12 * MiB + 5)
    (tmp_path / "big.bin").write_bytes(data)
    bucket = new_bucket(server, {})
    summary = surge.s3.upload(
        str(tmp_path / "big.bin"),
        f"s3://{bucket}/big.bin",
        part_size=MIN_PART_SIZE,
        concurrency=4,
        **server.options(),
    )
    assert summary.failures == []
    assert summary.parts == 3  # 5 + 5 + 2 MiB
    assert summary.requests == 6  # create, list the key's uploads, three parts, complete
    head = server.s3.head_object(Bucket=bucket, Key="big.bin")
    digests = b"".join(
        hashlib.md5(data[i : i + MIN_PART_SIZE]).digest()
        for i in range(0, len(data), MIN_PART_SIZE)
    )
    assert head["ETag"] == f'"{hashlib.md5(digests).hexdigest()}-3"'
    assert head["ContentLength"] == len(data)
    body = server.s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
    assert server.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_the_part_size_adapts_to_the_file() -> None:
    assert part_size_for(100 * MiB, 8 * MiB) == 8 * MiB
    assert part_size_for(80_000 * MiB, 8 * MiB) == 8 * MiB  # exactly 10,000 parts
    # 1 TiB: 10,000 parts of just over 104 MiB, as the AWS CLI cuts it
    size = 1024 * 1024 * MiB
    assert part_size_for(size, 8 * MiB) == -(-size // 10_000)
    with pytest.raises(UsageError, match="5MiB"):
        surge.s3.UploadOptions(part_size=MiB)


class FailingPartClient(AsyncClient):
    """Every UploadPart of part ``number`` fails with a reset connection;
    UploadPart requests counted."""

    def __init__(self, number: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.number = number
        self.parts = 0

    async def request(self, method: str, url: str, **kwargs: Any) -> Any:
        if "partNumber=" in url:
            self.parts += 1
            if f"partNumber={self.number}&" in url:
                raise RequestError("connection_reset", "the test broke this part")
        return await super().request(method, url, **kwargs)


def test_a_failing_part_aborts_the_upload(server: Buckets, tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(os.urandom(16 * MiB))
    (tmp_path / "small").write_bytes(b"s")
    bucket = new_bucket(server, {})
    client = FailingPartClient(2, **CLIENT)

    async def run() -> surge.s3.Summary:
        try:
            return await surge.s3.upload_async(
                str(tmp_path),
                f"s3://{bucket}/",
                recursive=True,
                client=client,
                **server.options(part_size=MIN_PART_SIZE, retries=0, concurrency=2),
            )
        finally:
            await client.close()

    summary = asyncio.run(run())
    assert [(f.source, f.code) for f in summary.failures] == [
        (str(tmp_path / "big"), "connection_reset")
    ]
    assert stored(server, bucket) == {"small": b"s"}
    # aborted: no parts left stored (and billed) on the server
    assert server.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert client.parts >= 2


def test_dryrun_writes_nothing(server: Buckets, tmp_path: Path) -> None:
    write_tree(tmp_path, {"a": b"a", "sub/b": b"bb"})
    bucket = new_bucket(server, {})
    code, out, err = cli(
        server.endpoint_url, server.credentials, str(tmp_path), f"s3://{bucket}/p", "-r", "--dryrun"
    )
    assert code == 0, err
    assert out.splitlines() == [
        f"(dryrun) upload: {tmp_path / 'a'} to s3://{bucket}/p/a",
        f"(dryrun) upload: {tmp_path / 'sub' / 'b'} to s3://{bucket}/p/sub/b",
    ]
    assert "would upload 2 objects, 3 B" in err
    assert server.boto3_keys(bucket) == []


@pytest.mark.parametrize(("filters", "expected"), FILTER_CASES)
def test_include_exclude_select_as_aws_does(
    server: Buckets, tmp_path: Path, filters: list[str], expected: list[str]
) -> None:
    write_tree(tmp_path / "pre", {k: k.encode() for k in FILTER_KEYS})
    bucket = new_bucket(server, {})
    code, _, err = cli(
        server.endpoint_url,
        server.credentials,
        str(tmp_path / "pre"),
        f"s3://{bucket}/to/",
        "-r",
        *filters,
    )
    assert code == 0, err
    assert sorted(server.boto3_keys(bucket)) == sorted(f"to/{k}" for k in expected)


def test_failures_are_lines_and_exit_1(server: Buckets, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    (tmp_path / "there").write_bytes(b"t")
    bucket = new_bucket(server, {})
    code, out, err = cli(server.endpoint_url, server.credentials, str(missing), f"s3://{bucket}/m")
    assert code == 1
    assert f"upload failed: {missing} to s3://{bucket}/m: LocalError: " in err
    assert "Traceback" not in err and out == ""
    there = tmp_path / "there"
    code, _, err = cli(server.endpoint_url, server.credentials, str(there), "s3://no-such-bkt/t")
    assert code == 2  # a missing bucket ends the run: one line naming it
    assert err.count("\n") == 1 and "NoSuchBucket" in err and "'no-such-bkt'" in err
    assert server.boto3_keys(bucket) == []


# -- throttling: the deviant server's 503 SlowDown ---------------------------------------


def test_slowdown_is_retried_both_ways(tmp_path: Path) -> None:
    keys = surge.s3.Credentials("AK", "SK")
    (tmp_path / "up").write_bytes(b"payload")
    with deviant_server([]) as server:
        server.throttles = 3
        code, _, err = cli(
            server.endpoint_url, keys, str(tmp_path / "up"), "s3://throttle/k", "--json-summary"
        )
        assert code == 0, err
        assert server.stored == {"throttle/k": b"payload"}
        assert server.object_requests == [("PUT", "k")] * 4  # three 503s, then stored
        server.throttles = 3
        server.object_requests.clear()
        code, _, err = cli(server.endpoint_url, keys, "s3://throttle/k", str(tmp_path / "down"))
        assert code == 0, err
        assert (tmp_path / "down").read_bytes() == b"payload"
        assert server.object_requests == [("HEAD", "k")] * 4 + [("GET", "k")]


def test_slowdown_that_lasts_is_a_failure_line(tmp_path: Path) -> None:
    keys = surge.s3.Credentials("AK", "SK")
    (tmp_path / "up").write_bytes(b"payload")
    with deviant_server([]) as server:
        args = ["--retries", "2"]
        code, _, err = cli(
            server.endpoint_url, keys, str(tmp_path / "up"), "s3://throttle-always/k", *args
        )
        assert code == 1
        assert f"upload failed: {tmp_path / 'up'} to s3://throttle-always/k: SlowDown: " in err
        assert server.object_requests == [("PUT", "k")] * 3
        server.object_requests.clear()
        code, _, err = cli(
            server.endpoint_url, keys, "s3://throttle-always/k", str(tmp_path / "down"), *args
        )
        assert code == 1
        assert f"download failed: s3://throttle-always/k to {tmp_path / 'down'}: " in err
        assert server.object_requests == [("HEAD", "k")] * 3
        assert not (tmp_path / "down").exists()


def test_an_interrupted_multipart_upload_is_aborted(
    minio: MinioServer, s3: Any, tmp_path: Path
) -> None:
    server = Buckets(
        minio.endpoint_url, surge.s3.Credentials(minio.access_key, minio.secret_key), s3
    )
    bucket = new_bucket(server, {})
    (tmp_path / "big").write_bytes(os.urandom(64 * MiB))
    # one request at a time, 5 MiB parts: 13 parts, time enough to interrupt it
    process = _surge_cp(
        server,
        str(tmp_path / "big"),
        f"s3://{bucket}/big",
        "--endpoint-url",
        minio.endpoint_url,
        "--concurrency",
        "1",
        "--part-size",
        "5MiB",
    )
    try:
        deadline = time.monotonic() + 30
        while not s3.list_multipart_uploads(Bucket=bucket).get("Uploads"):
            assert process.poll() is None, "the upload ended before it could be interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert server.boto3_keys(bucket) == []


class CountingClient(AsyncClient):
    """Counts the multipart uploads begun and not yet completed, and the most
    at once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.open = self.most = 0

    async def request(self, method: str, url: str, **kwargs: Any) -> Any:
        response = await super().request(method, url, **kwargs)
        if method == "POST" and url.endswith("?uploads="):
            self.open += 1
            self.most = max(self.most, self.open)
        elif method == "POST" and "uploadId=" in url:
            self.open -= 1
        return response


def test_big_files_open_at_once_are_bounded(server: Buckets, tmp_path: Path) -> None:
    files = {f"f{i}": os.urandom(6 * MiB + i) for i in range(6)}
    write_tree(tmp_path, files)
    bucket = new_bucket(server, {})
    client = CountingClient(**CLIENT)

    async def run() -> surge.s3.Summary:
        try:
            return await surge.s3.upload_async(
                str(tmp_path),
                f"s3://{bucket}/",
                recursive=True,
                client=client,
                **server.options(part_size=MIN_PART_SIZE, concurrency=2),
            )
        finally:
            await client.close()

    summary = asyncio.run(run())
    assert summary.failures == [] and summary.parts == 12
    # the walk waits for a file to close: never more uploads open than --concurrency
    assert client.most <= 2
    assert stored(server, bucket) == files


def test_a_fifo_is_skipped_not_waited_for(moto_s3: Buckets, tmp_path: Path) -> None:
    write_tree(tmp_path, {"a": b"a", "z": b"z"})
    os.mkfifo(tmp_path / "m-fifo")  # opening it for reading would wait for a writer
    bucket = new_bucket(moto_s3, {})
    code, _, err = cli(
        moto_s3.endpoint_url, moto_s3.credentials, str(tmp_path), f"s3://{bucket}/", "-r"
    )
    assert code == 0  # skipped with a warning, as the AWS CLI does
    assert f"warning: skipping {tmp_path / 'm-fifo'}: not a regular file (a FIFO)" in err
    assert stored(moto_s3, bucket) == {"a": b"a", "z": b"z"}


def test_an_etag_that_is_not_the_md5_sent_is_a_failure(tmp_path: Path) -> None:
    keys = surge.s3.Credentials("AK", "SK")
    (tmp_path / "up").write_bytes(b"payload")
    with deviant_server([]) as server:
        code, _, err = cli(server.endpoint_url, keys, str(tmp_path / "up"), "s3://wrong-etag/k")
    assert code == 1
    assert f"upload failed: {tmp_path / 'up'} to s3://wrong-etag/k: BadDigest: " in err


def test_uploads_carry_crc32_checksums_that_minio_keeps(
    minio: MinioServer, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each body goes with its CRC-32 (S3 checks it before it stores the bytes:
    a tenth of the CPU of the MD5 that Content-MD5 needs), and a multipart
    upload's object with its whole CRC-32, combined from the parts'
    (FULL_OBJECT): the object then says it, and a download checks it - which a
    multipart ETag alone would not allow."""
    server = Buckets(
        minio.endpoint_url, surge.s3.Credentials(minio.access_key, minio.secret_key), s3
    )
    files = {"big.bin": os.urandom(12 * MiB + 5), "small.bin": os.urandom(1000)}
    write_tree(tmp_path / "src", files)
    bucket = new_bucket(server, {})
    summary = surge.s3.upload(
        str(tmp_path / "src"),
        f"s3://{bucket}/",
        recursive=True,
        part_size=MIN_PART_SIZE,
        **server.options(),
    )
    assert summary.failures == [] and summary.verified == 2
    for key, data in files.items():
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        assert (head.get("ChecksumCRC32"), head.get("ChecksumType")) == (crc, "FULL_OBJECT")
    assert s3.head_object(Bucket=bucket, Key="big.bin")["ETag"].endswith('-3"')
    # the parts' CRC-32s, computed as they arrive, are combined: no read-back
    monkeypatch.setattr(transfer, "file_mismatch", None)
    down = surge.s3.download(
        f"s3://{bucket}/big.bin", str(tmp_path / "big.bin"), part_size=4 * MiB, **server.options()
    )
    assert down.failures == [] and (down.verified, down.parts) == (1, 4)
    assert (tmp_path / "big.bin").read_bytes() == files["big.bin"]
