"""surge.s3 listings against a real MinIO, compared with boto3's on every bucket shape."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from contextlib import aclosing
from typing import Any

import pytest
from tests.s3._buckets import AWKWARD_KEYS, BUCKETS, Buckets

from surge.errors import S3Error, UsageError
from surge.http import AsyncClient
from surge.s3 import CommonPrefix, Credentials, ListOptions, S3Object, list_all, list_objects
from surge.s3.config import make_target
from surge.s3.listing import Lister


def surge_keys(buckets: Buckets, url: str, **kwargs: Any) -> list[str]:
    return [entry.key for entry in list_all(url, **buckets.options(**kwargs))]  # type: ignore[union-attr]


@pytest.mark.parametrize("page_size", [1000, 37])
@pytest.mark.parametrize("parallel", [1, 4, 16])
@pytest.mark.parametrize("bucket", list(BUCKETS))
def test_recursive_listing_has_boto3s_exact_key_set(
    buckets: Buckets, bucket: str, parallel: int, page_size: int
) -> None:
    expected = buckets.boto3_keys(bucket)
    got = surge_keys(buckets, f"s3://{bucket}", parallel=parallel, page_size=page_size)
    assert len(got) == len(set(got)), "a key listed twice"
    assert set(got) == set(expected)
    if parallel == 1:  # sequential listings keep S3's order
        assert got == expected


def test_flat_key_spaces_are_split_into_ranges(buckets: Buckets) -> None:
    for bucket in ("flat", "random", "prefixed-flat"):
        options = ListOptions(parallel=8, page_size=50, **buckets.options())
        got = [e.key for e in list_all(f"s3://{bucket}", options=options)]  # type: ignore[union-attr]
        assert sorted(got) == sorted(buckets.boto3_keys(bucket))
        # cut at least once (how wide depends on what the server's rate shows)
        assert options.stats.ranges >= 2, (bucket, options.stats)


def test_nested_prefixes_are_listed_in_parallel_without_waste(buckets: Buckets) -> None:
    # 811 keys: more than a page of 100 (one page ends the listing without fan-out)
    options = ListOptions(parallel=8, page_size=100, **buckets.options())
    got = [e.key for e in list_all("s3://nested", options=options)]  # type: ignore[union-attr]
    assert sorted(got) == sorted(buckets.boto3_keys("nested"))
    assert options.stats.discovers > 1 and options.stats.ranges >= 4
    assert options.stats.wasted_keys == 0  # prefix ranges end where the server says


@pytest.mark.parametrize(
    "url_prefix",
    ["dir1/", "dir1", "dir1/sub3/", "dir1/sub3/obj-01", "top-", "nothing-here/", ""],
)
@pytest.mark.parametrize("parallel", [1, 16])
def test_prefixes(buckets: Buckets, url_prefix: str, parallel: int) -> None:
    got = surge_keys(buckets, f"s3://nested/{url_prefix}", parallel=parallel, page_size=30)
    assert sorted(got) == sorted(buckets.boto3_keys("nested", url_prefix))


@pytest.mark.parametrize("url_prefix", ["ünïcödé/", "日本語/", "dir with space/", "emoji/😀"])
def test_unicode_and_escaped_prefixes(buckets: Buckets, url_prefix: str) -> None:
    got = surge_keys(buckets, f"s3://awkward/{url_prefix}", parallel=4)
    assert got and sorted(got) == sorted(buckets.boto3_keys("awkward", url_prefix))


def test_object_fields_match_boto3(buckets: Buckets) -> None:
    ours = {o.key: o for o in list_all("s3://awkward", **buckets.options())}
    assert set(ours) == set(AWKWARD_KEYS)
    for page in buckets.s3.get_paginator("list_objects_v2").paginate(Bucket="awkward"):
        for theirs in page["Contents"]:
            obj = ours[theirs["Key"]]
            assert isinstance(obj, S3Object)
            assert obj.size == theirs["Size"]
            assert obj.etag == theirs["ETag"]
            assert obj.last_modified == theirs["LastModified"]
            assert obj.storage_class == theirs["StorageClass"]


@pytest.mark.parametrize("url_prefix", ["", "dir1/", "dir1/sub", "dir1/sub2/"])
def test_one_level_listing_matches_boto3_with_a_delimiter(
    buckets: Buckets, url_prefix: str
) -> None:
    entries = list(
        list_all(f"s3://nested/{url_prefix}", recursive=False, page_size=7, **buckets.options())
    )
    prefixes = [e.prefix for e in entries if isinstance(e, CommonPrefix)]
    keys = [e.key for e in entries if isinstance(e, S3Object)]
    want_prefixes, want_keys = [], []
    paginator = buckets.s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket="nested", Prefix=url_prefix, Delimiter="/"):
        want_prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        want_keys += [o["Key"] for o in page.get("Contents", [])]
    assert (prefixes, keys) == (want_prefixes, want_keys)


async def test_async_iterator(buckets: Buckets) -> None:
    got = [e.key async for e in list_objects("s3://flat", **buckets.options(page_size=200))]  # type: ignore[union-attr]
    assert sorted(got) == sorted(buckets.boto3_keys("flat"))


async def test_closing_the_iterator_early_stops_the_listing(buckets: Buckets) -> None:
    options = ListOptions(page_size=50, parallel=4, **buckets.options())
    seen = 0
    async with aclosing(list_objects("s3://flat", options=options)) as entries:
        async for _ in entries:
            seen += 1
            if seen == 120:
                break
    # Closed: none of the listing's tasks is left running, and it asks for no
    # more pages. (How many it asked for before is a race with the consumer.)
    asked = options.stats.requests
    assert asyncio.all_tasks() == {asyncio.current_task()}
    for _ in range(20):
        await asyncio.sleep(0)
    assert options.stats.requests == asked > 0


# -- errors -------------------------------------------------------------------------------


def test_no_such_bucket(buckets: Buckets) -> None:
    with pytest.raises(S3Error) as caught:
        list(list_all("s3://no-such-bucket", **buckets.options()))
    assert caught.value.code == "NoSuchBucket" and caught.value.status == 404
    assert caught.value.is_usage and "no-such-bucket" in str(caught.value)


@pytest.mark.parametrize(
    ("credentials", "code"),
    [
        (Credentials("nobody", "wrong-secret"), "InvalidAccessKeyId"),
        (None, "SignatureDoesNotMatch"),  # the right key id with a wrong secret
    ],
)
def test_bad_credentials(buckets: Buckets, credentials: Credentials | None, code: str) -> None:
    credentials = credentials or Credentials(buckets.credentials.access_key, "not-the-secret")
    with pytest.raises(S3Error) as caught:
        list(list_all("s3://flat", endpoint_url=buckets.endpoint_url, credentials=credentials))
    assert caught.value.code == code and caught.value.is_usage


def test_anonymous_requests(buckets: Buckets) -> None:
    with pytest.raises(S3Error) as caught:
        list(list_all("s3://flat", endpoint_url=buckets.endpoint_url, no_sign_request=True))
    assert caught.value.code == "AccessDenied"
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": ["*"]},
                "Action": ["s3:ListBucket"],
                "Resource": ["arn:aws:s3:::awkward"],
            }
        ],
    }
    buckets.s3.put_bucket_policy(Bucket="awkward", Policy=json.dumps(policy))
    try:
        got = list_all("s3://awkward", endpoint_url=buckets.endpoint_url, no_sign_request=True)
        assert sorted(e.key for e in got) == sorted(AWKWARD_KEYS)  # type: ignore[union-attr]
    finally:
        buckets.s3.delete_bucket_policy(Bucket="awkward")


def test_bad_urls_and_options() -> None:
    for url in ("bucket/key", "s3://", "s3://Not_A_Bucket!"):
        with pytest.raises(UsageError):
            list(list_all(url, no_sign_request=True))
    with pytest.raises(UsageError):
        ListOptions(parallel=0)


# -- the credential chain -------------------------------------------------------------------


def test_credentials_from_the_environment(
    buckets: Buckets, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", buckets.credentials.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", buckets.credentials.secret_key)
    got = list_all("s3://awkward", endpoint_url=buckets.endpoint_url)
    assert sorted(e.key for e in got) == sorted(AWKWARD_KEYS)  # type: ignore[union-attr]


def test_credentials_and_region_from_a_profile(
    buckets: Buckets, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    (tmp_path / "aws-credentials").write_text(
        f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
        f"[minio]\naws_access_key_id = {buckets.credentials.access_key}\n"
        f"aws_secret_access_key = {buckets.credentials.secret_key}\n"
    )
    (tmp_path / "aws-config").write_text("[profile minio]\nregion = us-east-1\n")
    got = list_all("s3://awkward", endpoint_url=buckets.endpoint_url, profile="minio")
    assert sorted(e.key for e in got) == sorted(AWKWARD_KEYS)  # type: ignore[union-attr]
    with pytest.raises(S3Error):  # the default profile's keys are wrong
        list(list_all("s3://awkward", endpoint_url=buckets.endpoint_url))
    with pytest.raises(UsageError, match="no-such-profile"):
        list(list_all("s3://awkward", endpoint_url=buckets.endpoint_url, profile="no-such-profile"))


def test_no_credentials_anywhere_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--no-sign-request"):
        list(list_all("s3://awkward", endpoint_url="http://127.0.0.1:9"))


# -- retries, on a server that asks for them -------------------------------------------------

EMPTY_PAGE = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name>'
    b"<IsTruncated>false</IsTruncated></ListBucketResult>"
)


def _response(status: int, body: bytes) -> bytes:
    reason = {200: "OK", 503: "Slow Down", 500: "Internal Server Error"}[status]
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n"
        "Content-Type: application/xml\r\n\r\n"
    ).encode() + body


async def _serve(responses: list[bytes]) -> tuple[asyncio.Server, list[bytes]]:
    requests: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while responses:
            head = await reader.readuntil(b"\r\n\r\n")
            requests.append(head)
            writer.write(responses.pop(0))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, requests


@pytest.mark.parametrize("code", ["SlowDown", "InternalError"])
async def test_retries_with_backoff_then_succeeds(code: str) -> None:
    error = f"<Error><Code>{code}</Code><Message>Please reduce</Message></Error>".encode()
    status = 503 if code == "SlowDown" else 500
    server, requests = await _serve([_response(status, error)] * 2 + [_response(200, EMPTY_PAGE)])
    port = server.sockets[0].getsockname()[1]
    target = make_target(
        "b", endpoint_url=f"http://127.0.0.1:{port}", credentials=Credentials("a", "b")
    )
    async with AsyncClient() as client:
        lister = Lister(target, client, backoff=0.001)
        body = await lister.fetch("")
    server.close()
    assert body == EMPTY_PAGE
    assert len(requests) == 3 and lister.stats.retries == 2
    assert all(b"Authorization: AWS4-HMAC-SHA256" in r for r in requests)


async def test_gives_up_after_the_retries() -> None:
    error = b"<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>"
    server, requests = await _serve([_response(503, error)] * 3)
    port = server.sockets[0].getsockname()[1]
    target = make_target("b", endpoint_url=f"http://127.0.0.1:{port}", no_sign_request=True)
    async with AsyncClient() as client:
        lister = Lister(target, client, retries=2, backoff=0.001)
        with pytest.raises(S3Error) as caught:
            await lister.fetch("")
    server.close()
    assert caught.value.code == "SlowDown" and caught.value.status == 503
    assert not caught.value.is_usage and len(requests) == 3


FIRST_PAGE = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name>'
    b"<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
    b"<Contents><Key>a</Key><LastModified>2026-11-22T13:04:08.123Z</LastModified>"
    b"<ETag>&#34;x&#34;</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>"
    b"<NextContinuationToken>after-a</NextContinuationToken></ListBucketResult>"
)


async def test_the_next_page_is_asked_for_before_this_one_is_handed_on() -> None:
    server, requests = await _serve([_response(200, FIRST_PAGE), _response(200, EMPTY_PAGE)])
    port = server.sockets[0].getsockname()[1]
    target = make_target("b", endpoint_url=f"http://127.0.0.1:{port}", no_sign_request=True)
    async with AsyncClient() as client:
        pages = Lister(target, client).pages("")
        page = await anext(pages)
        assert [o.key for o in page.objects] == ["a"]
        for _ in range(100):  # the consumer holds page 1; the request for page 2 goes out
            if len(requests) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(requests) == 2 and b"continuation-token=after-a" in requests[1]
        rest = [p async for p in pages]
        assert len(rest) == 1 and rest[0].objects == []
    server.close()


class _WireServer:
    """A server on loopback in a thread of its own (a blocking socket, not the
    test's event loop): it answers the requests of one connection with
    ``responses`` in order and counts those that have arrived, so a test can
    tell whether a request is on the wire while its own loop does not run."""

    def __init__(self, responses: list[bytes]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.conn: socket.socket | None = None
        self.arrived = threading.Condition()
        self.thread = threading.Thread(target=self._serve, args=(responses,), daemon=True)
        self.thread.start()

    def _serve(self, responses: list[bytes]) -> None:
        conn, _ = self.listener.accept()
        self.conn = conn
        with conn:
            buffer = b""
            while True:  # past the responses, requests are counted, not answered
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                with self.arrived:
                    self.requests.append(head)
                    self.arrived.notify_all()
                if responses:
                    conn.sendall(responses.pop(0))

    def wait_for(self, count: int) -> bool:
        """Whether ``count`` requests have arrived (waiting at most 5 s: the
        request, if sent, is in the kernel's buffers already)."""
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=5)

    def close(self) -> None:
        self.listener.close()
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.shutdown(socket.SHUT_RDWR)  # ends the thread's recv
        self.thread.join(5)


VERSIONS_FIRST = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListVersionsResult><Name>b</Name>'
    b"<IsTruncated>true</IsTruncated><NextKeyMarker>a</NextKeyMarker>"
    b"<NextVersionIdMarker>v1</NextVersionIdMarker><Version><Key>a</Key>"
    b"<VersionId>v1</VersionId><IsLatest>true</IsLatest>"
    b"<LastModified>2026-11-22T13:04:08.123Z</LastModified><ETag>&#34;x&#34;</ETag>"
    b"<Size>1</Size><StorageClass>STANDARD</StorageClass></Version></ListVersionsResult>"
)
VERSIONS_LAST = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListVersionsResult><Name>b</Name>'
    b"<IsTruncated>false</IsTruncated></ListVersionsResult>"
)


