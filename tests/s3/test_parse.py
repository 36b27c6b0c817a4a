"""The ListObjectsV2 scanner: the fast path and the general path agree."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote_plus

from surge.s3.parse import (
    S3Object,
    first_key,
    is_truncated,
    last_key,
    next_token,
    parse_error,
    parse_page,
)


def minio_contents(key: str, size: int = 3, stamp: str = "2026-11-22T13:04:08.123Z") -> str:
    return (
        f"<Contents><Key>{key}</Key><LastModified>{stamp}</LastModified>"
        "<ETag>&#34;d41d8cd98f00b204e9800998ecf8427e&#34;</ETag>"
        f"<Size>{size}</Size><Owner><ID>02d6176db174dc93cb1b899f7c6078f08654445fe8cf1b6ce98d8855f66bdbf4</ID>"
        "<DisplayName>minio</DisplayName></Owner><StorageClass>STANDARD</StorageClass></Contents>"
    )


def aws_contents(key: str, size: int = 3) -> str:
    return (
        f"<Contents><Key>{key}</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"
        "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>"
        "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm>"
        f"<Size>{size}</Size><StorageClass>GLACIER</StorageClass></Contents>"
    )


def page(contents: str, *, truncated: bool = False, token: str = "", extra: str = "") -> bytes:
    head = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        "<Name>b</Name><Prefix></Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
        "<EncodingType>url</EncodingType>"
        f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
    )
    tail = f"<NextContinuationToken>{token}</NextContinuationToken>" if token else ""
    return (head + contents + extra + tail + "</ListBucketResult>").encode()


def test_minio_page_on_the_fast_path() -> None:
    body = page(minio_contents("a%2Fb") + minio_contents("c", 5), truncated=True, token="tok&amp;1")
    result = parse_page(body)
    stamp = datetime(2026, 11, 22, 13, 4, 8, 123000, tzinfo=UTC)
    etag = '"d41d8cd98f00b204e9800998ecf8427e"'
    assert result.objects == [
        S3Object("a/b", 3, stamp, etag, "STANDARD"),
        S3Object("c", 5, stamp, etag, "STANDARD"),
    ]
    assert result.truncated and result.token == "tok&1"
    assert is_truncated(body) and next_token(body) == "tok&1"
    assert first_key(body) == "a/b" and last_key(body) == "c"


def test_aws_page_with_checksums_and_storage_class() -> None:
    result = parse_page(page(aws_contents("x") + aws_contents("y", 7)))
    assert [(o.key, o.size, o.storage_class) for o in result.objects] == [
        ("x", 3, "GLACIER"),
        ("y", 7, "GLACIER"),
    ]
    assert result.objects[0].etag == '"fba9dede5f27731c9771645a39863328"'
    assert not result.truncated and result.token is None


def test_pretty_printed_xml_takes_the_general_path_with_the_same_result() -> None:
    keys = ["plain", "with space", "ünï/cödé", "a+b&c<d>", "tab\tnewline\n"]
    compact = "".join(minio_contents(quote_plus(k, safe="/")) for k in keys)
    pretty = compact.replace("><", ">\n  <").replace("<Key>\n  ", "<Key>")
    fast, general = parse_page(page(compact)), parse_page(page(pretty))
    assert [o.key for o in fast.objects] == keys
    assert general.objects == fast.objects


def test_keys_without_url_encoding_are_xml_unescaped() -> None:
    body = page(minio_contents("a&amp;b&lt;c&#x9;d"))
    body = body.replace(b"<EncodingType>url</EncodingType>", b"")
    assert [o.key for o in parse_page(body).objects] == ["a&b<c\td"]


def test_common_prefixes() -> None:
    extra = (
        "<CommonPrefixes><Prefix>dir%201/</Prefix></CommonPrefixes>"
        "<CommonPrefixes><Prefix>z/</Prefix></CommonPrefixes>"
    )
    result = parse_page(page("", extra=extra))
    assert result.prefixes == ["dir 1/", "z/"] and result.objects == []


def test_error_document() -> None:
    body = (
        b'<?xml version="1.0"?><Error><Code>NoSuchBucket</Code>'
        b"<Message>The specified bucket does not exist</Message>"
        b"<BucketName>nope</BucketName></Error>"
    )
    assert parse_error(body) == ("NoSuchBucket", "The specified bucket does not exist")
    assert parse_error(b"not xml") == (None, "")
