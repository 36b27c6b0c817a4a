"""``surge s3 rm`` and :func:`surge.s3.remove`: batched DeleteObjects, keys as
bytes, per-key errors, aws-cli's lines, and Ctrl-C.

The AWS CLI (aws s3 rm) is the reference for the lines printed and the
objects left; boto3 for what is on the server; tinyproxy in front of MinIO
counts the DeleteObjects requests as they pass.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.conftest import require
from tests.http.conftest import StartProxy, start_proxy  # noqa: F401 - a fixture, used by name
from tests.s3._buckets import AWKWARD_KEYS, Buckets
from tests.s3.test_key_bytes import SHAPES

import surge.s3
from surge.s3.deletes import remove, remove_summary
from surge.s3.objects import parse_delete_errors, xml_carries

_names = itertools.count()


def new_bucket(server: Buckets, keys: list[str]) -> str:
    bucket = f"rm-{os.getpid()}-{next(_names)}"
    server.s3.create_bucket(Bucket=bucket)
    for key in keys:
        server.s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    return bucket


def stored(server: Buckets, key: str) -> bool:
    """Whether the server takes ``key`` from boto3 (MinIO refuses dot segments)."""
    probe = new_bucket(server, [])
    try:
        server.s3.put_object(Bucket=probe, Key=key, Body=b"x")
    except Exception:
        return False
    return server.boto3_keys(probe) == [key]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_one_key_of_every_shape(server: Buckets, shape: str) -> None:
    """Each key shape is deleted as given, and nothing else: its neighbours
    (the key with dot segments resolved, with slashes collapsed) stay."""
    key = SHAPES[shape].format(V="other")
    if not stored(server, key):
        pytest.skip(f"the server refuses {key!r} from boto3 too")
    neighbours = sorted({"other/planted.txt", "b", "x/y.txt", "a/b", "lead"} - {key})
    bucket = new_bucket(server, [key, *neighbours])
    results = list(remove(f"s3://{bucket}/{key}", **server.options()))
    assert [(r.destination, r.deleted, r.failure) for r in results] == [
        (f"s3://{bucket}/{key}", True, None)
    ]
    assert server.boto3_keys(bucket) == neighbours


def test_every_shape_under_a_prefix_in_one_batch(server: Buckets) -> None:
    """A recursive rm of every shape the server stores: one DeleteObjects for
    the keys XML can carry (escaped: &, <, tab, CR, C1 controls), one
    DeleteObject each for those it cannot (C0 controls)."""
    keys = [k for k in (f"p/{s.format(V='v')}" for s in SHAPES.values()) if stored(server, k)]
    keys += ["p/cr\rlf", "p/c1\x85x", "p/amp&lt;", "p/line\u2028sep"]
    keys = [k for k in keys if stored(server, k)]
    bucket = new_bucket(server, [*keys, "q/stays"])
    summary = remove_summary(f"s3://{bucket}/p/", recursive=True, **server.options())
    assert (summary.deleted, summary.failures) == (len(keys), [])
    singles = sum(not xml_carries(k) for k in keys)
    assert singles >= 1  # the table has C0 controls
    assert summary.requests == 1 + singles
    assert server.boto3_keys(bucket) == ["q/stays"]


def test_batches_of_the_batch_size_counted_at_a_proxy(
    server: Buckets,
    start_proxy: StartProxy,  # noqa: F811
) -> None:
    """25 keys, 10 a batch: 3 DeleteObjects, as tinyproxy saw them pass, and
    the keys all gone; a dry run sends none."""
    keys = [f"k/{i:03d}" for i in range(25)]
    bucket = new_bucket(server, keys)
    proxy = start_proxy("tinyproxy")
    options = server.options(proxy=proxy.url())
    dry = list(remove(f"s3://{bucket}/k", recursive=True, dryrun=True, **options))
    assert sorted(r.destination for r in dry) == [f"s3://{bucket}/{k}" for k in keys]
    assert all(r.dryrun for r in dry) and server.boto3_keys(bucket) == keys
    summary = remove_summary(f"s3://{bucket}/k", recursive=True, delete_batch=10, **options)
    assert (summary.deleted, summary.failed) == (25, 0)
    log = proxy.log_text()
    assert log.count(f"POST {server.endpoint_url}/{bucket}?delete=") == 3
    assert server.boto3_keys(bucket) == []


def test_sync_delete_goes_in_the_same_batches(
    server: Buckets,
    tmp_path: Path,
    start_proxy: StartProxy,  # noqa: F811
) -> None:
    """An upload sync's --delete: 25 extras, 10 a batch, 3 DeleteObjects at the
    proxy; the file the source has stays."""
    extras = [f"s/x{i:02d}" for i in range(25)]
    bucket = new_bucket(server, [*extras, "s/kept"])
    (tmp_path / "kept").write_bytes(b"x")
    proxy = start_proxy("tinyproxy")
    options = server.options(proxy=proxy.url(), delete_batch=10)
    summary = surge.s3.sync(str(tmp_path), f"s3://{bucket}/s/", delete=True, **options)
    assert (summary.deleted, summary.failed) == (25, 0)
    assert proxy.log_text().count(f"POST {server.endpoint_url}/{bucket}?delete=") == 3
    assert server.boto3_keys(bucket) == ["s/kept"]


def test_per_key_errors_from_the_server(minio_buckets: Buckets) -> None:
    """MinIO answers DeleteObjects with a per-key <Error> for a key it refuses
    (a dot segment, a key past 1,024 bytes) and deletes the rest of the batch:
    the refused keys are failures, the others deleted - all in one request."""
    server = minio_buckets
    keep = ["ok/1", "ok/2"]
    bucket = new_bucket(server, keep)
    long_key = "x" * 1100
    urls = [f"s3://{bucket}/{k}" for k in ("ok/1", "a/../b", long_key, "ok/2")]
    summary = remove_summary(urls, **server.options())
    assert summary.deleted == 2
    assert summary.requests == 1
    assert sorted((f.source, f.code) for f in summary.failures) == sorted(
        [
            (f"s3://{bucket}/a/../b", "XMinioInvalidObjectName"),
            (f"s3://{bucket}/{long_key}", "XMinioInvalidObjectName"),
        ]
    )
    assert server.boto3_keys(bucket) == []


def test_access_denied_on_part_of_a_prefix(minio_buckets: Buckets) -> None:
    """A bucket policy lets anyone delete under ok/ only: an anonymous rm of
    the whole bucket is one DeleteObjects whose answer denies the other keys
    one by one (AccessDenied each, as S3 answers), the rest deleted."""
    server = minio_buckets
    bucket = new_bucket(server, ["ok/1", "ok/2", "no/1", "no/2"])
    anyone = {"AWS": ["*"]}
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": anyone,
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
            },
            {
                "Effect": "Allow",
                "Principal": anyone,
                "Action": ["s3:DeleteObject"],
                "Resource": [f"arn:aws:s3:::{bucket}/ok/*"],
            },
        ],
    }
    server.s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    summary = remove_summary(
        f"s3://{bucket}/", recursive=True, endpoint_url=server.endpoint_url, no_sign_request=True
    )
    assert (summary.deleted, summary.requests) == (2, 1)
    assert sorted((f.source, f.code) for f in summary.failures) == [
        (f"s3://{bucket}/no/1", "AccessDenied"),
        (f"s3://{bucket}/no/2", "AccessDenied"),
    ]
    assert server.boto3_keys(bucket) == ["no/1", "no/2"]


def test_parse_of_a_delete_result_with_errors() -> None:
    """S3's documented DeleteResult shape, a key with entities and character
    references read back as XML reads them (not HTML's windows-1252)."""
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns="http://s3.amazonaws.com/'
        b'doc/2006-03-01/"><Deleted><Key>gone</Key></Deleted><Error><Key>a&amp;b&#x85;&#xD;'
        b"</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error></DeleteResult>"
    )
    assert [tuple(e) for e in parse_delete_errors(body)] == [
        ("a&b\x85\r", "AccessDenied", "Access Denied", None)  # no VersionId
    ]


