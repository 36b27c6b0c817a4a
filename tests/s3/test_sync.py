"""``surge s3 sync`` and :func:`surge.s3.sync`, both ways, against MinIO and moto:
only what differs by size or age is copied, ``--delete`` removes what the
source lacks (what the filters take only), and an interrupted download is
finished by a sync.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from tests.s3._buckets import Buckets
from tests.s3.test_cp import _surge_cp, new_bucket, tree
from tests.s3.test_upload import stored, write_tree

import surge.s3
from surge.cli import main
from surge.s3.minio import MinioServer

MiB = 1024 * 1024


def sync_cli(server: Buckets, *args: str) -> tuple[int, str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    result = CliRunner().invoke(
        main, ["s3", "sync", "--endpoint-url", server.endpoint_url, *args], env=env
    )
    return result.exit_code, result.stdout, result.stderr


def test_sync_down_copies_what_differs_and_deletes_extras(server: Buckets, tmp_path: Path) -> None:
    objects = {"a": b"a", "sub/b ü+": b"bb", "c": b"ccc"}
    bucket = new_bucket(server, objects)
    out = tmp_path / "out"
    first = surge.s3.sync(f"s3://{bucket}/", str(out), **server.options())
    assert (first.objects, first.unchanged, first.failures) == (3, 0, [])
    assert tree(out) == objects
    # the file's mtime is the object's LastModified, as the AWS CLI sets it
    modified = server.s3.head_object(Bucket=bucket, Key="a")["LastModified"].timestamp()
    assert int(os.stat(out / "a").st_mtime) == int(modified)
    again = surge.s3.sync(f"s3://{bucket}/", str(out), **server.options())
    assert (again.objects, again.unchanged, again.requests) == (0, 3, 0)
    # a file of another size, a new object, extra local files (one excluded)
    (out / "c").write_bytes(b"changed size")
    server.s3.put_object(Bucket=bucket, Key="new", Body=b"n")
    (out / "extra").write_bytes(b"x")
    (out / "keep.tmp").write_bytes(b"k")
    code, stdout, err = sync_cli(
        server, f"s3://{bucket}/", str(out), "--delete", "--exclude", "*.tmp"
    )
    assert code == 0, err
    assert sorted(stdout.splitlines()) == sorted(
        [
            f"download: s3://{bucket}/c to {out / 'c'}",
            f"download: s3://{bucket}/new to {out / 'new'}",
            f"delete: {out / 'extra'}",
        ]
    )
    assert "2 unchanged, deleted 1" in err
    assert tree(out) == {**objects, "new": b"n", "keep.tmp": b"k"}


def test_sync_up_copies_what_differs_and_deletes_extras(server: Buckets, tmp_path: Path) -> None:
    files = {"a": b"a", "sub/b ü+": b"bb", "c": b"ccc"}
    write_tree(tmp_path / "src", files)
    bucket = new_bucket(server, {"p/extra": b"x", "p/keep.tmp": b"k", "elsewhere": b"e"})
    source, url = str(tmp_path / "src"), f"s3://{bucket}/p"
    first = surge.s3.sync(source, url, **server.options())
    assert (first.objects, first.unchanged, first.deleted, first.failures) == (3, 0, 0, [])
    again = surge.s3.sync(source, url, **server.options())
    assert (again.objects, again.unchanged) == (0, 3)
    assert again.requests == 0  # the listing is the only traffic
    # a file newer than its object (by more than a second) goes again
    later = time.time() + 100
    os.utime(tmp_path / "src" / "a", (later, later))
    code, stdout, err = sync_cli(server, source, url, "--delete", "--exclude", "*.tmp")
    assert code == 0, err
    assert sorted(stdout.splitlines()) == [
        f"delete: s3://{bucket}/p/extra",
        f"upload: {tmp_path / 'src' / 'a'} to s3://{bucket}/p/a",
    ]
    assert stored(server, bucket) == {
        **{f"p/{k}": v for k, v in files.items()},
        "p/keep.tmp": b"k",
        "elsewhere": b"e",
    }


def test_sync_dryrun_changes_nothing(server: Buckets, tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"a": b"a"})
    bucket = new_bucket(server, {"p/extra": b"x"})
    code, stdout, err = sync_cli(
        server, str(tmp_path / "src"), f"s3://{bucket}/p/", "--delete", "--dryrun"
    )
    assert code == 0, err
    assert sorted(stdout.splitlines()) == [
        f"(dryrun) delete: s3://{bucket}/p/extra",
        f"(dryrun) upload: {tmp_path / 'src' / 'a'} to s3://{bucket}/p/a",
    ]
    assert server.boto3_keys(bucket) == ["p/extra"]


def test_an_interrupted_download_is_resumed_by_sync(
    minio: MinioServer, s3: Any, tmp_path: Path
) -> None:
    server = Buckets(
        minio.endpoint_url, surge.s3.Credentials(minio.access_key, minio.secret_key), s3
    )
    objects = {f"obj-{i:02d}": os.urandom(MiB + i) for i in range(24)}
    bucket = new_bucket(server, objects)
    out = tmp_path / "out"
    out.mkdir()
    args = [f"s3://{bucket}/", str(out), "-r", "--endpoint-url", minio.endpoint_url]
    # one request at a time, 64 KiB parts: time enough to kill it half-way
    process = _surge_cp(server, *args, "--concurrency", "1", "--part-size", "64KiB")
    try:
        deadline = time.monotonic() + 60
        while sum(not p.name.startswith(".surge-") for p in out.iterdir()) < 3:
            assert process.poll() is None, "the download ended before it could be interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    done = {p.name for p in out.iterdir() if not p.name.startswith(".surge-")}
    assert 3 <= len(done) < len(objects)
    summary = surge.s3.sync(f"s3://{bucket}/", str(out), delete=True, **server.options())
    assert summary.failures == []
    assert summary.unchanged == len(done)  # what was complete is not read again
    assert summary.objects == len(objects) - len(done)
    assert tree(out) == objects  # and the killed run's temporary file is gone (--delete)
