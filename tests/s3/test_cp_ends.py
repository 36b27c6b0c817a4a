"""How a ``surge s3 cp`` or ``sync`` run ends, against MinIO and moto: FIFOs,
sockets and devices in an upload's source are skipped with a warning (as the
AWS CLI skips them), not failed; a missing bucket ends the run at once with
one line and exit 2, whichever way and however many files; Ctrl-C ends it
with exit 130 and nothing on stderr but the word (no asyncio noise), no
temporary file and no multipart upload left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.s3._buckets import Buckets
from tests.s3.test_cp import new_bucket, tree
from tests.s3.test_upload import stored, write_tree

import surge.s3
from surge.cli import main
from surge.errors import S3Error
from surge.s3.minio import MinioServer

MiB = 1024 * 1024
#: What asyncio or Python print when a run was not ended cleanly.
NOISE = ("Future exception was never retrieved", "Task was destroyed", "Traceback")


def run_cli(server: Buckets, command: str, *args: str) -> tuple[int, str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    result = CliRunner().invoke(
        main, ["s3", command, "--endpoint-url", server.endpoint_url, *args], env=env
    )
    return result.exit_code, result.stdout, result.stderr


# -- FIFOs, sockets, devices: skipped ----------------------------------------------------


@pytest.fixture
def special_source() -> Iterator[tuple[Path, Path, Path]]:
    """A directory of two regular files, a FIFO and a bound unix socket (in
    /tmp: a socket's path must fit in 108 bytes, which a test's tmp_path may
    not); yields (directory, FIFO, socket)."""
    root = Path(tempfile.mkdtemp(prefix="surge-", dir="/tmp"))
    listening = socket.socket(socket.AF_UNIX)
    try:
        write_tree(root, {"a.txt": b"alpha", "sub/z.bin": os.urandom(3000)})
        os.mkfifo(root / "fifo")
        listening.bind(str(root / "sock"))
        yield root, root / "fifo", root / "sock"
    finally:
        listening.close()
        shutil.rmtree(root)


@pytest.mark.parametrize("how", ["cp", "sync", "dryrun"])
def test_fifos_and_sockets_are_skipped_with_a_warning_not_failed(
    server: Buckets, special_source: tuple[Path, Path, Path], how: str
) -> None:
    source, fifo, sock = special_source
    # a sync's destination has objects where the FIFO and the socket are: a
    # skipped file is neither copied over them nor taken for gone (--delete)
    before = {"fifo": b"", "sock": b"kept"} if how == "sync" else {}
    bucket = new_bucket(server, before)
    if how == "sync":
        args = ["sync", str(source), f"s3://{bucket}/", "--delete"]
    else:
        args = ["cp", "--recursive", str(source), f"s3://{bucket}/"]
        args += ["--dryrun"] if how == "dryrun" else []
    code, out, err = run_cli(server, *args, "--json-summary")
    assert code == 0, err
    assert f"warning: skipping {fifo}: not a regular file (a FIFO)\n" in err
    assert f"warning: skipping {sock}: not a regular file (a socket)\n" in err
    summary = json.loads(out)
    assert (summary["skipped"], summary["failed"], summary["objects"]) == (2, 0, 2)
    assert summary["deleted"] == 0
    files = {"a.txt": b"alpha", "sub/z.bin": (source / "sub" / "z.bin").read_bytes()}
    assert stored(server, bucket) == ({} if how == "dryrun" else files) | before
    if how != "dryrun":  # the summary line counts them too
        code, _, err = run_cli(server, *args)
        assert code == 0 and "0 failed, 2 skipped" in err, err


def test_a_download_sync_delete_leaves_fifos_and_sockets(
    server: Buckets, special_source: tuple[Path, Path, Path]
) -> None:
    """``sync s3://... DIR --delete`` removes the regular files no object maps
    to, never a FIFO or a socket there (no copy of an object, and never listed
    by the AWS CLI): a warning each, and exit 0."""
    destination, fifo, sock = special_source
    bucket = new_bucket(server, {"a.txt": b"alpha"})
    code, out, err = run_cli(
        server, "sync", f"s3://{bucket}/", str(destination), "--delete", "--json-summary"
    )
    assert code == 0, err
    assert f"warning: skipping {fifo}: not a regular file (a FIFO)\n" in err
    assert f"warning: skipping {sock}: not a regular file (a socket)\n" in err
    summary = json.loads(out)
    assert (summary["deleted"], summary["skipped"], summary["failed"]) == (1, 2, 0)
    assert fifo.is_fifo() and sock.is_socket()
    assert not (destination / "sub" / "z.bin").exists()
    assert (destination / "a.txt").read_bytes() == b"alpha"


def test_a_single_fifo_is_skipped(server: Buckets, special_source: tuple[Path, Path, Path]) -> None:
    _, fifo, _ = special_source
    bucket = new_bucket(server, {})
    code, _, err = run_cli(server, "cp", str(fifo), f"s3://{bucket}/f")
    assert code == 0, err
    assert f"warning: skipping {fifo}: not a regular file (a FIFO)" in err
    assert server.boto3_keys(bucket) == []


def test_a_dangling_link_is_still_a_failure(server: Buckets, tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"a": b"a"})
    (tmp_path / "src" / "gone").symlink_to(tmp_path / "nowhere")
    bucket = new_bucket(server, {})
    code, _, err = run_cli(server, "cp", "-r", str(tmp_path / "src"), f"s3://{bucket}/")
    assert code == 1
    assert f"upload failed: {tmp_path / 'src' / 'gone'} to s3://{bucket}/gone: LocalError" in err
    assert "skipped" not in err


# -- a missing bucket: one line, exit 2 ----------------------------------------------------


@pytest.mark.parametrize(
    "command, way, single",
    [
        ("cp", "up", False),
        ("cp", "up", True),
        ("cp", "down", False),
        ("cp", "down", True),
        ("sync", "up", False),
        ("sync", "down", False),
    ],
)
def test_a_missing_bucket_ends_the_run_with_one_line(
    server: Buckets, tmp_path: Path, command: str, way: str, single: bool
) -> None:
    missing = f"no-such-bucket-{os.getpid()}"
    write_tree(tmp_path / "src", {f"f{i:02d}": b"x" * i for i in range(40)})
    (tmp_path / "dst").mkdir()
    local = tmp_path / "src" / "f07" if single else tmp_path / "src"
    if way == "up":
        args = [str(local), f"s3://{missing}/" + ("k" if single else "p/")]
    else:
        args = [f"s3://{missing}/" + ("k" if single else "p/"), str(tmp_path / "dst")]
    if command == "cp" and not single:
        args.append("--recursive")
    code, _, err = run_cli(server, command, *args)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "NoSuchBucket" in err and missing in err
    assert list((tmp_path / "dst").iterdir()) == []
    assert missing not in {b["Name"] for b in server.s3.list_buckets()["Buckets"]}


def test_upload_raises_for_a_missing_bucket(server: Buckets, tmp_path: Path) -> None:
    write_tree(tmp_path, {f"f{i}": b"x" for i in range(20)})
    with pytest.raises(S3Error) as caught:
        surge.s3.upload(
            str(tmp_path), "s3://no-such-bucket-x/p/", recursive=True, **server.options()
        )
    assert caught.value.code == "NoSuchBucket" and caught.value.is_usage


# -- Ctrl-C: exit 130, no asyncio noise, nothing half-done left ----------------------------


def _surge(server: Buckets, *args: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    command = [sys.executable, "-m", "surge.cli", "s3", "cp", "--endpoint-url", server.endpoint_url]
    return subprocess.Popen(
        [*command, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _interrupt_when(process: subprocess.Popen[bytes], started: Any) -> str:
    """SIGINT once ``started()`` says the transfer is under way; its stderr."""
    try:
        deadline = time.monotonic() + 30
        while not started():
            assert process.poll() is None, "the transfer ended before it could be interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.002)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return err.decode()


def _written(directory: Path) -> int:
    """Bytes written so far into the files in ``directory`` (a big object's
    temporary file has its full size at once: its blocks tell)."""
    total = 0
    for path in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
            total += path.stat().st_blocks * 512
    return total


def _minio_buckets(minio: MinioServer, s3: Any) -> Buckets:
    return Buckets(minio.endpoint_url, surge.s3.Credentials(minio.access_key, minio.secret_key), s3)


def test_an_interrupted_download_ends_cleanly(minio: MinioServer, s3: Any, tmp_path: Path) -> None:
    server = _minio_buckets(minio, s3)
    bucket = new_bucket(server, {"big": os.urandom(96 * MiB)})
    out = tmp_path / "out"
    out.mkdir()
    # 1 MiB parts, 16 requests in flight: requests are cut off mid-way
    process = _surge(
        server, f"s3://{bucket}/big", str(out), "--part-size", "1MiB", "--concurrency", "16"
    )
    err = _interrupt_when(process, lambda: _written(out) >= 16 * MiB)
    assert process.returncode == 130, err
    assert "interrupted" in err
    assert not any(noise in err for noise in NOISE), err
    assert list(out.iterdir()) == []  # neither the file nor its .surge-* temporary


def test_an_interrupted_upload_ends_cleanly(minio: MinioServer, s3: Any, tmp_path: Path) -> None:
    server = _minio_buckets(minio, s3)
    bucket = new_bucket(server, {})
    write_tree(tmp_path / "src", {f"f{i:03d}": os.urandom(64 * 1024) for i in range(200)})
    (tmp_path / "src" / "big").write_bytes(os.urandom(128 * MiB))
    process = _surge(
        server,
        str(tmp_path / "src"),
        f"s3://{bucket}/",
        "--recursive",
        "--part-size",
        "5MiB",
        "--concurrency",
        "16",
    )

    def parts_sent() -> bool:  # parts stored, more on the way
        for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            listed = s3.list_parts(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
            return len(listed.get("Parts", [])) >= 2
        return False

    err = _interrupt_when(process, parts_sent)
    assert process.returncode == 130, err
    assert "interrupted" in err
    assert not any(noise in err for noise in NOISE), err
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert "big" not in server.boto3_keys(bucket)
    assert tree(tmp_path / "src")  # the source is untouched
