"""``surge s3 rm --all-versions``, ``surge s3 ls --incomplete`` and ``surge s3
rm --incomplete`` (and ``surge.s3.remove(all_versions=True)``,
``surge.s3.list_uploads``, ``surge.s3.abort_uploads``), on MinIO and moto.

boto3 is the reference for what is on the server: ListObjectVersions is empty
under the prefix after ``rm --all-versions``, ListMultipartUploads after ``rm
--incomplete``; what is outside the prefix (or another key sharing a single
key's prefix) stays.  Keys are hostile: dot segments, doubled slashes, spaces,
a literal ``%2F``, markup characters, unicode - each the server takes from
boto3 (MinIO refuses dot segments and empty ones; moto takes every key).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, quote_plus, unquote, unquote_plus, urlsplit
from xml.sax.saxutils import escape as xml_escape

import boto3
import pytest
from botocore.config import Config
from click.testing import CliRunner
from tests.s3._buckets import Buckets

import surge.s3
from surge.cli import main
from surge.s3 import Credentials
from surge.s3.cli import escape_key
from surge.s3.deletes import Deletes, RemoveOptions, Version, remove_summary
from surge.s3.objects import Objects, parse_delete_errors

#: Keys that a path, a query string or an XML document could get wrong.
HOSTILE = [
    "p/../up.txt",
    "p/./dot",
    "p/a//b",
    "p/with space.txt",
    "p/pct%2Fslash",
    "p/plus+amp&lt<gt>.txt",
    "p/ünïcödé/😀 日本.txt",
    "p/q?x=1#frag",
    "p/trailing/",
]
#: What MinIO refuses from boto3 too (dot segments, an empty segment); moto takes them.
REFUSABLE = {"p/../up.txt", "p/./dot", "p/a//b", "p/trailing/"}  # (MinIO: no upload of a "dir/")
KEEP = ["keep/one", "pkeep"]
#: A key no XML document can name (a C0 control): its versions are deleted
#: one DeleteObject each, ?versionId= in the query.  MinIO alone: moto's
#: ListObjectVersions answers 500 once the bucket holds it (to boto3 too),
#: MinIO a multipart upload of it.
CONTROL = "p/c0\x01ctl"  # outside the prefix p/: never touched

_names = itertools.count()


def _bucket(server: Buckets, *, versioned: bool) -> str:
    bucket = f"rmv-{os.getpid()}-{next(_names)}"
    server.s3.create_bucket(Bucket=bucket)
    if versioned:
        server.s3.put_bucket_versioning(
            Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
        )
    return bucket


def _taken(server: Buckets, bucket: str, keys: list[str]) -> list[str]:
    """The keys the server takes from boto3 (one PUT each, the first version)."""
    taken = []
    for key in keys:
        try:
            server.s3.put_object(Bucket=bucket, Key=key, Body=b"1")
        except Exception:
            continue
        taken.append(key)
    return taken


def _versions(server: Buckets, bucket: str, prefix: str = "") -> list[tuple[str, str]]:
    """(key, version id) of every version and delete marker, as boto3 lists them."""
    rows = []
    pages = server.s3.get_paginator("list_object_versions").paginate(
        Bucket=bucket, Prefix=prefix, EncodingType="url"
    )
    for page in pages:
        encoded = page.get("EncodingType") == "url"
        for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
            key = unquote_plus(entry["Key"]) if encoded else entry["Key"]
            rows.append((key, entry["VersionId"]))
    return sorted(rows)


def _uploads(server: Buckets, bucket: str, prefix: str = "") -> list[tuple[str, str]]:
    """(key, upload id) of every multipart upload in progress under
    ``prefix``, as boto3 lists them: the whole bucket's (one page), the prefix
    taken here - MinIO lists nothing for a prefix that is no whole key."""
    answer = server.s3.list_multipart_uploads(Bucket=bucket, EncodingType="url")
    assert not answer["IsTruncated"]
    encoded = answer.get("EncodingType") == "url"
    uploads = [
        (unquote_plus(u["Key"]) if encoded else u["Key"], u["UploadId"])
        for u in answer.get("Uploads", [])
    ]
    return sorted(row for row in uploads if row[0].startswith(prefix))


def _surge(server: Buckets, *args: str) -> Any:
    env = {
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    return CliRunner().invoke(main, ["s3", *args, "--endpoint-url", server.endpoint_url], env=env)


def _versioned_hostile(server: Buckets) -> tuple[str, list[str]]:
    """A versioned bucket: each hostile key in three versions, one of them a
    delete marker (and the keys outside the prefix, likewise)."""
    bucket = _bucket(server, versioned=True)
    keys = _taken(server, bucket, [*HOSTILE, *KEEP])
    for key in keys:
        server.s3.put_object(Bucket=bucket, Key=key, Body=b"22")
        server.s3.delete_object(Bucket=bucket, Key=key)  # a delete marker on top
    # MinIO takes a "dir/" key but lists no version of it: left out
    listed = {key for key, _ in _versions(server, bucket)}
    hostile = [k for k in keys if k not in KEEP and k in listed]
    assert set(HOSTILE) - set(hostile) <= REFUSABLE
    return bucket, hostile


def test_rm_all_versions_recursive_leaves_no_version(server: Buckets) -> None:
    """A dry run names every version and changes nothing; the run deletes
    every version and delete marker under the prefix, a line each naming
    key and version, and nothing outside it."""
    bucket, hostile = _versioned_hostile(server)
    before = _versions(server, bucket, "p/")
    assert {key for key, _ in before} == set(hostile)
    assert len(before) == 3 * len(hostile)
    kept = [row for row in _versions(server, bucket) if row not in before]
    assert len(kept) == 3 * len(KEEP)

    lines = {
        escape_key(f"delete: s3://{bucket}/{key} (version {version})") for key, version in before
    }
    args = ["rm", "--recursive", "--all-versions", "--delete-batch", "4", f"s3://{bucket}/p/"]
    dry = _surge(server, *args, "--dryrun")
    assert dry.exit_code == 0, dry.stderr
    assert sorted(dry.stdout.splitlines()) == sorted(f"(dryrun) {line}" for line in lines)
    assert _versions(server, bucket, "p/") == before

    done = _surge(server, *args)
    assert done.exit_code == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == sorted(lines)
    assert _versions(server, bucket, "p/") == []
    assert _versions(server, bucket) == sorted(kept)


def test_rm_all_versions_of_one_key_only(server: Buckets) -> None:
    """Not recursive: every version of that key, and none of the keys it is
    a prefix of (``k`` and ``k2``); the API's results name each version."""
    bucket = _bucket(server, versioned=True)
    for key in ("p/with space.txt", "p/with space.txt2"):
        for body in (b"1", b"22"):
            server.s3.put_object(Bucket=bucket, Key=key, Body=body)
    server.s3.delete_object(Bucket=bucket, Key="p/with space.txt")
    mine = [row for row in _versions(server, bucket) if row[0] == "p/with space.txt"]
    others = [row for row in _versions(server, bucket) if row not in mine]
    results = list(
        surge.s3.remove(f"s3://{bucket}/p/with space.txt", all_versions=True, **server.options())
    )
    assert all(r.failure is None and r.deleted for r in results)
    got = sorted((r.destination, r.version_id) for r in results)
    assert got == [(f"s3://{bucket}/{k}", v) for k, v in mine]
    assert _versions(server, bucket) == others


