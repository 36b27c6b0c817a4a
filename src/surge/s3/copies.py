"""Copies between buckets: ``surge s3 cp|sync s3://a/... s3://b/...`` and
:func:`copy`, by the server itself - no byte travels through this process.

    summary = surge.s3.copy("s3://a/logs/", "s3://b/logs/", recursive=True)

How it runs (an upload's shape, :mod:`surge.s3.uploads`, whose machinery it
reuses: the same slots, multipart upload, aborts and summary):

* The source is listed (a recursive copy: the fast parallel lister; one
  object: a HEAD), filtered as a download's, and each object copied as it
  comes, ``concurrency`` requests in flight.
* An object up to ``multipart_threshold`` (8 MiB) is one CopyObject, the
  source named by ``x-amz-copy-source`` (``/bucket/key``, the key
  percent-encoded exactly as its request path: bytes as given).  A bigger one
  is a multipart upload whose parts are UploadPartCopy ranges of the part
  size, in parallel, each pinned to the source's ETag
  (``x-amz-copy-source-if-match``: an object replaced mid-way fails, never
  mixes), completed in order; aborted if anything fails or the run is
  interrupted.
* Metadata, as the AWS CLI's ``--metadata-directive``: COPY (the default)
  keeps the source's (Content-Type, Cache-Control, Content-Disposition,
  Content-Encoding, Content-Language, Expires, ``x-amz-meta-*``; a multipart
  copy carries them from the source's HEAD into CreateMultipartUpload, as
  UploadPartCopy copies bytes only: the AWS CLI v1 loses them there, v2
  carries them too); REPLACE gives the new object the ``content_type`` (none
  guessed, as the AWS CLI's copies: S3 then says binary/octet-stream) and
  the ``metadata`` given.
* A CopyObject or UploadPartCopy that answers 200 with an ``<Error>``
  document (S3 documents it: the copy failed after the answer began) is that
  error, a failure like any other.
* Both buckets on one endpoint, signed with one set of credentials: the
  server copies.  The source on another endpoint, or readable with other
  credentials (``source_endpoint_url``, ``source_region``,
  ``source_profile``, ``source_credentials``; the CLI's ``--source-*``
  flags), no server can copy it: the bytes are *relayed* through this
  process, and the CLI says so in one line.  Each object (or part of the
  part size) is one ranged GET of the source pinned with If-Match to the
  ETag it was listed with (an object replaced mid-way fails: 412
  PreconditionFailed, never a mix), held in memory only until its PutObject
  (or UploadPart) is answered, sent with its CRC-32 and checked as an
  upload's (:mod:`surge.s3.uploads`); a single GET's bytes are checked
  against the source's ETag where that is their MD5.  A part holds its
  request slot from its GET to its upload's answer, so the bytes held at
  once are at most ``concurrency`` x the part size (or the multipart
  threshold, if bigger), and at most ``relay_memory`` (:data:`RELAY_MEMORY`,
  256 MiB: the default slots alone would allow 2 GiB; a body bigger than it
  goes alone), the buffer made only once the budget has room
  (:attr:`Summary.held_most` counts them): no temporary file, no whole
  object in memory.  Metadata as a server's copy carries it:
  COPY takes it from the source's GET (a small object) or HEAD (a multipart
  one).  Which of the two runs is decided once, by :func:`relayed`.
"""

from __future__ import annotations

import asyncio
import functools
import posixpath
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from surge.errors import S3Error, UsageError
from surge.http.client import AsyncClient
from surge.http.response import Response
from surge.s3.checksums import Expected, off_loop
from surge.s3.config import Target, resolve_endpoint, resolve_region, split_s3_url
from surge.s3.objects import Objects, check_range, copy_source, object_metadata
from surge.s3.parse import S3Object
from surge.s3.paths import Filters, prefix_dir
from surge.s3.putoptions import SSE_C_KINDS, checked_key, customer_key_headers, one_of
from surge.s3.sigv4 import Credentials
from surge.s3.transfer import Failure, Result, Summary, run_sync, run_transfer
from surge.s3.uploads import HASH_INLINE, UploadOptions, UploadPlan, _Body, _File, _Upload

