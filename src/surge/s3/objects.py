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
from typing import Any, NamedTuple, Protocol

from surge.errors import LocalResourceError, RequestError, S3Error, UsageError
from surge.http.client import AsyncClient
from surge.http.response import Headers, Response
from surge.http.timeout import Timeout
from surge.retry import RetryPolicy, retry_after_seconds
from surge.s3.config import Target, followed
from surge.s3.parse import Upload, parse_error, parse_uploads, unescape
from surge.s3.region import redirect, region_note
from surge.s3.sigv4 import EMPTY_SHA256, UNSIGNED_PAYLOAD, canonical_query, object_path

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
        #: Sent with each HEAD and GET: an SSE-C object's key (its headers).
        self.reading: list[tuple[str, str]] = []

    def url(self, key: str) -> tuple[str, str]:
        """The key's request path (signed as sent: :func:`sigv4.object_path`,
        the key as given) and its URL."""
        path = object_path(self.target.path, key)
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
        amz = sorted(amz + self.reading)
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
        amz = sorted(amz + self.reading)
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
        checksum: Checksum | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> Headers:
        """PutObject: ``body()`` (made afresh for each try: bytes or a
        :class:`FileRange`), with its Content-MD5 and ``checksum``
        (x-amz-checksum-ALGORITHM) if given (a server that checks them refuses
        a body that is not those bytes), and ``headers``: the object's
        (:mod:`surge.s3.putoptions`).  The response's headers (the checksum
        echoed, where checked)."""
        plain, amz = _split(headers, _body_headers(md5, None))
        amz += _checksum_headers(checksum)
        response = await self._call("PUT", key, body=body, plain=plain, amz=sorted(amz))
        return response.headers

    async def create_multipart(
        self,
        key: str,
        *,
        content_type: str | None = None,
        checksum: str | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> str:
        """CreateMultipartUpload: the upload's id.  ``checksum``: the
        algorithm whose checksums the parts carry (``crc32``: and the object
        its own, S3's FULL_OBJECT type; another: COMPOSITE, S3's default);
        ``headers``: the object's metadata (lower-case names; a copy's, as
        :func:`object_metadata` gives them)."""
        plain, amz = _split(headers, _body_headers(None, content_type))
        if checksum:
            amz.append(("x-amz-checksum-algorithm", checksum.upper()))
            if checksum == "crc32":
                amz.append(("x-amz-checksum-type", "FULL_OBJECT"))
        response = await self._call(
            "POST", key, params={"uploads": ""}, plain=plain, amz=sorted(amz)
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
        checksum: Checksum | None = None,
        *,
        headers: Sequence[tuple[str, str]] = (),
    ) -> Headers:
        """UploadPart: the response's headers (ETag; the checksum echoed, where
        checked); ``headers``: the SSE-C key's, if the object has one."""
        params = {"partNumber": str(number), "uploadId": upload_id}
        plain, amz = _split(headers, _body_headers(md5, None))
        amz += _checksum_headers(checksum)
        response = await self._call(
            "PUT", key, params=params, body=body, plain=plain, amz=sorted(amz)
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
        algorithm: str = "crc32",
    ) -> tuple[str, str | None]:
        """CompleteMultipartUpload of ``parts`` ((number, ETag, checksum of
        ``algorithm`` or None), in order), with the whole object's CRC-32 if
        given (the server checks it against the parts').  The object's ETag
        and the checksum the server answers (None: it says none)."""
        from html import escape  # here: only multipart uploads need it

        element = f"Checksum{algorithm.upper()}"
        document = "".join(
            f"<Part><PartNumber>{number}</PartNumber><ETag>{escape(etag, quote=False)}</ETag>"
            + (f"<{element}>{checksum}</{element}>" if checksum else "")
            + "</Part>"
            for number, etag, checksum in parts
        )
        body = f"<CompleteMultipartUpload>{document}</CompleteMultipartUpload>".encode()
        amz = []
        if crc32:
            amz = [("x-amz-checksum-crc32", crc32), ("x-amz-checksum-type", "FULL_OBJECT")]
        try:
            response = await self._call(
                "POST",
                key,
                params={"uploadId": upload_id},
                body=lambda: body,
                payload_hash=hashlib.sha256(body).hexdigest(),
                plain=[("Content-Type", "application/xml")],
                amz=amz,
            )
        except S3Error as e:
            if e.code != "NoSuchUpload":
                raise
            done = await self._completed_already(key, parts, element)
            if done is None:
                raise
            return done
        etag = _element(response.body, "ETag")
        if not etag:  # no object said to be made: never taken for a success
            raise self._error(
                "InvalidResponse",
                "CompleteMultipartUpload answered 2xx without the object's ETag",
                response.status,
            )
        return etag, _element(response.body, element)

    async def _completed_already(
        self, key: str, parts: Sequence[tuple[int, str, str | None]], element: str
    ) -> tuple[str, str | None] | None:
        """A CompleteMultipartUpload answered NoSuchUpload: a try before it may
        have completed the upload, its answer lost (a reset, a timeout), and a
        retry of a POST that S3 already acted on finds no upload.  Whether the
        object now there is this upload's: its ETag is the one S3 makes of
        these parts (the MD5 of their MD5s, then ``-`` and their count).  That
        object's (ETag, checksum), or None: not this upload's (or parts whose
        ETags are no MD5s, as under SSE-KMS and SSE-C: not knowable)."""
        digests = []
        for _, etag, _ in parts:
            text = etag.strip('"')
            if len(text) != 32:
                return None
            try:
                digests.append(bytes.fromhex(text))
            except ValueError:
                return None
        digest = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
        expected = f'"{digest}-{len(parts)}"'
        try:
            head = await self.head(key)
        except S3Error:
            return None
        if (head.get("etag") or "").lower() != expected:
            return None
        return expected, head.get(f"x-amz-checksum-{element[len('Checksum') :].lower()}")

    # -- copies within the endpoint -------------------------------------------------

    async def copy_object(
        self,
        key: str,
        source: str,
        *,
        replace: Sequence[tuple[str, str]] | None = None,
        if_match: str | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> str:
        """CopyObject of ``source`` (:func:`copy_source`'s) to ``key``: the
        server copies the bytes itself.  ``replace``: the new object's
        metadata (lower-case names; x-amz-metadata-directive REPLACE), else
        the source's is kept (COPY).  The new object's ETag.  A 200 whose
        document is an ``<Error>`` (S3 documents it: a copy can fail after
        its answer began) is that error; one with no ETag is no copy.
        ``headers``: how the new object is stored (class, ACL, encryption;
        the source's SSE-C key), whichever the directive."""
        plain, amz = _split([*(replace or ()), *headers])
        amz.append(("x-amz-copy-source", source))
        if if_match is not None:
            amz.append(("x-amz-copy-source-if-match", if_match))
        amz.append(("x-amz-metadata-directive", "COPY" if replace is None else "REPLACE"))
        response = await self._call("PUT", key, plain=plain, amz=sorted(amz))
        return self._copied(response, "CopyObject")

    async def upload_part_copy(
        self,
        key: str,
        upload_id: str,
        number: int,
        source: str,
        first: int,
        last: int,
        if_match: str | None = None,
        *,
        headers: Sequence[tuple[str, str]] = (),
    ) -> str:
        """UploadPartCopy of bytes ``first``..``last`` of ``source`` as part
        ``number``: its ETag (a 200 with an ``<Error>`` document is that
        error); ``headers``: SSE-C keys (the new object's, the source's)."""
        params = {"partNumber": str(number), "uploadId": upload_id}
        _, amz = _split(headers)
        amz += [
            ("x-amz-copy-source", source),
            ("x-amz-copy-source-range", f"bytes={first}-{last}"),
        ]
        if if_match is not None:
            amz.append(("x-amz-copy-source-if-match", if_match))
        response = await self._call("PUT", key, params=params, amz=sorted(amz))
        return self._copied(response, f"UploadPartCopy of part {number}")

    def _copied(self, response: Response, what: str) -> str:
        etag = _element(response.body, "ETag")
        if not etag:
            raise self._error(
                "InvalidResponse", f"{what} answered 2xx without an ETag", response.status
            )
        return etag

    # -- the bucket itself -----------------------------------------------------------

    async def create_bucket(self) -> None:
        """CreateBucket in the target's region (its LocationConstraint, which
        S3 wants outside us-east-1 and refuses in it)."""
        region = self.target.region
        body = b""
        if region != "us-east-1":
            body = (
                '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
            ).encode()
        await self._call(
            "PUT",
            None,
            body=(lambda: body) if body else None,
            payload_hash=hashlib.sha256(body).hexdigest(),
        )

    async def delete_bucket(self) -> None:
        """DeleteBucket (BucketNotEmpty unless it is empty)."""
        await self._call("DELETE", None)

    async def list_uploads(self, key: str) -> list[Upload]:
        """ListMultipartUploads of the keys starting with ``key`` (one page:
        1,000 uploads), each as the server lists it."""
        params = {"uploads": "", "prefix": key, "encoding-type": "url"}
        response = await self._call("GET", None, params=params)
        return parse_uploads(response.body)

    async def delete(self, key: str, version_id: str | None = None) -> None:
        """DeleteObject (a sync's --delete); with ``version_id``, that version
        (or delete marker) for good."""
        params = None if version_id is None else {"versionId": version_id}
        await self._call("DELETE", key, params=params)

    async def delete_objects(
        self, keys: Sequence[str], versions: Sequence[str | None] | None = None
    ) -> list[KeyError_]:
        """DeleteObjects of ``keys`` (at most 1,000, S3's limit) in Quiet mode:
        the keys the server could not delete, each with its code and message
        (every other key is deleted).  ``versions``: each key's version id
        (None: the key itself), as ``<VersionId>``.  The body goes with its
        Content-MD5 (S3 wants it, or a checksum, on this call) and its SHA-256
        signed; each key is XML-escaped (:func:`xml_key`), bytes as given."""
        if versions is None:
            document = "".join(f"<Object><Key>{xml_key(key)}</Key></Object>" for key in keys)
        else:
            document = "".join(
                f"<Object><Key>{xml_key(key)}</Key>"
                + ("" if version is None else f"<VersionId>{xml_key(version)}</VersionId>")
                + "</Object>"
                for key, version in zip(keys, versions, strict=True)
            )
        body = f"<Delete><Quiet>true</Quiet>{document}</Delete>".encode()
        md5 = hashlib.md5(body, usedforsecurity=False).digest()
        response = await self._call(
            "POST",
            None,
            params={"delete": ""},
            body=lambda: body,
            payload_hash=hashlib.sha256(body).hexdigest(),
            plain=[*_body_headers(md5, None), ("Content-Type", "application/xml")],
        )
        if b"<DeleteResult" not in response.body:  # a 200 that says nothing of the keys
            raise self._error(
                "InvalidResponse", "DeleteObjects answered without a DeleteResult", response.status
            )
        return parse_delete_errors(response.body)

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
        key: str | None,
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
        seconds for every try and pause (else each try has the client's).
        ``key`` None: a request of the bucket itself."""
        query = canonical_query(params) if params else ""
        if payload_hash is None:
            payload_hash = EMPTY_SHA256 if body is None else UNSIGNED_PAYLOAD
        tries = _Tries()
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        while True:
            self.target = followed(self.target)
            if key is None:
                path, url = self.target.path, f"{self.target.base_url}{self.target.path}"
            else:
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
        self, error: RequestError, tries: _Tries, key: str | None, deadline: float | None = None
    ) -> None:
        """A request that failed on the way (GET and every other call alike):
        back once the policy's pause is over, or S3Error - whose message says
        how many tries failed."""
        tries.count += 1
        # As for a GET, whatever the method: S3's POSTs are safe to repeat
        # (DeleteObjects names its keys; a CompleteMultipartUpload repeated
        # after the lost try completed it is confirmed by the object's ETag,
        # _completed_already) - docs/s3.md, "Retries of S3's POSTs".
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
        key: str | None,
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


class KeyError_(NamedTuple):
    """A key that DeleteObjects could not delete, as the server says why."""

    key: str
    code: str
    message: str
    version_id: str | None = None  # the version's, if one was named


#: What XML 1.0 holds as a character (its Char production): a key with any
#: other code point (most C0 controls, U+FFFE, U+FFFF, a lone surrogate) cannot
#: be written in a DeleteObjects document, not even as a character reference.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: Escaped in a key: the markup characters, and the white space an XML parser
#: would otherwise normalise (a CR read as LF; a tab or newline kept only as a
#: reference), and the C1 controls, legal but discouraged.
_XML_ESCAPES = re.compile(r"[&<>\t\n\r\x7f-\x9f]")


def xml_carries(key: str) -> bool:
    """Whether ``key`` can be written in an XML 1.0 document (DeleteObjects')."""
    return _NOT_XML.search(key) is None


def xml_key(key: str) -> str:
    """``key`` as XML character data: ``&``, ``<``, ``>`` as entities, tab,
    newline, CR and the C1 controls as character references, so that the
    server's parser reads back exactly the key's code points."""
    return _XML_ESCAPES.sub(lambda found: f"&#x{ord(found.group()):X};", key)


_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_REFERENCE = re.compile(r"&(#x[0-9A-Fa-f]+|#[0-9]+|amp|lt|gt|quot|apos);")


def _xml_unescaped(found: re.Match[str]) -> str:
    name = found.group(1)
    if name[0] != "#":
        return _ENTITIES[name]
    return chr(int(name[2:], 16) if name[1] in "xX" else int(name[1:]))


def xml_text(raw: bytes) -> str:
    """XML character data as written, its references undone exactly as XML
    reads them (``&#x85;`` is U+0085: not HTML's windows-1252 reading)."""
    text = raw.decode("utf-8", "surrogateescape")
    return _REFERENCE.sub(_xml_unescaped, text) if "&" in text else text


def parse_delete_errors(document: bytes) -> list[KeyError_]:
    """The ``<Error>`` entries of a DeleteResult: (key, code, message) each."""
    errors = []
    for found in re.findall(rb"<Error>.*?</Error>", document, re.DOTALL):
        errors.append(
            KeyError_(
                xml_text(_raw(found, "Key") or b""),
                xml_text(_raw(found, "Code") or b"InternalError"),
                xml_text(_raw(found, "Message") or b""),
                # no version named: none, or empty (MinIO writes <VersionId></VersionId>)
                xml_text(version) if (version := _raw(found, "VersionId")) else None,
            )
        )
    return errors


def copy_source(bucket: str, key: str) -> str:
    """The ``x-amz-copy-source`` of ``bucket``'s ``key``: ``/bucket/key``, the
    key percent-encoded as its request path is (:func:`object_path`: every
    byte as given, as botocore encodes it)."""
    return object_path("/" + bucket, key)


#: What a copy carries of its source's headers (the metadata S3 keeps).
METADATA_HEADERS = (
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-type",
    "expires",
)


def object_metadata(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """An object's metadata from its HEAD: the :data:`METADATA_HEADERS` and
    every ``x-amz-meta-*``, lower-case names, for a new object to carry (a
    multipart copy's CreateMultipartUpload: UploadPartCopy copies bytes only)."""
    items = headers.items()
    return sorted(
        (name.lower(), value)
        for name, value in items
        if name.lower() in METADATA_HEADERS or name.lower().startswith("x-amz-meta-")
    )


#: A body's checksum: (algorithm, as S3 names it in lower case; the value, base64).
Checksum = tuple[str, str]


def _checksum_headers(checksum: Checksum | None) -> list[tuple[str, str]]:
    """The body's checksum, and its algorithm named as botocore names it
    (x-amz-sdk-checksum-algorithm, which S3 takes and moto needs to keep it)."""
    if checksum is None:
        return []
    algorithm, value = checksum
    return [
        (f"x-amz-checksum-{algorithm}", value),
        ("x-amz-sdk-checksum-algorithm", algorithm.upper()),
    ]


def _split(
    headers: Sequence[tuple[str, str]], plain: Sequence[tuple[str, str]] = ()
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``headers`` (lower-case names) as a request's plain ones (after
    ``plain``) and its ``x-amz-*`` ones, which are signed."""
    plain_headers, amz = list(plain), list[tuple[str, str]]()
    for name, value in headers:
        (amz if name.startswith("x-amz-") else plain_headers).append((name, value))
    return plain_headers, amz


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
    raw = _raw(document, name)
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    return unescape(text) if "&" in text else text


def _raw(document: bytes, name: str) -> bytes | None:
    """The bytes of the first ``<name>`` element, as written."""
    found = re.search(rb"<%s>([^<]*)</%s>" % (name.encode(), name.encode()), document)
    return found.group(1) if found is not None else None


def _status_message(status: int, key: str | None) -> str:
    if key is None:  # a request of the bucket
        return f"HTTP status {status}"
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
