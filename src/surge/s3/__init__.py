"""surge.s3: listing S3 buckets fast - pipelined pages, parallel prefixes and key ranges.

    import surge.s3
    for obj in surge.s3.list_all("s3://bucket/prefix/", endpoint_url="http://127.0.0.1:9000"):
        print(obj.key, obj.size, obj.last_modified, obj.etag, obj.storage_class)
    buckets = asyncio.run(surge.s3.list_buckets(endpoint_url=...))   # [Bucket(name, created)]
    summary = surge.s3.download("s3://bucket/prefix/", "dir/", recursive=True)  # surge s3 cp
    summary = surge.s3.upload("dir/", "s3://bucket/prefix/", recursive=True)    # and back
    summary = surge.s3.sync("s3://bucket/prefix/", "dir/", delete=True)        # surge s3 sync
    summary = surge.s3.copy("s3://a/prefix/", "s3://b/prefix/", recursive=True)  # by the server
    summary = surge.s3.copy("s3://a/p/", "s3://b/p/", recursive=True,            # two endpoints:
                            source_endpoint_url="http://127.0.0.1:9000")       # through here
    summary = surge.s3.move("s3://bucket/inbox/", "done/", recursive=True)     # surge s3 mv
    url = surge.s3.presign("s3://bucket/key", expires_in=3600)                 # surge s3 presign
    for result in surge.s3.remove("s3://bucket/prefix/", recursive=True):       # surge s3 rm
        print(result.destination, result.failure)
    surge.s3.remove("s3://bucket/prefix/", recursive=True, all_versions=True)  # every version
    async for page in surge.s3.list_uploads("s3://bucket/prefix/"):           # ls --incomplete
        print([(u.key, u.upload_id, u.initiated) for u in page])
    for result in surge.s3.abort_uploads("s3://bucket/prefix/", recursive=True):  # rm --incomplete
        print(result.destination, result.upload_id)

Errors: :class:`S3Error` (``code``: S3's own, or ``InvalidListing`` /
``NotListBucketResult`` for a server that lists wrongly), :class:`UsageError`
(a bad URL or option, no credentials). Unlike ``surge s3 ls``, the API lists
recursively by default (``recursive=False`` for one level).

See :mod:`surge.s3.api` for the options, :mod:`surge.s3.listing` for how it works.

The names above load on first use (PEP 562): ``surge s3 ls`` imports the
listing, not the transfers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, __getattr__ loads them
    from surge.errors import S3Error, UsageError
    from surge.s3.api import (
        EndpointOptions,
        ListOptions,
        list_all,
        list_buckets,
        list_objects,
        list_pages,
        list_uploads,
        list_versions,
    )
    from surge.s3.buckets import make_bucket, remove_bucket
    from surge.s3.copies import CopyOptions, copy, copy_async, copy_results
    from surge.s3.deletes import (
        RemoveOptions,
        abort_uploads,
        remove,
        remove_async,
        remove_results,
    )
    from surge.s3.listing import CommonPrefix, Stats
    from surge.s3.moves import move, move_async, move_results
    from surge.s3.parse import Bucket, S3Object, S3Version, Upload
    from surge.s3.presigning import presign
    from surge.s3.putoptions import PutOptions
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
    from surge.s3.uploads import UploadOptions, sync, sync_async, upload, upload_async

__all__ = [
    "Bucket",
    "CommonPrefix",
    "CopyOptions",
    "Credentials",
    "DownloadOptions",
    "EndpointOptions",
    "Failure",
    "ListOptions",
    "PutOptions",
    "RemoveOptions",
    "Result",
    "S3Error",
    "S3Object",
    "S3Version",
    "Stats",
    "Summary",
    "TransferOptions",
    "Upload",
    "UploadOptions",
    "UsageError",
    "abort_uploads",
    "copy",
    "copy_async",
    "copy_results",
    "download",
    "download_async",
    "list_all",
    "list_buckets",
    "list_objects",
    "list_pages",
    "list_uploads",
    "list_versions",
    "make_bucket",
    "move",
    "move_async",
    "move_results",
    "open_object",
    "presign",
    "remove",
    "remove_async",
    "remove_bucket",
    "remove_results",
    "sync",
    "sync_async",
    "upload",
    "upload_async",
]

#: name -> the module it is loaded from on first use.
_EXPORTS = {
    "S3Error": "surge.errors",
    "UsageError": "surge.errors",
    "EndpointOptions": "surge.s3.api",
    "ListOptions": "surge.s3.api",
    "list_all": "surge.s3.api",
    "list_buckets": "surge.s3.api",
    "list_objects": "surge.s3.api",
    "list_pages": "surge.s3.api",
    "list_versions": "surge.s3.api",
    "list_uploads": "surge.s3.api",
    "Upload": "surge.s3.parse",
    "abort_uploads": "surge.s3.deletes",
    "make_bucket": "surge.s3.buckets",
    "remove_bucket": "surge.s3.buckets",
    "presign": "surge.s3.presigning",
    "PutOptions": "surge.s3.putoptions",
    "CopyOptions": "surge.s3.copies",
    "copy": "surge.s3.copies",
    "copy_async": "surge.s3.copies",
    "copy_results": "surge.s3.copies",
    "CommonPrefix": "surge.s3.listing",
    "move": "surge.s3.moves",
    "move_async": "surge.s3.moves",
    "move_results": "surge.s3.moves",
    "Stats": "surge.s3.listing",
    "Bucket": "surge.s3.parse",
    "S3Object": "surge.s3.parse",
    "S3Version": "surge.s3.parse",
    "Credentials": "surge.s3.sigv4",
    "RemoveOptions": "surge.s3.deletes",
    "remove": "surge.s3.deletes",
    "remove_async": "surge.s3.deletes",
    "remove_results": "surge.s3.deletes",
    "DownloadOptions": "surge.s3.transfer",
    "Failure": "surge.s3.transfer",
    "Result": "surge.s3.transfer",
    "Summary": "surge.s3.transfer",
    "TransferOptions": "surge.s3.transfer",
    "download": "surge.s3.transfer",
    "download_async": "surge.s3.transfer",
    "open_object": "surge.s3.transfer",
    "UploadOptions": "surge.s3.uploads",
    "sync": "surge.s3.uploads",
    "sync_async": "surge.s3.uploads",
    "upload": "surge.s3.uploads",
    "upload_async": "surge.s3.uploads",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'surge.s3' has no attribute {name!r}")
