"""Copies between buckets on two endpoints (``surge s3 cp|sync s3://a/...
s3://b/... --source-endpoint-url ...``, :func:`surge.s3.copy` with
``source_endpoint_url``): no server can copy, so the bytes go through this
process - ranged GETs of the source pinned to its ETag, PutObject or a
multipart upload at the destination.  MinIO and moto are the two ends, both
ways; boto3 reads back what each holds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from tests.s3._buckets import Buckets
from tests.s3.test_rm import new_bucket, stored
from tests.s3.test_rm_versions import HOSTILE
from tests.s3.test_upload_faults import fault_proxy

import surge.s3
from surge.s3.copies import copy

MiB = 1024 * 1024
SURGE_S3 = [sys.executable, "-m", "surge.cli", "s3"]


@pytest.fixture(params=["minio-to-moto", "moto-to-minio"])
def ends(request: pytest.FixtureRequest) -> tuple[Buckets, Buckets]:
    """(source, destination): MinIO and moto, each way."""
    minio: Buckets = request.getfixturevalue("minio_buckets")
    moto: Buckets = request.getfixturevalue("moto_s3")
    return (minio, moto) if request.param == "minio-to-moto" else (moto, minio)


def _options(source: Buckets, destination: Buckets, **kwargs: Any) -> dict[str, Any]:
    return {
        **destination.options(),
        "source_endpoint_url": source.endpoint_url,
        "source_credentials": source.credentials,
        **kwargs,
    }


def _held(server: Buckets, bucket: str) -> dict[str, tuple[bytes, dict[str, Any]]]:
    """Every object: key -> (body, its metadata as boto3 reads it)."""
    out = {}
    for key in server.boto3_keys(bucket):
        got = server.s3.get_object(Bucket=bucket, Key=key)
        metadata = {
            name: got.get(name)
            for name in ("ContentType", "CacheControl", "ContentDisposition", "Metadata")
        }
        out[key] = (got["Body"].read(), metadata)
    return out


def test_many_small_objects_and_a_multipart_one_both_ways(ends: tuple[Buckets, Buckets]) -> None:
    """40 small objects and one of 20 MiB (4 parts of 5 MiB), each with its
    Content-Type, Cache-Control and user metadata: the destination holds the
    same bytes and metadata under the same keys, and at most concurrency x
    part size bytes were held at once (2 x 5 MiB: half the big object)."""
    source, destination = ends
    src, dst = new_bucket(source, []), new_bucket(destination, [])
    for n in range(40):
        source.s3.put_object(
            Bucket=src, Key=f"p/small-{n:02}", Body=os.urandom(n * 997),
            ContentType=f"text/x-{n}", CacheControl="max-age=60", Metadata={"n": str(n)},
        )  # fmt: skip
    big = os.urandom(20 * MiB)
    source.s3.put_object(
        Bucket=src, Key="p/big", Body=big, ContentType="app/big",
        ContentDisposition="attachment", Metadata={"size": "20MiB"},
    )  # fmt: skip
    summary = copy(
        f"s3://{src}/p/", f"s3://{dst}/q/", recursive=True,
        **_options(source, destination, part_size=5 * MiB, concurrency=2),
    )  # fmt: skip
    assert (summary.objects, summary.failures, summary.relayed) == (41, [], True)
    assert summary.parts == 4
    # a GET and a PUT a small object (no HEAD: the GET's headers carry the
    # metadata); the big one a HEAD, 4 ranged GETs, and its multipart upload
    # (create, the earlier runs' uploads listed, 4 parts, complete)
    assert summary.requests - summary.retries == 40 * 2 + 1 + 4 + 1 + 1 + 4 + 1
    assert 5 * MiB <= summary.held_most <= 2 * 5 * MiB < len(big)
    want = {f"q/{k[2:]}": v for k, v in _held(source, src).items()}
    assert _held(destination, dst) == want


def test_the_memory_budget_holds_below_the_slots_bound(
    minio_buckets: Buckets, moto_s3: Buckets
) -> None:
    """``relay_memory`` below concurrency x part size: 8 slots, but one 5 MiB
    part held at a time (a 5 MiB budget), 20 small objects of 1 MiB each
    at most 5 at once; every byte arrives all the same."""
    src, dst = new_bucket(minio_buckets, []), new_bucket(moto_s3, [])
    bodies = {f"s/{n:02}": os.urandom(MiB) for n in range(20)}
    bodies["big"] = os.urandom(20 * MiB)
    for key, body in bodies.items():
        minio_buckets.s3.put_object(Bucket=src, Key=key, Body=body)
    summary = copy(
        f"s3://{src}/", f"s3://{dst}/", recursive=True,
        **_options(minio_buckets, moto_s3, part_size=5 * MiB, concurrency=8, relay_memory=5 * MiB),
    )  # fmt: skip
    assert (summary.objects, summary.failures) == (21, [])
    assert 1 * MiB <= summary.held_most <= 5 * MiB
    for key, body in bodies.items():
        assert moto_s3.s3.get_object(Bucket=dst, Key=key)["Body"].read() == body


def test_metadata_replaced_and_storage_options(ends: tuple[Buckets, Buckets]) -> None:
    """--metadata-directive REPLACE: the new object has what the options say,
    nothing of the source's (no Content-Type guessed: as a server's copy)."""
    source, destination = ends
    src, dst = new_bucket(source, []), new_bucket(destination, [])
    source.s3.put_object(
        Bucket=src, Key="a.txt", Body=b"abc", ContentType="text/old", Metadata={"old": "1"}
    )
    summary = copy(
        f"s3://{src}/a.txt", f"s3://{dst}/b.txt",
        **_options(source, destination, metadata={"new": "2"}, cache_control="no-cache"),
    )  # fmt: skip
    assert (summary.objects, summary.failures) == (1, [])
    got = destination.s3.get_object(Bucket=dst, Key="b.txt")
    assert (got["Body"].read(), got["Metadata"], got["CacheControl"]) == (
        b"abc",
        {"new": "2"},
        "no-cache",
    )
    assert got["ContentType"] != "text/old"


def test_hostile_keys_are_bytes_as_given(ends: tuple[Buckets, Buckets]) -> None:
    """Dot segments, double slashes, spaces, %2F, +&<>, non-ASCII, ?#: each
    key both servers store is copied to exactly itself, nothing else made."""
    source, destination = ends
    keys = [k for k in HOSTILE if stored(source, k) and stored(destination, k)]
    assert len(keys) >= 5
    src, dst = new_bucket(source, []), new_bucket(destination, [])
    for key in keys:
        source.s3.put_object(Bucket=src, Key=key, Body=key.encode())
    summary = copy(f"s3://{src}/", f"s3://{dst}/", recursive=True, **_options(source, destination))
    assert (summary.objects, summary.failures) == (len(keys), [])
    assert sorted(destination.boto3_keys(dst)) == sorted(keys)
    for key in keys:
        assert destination.s3.get_object(Bucket=dst, Key=key)["Body"].read() == key.encode()


def test_a_sync_between_endpoints(ends: tuple[Buckets, Buckets]) -> None:
    """A sync copies what the destination lacks, then finds it the same (size,
    LastModified by whole seconds); a changed size is copied again; --delete
    removes what the source lacks."""
    source, destination = ends
    src, dst = new_bucket(source, ["a", "b", "c"]), new_bucket(destination, ["extra"])
    options = _options(source, destination)
    first = surge.s3.sync(f"s3://{src}/", f"s3://{dst}/", delete=True, **options)
    assert (first.objects, first.unchanged, first.deleted, first.failed) == (3, 0, 1, 0)
    assert destination.boto3_keys(dst) == ["a", "b", "c"]
    source.s3.put_object(Bucket=src, Key="b", Body=b"longer")
    again = surge.s3.sync(f"s3://{src}/", f"s3://{dst}/", **options)
    assert (again.objects, again.unchanged, again.failed) == (1, 2, 0)
    assert destination.s3.get_object(Bucket=dst, Key="b")["Body"].read() == b"longer"


def _upstream(server: Buckets) -> str:
    return server.endpoint_url.split("//", 1)[1]


def test_an_object_replaced_mid_copy_fails_and_mixes_nothing(
    minio_buckets: Buckets, moto_s3: Buckets
) -> None:
    """The source replaced between the first and the second part's GET: the
    GETs are pinned with If-Match, so the copy fails (412), its multipart
    upload is aborted, and the destination holds no object of both."""
    src, dst = new_bucket(minio_buckets, []), new_bucket(moto_s3, [])
    minio_buckets.s3.put_object(Bucket=src, Key="big", Body=b"1" * (12 * MiB))
    gets = []

    def replace_on_the_second_get(method: str, path: str) -> tuple[int, bytes] | None:
        if method == "GET" and path.startswith(f"/{src}/big"):
            gets.append(path)
            if len(gets) == 2:
                minio_buckets.s3.put_object(Bucket=src, Key="big", Body=b"2" * (12 * MiB))
        return None

    with fault_proxy(_upstream(minio_buckets), replace_on_the_second_get) as url:
        summary = copy(
            f"s3://{src}/big", f"s3://{dst}/big",
            **{
                **_options(minio_buckets, moto_s3, part_size=5 * MiB, concurrency=1),
                "source_endpoint_url": url,
            },
        )  # fmt: skip
    assert len(gets) == 2
    assert [f.code for f in summary.failures] == ["PreconditionFailed"]
    assert moto_s3.boto3_keys(dst) == []
    assert moto_s3.s3.list_multipart_uploads(Bucket=dst).get("Uploads", []) == []


def test_an_interrupted_relay_aborts_its_multipart_upload(
    minio_buckets: Buckets, moto_s3: Buckets
) -> None:
    """Cancelled (as SIGINT cancels the run) while the parts go up: the
    multipart upload at the destination is aborted, not left stored."""
    src, dst = new_bucket(moto_s3, []), new_bucket(minio_buckets, [])
    moto_s3.s3.put_object(Bucket=src, Key="big", Body=os.urandom(20 * MiB))
    part_sent = threading.Event()

    def slow_parts(method: str, path: str) -> tuple[int, bytes] | None:
        if method == "PUT" and "partNumber=" in path:
            part_sent.set()
            time.sleep(1)
        return None

    async def cancelled_midway(url: str) -> None:
        options = {
            **_options(moto_s3, minio_buckets, part_size=5 * MiB, concurrency=2),
            "endpoint_url": url,
        }
        task = asyncio.ensure_future(
            surge.s3.copy_async(f"s3://{src}/big", f"s3://{dst}/big", **options)
        )
        deadline = time.monotonic() + 60
        while not part_sent.is_set():
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with fault_proxy(_upstream(minio_buckets), slow_parts) as url:
        asyncio.run(cancelled_midway(url))
    assert minio_buckets.s3.list_multipart_uploads(Bucket=dst).get("Uploads", []) == []
    assert minio_buckets.boto3_keys(dst) == []


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SURGE_S3, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def _profile_env(tmp: Any, source: Buckets, destination: Buckets) -> dict[str, str]:
    """The destination's keys in the environment; the source's in a profile."""
    (tmp / "credentials").write_text(
        f"[src]\naws_access_key_id = {source.credentials.access_key}\n"
        f"aws_secret_access_key = {source.credentials.secret_key}\n"
    )
    (tmp / "config").write_text("[profile src]\nregion = us-east-1\n")
    return {
        **os.environ,
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "credentials"),
        "AWS_CONFIG_FILE": str(tmp / "config"),
        "AWS_ACCESS_KEY_ID": destination.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": destination.credentials.secret_key,
    }


def test_the_cli_says_once_that_the_copy_goes_through_this_machine(
    minio_buckets: Buckets, moto_s3: Buckets, tmp_path: Any
) -> None:
    """``cp --recursive --source-endpoint-url --source-profile``: aws's lines
    per object on stdout, one line on stderr saying the bytes go through this
    machine and why, and the objects at the destination."""
    src, dst = new_bucket(minio_buckets, ["p/a", "p/b"]), new_bucket(moto_s3, [])
    env = _profile_env(tmp_path, minio_buckets, moto_s3)
    done = _cli(
        [
            "cp", "--recursive", f"s3://{src}/p/", f"s3://{dst}/p/",
            "--endpoint-url", moto_s3.endpoint_url, "--no-progress",
            "--source-endpoint-url", minio_buckets.endpoint_url, "--source-profile", "src",
        ],
        env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        f"copy: s3://{src}/p/a to s3://{dst}/p/a",
        f"copy: s3://{src}/p/b to s3://{dst}/p/b",
    ]
    said = [line for line in done.stderr.splitlines() if "through this machine" in line]
    assert said == [
        "surge s3 cp: copying through this machine, not by the server: the source's"
        " endpoint is not the destination's (memory: 256 MiB, or --concurrency x --part-size"
        " if less, at most)"
    ]
    assert moto_s3.boto3_keys(dst) == ["p/a", "p/b"]
    # a sync between the two then finds both the same; its JSON summary says relayed
    again = _cli(
        [
            "sync", f"s3://{src}/p/", f"s3://{dst}/p/", "--json-summary", "--quiet",
            "--endpoint-url", moto_s3.endpoint_url,
            "--source-endpoint-url", minio_buckets.endpoint_url, "--source-profile", "src",
        ],
        env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["objects"], summary["unchanged"], summary["relayed"]) == (0, 2, True)
    assert again.stderr == ""  # --quiet: not even the line that says so


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--source-endpoint-url", "ftp:/x"], "--source-endpoint-url 'ftp:/x': not an http(s) URL"),
        (["--source-profile", "nobody"], "--source-profile nobody: no such profile"),
        (["--source-region", ""], "--source-region is empty"),
    ],
)
def test_bad_source_options_are_one_line_and_status_2(
    args: list[str], said: str, tmp_path: Any
) -> None:
    env = {**os.environ, "AWS_CONFIG_FILE": str(tmp_path / "c"), "AWS_ACCESS_KEY_ID": "k"}
    env["AWS_SECRET_ACCESS_KEY"] = "s"
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "cr")
    done = _cli(["cp", "s3://a-bucket/k", "s3://b-bucket/k", *args], env)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr


def test_source_options_on_a_download_are_a_usage_error(tmp_path: Any) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    done = _cli(["cp", "s3://a-bucket/k", str(tmp_path / "k"), "--source-region", "eu-west-1"], env)
    assert done.returncode == 2
    assert "--source-region is for a copy between buckets" in done.stderr


def test_a_move_between_endpoints_onto_the_same_bucket_name(ends: tuple[Buckets, Buckets]) -> None:
    """The same bucket name on two endpoints is two buckets: a recursive move
    s3://b/p/ -> s3://b/p/ is no move onto itself; each source is deleted at
    the source's endpoint once its copy is at the destination."""
    source, destination = ends
    name = new_bucket(source, ["p/a", "p/b", "keep"])
    destination.s3.create_bucket(Bucket=name)
    summary = surge.s3.move(
        f"s3://{name}/p/", f"s3://{name}/p/", recursive=True, **_options(source, destination)
    )
    assert (summary.objects, summary.deleted, summary.failed) == (2, 2, 0)
    assert source.boto3_keys(name) == ["keep"]
    assert destination.boto3_keys(name) == ["p/a", "p/b"]


