"""Deleting objects: ``surge s3 rm`` and :func:`remove`, and the one batched
delete (:class:`Deletes`) that a sync's ``--delete`` and ``mv`` use too.

    for result in surge.s3.remove("s3://bucket/logs/", recursive=True, exclude=["*.gz"]):
        print(result.destination, result.failure)

How it runs:

* Keys are deleted by DeleteObjects, :data:`BATCH` (1,000: S3's limit) a
  request, in Quiet mode: the answer names only the keys that could not be
  deleted, each with S3's code and message (a :class:`Failure` each, exit
  status 1); every other key of the batch is deleted.  Each document goes
  with its Content-MD5 (S3 refuses a DeleteObjects without it or a checksum)
  and its SHA-256 signed.  A key is written in it as given, XML-escaped
  (:func:`surge.s3.objects.xml_key`: markup characters as entities, tab,
  newline, CR and C1 controls as character references, so the server reads
  back the same code points); a key that XML 1.0 cannot hold at all (most C0
  control characters) is deleted on its own, by DeleteObject - its request
  path is :func:`surge.s3.sigv4.object_path`'s, as every key's.
* The listing and the deletes stream together: a recursive ``rm`` lists the
  prefix (the fast parallel lister), and each full batch is sent as the
  listing goes on, :data:`BATCHES_IN_FLIGHT` at most; past that the listing
  waits.  Memory: the batches in flight and the listing's pages, never the
  whole listing.
* A key is told deleted (a :class:`Result`, a ``delete:`` line) only once the
  answer to its batch says so.  Interrupted (Ctrl-C), the batches in flight are
  waited for, within :data:`surge.s3.transfer.ABORT_WITHIN` seconds, and their
  keys told as their answers say: no key is deleted without its line.  A batch
  whose answer did not come in that time is a failure of each of its keys
  (``Unconfirmed``: it may or may not have been deleted); so is each key of a
  batch unanswered when the run has to exit at once (a second Ctrl-C, or the
  cleanup past its bound: :func:`surge.s3.interrupts.owe`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import aclosing, closing
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from surge.errors import S3Error, UsageError
from surge.http.client import AsyncClient
from surge.loops import iterate_in_thread
from surge.s3.api import ListOptions, list_uploads, list_versions
from surge.s3.config import split_s3_url
from surge.s3.interrupts import owe, paid
from surge.s3.objects import Objects, xml_carries
from surge.s3.parse import Upload
from surge.s3.paths import Filters, prefix_dir
from surge.s3.transfer import (
    ABORT_WITHIN,
    Failure,
    Result,
    RunStop,
    Summary,
    TransferOptions,
    TransferRun,
    despite_cancel,
    run_sync,
    run_transfer,
)

#: Keys a DeleteObjects at most (S3's limit; the AWS CLI and s5cmd send as many).
BATCH = 1000
#: DeleteObjects requests in flight at most, per bucket: S3 takes about 3,500
#: deletes a second per prefix, a few batches.
BATCHES_IN_FLIGHT = 8
#: AbortMultipartUpload requests in flight at most (``rm --incomplete``).
ABORTS_IN_FLIGHT = 32


class Version(NamedTuple):
    """One version (or delete marker) of a key, to delete for good."""

    key: str
    version_id: str


#: What :class:`Deletes` deletes: a key (its current version, or a delete
#: marker put on a versioned bucket), one :class:`Version` of a key, or a
#: multipart upload in progress (aborted).
Item = TypeVar("Item", str, Version, Upload)


class Deletes(Generic[Item]):
    """Batched deletes of one bucket's keys over ``objects``: :meth:`add` each
    item, then :meth:`close` (or, cut short, :meth:`settle`); or ``async
    with`` it, which does either.  ``told(item,
    None)`` once the server said the item is deleted, ``told(item, (code,
    message))`` if it is not; ``stop`` ends the run on what ends every
    request (no such bucket).  An item is a key, a :class:`Version` (its
    ``<VersionId>`` in the batch) or an :class:`Upload` (aborted on its own,
    by AbortMultipartUpload: S3 has no batch of those)."""

    def __init__(
        self,
        objects: Objects,
        told: Callable[[Item, tuple[str, str] | None], None],
        *,
        batch: int = BATCH,
        in_flight: int = BATCHES_IN_FLIGHT,
        stop: RunStop | None = None,
    ) -> None:
        if not 1 <= batch <= BATCH:
            raise UsageError(f"a delete batch is 1..{BATCH} keys, not {batch}")
        self.objects = objects
        self.told: Callable[[Item, tuple[str, str] | None], None] = told
        self.size = batch
        self.stop = stop
        self.slots = asyncio.Semaphore(max(1, in_flight))
        self.batch: list[Item] = []
        self.tasks: set[asyncio.Task[None]] = set()
        #: DeleteObjects (and DeleteObject) requests sent
        self.requests = 0
        #: the items of each request sent and not yet told, by its list's id
        self.sent: dict[int, list[Item]] = {}

    async def __aenter__(self) -> Deletes[Item]:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Every answer waited for; or, left by an exception (Ctrl-C), only
        those of the batches in flight (:meth:`settle`), whatever cancels
        this meanwhile: a key deleted is never left untold."""
        if kind is None:
            await self.close()
        else:
            await despite_cancel(self.settle())

    async def add(self, item: Item) -> None:
        """Delete ``item`` (with the next full batch); waits while
        :data:`BATCHES_IN_FLIGHT` batches are in flight."""
        if isinstance(item, Upload) or not xml_carries(_key(item)):
            # an upload, or a key no XML document can name: on its own
            await self._start([item], single=True)
            return
        self.batch.append(item)
        if len(self.batch) >= self.size:
            batch, self.batch = self.batch, []
            await self._start(batch)

    async def close(self) -> None:
        """Send what is left and wait for every answer; cancelled meanwhile,
        as :meth:`settle` (a gather would cancel the requests in flight with
        it, their answers never waited for)."""
        try:
            if self.batch:
                batch, self.batch = self.batch, []
                await self._start(batch)
            while self.tasks:
                done, _ = await asyncio.wait(list(self.tasks))
                for task in done:
                    task.result()  # what a request raised that is not an S3Error
        except asyncio.CancelledError:
            await despite_cancel(self.settle())
            raise

    async def settle(self, within: float = ABORT_WITHIN) -> None:
        """Cut short (interrupted, or the run failed): the keys not sent are
        dropped; the batches in flight are waited for, ``within`` seconds at
        most, and told as their answers say; what is still unanswered then is
        cancelled, each key told ``Unconfirmed``."""
        self.batch = []
        tasks = list(self.tasks)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=within)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def _start(self, items: list[Item], *, single: bool = False) -> None:
        await self.slots.acquire()
        task = asyncio.ensure_future(self._send(items, single))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, items: list[Item], single: bool) -> None:
        failed: dict[tuple[str, str | None], tuple[str, str]] = {}
        self.sent[id(items)] = items
        if len(self.sent) == 1:
            owe(self.unconfirmed_now)
        try:
            self.requests += 1
            if single:
                item = items[0]
                if isinstance(item, Upload):
                    await self.objects.abort_multipart(item.key, item.upload_id)
                else:
                    await self.objects.delete(_key(item), _version(item))
            else:
                keys = [_key(item) for item in items]
                versions = [_version(item) for item in items]
                errors = await self.objects.delete_objects(
                    keys, None if all(v is None for v in versions) else versions
                )
                failed = {(e.key, e.version_id): (e.code, e.message) for e in errors}
        except asyncio.CancelledError:
            if self._answered(items):
                for item in items:
                    self.told(item, UNCONFIRMED)
            raise
        except S3Error as e:
            if self._answered(items) and (self.stop is None or not self.stop.ends_run(e)):
                for item in items:
                    self.told(item, (e.code, e.message))
            return
        finally:
            self.slots.release()
        if not self._answered(items):
            return  # told already, unconfirmed, by an exit that could not wait
        for item in items:
            key, version = _key(item), _version(item)
            # an error that does not say its version (S3 says it) is the key's
            self.told(item, failed.get((key, version)) or failed.get((key, None)))

    def _answered(self, items: list[Item]) -> bool:
        """``items``' request is answered (or failed): whether they are still
        to be told (not yet by :meth:`unconfirmed_now`)."""
        if self.sent.pop(id(items), None) is None:
            return False
        if not self.sent:
            paid(self.unconfirmed_now)
        return True

    def unconfirmed_now(self) -> None:
        """Each item of each request sent and not answered told ``Unconfirmed``
        now: the run exits without waiting for them."""
        sent, self.sent = self.sent, {}
        for items in sent.values():
            for item in items:
                self.told(item, UNCONFIRMED)