DIRECTIVES = ("COPY", "REPLACE")
#: A relayed copy's bytes held at once, at most, by default: with the default
#: concurrency (256) and part size (8 MiB) the slots alone would allow 2 GiB.
#: rclone's defaults hold 4 transfers x 4 chunks x 5 MiB = 80 MiB.
RELAY_MEMORY = 256 * 1024 * 1024


@dataclass
class CopyOptions(UploadOptions):
    """The options of :func:`copy` (and of ``surge s3 cp s3://a/... s3://b/...``):
    an upload's (:class:`surge.s3.PutOptions`: how the new objects are
    stored), the AWS CLI's ``--metadata-directive``, and the source's SSE-C
    key."""

    #: COPY (None: the default) keeps the source's metadata; REPLACE gives the
    #: new objects ``content_type`` (None: none), ``metadata`` and the other
    #: metadata options.  ``metadata`` given implies REPLACE (as the AWS CLI).
    metadata_directive: str | None = None
    #: The source objects' SSE-C algorithm (``AES256``) and key, as the AWS
    #: CLI's ``--sse-c-copy-source`` and ``--sse-c-copy-source-key``.
    sse_c_copy_source: str | None = None
    sse_c_copy_source_key: str | bytes | None = None
    #: Where the source is, when not where the destination is: its endpoint
    #: (None: the destination's, or ``source_profile``'s), its region (None:
    #: ``source_profile``'s, else the destination's), its credentials (None:
    #: ``source_profile``'s chain, else the destination's).  A source on
    #: another endpoint or with other credentials is relayed through this
    #: process (:func:`relayed`).
    source_endpoint_url: str | None = None
    source_region: str | None = None
    source_profile: str | None = None
    source_credentials: Credentials | None = None
    #: The source is read anonymously (a public bucket; the CLI's
    #: ``--source-no-sign-request``): relayed, as no server copies for a
    #: reader it does not know.
    source_no_sign_request: bool = False
    #: A relayed copy's bytes held at once, at most (besides the bound of
    #: ``concurrency`` x the part size that the request slots make).
    relay_memory: int = RELAY_MEMORY
    #: Told once, before any object is read, why the copy goes through this
    #: process (:func:`relayed`'s reason); not told when the server copies.
    on_relay: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source_endpoint_url is not None:
            from surge.http.url import parse_url

            try:
                parse_url(self.source_endpoint_url.rstrip("/") + "/")
            except Exception:
                raise UsageError(
                    f"--source-endpoint-url {self.source_endpoint_url!r}: not an http(s) URL"
                ) from None
        if self.relay_memory < 1:
            raise UsageError(f"relay memory must be at least 1 byte, not {self.relay_memory}")
        if self.source_region is not None and not self.source_region.strip():
            raise UsageError("--source-region is empty")
        if self.source_profile is not None:
            if not self.source_profile.strip():
                raise UsageError("--source-profile is empty")
            # a profile that is not there: a usage error now, not at the first request
            try:
                resolve_region(None, self.source_profile)
            except UsageError as e:
                said = str(e).replace("--profile ", "--source-profile ", 1)
                raise UsageError(said) from None
        if self.source_no_sign_request and (
            self.source_profile is not None or self.source_credentials is not None
        ):
            raise UsageError(
                "--source-no-sign-request and --source-profile: the source is read"
                " with keys or without, not both"
            )
        if self.metadata_directive is not None:
            self.metadata_directive = self.metadata_directive.upper()
            if self.metadata_directive not in DIRECTIVES:
                raise UsageError(f"metadata directive {self.metadata_directive!r}: COPY or REPLACE")
        if self.metadata and self.metadata_directive is None:
            self.metadata_directive = "REPLACE"  # as the AWS CLI, given --metadata
        if self.sse_c_copy_source is not None:
            self.sse_c_copy_source = one_of(
                "--sse-c-copy-source", self.sse_c_copy_source, SSE_C_KINDS
            )
        self.sse_c_copy_source_key = checked_key(
            "--sse-c-copy-source", self.sse_c_copy_source, self.sse_c_copy_source_key
        )

    @property
    def replacing(self) -> bool:
        return self.metadata_directive == "REPLACE"

    def source_options(self) -> dict[str, Any]:
        """The source's endpoint options, as :class:`EndpointOptions`
        keywords: the destination's, but what the ``source_*`` fields say."""
        fields = self.endpoint()
        profile = self.source_profile
        if profile is not None:
            fields["profile"] = profile
            fields["credentials"] = self.source_credentials
            fields["endpoint_url"] = resolve_endpoint(None, profile)
            fields["region"] = resolve_region(None, profile)
        if self.source_credentials is not None:
            fields["credentials"] = self.source_credentials
        if self.source_endpoint_url is not None:
            fields["endpoint_url"] = self.source_endpoint_url
        if self.source_region is not None:
            fields["region"] = self.source_region
        if self.source_no_sign_request:
            fields["no_sign_request"] = True
            fields["credentials"] = None
        return fields

    def one_place(self) -> bool:
        """Whether the source's bucket names are the destination's: one
        endpoint and one way of signing, by what the options say (nothing
        resolved).  Elsewhere, a bucket of the same name is another bucket."""
        source, here = self.source_options(), self.endpoint()
        names = ("endpoint_url", "profile", "credentials", "no_sign_request")
        same = [source[name] == here[name] for name in names]
        if source["endpoint_url"] and here["endpoint_url"]:
            same[0] = source["endpoint_url"].rstrip("/") == here["endpoint_url"].rstrip("/")
        return all(same)

    def source_target(self, bucket: str) -> Target:
        """Where and how the source bucket's requests go."""
        from surge.s3.api import EndpointOptions

        return EndpointOptions(**self.source_options()).target(bucket)

    def source_key_headers(self, prefix: str) -> list[tuple[str, str]]:
        """The source's SSE-C headers: ``copy-source-`` ones for a copy, none
        (``""``) for its HEAD."""
        if self.sse_c_copy_source is None:
            return []
        assert isinstance(self.sse_c_copy_source_key, bytes)
        return customer_key_headers(self.sse_c_copy_source, self.sse_c_copy_source_key, prefix)