def test_all_versions_batches_are_counted(server: Buckets) -> None:
    """Versions go 1,000 (here 5) a DeleteObjects, each naming its VersionId:
    25 versions of 5 keys are 5 requests, besides the listing's."""
    bucket = _bucket(server, versioned=True)
    for i in range(5):
        for n in range(5):
            server.s3.put_object(Bucket=bucket, Key=f"v/{i}", Body=b"x" * n)
    summary = remove_summary(
        f"s3://{bucket}/v/", recursive=True, all_versions=True, delete_batch=5, **server.options()
    )
    assert (summary.deleted, summary.failures) == (25, [])
    assert summary.requests == 5  # the deletes' (the listing counts its own)
    assert _versions(server, bucket) == []


def _left_uploads(server: Buckets, keys: list[str], each: int = 2) -> tuple[str, list[str]]:
    """A bucket with ``each`` multipart uploads begun (and never finished) of
    each key the server takes, plus one of each key outside the prefix."""
    bucket = _bucket(server, versioned=False)
    taken = []
    for key in keys + KEEP:
        try:
            for _ in range(1 if key in KEEP else each):
                server.s3.create_multipart_upload(Bucket=bucket, Key=key)
        except Exception:
            continue
        taken.append(key)
    hostile = [k for k in taken if k not in KEEP]
    assert set(keys) - set(hostile) <= REFUSABLE
    return bucket, hostile