#: How a key is told whose delete was sent but not answered.
UNCONFIRMED = ("Unconfirmed", "interrupted before the server answered")


def _key(item: str | Version | Upload) -> str:
    return item if isinstance(item, str) else item.key


def _version(item: str | Version | Upload) -> str | None:
    return item.version_id if isinstance(item, Version) else None


@dataclass
class RemoveOptions(TransferOptions):
    """The options of :func:`remove` (and of ``surge s3 rm``): ``recursive``
    (every key under each prefix), the filters, ``dryrun``, and
    ``delete_batch`` (keys a DeleteObjects, :data:`BATCH` at most).

    ``all_versions``: every version and delete marker of each key (listed by
    ListObjectVersions; deleted by DeleteObjects naming each ``VersionId``),
    as s5cmd's ``rm --all-versions``: nothing of the key is left.
    ``incomplete``: the multipart uploads in progress of each key (listed by
    ListMultipartUploads), aborted; the objects themselves are left."""

    all_versions: bool = False
    incomplete: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.all_versions and self.incomplete:
            raise UsageError("--all-versions and --incomplete: give one of the two")


@dataclass(frozen=True)
class _Source:
    bucket: str
    prefix: str  # the listing's prefix, or the single key
    filters: Filters


def _sources(urls: Sequence[str], recursive: bool, rules: Any) -> list[_Source]:
    if isinstance(urls, str):
        urls = [urls]
    if not urls:
        raise UsageError("no s3://bucket/key to delete")
    sources = []
    for url in urls:
        bucket, prefix = split_s3_url(url)
        if recursive:
            if prefix and not prefix.endswith("/"):
                prefix += "/"  # as the AWS CLI: a recursive source is a "directory"
            sources.append(_Source(bucket, prefix, Filters(bucket, prefix, rules)))
        else:
            if not prefix:
                raise UsageError(f"{url!r} names no object: give a key, or --recursive")
            sources.append(_Source(bucket, prefix, Filters(bucket, prefix_dir(prefix), rules)))
    return sources


