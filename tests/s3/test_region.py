"""A bucket in another region than the one requests are signed for is followed
there, as botocore follows it: MinIO told it is in eu-west-1 (it refuses
other scopes with 400 AuthorizationHeaderMalformed, naming the region), and
a stand-in that answers 301 PermanentRedirect, or names the region only in
its document, checking the SigV4 scope of every request it gets."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from click.testing import CliRunner
from tests.conftest import require

import surge.s3.config
from surge.cli import main
from surge.s3.minio import MinioNotInstalled, MinioServer, minio_server

boto3 = require("boto3")
MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_region_remembered() -> Iterator[None]:
    """Each test starts without the regions earlier ones found (the cache is
    the process's, as botocore's is its client's)."""
    regions = getattr(surge.s3.config, "_regions", {})
    regions.clear()
    yield
    regions.clear()


def run(endpoint: str, keys: tuple[str, str], *args: str) -> tuple[int, str, str]:
    env = {"AWS_ACCESS_KEY_ID": keys[0], "AWS_SECRET_ACCESS_KEY": keys[1]}
    result = CliRunner().invoke(main, ["s3", *args, "--endpoint-url", endpoint], env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def minio_eu() -> Iterator[MinioServer]:
    try:
        with minio_server(region="eu-west-1") as server:
            client = boto3.client(
                "s3",
                endpoint_url=server.endpoint_url,
                aws_access_key_id=server.access_key,
                aws_secret_access_key=server.secret_key,
                region_name="eu-west-1",
                config=Config(s3={"addressing_style": "path"}),
            )
            client.create_bucket(
                Bucket="in-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
            )
            client.put_object(Bucket="in-eu", Key="top", Body=b"top")
            client.put_object(Bucket="in-eu", Key="dir/inner", Body=b"inner")
            yield server
    except MinioNotInstalled as error:
        if os.environ.get("CI"):
            pytest.fail(str(error), pytrace=False)
        pytest.skip(str(error))


def test_commands_follow_a_bucket_to_its_region(minio_eu: MinioServer, tmp_path: Path) -> None:
    """Signed for us-east-1 (no region given): the AWS CLI follows MinIO's
    400 to eu-west-1 and exits 0, and so does surge, every command."""
    keys = (minio_eu.access_key, minio_eu.secret_key)
    url = minio_eu.endpoint_url
    code, out, err = run(url, keys, "ls", "s3://in-eu/", "--debug")
    assert code == 0, err
    assert out.endswith(" top\n") and "PRE dir/" in out
    assert "s3://in-eu is in region eu-west-1, not us-east-1" in err  # --debug says so
    getattr(surge.s3.config, "_regions", {}).clear()
    code, out, err = run(url, keys, "cp", "s3://in-eu/top", str(tmp_path / "top"))
    assert code == 0, err
    assert (tmp_path / "top").read_bytes() == b"top"
    getattr(surge.s3.config, "_regions", {}).clear()
    code, out, err = run(url, keys, "cp", "-r", "s3://in-eu/dir/", str(tmp_path / "dir"))
    assert code == 0, err
    assert (tmp_path / "dir" / "inner").read_bytes() == b"inner"
    getattr(surge.s3.config, "_regions", {}).clear()
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "big").write_bytes(os.urandom(6 * MiB))  # a multipart upload
    code, out, err = run(
        url, keys, "sync", str(tmp_path / "up"), "s3://in-eu/up/", "--part-size", "5MiB"
    )
    assert code == 0, err
    client = boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=keys[0],
        aws_secret_access_key=keys[1],
        region_name="eu-west-1",
        config=Config(s3={"addressing_style": "path"}),
    )
    body = client.get_object(Bucket="in-eu", Key="up/big")["Body"].read()
    assert body == (tmp_path / "up" / "big").read_bytes()


# -- a stand-in that checks the scope of every signature ---------------------------------

SCOPE = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/s3/aws4_request")
HOME = "eu-central-1"
BODY = b"hello"


class Redirecting(BaseHTTPRequestHandler):
    """The bucket is in eu-central-1.  Requests signed for another region
    are refused as the bucket's name says: ``moved`` 301 PermanentRedirect
    with x-amz-bucket-region (AWS's answer to a request at the wrong
    regional endpoint), ``malformed`` 400 AuthorizationHeaderMalformed naming
    the region in its document only (a HEAD of the object then gets a bare
    400, and a HEAD of the bucket names the region, as on S3), ``nowhere`` a
    301 that names no region at all."""

    protocol_version = "HTTP/1.1"
    scopes: list[tuple[str, str, str]]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self) -> None:
        found = SCOPE.search(self.headers.get("Authorization", ""))
        region = found.group(1) if found else ""
        self.scopes.append((self.command, self.path, region))
        bucket, _, rest = self.path.lstrip("/").partition("/")
        bucket = bucket.partition("?")[0]
        if region != HOME:
            self.refuse(bucket, is_bucket=not rest)
            return
        key = rest.partition("?")[0]
        md5 = hashlib.md5(BODY).hexdigest()
        if not key:
            listing = (
                "<ListBucketResult><Name>{0}</Name><KeyCount>1</KeyCount>"
                "<IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
                "<LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                f'<ETag>"{md5}"</ETag><Size>{len(BODY)}</Size>'
                "<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>"
            ).format(bucket)
            self.answer(200, listing.encode())
            return
        self.answer(
            200,
            BODY,
            {"ETag": f'"{md5}"', "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT"},
        )

    def refuse(self, bucket: str, *, is_bucket: bool) -> None:
        if bucket == "moved":
            document = (
                "<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting"
                f" to access must be addressed using the specified endpoint.</Message>"
                f"<Endpoint>moved.s3.{HOME}.amazonaws.com</Endpoint><Bucket>moved</Bucket></Error>"
            )
            self.answer(301, document.encode(), {"x-amz-bucket-region": HOME})
        elif bucket == "malformed":
            if self.command == "HEAD":
                self.answer(400, headers={"x-amz-bucket-region": HOME} if is_bucket else None)
                return
            document = (
                "<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization"
                " header is malformed; the region 'us-east-1' is wrong; expecting"
                f" '{HOME}'</Message><Region>{HOME}</Region></Error>"
            )
            self.answer(400, document.encode())
        else:
            document = "<Error><Code>PermanentRedirect</Code><Message>Moved.</Message></Error>"
            self.answer(301, document.encode())

    do_GET = do_HEAD = handle_any


