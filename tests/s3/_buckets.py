"""The buckets the S3 tests list: their keys, and boto3's listing of them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from surge.s3 import Credentials

#: Keys that need percent-encoding in a URL or entities in XML, or are not ASCII.
AWKWARD_KEYS = [
    "plain.txt",
    "with space.txt",
    "plus+sign",
    "percent%20literal",
    "amp&ersand",
    "less<than>greater",
    "quote\"apostrophe'",
    "question?mark",
    "hash#tag",
    "tilde~dash-under_score",
    "equals=comma,semicolon;",
    "brackets[]{}()",
    "dollar$at@bang!star*",
    "ünïcödé/ümlaut.txt",
    "日本語/ファイル.txt",
    "emoji/😀.png",
    "dir with space/nested dir/file",
    "a/b/c/d/e/deep",
    "tab\there",
    "caret^pipe|backtick`",
]


def nested_keys() -> list[str]:
    """Top-level objects and three levels of prefixes: 4 x 5 x 40 objects."""
    keys = [f"top-{i}.txt" for i in range(7)]
    for a in range(4):
        for b in range(5):
            keys += [f"dir{a}/sub{b}/obj-{i:03d}.bin" for i in range(40)]
        keys.append(f"dir{a}/readme.md")
    return keys


def flat_keys() -> list[str]:
    return [f"part-{i:05d}.parquet" for i in range(1500)]


def random_keys() -> list[str]:
    """Keys of uneven length and density, as hashes and user names make them."""
    rng = random.Random(5)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-_"
    return sorted({"".join(rng.choices(alphabet, k=rng.randint(1, 14))) for _ in range(900)})


BUCKETS = {
    "nested": nested_keys,
    "flat": flat_keys,
    "random": random_keys,
    "awkward": lambda: AWKWARD_KEYS,
    "prefixed-flat": lambda: [f"data/{k}" for k in flat_keys()[:700]] + ["zzz-last"],
    "empty": lambda: [],
}


@dataclass
class Buckets:
    endpoint_url: str
    credentials: Credentials
    s3: Any

    def boto3_keys(self, bucket: str, prefix: str = "") -> list[str]:
        keys = []
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys

    def options(self, **kwargs: Any) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "credentials": self.credentials, **kwargs}
