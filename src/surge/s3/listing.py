"""Listing a bucket: ListObjectsV2 pages, pipelined, and many listings at once.

A sequential listing pays a round trip and the server's work per 1,000 keys,
one after another. Three things take that away:

* **Pipelining.** The next page is asked for as soon as this page's body is in
  (its continuation token, or its last key, found with ``find``), and is on
  the wire (:func:`started`) before this page is parsed and handed on:
  parsing overlaps the next request.
* **Prefix fan-out.** A listing with ``Delimiter=/`` names the "directories"
  (common prefixes) below a prefix; each is then listed on its own, up to
  ``parallel`` at once. A level with fewer prefixes than workers is looked into
  one level deeper (at most :data:`MAX_DEPTH`).
* **Key-range splitting** for flat key spaces (ClickHouse #65572, aws-sdk #570):
  a range ``(after, end]`` is listed from ``StartAfter=after`` and stops at
  ``end``. When workers are idle, a range that got a truncated page cuts its
  remainder at points estimated from that page's keys (:mod:`keyspace`); the
  last piece stays open-ended and splits again when it can, never further
  ahead than the keys listed behind it (:meth:`ParallelListing._cuts`). The
  ranges are disjoint and meet at their ends, so the listing is exact - no key
  twice, none missed - however good or bad the estimates are.

Why ranges carry on from their last key (``StartAfter``) rather than from a
continuation token: both are exact, but a range needs its last key anyway to
know where it stands, and a key is a place any request can start from. (Issue
#5 measured MinIO delaying continuation requests whose listing is not ready;
how MinIO treats a pipelined ``StartAfter`` instead was not measured apart.)

Results arrive a page at a time (a list of :class:`S3Object`), in no global
order across ranges.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_right
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice, pairwise
from operator import lt
from typing import Any, NamedTuple, TypeVar

from surge.errors import RequestError, S3Error
from surge.http.client import AsyncClient
from surge.retry import RetryPolicy, retry_after_seconds
from surge.s3 import keyspace
from surge.s3.config import Target, followed
from surge.s3.parse import (
    Page,
    S3Object,
    S3Version,
    Upload,
    is_truncated,
    last_key,
    next_token,
    parse_error,
    parse_page,
    parse_uploads,
    parse_versions,
    upload_markers,
    version_markers,
)
from surge.s3.region import redirect, region_note
from surge.s3.sigv4 import canonical_query

#: How deep prefix fan-out looks for more prefixes when a level has too few.
MAX_DEPTH = 3
#: A level with this many directories per worker or more is listed in runs of
#: directories, not one job each: a job costs a request however few keys its
#: directory holds (65,536 hash-named directories of 10 keys would cost 65,536
#: requests one by one; in runs of ~15 directories, 2 requests a run, ~8,800 -
#: against ~660 pages for one sequential listing, which has no parallelism).
GROUP_AT = 8
#: ... in about this many runs per worker.
GROUPS_PER_WORKER = 4
#: S3 asks for a retry with these (503 SlowDown above all); botocore retries
#: the same statuses and codes.  Transport failures: surge.retry's.
_RETRY_STATUS = frozenset({500, 502, 503, 504})
_RETRY_CODES = frozenset({"SlowDown", "InternalError", "RequestTimeout", "ServiceUnavailable"})
#: The S3Error code of a listing the server got wrong (a repeated token, keys
#: out of order or again, an ignored start-after): it ends the listing rather
#: than print a key twice or loop for ever.
INVALID_LISTING = "InvalidListing"
#: Truncated pages with nothing on them, one after another, before the listing
#: is given up as one that never ends (S3 may send a few; a loop sends them all).
MAX_EMPTY_PAGES = 100

_T = TypeVar("_T")
Item = TypeVar("Item")


def invalid(bucket: str, message: str) -> S3Error:
    return S3Error(INVALID_LISTING, message, status=200, bucket=bucket)


def check_order(keys: list[str], after: str | None, bucket: str) -> None:
    """Refuse a page of a listing that relies on S3's order (a key range, a run
    of directories): its keys must increase strictly, all after ``after`` (the
    start-after sent). Python compares strings by code point, which is the
    order of their UTF-8 bytes: S3's order. ~25 ns a key, in C."""
    if not keys:
        return
    if after is not None and keys[0] <= after:
        raise invalid(
            bucket,
            f"asked for keys after {after!r}, the server began at {keys[0]!r}: "
            "it does not honour start-after",
        )
    if not all(map(lt, keys, islice(keys, 1, None))):
        i = next(i for i in range(len(keys) - 1) if not keys[i] < keys[i + 1])
        raise invalid(
            bucket,
            f"keys out of S3's order (UTF-8 bytes) or repeated: {keys[i]!r} then {keys[i + 1]!r}",
        )


