"""``surge s3 mv`` and :func:`surge.s3.move`: a copy, then the source deleted
only once its copy is confirmed - local to S3, S3 to local, S3 to S3.  aws s3
mv is the reference for the lines and the objects left; faults: a delete
that fails after the copy, a copy that fails, Ctrl-C mid-way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.s3._buckets import Buckets
from tests.s3.deviant import deviant_server
from tests.s3.test_rm import _aws, _env, interrupted, new_bucket

import surge.s3
from surge.s3 import Credentials
from surge.s3.moves import move


def test_there_and_back_again(server: Buckets, tmp_path: Path) -> None:
    """S3 to S3, S3 to files, files to S3: each source gone once moved, each
    copy whole, one moved result a source; a dry run moves nothing."""
    keys = ["p/a", "p/b c", "p/d/e+f"]
    source, target = new_bucket(server, keys), new_bucket(server, [])
    options = server.options()
    results: list[Any] = []
    dry = move(f"s3://{source}/p/", f"s3://{target}/q/", recursive=True, dryrun=True, **options)
    assert (dry.objects, dry.deleted) == (3, 0) and server.boto3_keys(source) == keys
    summary = move(
        f"s3://{source}/p/",
        f"s3://{target}/q/",
        recursive=True,
        on_result=results.append,
        **options,
    )
    assert (summary.objects, summary.deleted, summary.failures) == (3, 3, [])
    assert sorted((r.source, r.destination, r.moved) for r in results) == [
        (f"s3://{source}/{k}", f"s3://{target}/q/{k[2:]}", True) for k in keys
    ]
    assert server.boto3_keys(source) == [] and len(server.boto3_keys(target)) == 3
    down = move(f"s3://{target}/q/", str(tmp_path / "here"), recursive=True, **options)
    assert (down.objects, down.deleted, down.failures) == (3, 3, [])
    assert server.boto3_keys(target) == []
    assert (tmp_path / "here" / "d" / "e+f").read_bytes() == b"x"
    up = move(str(tmp_path / "here"), f"s3://{source}/back/", recursive=True, **options)
    assert (up.objects, up.failures) == (3, [])
    assert sorted(p.name for p in (tmp_path / "here").rglob("*") if p.is_file()) == []
    assert server.boto3_keys(source) == ["back/a", "back/b c", "back/d/e+f"]


def test_a_failed_delete_after_a_download_leaves_the_source(tmp_path: Path) -> None:
    """The copy is made (downloaded, verified, in place), the source's delete
    refused (this server answers DeleteObjects 501): a failure naming it,
    and the source still there."""
    with deviant_server([]) as server:
        options: dict[str, Any] = {
            "endpoint_url": server.endpoint_url,
            "credentials": Credentials("k", "s"),
            "retries": 0,
        }
        assert surge.s3.upload(__file__, "s3://throttle/k", **options).failures == []
        summary = move("s3://throttle/k", str(tmp_path / "k"), **options)
        assert summary.objects == 1 and summary.deleted == 0
        assert [(f.code, f.source) for f in summary.failures] == [("HTTP501", "s3://throttle/k")]
        assert "the source could not be deleted" in summary.failures[0].message
        assert (tmp_path / "k").read_bytes() == Path(__file__).read_bytes()
        assert "throttle/k" in server.stored


def test_a_failed_copy_deletes_nothing(server: Buckets) -> None:
    source = new_bucket(server, ["k"])
    with pytest.raises(surge.s3.S3Error, match="NoSuchBucket"):
        move(f"s3://{source}/k", "s3://no-such-bucket-here/k", **server.options())
    assert server.boto3_keys(source) == ["k"]


def test_lines_and_objects_as_aws_s3_mv(minio_buckets: Buckets) -> None:
    server = minio_buckets
    keys = ["p/a.txt", "p/b c.txt", "p/sub/x.gz", "p/sub/y.txt"]
    theirs = (new_bucket(server, keys), new_bucket(server, []))
    ours = (new_bucket(server, keys), new_bucket(server, []))
    env = _env(server)

    def run(tool: list[str], buckets: tuple[str, str]) -> list[str]:
        args = ["s3", "mv", "--recursive", f"s3://{buckets[0]}/p/", f"s3://{buckets[1]}/q/"]
        done = subprocess.run(
            [*tool, *args, "--exclude", "*.gz"], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        text = done.stdout.replace("\r", "\n").replace(buckets[0], "S").replace(buckets[1], "D")
        return sorted(line.rstrip() for line in text.splitlines() if line.startswith("move: "))

    assert run([sys.executable, "-m", "surge"], ours) == run([_aws()], theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        assert server.boto3_keys(mine) == server.boto3_keys(reference)


def test_ctrl_c_leaves_every_source_or_its_copy(minio_buckets: Buckets) -> None:
    """SIGINT after the first line: exit 130; every key is in the source or
    the destination (none lost), each one printed is gone from the source
    and in the destination, and each one gone from the source was printed."""
    server = minio_buckets
    keys = [f"k/{i:03d}" for i in range(120)]
    source, target = new_bucket(server, keys), new_bucket(server, [])
    argv = [sys.executable, "-m", "surge", "s3", "mv", "-r", f"s3://{source}/k/"]
    argv += [f"s3://{target}/k/", "--concurrency", "1", "--delete-batch", "1"]
    status, printed = interrupted(argv, _env(server))
    assert status == 130
    left, copied = set(server.boto3_keys(source)), set(server.boto3_keys(target))
    assert left, "the mv ended before the signal: nothing was interrupted"
    assert left | copied == set(keys)
    moved = {line.split(" to ")[0].removeprefix(f"move: s3://{source}/") for line in printed}
    assert moved == set(keys) - left
    assert moved <= copied