@pytest.mark.parametrize("kind", ["pages", "versions"])
async def test_the_next_request_is_on_the_wire_before_this_page_is_parsed(kind: str) -> None:
    # The listing hands page 1 on after parsing it, and the test then holds the
    # loop (no await) while the server, in its own thread, waits for request 2:
    # it arrives only if it was written before the parse. (A request merely
    # scheduled as a task went out after the parse, and after the consumer's
    # work on the page: at the listing's next await.)
    first = FIRST_PAGE if kind == "pages" else VERSIONS_FIRST
    last = EMPTY_PAGE if kind == "pages" else VERSIONS_LAST
    server = _WireServer([_response(200, first), _response(200, last)])
    target = make_target("b", endpoint_url=f"http://127.0.0.1:{server.port}", no_sign_request=True)
    try:
        async with AsyncClient() as client:
            lister = Lister(target, client)
            pages: Any = lister.pages("") if kind == "pages" else lister.versions("")
            await anext(pages)
            assert server.wait_for(2), "request 2 went out after page 1 was parsed"
            rest = [p async for p in pages]  # an empty page; no versions are no page
            assert len(rest) == (1 if kind == "pages" else 0)
    finally:
        server.close()
    follow = b"continuation-token=after-a" if kind == "pages" else b"key-marker=a"
    assert follow in server.requests[1]


