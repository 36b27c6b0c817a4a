"""Every coding layer of a body - Transfer-Encoding's, Content-Encoding's, one
inside the other - goes through one decoding path (decoding.py's ``layers``)
held to one cap in every layer, wherever the body goes; and ``bytes`` is the
size on the wire, before any decoding, wherever it is counted.

A table of hostile responses (tests/http/raw_server.py) against every way a
body is read: whole (``Client.get``), streamed (``iter_raw``, ``iter_bytes``,
``read``), and ``surge fetch`` plain, with ``-i``, ``--output-dir`` and
``--warc``.  curl is the reference for ``bytes`` (its ``size_download``).
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.http.raw_server import RawServer, chunked

from surge.errors import RequestError
from surge.http import Client

CAP = 1 << 20


def gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(b"\0" * size) + packer.flush()


def empty_deflate_blocks(count: int) -> bytes:
    """A zlib stream of ``count`` empty stored blocks: 5 bytes each that decode
    to nothing (a layer that grows while the one outside it does not)."""
    blocks = b"\x00\x00\x00\xff\xff" * count + b"\x01\x00\x00\xff\xff"
    return b"\x78\x01" + blocks + b"\x00\x00\x00\x01"


BOMB = gzip_of_zeros(64 << 20)  # 64 MiB decoded, ~64 KiB on the wire
#: gzip around 64 MiB of empty deflate blocks: the outer layer is the bomb, the
#: body it makes decodes to nothing.
HOLLOW = gzip.compress(empty_deflate_blocks((64 << 20) // 5), 9)
TEXT = b"hello, layered world\n" * 50
GZ_TEXT = gzip.compress(TEXT)


def case(codings: str, payload: bytes, decoded: bytes | None) -> tuple[bytes, bytes | None, int]:
    """(the response, what it decodes to - None: a bomb -, its size on the
    wire): ``payload`` sent with the header lines ``codings``, chunked if a
    Transfer-Encoding ends in chunked, else to the close, or with its length."""
    if "chunked" in codings:
        body = chunked(payload, 1 << 16)
    elif "Transfer-Encoding" in codings:
        codings, body = codings + "\r\nConnection: close", payload
    else:
        codings, body = f"{codings}\r\nContent-Length: {len(payload)}", payload
    return b"HTTP/1.1 200 OK\r\n%s\r\n\r\n%s" % (codings.encode(), body), decoded, len(payload)


CE_GZIP, TE_GZIP = "Content-Encoding: gzip", "Transfer-Encoding: gzip, chunked"
CASES: dict[str, tuple[bytes, bytes | None, int]] = {
    "ce-bomb": case(CE_GZIP + "\r\nTransfer-Encoding: chunked", BOMB, None),
    "te-bomb": case(TE_GZIP, BOMB, None),
    "te-bomb-close": case("Transfer-Encoding: gzip", BOMB, None),
    "te-over-ce-bomb": case(f"{CE_GZIP}\r\n{TE_GZIP}", gzip.compress(BOMB), None),
    "hollow-ce": case("Content-Encoding: deflate, gzip", HOLLOW, None),
    "hollow-te": case(f"Content-Encoding: deflate\r\n{TE_GZIP}", HOLLOW, None),
    "te-gzip": case("Transfer-Encoding: gzip", GZ_TEXT, TEXT),
    "te-gzip-chunked": case(TE_GZIP, GZ_TEXT, TEXT),
    "ce-gzip": case(CE_GZIP, GZ_TEXT, TEXT),
    "te-ce-gzip": case(f"{CE_GZIP}\r\n{TE_GZIP}", gzip.compress(GZ_TEXT), TEXT),
}
BOMBS = [name for name, (_, body, _) in CASES.items() if body is None]
BODIES = [name for name, (_, body, _) in CASES.items() if body is not None]
#: The bombs whose transfer layer is the one that inflates (iter_raw undoes it).
TRANSFER_BOMBS = {"te-bomb", "te-bomb-close", "hollow-te"}


@pytest.fixture(scope="module")
def raw() -> Iterator[RawServer]:
    answers = {name: answer for name, (answer, _, _) in CASES.items()}
    # a redirect hop with a transfer coding (--warc keeps each hop's exchange)
    answers["hop"] = b"HTTP/1.1 302 Found\r\nLocation: /te-gzip\r\n%s\r\n\r\n%s" % (
        TE_GZIP.encode(),
        chunked(gzip.compress(b"moved"), 10),
    )
    answers["bomb-hop"] = b"HTTP/1.1 302 Found\r\nLocation: /te-gzip\r\n%s\r\n\r\n%s" % (
        TE_GZIP.encode(),
        chunked(BOMB, 1 << 16),
    )
    server = RawServer(answers)
    try:
        yield server
    finally:
        server.close()


def read_whole(client: Client, url: str) -> bytes:
    return client.get(url).content


def read_bytes(client: Client, url: str) -> bytes:
    with client.stream("GET", url) as response:
        return b"".join(response.iter_bytes())


def read_raw(client: Client, url: str) -> bytes:
    with client.stream("GET", url) as response:
        return b"".join(response.iter_raw())


def read_read(client: Client, url: str) -> bytes:
    with client.stream("GET", url) as response:
        return response.read()


READS: dict[str, Callable[[Client, str], bytes]] = {
    "get": read_whole,
    "iter_bytes": read_bytes,
    "iter_raw": read_raw,
    "read": read_read,
}


@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("name", BOMBS)
def test_a_bomb_in_any_layer_stops_at_the_cap(raw: RawServer, name: str, how: str) -> None:
    """Whole or streamed, the first byte past the cap in any layer is
    ``body_too_large`` - except iter_raw() of a Content-Encoding bomb, which
    hands over the wire's bytes as they came (a few KiB)."""
    with Client(body_cap=CAP) as client:
        if how == "iter_raw" and name not in TRANSFER_BOMBS:
            assert len(READS[how](client, raw.url(name))) < CAP
            return
        with pytest.raises(RequestError) as failed:
            READS[how](client, raw.url(name))
    assert failed.value.error_class == "body_too_large"


