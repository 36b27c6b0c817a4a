"""What a downloaded object is checked against: its length, the MD5 in a
single-part ETag, and the ``x-amz-checksum-*`` the server keeps for it.

* Length: always (Content-Length, and Content-Range for a part).
* MD5: when the ETag is 32 hex digits (a single-part upload's ETag is the MD5
  of the bytes), unless the object is encrypted with SSE-KMS or SSE-C, whose
  ETags are not MD5s - the AWS CLI skips those too.  A multipart ETag
  (``<hex>-<parts>``) is the MD5 of the parts' MD5s: not checked.
* ``x-amz-checksum-*`` (asked for with ``x-amz-checksum-mode: ENABLED``):
  CRC32 (zlib), SHA1 and SHA256 (hashlib) always; CRC32C and CRC64NVME when a
  package that computes them is installed (``crc32c``, or ``awscrt``,
  botocore's own optional accelerator), otherwise skipped and counted as
  unverified.

A checksum is of one of two kinds, and a check may fail only when surge
knows which (:attr:`Expected.kind`):

* ``full``: of the whole object's bytes - ``x-amz-checksum-type:
  FULL_OBJECT``, or any checksum of an object uploaded in one piece (its ETag
  has no ``-N``: one part, both kinds are the same).
* ``composite``: the checksum of the parts' checksums, one after another -
  ``x-amz-checksum-type: COMPOSITE``, or a value ending in ``-N``.  Checked
  part by part: the server's part layout (a HEAD with ``partNumber`` gives
  each part's length and, where the server keeps it, its checksum), each
  part's checksum computed from the file, compared with the server's where it
  gives one, and combined into the composite.
* ``unknown``: a checksum with neither a type nor a suffix on a multipart
  object (ETag ``<hex>-N``) - moto's HEAD answers so for a composite one.  It
  passes if the bytes match it as either kind; if neither can be shown, the
  object is checked by its size alone (``--debug`` says so), never failed.

A :class:`Digest` is fed the bytes in order: as they arrive for an object read
in one stream, or by reading the finished file back for one read in parallel
ranges (a whole-object MD5 or CRC cannot be assembled from out-of-order parts).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
_MD5_ETAG = re.compile(r'"?([0-9a-fA-F]{32})"?')
#: A multipart upload's ETag: ``<hex>-<parts>``.
_PARTS_ETAG = re.compile(r'"?[^"\-]+-([0-9]{1,5})"?')


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


class _Crc:
    """A running CRC as hashlib's interface: ``update`` and a big-endian ``digest``."""

    def __init__(self, function: Callable[[bytes, int], int], width: int) -> None:
        self.function = function
        self.width = width
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = self.function(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(self.width, "big")


def _crc32_functions() -> tuple[Callable[[Any, int], int], Callable[[int, int, int], int]]:
    """CRC-32 (zlib's) and its combination of two runs: ISA-L's (python-isal,
    the ``warc`` extra) when installed - 0.12 s of CPU per GB here against
    zlib's 0.53 and MD5's 1.64 - else zlib's, and the combination in Python."""
    try:
        from isal import isal_zlib

        return isal_zlib.crc32, isal_zlib.crc32_combine
    except ImportError:  # pragma: no cover - isal is installed where tests run
        return zlib.crc32, _crc32_combine


def _multiply(a: int, b: int) -> int:
    """a * b modulo the CRC-32 polynomial (reflected), as zlib's multmodp."""
    product = 0
    bit = 1 << 31
    while True:
        if a & bit:
            product ^= b
            if a & (bit - 1) == 0:
                return product
        bit >>= 1
        b = (b >> 1) ^ 0xEDB88320 if b & 1 else b >> 1


#: x^(2^k) modulo the polynomial, for k in 0..31 (zlib's x2n_table).
_X2N = [1 << 30]
for _ in range(31):
    _X2N.append(_multiply(_X2N[-1], _X2N[-1]))


def _crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A + B from A's, B's and B's length (zlib's crc32_combine)."""
    power = 1 << 31  # x^0
    k = 3  # x^(8 * length2): bytes to bits
    while length2:
        if length2 & 1:
            power = _multiply(_X2N[k & 31], power)
        length2 >>= 1
        k += 1
    return _multiply(power, crc1) ^ crc2


crc32, crc32_combine = _crc32_functions()


def crc32_header(value: int) -> str:
    """A CRC-32 as S3's x-amz-checksum-crc32 says it: base64 of 4 big-endian bytes."""
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def _crc32c_function() -> Callable[[bytes, int], int] | None:
    try:
        import crc32c  # type: ignore[import-not-found]

        return lambda data, value: int(crc32c.crc32c(data, value))
    except ImportError:
        pass
    try:
        from awscrt import checksums  # type: ignore[import-not-found]

        return lambda data, value: int(checksums.crc32c(data, value))
    except ImportError:
        return None