@pytest.fixture()
def redirecting() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    scopes: list[tuple[str, str, str]] = []
    handler = type("Handler", (Redirecting,), {"scopes": scopes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", scopes
    finally:
        server.shutdown()
        server.server_close()


KEYS = ("AKIDEXAMPLE", "secret")


@pytest.mark.parametrize("bucket", ["moved", "malformed"])
def test_a_redirect_is_followed_once_and_remembered(
    redirecting: tuple[str, list[tuple[str, str, str]]], tmp_path: Path, bucket: str
) -> None:
    url, scopes = redirecting
    code, out, err = run(url, KEYS, "ls", f"s3://{bucket}/")
    assert code == 0, err
    assert out.endswith(f"{len(BODY)} k\n")
    code, out, err = run(url, KEYS, "cp", f"s3://{bucket}/k", str(tmp_path / "k"))
    assert code == 0, err
    assert (tmp_path / "k").read_bytes() == BODY
    code, out, err = run(url, KEYS, "cp", "-r", f"s3://{bucket}/", str(tmp_path / "all"))
    assert code == 0, err
    assert (tmp_path / "all" / "k").read_bytes() == BODY
    # one request signed for us-east-1 (and, where the region must be asked
    # for, the HEAD of the bucket); every other one for the bucket's region
    wrong = [s for s in scopes if s[2] != HOME]
    assert [s[2] for s in wrong] == ["us-east-1"] * len(wrong)
    assert 1 <= len(wrong) <= 2, scopes
    assert len(scopes) - len(wrong) >= 4


def test_a_redirect_that_names_no_region_is_an_error_naming_the_region_signed_for(
    redirecting: tuple[str, list[tuple[str, str, str]]], tmp_path: Path
) -> None:
    url, _scopes = redirecting
    code, _out, err = run(url, KEYS, "ls", "s3://nowhere/")
    assert code == 2
    assert "PermanentRedirect" in err and "signed for region us-east-1" in err
    code, _out, err = run(url, KEYS, "cp", "s3://nowhere/k", str(tmp_path / "k"))
    assert code == 1
    assert "signed for region us-east-1" in err
    assert not (tmp_path / "k").exists()


def test_a_redirect_never_loops(
    redirecting: tuple[str, list[tuple[str, str, str]]], tmp_path: Any
) -> None:
    """Given the bucket's region already, nothing is redirected."""
    url, scopes = redirecting
    code, _out, err = run(url, KEYS, "ls", "s3://moved/", "--region", HOME)
    assert code == 0, err
    assert all(region == HOME for _, _, region in scopes)


@pytest.mark.parametrize(
    ("status", "code", "head", "wrong"),
    [
        (301, "PermanentRedirect", False, True),
        (307, "TemporaryRedirect", False, True),
        (400, "AuthorizationHeaderMalformed", False, True),
        (400, "IllegalLocationConstraintException", False, True),
        (400, None, True, True),  # a HEAD's bare 400
        (400, "InvalidArgument", False, False),
        (403, "AccessDenied", False, False),
        (404, "NoSuchKey", True, False),
    ],
)
def test_which_answers_say_the_region_is_wrong(
    status: int, code: str | None, head: bool, wrong: bool
) -> None:
    from surge.s3.region import says_wrong_region

    assert says_wrong_region(status, code, head=head) is wrong


def test_a_region_is_a_host_label_or_nothing() -> None:
    """The region becomes part of a host name on AWS: nothing else is taken."""
    from surge.http.response import Headers
    from surge.s3.region import region_in

    def headers(value: str) -> Headers:
        return Headers([("x-amz-bucket-region", value)])

    assert region_in(headers("eu-west-1"), b"") == "eu-west-1"
    assert region_in(headers("evil.example/x"), b"") is None
    assert region_in(headers("a" * 64), b"") is None
    assert region_in(Headers([]), b"<Region>ap-south-2</Region>") == "ap-south-2"
    assert region_in(Headers([]), b"<Region>x.y</Region>") is None


def test_on_aws_the_host_follows_the_region() -> None:
    from surge.s3.config import make_target
    from surge.s3.sigv4 import Credentials

    keys = Credentials("AK", "SK")
    moved = make_target("bkt", region="us-east-1", credentials=keys).in_region("eu-west-1")
    assert (moved.host, moved.path, moved.region) == (
        "bkt.s3.eu-west-1.amazonaws.com",
        "/",
        "eu-west-1",
    )
    assert moved.signer is not None and moved.signer.region == "eu-west-1"
    dotted = make_target("b.k.t", region="us-east-1", credentials=keys).in_region("eu-west-1")
    assert (dotted.host, dotted.path) == ("s3.eu-west-1.amazonaws.com", "/b.k.t")
    local = make_target("bkt", endpoint_url="http://127.0.0.1:9", credentials=keys)
    assert local.in_region("eu-west-1").host == "127.0.0.1:9"  # an endpoint stays
