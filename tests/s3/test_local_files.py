"""What an upload reads and a download leaves on the local side: symbolic links
followed or not (the AWS CLI's ``--follow-symlinks``/``--no-follow-symlinks``),
a link loop named with its destination, a download's temporary files never
outliving their run (a run killed outright included) and never uploaded,
and a sync's ``--delete`` when a file and a prefix share a name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.s3._buckets import Buckets
from tests.s3.test_cp import new_bucket, tree
from tests.s3.test_upload import cli as upload_cli
from tests.s3.test_upload import stored

from surge.s3 import Credentials
from surge.s3.minio import MinioServer

MiB = 1024 * 1024


@pytest.fixture()
def minio_buckets(minio: MinioServer, s3: Any) -> Buckets:
    return Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)


def keys_in(server: Buckets) -> dict[str, str]:
    """This process's environment, and the server's keys."""
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }


def run(server: Buckets, command: str, *args: str) -> tuple[int, str, str]:
    """The command line, in a process of its own (signals, a fresh region cache)."""
    env = keys_in(server)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "surge.cli",
            "s3",
            command,
            "--endpoint-url",
            server.endpoint_url,
            *list(args),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


# -- symbolic links ----------------------------------------------------------------------


def _linked_tree(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "far").write_bytes(b"far")
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "real").write_bytes(b"real")
    (source / "sub" / "deep").write_bytes(b"deep")
    (source / "to-real").symlink_to(source / "real")
    (source / "to-outside").symlink_to(outside, target_is_directory=True)
    return source


def test_links_are_followed_by_default_as_the_aws_cli_does(
    minio_buckets: Buckets, tmp_path: Path
) -> None:
    source = _linked_tree(tmp_path)
    bucket = new_bucket(minio_buckets, {})
    code, _out, err = upload_cli(
        minio_buckets.endpoint_url,
        minio_buckets.credentials,
        str(source),
        f"s3://{bucket}/p/",
        "-r",
    )
    assert code == 0, err
    assert stored(minio_buckets, bucket) == {
        "p/real": b"real",
        "p/sub/deep": b"deep",
        "p/to-real": b"real",
        "p/to-outside/far": b"far",
    }


@pytest.mark.parametrize("command", ["cp", "sync"])
def test_no_follow_symlinks_leaves_every_link_out(
    minio_buckets: Buckets, tmp_path: Path, command: str
) -> None:
    source = _linked_tree(tmp_path)
    (source / "selfloop").symlink_to(source / "selfloop")  # a link: left out, not an error
    bucket = new_bucket(minio_buckets, {})
    extra = ["-r"] if command == "cp" else []
    code, _out, err = run(
        minio_buckets, command, str(source), f"s3://{bucket}/p/", "--no-follow-symlinks", *extra
    )
    assert code == 0, err
    assert stored(minio_buckets, bucket) == {"p/real": b"real", "p/sub/deep": b"deep"}
    # a single file that is a link, too (the AWS CLI uploads nothing either)
    code, _out, err = run(
        minio_buckets, "cp", str(source / "to-real"), f"s3://{bucket}/one", "--no-follow-symlinks"
    )
    assert code == 0, err
    assert "one" not in stored(minio_buckets, bucket)
    code, _out, err = run(
        minio_buckets, "cp", str(source / "to-real"), f"s3://{bucket}/one", "--follow-symlinks"
    )
    assert code == 0 and stored(minio_buckets, bucket)["one"] == b"real", err


def test_a_link_loop_is_one_line_naming_its_destination(
    minio_buckets: Buckets, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "ok").write_bytes(b"ok")
    (source / "selfloop").symlink_to(source / "selfloop")
    bucket = new_bucket(minio_buckets, {})
    code, _out, err = run(minio_buckets, "cp", str(source), f"s3://{bucket}/p/", "-r")
    assert code == 1
    failed = [line for line in err.splitlines() if line.startswith("upload failed")]
    assert failed == [
        f"upload failed: {source / 'selfloop'} to s3://{bucket}/p/selfloop: LocalError:"
        " a symbolic link loop (Too many levels of symbolic links)"
    ], err
    assert stored(minio_buckets, bucket) == {"p/ok": b"ok"}


# -- temporary files -----------------------------------------------------------------------


def test_a_live_run_s_temporary_file_is_its_own_and_a_dead_one_s_is_garbage(
    tmp_path: Path,
) -> None:
    from surge import temps

    path, fd = temps.create(str(tmp_path), "name")
    assert temps.named_like(os.path.basename(path)) and temps.is_ours(path)
    assert temps.remove_stale(str(tmp_path)) == 0  # its run holds it: left alone
    assert os.path.exists(path)
    # another process's, killed outright: its lock went with it
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; from surge import temps;"
            " temps.create(sys.argv[1], 'other'); os.kill(os.getpid(), 9)",
            str(tmp_path),
        ],
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL
    (tmp_path / ".surge-user-file").write_bytes(b"not ours: no hex id")
    # named as surge names them, but no marker: a user's file (or an object's)
    (tmp_path / ".surge-0123abcd-user-file").write_bytes(b"not ours: unmarked")
    assert not temps.is_ours(str(tmp_path / ".surge-0123abcd-user-file"))
    assert len(os.listdir(tmp_path)) == 4
    assert temps.remove_stale(str(tmp_path)) == 1
    os.close(fd)  # this run's ends
    assert temps.remove_stale(str(tmp_path)) == 1
    assert sorted(os.listdir(tmp_path)) == [".surge-0123abcd-user-file", ".surge-user-file"]


def test_a_killed_download_s_files_are_removed_by_the_rerun_and_never_uploaded(
    minio_buckets: Buckets, tmp_path: Path
) -> None:
    """SIGKILL mid-download, a rerun, then a sync up of the directory: no
    temporary file is left, and none becomes an object."""
    data = {f"d{i}/obj": os.urandom(2 * MiB) for i in range(3)}
    source = new_bucket(minio_buckets, data)
    down = tmp_path / "down"
    # one request at a time, in 16 KiB parts: slow enough to be killed mid-way
    slow = ["--concurrency", "1", "--part-size", "16KiB", "--multipart-threshold", "16KiB"]
    command = ["s3", "cp", "-r", f"s3://{source}/", str(down), *slow]
    process = subprocess.Popen(
        [sys.executable, "-m", "surge.cli", *command, "--endpoint-url", minio_buckets.endpoint_url],
        env=keys_in(minio_buckets),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not [p for p in down.rglob(".surge-*")] and time.monotonic() < deadline:
        assert process.poll() is None
        time.sleep(0.005)
    process.kill()
    process.wait()
    left = [p for p in down.rglob(".surge-*")]
    assert left, "the kill left no temporary file: nothing was tested"
    code, _out, err = run(minio_buckets, "sync", f"s3://{source}/", str(down))
    assert code == 0, err
    assert tree(down) == data  # complete, and nothing else
    # a temporary file of a run still alive is not uploaded either
    from surge import temps

    _, fd = temps.create(str(down / "d0"), "half")
    try:
        destination = new_bucket(minio_buckets, {})
        code, _out, err = run(minio_buckets, "sync", str(down), f"s3://{destination}/")
        assert code == 0, err
        assert sorted(stored(minio_buckets, destination)) == sorted(data)
        code, _out, err = run(minio_buckets, "cp", "-r", str(down), f"s3://{destination}/again/")
        assert code == 0, err
        assert sorted(stored(minio_buckets, destination, "again/")) == [
            f"again/{k}" for k in sorted(data)
        ]
    finally:
        os.close(fd)


# -- sync --delete: a file and a prefix of the same name ----------------------------------


def test_sync_delete_replaces_a_file_by_a_directory_in_one_run(
    minio_buckets: Buckets, tmp_path: Path
) -> None:
    """Local ``f`` (a file), remote ``f/g``: the AWS CLI deletes ``f`` and
    downloads ``f/g`` in one run; so does surge."""
    bucket = new_bucket(minio_buckets, {"f/g": b"g", "other": b"o"})
    local = tmp_path / "local"
    local.mkdir()
    (local / "f").write_bytes(b"a file where a directory goes")
    code, out, err = run(minio_buckets, "sync", f"s3://{bucket}/", str(local), "--delete")
    assert code == 0, err
    assert tree(local) == {"f/g": b"g", "other": b"o"}
    assert f"delete: {local / 'f'}" in out
    # and without --delete the file stays, and f/g is a failure as before
    (local / "f" / "g").unlink()
    (local / "f").rmdir()
    (local / "f").write_bytes(b"kept")
    code, _out, err = run(minio_buckets, "sync", f"s3://{bucket}/", str(local))
    assert code == 1 and "f/g" in err
    assert (local / "f").read_bytes() == b"kept"
