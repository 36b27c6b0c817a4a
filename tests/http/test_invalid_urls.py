"""A URL's syntax decides ``invalid_url`` before any lookup: no input that is
not an http(s) URL by curl's rules costs a DNS query.  ``htp:/bad url`` has
the scheme "htp" (curl: a name and ":/" make a scheme), never the host "htp";
``http//x.test/`` - a scheme without its colon, made ``http://http//...``
by the http:// every bare input gets - names no host either.

Judged by the queries a DNS server of surge.sim counted (``--dns-servers``):
none for the bad inputs, some for a good one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from surge.errors import RequestError
from surge.http import Client
from surge.sim.dns import DNSServer, Entry, Zone, running

BAD = [
    "htp:/bad url",
    "htp:/bad",
    "htp://x.test/",
    "ftp://x.test/",
    "http//x.test/",
    "https//x.test/",
    "http//x.test",
    "http:x.test",
    "http:\\\\x.test\\p",
    "ht!p://x.test/",
    "x y.test",
    "http://a b.test/",
    "://x.test",
    "http://x.test:99999/",
    "http://[::1/",
    "http://x..test/",
    "http:///",
    # escapes in a host that are not UTF-8 (were a UnicodeDecodeError traceback)
    "%bad",
    "http://%ff.test/",
    "http://x%c3.test/",
]


@pytest.fixture(scope="module")
def dns() -> Iterator[DNSServer]:
    with running(Zone(default=Entry(failure="nxdomain"))) as server:
        yield server


def _fetch(lines: list[str], dns: DNSServer, tmp: Path) -> list[dict[str, object]]:
    inputs = tmp / "inputs.txt"
    inputs.write_text("\n".join(lines) + "\n")
    command = [sys.executable, "-m", "surge.cli", "fetch", str(inputs)]
    command += ["--dns-servers", dns.server_spec, "--max-time", "5"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_bad_inputs_are_invalid_url_with_no_lookup(dns: DNSServer, tmp_path: Path) -> None:
    before = sum(dns.queries.values())
    records = _fetch(BAD, dns, tmp_path)
    assert sorted(str(r["input"]) for r in records) == sorted(line.strip() for line in BAD)
    wrong = {r["input"]: r["error"] for r in records if r["error"] != "invalid_url"}
    assert wrong == {}
    assert sum(dns.queries.values()) == before  # not one query
    # The control: a good name is looked up (the count works).
    (record,) = _fetch(["http://good.test/"], dns, tmp_path)
    assert record["error"] == "dns_error"
    assert dns.count("good.test") > 0


@pytest.mark.parametrize(
    "url",
    [
        "htp:/bad url",
        "http://http//x.test/",
        "https://https//x.test/",
        "http://http//x.test",
        "http:\\\\x.test\\p",
    ],
)
def test_the_client_says_invalid_url_before_any_lookup(dns: DNSServer, url: str) -> None:
    before = sum(dns.queries.values())
    with (
        Client(dns_servers=dns.server_spec, max_time=5) as client,
        pytest.raises(RequestError) as caught,
    ):
        client.get(url)
    assert caught.value.error_class == "invalid_url"
    assert sum(dns.queries.values()) == before
