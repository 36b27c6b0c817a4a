"""How wide ParallelListing cuts a flat key space: ``_judge`` and ``_observe``.

The fan-out widens only where it pays (issue #19): a server that answers two
requests at once as fast as one gets the full width at once; one that answers
one at a time (moto's) keeps the listing about as narrow as a sequential one.

Whole listings run on an event loop whose clock is virtual: when nothing is
ready to run, the loop's wait for its next timer moves the clock to that timer
instead of sleeping. A model server answers each request after a time the test
sets, so a listing of 20 "one-second" pages takes no wall time and every count
is exact. The tests assert widths and request counts, never wall time.
"""

from __future__ import annotations

import asyncio
import bisect
import selectors
from collections.abc import Callable
from typing import Any

from surge.http import AsyncClient
from surge.s3 import keyspace
from surge.s3 import listing as listing_module
from surge.s3.config import make_target
from surge.s3.listing import Lister, ParallelListing
from surge.s3.parse import S3Object, next_token

# -- a virtual clock -------------------------------------------------------------------------


class _NoWait(selectors.SelectSelector):
    """A selector that never waits: a wait for the next timer moves the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:  # nothing ready and no timer: it would hang for ever
            raise RuntimeError("every task waits, and for nothing that will come")
        self.now += timeout
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time (no sockets: nothing here does real I/O)."""

    def __init__(self) -> None:
        self.selector = _NoWait()
        super().__init__(self.selector)

    def time(self) -> float:
        return self.selector.now


# -- a model server ----------------------------------------------------------------------------


