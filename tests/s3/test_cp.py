"""``surge s3 cp`` downloads and :func:`surge.s3.download`, against MinIO and moto.

boto3 uploads the objects (the reference client); surge downloads them and the
files are compared byte for byte.  Filters are compared with lists written by
hand from the AWS CLI's documented rules (``aws s3 cp --recursive``: every key
is taken unless a filter says otherwise, the last matching filter wins,
patterns are relative to the prefix and ``*`` crosses ``/``).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from tests.s3._buckets import Buckets

import surge.s3
from surge.cli import main
from surge.errors import RequestError, SinkError
from surge.http.client import AsyncClient
from surge.s3 import transfer
from surge.s3.checksums import ALGORITHMS, Digest, Expected
from surge.s3.minio import MinioServer
from surge.s3.paths import Filters, UnsafeKey, local_path

MiB = 1024 * 1024
_names = count()


def new_bucket(server: Buckets, objects: dict[str, bytes]) -> str:
    bucket = f"cp-{os.getpid()}-{next(_names)}"
    server.s3.create_bucket(Bucket=bucket)
    for key, body in objects.items():
        server.s3.put_object(Bucket=bucket, Key=key, Body=body)
    return bucket


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root``: relative path -> bytes."""
    return {
        str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()
    }


def cli(server: Buckets, *args: str) -> tuple[int, str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    result = CliRunner().invoke(
        main, ["s3", "cp", "--endpoint-url", server.endpoint_url, *args], env=env
    )
    return result.exit_code, result.stdout, result.stderr


AWKWARD = {
    "plain.txt": b"plain",
    "with space.txt": b"space",
    "plus+sign": b"plus",
    "ünïcödé/ümlaut.txt": "ümlaut".encode(),
    "日本語/ファイル.txt": "ファイル".encode(),
    "dir with space/nested dir/file": b"nested",
    "percent%20literal": b"percent",
    "empty": b"",
    "deep/a/b/c/d": os.urandom(3000),
}


def test_recursive_round_trip_is_byte_exact(server: Buckets, tmp_path: Path) -> None:
    objects = {**AWKWARD, "folder/": b""}  # a folder marker: not a file
    bucket = new_bucket(server, objects)
    summary = surge.s3.download(
        f"s3://{bucket}/", str(tmp_path / "out"), recursive=True, **server.options()
    )
    assert summary.failures == []
    assert tree(tmp_path / "out") == AWKWARD
    assert (summary.objects, summary.bytes) == (len(AWKWARD), sum(map(len, AWKWARD.values())))
    assert summary.folders == 1
    # boto3 uploads with a CRC32 (or the ETag is the MD5): every object was checked
    assert summary.verified == len(AWKWARD)


def test_large_object_in_parallel_ranged_parts(server: Buckets, tmp_path: Path) -> None:
    data = os.urandom(40 * MiB + 123)
    bucket = new_bucket(server, {"big.bin": data})
    summary = surge.s3.download(
        f"s3://{bucket}/big.bin",
        str(tmp_path / "big.bin"),
        part_size=4 * MiB,
        concurrency=8,
        **server.options(),
    )
    assert summary.failures == []
    assert summary.parts == 11  # 10 whole parts of 4 MiB and a short one
    assert hashlib.sha256((tmp_path / "big.bin").read_bytes()).digest() == (
        hashlib.sha256(data).digest()
    )
    assert summary.verified == 1
    assert [p.name for p in tmp_path.iterdir()] == ["big.bin"]  # no temporary file left


def test_single_object_to_a_file_and_into_a_directory(server: Buckets, tmp_path: Path) -> None:
    bucket = new_bucket(server, {"a/x y+z ü.txt": b"hello"})
    code, out, err = cli(server, f"s3://{bucket}/a/x y+z ü.txt", str(tmp_path / "named"))
    assert code == 0, err
    assert (tmp_path / "named").read_bytes() == b"hello"
    assert out == f"download: s3://{bucket}/a/x y+z ü.txt to {tmp_path / 'named'}\n"
    code, _, err = cli(server, f"s3://{bucket}/a/x y+z ü.txt", f"{tmp_path}/")
    assert code == 0, err
    assert (tmp_path / "x y+z ü.txt").read_bytes() == b"hello"
    assert "downloaded 1 object, 5 B" in err


FILTER_KEYS = [
    "a.txt",
    "b.log",
    "logs/1.log",
    "logs/2.txt",
    "keep/c.txt",
    "keep/d.log",
    "abc",
    "axc",
    "abbc",
]
#: (filters in command-line order, the keys ``aws s3 cp --recursive`` takes),
#: worked out by hand from the AWS CLI's rules.
FILTER_CASES: list[tuple[list[str], list[str]]] = [
    ([], FILTER_KEYS),
    (["--exclude", "*", "--include", "*.txt"], ["a.txt", "logs/2.txt", "keep/c.txt"]),
    (["--include", "*.txt", "--exclude", "*"], []),  # the last match wins
    (["--exclude", "logs/*"], ["a.txt", "b.log", "keep/c.txt", "keep/d.log", "abc", "axc", "abbc"]),
    (
        ["--exclude", "*.log", "--include", "keep/*"],
        ["a.txt", "logs/2.txt", "keep/c.txt", "keep/d.log", "abc", "axc", "abbc"],
    ),
    (["--exclude", "*", "--include", "a?c"], ["abc", "axc"]),
    (["--exclude", "*", "--include", "[ab]*.txt"], ["a.txt"]),
    (["--exclude", "*c*"], ["a.txt", "b.log", "logs/1.log", "logs/2.txt", "keep/d.log"]),
]


@pytest.mark.parametrize(("filters", "expected"), FILTER_CASES)
def test_include_exclude_select_as_aws_does(
    server: Buckets, tmp_path: Path, filters: list[str], expected: list[str]
) -> None:
    bucket = new_bucket(server, {f"pre/{k}": k.encode() for k in FILTER_KEYS} | {"other": b"o"})
    code, out, err = cli(server, f"s3://{bucket}/pre", str(tmp_path), "-r", *filters)
    assert code == 0, err
    assert sorted(tree(tmp_path)) == sorted(expected)
    assert sorted(out.splitlines()) == sorted(
        f"download: s3://{bucket}/pre/{k} to {tmp_path / k}" for k in expected
    )


def test_dryrun_writes_nothing(server: Buckets, tmp_path: Path) -> None:
    bucket = new_bucket(server, {"p/a": b"a", "p/sub/b": b"bb"})
    target = tmp_path / "not-made"
    code, out, err = cli(server, f"s3://{bucket}/p/", str(target), "--recursive", "--dryrun")
    assert code == 0, err
    assert sorted(out.splitlines()) == [
        f"(dryrun) download: s3://{bucket}/p/a to {target / 'a'}",
        f"(dryrun) download: s3://{bucket}/p/sub/b to {target / 'sub' / 'b'}",
    ]
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


class VanishingClient(AsyncClient):
    """Deletes ``key`` (through boto3) just before surge GETs it: a listed
    object that is gone by the time it is read, a real 404 from the server."""

    def __init__(self, server: Buckets, bucket: str, key: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.server, self.bucket, self.key = server, bucket, key

    def stream(self, method: str, url: str, **kwargs: Any) -> Any:
        if url.endswith("/" + self.key):
            self.server.s3.delete_object(Bucket=self.bucket, Key=self.key)
        return super().stream(method, url, **kwargs)


def test_a_missing_object_fails_alone(server: Buckets, tmp_path: Path) -> None:
    bucket = new_bucket(server, {"a": b"a", "gone": b"g", "c": b"c"})
    client = VanishingClient(server, bucket, "gone", **CLIENT)
    summary = asyncio.run(_download_with(client, f"s3://{bucket}/", tmp_path, server))
    assert [(f.source, f.code) for f in summary.failures] == [(f"s3://{bucket}/gone", "NoSuchKey")]
    assert tree(tmp_path) == {"a": b"a", "c": b"c"}
    # the CLI: a missing single object is exit 1 and a line on stderr, not a crash
    code, _, err = cli(server, f"s3://{bucket}/gone", str(tmp_path / "x"))
    assert code == 1
    assert f"download failed: s3://{bucket}/gone to {tmp_path / 'x'}: NoSuchKey" in err
    assert not (tmp_path / "x").exists()


async def _download_with(
    client: AsyncClient, source: str, destination: Path, server: Buckets, **kwargs: Any
) -> surge.s3.Summary:
    try:
        return await surge.s3.download_async(
            source, str(destination), recursive=True, client=client, **server.options(**kwargs)
        )
    finally:
        await client.close()


def test_keys_that_would_escape_are_refused(moto_s3: Buckets, tmp_path: Path) -> None:
    # MinIO refuses such keys itself (XMinioInvalidResourceName); moto stores them
    bucket = new_bucket(
        moto_s3, {"d/../evil": b"1", "d/x/../../evil2": b"2", "/abs": b"3", "d/ok": b"ok"}
    )
    out = tmp_path / "out"
    code, stdout, err = cli(moto_s3, f"s3://{bucket}/", str(out), "-r")
    assert code == 1
    assert tree(tmp_path) == {"out/d/ok": b"ok"}
    for key in ("d/../evil", "d/x/../../evil2", "/abs"):
        assert f"skipping s3://{bucket}/{key}: " in err
    assert "download: " in stdout and "evil" not in stdout


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("a/b", "a/b"),
        ("a//b", "a/b"),
        ("./a", "a"),
        ("x y+z ü", "x y+z ü"),
        ("..", None),
        ("a/../../b", None),
        ("a/..", None),
        ("/etc/passwd", None),
        ("nul\0byte", None),
        ("", None),
    ],
)
def test_key_to_path(key: str, path: str | None) -> None:
    if path is None:
        with pytest.raises(UnsafeKey):
            local_path("/dest", key)
    else:
        assert local_path("/dest", key) == f"/dest/{path}"