class _Remove(TransferRun):
    objects: _Counted

    def __init__(
        self,
        sources: list[_Source],
        opts: RemoveOptions,
        client: AsyncClient,
        summary: Summary,
    ) -> None:
        super().__init__(opts, client, summary)
        self.sources = sources
        self.opts: RemoveOptions = opts
        self.objects = _Counted()
        self.deletes: dict[str, Deletes[Any]] = {}
        self.stack = contextlib.AsyncExitStack()  # the run's: each bucket's deletes

    def url(self, bucket: str, key: str) -> str:
        return f"s3://{bucket}/{key}"

    async def _deletes(self, bucket: str) -> Deletes[Any]:
        deletes = self.deletes.get(bucket)
        if deletes is None:
            objects = Objects(self.opts.target(bucket), self.client, self.opts.retry_policy())
            self.objects.parts.append(objects)
            deletes = Deletes[Any](
                objects,
                lambda item, error: self._told(bucket, item, error),
                batch=self.opts.delete_batch,
                in_flight=_in_flight(self.opts),
                stop=self.stop,
            )
            self.deletes[bucket] = await self.stack.enter_async_context(deletes)
        return deletes

    async def _run(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                self.stack = stack
                for source in self.sources:
                    if self.opts.all_versions or self.opts.incomplete:
                        await self._list_marked(source)
                    elif self.opts.recursive:
                        await self._list(source)
                    else:
                        await self._offer(source, source.prefix, source.prefix)
        finally:
            self.stop.settle()

    async def _list(self, source: _Source) -> None:
        # the bucket's target first: its credentials and region, found once
        target = (await self._deletes(source.bucket)).objects.target
        listing = self._listed(self.url(source.bucket, source.prefix), self.opts.endpoint(target))
        async with aclosing(listing) as listed:
            async for entry in listed:
                await self._offer(source, entry.key, entry.key)

    async def _list_marked(self, source: _Source) -> None:
        """Every version (``all_versions``) or upload in progress
        (``incomplete``) under the prefix - or, not recursive, of the key
        itself - offered as the pages come (one in flight, the next asked
        for as soon as this one's markers are read)."""
        target = (await self._deletes(source.bucket)).objects.target
        options = ListOptions(retries=self.opts.retries, **self.opts.endpoint(target))
        url = self.url(source.bucket, source.prefix)
        exact = not self.opts.recursive
        if self.opts.all_versions:
            versions = list_versions(url, options=options, client=self.client)
            async with aclosing(versions) as pages:
                async for page in pages:
                    for version in page:
                        if not exact or version.key == source.prefix:
                            item = Version(version.key, version.version_id)
                            await self._offer(source, version.key, item)
        else:
            async with aclosing(list_uploads(url, options=options, client=self.client)) as ups:
                async for uploads in ups:
                    for upload in uploads:
                        if not exact or upload.key == source.prefix:
                            await self._offer(source, upload.key, upload)

    async def _offer(self, source: _Source, key: str, item: str | Version | Upload) -> None:
        if source.filters and not source.filters.takes(key):
            self.summary.excluded += 1
            return
        if self.opts.room is not None:
            await self.opts.room()
        if self.opts.dryrun:
            self.summary.deleted += 1
            self._tell(self._result(source.bucket, item, dryrun=True))
            return
        await (await self._deletes(source.bucket)).add(item)

    def _result(
        self, bucket: str, item: str | Version | Upload, failure: Failure | None = None, **kw: Any
    ) -> Result:
        return Result(
            None,
            self.url(bucket, _key(item)),
            0,
            failure,
            deleted=True,
            version_id=_version(item),
            upload_id=item.upload_id if isinstance(item, Upload) else None,
            **kw,
        )

    def _told(
        self, bucket: str, item: str | Version | Upload, error: tuple[str, str] | None
    ) -> None:
        if error is None:
            self.summary.deleted += 1
            self._tell(self._result(bucket, item))
        else:
            failure = Failure(self.url(bucket, _key(item)), None, *error)
            self.summary.failures.append(failure)
            self._tell(self._result(bucket, item, failure))
        self._progress()


def _in_flight(opts: RemoveOptions) -> int:
    """Requests in flight at most: DeleteObjects batches, or aborts (one
    upload each)."""
    return min(opts.concurrency, ABORTS_IN_FLIGHT if opts.incomplete else BATCHES_IN_FLIGHT)


class _Counted:
    """The requests of a run's :class:`Objects`, one per bucket, in all (what
    :func:`surge.s3.transfer.run_transfer` counts)."""

    def __init__(self) -> None:
        self.parts: list[Objects] = []

    @property
    def requests(self) -> int:
        return sum(o.requests for o in self.parts)

    @property
    def retries(self) -> int:
        return sum(o.retries for o in self.parts)


async def remove_async(
    urls: str | Sequence[str],
    *,
    options: RemoveOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> Summary:
    """Delete ``urls`` (``s3://bucket/key``, one or many; with
    ``recursive=True``, every object under each ``s3://bucket/prefix/``);
    options as :class:`RemoveOptions` (``on_result`` is told of each key).
    Per-key failures are in the summary; a bad argument raises
    :class:`UsageError`, a listing that fails or a missing bucket
    :class:`S3Error`."""
    opts = options or RemoveOptions(**kwargs)
    sources = _sources(urls, opts.recursive, opts.rules())
    connections = _in_flight(opts) + opts.list_parallel
    return await run_transfer(
        opts,
        client,
        connections,
        lambda client, summary: _Remove(sources, opts, client, summary),
    )


def remove_results(
    urls: str | Sequence[str], *, options: RemoveOptions | None = None, **kwargs: Any
) -> AsyncGenerator[Result, None]:
    """:func:`remove_async`'s results as an async iterator, one per key as
    the server confirms it (or a dry run would delete it, or it failed)."""
    from surge.s3.results import results

    opts = options or RemoveOptions(**kwargs)
    return results(lambda o: remove_async(urls, options=o), opts)


def remove(
    urls: str | Sequence[str], *, options: RemoveOptions | None = None, **kwargs: Any
) -> Iterator[Result]:
    """Delete objects, as ``surge s3 rm``: :func:`remove_results` for
    synchronous code, a plain iterator of results."""
    opts = options or RemoveOptions(**kwargs)
    with closing(
        iterate_in_thread(
            lambda: remove_results(urls, options=opts), name="surge-s3-rm", buffer=BATCH
        )
    ) as results:
        yield from results


def remove_summary(
    urls: str | Sequence[str], *, options: RemoveOptions | None = None, **kwargs: Any
) -> Summary:
    """:func:`remove_async` for synchronous code: the summary."""
    opts = options or RemoveOptions(**kwargs)
    return run_sync(lambda: remove_async(urls, options=opts))


def abort_uploads(
    urls: str | Sequence[str], *, options: RemoveOptions | None = None, **kwargs: Any
) -> Iterator[Result]:
    """Abort the multipart uploads in progress of ``urls`` (each key's; with
    ``recursive=True``, every one under each prefix), as ``surge s3 rm
    --incomplete``: :func:`remove` with ``incomplete=True``, a result each
    (``upload_id`` the upload's)."""
    opts = options or RemoveOptions(**{**kwargs, "incomplete": True})
    if not opts.incomplete:
        raise UsageError("abort_uploads: options with incomplete=False")
    return remove(urls, options=opts)


__all__ = [
    "BATCH",
    "Deletes",
    "RemoveOptions",
    "Version",
    "abort_uploads",
    "remove",
    "remove_async",
    "remove_results",
]