def test_bytes_that_are_not_the_sources_md5_are_not_stored(
    minio_buckets: Buckets, moto_s3: Buckets
) -> None:
    """A small object's GET whose bytes are not its ETag's MD5 (a byte
    flipped on the way, the length kept): a BadDigest failure, nothing stored."""
    src, dst = new_bucket(minio_buckets, []), new_bucket(moto_s3, [])
    minio_buckets.s3.put_object(Bucket=src, Key="k", Body=b"abcdef")

    def flip(
        method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[list[tuple[str, str]], bytes]:
        if method == "GET" and path.startswith(f"/{src}/k"):
            return headers, b"X" + body[1:]
        return headers, body

    with fault_proxy(_upstream(minio_buckets), lambda method, path: None, flip) as url:
        summary = copy(
            f"s3://{src}/k", f"s3://{dst}/k",
            **{**_options(minio_buckets, moto_s3), "source_endpoint_url": url},
        )  # fmt: skip
    assert [f.code for f in summary.failures] == ["BadDigest"]
    assert moto_s3.boto3_keys(dst) == []


def test_sigint_mid_relay_aborts_the_multipart_upload_and_exits_130(
    minio_buckets: Buckets, moto_s3: Buckets, tmp_path: Any
) -> None:
    """``surge s3 cp`` moto -> MinIO, SIGINT while a part goes up (the
    destination's part PUTs slowed by a proxy): exit 130, the line saying
    it was interrupted, and no multipart upload left at the destination."""
    src, dst = new_bucket(moto_s3, []), new_bucket(minio_buckets, [])
    moto_s3.s3.put_object(Bucket=src, Key="big", Body=os.urandom(20 * MiB))
    part_sent = threading.Event()

    def slow_parts(method: str, path: str) -> tuple[int, bytes] | None:
        if method == "PUT" and "partNumber=" in path:
            part_sent.set()
            time.sleep(2)
        return None

    env = _profile_env(tmp_path, moto_s3, minio_buckets)
    with fault_proxy(_upstream(minio_buckets), slow_parts) as url:
        process = subprocess.Popen(
            [
                *SURGE_S3, "cp", f"s3://{src}/big", f"s3://{dst}/big", "--endpoint-url", url,
                "--source-endpoint-url", moto_s3.endpoint_url, "--source-profile", "src",
                "--part-size", "5MiB", "--concurrency", "2", "--no-progress",
            ],
            stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            assert part_sent.wait(60), "no part was sent"
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 130, err
    assert "surge s3 cp: interrupted" in err
    assert minio_buckets.s3.list_multipart_uploads(Bucket=dst).get("Uploads", []) == []
    assert minio_buckets.boto3_keys(dst) == []


def test_the_rule_that_decides_a_relay() -> None:
    """:func:`relayed`, the one rule: two endpoints, or two keys, relay; AWS's
    regions are one service (CopyObject crosses them); one endpoint and one
    key is the server's copy, whatever the region."""
    from surge.s3 import Credentials
    from surge.s3.config import make_target
    from surge.s3.copies import relayed

    one, two = Credentials("a", "b"), Credentials("c", "d")

    def at(url: str | None, keys: Credentials, region: str = "us-east-1") -> Any:
        return make_target("bucket", endpoint_url=url, region=region, credentials=keys)

    here = at("http://127.0.0.1:9000", one)
    assert relayed(here, at("http://127.0.0.1:9000/", one, "eu-west-1")) is None
    assert relayed(here, at("http://127.0.0.1:9001", one)) == (
        "the source's endpoint is not the destination's"
    )
    assert relayed(here, at("http://127.0.0.1:9000", two)) == (
        "the source is read with other credentials than the destination's"
    )
    assert relayed(at(None, one, "eu-west-1"), at(None, one, "us-east-1")) is None
    assert relayed(at(None, one), here) is not None


def test_the_same_endpoint_named_twice_is_the_servers_copy(minio_buckets: Buckets) -> None:
    """--source-endpoint-url naming the destination's own endpoint, with its
    keys: CopyObject, nothing relayed, no byte held here."""
    src, dst = new_bucket(minio_buckets, ["k"]), new_bucket(minio_buckets, [])
    summary = copy(f"s3://{src}/k", f"s3://{dst}/k", **_options(minio_buckets, minio_buckets))
    assert (summary.objects, summary.failures, summary.relayed, summary.held_most) == (
        1,
        [],
        False,
        0,
    )
    assert minio_buckets.boto3_keys(dst) == ["k"]


def _public(server: Buckets, bucket: str) -> None:
    """Anyone may list ``bucket`` and read its objects (a public dataset's policy)."""
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": ["*"]},
                "Action": ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        ],
    }
    server.s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