async def test_a_listing_left_early_lets_go_of_its_request_in_flight() -> None:
    # The request for page 2 is on the wire and never answered; the consumer
    # leaves after page 1. Closing the listing must end that request then, not
    # leave a running task to be cancelled when its loop shuts down.
    server = _WireServer([_response(200, FIRST_PAGE)])
    target = make_target("b", endpoint_url=f"http://127.0.0.1:{server.port}", no_sign_request=True)

    def fetching() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if not t.done() and "Lister" in repr(t.get_coro())]

    try:
        async with AsyncClient() as client:
            pages = Lister(target, client).pages("")
            await anext(pages)
            assert server.wait_for(2) and len(fetching()) == 1
            await pages.aclose()
            assert fetching() == []
    finally:
        server.close()


# -- moto's server: a second S3 implementation --------------------------------------------


@pytest.mark.parametrize(
    ("parallel", "page_size"), [(1, 1000), (1, 37), (4, 37), (16, 1000), (16, 37)]
)
@pytest.mark.parametrize("bucket", list(BUCKETS))
def test_moto_listings_have_boto3s_exact_key_set(
    moto_buckets: Buckets, bucket: str, parallel: int, page_size: int
) -> None:
    expected = moto_buckets.boto3_keys(bucket)
    options = ListOptions(parallel=parallel, page_size=page_size, **moto_buckets.options())
    got = [e.key for e in list_all(f"s3://{bucket}", options=options)]  # type: ignore[union-attr]
    assert len(got) == len(set(got)), "a key listed twice"
    assert set(got) == set(expected)
    assert options.stats.fallback is None  # moto lists as S3 does
    if parallel == 1:
        assert got == expected


@pytest.mark.parametrize("url_prefix", ["", "dir1/", "dir1/sub"])
def test_moto_one_level_listing_matches_boto3(moto_buckets: Buckets, url_prefix: str) -> None:
    entries = list(
        list_all(
            f"s3://nested/{url_prefix}", recursive=False, page_size=7, **moto_buckets.options()
        )
    )
    got = [e.prefix if isinstance(e, CommonPrefix) else e.key for e in entries]
    want = []
    paginator = moto_buckets.s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket="nested", Prefix=url_prefix, Delimiter="/"):
        want += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        want += [o["Key"] for o in page.get("Contents", [])]
    assert sorted(got) == sorted(want) and len(got) == len(want)