def relayed(source: Target, destination: Target) -> str | None:
    """Why no server can copy from ``source`` to ``destination`` (so the
    bytes go through this process), or None: both on one endpoint (AWS's
    regions are one service: CopyObject crosses them), signed by one key."""
    elsewhere = not source.aws and source.base_url != destination.base_url
    if source.aws != destination.aws or elsewhere:
        return "the source's endpoint is not the destination's"
    keys = [None if t.signer is None else t.signer.credentials for t in (source, destination)]
    if keys[0] != keys[1]:
        if keys[0] is None:
            return "the source is read without signing (--source-no-sign-request)"
        return "the source is read with other credentials than the destination's"
    return None


class Held:
    """Bytes of relayed objects held in memory: now, the most at once, and
    the budget that :meth:`take` waits for (one body bigger than all of it
    is taken alone)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.now = 0
        self.most = 0
        self._waiting: list[asyncio.Future[None]] = []

    async def take(self, size: int) -> None:
        while self.now and self.now + size > self.budget:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
        self.now += size
        self.most = max(self.most, self.now)

    def give(self, size: int) -> None:
        self.now -= size
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:  # each looks again: few, as few bodies fit
            if not waiter.done():
                waiter.set_result(None)


class _Range:
    """One GET's bytes, written in place into a buffer of the range's length
    (no list of chunks joined: one copy of the bytes at a time), the length
    and the range checked."""

    def __init__(self, first: int, length: int, ranged: bool) -> None:
        self.first = first
        self.length = length
        self.ranged = ranged
        self.data = bytearray(length)
        self.received = 0
        self.headers: Any = None

    async def begin(self, response: Response) -> None:
        if self.ranged:
            check_range(response, self.first, self.first + self.length - 1)
        self.headers = response.headers
        self.received = 0

    def write(self, chunk: bytes) -> None:
        end = self.received + len(chunk)
        if end > self.length:
            raise S3Error(
                "IncompleteBody",
                f"more than the {self.length:,} bytes asked for",
                status=None,
                bucket="",
            )
        self.data[self.received : end] = chunk
        self.received = end

    async def end(self) -> None:
        if self.received != self.length:
            raise S3Error(
                "IncompleteBody",
                f"{self.received:,} of {self.length:,} bytes",
                status=None,
                bucket="",
            )


@dataclass
class _Copy(_File):
    """One object to copy: ``path`` is its s3:// URL, ``key`` the new one's."""

    source_key: str = ""
    size: int = 0
    etag: str | None = None


