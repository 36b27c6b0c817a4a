"""One object's requests: signed HEAD and (ranged) GET, the body streamed to a
sink as it arrives; PUT and the multipart calls (Create, UploadPart,
Complete, Abort), the body read from the file as it is sent; each retried as
the shared retry policy says, each signed by :class:`surge.s3.sigv4.Signer`.

A GET hands its body to a :class:`Sink` chunk by chunk (bounded memory: the
connection's read-ahead, never the object).  A retried GET starts the sink
again (``begin``) and sends the whole range again: a part is small enough
(8 MiB by default) that resuming inside it is not worth the bookkeeping.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote

from surge.errors import LocalResourceError, RequestError, S3Error, UsageError
from surge.http.client import AsyncClient
from surge.http.response import Headers, Response
from surge.http.timeout import Timeout
from surge.retry import RetryPolicy, retry_after_seconds
from surge.s3.config import Target, followed
from surge.s3.parse import parse_error, unescape
from surge.s3.region import redirect, region_note
from surge.s3.sigv4 import EMPTY_SHA256, UNSIGNED_PAYLOAD, canonical_query

#: Statuses and codes worth another try: as the listing's (botocore's list).
RETRY_STATUSES = frozenset({500, 502, 503, 504})
RETRY_CODES = frozenset({"SlowDown", "InternalError", "RequestTimeout", "ServiceUnavailable"})
#: The error code a HEAD's bare status stands for (a HEAD has no error document).
STATUS_CODES = {
    301: "PermanentRedirect",
    400: "BadRequest",
    403: "AccessDenied",
    404: "NoSuchKey",
    412: "PreconditionFailed",
    416: "InvalidRange",
}
#: Codes whose message is made to name the key (S3's own says only "Access Denied.").
_NAMING_THE_KEY = frozenset({"AccessDenied", "AllAccessDisabled", "InvalidObjectState"})
#: A body that ended short of its Content-Length without a transport error:
#: retried like a reset connection.
INCOMPLETE = "IncompleteBody"


def object_path(target: Target, key: str) -> str:
    """The URI-encoded path of ``key`` in the target's bucket (``/`` kept, every
    other byte but A-Z a-z 0-9 - _ . ~ escaped: a ``+`` is %2B, a space %20)."""
    return target.path.rstrip("/") + "/" + quote(key, safe="/-_.~")


class Sink(Protocol):
    """Where a GET's body goes.  ``write`` may return an awaitable: the GET waits
    for it before it takes the next chunk (the connection's read-ahead then
    fills, and it stops reading: back-pressure from a sink whose disk is slow)."""

    async def begin(self, response: Response) -> None:
        """A 200/206 arrived (again, on a retry: start over); raise to refuse it."""

    def write(self, chunk: bytes) -> Awaitable[None] | None: ...

    async def end(self) -> None:
        """The body is complete (and, for a file, written); raise
        :class:`S3Error` if it is not what it should be."""


class _Tries:
    """One request's tries so far, and whether it was redirected to the
    bucket's region already (once at most, as botocore)."""

    __slots__ = ("count", "redirected")

    def __init__(self) -> None:
        self.count = 0
        self.redirected = False