def test_ls_incomplete_as_boto3(server: Buckets) -> None:
    """``ls --incomplete``: a line per upload, its start time, key and upload
    id; JSON lines the same three; the API's pages (3 uploads a page where
    the server pages them: moto's markers followed) the same set as boto3's."""
    bucket, _ = _left_uploads(server, HOSTILE)
    expected = _uploads(server, bucket, "p/")

    async def pages() -> list[Any]:
        got = []
        async for page in surge.s3.list_uploads(
            f"s3://{bucket}/p/", page_size=3, **server.options()
        ):
            got += page
        return got

    listed = asyncio.run(pages())
    assert sorted((u.key, u.upload_id) for u in listed) == expected
    assert len(expected) >= 2 * (len(HOSTILE) - len(REFUSABLE))

    as_json = _surge(server, "ls", "--incomplete", "--json", f"s3://{bucket}/p/")
    assert as_json.exit_code == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert sorted((r["key"], r["upload_id"]) for r in rows) == expected
    for row in rows:
        datetime.fromisoformat(row["initiated"])  # ISO 8601, as the server said
    text = _surge(server, "ls", "--incomplete", f"s3://{bucket}/p/")
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert sorted(line.split(" ", 2)[2].rsplit(" ", 1) for line in lines) == [
        list(row) for row in expected
    ]
    none = _surge(server, "ls", "--incomplete", f"s3://{bucket}/nothing/")
    assert (none.exit_code, none.stdout) == (1, "")


def test_rm_incomplete_aborts_every_upload_under_the_prefix(server: Buckets) -> None:
    """``rm --incomplete --recursive``: a dry run names each upload and aborts
    none; the run aborts each (a line naming key and upload id), and
    ListMultipartUploads is empty under the prefix; the uploads outside it,
    and the objects, stay."""
    bucket, _ = _left_uploads(server, HOSTILE)
    server.s3.put_object(Bucket=bucket, Key="p/an-object", Body=b"x")
    before = _uploads(server, bucket, "p/")
    outside = [row for row in _uploads(server, bucket) if row not in before]
    lines = sorted(f"abort: s3://{bucket}/{key} (upload id {uid})" for key, uid in before)
    args = ["rm", "--incomplete", "--recursive", f"s3://{bucket}/p/"]
    dry = _surge(server, *args, "--dryrun")
    assert dry.exit_code == 0, dry.stderr
    assert sorted(dry.stdout.splitlines()) == [f"(dryrun) {line}" for line in lines]
    assert _uploads(server, bucket, "p/") == before

    done = _surge(server, *args)
    assert done.exit_code == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == lines
    assert _uploads(server, bucket, "p/") == []
    assert _uploads(server, bucket) == outside
    assert server.boto3_keys(bucket, "p/") == ["p/an-object"]


def test_abort_uploads_of_one_key_only(server: Buckets) -> None:
    """Not recursive: the uploads of that key, not of the keys it is a prefix
    of; through the API, a result each with its upload id."""
    bucket, _ = _left_uploads(server, ["p/pct%2Fslash", "p/pct%2Fslash.more"], each=3)
    mine = [row for row in _uploads(server, bucket) if row[0] == "p/pct%2Fslash"]
    others = [row for row in _uploads(server, bucket) if row not in mine]
    results = list(surge.s3.abort_uploads(f"s3://{bucket}/p/pct%2Fslash", **server.options()))
    assert all(r.failure is None for r in results)
    assert sorted((r.destination, r.upload_id) for r in results) == [
        (f"s3://{bucket}/{k}", u) for k, u in mine
    ]
    assert len(mine) == 3 and _uploads(server, bucket) == others


@pytest.mark.parametrize(
    "args",
    [
        ["rm", "--all-versions", "--incomplete", "s3://b/k"],
        ["ls", "--all-versions", "--incomplete", "s3://b/k"],
        ["ls", "--incomplete"],
    ],
)
def test_flags_that_do_not_go_together(args: list[str]) -> None:
    done = CliRunner().invoke(main, ["s3", *args])
    assert done.exit_code == 2
    assert len(done.stderr.strip().splitlines()) == 1


