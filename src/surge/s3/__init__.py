"""surge.s3: listing S3 buckets fast - pipelined pages, parallel prefixes and key ranges.

    import surge.s3
    for obj in surge.s3.list_all("s3://bucket/prefix/", endpoint_url="http://127.0.0.1:9000"):
        print(obj.key, obj.size, obj.last_modified, obj.etag, obj.storage_class)
    buckets = asyncio.run(surge.s3.list_buckets(endpoint_url=...))   # [Bucket(name, created)]
    summary = surge.s3.download("s3://bucket/prefix/", "dir/", recursive=True)  # surge s3 cp
    summary = surge.s3.upload("dir/", "s3://bucket/prefix/", recursive=True)    # and back
    summary = surge.s3.sync("s3://bucket/prefix/", "dir/", delete=True)        # surge s3 sync

Errors: :class:`S3Error` (``code``: S3's own, or ``InvalidListing`` /
``NotListBucketResult`` for a server that lists wrongly), :class:`UsageError`
(a bad URL or option, no credentials). Unlike ``surge s3 ls``, the API lists
recursively by default (``recursive=False`` for one level).

See :mod:`surge.s3.api` for the options, :mod:`surge.s3.listing` for how it works.
"""

from surge.errors import S3Error, UsageError
from surge.s3.api import (
    EndpointOptions,
    ListOptions,
    list_all,
    list_buckets,
    list_objects,
    list_pages,
    list_versions,
)
from surge.s3.listing import CommonPrefix, Stats
from surge.s3.parse import Bucket, S3Object, S3Version
from surge.s3.sigv4 import Credentials
from surge.s3.transfer import (
    DownloadOptions,
    Failure,
    Result,
    Summary,
    TransferOptions,
    download,
    download_async,
    open_object,
)
from surge.s3.upload import UploadOptions, sync, sync_async, upload, upload_async

__all__ = [
    "Bucket",
    "CommonPrefix",
    "Credentials",
    "DownloadOptions",
    "EndpointOptions",
    "Failure",
    "ListOptions",
    "Result",
    "S3Error",
    "S3Object",
    "S3Version",
    "Stats",
    "Summary",
    "TransferOptions",
    "UploadOptions",
    "UsageError",
    "download",
    "download_async",
    "list_all",
    "list_buckets",
    "list_objects",
    "list_pages",
    "list_versions",
    "open_object",
    "sync",
    "sync_async",
    "upload",
    "upload_async",
]