class Objects:
    """Object requests for one bucket over a shared :class:`AsyncClient`.

    Every request is retried as ``policy`` says, each try bounded by the
    client's timeouts (connect, read, the whole ``max_time``); a request
    signed for the wrong region is signed again for the bucket's
    (:mod:`surge.s3.region`), and ``target`` then stays there."""

    def __init__(self, target: Target, client: AsyncClient, policy: RetryPolicy) -> None:
        self.target = target
        self.client = client
        self.policy = policy
        self.requests = 0
        self.retries = 0

    def url(self, key: str) -> tuple[str, str]:
        path = object_path(self.target, key)
        return path, f"{self.target.base_url}{path}"

    def _signed(
        self,
        method: str,
        path: str,
        query: str = "",
        amz: Sequence[tuple[str, str]] = (),
        payload_hash: str = EMPTY_SHA256,
    ) -> list[tuple[str, str]]:
        """The request's headers: ``amz`` (lower-case names, every one signed)
        and the signature; ``amz`` alone when anonymous."""
        signer = self.target.signer
        if signer is None:
            return list(amz)
        return signer.sign(
            method,
            self.target.host,
            path,
            query,
            datetime.now(UTC),
            headers=amz,
            payload_hash=payload_hash,
        )

    def _error(
        self, code: str, message: str, status: int | None, key: str | None = None
    ) -> S3Error:
        message = region_note(self.target, status, code, message)
        if key is not None and code in _NAMING_THE_KEY and repr(key) not in message:
            message = f"{message} (key {key!r})"
        return S3Error(code, message, status=status, bucket=self.target.bucket)

    async def head(self, key: str, *, checksums: bool = True, part: int | None = None) -> Headers:
        """The object's headers (HeadObject); checksums asked for unless told
        not; ``part``: those of that part of a multipart object (its length,
        Content-Range and checksum, where the server keeps them)."""
        amz = [("x-amz-checksum-mode", "ENABLED")] if checksums else []
        query = "" if part is None else canonical_query({"partNumber": str(part)})
        tries = _Tries()
        while True:
            self.target = followed(self.target)
            path, url = self.url(key)
            self.requests += 1
            try:
                response = await self.client.request(
                    "HEAD",
                    f"{url}?{query}" if query else url,
                    headers=self._signed("HEAD", path, query, amz=amz),
                )
            except RequestError as e:
                await self._after_request_error(e, tries, key)
                continue
            status = response.status
            if status == 200 or (status == 206 and part is not None):  # a part: MinIO's 206
                return response.headers
            if await self._redirected(status, None, response.headers, b"", tries, head=True):
                continue
            if status in RETRY_STATUSES:
                tries.count += 1
                if await self._pause(tries, retry_after_seconds(response.header("retry-after"))):
                    continue
            code = STATUS_CODES.get(status, f"HTTP{status}")
            raise self._error(code, _status_message(status, key), status, key)

    async def get(
        self,
        key: str,
        sink: Sink,
        *,
        first: int | None = None,
        last: int | None = None,
        if_match: str | None = None,
        checksums: bool = False,
    ) -> None:
        """GET the object (bytes ``first``..``last`` inclusive, if given) into ``sink``."""
        amz = [("x-amz-checksum-mode", "ENABLED")] if checksums else []
        plain: list[tuple[str, str]] = []
        if first is not None:
            plain.append(("Range", f"bytes={first}-{'' if last is None else last}"))
        if if_match is not None:
            plain.append(("If-Match", if_match))
        tries = _Tries()
        while True:
            self.target = followed(self.target)
            path, url = self.url(key)
            self.requests += 1
            headers = self._signed("GET", path, amz=amz) + plain
            error_body = b""
            try:
                async with self.client.stream("GET", url, headers=headers) as response:
                    status = response.status
                    if status in (200, 206):
                        await sink.begin(response)
                        async for chunk in response.aiter_raw():
                            wait = sink.write(chunk)
                            if wait is not None:
                                await wait
                        await sink.end()
                        return
                    error_body = await response.aread()
            except RequestError as e:
                await self._after_request_error(e, tries, key)
                continue
            except LocalResourceError as e:  # out of descriptors: this machine's, a failure line
                raise self._error("LocalError", str(e), None) from e
            except S3Error as e:
                if e.code != INCOMPLETE:
                    raise
                tries.count += 1
                if await self._pause(tries):
                    continue
                raise
            await self._after_error_answer(key, response, error_body, tries)

    # -- uploads --------------------------------------------------------------------

    async def put(
        self,
        key: str,
        body: Callable[[], Any],
        *,
        md5: bytes | None = None,
        crc32: str | None = None,
        content_type: str | None = None,
    ) -> Headers:
        """PutObject: ``body()`` (made afresh for each try: bytes or a
        :class:`FileRange`), with its Content-MD5 and x-amz-checksum-crc32 if
        given (a server that checks them refuses a body that is not those
        bytes).  The response's headers (the checksum echoed, where checked)."""
        plain = _body_headers(md5, content_type)
        amz = [("x-amz-checksum-crc32", crc32)] if crc32 else []
        response = await self._call("PUT", key, body=body, plain=plain, amz=amz)
        return response.headers

    async def create_multipart(
        self, key: str, *, content_type: str | None = None, crc32: bool = False
    ) -> str:
        """CreateMultipartUpload: the upload's id.  ``crc32``: the parts carry
        their CRC-32s, and the object its own (S3's FULL_OBJECT type)."""
        plain = _body_headers(None, content_type)
        amz = [("x-amz-checksum-algorithm", "CRC32"), ("x-amz-checksum-type", "FULL_OBJECT")]
        response = await self._call(
            "POST", key, params={"uploads": ""}, plain=plain, amz=amz if crc32 else ()
        )
        upload_id = _element(response.body, "UploadId")
        if not upload_id:
            raise self._error("InvalidResponse", "no UploadId in the answer", response.status)
        return upload_id

    async def upload_part(
        self,
        key: str,
        upload_id: str,
        number: int,
        body: Callable[[], Any],
        md5: bytes | None,
        crc32: str | None = None,
    ) -> Headers:
        """UploadPart: the response's headers (ETag; the checksum echoed, where checked)."""
        params = {"partNumber": str(number), "uploadId": upload_id}
        amz = [("x-amz-checksum-crc32", crc32)] if crc32 else []
        response = await self._call(
            "PUT", key, params=params, body=body, plain=_body_headers(md5, None), amz=amz
        )
        if not response.header("etag"):
            raise self._error("InvalidResponse", f"no ETag for part {number}", response.status)
        return response.headers

    async def complete_multipart(
        self,
        key: str,
        upload_id: str,
        parts: Sequence[tuple[int, str, str | None]],
        crc32: str | None = None,
    ) -> tuple[str, str | None]:
        """CompleteMultipartUpload of ``parts`` ((number, ETag, CRC-32 or None),
        in order), with the whole object's CRC-32 if given (the server checks
        it against the parts').  The object's ETag and the CRC-32 the server
        answers (None: it says none)."""
        from html import escape  # here: only multipart uploads need it

        document = "".join(
            f"<Part><PartNumber>{number}</PartNumber><ETag>{escape(etag, quote=False)}</ETag>"
            + (f"<ChecksumCRC32>{checksum}</ChecksumCRC32>" if checksum else "")
            + "</Part>"
            for number, etag, checksum in parts
        )
        body = f"<CompleteMultipartUpload>{document}</CompleteMultipartUpload>".encode()
        amz = []
        if crc32:
            amz = [("x-amz-checksum-crc32", crc32), ("x-amz-checksum-type", "FULL_OBJECT")]
        response = await self._call(
            "POST",
            key,
            params={"uploadId": upload_id},
            body=lambda: body,
            payload_hash=hashlib.sha256(body).hexdigest(),
            plain=[("Content-Type", "application/xml")],
            amz=amz,
        )
        etag = _element(response.body, "ETag")
        if not etag:  # no object said to be made: never taken for a success
            raise self._error(
                "InvalidResponse",
                "CompleteMultipartUpload answered 2xx without the object's ETag",
                response.status,
            )
        return etag, _element(response.body, "ChecksumCRC32")

    async def delete(self, key: str) -> None:
        """DeleteObject (a sync's --delete)."""
        await self._call("DELETE", key)

    async def abort_multipart(
        self, key: str, upload_id: str, *, within: float | None = None
    ) -> None:
        """AbortMultipartUpload (an upload already gone is aborted); ``within``:
        seconds for all of it, retries included (an interrupted run's bound)."""
        try:
            await self._call("DELETE", key, params={"uploadId": upload_id}, within=within)
        except S3Error as e:
            if e.code != "NoSuchUpload":
                raise

    async def _call(
        self,
        method: str,
        key: str,
        *,
        params: dict[str, str] | None = None,
        plain: Sequence[tuple[str, str]] = (),
        body: Callable[[], Any] | None = None,
        payload_hash: str | None = None,
        amz: Sequence[tuple[str, str]] = (),
        within: float | None = None,
    ) -> Response:
        """One request of the object, retried as the policy says (5xx, SlowDown,
        transient transport errors): its 2xx response, body read (a document, or
        nothing), or :class:`S3Error`.  A body is not hashed into the signature
        unless ``payload_hash`` says its hash (UNSIGNED-PAYLOAD).  ``within``:
        seconds for every try and pause (else each try has the client's)."""
        query = canonical_query(params) if params else ""
        if payload_hash is None:
            payload_hash = EMPTY_SHA256 if body is None else UNSIGNED_PAYLOAD
        tries = _Tries()
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        while True:
            self.target = followed(self.target)
            path, url = self.url(key)
            if query:
                url = f"{url}?{query}"
            self.requests += 1
            headers = self._signed(method, path, query, amz, payload_hash) + list(plain)
            timeout = None
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    raise self._error("read_timeout", f"no answer within {within:g} s", None, key)
                timeout = Timeout(min(left, self.client.max_time))
            try:
                response = await self.client.request(
                    method,
                    url,
                    headers=headers,
                    content=None if body is None else body(),
                    timeout=timeout,
                )
            except RequestError as e:
                await self._after_request_error(e, tries, key, deadline)
                continue
            except UsageError as e:  # the file changed size as it was sent
                raise self._error("LocalError", str(e), None) from e
            except LocalResourceError as e:  # out of descriptors: this machine's, a failure line
                raise self._error("LocalError", str(e), None) from e
            status = response.status
            # CompleteMultipartUpload can answer 200 with an error document, and
            # (S3 documents it) whitespace before it while it works.
            if 200 <= status < 300 and not _is_error_document(response.body):
                return response
            await self._after_error_answer(key, response, response.body, tries, deadline)

    async def _after_request_error(
        self, error: RequestError, tries: _Tries, key: str, deadline: float | None = None
    ) -> None:
        """A request that failed on the way (GET and every other call alike):
        back once the policy's pause is over, or S3Error - whose message says
        how many tries failed."""
        tries.count += 1
        if self.policy.error_worth_retrying(error.error_class) and await self._pause(
            tries, None, deadline
        ):
            return
        detail = error.detail
        if tries.count > 1:
            detail = f"{detail}, after {tries.count} tries"
        raise self._error(error.error_class, detail, error.status, key) from error

    async def _after_error_answer(
        self,
        key: str,
        response: Response,
        body: bytes,
        tries: _Tries,
        deadline: float | None = None,
    ) -> None:
        """An answer that is no success: back at once if it was signed for
        another region than the bucket's (now signed for that one), or after
        the pause if the status or S3's code is worth another try (Retry-After
        honoured); else the S3Error it says."""
        status = response.status
        code, message = parse_error(body)
        if await self._redirected(status, code, response.headers, body, tries):
            return
        if status in RETRY_STATUSES or code in RETRY_CODES:
            tries.count += 1
            retry_after = retry_after_seconds(response.header("retry-after"))
            if await self._pause(tries, retry_after, deadline):
                return
        raise self._error(
            code or STATUS_CODES.get(status, f"HTTP{status}"),
            message or _status_message(status, key),
            status,
            key,
        )

    async def _redirected(
        self,
        status: int,
        code: str | None,
        headers: Headers,
        body: bytes,
        tries: _Tries,
        *,
        head: bool = False,
    ) -> bool:
        """Whether the answer moved the bucket to another region (then the
        request goes again, signed for it, without a pause)."""
        if tries.redirected:
            return False
        moved = await redirect(self.client, self.target, status, code, headers, body, head=head)
        if moved is None:
            return False
        self.target = moved
        tries.redirected = True
        return True

    async def _pause(
        self, tries: _Tries, retry_after: float | None = None, deadline: float | None = None
    ) -> bool:
        time_left = None
        if deadline is not None:
            time_left = deadline - asyncio.get_running_loop().time()
        wait = self.policy.delay(tries.count, retry_after=retry_after, time_left=time_left)
        if wait is None:
            return False
        self.retries += 1
        await asyncio.sleep(wait)
        return True