class TimedLister(Lister):
    """Pages of an in-memory bucket, each answered after a set time.

    ``serial``: the server answers one request at a time (as moto's does), each
    after ``service`` of its time; otherwise each takes ``service`` however many
    are in flight. ``slow``: requests (numbered from 1 in the order sent) that
    take that long instead, as a busy machine would make them.
    """

    def __init__(
        self,
        keys: int | list[str],
        *,
        serial: bool,
        service: float = 1.0,
        slow: dict[int, float] | None = None,
        page_size: int = 1000,
    ) -> None:
        target = make_target("bkt", endpoint_url="http://127.0.0.1:9", no_sign_request=True)
        super().__init__(target, AsyncClient(), page_size=page_size)
        self.keys = (
            sorted(keys) if isinstance(keys, list) else [f"obj-{i:07d}" for i in range(keys)]
        )
        self.serial = serial
        self.service = service
        self.slow = slow or {}
        self.free_at = 0.0  # a serial server: when it is done with what it has
        self.done_at = 0.0  # when the listing ended (list_flat)
        # What was asked for, in the order sent: (prefix, delimiter, after), and
        # each answer's body, by the request's number (from 0).
        self.sent: list[tuple[str, str | None, str | None]] = []
        self.answers: list[bytes] = []

    async def fetch(
        self,
        prefix: str,
        *,
        delimiter: str | None = None,
        token: str | None = None,
        start_after: str | None = None,
        max_keys: int | None = None,
    ) -> bytes:
        self.stats.requests += 1
        self.sent.append((prefix, delimiter, token or start_after))
        took = self.slow.get(self.stats.requests, self.service)
        now = asyncio.get_running_loop().time()
        done = now + took
        if self.serial:
            done = max(now, self.free_at) + took
            self.free_at = done
        await asyncio.sleep(done - now)
        keys, after = self.keys, token or start_after
        i = max(bisect.bisect_right(keys, after) if after else 0, bisect.bisect_left(keys, prefix))
        if after and after.endswith("/"):  # a token after a common prefix
            while i < len(keys) and keys[i].startswith(after):
                i += 1
        entries: list[str] = []  # keys, and common prefixes (ending in "/")
        while i < len(keys) and keys[i].startswith(prefix):
            if len(entries) == (max_keys or self.page_size):
                break
            cut = keys[i].find("/", len(prefix)) if delimiter else -1
            entries.append(keys[i][: cut + 1] if cut >= 0 else keys[i])
            while i < len(keys) and keys[i].startswith(entries[-1]):
                i += 1
        truncated = i < len(keys) and keys[i].startswith(prefix)
        parts = [f"<ListBucketResult><IsTruncated>{str(truncated).lower()}</IsTruncated>"]
        for entry in entries:
            if entry.endswith("/"):
                parts.append(f"<CommonPrefixes><Prefix>{entry}</Prefix></CommonPrefixes>")
            else:
                parts.append(
                    f"<Contents><Key>{entry}</Key>"
                    "<LastModified>2026-11-26T10:00:00.000Z</LastModified>"
                    "<ETag>&#34;x&#34;</ETag><Size>1</Size></Contents>"
                )
        if truncated:
            parts.append(f"<NextContinuationToken>{entries[-1]}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        body = "".join(parts).encode()
        self.answers.append(body)
        return body


def list_flat(
    lister: TimedLister, parallel: int = 16, consume: float = 0.0
) -> tuple[ParallelListing, list[int]]:
    """List the lister's keys on virtual time: the listing, and its width as
    each page was handed on. ``consume``: how long the consumer takes a page."""
    widths: list[int] = []
    found: list[str] = []

    async def run() -> ParallelListing:
        async def emit(objects: list[S3Object]) -> None:
            found.extend(o.key for o in objects)
            widths.append(listing.width)
            if consume:
                await asyncio.sleep(consume)

        listing = ParallelListing(lister, "", parallel, emit)
        listing.clock = asyncio.get_running_loop().time
        await listing.run()
        lister.done_at = listing.clock()
        return listing

    with asyncio.Runner(loop_factory=VirtualLoop) as runner:
        listing = runner.run(run())
    assert sorted(found) == lister.keys and len(found) == len(set(found))
    return listing, widths


# -- whole listings ------------------------------------------------------------------------


def test_a_server_that_answers_two_at_once_as_fast_as_one_gets_the_full_width() -> None:
    lister = TimedLister(20_000, serial=False)
    listing, widths = list_flat(lister)
    # Judged when the range's second page came in: the plan's page and the
    # range's first at width 1, then the rest cut for 16.
    assert widths[:2] == [1, 1] and set(widths[2:]) == {16}
    assert listing._alone == [1.0, 1.0] and listing._paired == 1.0
    # Cut no further ahead than the keys behind (ParallelListing._cuts): with
    # 3 pages listed the open range cuts 1 range ahead of it, then 2, then 4:
    # 8 ranges, a request a page (the plan's two for the first) and none past
    # the end, in 7 round trips against 20 one after another. (Cut for all 16
    # workers at once: 5 round trips, and 28 requests, 7 past the end.)
    assert lister.stats.ranges == 8 and lister.stats.requests == 21
    assert lister.done_at == 7.0


def test_a_server_that_answers_one_at_a_time_keeps_the_listing_narrow() -> None:
    lister = TimedLister(20_000, serial=True)
    listing, widths = list_flat(lister)
    # Two at once took 2 s against 1 s alone: no jump. The rates widen to 2
    # after the first window (nothing to compare with yet), see no gain, and
    # go back to 1.
    assert listing._alone == [1.0, 1.0] and listing._paired == 2.0
    assert max(widths) == 2 and listing.width == 1
    # 20 pages: the plan's two for the first, then one a page (the range was
    # cut in two, at a page's end: the cut is exact on evenly spread keys)
    assert lister.stats.ranges == 2 and lister.stats.requests == 21


def test_a_wrong_jump_to_the_full_width_costs_few_requests() -> None:
    # The range's first two requests, each slowed by the machine's load, make
    # a server that answers one at a time look as if it scaled (2 s for the
    # plan's two at once against 3 s alone): the judge jumps to 16. On such a
    # server every range past the end of the key space costs a request (moto
    # walks the whole bucket for each), and cut points ahead of the last key
    # are guesses: an open range is cut no further ahead than the keys listed
    # behind it, so few land past the end however small the space.
    for pages in (4, 6, 8, 12, 20, 30, 50):
        lister = TimedLister(pages * 1000, serial=True, slow={3: 3.0, 4: 3.0})
        listing, _ = list_flat(lister)
        assert listing.width == 16 and listing._settled
        # a request a page and the plan's second: cut for all 16 workers at
        # once, 4 pages cost 20 requests, 20 pages 28, 50 pages 59
        assert lister.stats.requests <= pages + 2 + pages // 2, pages
        if pages in (4, 6, 20):
            assert lister.stats.requests <= pages + 2, pages


def test_one_slow_request_alone_does_not_open_the_fan_out() -> None:
    # The range's first request (the third sent) slowed by the machine's load:
    # on one sample, 2 s for two at once looked under 1.7x of 3 s alone.
    for slow in (3, 4):
        lister = TimedLister(20_000, serial=True, slow={slow: 3.0})
        listing, widths = list_flat(lister)
        assert sorted(listing._alone) == [1.0, 3.0]
        # The slow page slows the first window too, so the rates may try 4
        # once; never 16, and the listing ends at width 2 or less.
        assert max(widths) <= 4 and listing.width <= 2
        assert lister.stats.requests <= 24, slow


def test_a_slow_consumer_does_not_make_the_server_look_slow() -> None:
    # Each page takes the consumer 3 s, so the range's second request is in
    # long before the listing awaits it: timed to when it came in, it took 1 s.
    lister = TimedLister(20_000, serial=True, slow={3: 3.0})
    listing, widths = list_flat(lister, consume=3.0)
    assert listing._alone == [3.0, 1.0]
    assert max(widths) < 16


def test_requests_with_others_in_flight_are_not_timed_as_alone() -> None:
    # Two directories of two pages listed at once on a server that answers one
    # at a time: each request takes 2 s, and none went out alone.
    keys = [f"{d}/obj-{i:05d}" for d in "ab" for i in range(1_500)]
    lister = TimedLister(keys, serial=True)
    listing, widths = list_flat(lister)
    assert listing._paired == 2.0 and listing._alone == []
    assert max(widths) <= 2 and lister.stats.requests == 6
    # A one-page directory beside a big one: the big one's key range goes on
    # alone, and its requests take 1 s.
    keys = [f"a/obj-{i:05d}" for i in range(1_000)] + [f"b/obj-{i:05d}" for i in range(12_000)]
    lister = TimedLister(keys, serial=True)
    listing, widths = list_flat(lister)
    assert listing._paired == 2.0 and listing._alone == [1.0, 1.0]
    assert max(widths) <= 2


def test_with_one_worker_nothing_is_judged_or_cut() -> None:
    lister = TimedLister(5_000, serial=False)
    listing, widths = list_flat(lister, parallel=1)
    assert set(widths) == {1} and listing._alone == [] and lister.stats.requests == 5


# -- the judge and the rates, driven directly -------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fresh(parallel: int = 16) -> tuple[ParallelListing, Clock]:
    async def emit(objects: list[S3Object]) -> None:
        pass

    listing = ParallelListing(TimedLister(0, serial=False), "", parallel, emit)
    clock = listing.clock = Clock()
    return listing, clock


def test_the_judge_decides_on_the_faster_of_two_requests_alone() -> None:
    listing, _ = fresh()
    listing._paired = 2.0  # two at once: 2 s
    listing._judge(3.0)  # one sample is not enough, however slow
    assert listing.width == 1
    listing._judge(1.0)  # 2 s for two against 1 s for one: one at a time
    assert listing.width == 1 and not listing._judging()
    listing._judge(0.5)  # decided once
    assert listing.width == 1

    listing, _ = fresh()
    listing._paired = 1.2
    listing._judge(1.0)
    assert listing.width == 1
    listing._judge(1.1)  # 1.2 s for two against 1.0 s for one: it scales
    assert listing.width == 16 and listing._settled


def test_the_judge_waits_for_the_plan() -> None:
    listing, _ = fresh()
    listing._judge(1.0)
    listing._judge(1.0)
    assert listing.width == 1 and listing._alone == []  # nothing to compare with


def feed(listing: ParallelListing, clock: Clock, page_time: Callable[[int], float]) -> list[int]:
    """Hand on pages of 1,000 keys, each taking ``page_time(width)`` of the
    clock, until the width settles: the widths seen, one a page."""
    widths = []
    listing._observe(1000)  # opens the first window
    for _ in range(200):
        clock.now += page_time(listing.width)
        listing._observe(1000)
        widths.append(listing.width)
        if listing._settled:
            break
    return widths


def test_the_width_doubles_while_it_pays_and_settles_when_it_does_not() -> None:
    # A server that scales up to 4 requests at once: 8 gains nothing on 4.
    listing, clock = fresh()
    widths = feed(listing, clock, lambda width: 1.0 / min(width, 4))
    assert listing._settled and listing.width == 4
    # 1, 2, 4, then 8 (no gain), and back to 4. Each width after the first is
    # seen on the page that chose it, the page that opens its window (pages
    # asked for before still come in at the old rate) and width + 1 more.
    assert widths == [1] * 2 + [2] * 5 + [4] * 7 + [8] * 11 + [4]
    clock.now += 1.0
    listing._observe(1000)
    assert listing.width == 4  # settled: no more changes


def test_a_gain_under_a_quarter_does_not_widen() -> None:
    for gain, settled_at in ((1.2, 1), (1.3, 16)):
        listing, clock = fresh()
        feed(listing, clock, lambda width, gain=gain: 1.0 / gain ** (width.bit_length() - 1))
        assert listing._settled and listing.width == settled_at, gain


def test_the_rates_never_go_past_parallel() -> None:
    listing, clock = fresh(parallel=6)
    widths = feed(listing, clock, lambda width: 1.0 / width)
    assert max(widths) == 6 and listing.width == 6 and listing._settled


# -- pipelining: the next request goes out before this page is parsed --------------------------


class Pipelining:
    """A listing's order of operations: each request as it goes out, each page
    as it is parsed, each try at cutting a key range (``keyspace.cut_points``)."""

    def __init__(self, lister: TimedLister) -> None:
        self.lister = lister
        self.log: list[tuple[str, int]] = []  # ("send" | "parse" | "cut", number)

    def run(self, parallel: int) -> None:
        log, lister = self.log, self.lister
        answers = lister.answers

        class Sent(list[tuple[str, str | None, str | None]]):
            def append(self, request: tuple[str, str | None, str | None]) -> None:
                log.append(("send", len(self)))
                super().append(request)

        parse_page, cut_points = listing_module.parse_page, keyspace.cut_points

        def parse(body: bytes) -> Any:
            log.append(("parse", next(i for i, a in enumerate(answers) if a is body)))
            return parse_page(body)

        def cut(*args: Any) -> list[str]:
            log.append(("cut", len(log)))
            return cut_points(*args)

        lister.sent = Sent()
        listing_module.parse_page, keyspace.cut_points = parse, cut
        try:
            list_flat(lister, parallel)
        finally:
            listing_module.parse_page, keyspace.cut_points = parse_page, cut_points

    def continued(self) -> dict[int, int]:
        """The requests that continued a page - the same prefix and delimiter,
        from the page's last entry - by the page's request."""
        sent, follows = self.lister.sent, {}
        for i, body in enumerate(self.lister.answers):
            marker = next_token(body)
            if marker is None:
                continue
            prefix, delimiter, _ = sent[i]
            later = (j for j in range(i + 1, len(sent)) if sent[j] == (prefix, delimiter, marker))
            j = next(later, None)
            if j is not None:
                follows[i] = j
        return follows

    def late(self) -> tuple[list[int], list[int]]:
        """The requests that went out after the parse of the page they continue:
        those with a try at a cut in between, and the others."""
        at = {event: n for n, event in enumerate(self.log)}
        for_cut, others = [], []
        for i, j in self.continued().items():
            parsed, sent = at.get(("parse", i)), at[("send", j)]
            if parsed is None or sent < parsed:
                continue
            if any(kind == "cut" for kind, _ in self.log[parsed:sent]):
                for_cut.append(j)
            else:
                others.append(j)
        return for_cut, others


def test_each_next_page_is_sent_before_this_one_is_parsed() -> None:
    # One listing by continuation token (Lister.pages), directories listed by
    # key ranges at once, many small directories (pages of common prefixes by
    # token, runs of directories), and a flat space (key ranges): every request
    # that continues a page goes out before the page is parsed, but where a
    # key range waits to be cut - the flat space's first range, after the plan
    # checked the server, and the two cuts as its width went to 2; the last of
    # the small directories, cut with a worker idle.
    cases = [
        (TimedLister(5_000, serial=False), 1, 4, 0),
        (
            TimedLister([f"{d}/obj-{i:05d}" for d in "ab" for i in range(3_000)], serial=True),
            2,
            4,
            0,
        ),
        (
            TimedLister(
                [f"d{d:03d}/k{i:02d}" for d in range(60) for i in range(25)],
                serial=True,
                page_size=10,
            ),
            2,
            100,
            1,
        ),
        (TimedLister(20_000, serial=True), 16, 15, 3),
    ]
    for lister, parallel, continued, cut in cases:
        order = Pipelining(lister)
        order.run(parallel)
        for_cut, others = order.late()
        assert len(order.continued()) >= continued and others == [], parallel
        assert len(for_cut) <= cut, parallel
