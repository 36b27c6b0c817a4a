"""ListObjectsV2 responses, from bytes to objects, in a few microseconds per object.

boto3 spends half of a listing's time parsing timestamps (~70 us each, a
generic date parser) and a fifth walking its shape model. A listing page is
machine-written XML of one fixed shape with no whitespace between elements
(AWS and MinIO alike), so one compiled regular expression reads every
``<Contents>`` element of a page in a single ``findall`` pass in C. A page whose
elements it does not all match (pretty-printed XML, fields in an unusual order,
an S3-compatible server with extra children) takes the general path - an element
at a time, each field found on its own - so the fast path is an optimisation,
never a condition of correctness: ``tests/s3/test_parse.py`` checks that both
paths agree.

Timestamps are fixed-format (``2026-11-22T13:04:08.123Z``): ``datetime.fromisoformat``
reads them in C, ~0.3 us each (3.11+ accepts the ``Z``). A cache of repeated
strings cost more than it saved on MinIO's millisecond timestamps (80% misses).

The pipelining helpers (:func:`is_truncated`, :func:`next_token`, :func:`last_key`)
look at the raw body with ``find``/``rfind`` only, so the next page can be asked
for before this one is parsed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import datetime
from itertools import pairwise
from typing import NamedTuple
from urllib.parse import unquote_plus


class S3Object(NamedTuple):
    """One listed object, with the fields boto3 names Key, Size, LastModified,
    ETag (quotes included, as S3 sends it) and StorageClass."""

    key: str
    size: int
    last_modified: datetime
    etag: str
    storage_class: str


class Page(NamedTuple):
    objects: list[S3Object]
    prefixes: list[str]  # CommonPrefixes, for a listing with a delimiter
    truncated: bool
    token: str | None  # NextContinuationToken


# The shape AWS and MinIO write; Checksum*/Owner children are skipped. (Matching
# the ETag's quotes apart from its value in here cost 0.6 us an object more than
# cutting them off in Python.)
_FAST = re.compile(
    r"<Contents><Key>([^<]*)</Key><LastModified>([^<]*)</LastModified>"
    r"<ETag>([^<]*)</ETag>(?:<Checksum\w*>[^<]*</Checksum\w*>)*<Size>([0-9]+)</Size>"
    r"(?:<Owner>(?:<ID>[^<]*</ID>)?(?:<DisplayName>[^<]*</DisplayName>)?</Owner>)?"
    r"(?:<StorageClass>([^<]*)</StorageClass>)?"
)


@functools.cache
def _element(name: bytes) -> re.Pattern[bytes]:
    """The pattern of ``<Name>text</Name>``, capturing the text: compiled when
    first asked for, as the patterns below are by ``re``'s own cache (each costs
    ~0.1 ms to compile, and a listing needs none of the general path's, the
    versions', the buckets' or the errors')."""
    return re.compile(rb"<" + name + rb">([^<]*)</" + name + rb">")


_ELEMENT = rb"<Contents>(.*?)</Contents>"  # re.S
_PREFIX = re.compile(rb"<CommonPrefixes>\s*<Prefix>([^<]*)</Prefix>\s*</CommonPrefixes>")


def _timestamp(raw: bytes) -> datetime:
    return datetime.fromisoformat(raw.decode("ascii"))


def _text(raw: bytes) -> str:
    """XML character data to text: entities only where there is an ``&``."""
    text = raw.decode()
    return unescape(text) if "&" in text else text


def unescape(text: str) -> str:
    """XML character data's entities undone (named, decimal and hex)."""
    import html  # here: entities are rare in a listing, and html.entities costs ~1 ms

    return html.unescape(text)


def _etag(raw: bytes) -> str:
    # MinIO writes the quotes as &#34;, AWS as &quot;.
    if raw.startswith(b"&#34;") and raw.endswith(b"&#34;"):
        return '"' + raw[5:-5].decode() + '"'
    return _text(raw)


Decode = Callable[[bytes], str]


def key_decoder(body: bytes) -> Decode:
    """How the keys of the answer ``body`` read (a key's raw bytes between
    its tags -> the key): url-encoded where it says so, else XML text."""
    return _key_decoder(is_url_encoded(body))


def _key_decoder(url_encoded: bool) -> Decode:
    if url_encoded:
        # EncodingType=url: S3 escapes keys the way a form does (a space may be +),
        # which is what botocore undoes with unquote_plus.
        def decode(raw: bytes) -> str:
            text = raw.decode()
            return unquote_plus(text) if "%" in text or "+" in text else text

        return decode

    return _text


