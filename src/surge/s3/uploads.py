"""Uploading files: ``surge s3 cp PATH s3://...`` and :func:`upload`.

    summary = surge.s3.upload("logs/", "s3://bucket/logs/", recursive=True,
                              exclude=["*"], include=["*.gz"])
    print(summary.objects, summary.bytes, summary.failures)

How it runs (the download's shape, :mod:`surge.s3.transfer`, the other way):

* One pooled :class:`surge.http.AsyncClient`; at most ``concurrency`` requests
  in flight (256 by default, s5cmd's ``--numworkers``), whole small files and
  the parts of big ones alike, and at most ``concurrency`` files open.  The
  directory is walked as the uploads go (sorted, one directory at a time), and
  the walk waits for a file to close: memory and descriptors stay bounded
  however many files there are.
* A file of at most ``multipart_threshold`` (8 MiB) is one PutObject.  A bigger
  one is a multipart upload: CreateMultipartUpload, its parts sent in parallel
  (UploadPart), CompleteMultipartUpload.  The part size adapts to the file as
  the AWS CLI's does: ``part_size`` (8 MiB), or bigger so that the file fits in
  :data:`MAX_PARTS` parts; a file that needs parts over S3's 5 GiB is refused.
  A multipart upload that fails, or is interrupted (Ctrl-C), is aborted
  (AbortMultipartUpload): no parts are left stored and billed.
* Bodies are read from the file as they are sent, 64 KiB at a time with
  ``os.pread`` (:class:`surge.http.arguments.FileRange`): never a whole part
  in memory, and the parts of one file go out at once from one descriptor.
* Verified: each body's CRC-32 is computed first (ISA-L's when installed: a
  tenth of an MD5's CPU; a thread for big bodies) and sent as
  x-amz-checksum-crc32, which S3 and MinIO check before they store the bytes
  (``XAmzContentChecksumMismatch`` otherwise) and answer: the answer must be
  ours.  A multipart upload is created with the CRC32 FULL_OBJECT checksum
  type and completed with the whole file's CRC-32, combined from the parts'
  (no second read): the server checks it against the parts, and a download
  can check the object by it later.  A server that answers no checksum
  (moto) is checked as before: its ETag against the body's MD5 (a single PUT
  or each part), and a multipart ETag against the MD5 of the parts' MD5s
  with ``-N`` - unless the ETag is no MD5 (SSE-KMS).  ``verify=False`` skips
  all of it.
* A file that cannot be read, a key the bucket refuses (AccessDenied), a
  request that kept failing after the retries are :class:`Failure` lines in
  the summary; the others go on.  SlowDown, 5xx and transient transport errors
  are retried as the shared retry policy says.  A missing bucket
  (NoSuchBucket) ends the run at once: :class:`S3Error` is raised.
* A FIFO, a socket or a device file is skipped, as the AWS CLI skips them
  (``summary.skipped``, a :class:`Result` saying why): never opened, as
  opening one can wait (a FIFO), fail (a socket) or act (a device).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from surge import temps
from surge._log import logger as get_logger
from surge.errors import S3Error, SinkError, UsageError
from surge.http.arguments import FileRange
from surge.http.client import AsyncClient
from surge.http.response import Headers
from surge.s3.checksums import (
    ALGORITHMS,
    Expected,
    blocks,
    crc32,
    crc32_combine,
    crc32_header,
    off_loop,
)
from surge.s3.config import Target, split_s3_url
from surge.s3.paths import Filters, not_regular, walk_files
from surge.s3.putoptions import PutOptions
from surge.s3.transfer import (
    ABORT_WITHIN,
    DEFAULT_PART_SIZE,
    MAX_PARTS,
    BucketRun,
    DownloadOptions,
    Failure,
    MiB,
    Result,
    Summary,
    TransferOptions,
    check_local,
    despite_cancel,
    download_async,
    os_message,
    read_stdin,
    run_sync,
    run_transfer,
)
from surge.sinks import names_stdin, stdin_closed

#: What ``cp - s3://...`` reads stands for: stdin.
STDIN = "-"
#: Parts of stdin read and not yet sent, at most: memory is this many parts
#: (the AWS CLI's max_in_memory_upload_chunks is 10).
STDIN_PARTS_HELD = 8

_log = get_logger("surge.s3")
#: S3's limits: a part (but the last) is at least 5 MiB and at most 5 GiB.
MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * 1024 * MiB
#: Bodies up to this size are hashed on the event loop; bigger ones in a thread.
HASH_INLINE = 256 * 1024


@dataclass
class UploadOptions(TransferOptions, PutOptions):
    """The options of :func:`upload` (and of ``surge s3 cp PATH s3://...``):
    what the objects are stored with (:class:`PutOptions`: Content-Type, when
    none is given, guessed from the file's name as the AWS CLI does, else none
    and S3 says binary/octet-stream), and how files are found."""

    #: Symbolic links to files and directories followed (the AWS CLI's
    #: default); False: every link left out, as its --no-follow-symlinks.
    follow_symlinks: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_put_options()
        if self.part_size is not None and not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise UsageError(
                f"an upload's part size must be 5MiB..5GiB (S3's limits), not {self.part_size:,}"
            )


def part_size_for(size: int, part_size: int | None) -> int:
    """The part size for a file of ``size`` bytes: ``part_size`` (None: 8 MiB),
    or bigger so that the file fits in :data:`MAX_PARTS` parts (the AWS CLI's
    rule)."""
    return max(DEFAULT_PART_SIZE if part_size is None else part_size, -(-size // MAX_PARTS))


@dataclass(frozen=True)
class UploadPlan:
    bucket: str
    #: A directory's keys: this prefix and the file's relative path; a single
    #: file's: the key itself.
    key: str
    source: str
    recursive: bool
    filters: Filters


def plan_upload(source: str, destination: str, opts: UploadOptions) -> UploadPlan:
    """Where an upload reads and writes, or a UsageError naming the problem.
    Nothing is read yet (a missing single file is a failure of the run, not a
    usage error: the summary names it)."""
    check_local("source", source)
    bucket, prefix = split_s3_url(destination)
    rules = opts.rules()
    if names_stdin(source):
        if opts.recursive:
            what = "a sync" if opts.sync else "--recursive"
            raise UsageError(f"{source!r} is stdin: {what} uploads a directory")
        if not prefix or prefix.endswith("/"):
            raise UsageError(f"{destination!r}: an upload of stdin needs the object's key")
        if stdin_closed():
            raise UsageError(f"{source!r}: cannot read: stdin is closed")
        return UploadPlan(bucket, prefix, STDIN, False, Filters("", "", rules))
    if opts.recursive:
        if not os.path.isdir(source):
            what = "sync" if opts.sync else "--recursive"
            raise UsageError(f"{source!r} is not a directory ({what} uploads a directory)")
        if prefix and not prefix.endswith("/"):
            prefix += "/"  # as the AWS CLI: a recursive destination is a "directory"
        return UploadPlan(bucket, prefix, source, True, Filters("", "", rules))
    if os.path.isdir(source):
        raise UsageError(f"{source!r} is a directory: give --recursive to upload what it holds")
    if not prefix or prefix.endswith("/"):
        prefix += os.path.basename(source)
    return UploadPlan(bucket, prefix, source, False, Filters("", "", rules))


@dataclass
class _File:
    path: str
    key: str


class _Upload(BucketRun):
    def __init__(
        self,
        the_plan: UploadPlan,
        opts: UploadOptions,
        target: Target,
        client: AsyncClient,
        summary: Summary,
    ) -> None:
        super().__init__(opts, target, the_plan.bucket, client, summary)
        self.plan = the_plan
        self.opts: UploadOptions = opts
        self.slots = asyncio.Semaphore(opts.concurrency)  # requests in flight
        #: files open at once (the walk waits for one): a bound on descriptors and tasks
        self.open_files = asyncio.Semaphore(opts.concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        #: a sync's destination as listed: key -> (size, LastModified as epoch)
        self.remote: dict[str, tuple[int, float]] = {}
        #: a sync's keys that the source has (only for --delete: memory)
        self.seen: set[str] | None = set() if opts.delete else None
        #: directories the walk could not read (each a failure; --delete then deletes nothing)
        self.walk_errors: list[tuple[str, str]] = []

    # -- what there is to do ---------------------------------------------------------

    async def _run(self) -> None:
        try:
            if self.opts.sync:
                self.remote = await self._remote()
            async for item in self._items():
                if self.opts.room is not None:
                    await self.opts.room()
                if isinstance(item, Failure):
                    self._fail(
                        item.source,
                        item.destination or self.url(self.plan.key),
                        item.code,
                        item.message,
                    )
                    continue
                if self.opts.dryrun:
                    self._dryrun(item)
                    continue
                await self.open_files.acquire()
                self._spawn(self._upload(item))
            while self.tasks:
                await asyncio.gather(*list(self.tasks))
            if self.opts.delete and self.walk_errors:
                # An unread directory is not an empty one: its objects stay.
                self._fail(
                    self.plan.source,
                    self.url(self.plan.key),
                    "IncompleteSource",
                    "not deleting anything: part of the source could not be read",
                )
            elif self.opts.delete:
                await self._delete_extra()
        finally:
            self.stop.settle()
            for task in self.tasks:
                if not task.cancelling():  # a cancelled gather cancelled it already
                    task.cancel()
            # each multipart upload aborts itself as its task is cancelled
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _items(self) -> AsyncIterator[_File | Failure]:
        """What there is to copy: the files (a copy's: the source's objects)."""
        for item in self._files():
            yield item

    def _files(self) -> Iterator[_File | Failure]:
        """The files to upload and their keys, filtered, in sorted order; a file
        name that is no S3 key (not UTF-8) is a failure.  (A file that is not
        a regular one is skipped as it is opened.)"""
        plan = self.plan
        follow = self.opts.follow_symlinks
        if plan.source == STDIN:
            yield _File(STDIN, plan.key)  # no name to filter, no file to look at
            return
        if not plan.recursive:
            name = os.path.basename(plan.source)
            if plan.filters and not plan.filters.takes(name):
                self.summary.excluded += 1
                return
            if not follow and os.path.islink(plan.source):
                _log.debug("%s: a symbolic link, left out (--no-follow-symlinks)", plan.source)
                return
            yield _File(plan.source, plan.key)
            return
        if not follow and os.path.islink(plan.source.rstrip(os.sep) or os.sep):
            _log.debug("%s: a symbolic link, left out (--no-follow-symlinks)", plan.source)
            return
        errors = self.walk_errors
        reported = 0
        walk = walk_files(plan.source, skip_links=not follow, errors=errors)
        for path, relative in walk:
            while reported < len(errors):  # as the walk meets them
                yield self._walk_failure(*errors[reported])
                reported += 1
            if temps.named_like(relative.rpartition("/")[2]) and temps.is_ours(path):
                continue  # a download's temporary file (maybe a dead one's): no object
            key = plan.key + relative
            if self.seen is not None:
                self.seen.add(key)
            if plan.filters and not plan.filters.takes(relative):
                self.summary.excluded += 1
                continue
            if self.opts.sync and key in self.remote:
                size, modified = self.remote[key]
                try:
                    info = os.stat(path)
                except OSError:
                    pass  # a failure line when it is opened
                else:
                    # the AWS CLI's test: same size, and the file no newer (by
                    # whole seconds) than the object; a FIFO, a socket, a
                    # device is no file the object can be the same as: skipped
                    if (
                        stat.S_ISREG(info.st_mode)
                        and info.st_size == size
                        and int(info.st_mtime) <= int(modified)
                    ):
                        self.summary.unchanged += 1
                        continue
            try:
                key.encode("utf-8")
            except UnicodeEncodeError:
                yield Failure(
                    path,
                    self.url(key.encode("utf-8", "replace").decode()),
                    "InvalidKey",
                    "the file's name is not UTF-8: no S3 key can hold it",
                )
                continue
            yield _File(path, key)
        for where, message in errors[reported:]:
            yield self._walk_failure(where, message)

    def _walk_failure(self, where: str, message: str) -> Failure:
        """A file or directory the walk could not read, with the key it was for."""
        relative = os.path.relpath(where, self.plan.source)
        key = None
        if relative != "." and not relative.startswith(".."):
            key = self.url(self.plan.key + relative.replace(os.sep, "/"))
        return Failure(where, key, "LocalError", message)

    async def _remote(self) -> dict[str, tuple[int, float]]:
        """The destination's objects under the prefix (a sync compares them)."""
        remote: dict[str, tuple[int, float]] = {}
        listing = self._listed(self.url(self.plan.key), self.opts.endpoint(self.target))
        async with aclosing(listing) as listed:
            async for entry in listed:
                remote[entry.key] = (entry.size, entry.last_modified.timestamp())
        return remote

    async def _delete_extra(self) -> None:
        """A sync's --delete: the objects under the prefix that no file maps to
        (and that the filters take) are deleted, in batches (as ``rm``)."""
        from surge.s3.deletes import Deletes  # a sync with --delete only

        assert self.seen is not None
        deletes = Deletes(self.objects, self._deleted, batch=self.opts.delete_batch, stop=self.stop)
        async with deletes:
            for key in sorted(self.remote.keys() - self.seen):
                relative = key[len(self.plan.key) :]
                if self.plan.filters and not self.plan.filters.takes(relative):
                    continue
                if self.opts.dryrun:
                    self.summary.deleted += 1
                    self._tell(Result(None, self.url(key), 0, dryrun=True, deleted=True))
                    continue
                await deletes.add(key)

    def _deleted(self, key: str, error: tuple[str, str] | None) -> None:
        if error is None:
            self.summary.deleted += 1
            self._tell(Result(None, self.url(key), 0, deleted=True))
        else:
            self._fail("", self.url(key), *error, deleted=True)
        self._progress()

    def _dryrun(self, item: _File) -> None:
        if item.path == STDIN:  # not read: its size is known only once it is
            self.summary.objects += 1
            self._tell(Result(item.path, self.url(item.key), 0, dryrun=True))
            return
        try:
            info = os.stat(item.path)
        except OSError as e:
            self._fail(item.path, self.url(item.key), "LocalError", os_message(e))
            return
        skip = not_regular(info.st_mode)
        if skip is not None:
            self._skipped(item, skip, dryrun=True)
            return
        size = info.st_size
        self.summary.objects += 1
        self.summary.bytes += size
        self._tell(Result(item.path, self.url(item.key), size, dryrun=True))

    # -- the work ------------------------------------------------------------------------

    async def _upload(self, item: _File) -> None:
        """One file, holding one of the open files' slots; a request slot per request."""
        fd = -1
        try:
            if item.path == STDIN:
                await self._upload_stdin(item)
                return
            # What it is before it is opened: opening a FIFO waits for a
            # writer, a socket cannot be opened, a device may act on it.
            _regular(os.stat(item.path))
            # O_NONBLOCK: if a FIFO took the file's place since, no waiting for a writer
            fd = os.open(item.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            info = _regular(os.fstat(fd))
            size = info.st_size
            headers = self.opts.object_headers(item.path)
            if size > self.opts.threshold:
                part_size = self._part_size(size)
                etag, _ = await self._multipart(
                    item,
                    _file_parts(fd, size, part_size),
                    part_size,
                    lambda: _unchanged(fd, info, "the multipart upload is aborted"),
                    headers=headers,
                )
            else:
                etag = await self._put(item, _Body(size, fd=fd), headers)
                _unchanged(fd, info, "the object was stored, maybe with bytes of both")
            self._succeeded(item, size, etag)
        except _NotAFile as e:
            self._skipped(item, str(e))
        except _Changed as e:
            self._fail(item.path, self.url(item.key), "LocalError", str(e))
        except S3Error as e:
            if not self.stop.ends_run(e):
                self._fail(item.path, self.url(item.key), e.code, e.message)
        except SinkError as e:  # stdin could not be read
            self.stop.end(e)
        except OSError as e:
            self._fail(item.path, self.url(item.key), "LocalError", os_message(e))
        finally:
            if fd >= 0:
                os.close(fd)
            self.open_files.release()
            self._progress()

    def _part_size(self, size: int) -> int:
        """The parts of an object of ``size`` bytes (:func:`part_size_for`),
        or EntityTooLarge if they would be over S3's 5 GiB."""
        part_size = part_size_for(size, self.opts.part_size)
        if part_size > MAX_PART_SIZE:
            raise S3Error(
                "EntityTooLarge",
                f"{size:,} bytes need parts over S3's 5 GiB",
                status=None,
                bucket=self.plan.bucket,
            )
        return part_size

    async def _put(self, item: _File, body: _Body, headers: Sequence[tuple[str, str]]) -> str:
        """One PutObject of ``body`` with the object's ``headers``
        (:meth:`PutOptions.object_headers`), checked: its ETag."""
        crc = await self._crc32(body)
        async with self.slots:
            answer = await self.objects.put(
                item.key, body.make, checksum=self._sent(crc), headers=headers
            )
        await self._check(answer, crc, body, f"the object {item.key!r}")
        self.summary.sent += body.length
        return answer.get("etag") or ""

    async def _upload_stdin(self, item: _File) -> None:
        """``cp - s3://bucket/key``, as the AWS CLI: stdin's bytes, read as
        they come (on a thread: a silent producer holds neither the loop nor
        Ctrl-C) in parts of the part size.  Up to the threshold they are one
        PutObject; past it a multipart upload whose parts go as they are read,
        :data:`STDIN_PARTS_HELD` at most in memory.  The length is not known
        ahead, so the part size cannot grow to fit: past 10,000 parts the
        upload is aborted (a bigger ``--part-size`` takes a longer stream)."""
        threshold = self.opts.threshold
        headers = self.opts.object_headers(item.key)
        first = await read_stdin(threshold + 1)
        if len(first) <= threshold:
            etag = await self._put(item, _Body(len(first), data=first), headers)
            self._succeeded(item, len(first), etag)
            return
        part_size = self.opts.part_size or DEFAULT_PART_SIZE
        parts = _stdin_parts(first, part_size, self.plan.bucket)
        window = asyncio.Semaphore(STDIN_PARTS_HELD)
        etag, size = await self._multipart(
            item, parts, part_size, lambda: None, window=window, headers=headers
        )
        self._succeeded(item, size, etag)

    async def _multipart(
        self,
        item: _File,
        bodies: AsyncIterator[_Body],
        part_size: int,
        unchanged: Callable[[], None],
        *,
        window: asyncio.Semaphore | None = None,
        headers: Sequence[tuple[str, str]] = (),
        verify: bool | None = None,
    ) -> tuple[str, int]:
        """A multipart upload of ``bodies`` (each ``part_size`` bytes but the
        last), sent in parallel - or copied, UploadPartCopy, for bodies that
        name a copy's source; ``unchanged()`` raises if the source moved
        meanwhile; ``window``: parts read and not yet sent, at most (a
        stream's, held in memory); ``headers``: the object's
        (:meth:`PutOptions.object_headers`, or a copy's metadata), each part
        carrying the SSE-C key's if any;
        ``verify``: CRC-32s sent and checked (default: the options').
        Aborted if anything fails.  The object's ETag and size."""
        key = item.key
        verify = self.opts.verify if verify is None else verify
        async with self.slots:
            creating = asyncio.ensure_future(
                self.objects.create_multipart(
                    key, checksum=self.algorithm if verify else None, headers=headers
                )
            )
            try:
                upload_id = await asyncio.shield(creating)
            except asyncio.CancelledError:
                # the server may create it all the same: aborted once it has
                await despite_cancel(self._abort_created(creating, key))
                raise
        self.summary.open_uploads[upload_id] = self.url(key)
        self._progress()
        etags: list[str] = []
        crcs: list[str | None] = []
        digests: list[bytes | None] = []
        failures: list[S3Error | OSError] = []
        parts: list[asyncio.Task[None]] = []
        size = 0
        encrypted = self.opts.customer_headers()  # SSE-C: each part carries the key

        async def send(index: int, body: _Body) -> None:
            try:
                if body.fetch is not None:
                    body = await body.fetch()
                if body.copy is not None:
                    last = body.offset + body.length - 1
                    etags[index] = await self.objects.upload_part_copy(
                        key,
                        upload_id,
                        index + 1,
                        body.copy,
                        body.offset,
                        last,
                        body.etag,
                        headers=[*encrypted, *body.copy_headers],
                    )
                    self.summary.parts += 1
                    self.summary.sent += body.length
                    return
                crc = await self._crc32(body)
                headers = await self.objects.upload_part(
                    key, upload_id, index + 1, body.make, None, self._sent(crc), headers=encrypted
                )
                md5 = await self._check(headers, crc, body, f"part {index + 1}")
                etags[index] = headers.get("etag") or ""
                crcs[index] = crc
                digests[index] = md5
                self.summary.parts += 1
                self.summary.sent += body.length
            except (S3Error, OSError) as e:
                failures.append(e)
            finally:
                if body.release is not None:
                    body.release()
                self.slots.release()
                if window is not None:
                    window.release()
                self._progress()

        try:
            await self._abort_left(key, upload_id)
            index = 0
            while not failures:
                if window is not None:
                    await window.acquire()
                body = await anext(bodies, None)
                if body is None:
                    if window is not None:
                        window.release()
                    break
                await self.slots.acquire()
                if failures:
                    self.slots.release()
                    if window is not None:
                        window.release()
                    break
                etags.append("")
                crcs.append(None)
                digests.append(None)
                size += body.length
                parts.append(self._spawn(send(index, body)))
                index += 1
            await asyncio.gather(*parts)
            if failures:
                raise failures[0]
            # the whole object's CRC-32, combined from the parts' (no second read);
            # another algorithm's is the server's composite of the parts'
            crc32 = verify and self.algorithm == "crc32"
            whole_crc = _combined(crcs, part_size, size) if crc32 else None
            unchanged()
            async with self.slots:
                etag, said = await self.objects.complete_multipart(
                    key,
                    upload_id,
                    [(i + 1, e, crcs[i]) for i, e in enumerate(etags)],
                    whole_crc,
                    self.algorithm,
                )
            if crc32 and said is not None and said != whole_crc:
                raise S3Error(
                    "BadDigest",
                    f"the object's CRC-32 {said} is not the file's {whole_crc}",
                    status=200,
                    bucket=self.plan.bucket,
                )
            if verify and said is None and all(digests):
                # a server that says no checksum: the ETag, the MD5 of the parts' MD5s
                whole = hashlib.md5(b"".join(d or b"" for d in digests), usedforsecurity=False)
                expected = f"{whole.hexdigest()}-{len(etags)}"
                if etag.strip('"') != expected and _is_multipart_etag(etag):
                    raise S3Error(
                        "BadDigest",
                        f"the object's ETag {etag} is not the parts' {expected}",
                        status=200,
                        bucket=self.plan.bucket,
                    )
            self.summary.open_uploads.pop(upload_id, None)
            return etag, size
        except BaseException as e:
            # Not cut short by a second cancel (the run's own, or Ctrl-C's
            # after a failure): the upload would be left stored.  Interrupted,
            # within a bound: a stalled server cannot hold the run.
            within = ABORT_WITHIN if isinstance(e, asyncio.CancelledError) else None
            await despite_cancel(self._give_up(parts, key, upload_id, within))
            raise

    async def _give_up(
        self, parts: list[asyncio.Task[None]], key: str, upload_id: str, within: float | None
    ) -> None:
        for task in parts:
            task.cancel()
        await asyncio.gather(*parts, return_exceptions=True)
        await self._abort(key, upload_id, within)

    async def _abort_left(self, key: str, upload_id: str) -> None:
        """Abort the multipart uploads of ``key`` that an earlier run left: a
        run killed outright (SIGKILL, a crash, a lost machine) cannot abort
        its own, and S3 keeps - and bills - their parts until a lifecycle rule
        says otherwise.  The rerun of the same copy finds them: the key's
        uploads in progress (ListMultipartUploads, prefix the key) begun no
        later than this one (``upload_id``, just created: the server's clock
        orders them), and shaped as surge makes them where the server lists
        how they were made (CRC32, FULL_OBJECT).  Each is a line
        (:attr:`Result.left_aborted`).  A server that refuses the listing
        (no s3:ListBucketMultipartUploads) is left alone."""
        try:
            async with self.slots:
                uploads = await self.objects.list_uploads(key)
        except S3Error as e:
            _log.debug("%s: cannot list its multipart uploads: %s", self.url(key), e)
            return
        ours = next((u for u in uploads if u.upload_id == upload_id), None)
        if ours is None:  # not listed (yet): nothing to order the others by
            return
        shape = (ours.checksum_algorithm, ours.checksum_type)
        for left in uploads:
            if left.key != key or left.upload_id == upload_id:
                continue
            if _when(left.initiated) > _when(ours.initiated):
                continue  # begun after this one: another run's, still going
            if shape != (None, None) and (left.checksum_algorithm, left.checksum_type) != shape:
                continue  # not made as surge makes them
            try:
                async with self.slots:
                    await self.objects.abort_multipart(key, left.upload_id)
            except S3Error as e:
                self.summary.notes.add(f"an incomplete multipart upload of {key!r} is left: {e}")
                continue
            self.summary.left_aborted += 1
            self._tell(Result(None, self.url(key), 0, left_aborted=left.upload_id))

    async def _abort_created(self, creating: asyncio.Future[str], key: str) -> None:
        """An interrupted CreateMultipartUpload: waited for (within
        :data:`ABORT_WITHIN`) and, if it made an upload, that one aborted."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ABORT_WITHIN
        try:
            async with asyncio.timeout_at(deadline):
                upload_id = await creating
        except (Exception, asyncio.CancelledError):
            creating.cancel()
            return  # none was made, or none that the server told of in time
        self.summary.open_uploads[upload_id] = self.url(key)
        await self._abort(key, upload_id, max(0.1, deadline - loop.time()))

    async def _abort(self, key: str, upload_id: str, within: float | None = None) -> None:
        try:
            await self.objects.abort_multipart(key, upload_id, within=within)
        except S3Error as e:
            self.summary.notes.add(f"an incomplete multipart upload of {key!r} is left: {e}")
        else:
            self.summary.open_uploads.pop(upload_id, None)

    @property
    def algorithm(self) -> str:
        """The checksum the bodies are sent with: ``checksum_algorithm``, else
        CRC-32 (the cheapest: ISA-L's, a tenth of an MD5's CPU)."""
        return (self.opts.checksum_algorithm or "crc32").lower()

    def _sent(self, value: str | None) -> tuple[str, str] | None:
        return None if value is None else (self.algorithm, value)

    async def _crc32(self, body: _Body) -> str | None:
        """The body's checksum (:attr:`algorithm`) as x-amz-checksum-ALGORITHM
        says it (None: not verifying)."""
        if not self.opts.verify:
            return None
        if self.algorithm != "crc32":
            return base64.b64encode(await off_loop(body.digest, self.algorithm)).decode("ascii")
        if body.length <= HASH_INLINE:
            return crc32_header(body.crc32())
        return crc32_header(await off_loop(body.crc32))

    async def _check(
        self, headers: Headers, crc: str | None, body: _Body, what: str
    ) -> bytes | None:
        """The end-to-end check of a body sent with its CRC-32: the checksum the
        server answers (it checked the bytes against it before it stored them:
        S3, MinIO) must be ours; a server that answers none (moto) is checked
        by its ETag against the body's MD5, computed now - unless that ETag is no
        MD5 (SSE-KMS, SSE-C: the AWS SDKs skip the check then too).  That MD5,
        if it was checked."""
        if crc is None:
            return None
        said = headers.get(f"x-amz-checksum-{self.algorithm}")
        if said is not None:
            if said != crc:
                name = "CRC-32" if self.algorithm == "crc32" else self.algorithm.upper()
                raise S3Error(
                    "BadDigest",
                    f"the server's {name} for {what} is {said}, not the {crc} sent",
                    status=200,
                    bucket=self.plan.bucket,
                )
            return None
        etag_md5 = Expected.from_headers(body.length, headers).md5
        if etag_md5 is None:
            return None
        md5 = await off_loop(body.md5)
        if etag_md5 != md5.hex():
            raise S3Error(
                "BadDigest",
                f"the server's ETag for {what} is {etag_md5}, not the MD5 sent {md5.hex()}",
                status=200,
                bucket=self.plan.bucket,
            )
        return md5

    # -- what happened ----------------------------------------------------------------

    def _succeeded(self, item: _File, size: int, etag: str) -> None:
        self._copied(item.path, self.url(item.key), size, self.opts.verify)

    def _skipped(self, item: _File, why: str, *, dryrun: bool = False) -> None:
        self.summary.skipped += 1
        self._tell(Result(item.path, self.url(item.key), 0, dryrun=dryrun, skipped=why))


def _when(initiated: str) -> datetime:
    """A listed upload's Initiated (ISO 8601: ``2026-12-01T23:48:02.937Z``);
    one that cannot be read is taken for the oldest."""
    try:
        when = datetime.fromisoformat(initiated)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class _NotAFile(Exception):
    """A FIFO, a socket, a device: skipped (the message says which)."""


def _regular(info: os.stat_result) -> os.stat_result:
    """``info`` if it is a regular file's, else raise :class:`_NotAFile`."""
    why = not_regular(info.st_mode)
    if why is not None:
        raise _NotAFile(why)
    return info


def _unchanged(fd: int, before: os.stat_result, then: str) -> None:
    """Raise a LocalError if the file's size or mtime moved since ``before``:
    its parts were read at different times, so the object may mix versions."""
    now = os.fstat(fd)
    if (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise _Changed(f"the file changed while it was uploaded: {then}")


class _Changed(Exception):
    pass


@dataclass(frozen=True)
class _Body:
    """What one request sends: ``length`` bytes of the open file ``fd`` from
    ``offset``, read as they are sent - or ``data``, held (a part of stdin)."""

    length: int
    fd: int = -1
    offset: int = 0
    data: bytes | bytearray | None = None
    #: A copy's part: bytes ``offset``.. of this x-amz-copy-source (pinned to
    #: its ``etag``), copied by the server (UploadPartCopy), never read here.
    copy: str | None = None
    etag: str | None = None
    #: The copy's source's SSE-C headers (x-amz-copy-source-server-side-encryption-customer-*).
    copy_headers: Sequence[tuple[str, str]] = ()
    #: A relayed copy's part (:mod:`surge.s3.copies`): its bytes got by
    #: ``fetch()`` (a body with ``data``) in the part's request slot, and
    #: ``release()`` once it is sent (its bytes let go).
    fetch: Callable[[], Awaitable[_Body]] | None = None
    release: Callable[[], None] | None = None

    def make(self) -> bytes | bytearray | FileRange:
        """The body for one try (made afresh for each)."""
        return self.data if self.data is not None else FileRange(self.fd, self.offset, self.length)

    def _blocks(self, stop: threading.Event | None) -> Iterator[bytes | bytearray | memoryview]:
        if self.data is not None:
            return iter((self.data,))
        return iter(blocks(self.fd, self.offset, self.length, stop))

    def crc32(self, stop: threading.Event | None = None) -> int:
        """Its CRC-32 (blocking: a thread for a big one)."""
        value = 0
        for block in self._blocks(stop):
            value = crc32(block, value)
        return value

    def digest(self, algorithm: str, stop: threading.Event | None = None) -> bytes:
        """Its checksum of ``algorithm`` (:data:`ALGORITHMS`; blocking: a thread)."""
        factory = ALGORITHMS[algorithm]
        assert factory is not None  # PutOptions refuses an algorithm none computes
        hasher = factory()
        for block in self._blocks(stop):
            hasher.update(bytes(block))
        return hasher.digest()

    def md5(self, stop: threading.Event | None = None) -> bytes:
        """Its MD5 (blocking: a thread for a big one)."""
        md5 = hashlib.md5(usedforsecurity=False)
        for block in self._blocks(stop):
            md5.update(block)
        return md5.digest()


async def _file_parts(fd: int, size: int, part_size: int) -> AsyncIterator[_Body]:
    """A file's parts, each read as it is sent."""
    for first in range(0, size, part_size):
        yield _Body(min(part_size, size - first), fd=fd, offset=first)


async def _stdin_parts(first: bytes, part_size: int, bucket: str) -> AsyncIterator[_Body]:
    """stdin's parts, ``first`` (what was read to tell a small stream from a big
    one) and then what comes, read as they are wanted."""
    held = first
    count = 0
    while True:
        while len(held) < part_size:
            more = await read_stdin(part_size - len(held))
            if not more:
                break
            held += more
        if not held:
            return
        count += 1
        if count > MAX_PARTS:
            raise S3Error(
                "EntityTooLarge",
                f"stdin is longer than {MAX_PARTS:,} parts of {part_size:,} bytes: give a"
                " bigger --part-size",
                status=None,
                bucket=bucket,
            )
        part, held = held[:part_size], held[part_size:]
        yield _Body(len(part), data=part)
        if len(part) < part_size:
            return


def _combined(crcs: list[str | None], part_size: int, size: int) -> str:
    """The whole file's CRC-32 from its parts' (in order, each ``part_size``
    bytes but the last): no second read of the file."""
    value = 0
    for index, header in enumerate(crcs):
        assert header is not None
        length = min(part_size, size - index * part_size)
        value = crc32_combine(value, int.from_bytes(base64.b64decode(header), "big"), length)
    return crc32_header(value)


def _is_multipart_etag(etag: str) -> bool:
    body, dash, count = etag.strip('"').partition("-")
    return bool(dash) and len(body) == 32 and count.isdigit()


async def upload_async(
    source: str,
    destination: str,
    *,
    options: UploadOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> Summary:
    """Upload ``source`` (a file; with ``recursive=True``, every file under a
    directory) to ``destination`` (``s3://bucket/key``, or ``s3://bucket/prefix/``);
    options as :class:`UploadOptions`.  Per-file failures are in the summary,
    and the FIFOs, sockets and devices skipped; a bad argument raises
    :class:`UsageError`, a missing bucket :class:`S3Error`."""
    opts = options or UploadOptions(**kwargs)
    the_plan = plan_upload(source, destination, opts)
    target = opts.target(the_plan.bucket)
    return await run_transfer(
        opts,
        client,
        opts.concurrency,
        lambda client, summary: _Upload(the_plan, opts, target, client, summary),
    )


def upload(
    source: str, destination: str, *, options: UploadOptions | None = None, **kwargs: Any
) -> Summary:
    """:func:`upload_async` for synchronous code (on its own event loop; in a
    thread when a loop is running already, as in Jupyter)."""
    opts = options or UploadOptions(**kwargs)
    return run_sync(lambda: upload_async(source, destination, options=opts))


# -- surge s3 sync ---------------------------------------------------------------------


async def sync_async(
    source: str,
    destination: str,
    *,
    delete: bool = False,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> Summary:
    """Make ``destination`` hold what ``source`` holds, as ``aws s3 sync``: one
    of the two is ``s3://bucket/prefix/``, the other a directory - or both
    are, copied by the server (:mod:`surge.s3.copies`).  An object or
    file is copied unless the destination has it with the same size and no
    older (by whole seconds; a download sets the file's mtime to the object's
    LastModified, so the next sync finds it the same); ``delete=True`` removes
    from the destination what the source lacks.  An interrupted download or
    upload resumes where it stopped: what was complete is unchanged.  Options
    as :class:`surge.s3.DownloadOptions` or :class:`UploadOptions`."""
    if source.startswith("s3://") and destination.startswith("s3://"):
        from surge.s3.copies import CopyOptions, copy_async

        between = CopyOptions(sync=True, delete=delete, **kwargs)
        return await copy_async(source, destination, options=between, client=client)
    if source.startswith("s3://") and not destination.startswith("s3://"):
        down = DownloadOptions(sync=True, delete=delete, **kwargs)
        return await download_async(source, destination, options=down, client=client)
    if destination.startswith("s3://") and not source.startswith("s3://"):
        up = UploadOptions(sync=True, delete=delete, **kwargs)
        return await upload_async(source, destination, options=up, client=client)
    raise UsageError(f"{source!r} to {destination!r}: one of the two must be s3://bucket/...")


def sync(source: str, destination: str, *, delete: bool = False, **kwargs: Any) -> Summary:
    """:func:`sync_async` for synchronous code."""
    return run_sync(lambda: sync_async(source, destination, delete=delete, **kwargs))