class _PagedUploads(BaseHTTPRequestHandler):
    """ListMultipartUploads as S3 documents it, paged by ``max-uploads``
    (neither moto nor MinIO pages it): keys url-encoded when asked, the next page from
    ``key-marker`` and ``upload-id-marker``; AbortMultipartUpload too."""

    uploads: ClassVar[list[tuple[str, str]]] = []  # (key, upload id), sorted
    requests: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.requests.append(self.path)
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        first = query.get("prefix", [""])[0]
        marker = (query.get("key-marker", [""])[0], query.get("upload-id-marker", [""])[0])
        size = int(query.get("max-uploads", ["1000"])[0])
        rows = [r for r in self.uploads if r[0].startswith(first) and (not marker[0] or r > marker)]
        page, more = rows[:size], len(rows) > size
        url = query.get("encoding-type") == ["url"]  # as S3: encoded only when asked
        enc = quote_plus if url else xml_escape
        body = "".join(
            f"<Upload><Key>{enc(k)}</Key><UploadId>{xml_escape(u)}</UploadId>"
            "<Initiated>2026-01-02T03:04:05.000Z</Initiated></Upload>"
            for k, u in page
        )
        nxt = (
            f"<NextKeyMarker>{enc(page[-1][0])}</NextKeyMarker>"
            f"<NextUploadIdMarker>{xml_escape(page[-1][1])}</NextUploadIdMarker>"
            if more
            else ""
        )
        self._answer(
            200,
            "<ListMultipartUploadsResult>"
            + ("<EncodingType>url</EncodingType>" if url else "")
            + f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>{nxt}{body}"
            "</ListMultipartUploadsResult>",
        )

    def do_DELETE(self) -> None:
        self.requests.append(self.path)
        split = urlsplit(self.path)
        key = unquote(split.path.split("/", 2)[2])
        upload = parse_qs(split.query)["uploadId"][0]
        type(self).uploads = [r for r in self.uploads if r != (key, upload)]
        self._answer(204, "")

    def _answer(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_upload_pages_followed_by_their_markers() -> None:
    """Six uploads of hostile keys, three a page: two pages, their markers
    followed (as boto3's paginator follows them), each upload listed once and
    aborted once; an upload id with ``+``, ``/`` and ``=`` encoded in the
    query string.  A prefix with no upload costs one request more, no more."""
    rows = sorted(
        (k, f"id+{i}/{n}==")
        for i, k in enumerate(["p/with space", "p/pct%2Fx", "p/ü 😀&<", "p/a..b"])
        for n in range(2 if i % 2 else 1)
    )
    rows.append(("q/outside", "id-out"))
    _PagedUploads.uploads, _PagedUploads.requests = rows, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PagedUploads)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        options = {"endpoint_url": endpoint, "credentials": Credentials("k", "s")}
        reference = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="k",
            aws_secret_access_key="s",
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )
        pages = reference.get_paginator("list_multipart_uploads").paginate(
            Bucket="bkt", Prefix="p/", PaginationConfig={"PageSize": 3}
        )
        by_boto3 = [(u["Key"], u["UploadId"]) for p in pages for u in p["Uploads"]]
        expected = [r for r in rows if r[0].startswith("p/")]
        assert by_boto3 == expected

        async def listed() -> list[list[Any]]:
            return [
                page async for page in surge.s3.list_uploads("s3://bkt/p/", page_size=3, **options)
            ]

        _PagedUploads.requests = []
        got = asyncio.run(listed())
        assert [len(page) for page in got] == [3, 3]
        assert [(u.key, u.upload_id) for page in got for u in page] == expected
        assert len(_PagedUploads.requests) == 2

        # nothing under the prefix: one more request (from key-marker, for
        # MinIO's sake), which stops at the first key past the prefix
        async def none() -> list[list[Any]]:
            return [page async for page in surge.s3.list_uploads("s3://bkt/n/", **options)]

        _PagedUploads.requests = []
        assert asyncio.run(none()) == []
        assert len(_PagedUploads.requests) == 2
        assert "key-marker=n%2F" in _PagedUploads.requests[1]

        _PagedUploads.requests = []
        results = list(surge.s3.abort_uploads("s3://bkt/p/", recursive=True, **options))
        assert sorted((r.destination, r.upload_id) for r in results) == [
            (f"s3://bkt/{k}", u) for k, u in expected
        ]
        assert _PagedUploads.uploads == [("q/outside", "id-out")]
        deletes = [r for r in _PagedUploads.requests if "uploadId=" in r]
        assert len(deletes) == len(expected)
        assert all("%2B" in r and "%2F" in r and "%3D" in r for r in deletes)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_per_version_errors_are_told_by_their_version(minio_buckets: Buckets) -> None:
    """A DeleteObjects naming versions, one of them no version id the server
    takes: MinIO answers a per-key <Error> naming that VersionId; that
    version alone is a failure, the key's other versions in the batch are
    deleted - one request."""
    server = minio_buckets
    bucket = _bucket(server, versioned=True)
    key = "p/with space&<.txt"
    for body in (b"1", b"22"):
        server.s3.put_object(Bucket=bucket, Key=key, Body=body)
    real = [Version(k, v) for k, v in _versions(server, bucket)]
    bogus = Version(key, "not-a-version-id")
    told: dict[Version, tuple[str, str] | None] = {}

    async def run() -> int:
        options = RemoveOptions(**server.options())
        client = options.client(2, 30)
        try:
            objects = Objects(options.target(bucket), client, options.retry_policy())
            async with Deletes[Version](objects, told.__setitem__) as deletes:
                for item in [real[0], bogus, real[1]]:
                    await deletes.add(item)
            return deletes.requests
        finally:
            await client.close()

    assert asyncio.run(run()) == 1
    assert told[real[0]] is None and told[real[1]] is None
    failure = told[bogus]
    assert failure is not None and failure[0]
    assert _versions(server, bucket) == []