def _body_headers(md5: bytes | None, content_type: str | None) -> list[tuple[str, str]]:
    headers = []
    if md5 is not None:
        headers.append(("Content-MD5", base64.b64encode(md5).decode("ascii")))
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    return headers


def _is_error_document(body: bytes) -> bool:
    """Whether an answer's root element is ``<Error>`` (after whitespace and an
    XML declaration), however much whitespace comes first."""
    head = body.lstrip()
    if head.startswith(b"<?xml"):
        end = head.find(b"?>")
        head = head[end + 2 :].lstrip() if end >= 0 else b""
    return head.startswith(b"<Error>") or head.startswith(b"<Error ")


def _element(document: bytes, name: str) -> str | None:
    """The text of the first ``<name>`` element of a small S3 answer, unescaped."""
    found = re.search(rb"<%s>([^<]*)</%s>" % (name.encode(), name.encode()), document)
    if found is None:
        return None
    text = found.group(1).decode("utf-8", "replace")
    return unescape(text) if "&" in text else text


def _status_message(status: int, key: str) -> str:
    if status == 404:
        return f"no such key {key!r}"
    if status == 403:
        return f"access denied to key {key!r}"
    if status == 412:
        return "the object changed during the download (its ETag no longer matches)"
    return f"HTTP status {status}"