@pytest.mark.parametrize("how", ["get", "iter_bytes", "read", "iter_raw"])
@pytest.mark.parametrize("name", BODIES)
def test_a_body_is_decoded_in_every_layer_and_counted_on_the_wire(
    raw: RawServer, name: str, how: str
) -> None:
    """Each read gives the body with every layer undone (iter_raw: the
    transfer layer only), and the response's ``bytes`` is the size on the wire."""
    _, text, wire = CASES[name]
    assert text is not None
    with Client() as client:
        if how == "get":
            response = client.get(raw.url(name))
            body = response.content
        else:
            with client.stream("GET", raw.url(name)) as response:
                body = (
                    b"".join(response.iter_bytes())
                    if how == "iter_bytes"
                    else b"".join(response.iter_raw())
                    if how == "iter_raw"
                    else response.read()
                )
    if how == "iter_raw" and name.startswith(("ce-", "te-ce-")):
        body = gzip.decompress(body)  # the Content-Encoding stays on
    assert (body, response.bytes) == (text, wire)


def fetch(urls: list[str], *args: str) -> dict[str, dict[str, Any]]:
    """``surge fetch`` of ``urls`` (one at a time) with ``args``: its records by URL."""
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", "-", "-q", "-c", "1", *args],
        input="".join(url + "\n" for url in urls).encode(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {r["url"]: r for r in map(json.loads, done.stdout.decode().splitlines())}


def curl_size(url: str) -> int:
    if shutil.which("curl") is None:
        pytest.fail("curl is needed as the reference client")
    done = subprocess.run(
        ["curl", "-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{size_download}", url],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return int(done.stdout)


@pytest.mark.parametrize("keep", ["", "-i", "--output-dir", "--warc", "--output-dir+--warc"])
def test_the_records_bytes_is_the_size_on_the_wire_whatever_is_kept(
    raw: RawServer, tmp_path: Path, keep: str
) -> None:
    """DESIGN.md: ``bytes`` is the size on the wire, before decoding (curl's
    size_download), for every body and every option that keeps bodies."""
    args: list[str] = []
    if keep == "-i":
        args = ["-i"]
    if "--output-dir" in keep:
        args += ["--output-dir", str(tmp_path / "bodies")]
    if "--warc" in keep:
        args += ["--warc", str(tmp_path / "out.warc.gz")]
    got = fetch([raw.url(name) for name in BODIES], *args)
    for name in BODIES:
        record = got[raw.url(name)]
        assert record["error"] is None, (name, record["error_detail"])
        assert record["bytes"] == CASES[name][2] == curl_size(raw.url(name)), name


@pytest.mark.parametrize("keep", ["--output-dir", "--warc", "--warc -L"])
def test_a_transfer_coded_bomb_kept_is_body_too_large_and_counts_its_wire_bytes(
    raw: RawServer, tmp_path: Path, keep: str
) -> None:
    """Where a body is kept, the transfer layer is undone (a WARC keeps the
    entity body) under --max-filesize, a redirect hop's as the final one's;
    the record's bytes are what the wire carried, not what was decoded."""
    args = [f"--max-filesize={CAP}"]
    if keep == "--output-dir":
        args += ["--output-dir", str(tmp_path / "bodies")]
    else:
        args += ["--warc", str(tmp_path / "out.warc.gz"), *keep.split()[1:]]
    url = raw.url("bomb-hop" if "-L" in keep else "te-bomb")
    record = fetch([url], *args)[url]
    assert record["error"] == "body_too_large", record["error_detail"]
    assert 0 < record["bytes"] <= CAP  # on the wire: a few KiB of the bomb's


def test_a_warc_stores_the_entity_body_with_its_transfer_codings_undone(
    raw: RawServer, tmp_path: Path
) -> None:
    """WARC 1.1's payload is the entity body: every transfer coding undone (not
    chunked alone), so the stored head must not announce one - else a reader
    would undo it again - and says the stored length."""
    warcio = pytest.importorskip("warcio.archiveiterator")
    warc = tmp_path / "out.warc.gz"
    names = ["te-gzip-chunked", "te-ce-gzip", "hop"]  # hop: a 302 to te-gzip
    fetch([raw.url(name) for name in names], "-L", "--warc", str(warc))
    stored = {}
    with warc.open("rb") as stream:
        for record in warcio.ArchiveIterator(stream):
            if record.rec_type == "response":
                http = record.http_headers
                assert http.get_header("Transfer-Encoding") is None
                payload = record.raw_stream.read()
                assert http.get_header("Content-Length") == str(len(payload))
                stored[record.rec_headers.get_header("WARC-Target-URI")] = payload
    assert stored[raw.url("hop")] == b"moved"  # the hop's, as the final one's
    assert stored[raw.url("te-gzip")] == TEXT
    assert stored[raw.url("te-gzip-chunked")] == TEXT
    assert stored[raw.url("te-ce-gzip")] == GZ_TEXT  # its Content-Encoding kept
