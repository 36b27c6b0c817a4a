"""surge.bulk.warc: WARC/1.1 records read back by warcio and FastWARC, digests,
gzip members, rotation, and resuming after a torn write."""

from __future__ import annotations

import base64
import gzip
import hashlib
import pickle
import re
import subprocess
import sys
import textwrap
import threading
import zlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require

from surge._version import __version__
from surge.bulk.warc import WarcWriter, recover, rotated_path, rotated_paths
from surge.errors import UsageError

require("warcio")
require("fastwarc")

from fastwarc.warc import ArchiveIterator as FastIterator  # noqa: E402
from fastwarc.warc import WarcRecordType  # noqa: E402
from warcio.archiveiterator import ArchiveIterator  # noqa: E402
from warcio.cli import main as warcio_cli  # noqa: E402

HTML = b"".join(
    b"<p class='row'>line %d of a page that compresses well</p>\n" % i for i in range(300)
)
BINARY = bytes((i * 7919 + (i >> 3) * 31) & 0xFF for i in range(200_000))  # > one stored block
REQUEST = b"GET /page HTTP/1.1\r\nHost: example.com\r\nUser-Agent: surge/test\r\n\r\n"


def response_head(*headers: str, status: str = "200 OK") -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n").encode()


# (url, ip, request head, request body, response head, response body)
EXCHANGES: list[tuple[str, str | None, bytes, Any, bytes, Any]] = [
    ("http://example.com/empty", "192.0.2.1", REQUEST, b"", response_head(status="204 No"), b""),
    ("http://example.com/one", "192.0.2.2", REQUEST, b"", response_head("Content-Length: 1"), b"x"),
    (
        "https://example.com/html",
        "2001:db8::1",
        REQUEST,
        b"",
        response_head("Content-Type: text/html", f"Content-Length: {len(HTML)}"),
        HTML,
    ),
    (
        "https://example.com/binary",
        "192.0.2.3",
        b"POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n",  # no blank line
        b"\x00\xff\r\n\x1f",  # binary request body
        response_head("Content-Type: application/octet-stream"),
        BINARY,
    ),
    (
        "https://example.com/gzipped",
        None,  # address unknown
        REQUEST,
        b"",
        response_head("Content-Encoding: gzip", "Content-Type: text/html"),
        gzip.compress(HTML),  # stored, not compressed again
    ),
    (
        "https://example.com/pieces",
        "192.0.2.4",
        REQUEST,
        b"",
        response_head("Content-Type: image/png"),
        [BINARY[:70_000], b"", BINARY[70_000:100_000]],  # the body as the connection's chunks
    ),
]


def joined(body: Any) -> bytes:
    return body if isinstance(body, bytes) else b"".join(body)


def write_all(path: Path, exchanges: Any = EXCHANGES, **options: Any) -> WarcWriter:
    with WarcWriter(path, info={"command-line": "surge fetch --warc out.warc.gz"}, **options) as w:
        for exchange in exchanges:
            w.write_exchange(*exchange)
    return w


def b32sha1(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def warcio_records(path: Path) -> list[dict[str, Any]]:
    """Every record, read by warcio with digests checked (a failure raises)."""
    records = []
    with open(path, "rb") as f:
        for record in ArchiveIterator(f, check_digests="raise"):
            content = record.raw_stream.read()  # the payload as stored: no decoding
            records.append(
                {
                    "type": record.rec_type,
                    "headers": dict(record.rec_headers.headers),
                    "http": record.http_headers,
                    "payload": content,
                    "digests_passed": record.digest_checker.passed,
                }
            )
    return records


def gzip_members(data: bytes) -> list[bytes]:
    members = []
    while data:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        members.append(inflater.decompress(data))
        assert inflater.eof, "a member is cut"
        data = inflater.unused_data
    return members


# -- reading back ------------------------------------------------------------------------


def engine(name: str) -> str:
    """A deflate engine the writer offers: ISA-L is the warc extra's (.ci/run installs it)."""
    if name == "isal":
        require("isal")
    return name


@pytest.mark.parametrize("deflate", ["zlib", "isal"])
@pytest.mark.parametrize("level", [1, 6, 0])
def test_warcio_reads_every_payload_byte_exact_with_digests_verified(
    tmp_path: Path, level: int, deflate: str
) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path, level=level, deflate=engine(deflate))
    records = warcio_records(path)
    assert [r["type"] for r in records] == ["warcinfo"] + ["request", "response"] * len(EXCHANGES)
    for i, (url, ip, _, request_body, _, body) in enumerate(EXCHANGES):
        request, response = records[1 + 2 * i], records[2 + 2 * i]
        assert request["payload"] == joined(request_body)
        assert response["payload"] == joined(body)
        for record in (request, response):
            assert record["headers"]["WARC-Target-URI"] == url
            assert record["headers"].get("WARC-IP-Address") == ip
            # both digests present and checked by warcio
            assert record["digests_passed"] is True
            assert "WARC-Block-Digest" in record["headers"]
            assert "WARC-Payload-Digest" in record["headers"]


