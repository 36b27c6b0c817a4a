"""Hostile round, class 4 (issue 34): surge s3 never trips on a valid object,
and its own temporary files are told apart from the user's.  Each test is a
case the issue did not list; each fails today.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.hostile.conftest import run

#: A valid S3 key - and a valid file name - shaped like surge's temporary files
#: (".surge-" + 8 hex digits + "-" + the final name, as a killed download leaves).
LOOKALIKE = ".surge-0123abcd-report.csv"


def test_a_downloaded_object_named_like_a_temporary_file_is_kept_by_the_next_run(
    bucket: Callable[[Mapping[str, bytes]], str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    """An object ``.surge-0123abcd-report.csv`` (any tool may have uploaded it)
    is downloaded by ``surge s3 cp -r``, exit 0.  The next ``surge s3 cp`` of
    another object into the same directory deletes it, taking it for a
    temporary file a killed run left: the user's downloaded file is gone, exit
    0, nothing said.  Expected: only surge's own temporaries (the lock tells
    them, or a name no object can have) are removed."""
    name = bucket({LOOKALIKE: b"important data", "other.txt": b"o"})
    dest = tmp_path / "d"
    first = run(["s3", "cp", f"s3://{name}/", str(dest), "-r"], env=s3_env)
    assert first.returncode == 0
    assert (dest / LOOKALIKE).read_bytes() == b"important data"
    second = run(["s3", "cp", f"s3://{name}/other.txt", str(dest) + "/"], env=s3_env)
    assert second.returncode == 0
    assert (dest / LOOKALIKE).exists(), "the next run deleted a file it had downloaded"


def test_a_synced_object_named_like_a_temporary_file_is_unchanged_the_second_time(
    bucket: Callable[[Mapping[str, bytes]], str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    """``surge s3 sync s3://b/ d/`` twice: the second run must find everything
    unchanged.  Actual: the object ``.surge-0123abcd-report.csv`` is downloaded
    again on every run (each run removes it first as a stale temporary)."""
    name = bucket({LOOKALIKE: b"important data", "other.txt": b"o"})
    dest = str(tmp_path / "d")
    assert run(["s3", "sync", f"s3://{name}/", dest], env=s3_env).returncode == 0
    again = run(["s3", "sync", f"s3://{name}/", dest], env=s3_env)
    assert again.returncode == 0
    assert b"download:" not in again.stdout, again.stdout.decode()


def test_a_users_file_named_like_a_temporary_file_is_uploaded(
    bucket: Callable[[Mapping[str, bytes]], str],
    s3_env: dict[str, str],
    s3: Any,
    tmp_path: Path,
) -> None:
    """A backup: ``surge s3 sync dir/ s3://b/`` of a directory holding the user's
    own ``.surge-0123abcd-report.csv`` (no surge run made it; nothing holds it
    locked).  Expected: uploaded like every other file, or at least a warning
    and a count of what was left out.  Actual: silently skipped, exit 0 - the
    backup lacks the file and nothing says so."""
    source = tmp_path / "src"
    source.mkdir()
    (source / LOOKALIKE).write_bytes(b"important data")
    (source / "other.txt").write_bytes(b"o")
    name = bucket({})
    done = run(["s3", "sync", str(source), f"s3://{name}/"], env=s3_env)
    assert done.returncode == 0
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=name).get("Contents", [])}
    assert keys == {LOOKALIKE, "other.txt"}, f"{keys}; stderr: {done.stderr.decode()}"


def test_s3_ls_output_is_one_line_per_key_and_unambiguous(
    bucket: Callable[[Mapping[str, bytes]], str], s3_env: dict[str, str]
) -> None:
    """Keys are printed "escaped as ``ls -b`` escapes them" (README), so that the
    output is one line per object whatever the key.  ``ls -b`` writes a
    backslash as ``\\\\``; surge writes it as is, so the key ``a\\tb`` (a
    backslash and a t) and the key ``a<TAB>b`` print the same line - a script
    reading the listing cannot tell them apart (and copies one twice).
    Expected: two different lines."""
    name = bucket({"a\\tb": b"backslash-t", "a\tb": b"tab"})
    done = run(["s3", "ls", f"s3://{name}/"], env=s3_env)
    assert done.returncode == 0
    lines = [line.split(maxsplit=3)[-1] for line in done.stdout.decode().splitlines()]
    assert len(lines) == 2
    assert lines[0] != lines[1], lines


def test_cp_to_dash_writes_stdout_as_the_aws_cli_does(
    bucket: Callable[[Mapping[str, bytes]], str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    """``surge s3 cp s3://b/k -``: in the AWS CLI's argument forms (which the
    README says surge takes) ``-`` is stdout.  Expected: the object's bytes on
    stdout, or a usage error (exit 2) if surge does not stream.  Actual: a file
    named ``-`` is written in the current directory, "download: ... to -" is
    printed on stdout, exit 0."""
    name = bucket({"k": b"object body"})
    done = run(["s3", "cp", f"s3://{name}/k", "-"], env=s3_env, cwd=str(tmp_path))
    assert not (tmp_path / "-").exists(), "wrote a file named '-'"
    assert (done.returncode, done.stdout) in ((0, b"object body"), (2, b""))


def test_cp_from_dash_never_uploads_a_stale_file_instead_of_stdin(
    bucket: Callable[[Mapping[str, bytes]], str],
    s3_env: dict[str, str],
    s3: Any,
    tmp_path: Path,
) -> None:
    """``producer | surge s3 cp - s3://b/backup``: ``-`` is stdin in the AWS CLI.
    surge reads a file named ``-`` instead: with none there the upload fails
    ("No such file or directory: -"); with one there (an earlier ``cp s3://... -``
    left it) its stale bytes are stored as the backup, exit 0, stdin ignored.
    Expected: stdin's bytes stored, or a usage error (exit 2) and nothing
    stored."""
    (tmp_path / "-").write_bytes(b"stale bytes of an earlier run")
    name = bucket({})
    done = run(
        ["s3", "cp", "-", f"s3://{name}/backup"],
        env=s3_env,
        cwd=str(tmp_path),
        stdin=b"fresh data from the pipe",
    )
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=name).get("Contents", [])}
    if done.returncode == 2:
        assert keys == set()
        return
    assert done.returncode == 0
    stored = s3.get_object(Bucket=name, Key="backup")["Body"].read()
    assert stored == b"fresh data from the pipe"
