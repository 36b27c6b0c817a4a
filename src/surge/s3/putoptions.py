"""What a new object is stored with: the AWS CLI's upload options, and the one
place each becomes its request header.

    surge.s3.upload("site/", "s3://bucket/", recursive=True,
                    cache_control="max-age=60", storage_class="STANDARD_IA",
                    sse="aws:kms", metadata={"build": "42"})

:class:`PutOptions` holds them (fields of :class:`surge.s3.UploadOptions` and
:class:`surge.s3.CopyOptions`, the ``surge s3 cp|sync`` options of the same
names); :meth:`PutOptions.object_headers` gives the headers of the request
that makes the object - a PutObject, a CreateMultipartUpload, a CopyObject -
and :meth:`CustomerKey.customer_headers` the SSE-C headers that every request
of the object's bytes carries too (each UploadPart, a GET, a HEAD), as the
AWS CLI sends them:

* ``content_type``: given, else guessed from the file's name (Python's
  :mod:`mimetypes`, as the AWS CLI) unless ``guess_mime_type`` is False;
  ``cache_control``, ``content_disposition``, ``content_encoding``,
  ``content_language``, ``expires`` (sent as an HTTP date), ``metadata``
  (``x-amz-meta-NAME``): the object's metadata - on a copy between buckets,
  sent only when it is replaced (``--metadata-directive REPLACE``, which
  ``metadata`` implies, as the AWS CLI).
* ``storage_class``, ``acl`` (a canned ACL), ``sse`` (``AES256``,
  ``aws:kms``, ``aws:kms:dsse``) with ``sse_kms_key_id``, ``sse_c``
  (``AES256``) with ``sse_c_key`` (the key's 32 bytes; sent base64'd with its
  MD5, as botocore sends them): how it is stored, on copies too.

Values are checked when the options are made: a bad one is a
:class:`UsageError` naming it (``surge s3``: one line, exit 2).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from surge.errors import UsageError

#: The AWS CLI's choices (``aws s3 cp help``).
STORAGE_CLASSES = (
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "DEEP_ARCHIVE",
    "GLACIER_IR",
    "EXPRESS_ONEZONE",
)
CANNED_ACLS = (
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "aws-exec-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
    "log-delivery-write",
)
SSE_KINDS = ("AES256", "aws:kms", "aws:kms:dsse")
SSE_C_KINDS = ("AES256",)
CHECKSUM_ALGORITHMS = ("CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME")
#: What an SSE-C key's header is named (its secret value: see surge.trace.redact).
CUSTOMER_KEY = "x-amz-server-side-encryption-customer-key"


def one_of(option: str, value: str, choices: tuple[str, ...]) -> str:
    """``value`` as S3 spells it (case aside), or a UsageError listing ``choices``."""
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise UsageError(f"{option} {value!r}: one of {', '.join(choices)}")


def parse_metadata(text: str) -> dict[str, str]:
    """The AWS CLI's ``--metadata``: shorthand ``KEY=VALUE,KEY=VALUE`` or a JSON
    object of strings."""
    import json  # here: only --metadata needs it

    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as e:
            raise UsageError(f"--metadata: not JSON: {e}") from None
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise UsageError('--metadata: JSON must be an object of strings, {"key": "value"}')
        return value
    metadata = {}
    for pair in text.split(","):
        name, equals, value = pair.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"--metadata {pair!r}: expected KEY=VALUE[,KEY=VALUE...] or JSON")
        metadata[name.strip()] = value
    return metadata


def read_key(text: str) -> bytes:
    """An SSE-C key as the AWS CLI takes it: the key itself, or ``fileb://PATH``
    (the file's bytes)."""
    if text.startswith("fileb://"):
        try:
            with open(text[len("fileb://") :], "rb") as file:
                return file.read()
        except OSError as e:
            raise UsageError(f"--sse-c-key: cannot read {text!r}: {e.strerror}") from None
    return text.encode()


def http_date(value: str | datetime) -> str:
    """``--expires`` as its header says it (RFC 7231's date): from an ISO 8601
    time (UTC unless it says), an HTTP date, or seconds since the epoch - what
    botocore takes."""
    from email.utils import format_datetime, parsedate_to_datetime  # only --expires needs it

    if isinstance(value, datetime):
        when = value
    else:
        text = value.strip()
        try:
            when = (
                datetime.fromtimestamp(float(text), UTC)
                if text.replace(".", "", 1).isdigit()
                else datetime.fromisoformat(text.replace("Z", "+00:00"))
            )
        except ValueError:
            try:
                when = parsedate_to_datetime(text)
            except (TypeError, ValueError):
                raise UsageError(
                    f"--expires {value!r}: expected a time such as 2030-01-31T12:00:00Z"
                ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return str(format_datetime(when.astimezone(UTC), usegmt=True))


def customer_key_headers(algorithm: str, key: bytes, prefix: str = "") -> list[tuple[str, str]]:
    """SSE-C's three headers (``prefix``: ``copy-source-`` for a copy's source)."""
    name = f"x-amz-{prefix}server-side-encryption-customer"
    digest = hashlib.md5(key, usedforsecurity=False).digest()
    return [
        (f"{name}-algorithm", algorithm),
        (f"{name}-key", base64.b64encode(key).decode("ascii")),
        (f"{name}-key-md5", base64.b64encode(digest).decode("ascii")),
    ]


def checked_key(option: str, algorithm: str | None, key: str | bytes | None) -> bytes | None:
    if algorithm is None:
        if key is not None:
            raise UsageError(f"{option}-key needs {option} AES256")
        return None
    if key is None:
        raise UsageError(f"{option} needs {option}-key (the key's 32 bytes, or fileb://PATH)")
    raw = key.encode() if isinstance(key, str) else key
    if len(raw) != 32:
        raise UsageError(f"{option}-key: an AES256 key is 32 bytes, not {len(raw)}")
    return raw


@dataclass(kw_only=True)
class CustomerKey:
    """SSE-C: the key an object is encrypted with, which each request of its
    bytes carries (an upload's, a download's)."""

    #: ``AES256`` (the AWS CLI's ``--sse-c``), with ``sse_c_key``.
    sse_c: str | None = None
    #: The key's 32 bytes (a str: its UTF-8 bytes, as the AWS CLI's argument).
    sse_c_key: str | bytes | None = None

    def check_customer_key(self) -> None:
        """Checked and normalised (from the options' ``__post_init__``)."""
        if self.sse_c is not None:
            self.sse_c = one_of("--sse-c", self.sse_c, SSE_C_KINDS)
        self.sse_c_key = checked_key("--sse-c", self.sse_c, self.sse_c_key)

    def customer_headers(self) -> list[tuple[str, str]]:
        """The SSE-C headers (none without ``sse_c``)."""
        if self.sse_c is None:
            return []
        assert isinstance(self.sse_c_key, bytes)
        return customer_key_headers(self.sse_c, self.sse_c_key)


@dataclass(kw_only=True)
class PutOptions(CustomerKey):
    """How a new object is stored: see the module's notes."""

    content_type: str | None = None
    #: Content-Type guessed from the file's name when none is given (the AWS
    #: CLI's default; False: its ``--no-guess-mime-type``).
    guess_mime_type: bool = True
    cache_control: str | None = None
    content_disposition: str | None = None
    content_encoding: str | None = None
    content_language: str | None = None
    #: When a cache should stop using the object: a datetime, or a time as
    #: :func:`http_date` reads it.
    expires: str | datetime | None = None
    #: User metadata (``x-amz-meta-NAME: value``), by NAME.
    metadata: Mapping[str, str] = field(default_factory=dict)
    storage_class: str | None = None
    acl: str | None = None
    sse: str | None = None
    sse_kms_key_id: str | None = None
    #: The checksum each body is sent with, which the server checks before it
    #: stores it: CRC32 (None: the default), CRC32C, SHA1, SHA256, CRC64NVME
    #: (the last two of a package that computes them: crc32c, awscrt).
    checksum_algorithm: str | None = None

    def check_put_options(self) -> None:
        """Checked and normalised (from the options' ``__post_init__``)."""
        self.check_customer_key()
        if self.storage_class is not None:
            self.storage_class = one_of("--storage-class", self.storage_class, STORAGE_CLASSES)
        if self.acl is not None:
            self.acl = one_of("--acl", self.acl, CANNED_ACLS)
        if self.sse is not None:
            self.sse = one_of("--sse", self.sse, SSE_KINDS)
        if self.sse_kms_key_id is not None and not (self.sse or "").startswith("aws:kms"):
            raise UsageError("--sse-kms-key-id needs --sse aws:kms")
        if self.sse is not None and self.sse_c is not None:
            raise UsageError("--sse and --sse-c: one or the other")
        if self.expires is not None:
            self.expires = http_date(self.expires)
        if self.checksum_algorithm is not None:
            self.checksum_algorithm = one_of(
                "--checksum-algorithm", self.checksum_algorithm, CHECKSUM_ALGORITHMS
            )
            from surge.s3.checksums import ALGORITHMS

            if ALGORITHMS[self.checksum_algorithm.lower()] is None:
                raise UsageError(
                    f"--checksum-algorithm {self.checksum_algorithm}: no package here computes"
                    " it (pip install crc32c, or awscrt)"
                )
        for name, value in self.metadata.items():
            if (
                not name
                or not name.isascii()
                or any(c in name for c in " :\r\n")
                or any(c in value for c in "\r\n")
            ):
                raise UsageError(f"--metadata {name!r}: not a header's name and value")
        for name in ("content_type", "cache_control", "content_disposition"):
            value = getattr(self, name)
            if value is not None and any(c in value for c in "\r\n"):
                raise UsageError(f"--{name.replace('_', '-')}: no line breaks")

    def content_type_for(self, name: str | None) -> str | None:
        """The Content-Type of an object made from ``name`` (a file's path or
        a key; None: nothing to guess from)."""
        if self.content_type is not None or not self.guess_mime_type or name is None:
            return self.content_type
        import mimetypes  # here: a download needs none

        return mimetypes.guess_type(name)[0]

    def metadata_headers(self, name: str | None) -> list[tuple[str, str]]:
        """The object's metadata as headers (lower-case names)."""
        headers = [(f"x-amz-meta-{key.lower()}", value) for key, value in self.metadata.items()]
        plain = (
            ("content-type", self.content_type_for(name)),
            ("cache-control", self.cache_control),
            ("content-disposition", self.content_disposition),
            ("content-encoding", self.content_encoding),
            ("content-language", self.content_language),
            ("expires", self.expires),
        )
        headers += [(header, str(value)) for header, value in plain if value is not None]
        return headers

    def storage_headers(self) -> list[tuple[str, str]]:
        """How the object is stored (class, ACL, encryption) as headers."""
        headers = [
            (header, value)
            for header, value in (
                ("x-amz-storage-class", self.storage_class),
                ("x-amz-acl", self.acl),
                ("x-amz-server-side-encryption", self.sse),
                ("x-amz-server-side-encryption-aws-kms-key-id", self.sse_kms_key_id),
            )
            if value is not None
        ]
        return headers + self.customer_headers()

    def object_headers(self, name: str | None, *, metadata: bool = True) -> list[tuple[str, str]]:
        """The headers of the request that makes the object (lower-case names,
        sorted): its metadata (``metadata`` False: a copy that keeps the
        source's) and how it is stored."""
        headers = self.storage_headers()
        if metadata:
            headers += self.metadata_headers(name)
        return sorted(headers)
