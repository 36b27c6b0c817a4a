"""How uploaded and copied objects are stored (:mod:`surge.s3.putoptions`):
each option, set by surge and by boto3 (the reference) on the same server,
leaves the same object - HeadObject's fields, GetObjectAcl's grants - for a
single PutObject, a multipart upload and a copy between buckets; the CLI's
flags against aws-cli's; bad values a one-line usage error.

Which server each row runs on: MinIO and moto for the metadata (Content-*,
Expires, x-amz-meta-*); moto alone for storage classes, SSE-S3, SSE-KMS and
ACLs (MinIO here has no KMS, keeps one storage class, and takes no ACL).
No server here checks SSE-C (moto ignores its headers; MinIO takes them over
TLS only): its headers are compared with botocore's own for the same call,
and a round trip on moto shows every request carries them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.s3._buckets import Buckets
from tests.s3.test_rm import _aws, _env

import surge.s3
from surge.cli import main
from surge.s3.copies import CopyOptions
from surge.s3.putoptions import PutOptions
from surge.s3.uploads import UploadOptions

MiB = 1024 * 1024
BOTH, MOTO = ("minio", "moto"), ("moto",)
_names = count()

#: (id, surge's keywords, boto3's put_object keywords, servers)
ROWS: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    ("guessed-type", {}, {"ContentType": "text/html"}, BOTH),
    ("content-type", {"content_type": "text/x-mine"}, {"ContentType": "text/x-mine"}, BOTH),
    ("no-guess", {"guess_mime_type": False}, {}, BOTH),
    ("cache-control", {"cache_control": "max-age=60"}, {"CacheControl": "max-age=60"}, BOTH),
    (
        "content-disposition",
        {"content_disposition": 'attachment; filename="a b.html"'},
        {"ContentDisposition": 'attachment; filename="a b.html"'},
        BOTH,
    ),
    ("content-encoding", {"content_encoding": "gzip"}, {"ContentEncoding": "gzip"}, BOTH),
    ("content-language", {"content_language": "de-CH"}, {"ContentLanguage": "de-CH"}, BOTH),
    (
        "expires",
        {"expires": "2031-02-03T04:05:06Z"},
        {"Expires": "2031-02-03T04:05:06Z"},
        BOTH,
    ),
    (
        "metadata",
        {"metadata": {"Build": "42", "who": "ci"}},
        {"Metadata": {"Build": "42", "who": "ci"}},
        BOTH,
    ),
    ("storage-class", {"storage_class": "standard_ia"}, {"StorageClass": "STANDARD_IA"}, MOTO),
    ("glacier", {"storage_class": "GLACIER"}, {"StorageClass": "GLACIER"}, MOTO),
    ("sse-s3", {"sse": "AES256"}, {"ServerSideEncryption": "AES256"}, MOTO),
    (
        "sse-kms",
        {"sse": "aws:kms", "sse_kms_key_id": "alias/mine"},
        {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/mine"},
        MOTO,
    ),
    ("acl", {"acl": "public-read"}, {"ACL": "public-read"}, MOTO),
    ("acl-owner", {"acl": "bucket-owner-full-control"}, {"ACL": "bucket-owner-full-control"}, MOTO),
]
CASES = [pytest.param(row, name, id=f"{row[0]}-{name}") for row in ROWS for name in row[3]]

#: HeadObject's fields the options set.
FIELDS = (
    "ContentType",
    "CacheControl",
    "ContentDisposition",
    "ContentEncoding",
    "ContentLanguage",
    "ExpiresString",
    "Metadata",
    "StorageClass",
    "ServerSideEncryption",
    "SSEKMSKeyId",
)


def pick(request: pytest.FixtureRequest, name: str) -> Buckets:
    """The server of that name, as tests/s3/conftest.py's ``server`` makes it."""
    if name == "moto":
        moto: Buckets = request.getfixturevalue("moto_s3")
        return moto
    minio: Buckets = request.getfixturevalue("minio_buckets")
    return minio


def bucket(server: Buckets) -> str:
    name = f"put-{os.getpid()}-{next(_names)}"
    server.s3.create_bucket(Bucket=name)
    return name


def stored(server: Buckets, name: str, key: str) -> dict[str, Any]:
    head = server.s3.head_object(Bucket=name, Key=key)
    return {field: head.get(field) for field in FIELDS}


def grants(server: Buckets, name: str, key: str) -> list[Any]:
    return sorted(map(repr, server.s3.get_object_acl(Bucket=name, Key=key)["Grants"]))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("put")
    small, big = root / "page.html", root / "big.html"
    small.write_bytes(b"<p>hello</p>")
    big.write_bytes(os.urandom(6 * MiB))  # two parts of 5 MiB, S3's least
    yield {"small": small, "big": big}


