"""``surge s3 ls``: aws-style lines, JSON lines, summaries and exit statuses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.s3._buckets import Buckets

from surge.cli import main


def run(buckets: Buckets, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    env = {
        "AWS_ACCESS_KEY_ID": buckets.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": buckets.credentials.secret_key,
        **(env or {}),
    }
    result = runner.invoke(
        main, ["s3", "ls", "--endpoint-url", buckets.endpoint_url, *args], env=env
    )
    return result.exit_code, result.stdout, result.stderr


LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) +(\d+) (.*)")


def test_recursive_text_lines_like_aws(buckets: Buckets) -> None:
    code, out, err = run(buckets, "s3://awkward", "--recursive", "--parallel", "1")
    assert code == 0, err
    lines = out.splitlines(keepends=True)
    parsed = [LINE.fullmatch(line.rstrip("\n")) for line in lines]
    assert all(parsed), lines
    # as aws prints them, but for control characters, escaped as ls -b escapes
    # them (the awkward set has a tab)
    keys = buckets.boto3_keys("awkward")
    assert [m.group(3) for m in parsed if m] == [k.replace("\t", "\\t") for k in keys]
    # aws's columns: 19 of date and time, a space, the size right-aligned in 10, a space
    assert all(line[19] == line[30] == " " and line[20:30].strip().isdigit() for line in lines)
    # each object's body is its key's first 20 bytes (conftest)
    assert all(
        int(m.group(2)) == len(k.encode()[:20]) for m, k in zip(parsed, keys, strict=False) if m
    )


def test_one_level_shows_directories_as_pre(buckets: Buckets) -> None:
    code, out, _ = run(buckets, "s3://nested/dir1/")
    assert code == 0
    lines = out.splitlines()
    assert lines[:5] == [f"                           PRE sub{b}/" for b in range(5)]
    assert len(lines) == 6 and lines[5].endswith(" readme.md")  # relative to the prefix


def test_json_lines_and_summary(buckets: Buckets) -> None:
    code, out, err = run(buckets, "s3://nested", "--recursive", "--json", "--summarize")
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["key"] for r in records) == sorted(buckets.boto3_keys("nested"))
    record = records[0]
    assert set(record) == {"key", "size", "last_modified", "etag", "storage_class"}
    assert record["last_modified"].endswith("Z") and record["etag"].startswith('"')
    total = sum(r["size"] for r in records)
    assert f"Total Objects: {len(records)}" in err and f"Total Size: {total}" in err


def test_text_summary_on_stdout_as_aws_prints_it(buckets: Buckets) -> None:
    code, out, _ = run(buckets, "s3://empty", "--recursive", "--summarize")
    assert code == 0
    assert out == "\nTotal Objects: 0\n   Total Size: 0\n"


def test_no_such_bucket_exits_2_naming_it(buckets: Buckets) -> None:
    code, out, err = run(buckets, "s3://no-such-bucket", "--recursive")
    assert code == 2 and out == ""
    assert "NoSuchBucket" in err and "no-such-bucket" in err


def test_access_denied_exits_2_naming_the_bucket(buckets: Buckets) -> None:
    code, _, err = run(buckets, "s3://flat", "--no-sign-request")
    assert code == 2 and "AccessDenied" in err and "'flat'" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bucket/key"], "expected s3://bucket"),
        (["s3://flat", "--parallel", "0"], "--parallel"),
        (["s3://flat", "--profile", "nope"], "--profile nope"),
    ],
)
def test_usage_errors_exit_2(buckets: Buckets, args: list[str], message: str) -> None:
    code, _, err = run(buckets, *args)
    assert code == 2 and message in err and err.startswith("surge s3 ls: error:")


def test_progress_line_is_rewritten_in_place() -> None:
    import io

    from surge.s3.cli import Progress

    stream = io.StringIO()
    progress = Progress(stream)
    progress.update(1234)
    progress.update(5678)  # within 0.2 s of the last draw: not drawn
    progress.close()
    text = stream.getvalue()
    assert text.startswith("\r\x1b[K1,234 objects") and "5,678" not in text
    assert text.endswith("\r\x1b[K")


def test_no_progress_when_stderr_is_not_a_terminal(buckets: Buckets) -> None:
    code, _, err = run(buckets, "s3://flat", "--recursive")
    assert code == 0 and "\x1b[K" not in err and "objects" not in err


def test_a_prefix_that_matches_nothing_exits_1_as_aws_does(buckets: Buckets) -> None:
    assert run(buckets, "s3://nested/nothing-here/")[0] == 1
    assert run(buckets, "s3://nested/nothing-here", "--recursive")[0] == 1
    assert run(buckets, "s3://empty")[0] == 0  # no prefix: an empty bucket is no error
    assert run(buckets, "s3://nested/dir1/")[0] == 0


def test_human_readable_sizes_as_aws_writes_them(buckets: Buckets) -> None:
    from surge.s3.cli import human_size

    assert [human_size(n) for n in (0, 1, 10, 1023, 1024, 1536, 1024**2 - 1, 5 * 1024**3)] == [
        "0 Bytes",
        "1 Byte",
        "10 Bytes",
        "1023 Bytes",
        "1.0 KiB",
        "1.5 KiB",
        "1.0 MiB",
        "5.0 GiB",
    ]
    code, out, _ = run(
        buckets, "s3://awkward/plain.txt", "--human-readable", "--summarize", "--parallel", "1"
    )
    assert code == 0
    assert out.splitlines()[0][19:] == "    9 Bytes plain.txt"  # right-aligned in 10
    assert out.rstrip().endswith("Total Size: 9 Bytes")


_BROKEN_PROFILES = """\
[profile role]
role_arn = arn:aws:iam::123456789012:role/x
source_profile = missing
[profile missing-process]
credential_process = /nonexistent/credential-helper
[profile failing-process]
credential_process = sh -c "echo 'token expired' >&2; exit 3"
[profile no-json]
credential_process = echo not-json
[profile partial]
aws_access_key_id = AKIDONLY
"""


ENDPOINT = "http://127.0.0.1:9"  # never reached: the credentials fail first


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AWS_PROFILE": "role"}, '(AWS_PROFILE=role): The source_profile "missing"'),
        ({"AWS_PROFILE": "missing-process"}, "No such file or directory"),
        ({"AWS_PROFILE": "failing-process"}, "token expired"),
        ({"AWS_PROFILE": "no-json"}, "the credential_process printed no JSON"),
        ({"AWS_PROFILE": "partial"}, "missing: aws_secret_access_key"),
        ({"AWS_ACCESS_KEY_ID": "AKIDONLY"}, "missing: AWS_SECRET_ACCESS_KEY"),
        ({"AWS_PROFILE": "nosuch"}, "AWS_PROFILE=nosuch: no such profile"),
    ],
)
def test_a_broken_credential_configuration_is_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    """Each was a traceback and exit 1 (the last: '--profile None: no such profile')."""
    config = tmp_path / "config"
    config.write_text(_BROKEN_PROFILES)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "s3", "ls", "s3://bkt", "--endpoint-url", ENDPOINT],
        env={
            **clean,
            "HOME": str(tmp_path),
            "AWS_CONFIG_FILE": str(config),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("surge s3 ls: error: ")
    assert message in done.stderr


@pytest.mark.parametrize("server", ["buckets", "moto_buckets"])
def test_with_no_bucket_the_buckets_are_listed_as_aws_lists_them(
    server: str, request: pytest.FixtureRequest
) -> None:
    """`surge s3 ls` alone lists the buckets (ListBuckets): the names and creation
    times boto3 sees, one `YYYY-MM-DD HH:MM:SS name` line each, on MinIO and moto."""
    where: Buckets = request.getfixturevalue(server)
    expected = where.s3.list_buckets()["Buckets"]
    code, out, err = run(where)
    assert code == 0, err
    assert out.splitlines() == [
        f"{b['CreationDate'].astimezone().strftime('%Y-%m-%d %H:%M:%S')} {b['Name']}"
        for b in expected
    ]
    code, out, err = run(where, "--json")
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    assert [g["name"] for g in got] == [b["Name"] for b in expected]
    assert all(g["created"].endswith("Z") for g in got)


def test_listing_the_buckets_with_wrong_keys_is_one_line_and_exit_2(buckets: Buckets) -> None:
    code, out, err = run(buckets, env={"AWS_SECRET_ACCESS_KEY": "wrong"})
    assert code == 2 and out == ""
    assert err.startswith("surge s3 ls: error: SignatureDoesNotMatch") and err.count("\n") == 1


def test_the_python_api_lists_the_buckets(buckets: Buckets) -> None:
    import asyncio

    import surge.s3

    got = asyncio.run(surge.s3.list_buckets(**buckets.options()))
    assert [b.name for b in got] == [b["Name"] for b in buckets.s3.list_buckets()["Buckets"]]
    assert all(isinstance(b, surge.s3.Bucket) and b.created.tzinfo for b in got)
