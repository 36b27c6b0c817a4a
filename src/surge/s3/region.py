"""Following a bucket to its region, as botocore's ``S3RegionRedirectorv2`` does.

A request signed for the wrong region is refused, in one of a few ways: a 301
``PermanentRedirect`` (AWS, to the region's own endpoint), a 400
``AuthorizationHeaderMalformed`` whose document names the ``<Region>`` (AWS
and MinIO, when the signature's scope names another region), a 301, 302 or
307, ``IllegalLocationConstraintException``, or - to a HEAD, which carries no
document - a bare 301 or 400.  The bucket's region is then in the answer's
``x-amz-bucket-region`` header or the document's ``<Region>``, else a HEAD of
the bucket says it (botocore's last resort too).  The request is signed again
for that region (on AWS, and sent to that region's host) once - a request is
never redirected twice - and the region is remembered for the bucket
(:func:`surge.s3.config.remember_region`), so that every later request of the
process starts there.  An answer that names no region, or the region the
request was already signed for, is an error as it stands, and its message says
which region the request was signed for.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from surge._log import logger as get_logger
from surge.errors import RequestError
from surge.http.client import AsyncClient
from surge.http.response import Headers
from surge.s3.config import Target, remember_region

log = get_logger("surge.s3")

#: botocore's validate_region_name: a host label.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?")
_BODY_REGION = re.compile(rb"<Region>([^<]{1,63})</Region>")
REDIRECT_STATUSES = frozenset({301, 302, 307})
#: Codes that say the region is wrong, with the region in the answer.
REGION_CODES = frozenset(
    {"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"}
)


def says_wrong_region(status: int, code: str | None, *, head: bool) -> bool:
    """Whether an answer is the one S3 gives a request signed for, or sent to,
    another region than the bucket's (botocore's conditions)."""
    if status in REDIRECT_STATUSES or code in REGION_CODES:
        return True
    return head and status == 400  # a HEAD has no document to say why


def region_in(headers: Headers, body: bytes) -> str | None:
    """The bucket's region as an answer gives it: ``x-amz-bucket-region``,
    else the error document's ``<Region>``; None if neither is a region name."""
    region = headers.get("x-amz-bucket-region")
    if region is None:
        found = _BODY_REGION.search(body)
        region = found.group(1).decode("ascii", "replace") if found else None
    if region is None or not _REGION.fullmatch(region.strip()):
        return None
    return region.strip()


async def bucket_region(client: AsyncClient, target: Target) -> str | None:
    """A HEAD of the bucket, for its ``x-amz-bucket-region`` (S3 gives it with
    a 200, a 301 and a 403 alike); None if it says none or fails."""
    headers: list[tuple[str, str]] = []
    if target.signer is not None:
        headers = target.signer.sign("HEAD", target.host, target.path, "", datetime.now(UTC))
    try:
        url = f"{target.base_url}{target.path}"
        response = await client.request("HEAD", url, headers=headers)
    except RequestError:
        return None
    return region_in(response.headers, b"")


async def redirect(
    client: AsyncClient,
    target: Target,
    status: int,
    code: str | None,
    headers: Headers,
    body: bytes,
    *,
    head: bool = False,
) -> Target | None:
    """The target to sign the request again for, if the answer says the bucket
    is in another region than ``target``'s (None: it does not, or names none)."""
    if not target.bucket or not says_wrong_region(status, code, head=head):
        return None
    region = region_in(headers, body) or await bucket_region(client, target)
    if region is None or region == target.region:
        return None
    log.debug(
        "s3://%s is in region %s, not %s: signing for %s from now on (--region %s saves a request)",
        target.bucket,
        region,
        target.region,
        region,
        region,
    )
    return remember_region(target, region)


def region_note(target: Target, status: int | None, code: str | None, message: str) -> str:
    """``message``, naming the region the request was signed for when the
    answer is about regions (or a bare 400 - a HEAD's, with no document to
    say why - which may be): what is left of a redirect not followed."""
    bare = status == 400 and code in (None, "BadRequest", "HTTP400")
    if code in REGION_CODES or status in REDIRECT_STATUSES or bare:
        return f"{message} (signed for region {target.region})"
    return message