@dataclass(frozen=True)
class CopyPlan:
    bucket: str  # the source's
    prefix: str  # its listing's prefix, or the single key
    filters: Filters
    destination: UploadPlan


def plan_copy(source: str, destination: str, opts: CopyOptions) -> CopyPlan:
    """Where a copy reads and writes, or a UsageError naming the problem."""
    bucket, prefix = split_s3_url(source)
    to_bucket, to_prefix = split_s3_url(destination)
    rules = opts.rules()
    if opts.recursive:
        if prefix and not prefix.endswith("/"):
            prefix += "/"  # as the AWS CLI: a recursive source is a "directory"
        if to_prefix and not to_prefix.endswith("/"):
            to_prefix += "/"
        filters = Filters(bucket, prefix, rules)
    else:
        if not prefix or prefix.endswith("/"):
            raise UsageError(f"{source!r} names no object: give a key, or --recursive for a prefix")
        if not to_prefix or to_prefix.endswith("/"):
            to_prefix += posixpath.basename(prefix)
        filters = Filters(bucket, prefix_dir(prefix), rules)
    # a sync's --delete takes what the filters take, relative to the prefix
    if bucket == to_bucket and opts.recursive and to_prefix.startswith(prefix) and opts.one_place():
        raise UsageError(
            f"{destination!r} is inside {source!r}: the copy would list its own copies"
        )
    into = UploadPlan(to_bucket, to_prefix, source, opts.recursive, Filters("", "", rules))
    return CopyPlan(bucket, prefix, filters, into)


