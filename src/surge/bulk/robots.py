"""``--robots obey``: each origin's robots.txt, fetched once for the run and
parsed with Protego (Scrapy's parser, which follows RFC 9309), decides which of
its inputs are sent.

- Fetched once per origin (scheme, host, port of the input URL), when its first
  input comes; inputs of the origin that come meanwhile wait for that fetch, not
  for one of their own.  The answer is kept for the run, within a bound: the
  :data:`MOST_KEPT` origins, and :data:`MOST_KEPT_BYTES` of their robots.txt,
  most recently used (a crawl of a million hosts keeps no million parsers); an
  origin forgotten and asked for again is fetched again.
- Matched with the run's User-Agent (``-A``, an ``-H 'User-Agent: ...'``, or
  ``surge/VERSION``): the group whose product token it holds, else ``*``.
- A disallowed input is a record with the error class ``robots_disallowed``,
  sent nothing.  The robots.txt request is no record of its own.
- Its ``Crawl-delay`` spaces that host's requests (surge.bulk.pacing) at least
  that far apart, from the robots.txt request on: given to the pacer again
  with each input of the origin, as the pacer forgets hosts it has not heard
  of for a while.

What the answer is, by RFC 9309 section 2.3.1:

- 2xx: the rules of its body; only the first :data:`MAX_BYTES` (500 KiB, the
  least a crawler must parse) are read, and a line cut there is dropped.
- 3xx: followed by the client's one redirect policy (surge.http.redirects:
  the run's credentials - ``-H Authorization``, ``-u``, a Cookie - never go to
  another origin), to any origin, up to :data:`MOST_HOPS` (five: RFC 9309's
  least, and Google's), or the run's ``--max-redirs`` if lower; past that (a
  loop), or without a Location, it is unavailable: everything allowed.
- 4xx ("unavailable"): everything allowed - except 429, which, as Google
  reads it, says the server is overloaded: as 5xx.
- 5xx, 429, or unreachable (no answer: a DNS error, refused, a timeout - a
  robots.txt still arriving at ``max_time`` included - a reset): everything
  disallowed for the run (the RFC's "complete disallow"; it allows a crawler
  to stop assuming so after 30 days, longer than a run).
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from surge.bulk.pacing import RUN
from surge.errors import RequestError

if TYPE_CHECKING:
    from protego import Protego

    from surge.bulk.hostbudget import Origin
    from surge.bulk.pacing import HostPacer
    from surge.http.client import AsyncClient

#: The most of a robots.txt body parsed (RFC 9309 2.5: at least 500 KiB).
MAX_BYTES: Final = 500 * 1024
#: The most redirects a robots.txt request follows (RFC 9309 2.3.1.2: at
#: least five; Google follows five): a longer chain is unavailable, allow all.
MOST_HOPS: Final = 5
#: The most origins whose rules are kept at once, and the most of their
#: robots.txt bodies (what their parsers hold) kept in all: past either, the
#: least recently used are forgotten.
MOST_KEPT: Final = 10_000
MOST_KEPT_BYTES: Final = 64 * 1024 * 1024
#: The statuses of a robots.txt that leave everything allowed (4xx but 429).
_UNAVAILABLE: Final = frozenset(range(400, 500)) - {429}


@dataclass(frozen=True, slots=True)
class Rules:
    """What one origin's robots.txt says: ``parser`` (None: no rules), or, when
    ``disallow_all``, nothing may be fetched, for the reason ``why``;
    ``delay``: its Crawl-delay for the run's agent, seconds (0: none);
    ``size``: the bytes of robots.txt it was parsed from."""

    parser: Protego | None = None
    disallow_all: bool = False
    why: str = ""
    delay: float = 0.0
    size: int = 0

    def refusal(self, url: str, agent: str) -> str | None:
        """None if ``url`` may be fetched, else the record's ``error_detail``."""
        if self.disallow_all:
            return f"not sent: {self.why}, which disallows every URL (RFC 9309)"
        if self.parser is not None and not self.parser.can_fetch(url, agent):
            return "not sent: its origin's robots.txt disallows it"
        return None


