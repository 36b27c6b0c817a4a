"""Presigned URLs: ``surge s3 presign`` and :func:`presign` - an object's URL
that anyone holding it may GET until it expires, no credentials needed.

SigV4 query signing (:meth:`surge.s3.sigv4.Signer.presign`), as botocore's
``generate_presigned_url`` and ``aws s3 presign``: the request path is the
key's (:func:`surge.s3.sigv4.object_path`: bytes as given), only Host signed,
the payload unsigned.  Nothing is sent: the URL is made here, from the
credentials, the region and the endpoint the other commands use.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from surge.errors import UsageError
from surge.s3.api import EndpointOptions
from surge.s3.config import split_s3_url
from surge.s3.sigv4 import object_path

#: SigV4's longest: a presigned URL lives 7 days at most (the AWS CLI's limit).
MAX_EXPIRES = 7 * 24 * 3600
#: The AWS CLI's default.
DEFAULT_EXPIRES = 3600


def presign(
    url: str,
    *,
    expires_in: int = DEFAULT_EXPIRES,
    method: str = "GET",
    now: datetime | None = None,
    options: EndpointOptions | None = None,
    **kwargs: Any,
) -> str:
    """The presigned URL of ``url`` (``s3://bucket/key``) for ``method``,
    valid ``expires_in`` seconds from ``now`` (default: the clock's);
    endpoint, region and credentials as :class:`surge.s3.EndpointOptions`."""
    opts = options or EndpointOptions(**kwargs)
    bucket, key = split_s3_url(url)
    if not key:
        raise UsageError(f"{url!r} names no object")
    if not 1 <= expires_in <= MAX_EXPIRES:
        raise UsageError(f"expires in {expires_in} s: 1..{MAX_EXPIRES} (7 days, SigV4's limit)")
    target = opts.target(bucket)
    if target.signer is None:
        raise UsageError("no credentials to sign with (--no-sign-request, or none found)")
    path = object_path(target.path, key)
    when = (now or datetime.now(UTC)).astimezone(UTC)
    query = target.signer.presign(method, target.host, path, when, expires_in)
    return f"{target.base_url}{path}?{query}"
