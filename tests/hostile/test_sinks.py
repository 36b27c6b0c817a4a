"""Hostile round, class 2 (issue 32): every file surge writes and every input it
reads follows one contract - a write that fails is one line naming the file and
exit status 2 (no traceback), what was written is kept, a closed descriptor is a
usage error, and nothing of the user's is overwritten.  Each test is a case the
issue did not list; each fails today.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from tests.conftest import RESOLVE
from tests.hostile.conftest import SURGE, run

from surge.sim import SimInfo


def one_clean_line(stderr: bytes) -> None:
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text, text
    assert len(text.strip().splitlines()) == 1, text


# -- surge s3's outputs ------------------------------------------------------------------


@pytest.fixture
def listed(bucket: Callable[[Mapping[str, bytes]], str]) -> str:
    return bucket({f"k/{i:04d}": b"x" for i in range(300)})


@pytest.mark.parametrize(
    "extra", [["--recursive"], ["--recursive", "--json"], []], ids=["text", "json", "one-level"]
)
def test_s3_ls_to_a_full_disk_is_one_line_and_exit_2(
    listed: str, s3_env: dict[str, str], extra: list[str]
) -> None:
    """``surge s3 ls s3://b/ > /dev/full``.  Expected (the sink contract, as
    ``surge fetch`` and ``surge trace`` do it): one line naming stdout and ENOSPC,
    exit 2.  Actual: an ``OSError: [Errno 28]`` traceback from
    ``s3/cli.py write`` and exit 1."""
    with open("/dev/full", "wb") as full:
        done = run(["s3", "ls", f"s3://{listed}/", *extra], env=s3_env, stdout=full)
    assert done.returncode == 2
    one_clean_line(done.stderr)


def test_s3_ls_of_the_buckets_to_a_full_disk_is_one_line_and_exit_2(
    listed: str, s3_env: dict[str, str]
) -> None:
    """``surge s3 ls > /dev/full`` (the bucket list): the same, from
    ``_list_buckets``' ``click.echo``."""
    with open("/dev/full", "wb") as full:
        done = run(["s3", "ls"], env=s3_env, stdout=full)
    assert done.returncode == 2
    one_clean_line(done.stderr)


def test_s3_ls_with_stdout_closed_is_a_usage_error(listed: str, s3_env: dict[str, str]) -> None:
    """``surge s3 ls s3://b/ >&-``.  Expected: a usage error, one line, exit 2 (as
    ``surge fetch`` does).  Actual: ``AttributeError: 'NoneType' object has no
    attribute 'write'`` traceback, exit 1."""
    done = run(["s3", "ls", f"s3://{listed}/", "--recursive"], env=s3_env, stdout=None, close=(1,))
    assert done.returncode == 2
    one_clean_line(done.stderr)


