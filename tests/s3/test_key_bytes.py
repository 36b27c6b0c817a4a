"""An S3 key is opaque bytes: no layer normalises, resolves or collapses it.

A table of key shapes - dot segments, slashes, escapes, Unicode normal forms,
control characters - goes through every command that names a key: ``cp`` up
and down, ``sync`` up, ``sync --delete``, ``sync`` down and ``ls``, against
servers that store keys as given (moto; MinIO where it accepts the key: it
refuses dot segments itself).  boto3 is the reference for what the key is on
the server (it sends each key as given, as the AWS CLI does).  Every case has
a second bucket whose objects a normalised path would reach
(``S/../V/x`` is ``V/x``): they must stay untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner
from tests.conftest import require
from tests.s3._buckets import Buckets

from surge.cli import main
from surge.http.url import parse_url

#: The same name is the same file: what a download writes for the key.
SAME = "same"
#: name -> (the key's shape, ``{V}`` the second bucket's name; what a download
#: makes of it under its destination: the relative path, SAME for the key
#: itself, None for a key skipped with a warning - it would be written outside
#: the destination, or names no file - and "" for a "folder", a key ending in
#: /: nothing to write, as the AWS CLI).
TABLE: dict[str, tuple[str, str | None]] = {
    "dot": (".", None),
    "dotdot": ("..", None),
    "dot-segment": ("x/./y.txt", "x/y.txt"),  # as the file system reads x/./y.txt
    "dotdot-segment": ("a/../b", None),
    "up-into-another-bucket": ("../{V}/planted.txt", None),
    "deeper-into-another-bucket": ("k/../../{V}/keep.txt", None),
    "trailing-dot": ("a/.", "a"),
    "double-slash": ("a//b", "a/b"),
    "only-slashes": ("//", ""),
    "leading-slash": ("/lead", None),
    "trailing-slash": ("dir/", ""),
    "escaped-slash": ("a%2Fb", SAME),
    "percent-dot": ("%2E%2E/x", SAME),
    "plus": ("a+b", SAME),
    "space": ("a b ", SAME),
    "nfc": ("caf\u00e9", SAME),
    "nfd": ("cafe\u0301", SAME),
    "control": ("c\x01t\x1fl\x7f\u0085", SAME),
    "newline-tab": ("line\nbreak\ttab", SAME),
    "query-and-fragment": ("q?x=1#f", SAME),
}
SHAPES = {name: key for name, (key, _) in TABLE.items()}
LOCAL = {name: key if local == SAME else local for name, (key, local) in TABLE.items()}

#: The second bucket's objects: where a path with its dot segments resolved lands.
DECOYS = {"planted.txt": b"decoy planted", "keep.txt": b"decoy keep", "x": b"decoy x"}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def keys(server: Buckets, bucket: str) -> list[str]:
    return server.boto3_keys(bucket)


def bodies(server: Buckets, bucket: str) -> dict[str, bytes]:
    return {
        key: server.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        for key in keys(server, bucket)
    }


def resolved(bucket: str, key: str) -> tuple[str, str] | None:
    """Where a client that resolves dot segments and collapses slashes (RFC
    3986, as a URL library would) sends ``bucket``/``key``: (bucket, key), or
    None if that is the same place or no object."""
    path = posixpath.normpath("/" + bucket + "/" + key)
    other_bucket, _, other_key = path.lstrip("/").partition("/")
    if not other_key or (other_bucket, other_key) == (bucket, key):
        return None
    return other_bucket, other_key


class Case:
    """One shape against one server: the bucket S the command names, the
    bucket V a normalised path would reach, and the key."""

    def __init__(self, server: Buckets, shape: str) -> None:
        self.server = server
        self.s3 = server.s3
        self.bucket = _name("keys")
        self.other = _name("other")
        self.key = SHAPES[shape].format(V=self.other)
        self.shape = shape
        for bucket in (self.bucket, self.other):
            self.s3.create_bucket(Bucket=bucket)
        for key, body in DECOYS.items():
            self.s3.put_object(Bucket=self.other, Key=key, Body=body)

    def reference(self, key: str) -> list[str] | None:
        """What the server makes of ``key`` sent by boto3 (into a bucket of
        its own, listed back): the keys stored, or None if it refused it."""
        scratch = _name("probe")
        self.s3.create_bucket(Bucket=scratch)
        try:
            self.s3.put_object(Bucket=scratch, Key=key, Body=b"probe")
        except Exception:
            return None
        return keys(self.server, scratch)

    def stores(self, key: str) -> bool:
        """Whether the server stores ``key`` as given."""
        return self.reference(key) == [key]

    def needs(self, key: str) -> None:
        if not self.stores(key):  # moto: a newline; MinIO: dot segments, empty ones
            pytest.skip(f"this server refuses the key {key!r} itself (boto3 cannot store it)")

    def put(self, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        # and a decoy where the resolved path would go, to tell the two apart
        other = resolved(self.bucket, key)
        if other is not None and other[0] == self.bucket and self.stores(other[1]):
            self.s3.put_object(Bucket=self.bucket, Key=other[1], Body=b"decoy resolved")

    def decoys_untouched(self) -> None:
        assert bodies(self.server, self.other) == DECOYS, "another bucket's objects changed"

    def cli(self, *args: str) -> tuple[int, str, str]:
        env = {
            "AWS_ACCESS_KEY_ID": self.server.credentials.access_key,
            "AWS_SECRET_ACCESS_KEY": self.server.credentials.secret_key,
        }
        command = [args[0], "--endpoint-url", self.server.endpoint_url, "--no-progress"]
        result = CliRunner().invoke(main, ["s3", *command, *args[1:]], env=env)
        return result.exit_code, result.stdout, result.stderr


@pytest.fixture(params=list(SHAPES), ids=list(SHAPES))
def case(server: Buckets, request: pytest.FixtureRequest) -> Case:
    return Case(server, request.param)


def test_cp_up_stores_the_key_as_named(case: Case, tmp_path: Path) -> None:
    source = tmp_path / "f.txt"
    source.write_bytes(b"uploaded")
    # the AWS CLI's rule: a destination ending in / is a prefix, the file's name added
    expected = case.key + "f.txt" if case.key.endswith("/") else case.key
    reference = case.reference(expected)
    code, _out, err = case.cli("cp", str(source), f"s3://{case.bucket}/{case.key}")
    case.decoys_untouched()
    if reference != [expected]:  # the server's own doing (MinIO: dot segments), as for boto3
        assert code == (1 if reference is None else 0), err
        assert keys(case.server, case.bucket) == (reference or [])
        return
    assert code == 0, err
    assert bodies(case.server, case.bucket) == {expected: b"uploaded"}


def test_cp_down_gets_the_key_as_named(case: Case, tmp_path: Path) -> None:
    case.needs(case.key)
    case.put(case.key, b"the key's own bytes")
    target = tmp_path / "out.bin"
    code, _out, err = case.cli("cp", f"s3://{case.bucket}/{case.key}", str(target))
    if case.key.endswith("/"):  # a "directory", as the AWS CLI: no object named
        assert code == 2 and "names no object" in err, err
        assert not target.exists()
        return
    assert code == 0, err
    assert target.read_bytes() == b"the key's own bytes"
    case.decoys_untouched()


def test_sync_up_writes_under_the_prefix_as_named(case: Case, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "f.txt").write_bytes(b"synced")
    prefix = case.key if case.key.endswith("/") else case.key + "/"
    case.needs(prefix + "f.txt")
    code, _out, err = case.cli("sync", str(source), f"s3://{case.bucket}/{case.key}")
    assert code == 0, err
    assert bodies(case.server, case.bucket) == {prefix + "f.txt": b"synced"}
    case.decoys_untouched()
    again = case.cli("sync", str(source), f"s3://{case.bucket}/{case.key}")
    assert again[0] == 0 and "upload:" not in again[1], again  # the listing found it


def test_sync_delete_deletes_the_listed_key_and_nothing_else(case: Case, tmp_path: Path) -> None:
    case.needs(case.key)
    case.s3.put_object(Bucket=case.bucket, Key=case.key, Body=b"to delete")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = case.cli("sync", str(empty), f"s3://{case.bucket}/", "--delete")
    assert code == 0, err
    assert keys(case.server, case.bucket) == []
    assert out.count("delete: ") == 1, out
    case.decoys_untouched()


def test_sync_down_maps_the_key_inside_the_destination(case: Case, tmp_path: Path) -> None:
    case.needs(case.key)
    case.s3.put_object(Bucket=case.bucket, Key=case.key, Body=b"downloaded")
    destination = tmp_path / "dest"
    code, _out, err = case.cli("sync", f"s3://{case.bucket}/", str(destination))
    files = {
        str(path.relative_to(tmp_path)): path.read_bytes()
        for path in tmp_path.rglob("*")
        if path.is_file()
    }
    local = LOCAL[case.shape]
    if local is None:  # skipped with a warning, nothing written anywhere
        assert code == 1, err
        assert "skipping s3://" in err and "UnsafeKey" not in err, err
        assert files == {}
    elif local == "":  # a folder: nothing to write
        assert code == 0, err
        assert files == {}
    else:
        assert code == 0, err
        assert files == {os.path.join("dest", local): b"downloaded"}
        again = case.cli("sync", f"s3://{case.bucket}/", str(destination))
        assert again[0] == 0 and "download:" not in again[1], again


def test_ls_lists_the_key_as_stored(case: Case) -> None:
    case.needs(case.key)
    case.put(case.key, b"listed")
    stored = sorted(keys(case.server, case.bucket))
    code, out, err = case.cli("ls", f"s3://{case.bucket}/", "--recursive", "--json")
    assert code == 0, err
    listed = sorted(json.loads(line)["key"] for line in out.split("\n") if line)
    assert listed == stored
    # and the key as a prefix: boto3's listing of that prefix
    under = sorted(
        o["Key"]
        for o in case.s3.list_objects_v2(Bucket=case.bucket, Prefix=case.key).get("Contents", [])
    )
    code, out, err = case.cli("ls", f"s3://{case.bucket}/{case.key}", "--recursive", "--json")
    assert code == (0 if under else 1), err
    assert sorted(json.loads(line)["key"] for line in out.split("\n") if line) == under


# -- the one place: the path sent is the path signed is botocore's --------------------


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_the_request_path_is_botocores_and_the_client_sends_it_as_is(shape: str) -> None:
    """boto3 (the reference) builds the request of the key: its path is
    :func:`object_path`'s, byte for byte, and the HTTP client sends that path
    unchanged (dot segments and all) - the path S3 signs."""
    import boto3
    from botocore.config import Config

    from surge.s3.sigv4 import object_path

    key = SHAPES[shape].format(V="vvv")
    sent: list[Any] = []

    def capture(request: Any, **_: Any) -> Any:
        sent.append(request)
        from botocore.awsrequest import AWSResponse

        return AWSResponse(request.url, 200, {}, None)

    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    client.meta.events.register("before-send.s3.GetObject", capture)
    with contextlib.suppress(Exception):  # the empty answer: the request was captured
        client.get_object(Bucket="bkt", Key=key)
    assert sent, "boto3 sent nothing"
    theirs = urlsplit(sent[0].url).path
    ours = object_path("/bkt", key)
    assert ours == theirs
    assert parse_url(f"http://127.0.0.1:9{ours}").target == ours.encode("ascii")


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_cp_up_names_the_key_the_aws_cli_names(
    moto_s3: Buckets, tmp_path: Path, shape: str
) -> None:
    """The AWS CLI itself as the reference: ``aws s3 cp FILE s3://B/KEY`` and
    ``surge s3 cp FILE s3://B/KEY`` make the same key (moto stores what it is sent)."""
    require("awscli")
    source = tmp_path / "f.txt"
    source.write_bytes(b"same")
    endpoint = moto_s3.endpoint_url
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": moto_s3.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": moto_s3.credentials.secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    other = _name("other")
    moto_s3.s3.create_bucket(Bucket=other)
    key = SHAPES[shape].format(V=other)
    made = {}
    for tool in ("awscli", "surge.cli"):
        bucket = _name("cli")
        moto_s3.s3.create_bucket(Bucket=bucket)
        url = f"s3://{bucket}/{key}"
        done = subprocess.run(
            [sys.executable, "-m", tool, "s3", "cp", str(source), url, "--endpoint-url", endpoint],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        made[tool] = (done.returncode == 0, keys(moto_s3, bucket))
    assert made["surge.cli"] == made["awscli"]
    assert keys(moto_s3, other) == []


#: Keys that a download writes to one file: (the keys, the one that takes the
#: file). The key that spells the file exactly wins, else the first in key order.
COLLIDING: dict[str, tuple[list[str], str]] = {
    "dot-prefix": (["a", "./a"], "a"),
    "double-slash": (["a/b", "a//b"], "a/b"),
    "dot-segment": (["a/b", "a/./b"], "a/b"),
    "trailing-dot": (["a", "a/."], "a"),
    "three-spellings": (["x//y", "x/./y", "x/y"], "x/y"),
    "none-exact": (["a/.", "./a"], "./a"),
}
DOWNLOADS = {"cp": ["cp", "-r"], "sync": ["sync"], "sync-delete": ["sync", "--delete"]}


@pytest.mark.parametrize("command", list(DOWNLOADS), ids=list(DOWNLOADS))
@pytest.mark.parametrize("name", list(COLLIDING), ids=list(COLLIDING))
def test_keys_on_one_file_write_one_and_report_the_others(
    server: Buckets, name: str, command: str, tmp_path: Path
) -> None:
    """Two keys on one local file: one is written (whichever order the
    listing gives), every other one is a named failure (exit 1), and a second
    sync writes nothing (the first never flip-flops with the second)."""
    colliding, winner = COLLIDING[name]
    case = Case(server, "plus")
    for key in colliding:
        case.needs(key)  # MinIO refuses dot segments and empty ones itself
        case.s3.put_object(Bucket=case.bucket, Key=key, Body=key.encode())
    destination = tmp_path / "dest"
    args = [DOWNLOADS[command][0], f"s3://{case.bucket}/", str(destination)]
    args += DOWNLOADS[command][1:]
    for run in range(2):
        code, out, err = case.cli(*args)
        files = {
            str(path.relative_to(destination)): path.read_bytes()
            for path in destination.rglob("*")
            if path.is_file()
        }
        assert files == {LOCAL_OF[winner]: winner.encode()}, (run, out, err)
        assert code == 1, err
        for key in colliding:
            reported = f"skipping s3://{case.bucket}/{key}: another key" in err
            assert reported == (key != winner), (key, err)
        # cp writes the winner each time; a sync, once
        assert out.count("download:") == (1 if run == 0 or command == "cp" else 0), (run, out)


LOCAL_OF = {"a": "a", "./a": "a", "a/.": "a", "a/b": "a/b", "x/y": "x/y", "x//y": "x/y"}
