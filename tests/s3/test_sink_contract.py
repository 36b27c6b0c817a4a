"""The sink contract (surge.sinks) for every write ``surge s3`` makes, as a
table: each command that writes stdout, against each way stdout fails - a
full disk, a closed descriptor, a reader gone - is one line naming stdout
and the error, exit status 2, no traceback; what was downloaded before stays
whole and no temporary file is left.  And the writes to local files: a
device or FIFO is never replaced by a file (``cp s3://b/k /dev/null`` as
root would replace the device), a full disk ends the run with one line;
``-`` is stdout and stdin, as in the AWS CLI.  Against MinIO, through the
command line in a child process.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import memory_device
from tests.hostile.conftest import SURGE, bucket, run, s3_env

__all__ = ["bucket", "s3_env"]  # the hostile round's fixtures, for this file too

MiB = 1024 * 1024
OBJECTS = {f"d/f{i}": b"data %d" % i for i in range(40)}


def one_clean_line(stderr: bytes) -> str:
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text, text
    assert len(text.strip().splitlines()) == 1, text
    return text


#: Each command that writes stdout (``{b}``: the bucket, ``{d}``: a directory).
WRITERS = {
    "ls": ["ls", "s3://{b}/", "--recursive"],
    "ls-json": ["ls", "s3://{b}/", "--recursive", "--json"],
    "ls-summarize": ["ls", "s3://{b}/", "--recursive", "--summarize"],
    "ls-versions": ["ls", "s3://{b}/", "--all-versions"],
    "ls-buckets": ["ls"],
    "cp-r": ["cp", "-r", "s3://{b}/", "{d}"],
    "cp-dryrun": ["cp", "-r", "s3://{b}/", "{d}", "--dryrun"],
    "cp-json-summary": ["cp", "-r", "s3://{b}/", "{d}", "--json-summary"],
    "sync": ["sync", "s3://{b}/", "{d}"],
    "cp-to-stdout": ["cp", "s3://{b}/d/f7", "-"],
    # another name of stdout (as /dev/stdout is: names_stdout's table test
    # covers that one; no test here names a path of the machine's /dev)
    "cp-to-fd-1": ["cp", "s3://{b}/d/f7", "/proc/self/fd/1"],
}


def _args(name: str, bucket_name: str, directory: Path) -> list[str]:
    return [a.format(b=bucket_name, d=directory) for a in ["s3", *WRITERS[name]]]


def _downloads_whole(directory: Path) -> None:
    """Whatever is in the directory is a whole object; no temporary file."""
    if not directory.exists():
        return
    for path in directory.rglob("*"):
        assert not path.name.startswith(".surge-"), path
        if path.is_file():
            key = path.relative_to(directory).as_posix()
            assert path.read_bytes() == OBJECTS[key], key


@pytest.fixture
def listed(bucket: Callable[[Mapping[str, bytes]], str]) -> str:
    return bucket(OBJECTS)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_stdout_full_is_one_line_and_exit_2(
    name: str, listed: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    directory = tmp_path / "d"
    with open("/dev/full", "wb") as full:
        done = run(_args(name, listed, directory), env=s3_env, stdout=full)
    assert done.returncode == 2, done.stderr.decode()
    assert "No space left on device" in one_clean_line(done.stderr)
    _downloads_whole(directory)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_stdout_closed_is_one_line_and_exit_2(
    name: str, listed: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """A closed stdout is a usage error before anything is done."""
    directory = tmp_path / "d"
    done = run(_args(name, listed, directory), env=s3_env, stdout=None, close=(1,))
    assert done.returncode == 2, done.stderr.decode()
    assert "stdout" in one_clean_line(done.stderr)
    assert not directory.exists() or not list(directory.rglob("*"))


@pytest.mark.parametrize("name", ["ls", "cp-r", "sync", "cp-to-stdout"])
def test_stdout_s_reader_gone_is_one_line_and_exit_2(
    name: str, listed: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """``| head``: EPIPE is one line and exit 2, as ``surge fetch`` says it."""
    directory = tmp_path / "d"
    process = subprocess.Popen(
        [*SURGE, *_args(name, listed, directory)],
        env=s3_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(60) == 2, stderr.decode()
    assert "Broken pipe" in one_clean_line(stderr)
    _downloads_whole(directory)


def test_quiet_needs_no_stdout(listed: str, s3_env: dict[str, str], tmp_path: Path) -> None:
    """``cp -q`` writes nothing to stdout: a closed one does not stop it."""
    directory = tmp_path / "d"
    done = run(
        ["s3", "cp", "-r", f"s3://{listed}/", str(directory), "-q"],
        env=s3_env,
        stdout=None,
        close=(1,),
    )
    assert done.returncode == 0, done.stderr.decode()
    assert len(list(directory.rglob("f*"))) == len(OBJECTS)


def test_stderr_full_is_no_error_of_the_run(
    listed: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """Progress and summaries go to stderr; a full one loses them, not the run."""
    directory = tmp_path / "d"
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [*SURGE, "s3", "sync", f"s3://{listed}/", str(directory), "--no-progress"],
            env=s3_env,
            stdout=subprocess.PIPE,
            stderr=full,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == len(OBJECTS)
    _downloads_whole(directory)


# -- local files ---------------------------------------------------------------------------


def test_a_device_is_written_in_place_never_replaced(
    listed: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """``cp s3://b/k /dev/null``: the object goes into the device (as root the
    old code renamed a regular file over the device); a full one is one line."""
    devices = tmp_path / "dev"
    devices.mkdir()
    null = memory_device(devices, "null")
    before = os.stat(null)
    done = run(["s3", "cp", f"s3://{listed}/d/f1", str(null)], env=s3_env)
    assert done.returncode == 0, done.stderr.decode()
    after = os.stat(null)
    assert stat.S_ISCHR(after.st_mode)
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert sorted(os.listdir(devices)) == ["null"]
    full = memory_device(devices, "full")
    done = run(["s3", "cp", f"s3://{listed}/d/f1", str(full)], env=s3_env)
    assert done.returncode == 2
    assert str(full) in one_clean_line(done.stderr)
    assert stat.S_ISCHR(os.stat(full).st_mode)
    assert sorted(os.listdir(devices)) == ["full", "null"]


def test_a_fifo_destination_is_streamed_into(
    listed: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """``cp s3://b/k fifo``: written into the FIFO (its reader gets the
    object), which stays a FIFO.  The reader never blocks (a surge that
    replaced the FIFO instead would leave a blocking open waiting for ever):
    it polls, for 60 s at most."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    got = bytearray()
    try:
        process = subprocess.Popen(
            [*SURGE, "s3", "cp", f"s3://{listed}/d/f3", str(fifo)],
            env=s3_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            select.select([reader], [], [], 0.1)
            try:
                chunk = os.read(reader, 1 << 16)
            except BlockingIOError:
                continue
            if chunk:
                got += chunk
            elif process.poll() is not None:
                break  # no writer and none to come: all read
            else:
                time.sleep(0.05)  # no writer yet: the end of nothing
    finally:
        os.close(reader)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    assert got == OBJECTS["d/f3"]
    assert fifo.is_fifo()


def test_a_fifo_in_a_recursive_download_is_skipped(
    listed: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """A FIFO where an object's file would go, in ``cp -r`` or ``sync``: skipped
    with a warning (as an upload skips one), never opened (no reader: a hang),
    never replaced; the others are downloaded."""
    directory = tmp_path / "d"
    (directory / "d").mkdir(parents=True)
    os.mkfifo(directory / "d" / "f5")
    for command in (["cp", "-r"], ["sync"]):
        done = run(["s3", *command, f"s3://{listed}/", str(directory)], env=s3_env, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        assert "not a regular file (a FIFO)" in done.stderr.decode()
        assert (directory / "d" / "f5").is_fifo()
        assert len(list(directory.rglob("f*"))) == len(OBJECTS)


def test_a_full_disk_ends_the_download_with_one_line(
    bucket: Callable[[Mapping[str, bytes]], str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    """A file system that is full fails every object left: one line naming
    the file and the error, exit 2 - not a LocalError line per object; no
    temporary file, what was complete stays.  (RLIMIT_FSIZE stands for it
    here: EFBIG, one of the errors that end a run.)"""
    big = {f"b{i}": os.urandom(MiB // 2) for i in range(6)}
    name = bucket(big)
    directory = tmp_path / "d"
    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))"
    done = subprocess.run(
        [
            SURGE[0],
            "-c",
            f"{limit}; import sys; from surge.cli import main; sys.argv[0] = 'surge'; main()",
            "s3",
            "cp",
            "-r",
            f"s3://{name}/",
            str(directory),
            "--concurrency",
            "2",
        ],
        env=s3_env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    text = done.stderr.decode()
    assert done.returncode == 2, text
    assert "File too large" in one_clean_line(done.stderr)
    assert "LocalError" not in text
    assert not list(directory.rglob(".surge-*"))
    for path in directory.rglob("b*"):
        assert path.read_bytes() == big[path.name]


# -- "-": stdin and stdout -----------------------------------------------------------------


def test_stdin_is_uploaded_in_parts(
    bucket: Callable[[Mapping[str, bytes]], str], s3_env: dict[str, str], s3: Any
) -> None:
    """``producer | surge s3 cp - s3://b/k``, a stream longer than the
    threshold: a multipart upload of its parts as they come; the object is
    the stream, no multipart upload is left."""
    name = bucket({})
    data = os.urandom(12 * MiB + 3)
    done = run(
        ["s3", "cp", "-", f"s3://{name}/stream", "--part-size", "5MiB"],
        env=s3_env,
        stdin=data,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert s3.get_object(Bucket=name, Key="stream")["Body"].read() == data
    assert not s3.list_multipart_uploads(Bucket=name).get("Uploads")
    back = run(["s3", "cp", f"s3://{name}/stream", "-"], env=s3_env)
    assert back.returncode == 0 and back.stdout == data


@pytest.mark.parametrize(
    ("args", "close"),
    [
        (["cp", "-", "s3://{b}/k"], (0,)),  # stdin closed
        (["cp", "-", "s3://{b}/"], ()),  # no key to name the object
        (["cp", "-r", "-", "s3://{b}/k"], ()),
        (["sync", "-", "s3://{b}/k"], ()),
        (["cp", "-r", "s3://{b}/", "-"], ()),
        (["cp", "s3://{b}/k", "-", "--json-summary"], ()),  # both stdout
    ],
    ids=["stdin-closed", "no-key", "recursive-stdin", "sync-stdin", "recursive-stdout", "json"],
)
def test_dash_misused_is_a_usage_error(
    bucket: Callable[[Mapping[str, bytes]], str],
    s3_env: dict[str, str],
    s3: Any,
    tmp_path: Path,
    args: list[str],
    close: tuple[int, ...],
) -> None:
    name = bucket({"k": b"k"})
    done = run(
        ["s3", *(a.format(b=name) for a in args)],
        env=s3_env,
        close=close,
        cwd=str(tmp_path),
        stdin=None if close else b"",
    )
    assert done.returncode == 2, done.stderr.decode()
    one_clean_line(done.stderr)
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=name)["Contents"]] == ["k"]
    assert os.listdir(tmp_path) == []


def test_errno_values_that_end_a_run() -> None:
    """The one list of write errors no other file of the run would escape."""
    from surge.sinks import ENDS_RUN

    assert {errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EPIPE, errno.EBADF} <= ENDS_RUN
    assert not {errno.EACCES, errno.EISDIR, errno.ENOENT, errno.EINVAL} & ENDS_RUN