def _crc64nvme_function() -> Callable[[bytes, int], int] | None:
    try:
        from awscrt import checksums

        return lambda data, value: int(checksums.crc64nvme(data, value))
    except (ImportError, AttributeError):
        return None


def _factories() -> dict[str, Callable[[], _Hasher] | None]:
    crc32c = _crc32c_function()
    crc64 = _crc64nvme_function()
    return {
        "crc32": lambda: _Crc(crc32, 4),
        "crc32c": (lambda: _Crc(crc32c, 4)) if crc32c else None,
        "crc64nvme": (lambda: _Crc(crc64, 8)) if crc64 else None,
        "sha1": hashlib.sha1,
        "sha256": hashlib.sha256,
    }


#: The checksum algorithms S3 names, and how to compute each here (None: no
#: package installed computes it).
ALGORITHMS: dict[str, Callable[[], _Hasher] | None] = _factories()


#: Kinds of checksum (see the module's notes).
FULL, COMPOSITE, UNKNOWN = "full", "composite", "unknown"


@dataclass(frozen=True)
class Expected:
    """What an object's response says its bytes are."""

    size: int
    md5: str | None = None  # hex, from a single-part ETag
    #: (algorithm, base64 value without any ``-N``)
    checksum: tuple[str, str] | None = None
    #: Why something could not be checked (an algorithm no package here computes).
    unchecked: str | None = None
    #: The checksum's kind: FULL, COMPOSITE or UNKNOWN.
    kind: str = FULL
    #: Parts of a multipart object, as its ETag or checksum says (None: one, or not said).
    parts: int | None = None

    @classmethod
    def from_headers(cls, size: int, headers: Mapping[str, str]) -> Expected:
        """``headers``: a case-insensitive mapping (the response's headers)."""
        md5 = None
        etag = headers.get("etag", "") or ""
        match = _MD5_ETAG.fullmatch(etag)
        encryption = (headers.get("x-amz-server-side-encryption") or "").lower()
        customer_key = headers.get("x-amz-server-side-encryption-customer-algorithm")
        if match and not encryption.startswith("aws:kms") and not customer_key:
            md5 = match.group(1).lower()
        multipart = _PARTS_ETAG.fullmatch(etag)
        parts = int(multipart.group(1)) if multipart else None
        checksum = None
        unchecked = None
        kind = FULL
        said = (headers.get("x-amz-checksum-type") or "").upper()
        for algorithm, factory in ALGORITHMS.items():
            value = headers.get(f"x-amz-checksum-{algorithm}")
            if not value:
                continue
            if factory is None:
                unchecked = f"no {algorithm} package installed"
                continue
            value, dash, count = value.partition("-")
            if said == "COMPOSITE" or dash:
                kind = COMPOSITE
                if count.isdigit():
                    parts = int(count)
            elif said == "FULL_OBJECT" or parts is None:
                kind = FULL
            else:
                kind = UNKNOWN  # a multipart object, and nothing says which kind
            checksum = (algorithm, value)
            break
        if checksum is not None:
            unchecked = None
        return cls(size, md5, checksum, unchecked, kind, parts)

    @property
    def verifiable(self) -> bool:
        """True if more than the length can be checked."""
        return self.md5 is not None or self.checksum is not None

    @property
    def whole(self) -> bool:
        """Whether the checksum may be of the whole object's bytes (computed as
        they come): a full-object one, or one of unknown kind."""
        return self.checksum is not None and self.kind != COMPOSITE


class Digest:
    """The running hashes an :class:`Expected` needs, fed the bytes in order."""

    def __init__(self, expected: Expected) -> None:
        self.expected = expected
        self.md5: Any = None
        self.checksum: _Hasher | None = None
        if expected.whole:
            assert expected.checksum is not None
            # One check, the server's checksum rather than the MD5 when it has
            # both: a CRC-32 costs a tenth of an MD5's CPU.
            factory = ALGORITHMS[expected.checksum[0]]
            assert factory is not None
            self.checksum = factory()
        elif expected.md5:
            self.md5 = hashlib.md5(usedforsecurity=False)

    def update(self, data: bytes | memoryview) -> None:
        if self.md5 is not None:
            self.md5.update(data)
        if self.checksum is not None:
            self.checksum.update(bytes(data) if isinstance(data, memoryview) else data)

    def mismatch(self) -> str | None:
        """None if the bytes are what the server said, else what differs."""
        expected = self.expected
        if self.md5 is not None and self.md5.hexdigest() != expected.md5:
            return f"MD5 {self.md5.hexdigest()} is not the ETag's {expected.md5}"
        if self.checksum is not None and expected.checksum is not None:
            algorithm, value = expected.checksum
            got = base64.b64encode(self.checksum.digest()).decode("ascii")
            if got != value:
                return f"{algorithm.upper()} {got} is not the server's {value}"
        return None


#: Bytes read at a time when a finished file is hashed.
READ_BLOCK = 1024 * 1024


def blocks(
    fd: int, offset: int, length: int, stop: threading.Event | None = None
) -> Iterator[bytes]:
    """``length`` bytes of the file open at ``fd`` from ``offset``, a block at a
    time (``os.pread``: the descriptor's offset untouched); OSError if the file
    ends first, or once ``stop`` is set.  Blocking: in a thread (:func:`off_loop`)
    for more than a little."""
    end = offset + length
    while offset < end:
        if stop is not None and stop.is_set():
            raise OSError("stopped: the run was interrupted")
        block = os.pread(fd, min(READ_BLOCK, end - offset), offset)
        if not block:
            raise OSError(f"the file ended at {offset:,} of {end:,} bytes while it was read")
        yield block
        offset += len(block)


async def off_loop(work: Callable[..., T], *args: Any) -> T:
    """``work(*args, stop=...)`` in a thread, awaited.  If the awaiting task is
    cancelled (Ctrl-C), ``stop`` is set and the work ends at its next block:
    a read of gigabytes would otherwise hold the interpreter's exit, which
    waits for its threads."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(work, *args, stop=stop)
    except asyncio.CancelledError:
        stop.set()
        raise


def part_digests(
    fd: int, algorithm: str, lengths: list[int], stop: threading.Event | None = None
) -> list[bytes]:
    """Each part's checksum (raw bytes) of the file open at ``fd``, its parts
    ``lengths`` long one after another from offset 0.  Blocking: a thread."""
    factory = ALGORITHMS[algorithm]
    assert factory is not None
    digests = []
    offset = 0
    for length in lengths:
        hasher = factory()
        for block in blocks(fd, offset, length, stop):
            hasher.update(block)
        offset += length
        digests.append(hasher.digest())
    return digests


def composite(algorithm: str, digests: list[bytes]) -> str:
    """S3's composite checksum of parts with these checksums (raw bytes): the
    checksum of their concatenation, base64, without the ``-N``."""
    factory = ALGORITHMS[algorithm]
    assert factory is not None
    hasher = factory()
    hasher.update(b"".join(digests))
    return base64.b64encode(hasher.digest()).decode("ascii")


def file_mismatch(fd: int, expected: Expected, stop: threading.Event | None = None) -> str | None:
    """Hash the file open at ``fd`` (from offset 0) as :meth:`Digest.mismatch`.
    Blocking: run it in a thread."""
    digest = Digest(expected)
    for block in blocks(fd, 0, expected.size, stop):
        digest.update(block)
    return digest.mismatch()