MULTIPART = {"part_size": 5 * MiB, "multipart_threshold": 5 * MiB}


@pytest.mark.parametrize(("row", "server_name"), CASES)
def test_upload_stores_what_boto3_stores(
    request: pytest.FixtureRequest, files: dict[str, Path], row: Any, server_name: str
) -> None:
    """One option, given to surge's upload and to boto3's put_object: the same
    object fields (and ACL grants), whether surge sends one PutObject or a
    multipart upload (the headers on CreateMultipartUpload)."""
    _, ours, theirs, _ = row
    if ours.get("guess_mime_type", True):  # aws-cli's: guessed from the name, .html
        theirs = {"ContentType": "text/html", **theirs}
    server = pick(request, server_name)
    name = bucket(server)
    server.s3.put_object(Bucket=name, Key="boto3.html", Body=b"x", **theirs)
    expected = stored(server, name, "boto3.html")
    for size, extra in (("small", {}), ("big", MULTIPART)):
        key = f"surge-{size}.html"
        summary = surge.s3.upload(
            str(files[size]), f"s3://{name}/{key}", **server.options(**ours, **extra)
        )
        assert summary.failures == []
        assert stored(server, name, key) == expected, size
        if "acl" in ours:
            assert grants(server, name, key) == grants(server, name, "boto3.html")


COPIES = [
    pytest.param({}, {"MetadataDirective": "COPY"}, id="copy-directive"),
    pytest.param(
        {"storage_class": "STANDARD_IA", "sse": "AES256", "acl": "public-read"},
        {
            "MetadataDirective": "COPY",
            "StorageClass": "STANDARD_IA",
            "ServerSideEncryption": "AES256",
            "ACL": "public-read",
        },
        id="stored-differently",
    ),
    pytest.param(
        {"metadata": {"new": "1"}, "cache_control": "no-cache", "content_type": "text/plain"},
        {
            "MetadataDirective": "REPLACE",
            "Metadata": {"new": "1"},
            "CacheControl": "no-cache",
            "ContentType": "text/plain",
        },
        id="metadata-implies-replace",
    ),
    pytest.param(
        {"metadata_directive": "REPLACE", "content_language": "fr"},
        {"MetadataDirective": "REPLACE", "ContentLanguage": "fr"},
        id="replace",
    ),
]


@pytest.mark.parametrize(("ours", "theirs"), COPIES)
def test_copy_stores_what_boto3_copy_object_stores(
    moto_s3: Buckets, ours: dict[str, Any], theirs: dict[str, Any]
) -> None:
    """A copy between buckets (one CopyObject; UploadPartCopy parts, the
    metadata on CreateMultipartUpload) against boto3's copy_object of the
    same source: the same fields, moto."""
    server = moto_s3
    source, name = bucket(server), bucket(server)
    kept = {"ContentType": "text/html", "CacheControl": "max-age=5", "Metadata": {"old": "y"}}
    server.s3.put_object(Bucket=source, Key="small", Body=b"x", **kept)
    server.s3.put_object(Bucket=source, Key="big", Body=os.urandom(6 * MiB), **kept)
    server.s3.copy_object(
        Bucket=name, Key="boto3", CopySource={"Bucket": source, "Key": "small"}, **theirs
    )
    expected = stored(server, name, "boto3")
    for key, extra in (("small", {}), ("big", MULTIPART)):
        summary = surge.s3.copy(
            f"s3://{source}/{key}", f"s3://{name}/{key}", **server.options(**ours, **extra)
        )
        assert summary.failures == []
        assert stored(server, name, key) == expected, key
        if "acl" in ours:
            assert grants(server, name, key) == grants(server, name, "boto3")


def _sent(server: Buckets, operation: str, call: Any) -> dict[str, str]:
    """The x-amz-*-customer-* headers botocore sends for ``call()``."""
    seen: dict[str, str] = {}

    def record(request: Any, **_: Any) -> None:
        seen.update(
            (name.lower(), value.decode() if isinstance(value, bytes) else value)
            for name, value in request.headers.items()
            if "customer" in name.lower()
        )

    events = server.s3.meta.events
    events.register(f"before-send.s3.{operation}", record)
    try:
        call()
    finally:
        events.unregister(f"before-send.s3.{operation}", record)
    return seen


KEY, OTHER = b"0123456789abcdef0123456789abcdef", bytes(range(32))