def test_warcio_check_passes_and_checks_every_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path)
    with pytest.raises(SystemExit) as exited:
        warcio_cli(["check", "-v", str(path)])
    output = capsys.readouterr().out
    assert exited.value.code == 0, output
    assert output.count("digest pass") == 1 + 2 * len(EXCHANGES), output
    assert "fail" not in output


def test_warcio_check_fails_on_a_wrong_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control for the test above: the check does look at the digests."""
    path = tmp_path / "out.warc.gz"
    write_all(path, exchanges=EXCHANGES[2:3])
    members = gzip_members(path.read_bytes())
    members[2] = members[2].replace(b"compresses well", b"compresses WELL", 1)
    path.write_bytes(b"".join(gzip.compress(m) for m in members))
    with pytest.raises(SystemExit) as exited:
        warcio_cli(["check", str(path)])
    assert exited.value.code == 1
    assert "digest failed" in capsys.readouterr().out


@pytest.mark.parametrize("deflate", ["zlib", "isal"])
@pytest.mark.parametrize("level", [1, 0])
def test_fastwarc_reads_payloads_and_verifies_both_digests(
    tmp_path: Path, level: int, deflate: str
) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path, level=level, deflate=engine(deflate))
    with open(path, "rb") as f:
        blocks_ok = [r.verify_block_digest() for r in FastIterator(f, parse_http=False)]
    assert blocks_ok == [True] * (1 + 2 * len(EXCHANGES))
    payloads = []
    with open(path, "rb") as f:
        for record in FastIterator(f, parse_http=False):
            if record.record_type == WarcRecordType.warcinfo:
                assert b"software: surge/" in record.reader.read()
                continue
            record.parse_http()
            payload = record.reader.read()
            payloads.append(payload)
            assert record.headers["WARC-Payload-Digest"] == b32sha1(payload)
    with open(path, "rb") as f:
        for record in FastIterator(f, parse_http=False):
            if record.record_type != WarcRecordType.warcinfo:
                record.parse_http()
                assert record.verify_payload_digest(), record.record_id
    expected = [joined(e[i]) for e in EXCHANGES for i in (3, 5)]
    assert payloads == expected


def test_digests_are_sha1_base32_of_block_and_entity_body(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path, exchanges=EXCHANGES[3:4])
    request, response = gzip_members(path.read_bytes())[1:]
    for record, body in ((request, EXCHANGES[3][3]), (response, BINARY)):
        header, block = record.split(b"\r\n\r\n", 1)
        block = block[:-4]  # the record's closing CRLF CRLF
        fields = dict(line.split(": ", 1) for line in header.decode().split("\r\n")[1:])
        assert fields["WARC-Block-Digest"] == b32sha1(block)
        assert fields["WARC-Payload-Digest"] == b32sha1(body)
        assert int(fields["Content-Length"]) == len(block)
        assert block.endswith(body)


def test_chunked_response_is_stored_dechunked_with_common_crawl_headers(tmp_path: Path) -> None:
    """The body handed in is dechunked (llhttp), so the stored head must not say
    chunked: readers would try to dechunk it again."""
    path = tmp_path / "out.warc.gz"
    head = response_head(
        "Transfer-Encoding: chunked", "Content-Type: text/html", "Content-Length: 3"
    )
    with WarcWriter(path) as w:
        w.write_exchange("http://example.com/", "192.0.2.1", REQUEST, b"", head, HTML)
    response = warcio_records(path)[2]
    http = response["http"]
    assert http.get_header("Transfer-Encoding") is None
    assert http.get_header("X-Crawler-Transfer-Encoding") == "chunked"
    assert http.get_header("X-Crawler-Content-Length") == "3"
    assert http.get_header("Content-Length") == str(len(HTML))
    assert http.get_header("Content-Type") == "text/html"
    assert response["payload"] == HTML
    assert response["headers"]["WARC-Payload-Digest"] == b32sha1(HTML)


def test_record_headers_link_requests_responses_and_warcinfo(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path)
    records = warcio_records(path)
    info = records[0]
    assert info["headers"]["Content-Type"] == "application/warc-fields"
    assert info["headers"]["WARC-Filename"] == "out.warc.gz"
    fields = info["payload"].decode()
    assert f"software: surge/{__version__}\r\n" in fields
    assert "format: WARC File Format 1.1\r\n" in fields
    assert "command-line: surge fetch --warc out.warc.gz\r\n" in fields
    uuid = r"<urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}>"
    ids = [r["headers"]["WARC-Record-ID"] for r in records]
    assert all(re.fullmatch(uuid, i) for i in ids), ids
    assert len(set(ids)) == len(ids)
    for request, response in zip(records[1::2], records[2::2], strict=True):
        assert request["type"] == "request" and response["type"] == "response"
        assert request["headers"]["WARC-Concurrent-To"] == response["headers"]["WARC-Record-ID"]
        assert response["headers"]["WARC-Concurrent-To"] == request["headers"]["WARC-Record-ID"]
        assert request["headers"]["Content-Type"] == "application/http;msgtype=request"
        assert response["headers"]["Content-Type"] == "application/http;msgtype=response"
        for record in (request, response):
            assert record["headers"]["WARC-Warcinfo-ID"] == info["headers"]["WARC-Record-ID"]
            date = record["headers"]["WARC-Date"]
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", date), date
        assert request["headers"]["WARC-Date"] == response["headers"]["WARC-Date"]


@pytest.mark.parametrize(
    ("date", "expected"),
    [
        (datetime(2026, 11, 26, 9, 30, 1, 250, tzinfo=UTC), "2026-11-26T09:30:01.000250Z"),
        (
            datetime(2026, 11, 26, 11, 30, 1, 5, tzinfo=timezone(timedelta(hours=2))),
            "2026-11-26T09:30:01.000005Z",
        ),
        (datetime(2026, 11, 26, 9, 30, 1), "2026-11-26T09:30:01.000000Z"),  # naive: UTC
        (1795685401.5, "2026-11-26T09:30:01.500000Z"),  # POSIX seconds
    ],
)
def test_dates_are_utc_with_microseconds(tmp_path: Path, date: Any, expected: str) -> None:
    path = tmp_path / "out.warc.gz"
    with WarcWriter(path) as w:
        w.write_exchange(
            "http://example.com/", "192.0.2.1", REQUEST, b"", b"HTTP/1.1 200 OK", b"", date
        )
    records = warcio_records(path)
    assert [r["headers"]["WARC-Date"] for r in records[1:]] == [expected, expected]
    with open(path, "rb") as f:
        dates = [r.record_date for r in FastIterator(f)][1:]
    assert dates == [datetime.fromisoformat(expected.replace("Z", "+00:00"))] * 2


@pytest.mark.parametrize("deflate", ["zlib", "isal"])
def test_each_record_is_a_gzip_member_of_its_own(tmp_path: Path, deflate: str) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path, deflate=engine(deflate))
    members = gzip_members(path.read_bytes())
    assert len(members) == 1 + 2 * len(EXCHANGES)
    for member in members:
        assert member.startswith(b"WARC/1.1\r\n") and member.endswith(b"\r\n\r\n")
        assert member.count(b"WARC/1.1\r\nWARC-Type:") == 1
    # warcio's offsets point at the members: a reader can seek to any record
    with open(path, "rb") as f:
        iterator = ArchiveIterator(f)
        offsets = []
        for _ in iterator:
            offsets.append(iterator.get_record_offset())
    data = path.read_bytes()
    for offset, member in zip(offsets, members, strict=True):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert inflater.decompress(data[offset:]) == member


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com/a b/ü?q=ü&x=%41", "http://example.com/a%20b/%C3%BC?q=%C3%BC&x=%41"),
        ("http://example.com/日本語", "http://example.com/%E6%97%A5%E6%9C%AC%E8%AA%9E"),
        (
            "http://example.com/x\r\nWARC-Type: bogus",
            "http://example.com/x%0D%0AWARC-Type:%20bogus",
        ),
        ("http://example.com/plain?a=1&b=%20", "http://example.com/plain?a=1&b=%20"),
    ],
)
def test_target_uris_with_spaces_unicode_and_line_breaks_are_percent_encoded(
    tmp_path: Path, url: str, expected: str
) -> None:
    path = tmp_path / "out.warc.gz"
    with WarcWriter(path) as w:
        w.write_exchange(url, "192.0.2.1", REQUEST, b"", response_head(), b"ok")
    records = warcio_records(path)
    assert [r["headers"]["WARC-Target-URI"] for r in records[1:]] == [expected, expected]
    assert [r["type"] for r in records] == ["warcinfo", "request", "response"]
    with open(path, "rb") as f:
        uris = [r.headers.get("WARC-Target-URI") for r in FastIterator(f)][1:]
    assert uris == [expected, expected]


def first_block_types(path: Path) -> list[int]:
    """The BTYPE of each member's first deflate block: 0 stored, 1 fixed, 2 dynamic."""
    return [member[10] >> 1 & 3 for member in gzip_members_bytes(path)]


