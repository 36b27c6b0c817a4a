"""A multipart upload that a killed run left is aborted by the rerun.

SIGKILL (or a crash, a lost machine) leaves no time to abort a multipart
upload, and the server keeps its parts (billed, on S3) until a lifecycle rule
says otherwise.  The rerun of the same ``cp`` (or ``sync``) to the same key
lists the key's uploads in progress and aborts the ones begun before its own,
saying so in one line.  The first run really is killed, mid-upload, through a
relay that goes silent once parts are on the way (tests/s3/stall.py); the
server itself (MinIO, moto) is asked what is left, through boto3.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from urllib.parse import unquote_plus, urlsplit

import pytest
from botocore.exceptions import ClientError
from tests.s3._buckets import Buckets
from tests.s3.stall import stalling_relay
from tests.s3.test_cp import new_bucket
from tests.s3.test_stall import finish, surge, wait_for

from surge.s3.cli import escape_key

MiB = 1024 * 1024
PARTS = ["--part-size", "5MiB", "--multipart-threshold", "5MiB", "--no-progress"]


def uploads_left(server: Buckets, bucket: str) -> list[tuple[str, str]]:
    """(key, upload id) of each upload in progress: url-encoded by the server
    where it can (a key of any bytes), which boto3 leaves to its caller."""
    answer = server.s3.list_multipart_uploads(Bucket=bucket, EncodingType="url")
    encoded = answer.get("EncodingType") == "url"
    return sorted(
        (unquote_plus(u["Key"]) if encoded else u["Key"], u["UploadId"])
        for u in answer.get("Uploads", [])
    )


def _killed_mid_upload(
    server: Buckets, bucket: str, command: list[str], key: str
) -> list[tuple[str, str]]:
    """Run ``surge s3 COMMAND`` through a relay that stalls once 6 MiB went
    up, SIGKILL it once its multipart upload of ``key`` exists: what it left."""
    port = urlsplit(server.endpoint_url).port
    assert port is not None
    with stalling_relay(port) as relay:
        relay.stall_after(up=6 * MiB)
        process = surge(server, *command, "--endpoint-url", relay.url, *PARTS)
        wait_for(
            lambda: any(k == key for k, _ in uploads_left(server, bucket)),
            process,
            "a multipart upload",
        )
        wait_for(lambda: relay.stalled, process, "a stall")
        process.send_signal(signal.SIGKILL)
        finish(process)
    left = [(k, upload_id) for k, upload_id in uploads_left(server, bucket) if k == key]
    assert len(left) == 1, left
    return left


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("cp", "big"),
        ("sync", "big"),
        ("cp", "sp ace+plus%25&amp;"),  # escaped in the listing's XML and URL
        ("cp", "c\x01trl"),  # no XML 1.0 text: the listing url-encodes it
    ],
)
def test_the_rerun_aborts_the_upload_a_killed_run_left(
    server: Buckets, tmp_path: Path, command: str, name: str
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    body = os.urandom(12 * MiB)
    (source / name).write_bytes(body)
    bucket = new_bucket(server, {})
    # another key's upload in progress, which no rerun of this copy touches
    other_key = f"{name}-other"
    try:
        other = server.s3.create_multipart_upload(Bucket=bucket, Key=other_key)["UploadId"]
    except ClientError as e:  # moto: no multipart upload of a control character's key
        pytest.skip(f"this server makes no multipart upload of {other_key!r}: {e}")
    if command == "cp":
        args = ["cp", str(source / name), f"s3://{bucket}/{name}"]
    else:
        args = ["sync", str(source), f"s3://{bucket}/"]
    left = _killed_mid_upload(server, bucket, args, name)
    (left_id,) = [upload_id for key, upload_id in left if key == name]

    code, _out, err = finish(surge(server, *args, "--endpoint-url", server.endpoint_url, *PARTS))
    assert code == 0, err
    line = escape_key(
        f"surge s3 {command}: aborted the incomplete multipart upload of s3://{bucket}/{name}"
        f" that an earlier run left (upload id {left_id})"
    )
    assert err.splitlines().count(line) == 1, err
    assert uploads_left(server, bucket) == [(other_key, other)]
    assert server.s3.get_object(Bucket=bucket, Key=name)["Body"].read() == body
    server.s3.abort_multipart_upload(Bucket=bucket, Key=other_key, UploadId=other)


def test_the_json_summary_counts_what_it_aborted(server: Buckets, tmp_path: Path) -> None:
    source = tmp_path / "big"
    source.write_bytes(os.urandom(12 * MiB))
    bucket = new_bucket(server, {})
    args = ["cp", str(source), f"s3://{bucket}/big"]
    _killed_mid_upload(server, bucket, args, "big")
    code, out, err = finish(
        surge(server, *args, "--endpoint-url", server.endpoint_url, *PARTS, "--json-summary")
    )
    assert code == 0, err
    assert json.loads(out)["left_aborted"] == 1
    assert uploads_left(server, bucket) == []