async def stream_object(
    objects: Objects, key: str, *, part_size: int = 8 * 1024 * 1024
) -> AsyncGenerator[bytes, None]:
    """The object's bytes in order, a ranged GET of ``part_size`` at a time
    (each retried on its own; the ETag pinned with If-Match, so an object
    replaced half-way fails with PreconditionFailed rather than mixing two
    versions).  Memory: two parts at most (the next one's GET is under way
    while this one is taken: :func:`stream_parts`)."""
    head = await objects.head(key, checksums=False)
    async with aclosing(stream_parts(objects, key, head, part_size=part_size)) as parts:
        async for chunks in parts:
            for chunk in chunks:
                yield chunk


async def stream_parts(
    objects: Objects, key: str, head: Mapping[str, str], *, part_size: int
) -> AsyncGenerator[list[bytes], None]:
    """The object that ``head`` (its HEAD's headers) describes, in order, one
    part's chunks at a time: ranged GETs of ``part_size`` pinned to its ETag,
    the next part's under way while the caller takes this one (a stream's
    writes and reads overlap; memory: two parts)."""
    size = int(head.get("content-length") or 0)
    etag = head.get("etag")
    starts = iter(range(0, size, part_size))

    async def fetch(first: int) -> list[bytes]:
        part = _Part(first, min(first + part_size, size) - 1)
        await objects.get(key, part, first=part.first, last=part.last, if_match=etag)
        return part.chunks

    first = next(starts, None)
    pending = asyncio.ensure_future(fetch(first)) if first is not None else None
    try:
        while pending is not None:
            chunks = await pending
            first = next(starts, None)
            pending = asyncio.ensure_future(fetch(first)) if first is not None else None
            yield chunks
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)