def test_compressed_bodies_and_small_records_are_stored_text_is_deflated(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    exchanges = [EXCHANGES[2], EXCHANGES[4], EXCHANGES[5]]  # text, gzip-encoded, image/png
    write_all(path, exchanges=exchanges, buffer_size=0)
    _warcinfo, *records = first_block_types(path)
    # requests (under 1 KB) stored; the text response deflated; the others stored
    assert records == [0, 2, 0, 0, 0, 0]
    sizes = [len(m) for m in gzip_members_bytes(path)]
    assert sizes[2] < len(HTML) / 2
    assert sizes[4] > len(gzip.compress(HTML))
    write_all(path, exchanges=exchanges, level=0)
    assert set(first_block_types(path)) == {0}


def test_bodies_are_not_kept_after_writing(tmp_path: Path) -> None:
    body = bytes(BINARY)  # a fresh object: its reference count is ours alone
    before = sys.getrefcount(body)
    with WarcWriter(tmp_path / "out.warc.gz") as w:
        w.write_exchange("http://example.com/", "192.0.2.1", REQUEST, b"", response_head(), body)
        assert sys.getrefcount(body) == before


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="max_size"):
        WarcWriter("unused.warc.gz", max_size=0)
    with pytest.raises(ValueError, match="field name"):
        WarcWriter("unused.warc.gz", info={"bad name": "x"})
    with pytest.raises(ValueError, match="deflate"):
        WarcWriter("unused.warc.gz", deflate="brotli")