class _Copies(_Upload):
    """An upload run whose files are another bucket's objects, copied by the server."""

    def __init__(
        self,
        the_plan: CopyPlan,
        opts: CopyOptions,
        target: Target,
        client: AsyncClient,
        summary: Summary,
    ) -> None:
        super().__init__(the_plan.destination, opts, target, client, summary)
        self.copy_plan = the_plan
        self.copy_opts = opts
        self.source = Objects(opts.source_target(the_plan.bucket), client, opts.retry_policy())
        self.source.reading = opts.source_key_headers("")
        #: why the bytes go through this process (None: the server copies)
        self.relayed = relayed(self.source.target, target)
        self.held = Held(opts.relay_memory)
        summary.relayed = self.relayed is not None
        if self.relayed is not None and opts.on_relay is not None:
            opts.on_relay(self.relayed)
        #: how each new object is stored, and the source's key, whichever the directive
        self.storing = [*opts.storage_headers(), *opts.source_key_headers("copy-source-")]
        if opts.checksum_algorithm:  # the server computes it (a multipart copy's: not carried)
            self.storing.append(("x-amz-checksum-algorithm", opts.checksum_algorithm))

    def source_url(self, key: str) -> str:
        return f"s3://{self.copy_plan.bucket}/{key}"

    def counts(self) -> tuple[int, int]:
        """The source's requests too (its HEADs; a relay's GETs), besides the destination's."""
        requests, retries = super().counts()
        return requests + self.source.requests, retries + self.source.retries

    async def _items(self) -> AsyncIterator[_File | Failure]:
        plan = self.copy_plan
        if not self.opts.recursive:
            key = plan.prefix
            if plan.filters and not plan.filters.takes(key):
                self.summary.excluded += 1
                return
            try:
                async with self.slots:
                    head = await self.source.head(key, checksums=False)
            except S3Error as e:
                if self.stop.ends_run(e):
                    return
                yield Failure(
                    self.source_url(key), self.url(plan.destination.key), e.code, e.message
                )
                return
            size = int(head.get("content-length") or 0)
            yield _Copy(self.source_url(key), plan.destination.key, key, size, head.get("etag"))
            return
        listing = self._listed(self.source_url(plan.prefix), self._source_endpoint())
        async with aclosing(listing) as listed:
            async for entry in listed:
                item = self._offer(entry)
                if item is not None:
                    yield item

    def _source_endpoint(self) -> dict[str, Any]:
        """The source's endpoint options, its credentials resolved once already."""
        fields = self.copy_opts.source_options()
        signer = self.source.target.signer
        if signer is not None:
            fields["credentials"] = signer.credentials
        return fields

    def _offer(self, entry: S3Object) -> _Copy | None:
        """The listed object as a copy to make, or None (filtered out, or a
        sync's destination has it the same)."""
        key = entry.key
        to_key = self.plan.key + key[len(self.copy_plan.prefix) :]
        if self.seen is not None:
            self.seen.add(to_key)
        filters = self.copy_plan.filters
        if filters and not filters.takes(key):
            self.summary.excluded += 1
            return None
        if self.opts.sync and to_key in self.remote:
            size, modified = self.remote[to_key]
            # the AWS CLI's test: same size, and the source no newer (by whole seconds)
            if entry.size == size and int(entry.last_modified.timestamp()) <= int(modified):
                self.summary.unchanged += 1
                return None
        return _Copy(self.source_url(key), to_key, key, entry.size, entry.etag)

    def _dryrun(self, item: _File) -> None:
        assert isinstance(item, _Copy)
        self.summary.objects += 1
        self.summary.bytes += item.size
        self._tell(Result(item.path, self.url(item.key), item.size, dryrun=True))

    def _replaced(self) -> list[tuple[str, str]]:
        """REPLACE's metadata for the new objects (no Content-Type guessed: as
        the AWS CLI's copies)."""
        return self.copy_opts.metadata_headers(None)

    async def _upload(self, item: _File) -> None:
        """One object copied, holding one of the open files' slots."""
        assert isinstance(item, _Copy)
        source = copy_source(self.copy_plan.bucket, item.source_key)
        replace = self._replaced() if self.copy_opts.replacing else None
        try:
            if self.relayed is not None:
                if item.size > self.opts.threshold:
                    etag = await self._relay_parts(item, replace)
                else:
                    etag = await self._relay_one(item, replace)
            elif item.size > self.opts.threshold:
                etag = await self._copy_parts(item, source, replace)
            else:
                async with self.slots:
                    etag = await self.objects.copy_object(
                        item.key, source, replace=replace, if_match=item.etag, headers=self.storing
                    )
                self.summary.sent += item.size
            self._succeeded(item, item.size, etag)
        except S3Error as e:
            if not self.stop.ends_run(e):
                self._fail(item.path, self.url(item.key), e.code, e.message)
        finally:
            self.open_files.release()
            self._progress()

    async def _copy_parts(
        self, item: _Copy, source: str, replace: list[tuple[str, str]] | None
    ) -> str:
        """A multipart copy: UploadPartCopy ranges in parallel (the upload's
        machinery), the source's metadata carried (COPY) or replaced."""
        if replace is None:
            async with self.slots:
                head = await self.source.head(item.source_key, checksums=False)
            headers = object_metadata(head)
            item.etag = head.get("etag") or item.etag
        else:
            headers = replace
        headers = sorted([*headers, *self.copy_opts.storage_headers()])
        part_size = self._part_size(item.size)
        source_key = self.copy_opts.source_key_headers("copy-source-")

        async def parts() -> AsyncIterator[_Body]:
            for first in range(0, item.size, part_size):
                length = min(part_size, item.size - first)
                yield _Body(
                    length, offset=first, copy=source, etag=item.etag, copy_headers=source_key
                )

        etag, _ = await self._multipart(
            item, parts(), part_size, lambda: None, headers=headers, verify=False
        )
        return etag

    # -- through this process: the source on another endpoint -----------------------

    async def _fetch(self, item: _Copy, first: int, length: int, whole: bool) -> _Range:
        """Bytes ``first``.. (``length`` of them; ``whole``: the object, no
        Range) of the source, pinned to its ETag, counted as held."""
        await self.held.take(length)  # before the buffer is made: the budget holds
        self.summary.held_most = max(self.summary.held_most, self.held.most)
        try:
            got = _Range(first, length, not whole)
            if whole:
                await self.source.get(item.source_key, got, if_match=item.etag)
            else:
                last = first + length - 1
                await self.source.get(
                    item.source_key, got, first=first, last=last, if_match=item.etag
                )
        except BaseException:
            self.held.give(length)
            raise
        self.summary.received += length
        return got

    async def _relay_one(self, item: _Copy, replace: list[tuple[str, str]] | None) -> str:
        """A small object through this process: one GET (its headers: the
        metadata COPY keeps), one PutObject, in one request slot."""
        async with self.slots:
            got = await self._fetch(item, 0, item.size, whole=True)
            try:
                body = _Body(item.size, data=got.data)
                expected = Expected.from_headers(item.size, got.headers).md5
                if expected is not None and self.opts.verify:
                    small = item.size <= HASH_INLINE  # else in a thread: the loop goes on
                    md5 = (body.md5() if small else await off_loop(body.md5)).hex()
                    if md5 != expected:
                        raise S3Error(
                            "BadDigest",
                            f"the source's bytes have MD5 {md5}, not its ETag's {expected}",
                            status=200,
                            bucket=self.copy_plan.bucket,
                        )
                metadata = object_metadata(got.headers) if replace is None else replace
                headers = sorted([*metadata, *self.copy_opts.storage_headers()])
                crc = await self._crc32(body)
                answer = await self.objects.put(
                    item.key, body.make, checksum=self._sent(crc), headers=headers
                )
                await self._check(answer, crc, body, f"the object {item.key!r}")
            finally:
                self.held.give(item.size)
        self.summary.sent += item.size
        return answer.get("etag") or ""

    async def _relay_parts(self, item: _Copy, replace: list[tuple[str, str]] | None) -> str:
        """A big object through this process: a multipart upload whose each
        part is a ranged GET of the source, made in the part's request slot
        and let go once the part is sent (the upload's machinery: parts in
        parallel, CRC-32s, aborted if anything fails or the run is stopped)."""
        async with self.slots:
            head = await self.source.head(item.source_key, checksums=False)
        # the GETs stay pinned to the listed ETag: replaced since, they fail
        item.etag = item.etag or head.get("etag")
        metadata = object_metadata(head) if replace is None else replace
        headers = sorted([*metadata, *self.copy_opts.storage_headers()])
        part_size = self._part_size(item.size)

        async def fetch(first: int, length: int) -> _Body:
            got = await self._fetch(item, first, length, whole=False)
            release = functools.partial(self.held.give, length)
            return _Body(length, offset=first, data=got.data, release=release)

        async def parts() -> AsyncIterator[_Body]:
            for first in range(0, item.size, part_size):
                length = min(part_size, item.size - first)
                yield _Body(length, offset=first, fetch=functools.partial(fetch, first, length))

        etag, _ = await self._multipart(item, parts(), part_size, lambda: None, headers=headers)
        return etag