class FailingPartClient(AsyncClient):
    """Every GET of the range starting at ``offset`` fails with a reset."""

    def __init__(self, offset: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.offset = offset

    def stream(self, method: str, url: str, **kwargs: Any) -> Any:
        headers = dict(kwargs.get("headers") or [])
        if headers.get("Range", "").startswith(f"bytes={self.offset}-"):
            raise RequestError("connection_reset", "the test broke this part")
        return super().stream(method, url, **kwargs)


def test_a_failed_part_leaves_no_file_and_a_rerun_completes(
    server: Buckets, tmp_path: Path
) -> None:
    data = os.urandom(12 * MiB)
    bucket = new_bucket(server, {"big": data, "small": b"s"})
    options = server.options(part_size=2 * MiB, retries=0)
    broken = FailingPartClient(4 * MiB, **CLIENT)
    summary = asyncio.run(_download_with(broken, f"s3://{bucket}/", tmp_path, server, **options))
    assert [(f.source, f.code) for f in summary.failures] == [
        (f"s3://{bucket}/big", "connection_reset")
    ]
    assert sorted(os.listdir(tmp_path)) == ["small"]  # no partial file, no temporary one
    summary = surge.s3.download(f"s3://{bucket}/", str(tmp_path), recursive=True, **options)
    assert summary.failures == []
    assert (tmp_path / "big").read_bytes() == data


#: what surge's own download client sets (transfer.transfer_client): raw bytes as stored
CLIENT = {"headers": {"Accept-Encoding": "identity"}, "decompress": False, "cookies": False}


def _surge_cp(server: Buckets, *args: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    return subprocess.Popen(
        [sys.executable, "-c", "from surge.cli import main; main()", "s3", "cp", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for_temporary(directory: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while not any(p.name.startswith(".surge-") for p in directory.iterdir()):
        assert process.poll() is None, "the download ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_an_interrupted_download_leaves_no_final_file(
    minio: MinioServer, s3: Any, tmp_path: Path, how: str
) -> None:
    server = Buckets(
        minio.endpoint_url, surge.s3.Credentials(minio.access_key, minio.secret_key), s3
    )
    data = os.urandom(24 * MiB)
    bucket = new_bucket(server, {"big": data})
    args = [f"s3://{bucket}/big", str(tmp_path / "big"), "--endpoint-url", minio.endpoint_url]
    # one connection, 16 KiB parts: ~1,500 requests, time enough to interrupt it
    process = _surge_cp(server, *args, "--concurrency", "1", "--part-size", "16KiB")
    try:
        _wait_for_temporary(tmp_path, process)
        process.send_signal(getattr(signal, how))
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not (tmp_path / "big").exists()
    if how == "SIGINT":  # cleaned up, exit 130
        assert process.returncode == 130
        assert list(tmp_path.iterdir()) == []
    rerun = _surge_cp(server, *args)
    assert rerun.wait(60) == 0, rerun.stderr.read() if rerun.stderr else ""
    assert (tmp_path / "big").read_bytes() == data


def test_json_summary_and_exit_statuses(server: Buckets, tmp_path: Path) -> None:
    bucket = new_bucket(server, {"p/a": b"aa", "p/b": b"bbb"})
    code, out, err = cli(server, f"s3://{bucket}/p/", str(tmp_path), "-r", "--json-summary")
    assert code == 0, err
    record = json.loads(out)
    assert (record["objects"], record["bytes"], record["failed"]) == (2, 5, 0)
    assert "downloaded 2 objects, 5 B in " in err and "0 failed" in err
    # usage errors: exit 2, one line naming the problem
    (tmp_path / "file").write_bytes(b"")
    for args, says in [
        ([f"s3://{bucket}/p/", str(tmp_path / "file"), "-r"], "is not a directory"),
        ([f"s3://{bucket}/p/", str(tmp_path)], "names no object"),
        ([str(tmp_path / "file"), str(tmp_path / "y")], "must be s3://"),
        ([str(tmp_path), f"s3://{bucket}/x"], "give --recursive"),
        ([f"s3://{bucket}/p/", f"s3://{bucket}/y"], "names no object"),  # a copy
        ([f"s3://{bucket}/p/a", str(tmp_path / "file" / "x")], "is not a directory"),
        ([f"s3://{bucket}/p/a", str(tmp_path), "--part-size", "lots"], "expected a size"),
    ]:
        code, _, err = cli(server, *args)
        assert code == 2, (args, err)
        assert len(err.splitlines()) == 1 and says in err, err


def test_no_such_bucket_is_a_usage_error(server: Buckets, tmp_path: Path) -> None:
    code, _, err = cli(server, "s3://no-such-bucket-here/", str(tmp_path), "-r")
    assert code == 2
    assert "NoSuchBucket" in err


def test_open_object_streams_the_bytes(server: Buckets) -> None:
    data = os.urandom(3 * MiB + 5)
    bucket = new_bucket(server, {"obj": data})

    async def read() -> bytes:
        chunks = []
        async for chunk in surge.s3.open_object(
            f"s3://{bucket}/obj", part_size=MiB, **server.options()
        ):
            chunks.append(chunk)
        return b"".join(chunks)

    assert asyncio.run(read()) == data


# -- verification, without a server -----------------------------------------------------


def test_expected_reads_md5_etags_and_full_object_checksums() -> None:
    body = b"hello world"
    md5 = hashlib.md5(body).hexdigest()
    crc = "DUoRhQ=="  # base64 of zlib.crc32(b"hello world"), big-endian
    expected = Expected.from_headers(11, {"etag": f'"{md5}"', "x-amz-checksum-crc32": crc})
    assert expected.md5 == md5 and expected.checksum == ("crc32", crc)
    digest = Digest(expected)
    digest.update(body)
    assert digest.mismatch() is None
    wrong = Digest(expected)
    wrong.update(b"hello World")
    # one check: the server's CRC-32 (a tenth of an MD5's CPU), not both
    assert "CRC32" in (wrong.mismatch() or "") and wrong.md5 is None
    md5_only = Digest(Expected.from_headers(11, {"etag": f'"{md5}"'}))
    md5_only.update(b"hello World")
    assert "MD5" in (md5_only.mismatch() or "")
    # a multipart ETag and SSE-KMS's ETag are no MD5s; composite checksums are
    # not computed as the bytes come (they are checked by parts: test_checksum_kinds)
    assert Expected.from_headers(1, {"etag": '"abc-2"'}).md5 is None
    kms = {"etag": f'"{md5}"', "x-amz-server-side-encryption": "aws:kms"}
    assert Expected.from_headers(1, kms).md5 is None
    assert not Expected.from_headers(1, {"x-amz-checksum-crc32": "AAAA-3"}).whole
    composite = {"x-amz-checksum-crc32": crc, "x-amz-checksum-type": "COMPOSITE"}
    assert not Expected.from_headers(11, composite).whole


def test_crc32_combines_as_zlib_computes_the_whole() -> None:
    from surge.s3.checksums import _crc32_combine, crc32, crc32_combine

    first, second = os.urandom(1000), os.urandom(70_001)
    whole = zlib.crc32(first + second)
    assert crc32(first + second) == whole
    for combine in (crc32_combine, _crc32_combine):
        assert combine(zlib.crc32(first), zlib.crc32(second), len(second)) == whole
        assert combine(zlib.crc32(first), 0, 0) == zlib.crc32(first)


def test_sha256_checksum_mismatch_is_found() -> None:
    import base64

    value = base64.b64encode(hashlib.sha256(b"abc").digest()).decode()
    expected = Expected.from_headers(3, {"x-amz-checksum-sha256": value})
    good, bad = Digest(expected), Digest(expected)
    good.update(b"abc")
    bad.update(b"abd")
    assert good.mismatch() is None and "SHA256" in (bad.mismatch() or "")


def test_an_algorithm_without_a_package_is_noted() -> None:
    expected = Expected.from_headers(1, {"x-amz-checksum-crc32c": "AAAAAA=="})
    if ALGORITHMS["crc32c"] is None:
        assert expected.checksum is None and expected.unchecked == "no crc32c package installed"
    else:
        assert expected.checksum == ("crc32c", "AAAAAA==")


def test_filters_are_relative_to_the_prefix() -> None:
    filters = Filters("b", "pre/", [("exclude", "*"), ("include", "x/*")])
    assert filters.takes("pre/x/1") and not filters.takes("pre/y/x/1")
    # a pattern that repeats the prefix matches nothing: it is relative already
    assert Filters("b", "pre/", [("exclude", "pre/*")]).takes("pre/a")


class SlowDisk:
    """``os.pwritev`` as a page cache under writeback pressure: the first
    ``blocked`` writes sleep ``delay`` seconds (a blocked write sleeps in the
    kernel); writes from ``failing_from`` bytes on fail with ``error`` (ENOSPC).
    It records which threads wrote.  (The bytes are written for real.)"""

    def __init__(
        self,
        blocked: int,
        delay: float,
        failing_from: int | None = None,
        error: int = errno.ENOSPC,
    ) -> None:
        self.real = os.pwritev
        self.blocked = blocked
        self.delay = delay
        self.failing_from = failing_from
        self.error = error
        self.lock = threading.Lock()
        self.writes = 0
        self.threads: set[str] = set()

    def __call__(self, fd: int, buffers: Any, offset: int) -> int:
        with self.lock:
            self.writes += 1
            slow = self.writes <= self.blocked
            self.threads.add(threading.current_thread().name)
        if slow:
            time.sleep(self.delay)
        if self.failing_from is not None and offset >= self.failing_from:
            raise OSError(self.error, os.strerror(self.error))
        return self.real(fd, buffers, offset)


@pytest.fixture
def writers(monkeypatch: pytest.MonkeyPatch) -> list[transfer._Writer]:
    """The downloads' writers, to read their counts; a budget of 2 MiB."""
    made: list[transfer._Writer] = []

    class Recorded(transfer._Writer):
        def __init__(self) -> None:
            super().__init__(budget=2 * MiB)
            made.append(self)

    monkeypatch.setattr(transfer, "_Writer", Recorded)
    return made


def test_blocked_writes_move_off_the_event_loop_within_a_budget(
    server: Buckets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writers: list[Any]
) -> None:
    data = os.urandom(24 * MiB + 5)
    bucket = new_bucket(server, {"big": data})
    disk = SlowDisk(blocked=4, delay=0.005)
    monkeypatch.setattr(os, "pwritev", disk)
    summary = surge.s3.download(
        f"s3://{bucket}/big",
        str(tmp_path / "big"),
        part_size=MiB,
        concurrency=64,
        **server.options(),
    )
    assert summary.failures == []
    assert (tmp_path / "big").read_bytes() == data
    [writer] = writers
    # the first writes blocked the event loop: the rest went to the threads
    assert writer.threaded
    assert any(name.startswith("surge-s3-write") for name in disk.threads)
    assert writer.thread_writes > writer.inline_writes
    # back-pressure: bytes held waiting for the disk stayed within the budget,
    # plus one chunk (256 KiB at most, as uvloop reads) per part in flight:
    # the chunk that found the budget spent, out of its connection already
    assert 0 < writer.peak <= writer.budget + transfer.PARTS_IN_FLIGHT * 256 * 1024
    assert writer.held == 0


class BusyDisk:
    """``os.pwritev`` as a kernel busy filling the page cache: each of the first
    ``busy`` writes spends ``cpu`` seconds of the writing thread's CPU (spun,
    never sleeping) before it writes for real."""

    def __init__(self, busy: int, cpu: float) -> None:
        self.real = os.pwritev
        self.busy = busy
        self.cpu = cpu
        self.lock = threading.Lock()
        self.writes = 0
        self.spun = 0

    def __call__(self, fd: int, buffers: Any, offset: int) -> int:
        with self.lock:
            self.writes += 1
            busy = self.writes <= self.busy
        if busy:
            started, deadline = time.thread_time(), time.monotonic() + 1.0
            while time.thread_time() - started < self.cpu and time.monotonic() < deadline:
                pass
            self.spun += 1
        return self.real(fd, buffers, offset)


def test_writes_busy_in_the_kernel_stay_on_the_event_loop(
    minio_buckets: Buckets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writers: list[Any]
) -> None:
    """A write that costs CPU without sleeping (the first writes into a fresh
    file) is not a blocked write: a thread would do the same work, so the
    download's writes stay on the loop, however many such writes cost.
    (MinIO only: moto serves from a thread of this process, and the spin holds
    the GIL, so waiting for it would be a sleep of the writing thread.)"""
    server = minio_buckets
    data = os.urandom(8 * MiB + 5)
    bucket = new_bucket(server, {"big": data})
    disk = BusyDisk(busy=12, cpu=0.003)  # 36 ms of CPU: past BLOCKED_LIMIT
    assert disk.busy * disk.cpu > transfer.BLOCKED_LIMIT
    monkeypatch.setattr(os, "pwritev", disk)
    summary = surge.s3.download(
        f"s3://{bucket}/big", str(tmp_path / "big"), part_size=MiB, **server.options()
    )
    assert summary.failures == []
    assert (tmp_path / "big").read_bytes() == data
    [writer] = writers
    assert disk.spun == 12
    assert not writer.threaded
    assert writer.thread_writes == 0
    assert writer.inline_writes == disk.writes


def test_only_a_write_that_slept_counts_as_blocked() -> None:
    from types import SimpleNamespace as Usage

    before = Usage(ru_utime=1.0, ru_stime=2.0, ru_nvcsw=10)
    assert transfer._blocked(before, Usage(ru_utime=1.0, ru_stime=2.0, ru_nvcsw=11))
    # 50 ms of the kernel's CPU, no sleep: not blocked
    assert not transfer._blocked(before, Usage(ru_utime=1.0, ru_stime=2.05, ru_nvcsw=10))


def test_a_write_failing_on_a_thread_is_a_local_error(
    server: Buckets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writers: list[Any]
) -> None:
    """A write that only this file fails (EINVAL here) is the object's
    LocalError; the others go on."""
    data = os.urandom(16 * MiB)
    bucket = new_bucket(server, {"big": data, "small": b"small"})
    disk = SlowDisk(blocked=4, delay=0.005, failing_from=8 * MiB, error=errno.EINVAL)
    monkeypatch.setattr(os, "pwritev", disk)
    summary = surge.s3.download(
        f"s3://{bucket}/", str(tmp_path), recursive=True, part_size=MiB, **server.options()
    )
    assert [(f.source, f.code) for f in summary.failures] == [(f"s3://{bucket}/big", "LocalError")]
    assert "Invalid argument" in summary.failures[0].message
    assert sorted(os.listdir(tmp_path)) == ["small"]  # no partial file, no temporary one
    assert writers[0].held == 0


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EDQUOT])
def test_a_write_failing_as_every_file_would_ends_the_run(
    server: Buckets,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writers: list[Any],
    error: int,
) -> None:
    """A full disk (a quota, a size limit, the device failing) would fail
    every object left: the run ends with one SinkError naming the file and
    the error (the command line: one line, exit 2), not a LocalError per
    object; no partial file, no temporary one; what was complete stays."""
    objects = {"big": os.urandom(16 * MiB), **{f"small{i}": b"small %d" % i for i in range(20)}}
    bucket = new_bucket(server, objects)
    disk = SlowDisk(blocked=4, delay=0.005, failing_from=8 * MiB, error=error)
    monkeypatch.setattr(os, "pwritev", disk)
    with pytest.raises(SinkError, match=os.strerror(error)) as raised:
        surge.s3.download(
            f"s3://{bucket}/", str(tmp_path), recursive=True, part_size=MiB, **server.options()
        )
    assert raised.value.errno == error
    assert str(tmp_path / "big") in str(raised.value)
    left = os.listdir(tmp_path)
    assert "big" not in left and not [name for name in left if name.startswith(".surge-")]
    assert all((tmp_path / name).read_bytes() == objects[name] for name in left)
    assert writers[0].held == 0


def test_the_command_line_keeps_its_heap(tmp_path: Path) -> None:
    """``surge s3 cp`` tells glibc's malloc to keep freed heap (mallopt): the
    page faults of 256 KiB chunks allocated and freed all run long were most
    of a download's extra system CPU.  Applied where glibc is."""
    import platform

    applied = transfer.steady_heap()
    assert applied == (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc")


def test_a_download_s_ranges_grow_with_the_object() -> None:
    """No part size given: 8 MiB ranges, or as few as keep 8 in flight (whole
    MiB) up to 64 MiB - fewer requests, less server work; a part size given
    is kept; never more than 10,000 ranges."""
    size_for = transfer.range_size_for
    assert size_for(20 * MiB, None) == 8 * MiB
    assert size_for(64 * MiB, None) == 8 * MiB
    assert size_for(256 * MiB, None) == 32 * MiB
    assert size_for(500 * MiB, None) == 63 * MiB  # 62.5 MiB, rounded up
    assert size_for(2048 * MiB, None) == 64 * MiB
    assert size_for(100_000 * MiB, None) == 64 * MiB
    assert size_for(2048 * MiB, 8 * MiB) == 8 * MiB
    tebibyte = 1024 * 1024 * MiB
    assert size_for(tebibyte, None) == size_for(tebibyte, MiB) == -(-tebibyte // 10_000)


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1)))
def test_http_dates_read_as_email_utils_reads_them(when: datetime) -> None:
    # The IMF-fixdate fast path (no email.utils at start-up) agrees with it.
    stamp = when.replace(microsecond=0, tzinfo=UTC)
    text = format_datetime(stamp, usegmt=True)
    assert transfer.http_date(text) == parsedate_to_datetime(text).timestamp()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Sun, 06 Nov 1994 08:49:37 GMT", 784111777.0),  # IMF-fixdate (RFC 9110 5.6.7)
        ("Sunday, 06-Nov-94 08:49:37 GMT", 784111777.0),  # RFC 850, obsolete
        ("Sun, 06 Nov 1994 08:49:37 +0000", 784111777.0),  # a numeric zone: email.utils
        ("Sun, 31 Feb 1994 08:49:37 GMT", None),  # no such day
        ("Sun, 06 Nov 1994 25:49:37 GMT", None),
        ("not a date", None),
        ("", None),
        (None, None),
    ],
)
def test_http_date_table(text: str | None, expected: float | None) -> None:
    assert transfer.http_date(text) == expected