# -- the command line, beside aws s3 rm ------------------------------------------------


def _aws() -> str:
    require("awscli")
    return str(Path(sys.executable).parent / "aws")


def _env(server: Buckets) -> dict[str, str]:
    return dict(
        os.environ,
        AWS_ACCESS_KEY_ID=server.credentials.access_key,
        AWS_SECRET_ACCESS_KEY=server.credentials.secret_key,
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=server.endpoint_url,
    )


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args",
    [
        ["--recursive", "p/", "--exclude", "*", "--include", "*.txt", "--exclude", "d*"],
        ["--recursive", "p", "--dryrun"],
        ["p/plain.txt"],
    ],
    ids=["filters", "dryrun", "one-key"],
)
def test_lines_and_objects_left_as_aws_s3_rm(minio_buckets: Buckets, args: list[str]) -> None:
    """The same command against two copies of a bucket: aws s3 rm's lines
    (sorted: both delete in parallel) and the keys left are surge's."""
    server = minio_buckets
    keys = [f"p/{k}" for k in AWKWARD_KEYS if "\t" not in k] + ["p/sub/dir.txt", "pq", "z"]
    theirs, ours = new_bucket(server, keys), new_bucket(server, keys)
    env = _env(server)

    def argv(bucket: str) -> list[str]:
        return [
            a if a.startswith("-") or a == "*" or "*" in a else f"s3://{bucket}/{a}" for a in args
        ]

    aws = _run([_aws(), "s3", "rm", *argv(theirs)], env)
    surge = _run([sys.executable, "-m", "surge", "s3", "rm", *argv(ours)], env)
    assert (surge.returncode, aws.returncode) == (0, 0), surge.stderr + aws.stderr
    assert sorted(surge.stdout.replace(ours, "B").splitlines()) == sorted(
        aws.stdout.replace(theirs, "B").splitlines()
    )
    assert server.boto3_keys(ours) == server.boto3_keys(theirs)