def test_a_public_source_read_without_signing_is_relayed(minio_buckets: Buckets) -> None:
    """``--source-no-sign-request``: the source's requests carry no signature
    (a private bucket refuses them, so nothing of the destination's keys went
    with them), the bytes go through this machine, and the destination holds
    the objects, read back by boto3."""
    public, private = new_bucket(minio_buckets, ["p/a", "p/b"]), new_bucket(minio_buckets, ["p/a"])
    _public(minio_buckets, public)
    dst = new_bucket(minio_buckets, [])
    told: list[str] = []
    options = minio_buckets.options(source_no_sign_request=True, on_relay=told.append)
    summary = surge.s3.copy(f"s3://{public}/p/", f"s3://{dst}/p/", recursive=True, **options)
    assert (summary.objects, summary.failures, summary.relayed) == (2, [], True)
    assert told == ["the source is read without signing (--source-no-sign-request)"]
    assert minio_buckets.boto3_keys(dst) == ["p/a", "p/b"]
    refused = surge.s3.copy(f"s3://{private}/p/a", f"s3://{dst}/q", **options)
    assert [f.code for f in refused.failures] == ["AccessDenied"], refused.failures
    assert "q" not in minio_buckets.boto3_keys(dst)


def test_source_no_sign_request_from_the_cli(minio_buckets: Buckets, tmp_path: Any) -> None:
    public, dst = new_bucket(minio_buckets, ["k"]), new_bucket(minio_buckets, [])
    _public(minio_buckets, public)
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": minio_buckets.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": minio_buckets.credentials.secret_key,
    }
    where = ["--endpoint-url", minio_buckets.endpoint_url, "--no-progress"]
    done = _cli(
        ["cp", f"s3://{public}/k", f"s3://{dst}/k", *where, "--source-no-sign-request"], env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"copy: s3://{public}/k to s3://{dst}/k"]
    assert "the source is read without signing" in done.stderr
    assert minio_buckets.boto3_keys(dst) == ["k"]
    (tmp_path / "c").write_text("[profile x]\nregion = us-east-1\n")
    both_ways = [*where, "--source-profile", "x", "--source-no-sign-request"]
    both = _cli(
        ["cp", f"s3://{public}/k", f"s3://{dst}/k2", *both_ways],
        {**env, "AWS_CONFIG_FILE": str(tmp_path / "c")},
    )
    assert both.returncode == 2 and len(both.stderr.splitlines()) == 1, both.stderr
    assert "with keys or without, not both" in both.stderr
    download = _cli(
        ["cp", f"s3://{public}/k", str(tmp_path / "k"), "--source-no-sign-request"], env
    )
    assert download.returncode == 2
    assert "--source-no-sign-request is for a copy between buckets" in download.stderr
