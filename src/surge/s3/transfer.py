"""Downloading objects: ``surge s3 cp s3://... PATH`` and :func:`download`.

    summary = surge.s3.download("s3://bucket/logs/", "logs/", recursive=True,
                                exclude=["*"], include=["*.gz"])
    print(summary.objects, summary.bytes, summary.failures)

How it runs:

* One pooled :class:`surge.http.AsyncClient` and ``concurrency`` workers (256
  by default, as s5cmd's ``--numworkers``) take jobs from one queue: whole small
  objects, and the parts of big ones.  The listing (the fast parallel lister)
  feeds the queue as its pages arrive; a bound on objects waiting keeps memory
  flat however long the listing.
* An object larger than ``multipart_threshold`` (8 MiB) is read as ranged GETs
  of ``part_size`` each (by default 8 MiB, growing with the object up to 64
  MiB: :func:`range_size_for`; at most :data:`MAX_PARTS` parts),
  :data:`PARTS_IN_FLIGHT` at a time, pinned to the object's ETag with If-Match,
  each written at its offset: one big object uses several connections, and
  memory is the connections' read-ahead and the writer's budget, never the
  object.  An object's parts come before new objects in the queue, so few
  files are open at once.
* Writes (:class:`_Writer`): on the event loop as the chunks come (cheapest)
  until the page cache pushes back - writes that sleep in the kernel - then
  on a writer thread, within :data:`WRITE_BUDGET` bytes held per download: past
  it, sinks stop taking chunks, so connections stop reading.
* Every object is written to a temporary file beside its final name
  (``.surge-<random>-<name>``) and renamed into place (``os.replace``, atomic
  on POSIX) only when complete and verified (:mod:`surge.s3.checksums`: length,
  the single-part ETag's MD5, the ``x-amz-checksum-*`` that can be computed
  here).  A failed or cancelled object's temporary file is removed; a process
  killed outright leaves only temporary names, never a short file under the
  final name, and a re-run writes every object again.
* An object that fails (404, 403, a part that kept failing after the retries,
  a checksum that does not match, a key that would escape the destination)
  is a :class:`Failure` in the summary; the others go on.  SlowDown, 5xx and
  transient transport errors are retried as the shared retry policy says.

Uploads (:mod:`surge.s3.uploads`) share the options (:class:`TransferOptions`),
the summary, the filters and the client's setup.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import errno
import itertools
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from queue import SimpleQueue
from resource import RUSAGE_THREAD, getrusage
from time import perf_counter
from typing import Any, Protocol, TypeVar

from surge import temps
from surge._log import logger as get_logger
from surge.errors import LocalResourceError, S3Error, SinkError, UsageError
from surge.http.client import AsyncClient
from surge.http.response import Headers, Response
from surge.loops import new_event_loop
from surge.retry import RetryPolicy
from surge.s3.api import EndpointOptions, ListOptions, list_pages
from surge.s3.checksums import (
    COMPOSITE,
    FULL,
    UNKNOWN,
    Digest,
    Expected,
    composite,
    crc32,
    crc32_combine,
    crc32_header,
    file_mismatch,
    off_loop,
    part_digests,
)
from surge.s3.config import Target, split_s3_url
from surge.s3.interrupts import run_cleanly
from surge.s3.objects import INCOMPLETE, Objects, check_range, stream_object, stream_parts
from surge.s3.parse import S3Object
from surge.s3.paths import (
    FilterRule,
    Filters,
    UnsafeKey,
    local_path,
    not_regular,
    prefix_dir,
    relative_parts,
    stays_inside,
    walk_files,
)
from surge.s3.putoptions import CustomerKey
from surge.sinks import (
    ENDS_RUN,
    NotRegular,
    Sink,
    names_stdout,
    open_output,
    open_replacement,
    read_up_to,
    stdout_sink,
    write_error,
)

T = TypeVar("T")
_log = get_logger("surge.s3")
MiB = 1024 * 1024
DEFAULT_PART_SIZE = 8 * MiB  # the AWS CLI's multipart_chunksize and threshold
#: s5cmd's default number of workers (--numworkers 256).
DEFAULT_CONCURRENCY = 256
MAX_CONCURRENCY = 4096
#: Parts per object at most: a 1 TiB object is read in 10,000 parts of ~105 MiB,
#: not 131,072 of 8 MiB (S3's own limit for uploaded parts, reused here).
MAX_PARTS = 10_000
#: Listed objects waiting for a worker, per worker (the queue's bound).
WAITING_PER_WORKER = 2
#: Ranged GETs of one object in flight at most (s5cmd: 5; the AWS CLI: 10 in
#: all).  Past a few, more streams of one object add no throughput on a link
#: that one stream nearly fills (loopback, a LAN), only connections, server
#: work and bytes held; objects beyond the first take the other workers.
PARTS_IN_FLIGHT = 8
#: A download's ranges, when no part size is given: 8 MiB, or as few as keep
#: PARTS_IN_FLIGHT going - 1/RANGES_WANTED of the object, in whole MiB (MinIO
#: reads and checks its data in 1 MiB blocks) - up to MAX_AUTO_RANGE.  Fewer,
#: bigger ranges cost the server less: MinIO spent 2.86 s of CPU serving a 2 GB
#: object in 8 MiB ranges, 1.87 s in 64 MiB ones; moto copies the whole object
#: for every range (7.0 s of its CPU for a 256 MB object in 32 ranges, 1.55 s
#: for s5cmd's 6 of 50 MB).  And fewer GETs are fewer to pay for on S3.
RANGES_WANTED = PARTS_IN_FLIGHT
MAX_AUTO_RANGE = 64 * MiB
#: Writes start on the event loop, each chunk (~256 KiB, as uvloop reads them)
#: as it comes: a write into the page cache right after the bytes came off the
#: socket is the cheapest there is (the chunk still in the CPU's cache, no
#: thread hop).  But under writeback pressure a 256 KiB write blocked for
#: ~2 ms: on the event loop that was 4.8 s of a 512 MB download's 9.5 s, with
#: no socket read meanwhile.  So a write slower than SLOW_WRITE counts, and
#: once such writes have cost the loop BLOCKED_LIMIT in all, the download's
#: writes go to WRITE_THREADS thread (``os.pwritev`` lets go of the GIL): one,
#: as two threads writing one file contend for its inode lock.
#: Only a write that slept counts (the thread's voluntary context switches
#: rose: dirty-page throttling, a lock, the disk).  One that was preempted (on
#: this shared 2-core machine, 1-3% of 256 KiB writes took over 1 ms of wall
#: time with under 0.5 ms of CPU) does not, nor one that was only the kernel's
#: CPU (the first writes into a fresh file, allocating its page cache: 1-4 ms
#: each, no sleep): a thread would do the same work, on chunks gone cold,
#: beside the event loop on a machine whose cores are taken.  Counted, they had
#: every 2 GiB download on the thread early (after 18 and 507 of ~8,200 writes
#: in two traced runs), for 0.6-0.9 s more CPU (median) than writes kept on
#: the loop in 3 of 4 interleaved sets (benchmarks/README.md, issue #46).
SLOW_WRITE = 0.001
BLOCKED_LIMIT = 0.010
WRITE_THREADS = 1
#: Handed to a thread, a body's chunks go in batches of at least this many
#: bytes, one ``os.pwritev`` each (no copy to join them).  Not more: a batch
#: of 1 MiB cost ~0.3 s more system CPU per 512 MB than 256 KiB (the chunks
#: held longer fall out of the CPU's cache before the kernel copies them).
WRITE_BATCH = 256 * 1024
#: Chunks in one batch at most (IOV_MAX, the buffers one pwritev takes, is 1,024
#: on Linux): a slow sender's tiny chunks go in more batches.
WRITE_BUFFERS = 512
#: Bytes received and not yet written, per download, at most (plus, per sink,
#: the chunk that found it spent).  Past it a sink takes no more chunks until writes catch up, so
#: its connection stops reading (``STREAM_HIGH_WATER``) and TCP holds the server
#: back: memory stays bounded whatever the part size and the concurrency.
WRITE_BUDGET = 32 * MiB
#: With writes on the threads, a whole object of at most this many bytes is
#: still written on the event loop, in one call at its end: a small write costs
#: less than the hop to a thread.
WRITE_INLINE = 256 * 1024


def range_size_for(size: int, part_size: int | None) -> int:
    """The ranges a download of ``size`` bytes is read in: ``part_size``, or
    (None) 8 MiB growing to 1/:data:`RANGES_WANTED` of the object up to
    :data:`MAX_AUTO_RANGE`; in any case few enough for :data:`MAX_PARTS`."""
    if part_size is None:
        wanted = -(-size // (RANGES_WANTED * MiB)) * MiB
        part_size = max(DEFAULT_PART_SIZE, min(MAX_AUTO_RANGE, wanted))
    return max(part_size, -(-size // MAX_PARTS))


@dataclass
class TransferOptions(EndpointOptions):
    """What downloads and uploads share: which objects, how many requests in
    flight, the part size, retries, and who is told of each result."""

    recursive: bool = False
    #: Globs as the AWS CLI's --include/--exclude: the excludes are applied
    #: first, then the includes (later wins); ``filters`` gives the order itself.
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    filters: Sequence[FilterRule] = ()
    concurrency: int = DEFAULT_CONCURRENCY  # requests in flight (objects and parts)
    #: Bytes a part: an upload's parts (growing to fit 10,000) and a download's
    #: ranges.  None: 8 MiB (the AWS CLI's), and a download's ranges grow with
    #: the object (:func:`range_size_for`).
    part_size: int | None = None
    multipart_threshold: int | None = None  # None: the part size (8 MiB if None)
    dryrun: bool = False
    verify: bool = True  # MD5 / x-amz-checksum-* where available (length: always)
    #: As ``surge s3 sync``: copy only what the destination lacks, or has with
    #: another size or older (by whole seconds) than the source.
    sync: bool = False
    #: With ``sync``: remove from the destination what the source lacks (what
    #: the filters take only).
    delete: bool = False
    retries: int = 5
    max_time: float = 300.0  # seconds per request (one part or one small object)
    #: Keys a DeleteObjects (rm, a sync's --delete, mv): 1..1,000 (S3's limit).
    delete_batch: int = 1000
    #: Listing requests in flight (surge s3 ls --parallel): a recursive
    #: download's source, a sync's destination.
    list_parallel: int = 16
    #: Told of each object as it is done (copied, would be, or failed).
    on_result: Callable[[Result], None] | None = None
    #: Told of the running summary after each object and part.
    on_progress: Callable[[Summary], None] | None = None
    #: Awaited before each object is taken on: a consumer's back-pressure
    #: (the results' async iterators: :mod:`surge.s3.results`).
    room: Callable[[], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise UsageError(f"concurrency must be 1..{MAX_CONCURRENCY}, not {self.concurrency}")
        if self.part_size is not None and self.part_size < 1:
            raise UsageError(f"part size must be at least 1 byte, not {self.part_size}")
        if self.multipart_threshold is not None and self.multipart_threshold < 0:
            raise UsageError("multipart threshold must be 0 or more")
        if self.retries < 0:
            raise UsageError(f"retries must be 0 or more, not {self.retries}")
        for kind, _ in self.filters:
            if kind not in ("include", "exclude"):
                raise UsageError(f"a filter is ('include' | 'exclude', pattern), not {kind!r}")
        if self.list_parallel < 1:
            raise UsageError(f"list parallelism must be at least 1, not {self.list_parallel}")
        if not 1 <= self.delete_batch <= 1000:
            raise UsageError(f"a delete batch is 1..1000 keys, not {self.delete_batch}")
        if self.delete and not self.sync:
            raise UsageError("delete is for a sync (sync=True)")
        if self.sync:
            self.recursive = True  # a sync copies a tree, as aws s3 sync

    @property
    def threshold(self) -> int:
        """Objects larger than this go in parts."""
        if self.multipart_threshold is not None:
            return self.multipart_threshold
        return DEFAULT_PART_SIZE if self.part_size is None else self.part_size

    def rules(self) -> list[FilterRule]:
        """The filters in the order they apply: excludes, includes, then ``filters``."""
        rules: list[FilterRule] = [("exclude", p) for p in self.exclude]
        rules += [("include", p) for p in self.include]
        return rules + list(self.filters)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.retries, 0.1, 10.0)


@dataclass
class DownloadOptions(TransferOptions, CustomerKey):
    """The options of :func:`download` (and of ``surge s3 cp s3://... PATH``);
    ``sse_c`` and ``sse_c_key``: the objects' SSE-C key, sent with each HEAD
    and GET (as the AWS CLI's ``--sse-c`` and ``--sse-c-key``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_customer_key()


@dataclass
class Failure:
    """An object not copied: ``code`` is S3's (NoSuchKey, AccessDenied,
    PreconditionFailed, ...), a transport error class, ``BadDigest`` (the bytes
    are not what the server said), ``UnsafeKey`` (refused: it would be written
    outside the destination), ``InvalidKey`` (a file name that is no S3 key)
    or ``LocalError`` (the file could not be written or read)."""

    source: str
    destination: str | None
    code: str
    message: str


@dataclass
class Result:
    source: str | None  # None: a sync's deletion
    destination: str | None
    size: int
    failure: Failure | None = None
    dryrun: bool = False
    #: A sync's deletion: ``destination`` removed (``source`` is None then).
    deleted: bool = False
    #: Not copied (or, by a sync's --delete, not removed), and no failure: why
    #: ("not a regular file (a FIFO)": a FIFO, socket or device file), as the
    #: AWS CLI warns and skips.  ``source`` is the local file.
    skipped: str | None = None
    #: The id of a multipart upload of ``destination`` that an earlier run
    #: left (killed before it could abort it), aborted by this one.
    left_aborted: str | None = None
    #: A move's: copied to ``destination``, and ``source`` deleted.
    moved: bool = False
    #: ``rm --all-versions``: the version (or delete marker) of ``destination`` deleted.
    version_id: str | None = None
    #: ``rm --incomplete``: the multipart upload of ``destination`` aborted.
    upload_id: str | None = None


@dataclass
class Summary:
    objects: int = 0  # copied (with dryrun: would be)
    bytes: int = 0  # of the objects copied
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    verified: int = 0  # objects checked by MD5 or a checksum, besides the length
    unverified: int = 0  # objects checked by their length only
    #: Why some checks could not be made (e.g. "no crc32c package installed").
    notes: set[str] = field(default_factory=set)
    excluded: int = 0  # by --exclude/--include
    unchanged: int = 0  # a sync's objects the same on both sides: not copied
    deleted: int = 0  # a sync's --delete: removed from the destination
    folders: int = 0  # folder markers (keys ending in "/"): not files
    skipped: int = 0  # local files that are no regular ones (FIFOs, sockets, devices)
    parts: int = 0  # ranged GETs of big objects, or parts uploaded
    requests: int = 0
    retries: int = 0
    received: int = 0  # bytes off the wire so far (progress; retried bytes included)
    sent: int = 0  # bytes of parts and objects uploaded so far (progress)
    dryrun: bool = False
    #: Multipart uploads begun and neither completed nor aborted yet: upload
    #: id -> s3:// URL.  What an interrupted run could not abort is left here.
    open_uploads: dict[str, str] = field(default_factory=dict)
    #: Multipart uploads that earlier runs left of the keys uploaded, aborted.
    left_aborted: int = 0
    #: A copy between buckets relayed through this process (the source on
    #: another endpoint, or read with other credentials), not by the server.
    relayed: bool = False
    #: A relayed copy's bytes held in memory at once, at most (a bound of
    #: concurrency x the part size: :mod:`surge.s3.copies`).
    held_most: int = 0

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "bytes_per_second": round(self.bytes_per_second),
            "failed": self.failed,
            "failures": [vars(f) for f in self.failures],
            "verified": self.verified,
            "unverified": self.unverified,
            "notes": sorted(self.notes),
            "excluded": self.excluded,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "folders": self.folders,
            "skipped": self.skipped,
            "parts": self.parts,
            "requests": self.requests,
            "retries": self.retries,
            "dryrun": self.dryrun,
            "left_aborted": self.left_aborted,
            "relayed": self.relayed,
        }


async def despite_cancel(work: Awaitable[T]) -> T:
    """``work`` run to its end even if the task awaiting it is cancelled
    meanwhile (again and again), and then that cancellation raised: for what
    must not be cut short - aborting a multipart upload, whose parts would
    otherwise stay stored (and billed) with nothing to say so."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


#: Answers that end a whole run at once: every other request of the run would
#: get the same (one line naming the bucket, not one failure per object).
RUN_ENDING = frozenset({"NoSuchBucket", "InvalidBucketName"})


class RunStop:
    """How a transfer's run ends at once, for what every other object of the
    run would meet too: a :data:`RUN_ENDING` answer to any of its requests, or
    a local write that fails as no other file would escape (a full disk, a
    size limit, the device failing, the reader of stdout gone: the errno
    values of :data:`surge.sinks.ENDS_RUN`).  The first such error cancels the
    run's task where it waits (its in-flight work is cancelled as on Ctrl-C:
    temporary files removed, multipart uploads aborted), and the run then
    raises that error (an :class:`S3Error`, or a :class:`SinkError`: one line,
    exit 2 on the command line) instead of :class:`asyncio.CancelledError` -
    unless the run was cancelled from outside (Ctrl-C) too, which wins."""

    def __init__(self) -> None:
        #: the first run-ending error
        self.error: S3Error | SinkError | None = None
        #: the run's task while it may still be cancelled for that
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False

    def ends_run(self, error: S3Error) -> bool:
        """Whether ``error`` ends the run (then it is being stopped, and the
        error is the run's, not a failure line)."""
        if error.code not in RUN_ENDING:
            return False
        self.end(error)
        return True

    def local(self, error: OSError | SinkError, name: str, doing: str = "write") -> bool:
        """Whether a local ``error`` on the file ``name`` ends the run (see
        :data:`surge.sinks.ENDS_RUN`); then it is being stopped."""
        if error.errno not in ENDS_RUN:
            return False
        self.end(error if isinstance(error, SinkError) else write_error(name, error, doing))
        return True

    def end(self, error: S3Error | SinkError) -> None:
        """End the run with ``error`` (the first one given wins)."""
        if self.error is None:
            self.error = error
            if self.task is not None:
                self.cancelled = True
                self.task.cancel()

    def settle(self) -> None:
        """The run is cleaning up: no cancelling it from here on."""
        self.task = None

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Around the run, in its task: the cancellation :meth:`end` made,
        raised as the error that made it - or that error once the run is
        done, if it came while the run was cleaning up."""
        task = asyncio.current_task()
        self.task = task
        try:
            yield
        except asyncio.CancelledError:
            # uncancel() == 0: nobody else (Ctrl-C) cancelled the run too
            error = self.error
            if self.cancelled and error is not None and task is not None and not task.uncancel():
                raise error from None
            raise
        finally:
            self.task = None
        if self.error is not None:
            raise self.error

    def tell(self, on_result: Callable[[Result], None] | None, result: Result) -> None:
        """``on_result(result)``; a :class:`SinkError` it raises (the command
        line's stdout is full, or its reader gone) ends the run."""
        if on_result is None:
            return
        try:
            on_result(result)
        except SinkError as e:
            self.end(e)


class Counts(Protocol):
    """A run's request counts (its :class:`Objects`, or several)."""

    @property
    def requests(self) -> int: ...

    @property
    def retries(self) -> int: ...


class TransferRun:
    """What every direction of a transfer shares (download, upload, copy,
    delete): its options, client and running summary, the :class:`RunStop`
    that ends it at once, and the one place each object's outcome is counted
    in the summary and told to ``on_result`` (a sink that fails ends the run)
    and ``on_progress`` - the role of s3transfer's TransferCoordinator, one
    owner per side effect.  A direction is a subclass with ``_run`` (what
    there is to do) and ``objects`` (its requests, counted into the summary
    by :func:`run_transfer`)."""

    objects: Counts

    def __init__(self, opts: TransferOptions, client: AsyncClient, summary: Summary) -> None:
        self.opts = opts
        self.client = client
        self.summary = summary
        self.stop = RunStop()

    async def run(self) -> None:
        with self.stop.watching():
            await self._run()

    async def _run(self) -> None:
        raise NotImplementedError

    def counts(self) -> tuple[int, int]:
        """The run's requests and retries, however it ended."""
        return self.objects.requests, self.objects.retries

    async def _listed(self, url: str, endpoint: dict[str, Any]) -> AsyncGenerator[S3Object, None]:
        """The objects under ``url`` on ``endpoint`` (:meth:`EndpointOptions.endpoint`'s
        keywords), as the listing's pages come, ``list_parallel`` requests at a
        time."""
        options = ListOptions(
            recursive=True,
            parallel=self.opts.list_parallel,
            retries=self.opts.retries,
            **endpoint,
        )
        async with aclosing(list_pages(url, options=options, client=self.client)) as pages:
            async for page in pages:
                for entry in page:
                    if isinstance(entry, S3Object):
                        yield entry

    # -- what happened ----------------------------------------------------------------

    def _copied(self, source: str, destination: str | None, size: int, verified: bool) -> None:
        summary = self.summary
        summary.objects += 1
        summary.bytes += size
        if verified:
            summary.verified += 1
        else:
            summary.unverified += 1
        self._tell(Result(source, destination, size))

    def _fail(
        self,
        source: str,
        destination: str | None,
        code: str,
        message: str,
        *,
        deleted: bool = False,
    ) -> None:
        """A failure of one object (``deleted``: of its delete, sync's
        ``--delete``: told as rm tells one)."""
        if self.stop.error is not None:
            return  # the run ends with that error, not a line per object
        failure = Failure(source, destination, code, message)
        self.summary.failures.append(failure)
        self._tell(Result(source, destination, 0, failure, deleted=deleted))

    def _tell(self, result: Result) -> None:
        self.stop.tell(self.opts.on_result, result)

    def _progress(self) -> None:
        if self.opts.on_progress is not None:
            self.opts.on_progress(self.summary)


class BucketRun(TransferRun):
    """A run whose objects are in one bucket (a download's source, an upload's
    or a copy's destination): ``objects`` makes its requests there."""

    objects: Objects

    def __init__(
        self,
        opts: TransferOptions,
        target: Target,
        bucket: str,
        client: AsyncClient,
        summary: Summary,
    ) -> None:
        super().__init__(opts, client, summary)
        self.target = target
        self.bucket = bucket
        self.objects = Objects(target, client, opts.retry_policy())

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


@dataclass
class _Job:
    key: str
    size: int
    path: str
    head: Headers | None = None  # known already (a single object is HEADed first)
    modified: float | None = None  # the object's LastModified (epoch): the file's mtime


@dataclass
class _Big:
    """A big object being read in parts into its temporary file."""

    job: _Job
    file: Sink  # the temporary file (surge.sinks.open_replacement)
    size: int
    etag: str | None
    expected: Expected
    remaining: int  # parts not yet done
    #: the parts not yet queued: (index, first byte, last byte)
    unqueued: Iterator[tuple[int, int, int]]
    order: int  # the object's place in the queue
    part_size: int
    failure: tuple[str, str] | None = None
    #: each part's CRC-32, computed as it arrives, when the object's checksum
    #: is a whole-object CRC-32: combined at the end, no read-back
    crcs: list[int] | None = None


@dataclass
class _Part:
    big: _Big
    index: int
    first: int
    last: int


@dataclass(frozen=True)
class _Plan:
    bucket: str
    prefix: str  # the listing's prefix, or the single object's key
    destination: str  # a directory (recursive, or a single object into a dir) or a file
    into_directory: bool
    filters: Filters
    #: A single object to a stream: stdout (``-``), a FIFO, a device - written
    #: in place, in order (see :func:`is_stream`).
    stream: bool = False


def is_stream(destination: str) -> bool:
    """Whether a single object's ``destination`` is written as a stream, in
    place and in order: stdout (``-``, ``/dev/stdout``), or a FIFO or a device
    (``/dev/null``: never replaced by a file, as root would)."""
    if names_stdout(destination):
        return True
    try:
        mode = os.stat(destination).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_local(end: str, path: object) -> None:
    """A download's destination or an upload's source (``end``) is a local
    path (or ``-``), or a UsageError says what it is instead."""
    if not isinstance(path, str) or not path:
        raise UsageError(f"the {end} is an empty path")
    if path.startswith("s3://"):
        raise UsageError(f"{path!r}: copies between buckets are not supported yet")


def plan(source: str, destination: str, opts: DownloadOptions) -> _Plan:
    """Where a download reads and writes, or a UsageError naming the problem.
    Nothing is created here (a dry run writes nothing)."""
    check_local("destination", destination)
    bucket, prefix = split_s3_url(source)
    rules = opts.rules()
    if opts.recursive:
        if prefix and not prefix.endswith("/"):
            prefix += "/"  # as the AWS CLI: a recursive source is a "directory"
        if names_stdout(destination):
            what = "a sync" if opts.sync else "--recursive"
            raise UsageError(f"{destination!r} is stdout: {what} needs a directory")
        if os.path.exists(destination) and not os.path.isdir(destination):
            raise UsageError(f"destination {destination!r} exists and is not a directory")
        _check_writable(destination)
        return _Plan(bucket, prefix, destination, True, Filters(bucket, prefix, rules))
    if not prefix or prefix.endswith("/"):
        raise UsageError(f"{source!r} names no object: give a key, or --recursive for a prefix")
    if is_stream(destination):
        filters = Filters(bucket, prefix_dir(prefix), rules)
        return _Plan(bucket, prefix, destination, False, filters, stream=True)
    into = destination.endswith(("/", os.sep)) or os.path.isdir(destination)
    _check_writable(destination if into else os.path.dirname(os.path.abspath(destination)))
    return _Plan(bucket, prefix, destination, into, Filters(bucket, prefix_dir(prefix), rules))


def _check_writable(directory: str) -> None:
    """The directory, or the nearest ancestor that exists (the rest is made),
    must be a directory we can write in."""
    path = os.path.abspath(directory)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if not os.path.isdir(path):
        raise UsageError(f"destination {directory!r}: {path!r} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"destination {directory!r}: {path!r} is not writable")


class _Download(BucketRun):
    def __init__(
        self,
        the_plan: _Plan,
        opts: DownloadOptions,
        target: Target,
        client: AsyncClient,
        summary: Summary,
    ) -> None:
        super().__init__(opts, target, the_plan.bucket, client, summary)
        self.plan = the_plan
        self.opts: DownloadOptions = opts
        self.objects.reading = opts.customer_headers()
        self.threshold = opts.threshold
        self.jobs: asyncio.PriorityQueue[tuple[int, int, int, _Job | _Part]] = (
            asyncio.PriorityQueue()
        )
        self.room = asyncio.Semaphore(WAITING_PER_WORKER * opts.concurrency)
        self.order = itertools.count()
        self.pending = 0
        self.listed = False
        self.done = asyncio.Event()
        self.crash: BaseException | None = None
        #: temporary files not yet renamed into place: removed if the run stops
        self.files: set[Sink] = set()
        #: directories a file may be written into (stays_inside said so)
        self.inside: set[str] = set()
        self.writer = _Writer()
        #: A sync with --delete: objects whose directory is a file here, tried
        #: again once the deletions are done (None: no more waiting)
        self.blocked: list[_Job] | None = [] if opts.delete else None
        #: a listing: every file a listed key is written to, relative to the
        #: destination - two keys on one file are a collision, not two writes
        self.placed: set[str] = set()
        #: a sync with --delete: what it keeps (the files of listed objects)
        self.seen: set[str] | None = self.placed if opts.delete else None
        #: listed keys that are not their own file's name (``./a``, ``a//b``):
        #: placed once the listing is done, after the keys that are
        self.respelled: list[tuple[str, int, float]] = []

    # -- what there is to do -----------------------------------------------------

    async def _run(self) -> None:
        workers = [asyncio.ensure_future(self._worker()) for _ in range(self.opts.concurrency)]
        try:
            if self.opts.recursive:
                await self._list()
            else:
                await self._single()
            self.listed = True
            self._check_done()
            await self.done.wait()
            if self.crash is not None:
                raise self.crash
            if self.seen is not None and os.path.isdir(self.plan.destination):
                self._delete_extra()
                await self._blocked_again()
        finally:
            self.stop.settle()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self.writer.close()  # no descriptor closed under a write
            for file in list(self.files):
                file.discard()
            self.files.clear()

    async def _list(self) -> None:
        listing = self._listed(self.url(self.plan.prefix), self.opts.endpoint(self.target))
        async with aclosing(listing) as listed:
            async for entry in listed:
                await self._offer(entry.key, entry.size, entry.last_modified.timestamp())
        # Deterministic whatever the listing's order: a file is the key that
        # spells it exactly, else the first (in key order) that maps to it.
        respelled, self.respelled = sorted(self.respelled), []
        for key, size, modified in respelled:
            await self._offer(key, size, modified, respelled=True)

    async def _single(self) -> None:
        key = self.plan.prefix
        destination = self.plan.destination
        if not self.plan.filters.takes(key):
            self.summary.excluded += 1
            return
        if self.plan.into_directory:
            try:
                destination = local_path(destination, key.rsplit("/", 1)[-1])
            except UnsafeKey as e:
                self._failed(key, None, "UnsafeKey", f"skipping: {e}")
                return
        if not self.plan.stream:
            self._clean(os.path.dirname(destination) or ".")
        try:
            head = await self.objects.head(key, checksums=self.opts.verify)
        except S3Error as e:
            if e.status == 404:
                e = await self._why_missing(key, e)
            if e.code in RUN_ENDING:
                raise e from None
            self._failed(key, destination, e.code, e.message)
            return
        size = int(head.get("content-length") or 0)
        modified = http_date(head.get("last-modified"))
        job = _Job(key, size, destination, head, modified)
        if self.plan.stream:
            await self._stream(job)
            return
        await self._enqueue(job)

    async def _stream(self, job: _Job) -> None:
        """A single object to a stream (stdout, a FIFO, a device): written in
        place and in order, part by part (the next part's GET under way while
        this one is written, on a thread: a reader that stalls holds neither
        the event loop nor Ctrl-C).  Its bytes are checked as they pass - the
        length, and the MD5 or whole-object checksum where the server gives
        one - so a mismatch is known once they are out: a failure all the
        same.  A write that fails (the reader gone, a full device) ends the
        run: one line, exit 2."""
        assert job.head is not None
        expected = Expected.from_headers(job.size, job.head)
        verify = self.opts.verify and (expected.whole or expected.md5 is not None)
        digest = Digest(expected) if verify else None
        try:
            out = _StreamOut(await _open_stream(job.path))
        except SinkError as e:
            self._local(job.key, job.path, e)
            return
        part_size = self.opts.part_size or DEFAULT_PART_SIZE
        try:
            parts = stream_parts(self.objects, job.key, job.head, part_size=part_size)
            async with aclosing(parts):
                async for chunks in parts:
                    self.summary.parts += 1
                    for chunk in chunks:
                        self.summary.received += len(chunk)
                        if digest is not None:
                            digest.update(chunk)
                    await out.write(chunks)
                    self._progress()
            await out.drain()
            mismatch = digest.mismatch() if digest is not None else None
            if mismatch is not None and (expected.checksum is None or expected.kind == FULL):
                raise S3Error("BadDigest", mismatch, status=200, bucket=self.plan.bucket)
            # a checksum of unknown kind that is not the whole object's may be
            # a composite one: the parts cannot be read back from a stream
            self._succeeded(job, job.size, expected, digest is not None and mismatch is None)
        except S3Error as e:
            if not self.stop.ends_run(e):
                self._failed(job.key, job.path, e.code, e.message)
        except SinkError as e:
            self._local(job.key, job.path, e)
        finally:
            out.close()

    async def _why_missing(self, key: str, error: S3Error) -> S3Error:
        """A HEAD's bare 404 cannot say whether the object or the bucket is
        missing: a GET's error document does (NoSuchKey or NoSuchBucket)."""
        try:
            await self.objects.get(key, _Refused(error))
        except S3Error as e:
            return e
        return error  # pragma: no cover - the sink refuses any body

    async def _offer(self, key: str, size: int, modified: float, respelled: bool = False) -> None:
        """A listed object: filtered, mapped to its path, queued (or, in a dry
        run, reported; in a sync, skipped if the file is the same).  A key
        that is not its file's name exactly is held until the listing is done
        (``respelled``): the key that is (``a`` for ``./a``) takes the file,
        and a second key on a file is a failure, so a sync settles."""
        if self.opts.room is not None:
            await self.opts.room()
        if key.endswith("/"):
            self.summary.folders += 1
            return
        if not respelled and self.plan.filters and not self.plan.filters.takes(key):
            self.summary.excluded += 1
            return
        relative_key = key[len(self.plan.prefix) :]
        try:
            parts = relative_parts(relative_key)
        except UnsafeKey as e:
            self._failed(key, None, "UnsafeKey", f"skipping: {e}")
            return
        if "/".join(parts) != relative_key and not respelled:
            self.respelled.append((key, size, modified))
            return
        relative = os.path.join(*parts)
        path = os.path.join(self.plan.destination, relative)
        if relative in self.placed:
            message = f"skipping: another key is written to the same file, {path}"
            self._failed(key, path, "UnsafeKey", message)
            return
        self.placed.add(relative)
        parent = os.path.dirname(path)
        if parent not in self.inside:  # checked once per directory
            if not stays_inside(self.plan.destination, path):
                message = "skipping: a symbolic link would take the file outside the destination"
                self._failed(key, path, "UnsafeKey", message)
                return
            if len(self.inside) >= 4096:  # bounded: a tree of many directories
                self.inside.clear()
            self.inside.add(parent)
            self._clean(parent)
        if self.opts.sync and same_file(path, size, modified):
            self.summary.unchanged += 1
            return
        await self._enqueue(_Job(key, size, path, modified=modified))

    def _delete_extra(self) -> None:
        """A sync's --delete: the destination's files that no listed object
        maps to (and that the filters take) are removed."""
        assert self.seen is not None
        root = self.plan.destination
        errors: list[tuple[str, str]] = []
        # Links to directories are neither entered nor removed: what they point
        # to is not the destination's to delete.
        for path, relative in walk_files(root, follow_links=False, errors=errors):
            if relative in self.seen:
                continue
            if temps.is_ours(path):
                # a download's (marked so), not a copy of any object: a live
                # run's is its own, a dead run's is garbage
                if not self.opts.dryrun:
                    temps.remove_if_stale(path)
                continue
            if self.plan.filters and not self.plan.filters.takes(self.plan.prefix + relative):
                continue
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue  # gone already
            why = None if stat.S_ISLNK(mode) else not_regular(mode)
            if why is not None:
                # a FIFO, a socket, a device: no copy of an object, never one
                # the AWS CLI lists, so never one a sync removes
                self.summary.skipped += 1
                self._tell(Result(path, None, 0, dryrun=self.opts.dryrun, skipped=why))
                continue
            if self.opts.dryrun:
                self.summary.deleted += 1
                self._tell(Result(None, path, 0, dryrun=True, deleted=True))
                continue
            try:
                os.unlink(path)
            except OSError as e:
                self._fail("", path, "LocalError", os_message(e), deleted=True)
                continue
            self.summary.deleted += 1
            self._tell(Result(None, path, 0, deleted=True))
        for where, message in errors:
            self._failed("", where, "LocalError", message)

    async def _enqueue(self, job: _Job) -> None:
        if self.opts.dryrun:
            self.summary.objects += 1
            self.summary.bytes += job.size
            self._tell(Result(self.url(job.key), job.path, job.size, dryrun=True))
            return
        await self.room.acquire()
        self.pending += 1
        self.jobs.put_nowait((1, next(self.order), 0, job))

    def _check_done(self) -> None:
        if self.listed and self.pending == 0:
            self.done.set()

    # -- the work ------------------------------------------------------------------

    async def _worker(self) -> None:
        try:
            while True:
                *_, job = await self.jobs.get()
                if isinstance(job, _Part):
                    await self._part(job)
                else:
                    self.room.release()
                    if job.size > self.threshold and job.size > 0:
                        await self._start_big(job)
                    else:
                        await self._whole(job)
                self._progress()
        except Exception as e:  # a bug: stop the run, say what it was
            self.crash = e
            self.done.set()

    async def _blocked_again(self) -> None:
        """A sync with --delete: the objects whose directory was a file when
        they came (``f`` a file, the object ``f/g``), now that --delete has
        removed the files the source lacks - as the AWS CLI, which deletes
        ``f`` and then downloads ``f/g``, ends in one run."""
        if not self.blocked:
            return
        jobs, self.blocked = self.blocked, None  # a second block is a failure
        self.listed = False
        self.done.clear()
        for job in jobs:
            await self._enqueue(job)
        self.listed = True
        self._check_done()
        await self.done.wait()
        if self.crash is not None:
            raise self.crash

    def _create(self, path: str) -> Sink:
        """The object's file, as a replacement (surge.sinks): a temporary file
        beside ``path``, locked and marked as this run's while it lives.  A
        FIFO or a device at ``path`` is :class:`NotRegular` (skipped: never
        opened, never replaced); a symbolic link is replaced, not followed."""
        directory = os.path.dirname(path)
        if directory:
            try:
                os.makedirs(directory, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                if self.blocked is None:
                    raise
                raise _Blocked from None
        file = open_replacement(path, in_place=False, follow_links=False)
        self.files.add(file)
        return file

    def _clean(self, directory: str) -> None:
        """The first time the run meets a directory of the destination: the
        temporary files of runs that are gone (killed) are removed."""
        if self.opts.dryrun:
            return
        removed = temps.remove_stale(directory)
        if removed:
            _log.debug("removed %d temporary files of a run that is gone in %s", removed, directory)

    def _install(self, file: Sink, path: str, modified: float | None) -> None:
        self.files.discard(file)
        try:
            if modified is not None:  # as the AWS CLI: the file's mtime is the object's
                os.utime(file.fd, (modified, modified))
            if os.path.isdir(path):
                raise IsADirectoryError(21, "a directory has the file's name", path)
            file.commit()
        except BaseException:
            file.discard()
            raise

    def _local(self, key: str, path: str, error: OSError | SinkError | LocalResourceError) -> None:
        """A local failure of one object: the run's end if no other file would
        escape it (a full disk: :meth:`RunStop.local`), else its failure line.
        A FIFO or a device where the file would go is skipped, as an upload
        skips one."""
        if isinstance(error, NotRegular):
            self.summary.skipped += 1
            why = f"{path} is {not_regular(error.mode)}"
            self._tell(Result(self.url(key), path, 0, skipped=why))
            return
        if isinstance(error, (OSError, SinkError)) and self.stop.local(error, path):
            return
        if isinstance(error, OSError):
            message = os_message(error)
        elif isinstance(error, SinkError) and error.errno is not None:
            message = os.strerror(error.errno)
        else:
            message = str(error)
        self._failed(key, path, "LocalError", message)

    async def _whole(self, job: _Job) -> None:
        file = None
        sink = None
        try:
            file = self._create(job.path)
            sink = _WholeFile(self.writer, file.fd, self.opts.verify, self.summary)
            await self.objects.get(job.key, sink, checksums=self.opts.verify)
            verified = await self._verdict(job.key, sink.expected, file.fd, sink.mismatch)
            self._install(file, job.path, job.modified)
            file = None
            self._succeeded(job, sink.received, sink.expected, verified)
        except S3Error as e:
            if not self.stop.ends_run(e):
                self._failed(job.key, job.path, e.code, e.message)
        except (OSError, SinkError, LocalResourceError) as e:
            self._local(job.key, job.path, e)
        except _Blocked:
            assert self.blocked is not None
            self.blocked.append(job)
        finally:
            try:
                if file is not None and file in self.files:
                    if sink is not None:
                        await sink.batches.settle()  # cancelled here: run() closes it
                    self.files.discard(file)
                    file.discard()
            finally:
                self.pending -= 1
                self._check_done()

    async def _start_big(self, job: _Job) -> None:
        try:
            head = job.head or await self.objects.head(job.key, checksums=self.opts.verify)
            size = int(head.get("content-length") or 0)
            expected = Expected.from_headers(size, head)
            file = self._create(job.path)
            os.ftruncate(file.fd, size)
        except S3Error as e:
            if not self.stop.ends_run(e):
                self._failed(job.key, job.path, e.code, e.message)
            self.pending -= 1
            self._check_done()
            return
        except (OSError, SinkError, LocalResourceError) as e:
            self._local(job.key, job.path, e)
            self.pending -= 1
            self._check_done()
            return
        except _Blocked:
            assert self.blocked is not None
            self.blocked.append(job)
            self.pending -= 1
            self._check_done()
            return
        part_size = range_size_for(size, self.opts.part_size)
        starts = range(0, size, part_size)
        ranges = ((i, first, min(first + part_size, size) - 1) for i, first in enumerate(starts))
        etag = head.get("etag")
        order = next(self.order)
        big = _Big(job, file, size, etag, expected, len(starts), ranges, order, part_size)
        checksum = expected.checksum
        if self.opts.verify and expected.whole and checksum is not None and checksum[0] == "crc32":
            big.crcs = [0] * len(starts)
        for _ in range(PARTS_IN_FLIGHT):
            self._queue_part(big)

    def _queue_part(self, big: _Big) -> None:
        """The object's next part into the queue (ahead of new objects)."""
        for index, first, last in big.unqueued:
            self.jobs.put_nowait((0, big.order, index, _Part(big, index, first, last)))
            return

    async def _part(self, part: _Part) -> None:
        big = part.big
        if big.failure is None:
            sink = _RangeFile(
                self.writer, big.file.fd, part.first, part.last, big.size, self.summary
            )
            sink.crc = 0 if big.crcs is not None else None
            try:
                self.summary.parts += 1
                await self.objects.get(
                    big.job.key, sink, first=part.first, last=part.last, if_match=big.etag
                )
                if big.crcs is not None and sink.crc is not None:
                    big.crcs[part.index] = sink.crc
            except S3Error as e:
                self.stop.ends_run(e)
                big.failure = big.failure or (e.code, e.message)
            except OSError as e:
                self.stop.local(e, big.job.path)  # a full disk: the run's end
                big.failure = big.failure or ("LocalError", os_message(e))
            finally:
                await sink.batches.settle()  # cancelled here: run() closes it
        big.remaining -= 1
        if big.remaining == 0:
            await self._finish_big(big)
        else:
            self._queue_part(big)

    async def _finish_big(self, big: _Big) -> None:
        job = big.job
        expected = big.expected
        verified = False
        try:
            mismatch = None
            if big.failure is None and big.crcs is not None:
                mismatch = _crc32_mismatch(big)
            elif big.failure is None and self.opts.verify and (expected.whole or expected.md5):
                # read back: an MD5 or a SHA cannot be built from parts that
                # arrived out of order (the file is in the page cache still)
                try:
                    mismatch = await off_loop(file_mismatch, big.file.fd, expected)
                except OSError as e:
                    self.stop.local(e, job.path, "read")
                    big.failure = ("LocalError", os_message(e))
            if big.failure is None:
                try:
                    verified = await self._verdict(job.key, expected, big.file.fd, mismatch)
                except S3Error as e:
                    big.failure = (e.code, e.message)
                except OSError as e:
                    self.stop.local(e, job.path, "read")
                    big.failure = ("LocalError", os_message(e))
            if big.failure is not None:
                self.files.discard(big.file)
                big.file.discard()
                self._failed(job.key, job.path, *big.failure)
                return
            try:
                self._install(big.file, job.path, job.modified)
            except (OSError, SinkError) as e:
                self._local(job.key, job.path, e)
                return
            self._succeeded(job, big.size, expected, verified)
        finally:
            self.pending -= 1
            self._check_done()

    # -- checksums ----------------------------------------------------------------------

    async def _verdict(
        self, key: str, expected: Expected | None, fd: int, mismatch: str | None
    ) -> bool:
        """Whether the object in ``fd`` was checked beyond its length; raises
        S3Error BadDigest if its bytes are not what the server said - only
        when the server said which kind of checksum it gave (checksums.py).
        ``mismatch``: what the MD5 or the whole-object checksum, computed as
        the bytes came, found (None: they matched, or were not computed)."""
        if not self.opts.verify or expected is None or not expected.verifiable:
            return False
        if expected.checksum is None or expected.kind == FULL:
            if mismatch is not None:
                raise S3Error("BadDigest", mismatch, status=200, bucket=self.plan.bucket)
            return True
        if expected.kind == UNKNOWN and mismatch is None:
            return True  # the whole object's: it matches so
        return await self._by_parts(key, expected, fd)

    async def _by_parts(self, key: str, expected: Expected, fd: int) -> bool:
        """A composite checksum (or one of unknown kind that is not the whole
        object's) checked part by part, by the server's own part layout."""
        assert expected.checksum is not None
        algorithm, value = expected.checksum
        name = algorithm.upper()
        layout = await self._layout(key, expected)
        if layout is None:
            _log.debug(
                "s3://%s/%s: %s %s is %s, and the server gives no part layout: checked by"
                " its size%s only",
                self.plan.bucket,
                key,
                name,
                value,
                "composite" if expected.kind == COMPOSITE else "of no known kind",
                " and ETag" if expected.md5 else "",
            )
            return expected.md5 is not None
        lengths = [length for length, _ in layout]
        digests = await off_loop(part_digests, fd, algorithm, lengths)
        said_per_part = 0
        for number, ((_, said), digest) in enumerate(zip(layout, digests, strict=True), 1):
            if said is None:
                continue
            said_per_part += 1
            got = base64.b64encode(digest).decode("ascii")
            if got != said:
                raise S3Error(
                    "BadDigest",
                    f"part {number} of {len(layout)}: {name} {got} is not the server's {said}",
                    status=200,
                    bucket=self.plan.bucket,
                )
        combined = composite(algorithm, digests)
        if combined == value or said_per_part == len(layout):
            return True
        if expected.kind == COMPOSITE:
            raise S3Error(
                "BadDigest",
                f"the composite {name} of its {len(layout)} parts is {combined}, not the"
                f" server's {value}-{len(layout)}",
                status=200,
                bucket=self.plan.bucket,
            )
        _log.debug(
            "s3://%s/%s: %s %s is neither the whole object's nor its %d parts' (%s), and the"
            " server does not say which kind it is: checked by its size only",
            self.plan.bucket,
            key,
            name,
            value,
            len(layout),
            combined,
        )
        return False

    async def _layout(self, key: str, expected: Expected) -> list[tuple[int, str | None]] | None:
        """The object's parts as the server keeps them: (length, the part's
        checksum if the server gives one), from a HEAD with ``partNumber`` per
        part; None if the server gives no layout that adds up (it ignores
        ``partNumber``, or refuses it)."""
        assert expected.checksum is not None
        algorithm, value = expected.checksum
        header = f"x-amz-checksum-{algorithm}"
        try:
            first = await self.objects.head(key, part=1)
            count = first.get("x-amz-mp-parts-count") or ""
            if not count.isdigit() or not 1 <= int(count) <= MAX_PARTS:
                return None
            parts = int(count)
            room = asyncio.Semaphore(PARTS_IN_FLIGHT)

            async def head(number: int) -> Headers:
                async with room:
                    return await self.objects.head(key, part=number)

            rest = await asyncio.gather(*(head(n) for n in range(2, parts + 1)))
        except S3Error as e:
            _log.debug("s3://%s/%s: no part layout: %s", self.plan.bucket, key, e)
            return None
        layout: list[tuple[int, str | None]] = []
        offset = 0
        for headers in [first, *rest]:
            length = headers.get("content-length") or ""
            if not length.isdigit() or headers.get("x-amz-mp-parts-count") != count:
                return None
            span = headers.get("content-range")
            if (
                span is not None
                and span != f"bytes {offset}-{offset + int(length) - 1}/{expected.size}"
            ):
                return None
            said = headers.get(header)
            # a part's own checksum: not the object's (a server that echoes it)
            if said is not None and ("-" in said or (parts > 1 and said == value)):
                said = None
            layout.append((int(length), said))
            offset += int(length)
        if offset != expected.size or (parts > 1 and layout[0][0] == expected.size):
            return None
        return layout

    # -- what happened ----------------------------------------------------------------

    def _succeeded(self, job: _Job, size: int, expected: Expected | None, verified: bool) -> None:
        if expected is not None and expected.unchecked:
            self.summary.notes.add(expected.unchecked)
        self._copied(self.url(job.key), job.path, size, verified)

    def _failed(self, key: str, path: str | None, code: str, message: str) -> None:
        self._fail(self.url(key), path, code, message)


class _Writer:
    """Writes the files of one download: on the event loop until writes block
    (see :data:`SLOW_WRITE`), then on a thread, within a budget of bytes held
    (taken from connections and not yet written): see :data:`WRITE_BUDGET`.
    Each sink writes through a :class:`_Batches`.

    A write is handed over on a queue and its end comes back with
    ``call_soon_threadsafe``: ~10 µs a hop, where an executor's futures
    chained to asyncio's cost several times that."""

    def __init__(self, threads: int = WRITE_THREADS, budget: int = WRITE_BUDGET) -> None:
        self.budget = budget
        self.held = 0
        self.peak = 0  # the most bytes held at once
        #: writes go to the threads (else: on the event loop, until they are slow)
        self.threaded = False
        self.blocked = 0.0  # seconds the event loop spent in slow writes
        self.inline_writes = 0
        self.thread_writes = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self._count = threads
        self._threads: list[threading.Thread] = []
        self._queue: SimpleQueue[tuple[_Batches, list[bytes], int, int] | None] = SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def over(self) -> bool:
        return self.held > self.budget

    def submit(self, batches: _Batches, chunks: list[bytes], offset: int, size: int) -> None:
        """Write ``chunks`` at ``offset`` of ``batches.fd`` on a thread; then
        ``size`` bytes are let go and ``batches`` told."""
        if not self._threads:
            self._loop = asyncio.get_running_loop()
            for number in range(self._count):
                thread = threading.Thread(
                    target=self._run, name=f"surge-s3-write-{number}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        self.thread_writes += 1
        self._queue.put((batches, chunks, offset, size))

    def inline(self, fd: int, data: bytes | list[bytes], offset: int) -> None:
        """Write on the event loop; a write that blocked counts towards the switch."""
        started = perf_counter()
        before = getrusage(RUSAGE_THREAD)
        _write_at(fd, [data] if isinstance(data, bytes) else data, offset)
        after = getrusage(RUSAGE_THREAD)
        self.inline_writes += 1
        took = perf_counter() - started
        if took > SLOW_WRITE and _blocked(before, after):
            self.blocked += took
            self.threaded = self.threaded or self.blocked > BLOCKED_LIMIT

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        while (work := self._queue.get()) is not None:
            batches, chunks, offset, size = work
            error: BaseException | None = None
            try:
                _write_at(batches.fd, chunks, offset)
            except BaseException as e:  # told to the sink, which raises it
                error = e
            del chunks, work
            with suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(self._written, batches, size, error)

    def _written(self, batches: _Batches, size: int, error: BaseException | None) -> None:
        self.release(size)
        batches.written(error)

    def release(self, size: int) -> None:
        self.held -= size
        if self.held <= self.budget:
            while self.waiters:
                waiter = self.waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)

    async def room(self) -> None:
        """Wait until the bytes held are within the budget."""
        while self.held > self.budget:
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            await waiter

    def close(self) -> None:
        """Wait for every write in progress (blocking: at most the budget's
        bytes), so no descriptor is closed under a thread still writing to it."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()


class _Batches:
    """One body's chunks into a file from ``offset`` on, in batches of at least
    :data:`WRITE_BATCH` written on the :class:`_Writer`'s threads."""

    __slots__ = ("chunks", "error", "fd", "offset", "pending", "settled", "size", "writer")

    def __init__(self, writer: _Writer, fd: int, offset: int) -> None:
        self.writer = writer
        self.fd = fd
        self.offset = offset  # where the chunks held start
        self.chunks: list[bytes] = []
        self.size = 0  # bytes held, not yet submitted
        self.pending = 0  # batches submitted, not yet written
        self.settled: asyncio.Future[None] | None = None  # awaited: pending is 0
        self.error: BaseException | None = None

    def add(self, chunk: bytes) -> Awaitable[None] | None:
        """Write ``chunk`` now, or hold it for a thread; something to await
        when the writer's budget is spent."""
        if self.error is not None:
            raise self.error
        writer = self.writer
        if not writer.threaded and not self.pending and not self.size:
            writer.inline(self.fd, chunk, self.offset)
            self.offset += len(chunk)
            return None
        self.chunks.append(chunk)
        self.size += len(chunk)
        writer.held += len(chunk)
        if writer.held > writer.peak:
            writer.peak = writer.held
        if self.size >= WRITE_BATCH or len(self.chunks) >= WRITE_BUFFERS:
            self._submit()
        elif writer.over:
            # What a waiting sink holds is all being written: the waits end.
            self._submit()
        return writer.room() if writer.over else None

    def _submit(self) -> None:
        self.pending += 1
        self.writer.submit(self, self.chunks, self.offset, self.size)
        self.offset += self.size
        self.chunks = []
        self.size = 0

    def written(self, error: BaseException | None) -> None:
        self.pending -= 1
        if error is not None and self.error is None:
            self.error = error
        settled = self.settled
        if self.pending == 0 and settled is not None and not settled.done():
            settled.set_result(None)

    async def finish(self, *, inline: bool = False) -> None:
        """Write what is held (on the event loop if ``inline`` and nothing went
        to a thread: a small object) and wait for every write; raise the first
        write's error."""
        if self.chunks:
            if inline and not self.pending and self.error is None:
                chunks, size = self.chunks, self.size
                self.chunks, self.size = [], 0
                try:
                    self.writer.inline(self.fd, chunks, self.offset)
                finally:
                    self.writer.release(size)
                self.offset += size
            else:
                self._submit()
        await self.settle()
        if self.error is not None:
            raise self.error

    async def settle(self) -> None:
        """Drop what is held; wait for the writes under way (the descriptor
        must outlive them)."""
        if self.size:
            self.writer.release(self.size)
            self.chunks, self.size = [], 0
        while self.pending:
            self.settled = asyncio.get_running_loop().create_future()
            await self.settled

    async def restart(self, offset: int) -> None:
        """A retried GET: forget this try's bytes, write again from ``offset``."""
        await self.settle()
        self.error = None
        self.offset = offset


class _Blocked(Exception):
    """A file stands where an object's directory must be (a sync's --delete
    may remove it: the object waits until then)."""


class _Refused:
    """A sink that takes no body: the object is there after all (it came
    between a HEAD and this GET): ``error`` stands."""

    def __init__(self, error: S3Error) -> None:
        self.error = error

    async def begin(self, response: Response) -> None:
        raise self.error

    def write(self, chunk: bytes) -> Awaitable[None] | None:  # pragma: no cover
        return None

    async def end(self) -> None:  # pragma: no cover
        pass


class _WholeFile:
    """A whole object's body into its temporary file, hashed as it comes."""

    def __init__(self, writer: _Writer, fd: int, verify: bool, summary: Summary) -> None:
        self.fd = fd
        self.verify = verify
        self.summary = summary
        self.received = 0
        self.expected: Expected | None = None
        self.digest: Digest | None = None
        #: What the MD5 or whole-object checksum found amiss (None: nothing)
        self.mismatch: str | None = None
        self.batches = _Batches(writer, fd, 0)

    async def begin(self, response: Response) -> None:
        if response.status != 200:
            raise S3Error(
                "InvalidResponse",
                f"status {response.status} to a whole GET",
                status=None,
                bucket="",
            )
        length = response.header("content-length")
        if length is None or not length.isdigit():
            raise S3Error("InvalidResponse", "no Content-Length", status=200, bucket="")
        if self.received:  # a retry, after some bytes: maybe another version
            await self.batches.restart(0)
            os.ftruncate(self.fd, 0)
        self.expected = Expected.from_headers(int(length), response.headers)
        verifiable = self.verify and (self.expected.whole or self.expected.md5 is not None)
        self.digest = Digest(self.expected) if verifiable else None
        self.mismatch = None
        self.received = 0

    def write(self, chunk: bytes) -> Awaitable[None] | None:
        if self.digest is not None:
            self.digest.update(chunk)
        self.received += len(chunk)
        self.summary.received += len(chunk)
        return self.batches.add(chunk)

    async def end(self) -> None:
        assert self.expected is not None
        if self.received != self.expected.size:
            raise S3Error(
                INCOMPLETE,
                f"the body ended at {self.received} of {self.expected.size} bytes",
                status=200,
                bucket="",
            )
        if self.digest is not None:
            self.mismatch = self.digest.mismatch()  # judged by _Download._verdict
        await self.batches.finish(inline=self.received <= WRITE_INLINE)


class _RangeFile:
    """One part's body, written at its offset in the big object's temporary file."""

    def __init__(
        self, writer: _Writer, fd: int, first: int, last: int, size: int, summary: Summary
    ) -> None:
        self.first = first
        self.last = last
        self.size = size
        self.summary = summary
        self.offset = first
        self.batches = _Batches(writer, fd, first)
        self.crc: int | None = None  # the part's CRC-32 so far, if wanted

    async def begin(self, response: Response) -> None:
        check_range(response, self.first, self.last, self.size)
        if self.offset != self.first:  # a retry, after some bytes
            await self.batches.restart(self.first)
            self.offset = self.first
        if self.crc is not None:
            self.crc = 0

    def write(self, chunk: bytes) -> Awaitable[None] | None:
        if self.offset + len(chunk) > self.last + 1:
            raise S3Error(INCOMPLETE, "the part is longer than its range", status=206, bucket="")
        if self.crc is not None:
            self.crc = crc32(chunk, self.crc)
        self.offset += len(chunk)
        self.summary.received += len(chunk)
        return self.batches.add(chunk)

    async def end(self) -> None:
        if self.offset != self.last + 1:
            got = self.offset - self.first
            raise S3Error(
                INCOMPLETE,
                f"the part ended at {got} of {self.last - self.first + 1} bytes",
                status=206,
                bucket="",
            )
        await self.batches.finish()


async def _open_stream(path: str) -> Sink:
    """The sink of a stream destination: stdout, or a FIFO or device written
    in place (a FIFO without a reader is waited for, as the shell's ``>``
    waits - here without blocking the event loop)."""
    if names_stdout(path):
        return stdout_sink()
    while True:
        try:
            return open_output(path, lock=False, rollback=None, wait_for_reader=False)
        except SinkError as e:
            if e.errno != errno.ENXIO:
                raise
        await asyncio.sleep(0.05)


def in_daemon_thread(work: Callable[[], T], name: str) -> asyncio.Future[T]:
    """``work()`` on a daemon thread of its own; a future of its result.  For
    a read or write that may block for ever (a silent stdin, a reader of
    stdout that stalls): it holds neither the event loop, nor Ctrl-C, nor the
    interpreter's exit (asyncio.to_thread's threads are joined at exit).  A
    task awaiting it may be cancelled; the thread then ends on its own."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(value)
        else:
            done.set_exception(error)

    def run() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = work()
        except BaseException as e:  # told to the awaiting task
            error = e
        with suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done


async def read_stdin(size: int) -> bytes:
    """Up to ``size`` bytes of stdin, fewer only at its end (on a daemon
    thread: :func:`in_daemon_thread`); a read error is a SinkError."""
    return await in_daemon_thread(lambda: read_up_to(0, size, "stdin"), "surge-s3-stdin")


class _StreamOut:
    """A stream's writes, in order, one at a time, each on a daemon thread
    (:func:`in_daemon_thread`: a reader that stalls blocks that thread only).
    The sink is closed by :meth:`close`, or - if a write is still under way (a
    run cancelled while the reader stalls) - by that write's thread when it
    ends: never a descriptor closed under a write."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.writing: asyncio.Future[None] | None = None
        self._lock = threading.Lock()
        self._running = False
        self._close_after = False

    async def write(self, chunks: list[bytes]) -> None:
        """Wait for the previous write (raising its SinkError), start this one."""
        await self.drain()

        def work() -> None:
            try:
                for chunk in chunks:
                    self.sink.write(chunk)
            finally:
                with self._lock:
                    self._running = False
                    close = self._close_after
                if close:
                    with suppress(SinkError):
                        self.sink.close()

        self._running = True
        self.writing = in_daemon_thread(work, "surge-s3-stream")

    async def drain(self) -> None:
        """Wait for the write under way; raise its error."""
        writing, self.writing = self.writing, None
        if writing is not None:
            await writing

    def close(self) -> None:
        with self._lock:
            if self._running:
                self._close_after = True
                return
        with suppress(SinkError):
            self.sink.close()


def _crc32_mismatch(big: _Big) -> str | None:
    """A parted object's CRC-32, combined from its parts' in order, against
    the server's whole-object one."""
    assert big.crcs is not None and big.expected.checksum is not None
    value = 0
    for index, part in enumerate(big.crcs):
        length = min(big.part_size, big.size - index * big.part_size)
        value = crc32_combine(value, part, length)
    said = big.expected.checksum[1]
    got = crc32_header(value)
    return None if got == said else f"CRC32 {got} is not the server's {said}"


def _blocked(before: Any, after: Any) -> bool:
    """Whether the thread, between two ``getrusage(RUSAGE_THREAD)``, slept
    (writeback throttling, a lock, the disk): not merely preempted on a busy
    machine, nor busy in the kernel (filling the page cache), which moving
    writes to a thread would not make cheaper (see :data:`SLOW_WRITE`)."""
    return bool(after.ru_nvcsw > before.ru_nvcsw)


def _write_at(fd: int, chunks: Sequence[bytes | memoryview], offset: int) -> None:
    """``chunks`` written at ``offset``, whole (a short write goes on)."""
    while chunks:
        written = os.pwritev(fd, chunks, offset)
        offset += written
        done = 0
        while done < len(chunks) and written >= len(chunks[done]):
            written -= len(chunks[done])
            done += 1
        rest = list(chunks[done:])
        if written:
            rest[0] = memoryview(rest[0])[written:]
        chunks = rest


def same_file(path: str, size: int, modified: float) -> bool:
    """A download sync's test, the AWS CLI's (by whole seconds): the file at
    ``path`` has ``size`` bytes and is no newer than ``modified``.  A download
    sets the file's mtime to the object's LastModified, so a file edited since
    (newer) is fetched again, and one older than the object - uploaded from
    here, its mtime kept - is left alone, as ``aws s3 sync`` leaves it."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return info.st_size == size and int(info.st_mtime) <= int(modified)


#: IMF-fixdate's month names (RFC 9110 5.6.7).
_MONTHS = {
    month: number
    for number, month in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


def http_date(value: str | None) -> float | None:
    """An HTTP date (Last-Modified) as epoch seconds, or None.  IMF-fixdate,
    the form S3 and every current server send, is read here; email.utils reads
    the obsolete forms (and is loaded only then: ~2 ms of a download's start)."""
    if not value:
        return None
    parts = value.split()
    if len(parts) == 6 and parts[5] == "GMT" and parts[2] in _MONTHS:
        try:
            hour, minute, second = map(int, parts[4].split(":"))
            when = datetime(int(parts[3]), _MONTHS[parts[2]], int(parts[1]), hour, minute, second)
            return when.replace(tzinfo=UTC).timestamp()
        except ValueError:
            pass
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def os_message(error: OSError) -> str:
    text = error.strerror or str(error)
    return f"{text}: {error.filename}" if error.filename else text


async def download_async(
    source: str,
    destination: str,
    *,
    options: DownloadOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> Summary:
    """Download ``source`` (``s3://bucket/key``; with ``recursive=True``, every
    object under ``s3://bucket/prefix/``) to ``destination`` (a file, or a
    directory); options as :class:`DownloadOptions`.  Per-object failures are
    in the summary; a bad argument raises :class:`UsageError`, and a listing
    that fails (access denied) or a missing bucket :class:`S3Error`."""
    opts = options or DownloadOptions(**kwargs)
    the_plan = plan(source, destination, opts)
    target = opts.target(the_plan.bucket)
    return await run_transfer(
        opts,
        client,
        opts.concurrency + opts.list_parallel,
        lambda client, summary: _Download(the_plan, opts, target, client, summary),
    )


async def run_transfer(
    opts: TransferOptions,
    client: AsyncClient | None,
    connections: int,
    start: Callable[[AsyncClient, Summary], TransferRun],
) -> Summary:
    """Run the transfer ``start(client, summary)`` makes, on ``client`` - or
    on one made here for ``connections`` connections and closed at the end -
    and give its summary, with its time and request counts however it
    ended."""
    summary = Summary(dryrun=opts.dryrun)
    own_client = client is None
    if client is None:
        client = transfer_client(opts, connections)
    started = time.perf_counter()
    run = start(client, summary)
    try:
        await run.run()
    finally:
        summary.seconds = time.perf_counter() - started
        summary.requests, summary.retries = run.counts()
        if own_client:
            await client.close()
    return summary


def download(
    source: str, destination: str, *, options: DownloadOptions | None = None, **kwargs: Any
) -> Summary:
    """:func:`download_async` for synchronous code (on its own event loop; in a
    thread when a loop is running already, as in Jupyter)."""
    opts = options or DownloadOptions(**kwargs)
    return run_sync(lambda: download_async(source, destination, options=opts))


def run_sync(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``work()`` run to its end for synchronous code: on its own event loop, in a
    thread when a loop is running already (as in Jupyter); Ctrl-C as
    :func:`run_cleanly`."""

    def run() -> T:
        loop = new_event_loop()
        try:
            return run_cleanly(loop, work())
        finally:
            loop.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        with ThreadPoolExecutor(1, thread_name_prefix="surge-s3-cp") as pool:
            return pool.submit(run).result()
    return run()


#: Of which the aborts of multipart uploads may take this many (requests and
#: retries): a stalled server cannot hold an interrupted run (CANCEL_GRACE:
#: surge.s3.interrupts, with run_cleanly).
ABORT_WITHIN = 4.0


#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def steady_heap(trim: int = 64 * MiB, mmap: int = 4 * MiB) -> bool:
    """Tell glibc's malloc to keep up to ``trim`` bytes of freed heap rather
    than give them back to the kernel at once, and to serve blocks under
    ``mmap`` from the heap: the command line's setting for a transfer, whose
    ~256 KiB chunks are each allocated (uvloop), written and freed.  With
    glibc's dynamic defaults the heap was trimmed and faulted in again all
    run long: ~50,000 page faults a GB (s5cmd: ~5,000), which under a page
    cache full of dirty pages cost ~0.4 s of system CPU a GB here (2.3-2.6 s
    against 1.9-2.0 s for a 1 GB download; s5cmd 2.0-2.1).  Process-wide, so
    the CLI's choice, not the library's.  False where it cannot apply (not
    glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - musl and others
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, trim)) and bool(mallopt(_M_MMAP_THRESHOLD, mmap))


def transfer_client(opts: TransferOptions, connections: int) -> AsyncClient:
    # Raw bytes as stored: no Accept-Encoding, no decoding (an object stored
    # with Content-Encoding: gzip is written gzipped, as the AWS CLI writes it).
    return opts.client(
        connections,
        opts.max_time,
        headers={"Accept-Encoding": "identity"},
        decompress=False,
        body_cap=1024 * 1024,  # error documents only: bodies are streamed
    )


async def open_object(
    url: str,
    *,
    part_size: int = DEFAULT_PART_SIZE,
    options: DownloadOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> AsyncGenerator[bytes, None]:
    """The bytes of one object, in order, as an async iterator::

        async for chunk in surge.s3.open_object("s3://bucket/key", endpoint_url=...):
            out.write(chunk)

    Read a ranged GET of ``part_size`` at a time (memory: one part), pinned to
    the object's ETag.  Raises :class:`S3Error` (NoSuchKey, AccessDenied,
    PreconditionFailed if the object is replaced mid-way)."""
    opts = options or DownloadOptions(**kwargs)
    bucket, key = split_s3_url(url)
    if not key or key.endswith("/"):
        raise UsageError(f"{url!r} names no object")
    target = opts.target(bucket)
    own_client = client is None
    if client is None:
        client = transfer_client(opts, 1)
    objects = Objects(target, client, opts.retry_policy())
    objects.reading = opts.customer_headers()
    try:
        async with aclosing(stream_object(objects, key, part_size=part_size)) as chunks:
            async for chunk in chunks:
                yield chunk
    finally:
        if own_client:
            await client.close()