def test_s3_cp_json_summary_to_a_full_disk_is_one_line_and_keeps_the_files(
    bucket: Callable[[Mapping[str, bytes]], str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    """``surge s3 cp s3://b/ d/ -r --json-summary > /dev/full``.  Expected: the
    files downloaded are kept, one line saying stdout is full, exit 2.  Actual:
    the files are there but the run ends in an ``OSError`` traceback, exit 1."""
    name = bucket({f"f{i}": b"data %d" % i for i in range(5)})
    with open("/dev/full", "wb") as full:
        done = run(
            ["s3", "cp", f"s3://{name}/", str(tmp_path / "d"), "-r", "--json-summary"],
            env=s3_env,
            stdout=full,
        )
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [f"f{i}" for i in range(5)]
    assert done.returncode == 2
    one_clean_line(done.stderr)


def test_s3_ls_into_a_pipe_closed_early_is_one_line_and_exit_2(
    listed: str, s3_env: dict[str, str]
) -> None:
    """``surge s3 ls s3://b/ --recursive | head -1``.  The contract lists EPIPE
    among the write errors that are one line and exit 2 (``surge fetch`` and
    ``surge trace`` say "Broken pipe" and exit 2).  Actual: surge s3 ls
    exits 141 (a SIGPIPE death's status, as a shell shows it) and says nothing,
    so a script cannot tell a closed reader from a crash."""
    proc = subprocess.Popen(
        [*SURGE, "s3", "ls", f"s3://{listed}/", "--recursive"],
        env=s3_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    stderr = proc.stderr.read()
    code = proc.wait(60)
    assert code == 2, f"exit status {code}"
    one_clean_line(stderr)


# -- a closed stderr ---------------------------------------------------------------------


def test_fetch_with_stderr_closed_still_runs(sim: SimInfo, tmp_path: Path) -> None:
    """``surge fetch urls -o out.jsonl 2>&-`` (cron, a daemon, a supervisor that
    closes stderr).  Expected: the run is done - one record per input in
    out.jsonl, exit 0 (stderr is only for progress and the summary) - or, if
    surge refuses, exit 2.  Actual: exit 1, out.jsonl created empty, nothing
    fetched: ``sys.stderr.isatty()`` on None (AttributeError), unseen since
    stderr is closed."""
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(f"http://status-200.x{i}.sim:{sim.http_port}/\n" for i in range(5)))
    out = tmp_path / "out.jsonl"
    done = run(
        ["fetch", str(urls), "-o", str(out), "--resolve", RESOLVE, "--max-time", "5"],
        close=(2,),
    )
    assert done.returncode in (0, 2)
    if done.returncode == 0:
        assert len(out.read_text().splitlines()) == 5


@pytest.mark.parametrize("command", ["cp", "sync", "ls"])
def test_s3_with_stderr_closed_still_runs(
    bucket: Callable[[Mapping[str, bytes]], str],
    s3_env: dict[str, str],
    tmp_path: Path,
    command: str,
) -> None:
    """``surge s3 cp/sync/ls ... 2>&-``.  Expected: the transfer (or listing) is
    done, exit 0.  Actual: exit 1 and nothing downloaded or listed."""
    name = bucket({f"f{i}": b"data" for i in range(3)})
    if command == "ls":
        args = ["s3", "ls", f"s3://{name}/"]
    else:
        args = ["s3", command, f"s3://{name}/", str(tmp_path / "d")]
        args += ["-r"] if command == "cp" else []
    done = run(args, env=s3_env, close=(2,))
    assert done.returncode == 0
    if command == "ls":
        assert len(done.stdout.splitlines()) == 3
    else:
        assert len(list((tmp_path / "d").iterdir())) == 3


# -- a WARC's rotation -------------------------------------------------------------------


def test_warc_rotation_never_overwrites_the_input(sim: SimInfo, tmp_path: Path) -> None:
    """``--warc w.warc.gz --warc-max-size 1K`` rotates to ``w-00001.warc.gz``,
    ``w-00002.warc.gz``...  The run refuses an output named like the input
    (``--warc in.txt``: "is the input file"), and refuses ``-o`` on a rotated
    name when it gets there.  But an input named ``w-00001.warc.gz`` (a URL list
    kept beside an earlier crawl's parts) is overwritten by the first rotation:
    the input is destroyed, exit 0.  Expected: refused up front (exit 2, input
    unchanged), or the rotation skips the name."""
    urls = tmp_path / "w-00001.warc.gz"
    urls.write_text(
        "".join(f"http://big-4k.sim:{sim.http_port}/{i}\n" for i in range(20)), encoding="ascii"
    )
    before = hashlib.sha256(urls.read_bytes()).hexdigest()
    done = run(
        [
            "fetch",
            urls.name,
            "--warc",
            "w.warc.gz",
            "--warc-max-size",
            "1K",
            "--resolve",
            RESOLVE,
            "-o",
            "out.jsonl",
            "-q",
        ],
        cwd=str(tmp_path),
    )
    assert hashlib.sha256(urls.read_bytes()).hexdigest() == before, (
        f"the input was overwritten (exit {done.returncode})"
    )
