"""The listing API: async iterators for asyncio code, a plain iterator for the rest.

    async for obj in surge.s3.list_objects("s3://bucket/logs/", endpoint_url=...):
        print(obj.key, obj.size, obj.last_modified)

    for obj in surge.s3.list_all("s3://bucket/logs/"):
        ...

``recursive=True`` (the default) yields every object under the prefix, listed
in parallel (``parallel`` requests at most in flight; 1 lists sequentially, in
key order), in no particular order. ``recursive=False`` lists one level, as
``aws s3 ls`` without ``--recursive`` does: :class:`CommonPrefix` entries for
the "directories", then objects, page by page in key order.

Failures raise :class:`surge.errors.S3Error` (``code`` is S3's: NoSuchBucket,
AccessDenied, ...); bad arguments raise :class:`surge.errors.UsageError`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing, closing
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from surge._log import logger as get_logger
from surge.errors import UsageError
from surge.gc_tuning import relaxed_gc
from surge.http.client import AsyncClient, make_ssl_context
from surge.loops import iterate_in_thread
from surge.s3.config import Target, make_target, resolve_timeouts, split_s3_url
from surge.s3.listing import CommonPrefix, Lister, ParallelListing, Stats, invalid
from surge.s3.parse import Bucket, S3Object, S3Version, Upload, parse_buckets
from surge.s3.sigv4 import Credentials

Entry = S3Object | CommonPrefix
Item = TypeVar("Item")
_log = get_logger("surge.s3")


@dataclass(kw_only=True)
class EndpointOptions:
    """Where an S3 request goes and how it is signed: the options every S3
    call shares (:class:`ListOptions`, :class:`surge.s3.DownloadOptions`,
    :class:`surge.s3.UploadOptions`), given by keyword."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    no_sign_request: bool = False
    credentials: Credentials | None = None  # instead of the standard chain
    #: The proxy, as ``AsyncClient(proxy=)`` (curl's --proxy); None: the
    #: environment's (https_proxy, all_proxy, no_proxy), as the AWS CLI reads them.
    proxy: str | None = None
    #: CA certificates (PEM) to trust for an https:// proxy, as curl's
    #: --proxy-cacert (None: the origins' trust, the system's CAs).
    proxy_cafile: str | None = None
    #: An https:// proxy's certificate not verified (curl's --proxy-insecure);
    #: the origin's still is.
    proxy_insecure: bool = False
    #: Seconds to open a connection (DNS, TCP, TLS), and that the server may
    #: stay silent once a request is sent (no byte of its answer, or none of
    #: an upload's body taken): the AWS CLI's --cli-connect-timeout and
    #: --cli-read-timeout.  None: the profile's ``cli_connect_timeout`` /
    #: ``cli_read_timeout``, else 60 s each; 0: no limit but the request's own.
    connect_timeout: float | None = None
    read_timeout: float | None = None

    def __post_init__(self) -> None:
        if self.proxy:
            from surge.http.proxy import parse_proxy  # --proxy only

            parse_proxy(self.proxy)  # a usage error now, not at the first request
        if self.proxy_cafile is not None:
            make_ssl_context(self.proxy_cafile)  # and an unreadable CA file
        # a bad value (or one in the config file) is a usage error now
        resolve_timeouts(self.connect_timeout, self.read_timeout, self.profile)

    def client(self, max_connections: int, max_time: float, **extra: Any) -> AsyncClient:
        """An :class:`AsyncClient` for S3 requests: the proxy, the timeouts
        (connect and read, as :func:`surge.s3.config.resolve_timeouts` finds
        them; each request's whole ``max_time``), no cookies (S3 authenticates
        each request; the AWS CLI keeps none).  Every S3 client is made here."""
        connect, read = resolve_timeouts(self.connect_timeout, self.read_timeout, self.profile)
        return AsyncClient(
            max_connections=max_connections,
            max_time=max_time,
            connect_timeout=connect or max_time,
            read_timeout=read,
            proxy=self.proxy,
            proxy_cafile=self.proxy_cafile,
            proxy_insecure=self.proxy_insecure,
            cookies=False,
            **extra,
        )

    def target(self, bucket: str) -> Target:
        """Where and how to send a bucket's requests ("": the service's)."""
        return make_target(
            bucket,
            endpoint_url=self.endpoint_url,
            region=self.region,
            profile=self.profile,
            no_sign_request=self.no_sign_request,
            credentials=self.credentials,
        )

    def endpoint(self, target: Target | None = None) -> dict[str, Any]:
        """These options as keywords, for another S3 call to the same place
        (with ``target``: its credentials, resolved once already)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(EndpointOptions)}
        if target is not None and target.signer is not None:
            fields["credentials"] = target.signer.credentials
        return fields


@dataclass
class ListOptions(EndpointOptions):
    recursive: bool = True
    parallel: int = 16
    page_size: int = 1000
    retries: int = 5
    max_time: float = 60.0  # seconds per request
    relax_gc: bool = True  # the cycle collector relaxed while listing (surge.gc_tuning)
    #: told, in one line, when the server does not list as S3 does and the
    #: parallel listing gives way to a sequential one (default: a logging warning)
    notice: Callable[[str], None] | None = None
    stats: Stats = field(default_factory=Stats)  # filled in as the listing runs
    #: The keys under this prefix (with a URL that names only the bucket).
    prefix: str | None = None
    #: Only the keys after this one; the listing then runs in key order, one
    #: pipelined page after another (S3's ``start-after``).
    start_after: str | None = None
    #: At most this many entries, the first in key order (the listing then runs
    #: in key order, as with ``start_after``), as the AWS CLI's ``--max-items``.
    limit: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parallel < 1:
            raise UsageError(f"--parallel must be at least 1, not {self.parallel}")
        if not 1 <= self.page_size <= 1000:
            raise UsageError(f"page size must be 1..1000, not {self.page_size}")
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise UsageError(f"limit must be at least 1, not {self.limit!r}")


async def list_pages(
    url: str,
    *,
    options: ListOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> AsyncGenerator[list[Entry], None]:
    """The listing a page (a list of entries) at a time: the cheapest way through
    a big listing, with no per-object iterator step."""
    opts = options or ListOptions(**kwargs)
    bucket, prefix = _bucket_and_prefix(url, opts)
    target = opts.target(bucket)
    own_client = client is None
    if client is None:
        # identity, not gzip: MinIO compresses listings when asked, and inflating
        # them cost 0.35 us an object of client CPU on loopback (a tenth of the
        # parse) - AWS does not compress them, and boto3 and obstore do not ask.
        client = opts.client(
            opts.parallel + 4, opts.max_time, headers={"Accept-Encoding": "identity"}
        )
    lister = Lister(target, client, page_size=opts.page_size, retries=opts.retries)
    lister.stats = opts.stats
    # The cycle collector relaxed while the listing runs (surge.bulk's tuning: a
    # listing allocates a tuple an object, and CPython's young threshold of 700
    # had the collector rescan the live ones over and over, finding no garbage).
    with relaxed_gc(opts.relax_gc):
        try:
            if not opts.recursive or opts.start_after is not None or opts.limit is not None:
                # In key order, one pipelined page after another.
                left = opts.limit
                delimiter = None if opts.recursive else "/"
                async for page in lister.pages(
                    prefix, delimiter=delimiter, start_after=opts.start_after
                ):
                    entries: list[Entry] = [CommonPrefix(p) for p in page.prefixes]
                    entries.extend(page.objects)
                    if left is not None:
                        if delimiter is not None and page.prefixes and page.objects:
                            entries.sort(key=_entry_key)  # the first N: prefixes and keys merged
                        entries = entries[:left]
                        left -= len(entries)
                    if entries:
                        yield entries
                    if left == 0:
                        return
                return
            out: asyncio.Queue[list[S3Object] | None] = asyncio.Queue(maxsize=256)
            notice = opts.notice or _log.warning
            listing = ParallelListing(lister, prefix, opts.parallel, out.put, notice)

            async def produce() -> None:
                try:
                    await listing.run()
                finally:
                    # the consumer stops at None; an error is re-raised by awaiting us
                    while True:
                        try:
                            out.put_nowait(None)
                            break
                        except asyncio.QueueFull:
                            await asyncio.sleep(0.001)

            producer = asyncio.ensure_future(produce())
            try:
                while (objects := await out.get()) is not None:
                    yield cast(list[Entry], objects)  # a list is not copied to widen its type
                await _first_error(producer)
            finally:
                if not producer.done():
                    producer.cancel()
                    await asyncio.gather(producer, return_exceptions=True)
        finally:
            if own_client:
                await client.close()


def list_versions(
    url: str,
    *,
    options: ListOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> AsyncGenerator[list[S3Version], None]:
    """Every version and delete marker under ``url`` (ListObjectVersions), a page
    at a time, in key order (newest version first within a key), as s5cmd's
    ``ls --all-versions``; ``prefix=`` as :func:`list_pages`."""
    return _marked_pages(url, Lister.versions, options, client, kwargs)


def list_uploads(
    url: str,
    *,
    options: ListOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> AsyncGenerator[list[Upload], None]:
    """Every multipart upload in progress under ``url`` (ListMultipartUploads:
    begun, neither completed nor aborted - what a killed run leaves), a page
    at a time, in the server's order (S3's: key order): :class:`surge.s3.parse.Upload` (key, upload
    id, initiated), as ``surge s3 ls --incomplete``; ``prefix=`` as
    :func:`list_pages`."""
    return _marked_pages(url, Lister.uploads, options, client, kwargs)


async def _marked_pages(
    url: str,
    pages: Callable[[Lister, str], AsyncIterator[list[Item]]],
    options: ListOptions | None,
    client: AsyncClient | None,
    kwargs: dict[str, Any],
) -> AsyncGenerator[list[Item], None]:
    """A sequential listing's pages (``pages`` of the Lister: versions,
    uploads), with this call's client or one of its own."""
    opts = options or ListOptions(**kwargs)
    bucket, prefix = _bucket_and_prefix(url, opts)
    own_client = client is None
    if client is None:
        client = opts.client(2, opts.max_time)
    lister = Lister(opts.target(bucket), client, page_size=opts.page_size, retries=opts.retries)
    lister.stats = opts.stats
    try:
        async for page in pages(lister, prefix):
            yield page
    finally:
        if own_client:
            await client.close()