async def started(request: Awaitable[_T]) -> asyncio.Future[_T]:
    """``request`` in a task of its own, already sent when this returns.

    A task made by ``ensure_future`` only runs when the code that made it next
    yields to the loop: a listing that asked for the next page that way and
    then parsed this page sent the request after the parse (send, parse, send,
    parse - no overlap at all). One turn of the loop runs the task's first
    step, and on a kept-alive connection that step writes the request
    (``AsyncClient.request`` takes an idle connection and writes without an
    await), so its bytes are on the wire before the parse begins
    (``tests/s3/test_listing.py``, on a server in another thread).
    """
    task = asyncio.ensure_future(request)
    try:
        await asyncio.sleep(0)
    except BaseException:
        task.cancel()
        raise
    return task


async def dropped(pending: asyncio.Future[Any] | None) -> None:
    """Cancel a request no longer wanted (a listing stopped early: ``limit=``,
    a consumer that breaks) and wait until it has let go of its connection.

    A request already on the wire (:func:`started`) is a running task; left
    behind in a generator that nobody closes, it was cancelled only when the
    loop shut the generator down, and its connection's clean-up then ran on
    a closed loop ("Event loop is closed"). The waiting happens in the
    generator's ``finally``, while the loop still runs.
    """
    if pending is None or pending.done():
        return
    pending.cancel()
    await asyncio.wait([pending])


class Tokens:
    """The continuation tokens of one listing: a token seen before, or a
    truncated page without one, would list the same keys again for ever -
    boto3 stops the same way ("The same next token was received twice")."""

    __slots__ = ("bucket", "empty", "seen")

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self.seen: set[str] = set()
        self.empty = 0

    def next(self, body: bytes) -> str:
        token = next_token(body)
        if not token:
            raise invalid(self.bucket, "a truncated page without a NextContinuationToken")
        if token in self.seen:
            raise invalid(self.bucket, f"the same next token was received twice: {token[:80]!r}")
        self.seen.add(token)
        if b"<Key>" in body or b"<Prefix>" in body[body.find(b"<CommonPrefixes>") :]:
            self.empty = 0
        else:
            self.empty += 1
            if self.empty > MAX_EMPTY_PAGES:
                raise invalid(self.bucket, f"{MAX_EMPTY_PAGES} truncated pages in a row, empty")
        return token


def describe(body: bytes, content_type: str | None) -> str:
    """What came back instead of a listing, in a few words for the message."""
    head = body[:80].decode("utf-8", "replace")
    shown = "".join(c if c.isprintable() else " " for c in head).strip()
    return f"{content_type or 'no Content-Type'}, {len(body)} bytes: {shown!r}"


class CommonPrefix(NamedTuple):
    """A "directory" of a listing with a delimiter (``aws s3 ls`` shows ``PRE``)."""

    prefix: str


@dataclass
class Stats:
    """What a listing did: requests by kind, and keys read past a range's end."""

    requests: int = 0
    retries: int = 0
    ranges: int = 0
    discovers: int = 0
    groups: int = 0
    wasted_keys: int = 0
    fallback: str | None = None  # why the fan-out gave way to a sequential listing


