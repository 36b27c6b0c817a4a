"""Making and removing buckets: ``surge s3 mb`` / ``rb`` and
:func:`make_bucket` / :func:`remove_bucket`, as ``aws s3 mb`` / ``rb``.

A bucket outside us-east-1 is made with its LocationConstraint (S3 wants it,
and refuses it for us-east-1).  ``rb --force`` first deletes every object, as
``rm --recursive`` deletes them (:mod:`surge.s3.deletes`: batches of 1,000).
"""

from __future__ import annotations

from typing import Any

from surge.errors import S3Error, UsageError
from surge.s3.config import split_s3_url
from surge.s3.objects import Objects
from surge.s3.transfer import Summary, TransferOptions, run_sync, transfer_client


def _bucket(url: str) -> str:
    bucket, key = split_s3_url(url)
    if key:
        raise UsageError(f"{url!r}: a bucket is s3://BUCKET, with no key")
    return bucket


async def make_bucket_async(
    url: str, *, options: TransferOptions | None = None, **kwargs: Any
) -> str:
    """Make the bucket ``url`` names (``s3://bucket``) in the options' region:
    its name.  S3Error as the server says (BucketAlreadyExists...)."""
    opts = options or TransferOptions(**kwargs)
    bucket = _bucket(url)
    client = transfer_client(opts, 1)
    try:
        await Objects(opts.target(bucket), client, opts.retry_policy()).create_bucket()
    finally:
        await client.close()
    return bucket


async def remove_bucket_async(
    url: str, *, force: bool = False, options: TransferOptions | None = None, **kwargs: Any
) -> Summary | None:
    """Remove the bucket ``url`` names; ``force``: every object in it deleted
    first, as ``rm --recursive`` does, and if the bucket still holds something
    (BucketNotEmpty: a versioned bucket's versions and delete markers, uploads
    in progress) those too, as ``rm --all-versions`` and ``rm --incomplete``
    do.  The summary of those deletes (None without ``force``); their
    failures leave the bucket."""
    from surge.s3.deletes import RemoveOptions, remove_async

    opts = options or TransferOptions(**kwargs)
    bucket = _bucket(url)
    fields = {name: getattr(opts, name) for name in opts.__dataclass_fields__}

    async def remove(**what: bool) -> Summary:
        return await remove_async(
            f"s3://{bucket}/", options=RemoveOptions(**fields | {"recursive": True} | what)
        )

    summary = None
    if force:
        summary = await remove()
        if summary.failed:
            return summary
    client = transfer_client(opts, 1)
    try:
        objects = Objects(opts.target(bucket), client, opts.retry_policy())
        try:
            await objects.delete_bucket()
        except S3Error as e:
            if summary is None or e.code != "BucketNotEmpty":
                raise
            for what in ("all_versions", "incomplete"):
                more = await remove(**{what: True})
                summary.objects += more.objects
                summary.failures += more.failures
                summary.requests += more.requests
                summary.retries += more.retries
                if more.failed:
                    return summary
            await objects.delete_bucket()
    finally:
        await client.close()
    return summary


def make_bucket(url: str, **kwargs: Any) -> str:
    """:func:`make_bucket_async` for synchronous code."""
    return run_sync(lambda: make_bucket_async(url, **kwargs))


def remove_bucket(url: str, *, force: bool = False, **kwargs: Any) -> Summary | None:
    """:func:`remove_bucket_async` for synchronous code."""
    return run_sync(lambda: remove_bucket_async(url, force=force, **kwargs))