class RobotsRules:
    """Each origin's :class:`Rules`, fetched when first asked for and kept."""

    def __init__(
        self,
        agent: str,
        pacer: HostPacer,
        run_pacer: HostPacer | None,
        longest_delay: float = math.inf,
    ) -> None:
        from protego import Protego  # --robots obey only

        self._protego = Protego
        self.agent = agent
        #: A Crawl-delay is the network's number: kept to this (the run's
        #: --max-time, as a Retry-After is), so that no robots.txt holds a host
        #: for a day.
        self.longest_delay = longest_delay
        self.pacer = pacer
        self.run_pacer = run_pacer
        #: most recently used last; a fetch in flight is its waiters' future
        self._kept: OrderedDict[Origin, Rules | asyncio.Future[Rules | None]] = OrderedDict()
        self._kept_bytes = 0  # the sizes of the Rules in _kept
        self.most_kept = MOST_KEPT
        self.most_kept_bytes = MOST_KEPT_BYTES
        self.fetched = 0  # robots.txt requests made (an origin forgotten: again)

    async def refusal(self, client: AsyncClient, origin: Origin, url: str) -> str | None:
        """None if ``url`` (of ``origin``) may be fetched, else why not."""
        while True:
            kept = self._kept.get(origin)
            if isinstance(kept, Rules):
                self._kept.move_to_end(origin)
                if kept.delay:
                    self.pacer.space(origin[1], kept.delay)  # again: the pacer may forget
                return kept.refusal(url, self.agent)
            if kept is not None:
                # shielded: a waiter stopped (its run closing) must not cancel
                # the answer the others wait for
                rules = await asyncio.shield(kept)
                if rules is not None:
                    return rules.refusal(url, self.agent)
                continue  # its fetcher was stopped: ask again
            waiting: asyncio.Future[Rules | None] = asyncio.get_running_loop().create_future()
            self._kept[origin] = waiting
            try:
                rules = await self._fetch(client, origin)
            except BaseException:
                del self._kept[origin]
                if not waiting.done():
                    waiting.set_result(None)  # those waiting try again (or are stopped too)
                raise
            self._keep(origin, rules)
            if not waiting.done():
                waiting.set_result(rules)
            return rules.refusal(url, self.agent)

    def _keep(self, origin: Origin, rules: Rules) -> None:
        """``rules`` kept as the most recent; the least recent forgotten past
        the bounds (a fetch in flight is never: its waiters hold it)."""
        kept = self._kept
        kept[origin] = rules
        kept.move_to_end(origin)
        self._kept_bytes += rules.size
        # From the least recent end; a fetch in flight (bounded by the run's
        # concurrency) goes to the other end instead, so each look is O(1).
        looks = len(kept)
        while looks and (len(kept) > self.most_kept or self._kept_bytes > self.most_kept_bytes):
            looks -= 1
            old, value = kept.popitem(last=False)
            if old == origin or not isinstance(value, Rules):
                kept[old] = value
            else:
                self._kept_bytes -= value.size

    async def _fetch(self, client: AsyncClient, origin: Origin) -> Rules:
        scheme, host, port = origin
        shown = f"[{host}]" if ":" in host else host
        url = f"{scheme}://{shown}:{port}/robots.txt"
        name = f"the robots.txt of {scheme}://{shown}:{port}"
        self.fetched += 1
        await self.pacer.wait(host)
        if self.run_pacer is not None:
            await self.run_pacer.wait(RUN)
        try:
            status, body = await _get(client, url)
        except RequestError as e:
            if e.error_class == "too_many_redirects":
                return Rules()  # a loop: unavailable, all allowed
            return Rules(disallow_all=True, why=f"{name} is unreachable ({e.error_class})")
        if 200 <= status < 300:
            parser = self._protego.parse(body)
            delay = parser.crawl_delay(self.agent)
            delay = min(delay, self.longest_delay) if delay is not None and delay > 0 else 0.0
            rules = Rules(parser, delay=delay, size=len(body))
            if rules.delay:
                self.pacer.space(host, rules.delay)
                self.pacer.hold(host, rules.delay)  # from the robots.txt request on
            return rules
        if status >= 500 or status == 429:
            return Rules(disallow_all=True, why=f"{name} answered {status}")
        return Rules()  # 4xx, a 3xx without a Location: unavailable, all allowed

    def __len__(self) -> int:
        return len(self._kept)


async def _get(client: AsyncClient, url: str) -> tuple[int, str]:
    """The status, after redirects, and the first :data:`MAX_BYTES` of the body,
    decoded (a line cut at the limit dropped)."""
    kept: list[bytes] = []
    size = 0
    cut = False
    async with client.stream(
        "GET", url, follow_redirects=True, _max_redirects=MOST_HOPS
    ) as response:
        status = response.status
        if 200 <= status < 300:
            try:
                async for chunk in response.aiter_bytes():
                    kept.append(chunk)
                    size += len(chunk)
                    if size >= MAX_BYTES:
                        cut = True
                        break
            except RequestError as e:
                if e.error_class != "body_too_large":  # over --max-filesize: what came
                    raise
                cut = True
    body = b"".join(kept)
    if cut:
        body = body[:MAX_BYTES]
        body = body[: body.rfind(b"\n") + 1]
    # utf-8-sig: a leading BOM is not part of the first rule (Google's parser,
    # which RFC 9309 follows, skips it)
    return status, body.decode("utf-8-sig", errors="replace")
