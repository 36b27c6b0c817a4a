"""The parallel listing's bookkeeping, against a model of ListObjectsV2.

The MinIO tests (test_listing.py) show the listing exact on real buckets; here
Hypothesis throws thousands of random key sets, page sizes and worker counts at
the prefix fan-out and the key-range splitting, with pages served by a
few-line model of ListObjectsV2's semantics (the pool core's tests do the same
with a model of the pool): no key twice, none missed, whatever the estimates.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any
from urllib.parse import quote_plus
from xml.sax.saxutils import escape

from hypothesis import given, settings
from hypothesis import strategies as st

from surge.http import AsyncClient
from surge.s3.config import make_target
from surge.s3.listing import Lister, ParallelListing
from surge.s3.parse import S3Object


class ModelLister(Lister):
    """A Lister whose pages come from a sorted list in memory."""

    def __init__(self, keys: list[str], page_size: int, *, serial: bool = False) -> None:
        target = make_target("bkt", endpoint_url="http://127.0.0.1:9", no_sign_request=True)
        super().__init__(target, AsyncClient(), page_size=page_size)
        self.keys = sorted(set(keys))
        # A virtual clock, read by the fan-out to judge whether going wider pays:
        # a request takes one unit; a server that answers one request at a time
        # (serial, as moto) finishes one a unit, one that scales finishes all
        # of those in flight in that unit.
        self.serial = serial
        self.now = 0.0
        self.in_flight = 0

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
        self.in_flight += 1
        await asyncio.sleep(0)  # let other workers run, as a network wait would
        self.now += 1.0 if self.serial else 1.0 / self.in_flight
        self.in_flight -= 1
        keys, limit = self.keys, max_keys or self.page_size
        after = token if token is not None else start_after
        i = max(bisect.bisect_right(keys, after) if after else 0, bisect.bisect_left(keys, prefix))
        if token is not None and delimiter and token.endswith(delimiter):
            while i < len(keys) and keys[i].startswith(token):  # skip a listed prefix
                i += 1
        contents: list[str] = []
        prefixes: list[str] = []
        last, truncated = "", False
        while i < len(keys) and keys[i].startswith(prefix):
            if len(contents) + len(prefixes) == limit:
                truncated = True
                break
            key = keys[i]
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                common = key[: cut + len(delimiter or "")]
                prefixes.append(common)
                last = common
                while i < len(keys) and keys[i].startswith(common):
                    i += 1
                continue
            contents.append(key)
            last = key
            i += 1
        parts = ["<ListBucketResult><EncodingType>url</EncodingType>"]
        parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
        for key in contents:
            parts.append(
                f"<Contents><Key>{quote_plus(key, safe='/')}</Key>"
                "<LastModified>2026-11-22T13:04:08.123Z</LastModified>"
                "<ETag>&#34;x&#34;</ETag><Size>1</Size></Contents>"
            )
        for common in prefixes:
            parts.append(f"<CommonPrefixes><Prefix>{quote_plus(common, safe='/')}</Prefix>")
            parts.append("</CommonPrefixes>")
        if truncated:
            # opaque to the client, XML-escaped only (S3's are base64)
            parts.append(f"<NextContinuationToken>{escape(last)}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        return "".join(parts).encode()


def list_with_model(
    keys: list[str], prefix: str, page_size: int, parallel: int, *, serial: bool = False
) -> Any:
    async def run() -> tuple[list[str], ModelLister]:
        lister = ModelLister(keys, page_size, serial=serial)
        found: list[str] = []

        async def emit(objects: list[S3Object]) -> None:
            found.extend(o.key for o in objects)

        listing = ParallelListing(lister, prefix, parallel, emit)
        listing.clock = lambda: lister.now
        await listing.run()
        return found, lister

    return asyncio.run(run())


# Keys drawn from a small alphabet (with the delimiter) so that prefixes repeat,
# plus numbered and random-length keys so that flat spaces have density to guess.
segments = st.text(alphabet="ab/0z.-", min_size=1, max_size=6)
key_sets = st.one_of(
    st.lists(segments, max_size=300),
    st.lists(st.integers(0, 10**6).map(lambda n: f"k{n:07d}"), max_size=400),
    st.lists(st.text(alphabet="abcdef0123456789/", min_size=1, max_size=12), max_size=400),
    st.lists(st.text(alphabet="aü+ %/😀~\t", min_size=1, max_size=8), max_size=200),
)


@settings(max_examples=300, deadline=None)
@given(
    key_sets,
    st.sampled_from(["", "a", "a/", "k00", "0", "ü"]),
    st.integers(1, 40),
    st.sampled_from([1, 2, 4, 16]),
)
def test_every_key_once(keys: list[str], prefix: str, page_size: int, parallel: int) -> None:
    found, _ = list_with_model(keys, prefix, page_size, parallel)
    expected = sorted(k for k in set(keys) if k.startswith(prefix))
    assert len(found) == len(set(found)), "a key listed twice"
    assert sorted(found) == expected
    if parallel == 1:
        assert found == expected  # sequential: in key order


def test_a_big_flat_space_is_split_and_read_about_once() -> None:
    keys = [f"part-{i:06d}.parquet" for i in range(30_000)]
    found, lister = list_with_model(keys, "", 1000, 16)
    assert sorted(found) == keys
    stats = lister.stats
    assert stats.ranges > 10  # listed by many ranges at once
    assert stats.wasted_keys < len(keys) * 0.05  # read past a range's end: under 5%
    assert stats.requests < 30 * 1.5 + 20  # about one request a page


def test_on_a_server_that_answers_one_request_at_a_time_the_fan_out_stays_narrow() -> None:
    keys = [f"part-{i:06d}.parquet" for i in range(30_000)]
    found, lister = list_with_model(keys, "", 1000, 16, serial=True)
    assert sorted(found) == keys
    # 30 pages sequentially; the probe's page and a range or two more, no more
    assert lister.stats.requests <= 30 * 1.1


def test_prefixes_are_fanned_out_without_waste() -> None:
    keys = [f"p{p:02d}/obj-{i:04d}" for p in range(40) for i in range(250)]
    found, lister = list_with_model(keys, "", 1000, 16)
    assert sorted(found) == keys
    # a page each, the delimiter page, and the first plain page that checks it
    assert lister.stats.wasted_keys == 0 and lister.stats.requests == 42


def test_many_small_directories_are_listed_in_runs() -> None:
    keys = [f"{d:04x}/obj-{i}" for d in range(600) for i in range(3)]
    keys += [f"{d:04x}" for d in range(0, 600, 7)]  # objects of the level itself, between
    keys += ["0010/", "0020/"]  # directory markers
    found, lister = list_with_model(keys, "", 1000, 4)
    assert len(found) == len(set(found)) and sorted(found) == sorted(keys)
    assert lister.stats.groups > 4
    assert lister.stats.requests < 100  # not one a directory


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(alphabet="ab.-z", min_size=1, max_size=4), st.integers(0, 4)),
        max_size=120,
    ),
    st.integers(1, 30) | st.just(1000),
    st.sampled_from([1, 2, 4]),
)
def test_runs_of_directories_lose_and_repeat_nothing(
    layout: list[tuple[str, int]], page_size: int, parallel: int
) -> None:
    keys = []
    for name, count in layout:
        keys.append(name)  # an object beside the directories
        keys += [f"{name}/{i}" for i in range(count)]
        if count == 0:
            keys.append(f"{name}/")  # a directory marker alone
    found, _ = list_with_model(keys, "", page_size, parallel)
    assert len(found) == len(set(found))
    assert sorted(found) == sorted(set(keys))
