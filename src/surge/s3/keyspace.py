"""Cut points in a flat key space, estimated from one page of keys.

S3 lists keys in UTF-8 byte order (the same order as Python compares ``str``:
code point order) and lets a listing start after any string (``StartAfter``),
so a key range ``(after, end]`` can be listed on its own and disjoint ranges
that meet at their ends cover the key space exactly. Where to cut is a guess -
ClickHouse's #65572 estimates key density from the first page and interpolates
- and a wrong guess costs time, never correctness: the lister only needs the
cut points sorted and inside the range, which :func:`cut_points` guarantees.

The estimate reads keys as numbers in a mixed radix learnt from the page:
the "digits" are the positions from where the page's keys start to differ (and
the constant positions just before it whose characters belong to the same
alphabet: the ``000`` of ``part-000123``), each with the characters seen there
on the page. Numbered keys (``part-000000`` ... ``part-000999``) then count in
base ten, so the page's first and last keys give keys per unit, and the
distance from a range's start to its end gives the keys left in it.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Sequence

#: Positions of a key read as digits past the first that differs on the page
#: (more only adds resolution nobody needs: a cut point is a guess anyway).
MAX_DIGITS = 8

_DIGITS = "0123456789"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_CLASSES = [
    set(chars)
    for chars in (
        _DIGITS,
        _DIGITS + "abcdef",
        _DIGITS + "ABCDEF",
        _LOWER,
        _LOWER.upper(),
        _DIGITS + _LOWER,
        _DIGITS + _LOWER + _LOWER.upper(),
        "".join(map(chr, range(0x20, 0x7F))),
    )
]


class _Scale:
    """Strings <-> numbers, in the radix a page of sorted keys suggests."""

    def __init__(self, sample: Sequence[str]) -> None:
        first, last = sample[0], sample[-1]
        # ~100 keys tell the alphabet as well as 1,000 do, at a tenth of the cost
        # (this runs for every page of a range, to size its next request)
        sample = sample[:: max(1, len(sample) // 100)]
        # character by character, which is what is wanted here (not path components)
        differ = len(os.path.commonprefix([first, last]))  # noqa: RUF071
        positions = range(differ, differ + MAX_DIGITS)
        seen = [sorted({k[p] for k in sample if p < len(k)}) for p in positions]
        ends = [any(len(k) <= p for k in sample) for p in positions]
        # Digits count in the alphabet of the characters that vary on the page,
        # widened to the smallest common class holding them (a page of UUIDs
        # starting 00-02 still counts in hex; numbered keys count in ten).
        varying = set().union(*(a for a in seen if len(a) > 1)) or set(seen[0])
        alphabet = sorted(varying)
        for chars in _CLASSES:
            if varying <= chars:
                alphabet = sorted(chars)
                break
        classed = set(alphabet)
        # Constant positions just before the first difference, in that alphabet,
        # are digits too: they are what changes over the next pages.
        start = differ
        while start > 0 and first[start - 1] in classed:
            start -= 1
        self.fixed = first[:start]
        used = [
            (alphabet if set(a) <= classed else a, e) for a, e in zip(seen, ends, strict=True) if a
        ]
        self.alphabets = [alphabet] * (differ - start) + [a for a, _ in used]
        self.ends = [False] * (differ - start) + [e for _, e in used]
        self.bases = [len(a) + e for a, e in zip(self.alphabets, self.ends, strict=True)]
        self.top = 1
        for base in self.bases:
            self.top *= base
        self.top -= 1

    def value(self, key: str) -> int:
        start = len(self.fixed)
        head = key[:start]
        if head != self.fixed:
            return 0 if head < self.fixed else self.top
        v = 0
        for i, (alphabet, end, base) in enumerate(
            zip(self.alphabets, self.ends, self.bases, strict=True)
        ):
            p = start + i
            # a character not seen here counts as the greatest one below it
            digit = max(0, bisect_right(alphabet, key[p]) - 1 + end) if p < len(key) else 0
            v = v * base + digit
        return v

    def text(self, value: int) -> str:
        digits = []
        for base in reversed(self.bases):
            value, digit = divmod(value, base)
            digits.append(digit)
        chars = []
        for digit, alphabet, end in zip(reversed(digits), self.alphabets, self.ends, strict=True):
            if end and digit == 0:
                break
            chars.append(alphabet[digit - end])
        return self.fixed + "".join(chars)


def _scale(sample: Sequence[str]) -> _Scale | None:
    if len(sample) < 2 or sample[0] >= sample[-1]:
        return None
    return _Scale(sample)


def estimate(sample: Sequence[str], after: str, end: str) -> float | None:
    """Keys expected in ``(after, end]`` at the density of ``sample`` (sorted keys)."""
    scale = _scale(sample)
    if scale is None:
        return None
    span = scale.value(sample[-1]) - scale.value(sample[0])
    if span <= 0:
        return None
    width = scale.value(end) - scale.value(after)
    return max(0.0, width * (len(sample) - 1) / span)


def cut_points(
    sample: Sequence[str], after: str, end: str | None, count: int, keys_each: int
) -> list[str]:
    """Up to ``count`` strings strictly between ``after`` and ``end`` (or beyond
    ``after`` when ``end`` is None), sorted, each expected ``keys_each`` keys
    from the last. ``sample`` is a page of sorted keys.

    Returns fewer (or none) when the range left is too small to be worth a
    listing of its own, or the sample says nothing about density.
    """
    if count < 1 or keys_each < 1:
        return []
    scale = _scale(sample)
    if scale is None:
        return []
    first = scale.value(sample[0])
    last = scale.value(sample[-1])
    step = (last - first) * keys_each // (len(sample) - 1)
    if step <= 0:
        return []
    low = scale.value(after)
    if end is None:
        values = [low + step * j for j in range(1, count + 1)]
    else:
        high = scale.value(end)
        parts = min(count + 1, (high - low) // step)
        if parts < 2:
            return []
        values = [low + (high - low) * j // parts for j in range(1, parts)]
    cuts = {scale.text(v) for v in values if v <= scale.top}
    return sorted(c for c in cuts if c > after and (end is None or c < end))