def _bucket_and_prefix(url: str, opts: ListOptions) -> tuple[str, str]:
    bucket, prefix = split_s3_url(url)
    if opts.prefix is not None:
        if prefix:
            raise UsageError(f"{url!r} has a prefix already: give prefix= or the URL's, not both")
        prefix = opts.prefix
    return bucket, prefix


#: Pages of a bucket list at most (AWS pages by 10,000 buckets when asked; a
#: server that keeps answering with a token is not followed forever).
MAX_BUCKET_PAGES = 1000


async def list_buckets(
    *, options: ListOptions | None = None, client: AsyncClient | None = None, **kwargs: Any
) -> list[Bucket]:
    """The buckets the credentials can see (ListBuckets), as ``aws s3 ls`` with no
    bucket lists them; options as :class:`ListOptions` (endpoint, region,
    credentials, retries)."""
    opts = options or ListOptions(**kwargs)
    target = opts.target("")
    own_client = client is None
    if client is None:
        client = opts.client(1, opts.max_time)
    lister = Lister(target, client, retries=opts.retries)
    lister.stats = opts.stats
    buckets: list[Bucket] = []
    params: dict[str, str] = {}
    seen: set[str] = set()
    try:
        for _ in range(MAX_BUCKET_PAGES):
            body = await lister.get(params, "ListAllMyBucketsResult")
            try:
                page, token = parse_buckets(body)
            except ValueError as e:
                raise invalid("", str(e)) from None
            buckets.extend(page)
            if token is None:
                return buckets
            if token in seen:
                raise invalid("", f"the bucket list repeats its token {token[:80]!r}")
            seen.add(token)
            params = {"continuation-token": token}
        raise invalid("", f"more than {MAX_BUCKET_PAGES} pages of buckets")
    finally:
        if own_client:
            await client.close()


