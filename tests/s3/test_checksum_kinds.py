"""A valid object never fails as BadDigest: a checksum is checked as the kind
the server says it is (full-object or composite), part by part when it is
composite, and never failed when the server does not say which kind.

The objects are made as the AWS CLI makes them - boto3's ``upload_file``
with CRC32, multipart from 8 MiB - on moto (whose HEAD gives a composite
CRC32 with neither its ``-N`` nor a type: issue #34's false BadDigest) and on
MinIO (which says COMPOSITE, and keeps each part's checksum).
"""

from __future__ import annotations

import base64
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig
from tests.s3._buckets import Buckets
from tests.s3.test_cp import cli, new_bucket
from tests.s3.test_upload_faults import fault_proxy

from surge.s3 import Credentials
from surge.s3.checksums import Expected
from surge.s3.minio import MinioServer

MiB = 1024 * 1024
CRC = "DUoRhQ=="  # the CRC32 of b"hello world"
MD5 = "5eb63bbbe01eeed093cb22bb8f5acdc3"


@pytest.mark.parametrize(
    ("headers", "kind", "parts"),
    [
        ({"x-amz-checksum-crc32": CRC}, "full", None),  # one PUT: both kinds are one
        ({"etag": f'"{MD5}"', "x-amz-checksum-crc32": CRC}, "full", None),
        ({"etag": f'"{MD5}-3"', "x-amz-checksum-crc32": CRC}, "unknown", 3),  # moto's HEAD
        (
            {
                "etag": f'"{MD5}-3"',
                "x-amz-checksum-crc32": CRC,
                "x-amz-checksum-type": "FULL_OBJECT",
            },
            "full",
            3,
        ),
        ({"etag": f'"{MD5}-3"', "x-amz-checksum-crc32": f"{CRC}-3"}, "composite", 3),
        ({"x-amz-checksum-crc32": CRC, "x-amz-checksum-type": "COMPOSITE"}, "composite", None),
        ({"x-amz-checksum-crc32": f"{CRC}-2", "x-amz-checksum-type": "COMPOSITE"}, "composite", 2),
        ({"etag": '"abc-12"', "x-amz-checksum-sha256": "x" * 44}, "unknown", 12),
    ],
)
def test_the_kind_of_a_checksum_is_what_the_server_says(
    headers: dict[str, str], kind: str, parts: int | None
) -> None:
    expected = Expected.from_headers(11, headers)
    assert expected.kind == kind and expected.parts == parts
    assert expected.checksum is not None and "-" not in expected.checksum[1]
    # computed as the bytes come only if it may be the whole object's
    assert expected.whole == (kind != "composite")


def test_a_composite_checksum_is_the_checksum_of_the_parts_checksums() -> None:
    from surge.s3.checksums import composite

    parts = [b"a" * 10, b"b" * 7]
    digests = [zlib.crc32(p).to_bytes(4, "big") for p in parts]
    assert (
        composite("crc32", digests)
        == base64.b64encode(zlib.crc32(b"".join(digests)).to_bytes(4, "big")).decode()
    )


#: Sizes as issue #34 met them: one part exactly, two parts, and a parted download.
SIZES = {"one-part": 8 * MiB, "two-parts": 8 * MiB + 1, "three-parts": 16 * MiB + 3}


def _aws_cli_style(server: Buckets, tmp_path: Path) -> tuple[str, dict[str, bytes]]:
    """Objects uploaded as the AWS CLI uploads them: multipart from 8 MiB, in
    8 MiB parts, each part's CRC32 sent and the object's kept as composite."""
    bucket = new_bucket(server, {})
    config = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB)
    data = {}
    for name, size in SIZES.items():
        path = tmp_path / f"up-{name}"
        path.write_bytes(os.urandom(size))
        server.s3.upload_file(
            str(path), bucket, name, ExtraArgs={"ChecksumAlgorithm": "CRC32"}, Config=config
        )
        data[name] = path.read_bytes()
    return bucket, data


@pytest.mark.parametrize("part_size", [None, "5MiB"])
def test_aws_cli_multipart_objects_download_exactly(
    server: Buckets, tmp_path: Path, part_size: str | None
) -> None:
    bucket, data = _aws_cli_style(server, tmp_path)
    extra = ["--part-size", part_size] if part_size else []
    code, out, err = cli(
        server, f"s3://{bucket}/", str(tmp_path / "down"), "-r", "--json-summary", *extra
    )
    assert code == 0, err
    for name, body in data.items():
        assert (tmp_path / "down" / name).read_bytes() == body
    # checked, part by part: by each part's own checksum (MinIO), or by the
    # composite made from the parts the server lays out (moto)
    assert '"verified": 3' in out and '"unverified": 0' in out


def test_a_corrupted_part_of_a_composite_object_is_bad_digest(
    minio: MinioServer, s3: Any, tmp_path: Path
) -> None:
    """The check still bites: one byte changed on the way fails the object,
    naming the part, where the server keeps each part's checksum (MinIO)."""
    server = Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)
    bucket, _data = _aws_cli_style(server, tmp_path)

    def flip(
        method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[list[tuple[str, str]], bytes]:
        if method == "GET" and path.startswith(f"/{bucket}/three-parts") and len(body) > MiB:
            body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
        return headers, body

    with fault_proxy(f"127.0.0.1:{minio.port}", lambda method, path: None, flip) as proxy:
        code, _out, err = cli(
            Buckets(proxy, server.credentials, s3),
            f"s3://{bucket}/three-parts",
            str(tmp_path / "three-parts"),
        )
    assert code == 1, err
    assert "BadDigest: part 1 of 3: CRC32" in err
    assert not (tmp_path / "three-parts").exists()


def test_a_read_back_in_a_thread_stops_when_its_run_is_interrupted(tmp_path: Path) -> None:
    """Hashing gigabytes in a thread would hold the interpreter's exit (it
    waits for its threads) long past Ctrl-C's bound: it stops at its next block."""
    import asyncio
    import threading
    import time

    from surge.s3.checksums import off_loop, part_digests

    path = tmp_path / "sparse"
    with open(path, "wb") as f:
        f.truncate(64 * 1024 * MiB)  # 64 GiB of holes: minutes of SHA-256
    ended: list[float] = []

    def read_back(fd: int, stop: threading.Event) -> None:
        try:
            part_digests(fd, "sha256", [64 * 1024 * MiB], stop)
        finally:
            ended.append(time.monotonic())

    async def interrupt(fd: int) -> float:
        task = asyncio.ensure_future(off_loop(read_back, fd))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic()

    fd = os.open(path, os.O_RDONLY)
    try:
        cancelled = asyncio.run(interrupt(fd))  # asyncio.run waits for the thread
    finally:
        os.close(fd)
    assert ended and ended[0] - cancelled < 2