class Lister:
    """ListObjectsV2 requests for one bucket, over a :class:`surge.http.AsyncClient`."""

    def __init__(
        self,
        target: Target,
        client: AsyncClient,
        *,
        page_size: int = 1000,
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 10.0,
    ) -> None:
        if not 1 <= page_size <= 1000:
            raise ValueError(f"page_size must be 1..1000 (S3's maximum), not {page_size}")
        self.target = target
        self.client = client
        self.page_size = page_size
        self.policy = RetryPolicy(retries, backoff, max_backoff)
        self.stats = Stats()

    async def fetch(
        self,
        prefix: str,
        *,
        delimiter: str | None = None,
        token: str | None = None,
        start_after: str | None = None,
        max_keys: int | None = None,
    ) -> bytes:
        """One ListObjectsV2 page's body; retried on 5xx, SlowDown and transient
        transport errors with exponential backoff and full jitter; any other
        failure raises :class:`S3Error`."""
        params = {
            "list-type": "2",
            "encoding-type": "url",  # keys with characters XML 1.0 cannot carry
            "max-keys": str(max_keys or self.page_size),
        }
        if prefix:
            params["prefix"] = prefix
        if delimiter:
            params["delimiter"] = delimiter
        if token:
            params["continuation-token"] = token
        if start_after:
            params["start-after"] = start_after
        return await self.get(params, "ListBucketResult")

    def versions(self, prefix: str) -> AsyncIterator[list[S3Version]]:
        """Every version and delete marker under ``prefix`` (ListObjectVersions),
        in key order, each page asked for as soon as the last one's markers are
        read - before its versions are parsed."""
        params = {"versions": "", "encoding-type": "url", "max-keys": str(self.page_size)}
        if prefix:
            params["prefix"] = prefix
        return self._marked(
            params, "ListVersionsResult", version_markers, parse_versions, "version"
        )

    async def uploads(self, prefix: str) -> AsyncIterator[list[Upload]]:
        """Every multipart upload in progress under ``prefix``
        (ListMultipartUploads), in the server's order (S3's: key order),
        pipelined as :meth:`versions`.

        Only keys under ``prefix`` are yielded, whatever the server sends.
        MinIO lists nothing for a prefix that is not a whole key (and ignores
        ``max-uploads`` and ``key-marker``): when the listing of a prefix
        finds nothing, the uploads from ``key-marker=prefix`` on are asked
        for instead, up to the first key past the prefix - on S3 one more
        request, whose first key is past it."""
        params = {"uploads": "", "encoding-type": "url", "max-uploads": str(self.page_size)}
        if not prefix:
            async for page in self._marked_uploads(params):
                yield page
            return
        found = False
        async for page in self._marked_uploads({**params, "prefix": prefix}):
            page = [u for u in page if u.key.startswith(prefix)]
            if page:
                found = True
                yield page
        if found:
            return
        async with aclosing(self._marked_uploads({**params, "key-marker": prefix})) as pages:
            async for page in pages:
                under = [u for u in page if u.key.startswith(prefix)]
                if under:
                    yield under
                if any(u.key > prefix and not u.key.startswith(prefix) for u in page):
                    return  # past the prefix: what follows is not under it

    def _marked_uploads(self, params: dict[str, str]) -> AsyncGenerator[list[Upload], None]:
        return self._marked(
            params, "ListMultipartUploadsResult", upload_markers, parse_uploads, "upload"
        )

    async def _marked(
        self,
        params: dict[str, str],
        answer: str,
        markers_of: Callable[[bytes], tuple[str, str] | None],
        parse: Callable[[bytes], list[Item]],
        what: str,
    ) -> AsyncGenerator[list[Item], None]:
        """The pages of a listing that goes on from a key marker and a second
        one (``{what}-id-marker``): ListObjectVersions', ListMultipartUploads'.
        The next page is asked for as soon as this one's markers are read;
        markers that repeat end it as an invalid answer, not a loop."""
        seen: set[tuple[str, str]] = set()
        pending: asyncio.Future[bytes] | None = await started(self.get(params, answer))
        try:
            while pending is not None:
                body = await pending
                pending = None
                try:
                    markers = markers_of(body)
                except ValueError as e:
                    raise invalid(self.target.bucket, str(e)) from None
                if markers is not None:
                    if markers in seen:
                        raise invalid(self.target.bucket, f"the {what} markers repeat: {markers}")
                    seen.add(markers)
                    follow = {**params, "key-marker": markers[0]}
                    if markers[1]:
                        follow[f"{what}-id-marker"] = markers[1]
                    pending = await started(self.get(follow, answer))
                try:
                    page = parse(body)
                except ValueError as e:
                    raise invalid(self.target.bucket, str(e)) from None
                if page:
                    yield page
        finally:
            await dropped(pending)

    async def get(self, params: dict[str, str], answer: str) -> bytes:
        """One signed GET of the target's path with ``params``: the body of a 200
        whose document is ``answer`` (its root element). Retried on 5xx,
        SlowDown and transient transport errors as the retry policy says; signed
        again for the bucket's region if the answer says it is another
        (:mod:`surge.s3.region`); any other failure raises :class:`S3Error`."""
        query = canonical_query(params)
        attempt = 0
        redirected = False
        while True:
            target = self.target = followed(self.target)
            url = f"{target.base_url}{target.path}?{query}"
            headers: list[tuple[str, str]] = []
            if target.signer is not None:
                now = datetime.now(UTC)
                headers = target.signer.sign("GET", target.host, target.path, query, now)
            self.stats.requests += 1
            try:
                response = await self.client.request("GET", url, headers=headers)
            except RequestError as e:
                attempt += 1
                if self.policy.error_worth_retrying(e.error_class) and await self._pause(attempt):
                    continue
                detail = e.detail if attempt < 2 else f"{e.detail}, after {attempt} tries"
                raise S3Error(e.error_class, detail, status=e.status, bucket=target.bucket) from e
            if response.status == 200:
                body = response.body
                # An HTML login page or a JSON answer from something that is not
                # S3 would otherwise read as an empty bucket.
                if b"<" + answer.encode() not in body[:1024]:
                    raise S3Error(
                        f"Not{answer}",
                        f"a 200 response that is not a {answer} ("
                        + describe(body, response.header("content-type"))
                        + "): is the endpoint an S3 server?",
                        status=200,
                        bucket=target.bucket,
                    )
                return body
            code, message = parse_error(response.body)
            if not redirected:
                moved = await redirect(
                    self.client, target, response.status, code, response.headers, response.body
                )
                if moved is not None:
                    self.target = moved
                    redirected = True
                    continue
            if response.status in _RETRY_STATUS or code in _RETRY_CODES:
                attempt += 1
                asked = retry_after_seconds(response.header("retry-after"))
                if await self._pause(attempt, asked):
                    continue
            raise S3Error(
                code or f"HTTP{response.status}",
                region_note(
                    target, response.status, code, message or f"HTTP status {response.status}"
                ),
                status=response.status,
                bucket=target.bucket,
            )

    async def _pause(self, attempt: int, retry_after: float | None = None) -> bool:
        """Wait before another try, as the retry policy says; False: no more tries."""
        wait = self.policy.delay(attempt, retry_after=retry_after)
        if wait is None:
            return False
        self.stats.retries += 1
        await asyncio.sleep(wait)
        return True

    # -- one listing, sequential and pipelined ---------------------------------------

    async def pages(
        self, prefix: str, *, delimiter: str | None = None, start_after: str | None = None
    ) -> AsyncIterator[Page]:
        """Every page of one listing (of the keys after ``start_after``, if given),
        the next one always asked for before this one is parsed."""
        tokens = Tokens(self.target.bucket)
        first: str | None = None
        pending: asyncio.Future[bytes] | None = await started(
            self.fetch(prefix, delimiter=delimiter, start_after=start_after)
        )
        try:
            while pending is not None:
                body = await pending
                pending = None
                if is_truncated(body):
                    token = tokens.next(body)
                    pending = await started(self.fetch(prefix, delimiter=delimiter, token=token))
                page = parse_page(body)
                # Not S3's order (a server may sort otherwise, and a token
                # listing does not rely on it), only a page served again.
                entries = page.objects or page.prefixes
                if entries:
                    head = entries[0] if isinstance(entries[0], str) else entries[0].key
                    if head == first:
                        raise invalid(
                            self.target.bucket, f"a page served twice, beginning at {head!r}"
                        )
                    first = head
                yield page
        finally:
            await dropped(pending)