def test_parse_of_errors_naming_versions() -> None:
    """S3's DeleteResult with two errors of one key: each its VersionId."""
    body = (
        b"<DeleteResult><Error><Key>k&amp;</Key><VersionId>v1</VersionId><Code>AccessDenied"
        b"</Code><Message>no</Message></Error><Error><Key>k&amp;</Key><VersionId>v2"
        b"</VersionId><Code>InternalError</Code><Message>later</Message></Error></DeleteResult>"
    )
    assert [tuple(e) for e in parse_delete_errors(body)] == [
        ("k&", "AccessDenied", "no", "v1"),
        ("k&", "InternalError", "later", "v2"),
    ]


def test_versions_of_a_key_xml_cannot_carry(minio_buckets: Buckets) -> None:
    """A C0 control in the key: its two versions go one DeleteObject each
    (``?versionId=``), the other key's in one DeleteObjects: 3 requests, and
    no version left."""
    server = minio_buckets
    bucket = _bucket(server, versioned=True)
    for key in (CONTROL, "p/plain"):
        for body in (b"1", b"22"):
            server.s3.put_object(Bucket=bucket, Key=key, Body=body)
    summary = remove_summary(
        f"s3://{bucket}/p/", recursive=True, all_versions=True, **server.options()
    )
    assert (summary.deleted, summary.failures, summary.requests) == (4, [], 3)
    assert _versions(server, bucket) == []


@pytest.mark.parametrize("versioned", [True, False])
def test_rb_force_leaves_no_version_marker_or_upload(server: Buckets, versioned: bool) -> None:
    """rb --force on a bucket with versions, delete markers and an upload in
    progress: all of it goes (a line each, as rm --all-versions and rm
    --incomplete tell them), then the bucket; aws s3 rb --force stops at
    BucketNotEmpty on a versioned bucket."""
    bucket = _bucket(server, versioned=versioned)
    for key in ("a", "b/c", "d"):
        server.s3.put_object(Bucket=bucket, Key=key, Body=b"1")
        server.s3.put_object(Bucket=bucket, Key=key, Body=b"22")
    server.s3.delete_object(Bucket=bucket, Key="d")  # (versioned: a delete marker)
    upload = server.s3.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    versions = _versions(server, bucket)
    done = _surge(server, "rb", f"s3://{bucket}", "--force")
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == f"remove_bucket: {bucket}"
    if versioned:
        # the current versions first (rm --recursive's lines), then what is left
        assert {f"delete: s3://{bucket}/{key}" for key in ("a", "b/c")} <= set(lines)
        assert {f"delete: s3://{bucket}/{k} (version {v})" for k, v in versions} <= set(lines)
    assert f"abort: s3://{bucket}/big (upload id {upload})" in lines or not versioned
    assert bucket not in [b["Name"] for b in server.s3.list_buckets()["Buckets"]]