def is_url_encoded(body: bytes) -> bool:
    return b"<EncodingType>url</EncodingType>" in body


def is_truncated(body: bytes) -> bool:
    return b"<IsTruncated>true</IsTruncated>" in body


def next_token(body: bytes) -> str | None:
    start = body.find(b"<NextContinuationToken>")
    if start < 0:
        return None
    start += len(b"<NextContinuationToken>")
    end = body.find(b"<", start)
    return _text(body[start:end])


def last_key(body: bytes) -> str | None:
    """The page's last key (keys come sorted), found from the end of the body."""
    start = body.rfind(b"<Key>")
    if start < 0:
        return None
    start += len(b"<Key>")
    end = body.find(b"<", start)
    return _key_decoder(is_url_encoded(body))(body[start:end])


def first_key(body: bytes) -> str | None:
    start = body.find(b"<Key>")
    if start < 0:
        return None
    start += len(b"<Key>")
    end = body.find(b"<", start)
    return _key_decoder(is_url_encoded(body))(body[start:end])


def parse_page(body: bytes) -> Page:
    """Read a ListObjectsV2 (or ListObjects) result."""
    url_encoded = is_url_encoded(body)
    expected = body.count(b"<Contents>")
    objects: list[S3Object]
    # The fast path runs on the decoded text: one decode a page instead of four
    # an object (3.5 against 3.9 us an object on MinIO's pages).
    rows = _FAST.findall(body.decode()) if expected else []
    if len(rows) == expected:
        # One comprehension, no function call per object where it can be helped:
        # at 1,000 objects a page every 100 ns here is 0.1 s per million objects.
        new, timestamp = tuple.__new__, datetime.fromisoformat
        objects = [
            new(
                S3Object,
                (
                    (
                        (unquote_plus(key) if "%" in key or "+" in key else key)
                        if url_encoded
                        else (unescape(key) if "&" in key else key)
                    ),
                    int(size),
                    timestamp(modified),
                    # MinIO quotes ETags as &#34;, AWS as &quot;
                    tag if "&" not in (tag := etag.replace("&#34;", '"')) else unescape(tag),
                    storage or "STANDARD",
                ),
            )
            for key, modified, etag, size, storage in rows
        ]
    else:
        decode = _key_decoder(url_encoded)
        objects = [_parse_element(element, decode) for element in re.findall(_ELEMENT, body, re.S)]
    prefixes = []
    if b"<CommonPrefixes>" in body:
        decode = _key_decoder(url_encoded)
        prefixes = [decode(p) for p in _PREFIX.findall(body)]
    return Page(objects, prefixes, is_truncated(body), next_token(body))


def _parse_element(element: bytes, decode: Decode) -> S3Object:
    """The general path: each field of one ``<Contents>`` found on its own."""

    def field(name: bytes) -> bytes | None:
        m = _element(name).search(element)
        return m.group(1) if m else None

    key = field(b"Key")
    modified = field(b"LastModified")
    if key is None or modified is None:
        raise ValueError(f"a <Contents> element without Key or LastModified: {element[:200]!r}")
    etag = field(b"ETag")
    size = field(b"Size")
    storage = field(b"StorageClass")
    return S3Object(
        decode(key),
        int(size) if size else 0,
        _timestamp(modified.strip()),
        _etag(etag) if etag is not None else "",
        storage.decode() if storage else "STANDARD",
    )


class S3Version(NamedTuple):
    """One version of an object, or a delete marker (``size`` 0, no ``etag``), of
    a ListObjectVersions answer."""

    key: str
    version_id: str
    is_latest: bool
    delete_marker: bool
    last_modified: datetime
    size: int
    etag: str
    storage_class: str


_VERSION = rb"<(Version|DeleteMarker)>(.*?)</\1>"  # re.S
_VERSION_FIELDS = (
    b"Key",
    b"VersionId",
    b"IsLatest",
    b"LastModified",
    b"ETag",
    b"Size",
    b"StorageClass",
)


def version_markers(body: bytes) -> tuple[str, str] | None:
    """The (key, version id) markers of the next ListObjectVersions page; None on
    the last page."""
    if not is_truncated(body):
        return None
    key = _element(b"NextKeyMarker").search(body)
    version = _element(b"NextVersionIdMarker").search(body)
    if key is None:
        raise ValueError("a truncated version listing without its NextKeyMarker")
    decode = _key_decoder(is_url_encoded(body))
    return decode(key.group(1)), _text(version.group(1)) if version else ""