def test_isal_deflates_by_default_when_installed(tmp_path: Path) -> None:
    require("isal")
    with WarcWriter(tmp_path / "out.warc.gz") as w:
        assert w.deflate == "isal"


def test_a_line_break_in_the_ip_is_refused(tmp_path: Path) -> None:
    with WarcWriter(tmp_path / "out.warc.gz") as w, pytest.raises(ValueError, match="ip"):
        w.write_exchange("http://x/", "1.2.3.4\r\nX: y", REQUEST, b"", response_head(), b"")


# -- buffering and concurrency -----------------------------------------------------------


def test_buffered_exchanges_reach_the_file_whole_on_flush(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    with WarcWriter(path, buffer_size=1 << 20) as w:
        w.write_exchange(*EXCHANGES[2])
        buffered = path.stat().st_size
        w.flush()
        flushed = path.read_bytes()
    assert buffered == 0
    assert len(gzip_members(flushed)) == 3


def test_unbuffered_writer_writes_each_exchange_at_once(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    with WarcWriter(path, buffer_size=0) as w:
        written = w.write_exchange(*EXCHANGES[2])
        size = path.stat().st_size
        assert len(gzip_members(path.read_bytes())) == 3
        assert written + len(gzip_members_bytes(path)[0]) == size


def gzip_members_bytes(path: Path) -> list[bytes]:
    """The members' compressed bytes."""
    data = path.read_bytes()
    out = []
    while data:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        inflater.decompress(data)
        out.append(data[: len(data) - len(inflater.unused_data)])
        data = inflater.unused_data
    return out


def test_a_failed_write_leaves_no_torn_exchange(tmp_path: Path) -> None:
    """A write that fails part-way - a real size limit (RLIMIT_FSIZE: EFBIG, as
    a full disk's ENOSPC), in a child process - is a SinkError naming the file:
    the WARC is cut back to its last whole exchange, and the writer writes
    nothing more (no exchange after a gap).  Appending goes on from there."""
    path = tmp_path / "out.warc.gz"
    exchanges = tmp_path / "exchanges.pickle"
    exchanges.write_bytes(pickle.dumps([EXCHANGES[1], EXCHANGES[2]]))
    script = textwrap.dedent(
        f"""
        import os, pickle, resource
        from surge.bulk.warc import WarcWriter
        from surge.errors import SinkError
        with open({str(exchanges)!r}, "rb") as f:
            first, second = pickle.load(f)
        w = WarcWriter({str(path)!r}, buffer_size=0)
        w.write_exchange(*first)
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize({str(path)!r}) + 100, hard))
        for exchange in (second, first):
            try:
                w.write_exchange(*exchange)
            except SinkError as e:
                print(e)
        w.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{path}: cannot write: [Errno 27] File too large"] * 2
    assert urls_in(path) == [EXCHANGES[1][0]]
    with WarcWriter(path, append=True) as w:
        w.write_exchange(*EXCHANGES[3])
    assert urls_in(path) == [EXCHANGES[1][0], EXCHANGES[3][0]]


def test_a_second_writer_on_one_warc_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    with WarcWriter(path) as first:
        first.write_exchange(*EXCHANGES[1])
        for append in (False, True):
            with pytest.raises(UsageError, match=r"given for two outputs of this run"):
                WarcWriter(path, append=append)
    assert urls_in(path) == [EXCHANGES[1][0]]


def test_threads_never_interleave_exchanges(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    threads_n, per_thread = 4, 40
    with WarcWriter(path, buffer_size=4096) as w:

        def work(t: int) -> None:
            for i in range(per_thread):
                url = f"http://t{t}.example/{i}"
                w.write_exchange(url, None, REQUEST, b"", response_head(), HTML[: 100 * i])

        threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = warcio_records(path)
    assert len(records) == 1 + 2 * threads_n * per_thread
    seen = set()
    for request, response in zip(records[1::2], records[2::2], strict=True):
        assert request["headers"]["WARC-Target-URI"] == response["headers"]["WARC-Target-URI"]
        assert request["headers"]["WARC-Concurrent-To"] == response["headers"]["WARC-Record-ID"]
        url = response["headers"]["WARC-Target-URI"]
        assert response["payload"] == HTML[: 100 * int(url.rsplit("/", 1)[1])]
        seen.add(url)
    assert len(seen) == threads_n * per_thread


# -- rotation ----------------------------------------------------------------------------


def test_rotated_names() -> None:
    assert rotated_path("d/out.warc.gz", 0) == Path("d/out.warc.gz")
    assert rotated_path("d/out.warc.gz", 1) == Path("d/out-00001.warc.gz")
    assert rotated_path("d/out.WARC.GZ", 12) == Path("d/out-00012.WARC.GZ")
    assert rotated_path("d/crawl.gz", 2) == Path("d/crawl-00002.gz")
    assert rotated_path("d/crawl", 3) == Path("d/crawl-00003")


def test_max_size_rotates_to_new_files_each_starting_with_warcinfo(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    max_size = 8_000
    exchanges = [
        (
            f"http://example.com/{i}",
            "192.0.2.1",
            REQUEST,
            b"",
            response_head(),
            BINARY[i : i + 2_500],
        )
        for i in range(12)
    ]
    w = write_all(path, exchanges=exchanges, max_size=max_size, level=0)
    files = rotated_paths(path)
    assert files == w.paths
    assert len(files) > 3
    assert [f.name for f in files[:3]] == ["out.warc.gz", "out-00001.warc.gz", "out-00002.warc.gz"]
    urls = []
    for file in files:
        assert file.stat().st_size <= max_size
        records = warcio_records(file)
        assert records[0]["type"] == "warcinfo"
        assert records[0]["headers"]["WARC-Filename"] == file.name
        info_id = records[0]["headers"]["WARC-Record-ID"]
        assert len(records) >= 3 and [r["type"] for r in records[1:]] == ["request", "response"] * (
            (len(records) - 1) // 2
        )
        for record in records[1:]:
            assert record["headers"]["WARC-Warcinfo-ID"] == info_id
        urls += [r["headers"]["WARC-Target-URI"] for r in records[2::2]]
        with pytest.raises(SystemExit) as exited:
            warcio_cli(["check", str(file)])
        assert exited.value.code == 0
    assert urls == [e[0] for e in exchanges]  # each exactly once, in order


def test_an_exchange_larger_than_max_size_gets_a_file_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    big = (*EXCHANGES[3][:5], BINARY)
    small = EXCHANGES[1]
    w = write_all(path, exchanges=[small, big, small], max_size=20_000, level=0)
    counts = [len(warcio_records(p)) for p in w.paths]
    assert counts == [3, 3, 3]
    assert w.paths[1].stat().st_size > 20_000


# -- resume ------------------------------------------------------------------------------


def member_bounds(path: Path) -> list[tuple[int, int]]:
    bounds, start = [], 0
    for member in gzip_members_bytes(path):
        bounds.append((start, start + len(member)))
        start += len(member)
    return bounds


def urls_in(path: Path) -> list[str]:
    return [
        r["headers"]["WARC-Target-URI"] for r in warcio_records(path) if r["type"] == "response"
    ]


def five(prefix: str) -> list[tuple[str, str, bytes, bytes, bytes, bytes]]:
    return [
        (f"http://example.com/{prefix}{i}", "192.0.2.1", REQUEST, b"", response_head(), HTML[i:])
        for i in range(5)
    ]


@pytest.mark.parametrize(
    "cut",
    [
        "mid-response",  # the crash hit the last member
        "after-request",  # the write stopped between the two members of an exchange
        "mid-request",
        "zeros",  # the file system extended the file, the data never arrived
    ],
)
def test_append_cuts_a_torn_exchange_and_continues(tmp_path: Path, cut: str) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path, exchanges=five("a"))
    bounds = member_bounds(path)  # warcinfo, then request/response pairs
    request, response = bounds[-2], bounds[-1]
    data = path.read_bytes()
    torn = {
        "mid-response": data[: (response[0] + response[1]) // 2],
        "after-request": data[: request[1]],
        "mid-request": data[: (request[0] + request[1]) // 2],
        "zeros": data[: request[0]] + bytes(3000),
    }[cut]
    path.write_bytes(torn)

    write_all(path, exchanges=five("b"), append=True)

    expected = [f"http://example.com/a{i}" for i in range(4)] + [
        f"http://example.com/b{i}" for i in range(5)
    ]
    assert urls_in(path) == expected
    records = warcio_records(path)
    # whole exchanges only, and the continuation's own warcinfo
    pairs = ["request", "response"]
    assert [r["type"] for r in records] == ["warcinfo", *pairs * 4, "warcinfo", *pairs * 5]
    assert path.read_bytes().startswith(data[: request[0]])  # what was complete is untouched
    with pytest.raises(SystemExit) as exited:
        warcio_cli(["check", str(path)])
    assert exited.value.code == 0
    with open(path, "rb") as f:
        assert all(r.verify_block_digest() for r in FastIterator(f, parse_http=False))


def test_recover_leaves_a_complete_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path)
    data = path.read_bytes()
    assert recover(path) == 0
    assert path.read_bytes() == data


def test_recover_refuses_damage_followed_by_complete_records(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path, exchanges=five("a"))
    bounds = member_bounds(path)
    data = bytearray(path.read_bytes())
    middle = bounds[3]
    data[middle[0] + 20 : middle[0] + 40] = bytes(20)  # damage inside the third member
    path.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="complete records follow"):
        recover(path)
    assert path.read_bytes() == bytes(data)
    with pytest.raises(UsageError):
        WarcWriter(path, append=True)


def test_recover_refuses_a_file_that_is_not_a_gzipped_warc(tmp_path: Path) -> None:
    for name, content in [("a.warc.gz", b"hello\n"), ("b.warc.gz", gzip.compress(b"a,b\n1,2\n"))]:
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(UsageError, match="not a gzipped WARC"):
            WarcWriter(path, append=True)
        assert path.read_bytes() == content


def test_append_to_a_missing_or_empty_file_starts_it(tmp_path: Path) -> None:
    missing, empty = tmp_path / "missing.warc.gz", tmp_path / "empty.warc.gz"
    empty.write_bytes(b"")
    for path in (missing, empty):
        write_all(path, exchanges=EXCHANGES[:1], append=True)
        assert [r["type"] for r in warcio_records(path)] == ["warcinfo", "request", "response"]


def test_append_continues_the_last_file_of_a_rotated_series(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    exchanges = five("a") * 3
    first = write_all(path, exchanges=exchanges, max_size=12_000)
    assert len(first.paths) >= 2
    last = first.paths[-1]
    data = last.read_bytes()
    last.write_bytes(data[: len(data) - 10])  # torn
    second = write_all(path, exchanges=five("b"), max_size=12_000, append=True)
    assert second.paths[0] == last
    all_urls = [u for p in rotated_paths(path) for u in urls_in(p)]
    assert all_urls == [e[0] for e in exchanges][:-1] + [e[0] for e in five("b")]


def test_without_append_an_existing_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "out.warc.gz"
    write_all(path, exchanges=five("a"))
    write_all(path, exchanges=five("b")[:1])
    assert urls_in(path) == ["http://example.com/b0"]
