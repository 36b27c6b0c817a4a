"""Moves: ``surge s3 mv`` and :func:`move` - a copy, then the source deleted,
object by object, only once its copy is confirmed.

    summary = surge.s3.move("s3://bucket/inbox/", "done/", recursive=True)

* The copy is the command's own: an upload (a file to S3), a download (S3
  to a file) or a copy by the server (S3 to S3), with every option and check
  of ``cp``.  A source is deleted only once its copy is done - uploaded and
  verified, downloaded, verified and renamed into place, or copied - and its
  ``move:`` line (a :class:`Result` with ``moved``) comes only once it is
  deleted, too.
* An object source is deleted in the batches ``rm`` sends
  (:class:`surge.s3.deletes.Deletes`), while the copies go on; a file source
  is unlinked.
* Interrupted (or a copy that fails), nothing more is deleted: a source
  whose copy was not confirmed, or whose delete was not sent yet, stays
  where it was (its copy may be made already: a second ``mv`` finishes it).
  The deletes in flight are waited for and told, as ``rm``'s.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Callable
from typing import Any

from surge.errors import UsageError
from surge.http.client import AsyncClient
from surge.s3.config import split_s3_url
from surge.s3.deletes import BATCHES_IN_FLIGHT, Deletes
from surge.s3.objects import Objects
from surge.s3.transfer import (
    DownloadOptions,
    Failure,
    Result,
    Summary,
    TransferOptions,
    download_async,
    os_message,
    run_sync,
    transfer_client,
)
from surge.sinks import names_stdin, names_stdout


async def move_async(
    source: str,
    destination: str,
    *,
    options: TransferOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> Summary:
    """Move ``source`` to ``destination`` (``recursive=True``: every file or
    object under it): local to S3, S3 to local, S3 to S3.  ``options``: a
    :class:`surge.s3.UploadOptions`, :class:`surge.s3.DownloadOptions` or
    :class:`surge.s3.CopyOptions` for the direction (else made from
    ``kwargs``); ``on_result`` is told of each source moved (``moved``),
    and of each failure.  ``summary.deleted``: the sources deleted."""
    from surge.s3.copies import CopyOptions, copy_async
    from surge.s3.uploads import UploadOptions, upload_async

    from_s3, to_s3 = source.startswith("s3://"), destination.startswith("s3://")
    if not (from_s3 or to_s3):
        raise UsageError(f"{source!r} to {destination!r}: one of the two must be s3://bucket/...")
    if names_stdin(source) or names_stdout(destination):
        raise UsageError(
            f"{source!r} to {destination!r}: a move needs a file or an object on both sides"
        )
    kind = CopyOptions if from_s3 and to_s3 else DownloadOptions if from_s3 else UploadOptions
    opts = options if options is not None else kind(**kwargs)
    if not isinstance(opts, kind) or opts.sync:
        raise UsageError(f"a move {source!r} to {destination!r} takes {kind.__name__}, no sync")
    told = opts.on_result
    if isinstance(opts, CopyOptions):
        from surge.s3.copies import plan_copy

        the_plan = plan_copy(source, destination, opts)  # a recursive one onto itself: refused
        if (the_plan.bucket, the_plan.prefix) == (
            the_plan.destination.bucket,
            the_plan.destination.key,
        ) and opts.one_place():
            raise UsageError(f"{source!r}: a move onto itself would delete it")
    if not from_s3:
        return await upload_async(
            source, destination, options=_replace(opts, _unlinking(told)), client=client
        )
    bucket, _ = split_s3_url(source)
    own_client = client is None
    if client is None:
        client = transfer_client(opts, opts.concurrency + opts.list_parallel + BATCHES_IN_FLIGHT)
    # the source's own endpoint and credentials (a copy's may differ from the destination's)
    where = opts.source_target(bucket) if isinstance(opts, CopyOptions) else opts.target(bucket)
    deleter = _SourceDeletes(Objects(where, client, opts.retry_policy()), opts, told)
    copies = _replace(opts, deleter.offer)
    try:
        async with deleter:
            if isinstance(copies, CopyOptions):
                summary = await copy_async(source, destination, options=copies, client=client)
            else:
                assert isinstance(copies, DownloadOptions)
                summary = await download_async(source, destination, options=copies, client=client)
        deleter.into(summary)
        return summary
    finally:
        if own_client:
            await client.close()


def _replace(opts: Any, on_result: Callable[[Result], None]) -> Any:
    import dataclasses

    return dataclasses.replace(opts, on_result=on_result)


def _tell(told: Callable[[Result], None] | None, result: Result) -> None:
    if told is not None:
        told(result)


def _unlinking(told: Callable[[Result], None] | None) -> Callable[[Result], None]:
    """An upload's on_result that unlinks each file once its object is stored
    (and verified), then tells it moved."""

    def on_result(result: Result) -> None:
        if result.failure is not None or result.skipped or result.left_aborted:
            _tell(told, result)
            return
        if result.dryrun:
            _tell(told, _moved(result))
            return
        assert result.source is not None
        try:
            os.unlink(result.source)
        except OSError as e:
            message = f"copied, but the file could not be removed: {os_message(e)}"
            failure = Failure(result.source, result.destination, "LocalError", message)
            _tell(told, Result(result.source, result.destination, result.size, failure))
            return
        _tell(told, _moved(result))

    return on_result


def _moved(result: Result) -> Result:
    return Result(result.source, result.destination, result.size, dryrun=result.dryrun, moved=True)


class _SourceDeletes:
    """An object source's deletes, in batches, as its copies are confirmed:
    :meth:`offer` is the copy's on_result."""

    def __init__(
        self, objects: Objects, opts: TransferOptions, told: Callable[[Result], None] | None
    ) -> None:
        self.told = told
        self.deletes = Deletes(objects, self._deleted, batch=opts.delete_batch)
        self.waiting: asyncio.Queue[Result | None] = asyncio.Queue()
        #: key -> its copy's result, while its delete is in flight
        self.copied: dict[str, Result] = {}
        self.deleted = 0
        self.failures: list[Failure] = []
        self.task: asyncio.Task[None] | None = None

    def offer(self, result: Result) -> None:
        if result.failure is not None or result.skipped or result.left_aborted:
            _tell(self.told, result)
        elif result.dryrun:
            _tell(self.told, _moved(result))
        else:
            self.waiting.put_nowait(result)

    async def __aenter__(self) -> _SourceDeletes:
        self.task = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        assert self.task is not None
        if kind is None:
            self.waiting.put_nowait(None)
            await self.task
        else:  # what waits is not deleted; the deletes in flight are told
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        async with self.deletes:
            while (result := await self.waiting.get()) is not None:
                assert result.source is not None
                _, key = split_s3_url(result.source)
                self.copied[key] = result
                await self.deletes.add(key)

    def _deleted(self, key: str, error: tuple[str, str] | None) -> None:
        result = self.copied.pop(key)
        if error is None:
            self.deleted += 1
            _tell(self.told, _moved(result))
            return
        code, message = error
        failure = Failure(
            result.source or "",
            result.destination,
            code,
            f"copied, but the source could not be deleted: {message}",
        )
        self.failures.append(failure)
        _tell(self.told, Result(result.source, result.destination, result.size, failure))

    def into(self, summary: Summary) -> None:
        summary.deleted += self.deleted
        summary.failures += self.failures


def move(source: str, destination: str, **kwargs: Any) -> Summary:
    """:func:`move_async` for synchronous code."""
    return run_sync(lambda: move_async(source, destination, **kwargs))


def move_results(
    source: str, destination: str, *, options: TransferOptions | None = None, **kwargs: Any
) -> AsyncGenerator[Result, None]:
    """:func:`move_async`'s results as an async iterator: one as each source
    is moved (deleted, its copy confirmed), or fails."""
    from surge.s3.copies import CopyOptions
    from surge.s3.results import results
    from surge.s3.uploads import UploadOptions

    if options is None:
        from_s3, to_s3 = source.startswith("s3://"), destination.startswith("s3://")
        kind = CopyOptions if from_s3 and to_s3 else DownloadOptions if from_s3 else UploadOptions
        options = kind(**kwargs)
    return results(lambda o: move_async(source, destination, options=o), options)