class Upload(NamedTuple):
    """A multipart upload in progress, as ListMultipartUploads lists it."""

    key: str
    upload_id: str
    initiated: str  # ISO 8601, the server's clock
    checksum_algorithm: str | None  # as created (S3 and moto list it; MinIO does not)
    checksum_type: str | None


_UPLOAD = rb"<Upload>(.*?)</Upload>"  # re.S


def upload_markers(body: bytes) -> tuple[str, str] | None:
    """The (key, upload id) markers of the next ListMultipartUploads page;
    None on the last page."""
    if not is_truncated(body):
        return None
    key = _element(b"NextKeyMarker").search(body)
    upload = _element(b"NextUploadIdMarker").search(body)
    if key is None or not key.group(1):
        raise ValueError("a truncated upload listing without its NextKeyMarker")
    decode = _key_decoder(is_url_encoded(body))
    return decode(key.group(1)), _text(upload.group(1)) if upload else ""


def parse_uploads(body: bytes) -> list[Upload]:
    """The uploads of a ListMultipartUploadsResult, each as the server lists
    it: keys of any bytes (XML 1.0 holds no control character) url-encoded
    where the server says it did, as a listing's."""
    decode = _key_decoder(is_url_encoded(body))

    def text(found: bytes, name: bytes) -> str | None:
        match = _element(name).search(found)
        return None if match is None else _text(match.group(1))

    return [
        Upload(
            decode(key.group(1)) if (key := _element(b"Key").search(found)) else "",
            text(found, b"UploadId") or "",
            text(found, b"Initiated") or "",
            text(found, b"ChecksumAlgorithm"),
            text(found, b"ChecksumType"),
        )
        for found in re.findall(_UPLOAD, body, re.DOTALL)
    ]


def parse_versions(body: bytes) -> list[S3Version]:
    """The versions and delete markers of a ListVersionsResult, in key order
    (S3 interleaves the two in key order; moto writes a page's versions, then its
    delete markers: a stable sort by key keeps each key's own order)."""
    decode = _key_decoder(is_url_encoded(body))
    versions = []
    for kind, element in re.findall(_VERSION, body, re.S):
        found = {}
        for name in _VERSION_FIELDS:
            m = _element(name).search(element)
            found[name] = m.group(1) if m else None
        key, modified = found[b"Key"], found[b"LastModified"]
        if key is None or modified is None:
            raise ValueError(f"a <{kind.decode()}> without its Key or LastModified")
        size, etag, storage = found[b"Size"], found[b"ETag"], found[b"StorageClass"]
        versions.append(
            S3Version(
                decode(key),
                _text(found[b"VersionId"] or b"null"),
                found[b"IsLatest"] == b"true",
                kind == b"DeleteMarker",
                _timestamp(modified.strip()),
                int(size) if size else 0,
                _etag(etag) if etag is not None else "",
                storage.decode() if storage else ("" if kind == b"DeleteMarker" else "STANDARD"),
            )
        )
    if any(a.key > b.key for a, b in pairwise(versions)):
        versions.sort(key=_version_key)
    return versions


def _version_key(version: S3Version) -> str:
    return version.key


class Bucket(NamedTuple):
    """One bucket of a ListBuckets answer."""

    name: str
    created: datetime


_BUCKET = rb"<Bucket>(.*?)</Bucket>"  # re.S


def parse_buckets(body: bytes) -> tuple[list[Bucket], str | None]:
    """A ListAllMyBucketsResult: its buckets, and the token of the next page (AWS
    pages a long list since 2024; None: the last page)."""
    buckets = []
    for element in re.findall(_BUCKET, body, re.S):
        name = _element(b"Name").search(element)
        created = _element(b"CreationDate").search(element)
        if name is None or created is None:
            raise ValueError(f"a <Bucket> without its Name or CreationDate: {element[:200]!r}")
        buckets.append(Bucket(_text(name.group(1)), _timestamp(created.group(1).strip())))
    token = _element(b"ContinuationToken").search(body)
    return buckets, (_text(token.group(1)) or None) if token else None


def parse_error(body: bytes) -> tuple[str | None, str]:
    """(Code, Message) of an S3 error document; (None, "") if it is not one."""
    found = {}
    for name in (b"Code", b"Message"):
        m = _element(name).search(body)
        found[name] = _text(m.group(1)) if m else None
    return found[b"Code"], found[b"Message"] or ""
