"""``surge s3 ls`` and ``surge s3 cp`` import only what they use (issue #38):
a listing no upload, transfer, cookie, c-ares or proxy code; a download no
upload.  Each runs in a child interpreter against MinIO (tests/_loaded.py
reads its ``sys.modules``); imports are counted, never timed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests._loaded import COMMAND_LINE, ENGINE_PACKAGES, HTTP_ENGINE, loaded_by

from surge.s3.minio import MinioServer

#: What an S3 command adds to the engine: the listing and what it stands on.
LISTING = frozenset(
    {
        "surge.gc_tuning",
        "surge.retry",
        "surge._log",  # surge's loggers, their messages redacted
        "surge.s3",
        "surge.s3.api",
        "surge.s3.cli",
        "surge.s3.interrupts",  # a signal stops every command the same way
        "surge.s3.config",
        "surge.s3.keyspace",
        "surge.s3.listing",
        "surge.s3.parse",
        "surge.s3.region",
        "surge.s3.sigv4",
    }
)
#: A download besides: the transfer, its checks and its temporary files.
DOWNLOAD = frozenset(
    {
        "surge.bulk",
        "surge.bulk.limits",
        "surge.s3.checksums",
        "surge.s3.objects",
        "surge.s3.paths",
        "surge.temps",  # moved out of surge.s3: every replacement sink's
        "surge.s3.transfer",
        "surge.s3.putoptions",  # a download's SSE-C key (small: no imports of its own)
    }
)


def _environment(minio: MinioServer) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": minio.access_key, "AWS_SECRET_ACCESS_KEY": minio.secret_key}


@pytest.fixture(scope="module")
def bucket(s3: Any) -> str:
    bucket = "startup-imports"
    s3.create_bucket(Bucket=bucket)
    for key in ("a.txt", "dir/b.txt"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"hello\n")
    return bucket


def test_ls_loads_the_listing_only(minio: MinioServer, bucket: str, tmp_path: Path) -> None:
    loaded = loaded_by(
        "s3", "ls", f"s3://{bucket}/", "--endpoint-url", minio.endpoint_url,
        tmp=tmp_path, env=_environment(minio),
    )  # fmt: skip
    assert loaded.status == 0, loaded.output
    assert "a.txt" in loaded.output
    assert sorted(loaded.surge - (COMMAND_LINE | HTTP_ENGINE | LISTING)) == []
    assert loaded.surge >= HTTP_ENGINE | LISTING
    assert loaded.third_party == ENGINE_PACKAGES
    assert loaded.heavy == {"asyncio", "ssl", "configparser"}  # the AWS config file


def test_cp_down_loads_the_transfer_not_the_upload(
    minio: MinioServer, bucket: str, tmp_path: Path
) -> None:
    target = tmp_path / "a.txt"
    loaded = loaded_by(
        "s3", "cp", f"s3://{bucket}/a.txt", str(target), "--endpoint-url", minio.endpoint_url,
        tmp=tmp_path, env=_environment(minio),
    )  # fmt: skip
    assert loaded.status == 0, loaded.output
    assert target.read_bytes() == b"hello\n"
    expected = COMMAND_LINE | HTTP_ENGINE | LISTING | DOWNLOAD
    assert sorted(loaded.surge - expected) == []
    assert loaded.surge >= DOWNLOAD
    assert loaded.third_party == ENGINE_PACKAGES | {"isal"}  # CRC-32 at ISA-L's speed
    # malloc's settings for a transfer (ctypes); no email.utils for the files' mtimes
    assert loaded.heavy == {"asyncio", "ssl", "configparser", "ctypes"}