def test_sse_c_headers_are_botocores(moto_s3: Buckets) -> None:
    """SSE-C's headers as botocore sends them: the new object's key on a
    PutObject, a download's on a GetObject, a copy's source's on CopyObject."""
    server = moto_s3
    name = bucket(server)
    put = _sent(
        server,
        "PutObject",
        lambda: server.s3.put_object(
            Bucket=name, Key="k", Body=b"x", SSECustomerAlgorithm="AES256", SSECustomerKey=KEY
        ),
    )
    assert dict(PutOptions(sse_c="AES256", sse_c_key=KEY).object_headers(None)) == put
    options = UploadOptions(sse_c="AES256", sse_c_key=KEY.decode())  # a str: its bytes
    assert dict(options.customer_headers()) == put
    copied = _sent(
        server,
        "CopyObject",
        lambda: server.s3.copy_object(
            Bucket=name,
            Key="k2",
            CopySource={"Bucket": name, "Key": "k"},
            SSECustomerAlgorithm="AES256",
            SSECustomerKey=OTHER,
            CopySourceSSECustomerAlgorithm="AES256",
            CopySourceSSECustomerKey=KEY,
        ),
    )
    copy = CopyOptions(
        sse_c="AES256", sse_c_key=OTHER, sse_c_copy_source="AES256", sse_c_copy_source_key=KEY
    )
    assert dict(copy.storage_headers() + copy.source_key_headers("copy-source-")) == copied


def test_sse_c_round_trip(moto_s3: Buckets, files: dict[str, Path], tmp_path: Path) -> None:
    """With an SSE-C key, an upload (one PUT, and parts), a copy (CopyObject
    and UploadPartCopy) and a download each succeed with the same bytes: every
    request carries the key (moto takes the headers without checking them)."""
    server = moto_s3
    name = bucket(server)
    key = {"sse_c": "AES256", "sse_c_key": KEY}
    for size, extra in (("small", {}), ("big", MULTIPART)):
        url = f"s3://{name}/{size}"
        summary = surge.s3.upload(str(files[size]), url, **server.options(**key, **extra))
        assert summary.failures == []
        again = surge.s3.copy(
            url,
            f"{url}-copy",
            **server.options(sse_c_copy_source="AES256", sse_c_copy_source_key=KEY, **extra),
        )
        assert again.failures == []
        got = tmp_path / size
        summary = surge.s3.download(f"{url}-copy", str(got), **server.options(**key))
        assert summary.failures == []
        assert got.read_bytes() == files[size].read_bytes()