def _entry_key(entry: Entry) -> str:
    return entry.prefix if isinstance(entry, CommonPrefix) else entry.key


async def _first_error(task: asyncio.Future[None]) -> None:
    """Await ``task``; an ExceptionGroup from the workers' TaskGroup is unwrapped
    to its first error, which is what the caller can act on."""
    try:
        await task
    except BaseExceptionGroup as group:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None


async def list_objects(
    url: str,
    *,
    options: ListOptions | None = None,
    client: AsyncClient | None = None,
    **kwargs: Any,
) -> AsyncGenerator[Entry, None]:
    """Every object (and, not recursive, every common prefix) under ``url``."""
    async with aclosing(list_pages(url, options=options, client=client, **kwargs)) as pages:
        async for page in pages:
            for entry in page:
                yield entry


def list_all(url: str, *, options: ListOptions | None = None, **kwargs: Any) -> Iterator[Entry]:
    """:func:`list_objects` for synchronous code: a plain iterator.

    The listing runs on its own event loop in a background thread (so this
    works where a loop is already running, as in Jupyter); pages cross over, not
    objects, so the handoff costs next to nothing per object.
    """
    opts = options or ListOptions(**kwargs)
    with closing(
        iterate_in_thread(lambda: list_pages(url, options=opts), name="surge-s3-ls", buffer=64)
    ) as pages:
        for page in pages:
            yield from page