class _Part:
    """One range's bytes, kept (for :func:`stream_object`) and length-checked."""

    def __init__(self, first: int, last: int) -> None:
        self.first = first
        self.last = last
        self.chunks: list[bytes] = []
        self.received = 0

    async def begin(self, response: Response) -> None:
        check_range(response, self.first, self.last)
        self.chunks.clear()
        self.received = 0

    def write(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.received += len(chunk)

    async def end(self) -> None:
        want = self.last - self.first + 1
        if self.received != want:
            raise S3Error(INCOMPLETE, f"{self.received} of {want} bytes", status=None, bucket="")


def check_range(response: Response, first: int, last: int, size: int | None = None) -> None:
    """Refuse a response that is not the range asked for: a 206 whose
    Content-Range is another range (or another object size), or a 200 (a
    server that ignores Range) unless it is the whole object and the range was."""
    content_range = response.header("content-range")
    if response.status == 206 and content_range:
        unit, _, rest = content_range.partition(" ")
        span, _, total = rest.partition("/")
        start, _, end = span.partition("-")
        same = unit == "bytes" and start == str(first) and end == str(last)
        if same and (size is None or total == str(size)):
            return
        raise S3Error(
            "InvalidRange",
            f"asked for bytes {first}-{last}"
            + (f" of {size}" if size is not None else "")
            + f", the server sent {content_range!r}",
            status=206,
            bucket="",
        )
    length = response.header("content-length")
    if first == 0 and length is not None and int(length) == last + 1:
        return
    raise S3Error(
        "InvalidRange",
        f"asked for bytes {first}-{last}, the server sent status {response.status}"
        f" with Content-Range {content_range!r}",
        status=response.status,
        bucket="",
    )