def _surge(server: Buckets, *args: str) -> tuple[int, str]:
    env = {
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    result = CliRunner().invoke(
        main, ["s3", *args[:1], "--endpoint-url", server.endpoint_url, *args[1:]], env=env
    )
    return result.exit_code, result.stderr


FLAGS = [
    "--cache-control",
    "max-age=9",
    "--content-disposition",
    "inline",
    "--content-encoding",
    "identity",
    "--content-language",
    "en",
    "--expires",
    "2032-01-02T03:04:05Z",
    "--storage-class",
    "STANDARD_IA",
    "--acl",
    "public-read",
    "--sse",
    "AES256",
]


@pytest.mark.parametrize(
    "metadata", ["a=1,b=two", '{"a": "1", "b": "two"}'], ids=["shorthand", "json"]
)
def test_cli_flags_match_aws_cli(
    moto_s3: Buckets, files: dict[str, Path], tmp_path: Path, metadata: str
) -> None:
    """``surge s3 cp`` and ``aws s3 cp`` with the same flags (``--metadata``
    in both its forms): the same object, moto; ``sync`` the same."""
    server = moto_s3
    name = bucket(server)
    flags = [*FLAGS, "--metadata", metadata]
    done = subprocess.run(
        [_aws(), "s3", "cp", str(files["small"]), f"s3://{name}/aws.html", *flags],
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    expected = stored(server, name, "aws.html")
    assert expected["Metadata"] == {"a": "1", "b": "two"}
    status, stderr = _surge(server, "cp", str(files["small"]), f"s3://{name}/surge.html", *flags)
    assert status == 0, stderr
    assert stored(server, name, "surge.html") == expected
    assert grants(server, name, "surge.html") == grants(server, name, "aws.html")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "page.html").write_bytes(b"x")
    status, stderr = _surge(server, "sync", str(tree), f"s3://{name}/synced/", *flags)
    assert status == 0, stderr
    assert stored(server, name, "synced/page.html") == expected


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--storage-class", "COLD"], "--storage-class 'COLD': one of STANDARD"),
        (["--acl", "world"], "--acl 'world': one of private"),
        (["--sse", "DES"], "--sse 'DES': one of AES256"),
        (["--sse-kms-key-id", "k"], "--sse-kms-key-id needs --sse aws:kms"),
        (["--sse", "--sse-c", "--sse-c-key", KEY.decode()], "one or the other"),
        (["--sse-c"], "--sse-c needs --sse-c-key"),
        (["--sse-c-key", KEY.decode()], "--sse-c-key needs --sse-c AES256"),
        (["--sse-c", "--sse-c-key", "short"], "an AES256 key is 32 bytes, not 5"),
        (["--sse-c", "--sse-c-key", "fileb:///nonexistent/key"], "cannot read"),
        (["--sse-c-copy-source", "AES256"], "is for a copy between buckets"),
        (["--expires", "soon"], "--expires 'soon': expected a time"),
        (["--metadata", "novalue"], "expected KEY=VALUE"),
        (["--metadata", '{"a": 1}'], "an object of strings"),
        (["--metadata", "a b=1"], "not a header's name"),
        (["--content-type", "a\nb"], "no line breaks"),
    ],
)
def test_bad_values_are_one_line_usage_errors(
    files: dict[str, Path], flags: list[str], says: str
) -> None:
    """Each bad value: exit 2, one line naming it, before any request (the
    endpoint is a closed port)."""
    closed = "http://127.0.0.1:9"
    result = CliRunner().invoke(
        main,
        ["s3", "cp", "--endpoint-url", closed, str(files["small"]), "s3://b/k", *flags],
        env={"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
    )
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and says in lines[0], lines


def test_sse_c_key_from_a_file(tmp_path: Path) -> None:
    """``--sse-c-key fileb://PATH``: the file's bytes are the key (as aws-cli)."""
    from surge.s3.putoptions import read_key

    path = tmp_path / "key"
    path.write_bytes(OTHER)
    assert read_key(f"fileb://{path}") == OTHER
    assert read_key("plain") == b"plain"


@pytest.mark.parametrize("server_name", BOTH)
@pytest.mark.parametrize("algorithm", ["CRC32", "SHA1", "SHA256"])
def test_checksum_algorithm(
    request: pytest.FixtureRequest,
    files: dict[str, Path],
    tmp_path: Path,
    algorithm: str,
    server_name: str,
) -> None:
    """``checksum_algorithm``: the object keeps that checksum - boto3's own
    value for one PutObject, a composite of the parts' for a multipart one -
    and a download checks the bytes by it."""
    server = pick(request, server_name)
    name = bucket(server)
    field = f"Checksum{algorithm}"
    body = files["small"].read_bytes()
    server.s3.put_object(Bucket=name, Key="boto3", Body=body, ChecksumAlgorithm=algorithm)
    expected = server.s3.head_object(Bucket=name, Key="boto3", ChecksumMode="ENABLED")[field]
    for size, extra in (("small", {}), ("big", MULTIPART)):
        summary = surge.s3.upload(
            str(files[size]),
            f"s3://{name}/{size}",
            **server.options(checksum_algorithm=algorithm.lower(), **extra),
        )
        assert summary.failures == []
        head = server.s3.head_object(Bucket=name, Key=size, ChecksumMode="ENABLED")
        if size == "small":
            assert head[field] == expected
        else:
            assert head.get(field), head
        got = surge.s3.download(f"s3://{name}/{size}", str(tmp_path / size), **server.options())
        assert got.failures == [] and got.verified == 1
        assert (tmp_path / size).read_bytes() == files[size].read_bytes()


def test_checksum_algorithm_without_its_package() -> None:
    """An algorithm no installed package computes: a usage error saying so."""
    from surge.s3.checksums import ALGORITHMS

    missing = [name for name, factory in ALGORITHMS.items() if factory is None]
    for name in missing:
        with pytest.raises(surge.s3.UsageError, match="no package here computes"):
            UploadOptions(checksum_algorithm=name)
    with pytest.raises(surge.s3.UsageError, match="one of CRC32"):
        UploadOptions(checksum_algorithm="md5")


def test_cli_sse_c_upload_and_download(
    moto_s3: Buckets, files: dict[str, Path], tmp_path: Path
) -> None:
    """``--sse-c`` alone (AES256, as aws-cli's) with ``--sse-c-key
    fileb://PATH``, up and down; the key never in the command's output."""
    server = moto_s3
    name = bucket(server)
    path = tmp_path / "key"
    path.write_bytes(KEY)
    key = ["--sse-c", "--sse-c-key", f"fileb://{path}"]
    status, stderr = _surge(server, "cp", str(files["small"]), f"s3://{name}/k.html", *key)
    assert status == 0, stderr
    got = tmp_path / "got.html"
    status, stderr = _surge(server, "cp", f"s3://{name}/k.html", str(got), *key)
    assert status == 0, stderr
    assert got.read_bytes() == files["small"].read_bytes()
    assert KEY.decode() not in stderr
