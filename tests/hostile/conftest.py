"""Fixtures of the hostile round's tests: tests/s3's MinIO server and boto3
client of it (``minio``, ``s3``: the reference), new buckets, and the surge
command line as a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from tests.s3.conftest import minio, s3

from surge.s3.minio import MinioServer

__all__ = ["minio", "s3"]  # tests/s3's fixtures, for this directory too

#: The command line, in a child process of this interpreter.
SURGE = [sys.executable, "-m", "surge.cli"]


@pytest.fixture
def bucket(s3: Any) -> Callable[[Mapping[str, bytes]], str]:
    """``bucket({key: body})``: a new bucket holding these objects; its name."""

    def make(objects: Mapping[str, bytes]) -> str:
        name = "hostile-" + uuid.uuid4().hex[:12]
        s3.create_bucket(Bucket=name)
        for key, body in objects.items():
            s3.put_object(Bucket=name, Key=key, Body=body)
        return name

    return make


@pytest.fixture
def s3_env(minio: MinioServer) -> dict[str, str]:
    """The environment for ``surge s3`` against the MinIO server (no config
    files of the machine's)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("AWS_") and "proxy" not in k.lower()
    }
    env.update(
        AWS_ACCESS_KEY_ID=minio.access_key,
        AWS_SECRET_ACCESS_KEY=minio.secret_key,
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_ENDPOINT_URL=minio.endpoint_url,
        AWS_DEFAULT_REGION="us-east-1",
    )
    return env


def run(
    args: list[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: Any = subprocess.PIPE,
    close: tuple[int, ...] = (),
    stdin: bytes | None = None,
    timeout: float = 120,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """The command line in a child; ``close``: descriptors closed in the child
    before it starts (so Python starts without them, as under a shell's
    ``>&-``)."""

    def closing() -> None:
        for fd in close:
            os.close(fd)

    return subprocess.run(
        [*SURGE, *args],
        env=dict(env) if env is not None else None,
        input=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE if 2 not in close else subprocess.DEVNULL,
        preexec_fn=closing if close else None,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )
