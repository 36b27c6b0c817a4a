"""What a downloaded object is checked against: its length, the MD5 in a
single-part ETag, and the ``x-amz-checksum-*`` the server keeps for it.

* Length: always (Content-Length, and Content-Range for a part).
* MD5: when the ETag is 32 hex digits (a single-part upload's ETag is the MD5
  of the bytes), unless the object is encrypted with SSE-KMS or SSE-C, whose
  ETags are not MD5s - the AWS CLI skips those too.  A multipart ETag
  (``<hex>-<parts>``) is the MD5 of the parts' MD5s: not checked.
* ``x-amz-checksum-*`` (asked for with ``x-amz-checksum-mode: ENABLED``): the
  full-object ones - CRC32 (zlib), SHA1 and SHA256 (hashlib) always; CRC32C and
  CRC64NVME when a package that computes them is installed (``crc32c``, or
  ``awscrt``, botocore's own optional accelerator), otherwise skipped and
  counted as unverified.  A composite checksum (``<base64>-<parts>``, or
  ``x-amz-checksum-type: COMPOSITE``) is a checksum of the parts' checksums:
  not checked.

A :class:`Digest` is fed the bytes in order: as they arrive for an object read
in one stream, or by reading the finished file back for one read in parallel
ranges (a whole-object MD5 or CRC cannot be assembled from out-of-order parts).
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

_MD5_ETAG = re.compile(r'"?([0-9a-fA-F]{32})"?')


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


@dataclass(frozen=True)
class Expected:
    """What an object's response says its bytes are."""

    size: int
    md5: str | None = None  # hex, from a single-part ETag
    checksum: tuple[str, str] | None = None  # (algorithm, base64 value)
    #: Why something could not be checked (an algorithm no package here computes).
    unchecked: str | None = None

    @classmethod
    def from_headers(cls, size: int, headers: Mapping[str, str]) -> Expected:
        """``headers``: a case-insensitive mapping (the response's headers)."""
        md5 = None
        match = _MD5_ETAG.fullmatch(headers.get("etag", "") or "")
        encryption = (headers.get("x-amz-server-side-encryption") or "").lower()
        customer_key = headers.get("x-amz-server-side-encryption-customer-algorithm")
        if match and not encryption.startswith("aws:kms") and not customer_key:
            md5 = match.group(1).lower()
        checksum = None
        unchecked = None
        composite = (headers.get("x-amz-checksum-type") or "").upper() == "COMPOSITE"
        for algorithm, factory in ALGORITHMS.items():
            value = headers.get(f"x-amz-checksum-{algorithm}")
            if not value or composite or "-" in value:
                continue
            if factory is None:
                unchecked = f"no {algorithm} package installed"
                continue
            checksum = (algorithm, value)
            break
        if checksum is not None:
            unchecked = None
        return cls(size, md5, checksum, unchecked)

    @property
    def verifiable(self) -> bool:
        """True if more than the length can be checked."""
        return self.md5 is not None or self.checksum is not None


class Digest:
    """The running hashes an :class:`Expected` needs, fed the bytes in order."""

    def __init__(self, expected: Expected) -> None:
        self.expected = expected
        self.md5: Any = None
        self.checksum: _Hasher | None = None
        if expected.checksum is not None:
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


def file_mismatch(fd: int, expected: Expected) -> str | None:
    """Hash the file open at ``fd`` (from offset 0) as :meth:`Digest.mismatch`.
    Blocking: run it in a thread."""
    import os

    digest = Digest(expected)
    offset = 0
    while offset < expected.size:
        block = os.pread(fd, min(READ_BLOCK, expected.size - offset), offset)
        if not block:
            return f"the file ends at {offset} of {expected.size} bytes"
        digest.update(block)
        offset += len(block)
    return digest.mismatch()