def test_a_failed_key_is_a_line_and_exit_1(minio_buckets: Buckets) -> None:
    server = minio_buckets
    bucket = new_bucket(server, ["ok"])
    done = _run(
        [sys.executable, "-m", "surge", "s3", "rm", f"s3://{bucket}/ok", f"s3://{bucket}/a/../b"],
        _env(server),
    )
    assert done.returncode == 1
    assert done.stdout == f"delete: s3://{bucket}/ok\n"
    assert f"delete failed: s3://{bucket}/a/../b: XMinioInvalidObjectName" in done.stderr
    quiet = _run(
        [sys.executable, "-m", "surge", "s3", "rm", f"s3://{bucket}/a/../b", "--only-show-errors"],
        _env(server),
    )
    assert (quiet.returncode, quiet.stdout) == (1, "")
    assert "delete failed: " in quiet.stderr


def interrupted(argv: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """``argv`` run, SIGINT once its first line is out: its exit status and
    every line it printed."""
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        printed = [process.stdout.readline()]
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    return process.returncode, printed + rest.splitlines(keepends=True)


def test_ctrl_c_deletes_no_key_it_did_not_print(minio_buckets: Buckets) -> None:
    """SIGINT once the first lines are out: exit 130, and the keys gone from
    the server are exactly the keys printed."""
    server = minio_buckets
    keys = [f"k/{i:03d}" for i in range(150)]
    bucket = new_bucket(server, keys)
    argv = [sys.executable, "-m", "surge", "s3", "rm", "-r", f"s3://{bucket}/k/"]
    argv += ["--delete-batch", "1", "--concurrency", "1"]
    status, printed = interrupted(argv, _env(server))
    assert status == 130
    left = set(server.boto3_keys(bucket))
    assert left, "the rm ended before the signal: nothing was interrupted"
    gone = sorted(f"delete: s3://{bucket}/{k}\n" for k in set(keys) - left)
    assert sorted(printed) == gone


def _unconfirmed_keys(stderr: str, bucket: str) -> set[str]:
    """The keys of ``delete failed: s3://B/KEY: Unconfirmed`` lines (and of a
    move's ``move failed: s3://B/KEY to s3://...: Unconfirmed``)."""
    head = f"failed: s3://{bucket}/"
    return {
        line.split(head, 1)[1].split(": Unconfirmed", 1)[0].split(" to s3://", 1)[0]
        for line in stderr.splitlines()
        if head in line and ": Unconfirmed" in line
    }


@pytest.mark.parametrize("signals", ["twice", "once"])
@pytest.mark.parametrize("command", ["rm", "mv"])
def test_an_exit_that_cannot_wait_still_tells_each_delete_in_flight(
    minio_buckets: Buckets, command: str, signals: str
) -> None:
    """The server has deleted a batch and its answer is held back (a proxy).
    Interrupted twice, the run exits without waiting: each key of the batches
    in flight is told ``Unconfirmed``, none is gone without a line.  Once, the
    answers (1 s late, within the bound) are waited for: each key printed."""
    from tests.s3.test_upload_faults import fault_proxy

    server = minio_buckets
    keys = [f"k/{i:03d}" for i in range(40)]
    bucket = new_bucket(server, keys)
    target = new_bucket(server, [])
    held = threading.Semaphore(0)
    release = threading.Event()

    def hold_delete_answers(
        method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[list[tuple[str, str]], bytes]:
        if method == "POST" and "delete" in path.split("?", 1)[-1]:
            held.release()  # MinIO has deleted the batch: its answer waits
            release.wait(60 if signals == "twice" else 1)
        return headers, body

    upstream = server.endpoint_url.split("//", 1)[1]
    with fault_proxy(upstream, lambda method, path: None, hold_delete_answers) as url:
        env = dict(_env(server), AWS_ENDPOINT_URL=url)
        argv = [sys.executable, "-m", "surge", "s3", command, "-r", f"s3://{bucket}/k/"]
        if command == "mv":
            argv.append(f"s3://{target}/k/")
        argv += ["--delete-batch", "10", "--concurrency", "4"]
        process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert held.acquire(timeout=60), "no DeleteObjects reached the server"
            process.send_signal(signal.SIGINT)
            if signals == "twice":
                time.sleep(0.5)  # the first signal's cleanup waits for the answers held
                process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
        finally:
            release.set()
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130, err
    assert ("interrupted again: stopping now" in err) == (signals == "twice"), err
    gone = set(keys) - set(server.boto3_keys(bucket))
    assert gone, "nothing was deleted: the case did not happen"
    verb = "move" if command == "mv" else "delete"
    printed = {
        line.split(f"{verb}: s3://{bucket}/", 1)[1].split(" to s3://", 1)[0]
        for line in out.splitlines()
        if line.startswith(f"{verb}: s3://{bucket}/")
    }
    unconfirmed = _unconfirmed_keys(err, bucket)
    assert gone <= printed | unconfirmed, sorted(gone - printed - unconfirmed)
    assert not printed & unconfirmed
    assert printed <= gone
    if signals == "once":
        assert not unconfirmed, err