async def copy_async(
    source: str,
    destination: str,
    *,
    options: CopyOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> Summary:
    """Copy ``source`` (``s3://bucket/key``; with ``recursive=True``, every
    object under ``s3://bucket/prefix/``) to ``destination`` (``s3://...``: a
    key, or a prefix), by the server (CopyObject, UploadPartCopy) - or, the
    source on another endpoint or read with other credentials
    (``source_endpoint_url``, ``source_region``, ``source_profile``,
    ``source_credentials``), through this process (``summary.relayed``);
    options as :class:`CopyOptions`.  Per-object failures are in the summary; a bad
    argument raises :class:`UsageError`, a listing that fails or a missing
    bucket :class:`S3Error`."""
    opts = options or CopyOptions(**kwargs)
    the_plan = plan_copy(source, destination, opts)
    target = opts.target(the_plan.destination.bucket)
    return await run_transfer(
        opts,
        client,
        opts.concurrency + opts.list_parallel,
        lambda client, summary: _Copies(the_plan, opts, target, client, summary),
    )


def copy(
    source: str, destination: str, *, options: CopyOptions | None = None, **kwargs: Any
) -> Summary:
    """:func:`copy_async` for synchronous code."""
    opts = options or CopyOptions(**kwargs)
    return run_sync(lambda: copy_async(source, destination, options=opts))


def copy_results(
    source: str, destination: str, *, options: CopyOptions | None = None, **kwargs: Any
) -> AsyncGenerator[Result, None]:
    """:func:`copy_async`'s results as an async iterator, one as each object is copied."""
    from surge.s3.results import results

    opts = options or CopyOptions(**kwargs)
    return results(lambda o: copy_async(source, destination, options=o), opts)