Emit = Callable[[list[S3Object]], Awaitable[None]]


class ParallelListing:
    """Every object under a prefix, listed by up to ``parallel`` workers at once.

    Work is a queue of jobs (a prefix to look into, a key range to list); each
    of ``parallel`` workers runs one job at a time and each job has at most one
    request in flight, so ``parallel`` bounds the requests in flight.
    """

    def __init__(
        self,
        lister: Lister,
        prefix: str,
        parallel: int,
        emit: Emit,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.lister = lister
        self.notice = notice
        self.prefix = prefix
        self.parallel = max(1, parallel)
        self.emit = emit
        self.jobs: deque[Callable[[], Awaitable[None]]] = deque()
        self.busy = 0
        self._wake = asyncio.Event()
        # Key ranges are cut for at most ``width`` workers; the width doubles
        # while listing wider pays (see _observe).
        self.width = 1
        self._rate = 0.0  # keys/s at the width before this one
        self._window: tuple[float, int, int] | None = None  # start, keys, pages
        self._settled = self.parallel == 1
        # What the judge weighs (see _judge): how long the plan's two requests
        # at once took, and the first two requests sent alone, each.
        self._paired = 0.0
        self._alone: list[float] = []
        self.clock = time.monotonic
        # Keys listed so far in each flat space (by prefix): how far ahead its
        # open-ended range may be cut (_cuts).
        self._behind: dict[str, int] = {}

    @property
    def idle(self) -> int:
        """Workers that have nothing to do and nothing queued for them, within
        the width that key ranges are cut for."""
        return self.width - self.busy - len(self.jobs)

    async def _hand_on(self, objects: list[S3Object]) -> None:
        self._observe(len(objects))
        await self.emit(objects)

    def _observe(self, keys: int) -> None:
        """Widen the key-range fan-out only while it pays.

        Each range costs about one request more than a sequential listing (the
        page that crosses its end), and on a server that does one request at a
        time that is all it adds: moto took 7.07 s for 20,000 keys cut into
        ranges for 16 workers against 3.84 s sequentially. So a flat space is
        listed by one range first; the width doubles each time the keys listed
        a second at this width beat the previous width's by a quarter (measured
        over a page a worker and 2 more); when they do not, it goes back to
        the previous width and stays there.
        Directories (prefix jobs) are not held back: each costs no more than
        its own pages.
        """
        if self._settled:
            return
        now = self.clock()
        if self._window is None:
            self._window = (now, 0, 0)
            return
        start, listed, pages = self._window
        listed, pages = listed + keys, pages + 1
        if pages < self.width + 2:
            self._window = (start, listed, pages)
            return
        rate = listed / max(now - start, 1e-6)
        if rate < 1.25 * self._rate:
            # Wider did not pay: back to the width that did, and no more cuts
            # beyond it (a range that ends costs its last page).
            self.width = max(1, self.width // 2)
            self._settled = True
            return
        self._rate = rate
        self.width = min(self.parallel, self.width * 2)
        self._settled = self.width == self.parallel
        # The pages asked for before the widening still come in at the old
        # rate: the next window starts with the next page.
        self._window = None

    def _judging(self) -> bool:
        """Whether the judge still waits for a request sent alone."""
        return not self._settled and self.width == 1 and self._paired > 0 and len(self._alone) < 2

    def _judge(self, alone: float) -> None:
        """The first two requests sent alone against the plan's two sent
        together: a server that takes about as long for two at once scales, and
        the width goes to ``parallel`` at once (a flat space of a few pages
        behind 20 ms would be listed before the rates could show it); one that
        takes twice as long answers one at a time, and the rates decide.

        The faster of two samples, not one: a request that the machine's load
        slowed made moto's server, which answers one request at a time, look
        as if it scaled (issue #19: 1.27x the time of a sequential listing).
        The pair is timed to its slower answer, so it cannot look faster than
        the server is. Decided once, on the second sample; a listing that never
        sends two requests alone keeps its workers busy without it, or is
        about done.
        """
        if not self._judging():
            return
        self._alone.append(alone)
        if len(self._alone) == 2 and self._paired < 1.7 * min(self._alone):
            self.width = self.parallel
            self._settled = True

    async def _timed(
        self, request: Callable[[], Awaitable[bytes]], took: Callable[[float], None]
    ) -> bytes:
        """The body ``request()`` brings; ``took`` is told how long it took from
        the moment it went out (this task's first step: on a kept-alive
        connection the request is written then) to the moment its answer was
        in - not to the moment the listing awaited it, which may be after it
        parsed the page before. (``request`` is called here, not by the caller:
        a task cancelled before its first step leaves no coroutine unawaited.)"""
        start = self.clock()
        body = await request()
        took(self.clock() - start)
        return body

    async def _send(self, prefix: str, after: str | None, max_keys: int) -> asyncio.Future[bytes]:
        """A page of a key range, asked for in a task of its own; timed for the
        judge if it goes out alone (this job the only one running: no other
        request in flight) while the judge waits for one. Nothing else starts
        before it is in: only this job could submit another job, and it is
        waiting for this answer."""
        fetch = self.lister.fetch
        if self.busy == 1 and self._judging():
            return await started(
                self._timed(
                    lambda: fetch(prefix, start_after=after, max_keys=max_keys), self._judge
                )
            )
        return await started(fetch(prefix, start_after=after, max_keys=max_keys))

    def submit(self, job: Callable[[], Awaitable[None]]) -> None:
        self.jobs.append(job)
        self._wake.set()

    async def run(self) -> None:
        if self.parallel == 1:
            self.submit(lambda: self._sequential())
        else:
            self.submit(lambda: self._plan())
        async with asyncio.TaskGroup() as group:
            for _ in range(self.parallel):
                group.create_task(self._worker())

    async def _sequential(self) -> None:
        # By continuation token, as boto3 and the AWS CLI list: it relies on
        # nothing but the server's own bookkeeping (no order, no start-after).
        async for page in self.lister.pages(self.prefix):
            if page.objects:
                await self._hand_on(page.objects)

    async def _plan(self) -> None:
        """Check that the server lists as S3 does before the fan-out relies on it.

        The fan-out relies on S3's key order (ranges, runs of directories) and on
        its delimiter (common prefixes stand for every key under them); s3rver,
        for one, sorts by UTF-16 code units and leaves common prefixes out, which
        made the fan-out lose or repeat keys. So the first plain page and the
        first delimiter page are asked for together (no added round trip): the
        plain page's keys must be in S3's order, and each must be on the
        delimiter page - as an object of this level or under one of its common
        prefixes. A listing that fits one page ends with the plain page. A
        server that deviates is listed sequentially by continuation token (what
        the AWS CLI does, exact there), with one notice.
        """
        lister = self.lister
        prefix = self.prefix
        # Each timed from when it goes out to when it is in: not to when it is
        # awaited, after the plain page is parsed.
        pair: list[float] = []
        plain = asyncio.ensure_future(self._timed(lambda: lister.fetch(prefix), pair.append))
        level = asyncio.ensure_future(
            self._timed(lambda: lister.fetch(prefix, delimiter="/"), pair.append)
        )
        try:
            body = await plain  # both go out here, before either is parsed
            page = parse_page(body)
            if not page.truncated:
                if page.objects:
                    await self._hand_on(page.objects)
                return
            await asyncio.wait([level])
            problem = _deviation(prefix, page, level.result())
            self._paired = max(pair)  # both went out at once: the later answer
        finally:
            if not level.done():
                level.cancel()
            elif not level.cancelled():
                level.exception()  # retrieved: an error here is the plain page's too
        if problem is not None:
            self.lister.stats.fallback = problem
            if self.notice is not None:
                self.notice(f"{problem}: listing sequentially, by continuation token")
            await self._sequential()
            return
        await self.discover(prefix, 0, first=level)

    async def _worker(self) -> None:
        while True:
            if not self.jobs:
                if self.busy == 0:  # nothing queued, nothing running: all done
                    self._wake.set()
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            job = self.jobs.popleft()
            self.busy += 1
            try:
                await job()
            finally:
                self.busy -= 1
                self._wake.set()

    def _check_level(self, prefix: str, page: Page, before: str | None) -> str | None:
        """A page of a delimiter listing the fan-out relies on: objects of this
        level only, objects and directories each in S3's order and after every
        entry of the earlier pages. Returns the greatest entry so far."""
        bucket = self.lister.target.bucket
        keys = [o.key for o in page.objects]
        check_order(keys, before, bucket)
        check_order(page.prefixes, before, bucket)
        cut = len(prefix)
        for key in keys:
            if key.find("/", cut) >= 0:
                raise invalid(bucket, f"a listing with delimiter '/' returned the key {key!r}")
        for common in page.prefixes:
            if not common.startswith(prefix) or common.find("/", cut) != len(common) - 1:
                raise invalid(bucket, f"{common!r} is not a common prefix of {prefix!r}")
        tail = max(keys[-1] if keys else "", page.prefixes[-1] if page.prefixes else "")
        return tail or before

    async def discover(
        self, prefix: str, depth: int, first: asyncio.Future[bytes] | None = None
    ) -> None:
        """List ``prefix`` with a delimiter: emit the objects at this level, and
        hand each "directory" found to a job of its own. ``first``: the first
        page, already asked for."""
        lister = self.lister
        lister.stats.discovers += 1
        found: list[str] = []
        grouping = False
        tokens = Tokens(lister.target.bucket)
        before: str | None = None  # the greatest entry of the pages so far
        pending: asyncio.Future[bytes] | None = first or await started(
            lister.fetch(prefix, delimiter="/")
        )
        try:
            while pending is not None:
                body = await pending
                pending = None
                flat = b"<CommonPrefixes>" not in body
                if is_truncated(body) and not flat:
                    pending = await started(
                        lister.fetch(prefix, delimiter="/", token=tokens.next(body))
                    )
                page = parse_page(body)
                before = self._check_level(prefix, page, before)
                if is_truncated(body) and flat:
                    # A page of keys and no directories: a flat key space. Go on
                    # by key ranges, from this page's last key.
                    await self._hand_on(page.objects)
                    keys = [o.key for o in page.objects]
                    self._split_flat(prefix, keys, last_key(body))
                    for sub in found:  # directories seen on earlier pages
                        self._submit_range(sub)
                    return
                if page.objects:
                    await self._hand_on(page.objects)
                found.extend(page.prefixes)
                if len(found) >= GROUP_AT * self.parallel:
                    # Runs of directories, each ending where the next begins; the
                    # last run waits for the next page, which tells where it ends.
                    size = max(2, len(found) // (GROUPS_PER_WORKER * self.parallel))
                    while len(found) > size:
                        run, found = found[:size], found[size:]
                        self._submit_group(prefix, run, found[0])
                    depth = MAX_DEPTH
                    grouping = True
                elif len(found) >= self.parallel or depth >= MAX_DEPTH:
                    for sub in found:
                        self._submit_range(sub)
                    found.clear()
                    depth = MAX_DEPTH  # enough work at this level: no deeper looks
        finally:
            if pending is not None:
                pending.cancel()
        if grouping and len(found) > 1:
            self._submit_group(prefix, found, None)  # the last run: to the end
            return
        # Too few directories to keep the workers busy: look one level deeper.
        deeper = depth + 1
        few = len(found) + len(self.jobs) < self.parallel
        for sub in found:
            if few and deeper < MAX_DEPTH:
                self.submit(lambda sub=sub: self.discover(sub, deeper))  # type: ignore[misc]
            else:
                self._submit_range(sub)

    def _submit_range(
        self, prefix: str, after: str | None = None, end: str | None = None, expect: int = 0
    ) -> None:
        async def job() -> None:
            await self.list_range(prefix, after, end, expect=expect)

        self.submit(job)

    def _submit_group(self, parent: str, directories: list[str], stop: str | None) -> None:
        self.lister.stats.groups += 1
        self.submit(lambda: self.list_group(parent, directories[0], len(directories), stop))

    async def list_group(self, parent: str, first: str, count: int, stop: str | None) -> None:
        """The keys of ``count`` directories of ``parent`` from ``first`` on (the
        last ends before ``stop``): the first by a listing of its own, the rest
        as one span from the first one's last key.

        Exact because directories of one level do not nest: every key under a
        later directory sorts after every key under ``first``, and a key in the
        span that has no delimiter after ``parent`` is one of the level's own
        objects, which the delimiter listing already handed on.
        """
        last, listed = await self.list_range(first, None, None, split=False)
        if count < 2 or last is None:
            return
        lister = self.lister
        size = lister.page_size
        cut = len(parent)
        # The first directory's size is the best guess at the others'.
        max_keys = _page_for(listed * (count - 1), size)
        pending: asyncio.Future[bytes] | None = await started(
            lister.fetch(parent, start_after=last, max_keys=max_keys)
        )
        try:
            while pending is not None:
                body = await pending
                pending = None
                asked, last = last, last_key(body)
                if is_truncated(body) and last is not None and (stop is None or last < stop):
                    pending = await started(lister.fetch(parent, start_after=last))
                objects = parse_page(body).objects
                check_order([o.key for o in objects], asked, lister.target.bucket)
                kept = [
                    o
                    for o in objects
                    if (stop is None or o.key < stop) and o.key.find("/", cut) >= 0
                ]
                lister.stats.wasted_keys += len(objects) - len(kept)
                if kept:
                    await self._hand_on(kept)
        finally:
            if pending is not None:
                pending.cancel()

    def _split_flat(self, prefix: str, keys: list[str], after: str | None) -> None:
        """The rest of a flat listing after ``after``, cut into ranges for the idle
        workers (the last one open-ended), or one open range if no cut fits."""
        if after is None:
            return
        self._behind[prefix] = self._behind.get(prefix, 0) + len(keys)
        # One worker takes the first range: the others are the ones to cut for.
        count = min(max(0, self.idle - 1), self._cuts(prefix, None))
        cuts = keyspace.cut_points(keys, after, None, count, self._keys_each())
        bounds: list[str | None] = [after, *cuts, None]
        for low, high in pairwise(bounds):
            self._submit_range(prefix, low, high, expect=self._keys_each() if high else 0)

    def _cuts(self, prefix: str, end: str | None) -> int:
        """How many cuts a range under ``prefix`` with workers idle may make: a
        bounded one, one for each idle worker (it was cut for two pages and is
        denser than that: its keys are there); an open-ended one, no further
        ahead than the keys listed so far in its space (issue #19).

        Cut points past the last key listed are guesses about keys nobody has
        seen, and a range that begins past the end of the space costs a
        request for nothing: on a server that spends as long on an empty page
        as on a full one (moto walks the whole bucket for each), that is what
        a fan-out that does not pay costs. Cut for all 15 idle workers at two
        pages each, the last pages of a flat space cost up to 15 requests:
        20,000 keys took 28 requests against 20 when the judge jumped wrongly
        on moto, and 4,000 keys 20 against 5 on the model server of
        tests/s3/test_listing_width.py. No further ahead than behind, at most
        one request in two pages listed goes past the end, and the reach
        doubles with each round of cuts: a server that scales gets the full
        width a few round trips later (20 pages: in 7 round trips, not 5).
        """
        if end is not None:
            return self.idle
        return min(self.idle, self._behind.get(prefix, 0) // self._keys_each())

    def _keys_each(self) -> int:
        # Two pages a range: one page each would spend more of the server's work
        # on the last page's overshoot past ``end``, more pages would leave
        # workers idle for longer.
        return 2 * self.lister.page_size

    async def list_range(
        self,
        prefix: str,
        after: str | None,
        end: str | None,
        *,
        split: bool = True,
        expect: int = 0,
    ) -> tuple[str | None, int]:
        """Every key under ``prefix`` in ``(after, end]`` (None: unbounded).

        Returns the last key handed on and how many were (for a range that was
        not cut: its greatest key and its size)."""
        lister = self.lister
        lister.stats.ranges += 1
        size = lister.page_size
        each = self._keys_each()
        max_keys = _page_for(expect, size)
        pending: asyncio.Future[bytes] | None = await self._send(prefix, after, max_keys)
        handed, listed = None, 0
        asked, last = None, after
        try:
            while pending is not None:
                body = await pending
                pending = None
                asked, last = last, last_key(body)
                more = is_truncated(body) and last is not None and (end is None or last < end)
                # With workers idle, this range is about to be cut: the next request
                # waits for the cut (and this page's parse), or it would read past
                # the new end. Otherwise it goes out now, before the parse.
                splitting = more and split and self.idle > 0
                if more and not splitting:
                    pending = await self._send(prefix, last, max_keys)
                objects = parse_page(body).objects
                keys = [o.key for o in objects]
                # A range is exact only if the server keeps S3's order and starts
                # where it is asked to: checked on every page, before it is handed on.
                check_order(keys, asked, lister.target.bucket)
                if end is not None and keys and keys[-1] > end:
                    kept = bisect_right(keys, end)
                    lister.stats.wasted_keys += len(objects) - kept
                    objects, keys = objects[:kept], keys[:kept]
                if objects:
                    handed = keys[-1]
                    listed += len(objects)
                    self._behind[prefix] = self._behind.get(prefix, 0) + len(objects)
                    await self._hand_on(objects)
                if not more or last is None:
                    continue
                if splitting and len(keys) >= 2:
                    cuts = keyspace.cut_points(keys, last, end, self._cuts(prefix, end), each)
                    if cuts:
                        bounds: list[str | None] = [*cuts, end]
                        for low, high in pairwise(bounds):
                            self._submit_range(prefix, low, high, expect=each if high else 0)
                        end = cuts[0]
                if end is not None and len(keys) >= 2:
                    # Size the next request to what is left, so the page that
                    # reaches ``end`` reads few keys past it.
                    left = keyspace.estimate(keys, last, end)
                    max_keys = _page_for(int(left) if left is not None else 0, size)
                if splitting:
                    pending = await self._send(prefix, last, max_keys)
        finally:
            if pending is not None:
                pending.cancel()
        return handed, listed


def _deviation(prefix: str, plain: Page, body: bytes) -> str | None:
    """Why the fan-out cannot rely on this server, or None: the first plain
    page (``plain``, truncated) against the first page with delimiter '/'."""
    keys = [o.key for o in plain.objects]
    if not all(map(lt, keys, islice(keys, 1, None))):
        return "the server does not list keys in S3's order (UTF-8 bytes)"
    try:
        level = parse_page(body)
    except ValueError:
        return "the server's delimiter listing does not parse"
    objects = {o.key for o in level.objects}
    prefixes = set(level.prefixes)
    # The delimiter page covers the key space up to its greatest entry.
    covered = None
    if level.truncated:
        entries = [*objects, *prefixes]
        covered = max(entries) if entries else ""
    cut = len(prefix)
    for key in keys:
        slash = key.find("/", cut)
        entry = key if slash < 0 else key[: slash + 1]
        if covered is not None and entry > covered:
            break
        if entry not in (prefixes if slash >= 0 else objects):
            what = "common prefix" if slash >= 0 else "object"
            return f"the server's delimiter listing leaves out the {what} {entry!r}"
    return None


def _page_for(expected: int, page_size: int) -> int:
    """max-keys for a request expected to reach its range's end with ``expected``
    keys (0: unknown): a quarter more than expected, so a low estimate rarely
    costs another round trip."""
    if expected <= 0:
        return page_size
    return max(1, min(page_size, expected + expected // 4 + 16))
