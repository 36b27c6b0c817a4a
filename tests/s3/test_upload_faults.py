"""Uploads that must not be reported as done: a CompleteMultipartUpload that
answers 200 with an error document after whitespace (S3 documents it), and a
file that changes while its parts are read.  A forwarding proxy of the test's
own stands in front of MinIO and injects the fault (a hostile review's
reproductions)."""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.s3._buckets import Buckets
from tests.s3.test_cp import new_bucket
from tests.s3.test_upload import cli

import surge.s3

MiB = 1024 * 1024
SURGE_S3_CP = [sys.executable, "-m", "surge.cli", "s3", "cp", "--recursive"]

#: What the proxy may do instead of forwarding: given (method, path), an answer
#: (status, body) or None to forward.
Fault = Callable[[str, str], "tuple[int, bytes] | None"]
#: What the proxy may do to a forwarded answer: given (method, path, headers,
#: body), the headers and body to send.
Rewrite = Callable[[str, str, list[tuple[str, str]], bytes], "tuple[list[tuple[str, str]], bytes]"]


def _forward(
    method: str, path: str, headers: list[tuple[str, str]], body: bytes
) -> tuple[list[tuple[str, str]], bytes]:
    return headers, body


@contextmanager
def fault_proxy(upstream: str, fault: Fault, rewrite: Rewrite = _forward) -> Iterator[str]:
    """A plain HTTP/1.1 forwarder to ``upstream`` (host:port); yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            answer = fault(self.command, self.path)
            if answer is None:
                upstream_connection = http.client.HTTPConnection(upstream, timeout=30)
                upstream_connection.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for name, value in self.headers.items():
                    upstream_connection.putheader(name, value)
                upstream_connection.endheaders(body)
                response = upstream_connection.getresponse()
                data = response.read()
                status = response.status
                # a HEAD's Content-Length is the object's (or the part's): kept
                dropped = ("transfer-encoding", "connection")
                if self.command != "HEAD":
                    dropped += ("content-length",)
                headers = [(k, v) for k, v in response.getheaders() if k.lower() not in dropped]
                headers, data = rewrite(self.command, self.path, headers, data)
                upstream_connection.close()
            else:
                (status, data), headers = answer, []
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _upstream(buckets: Buckets) -> str:
    return buckets.endpoint_url.split("//", 1)[1]


def test_a_complete_answered_200_with_an_error_is_a_failure(
    buckets: Buckets, tmp_path: Path
) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(12 * MiB))
    bucket = new_bucket(buckets, {})

    def complete_fails(method: str, path: str) -> tuple[int, bytes] | None:
        if method == "POST" and "uploadId=" in path:
            return 200, (
                b'<?xml version="1.0" encoding="UTF-8"?>\n'
                + b" " * 300
                + b"<Error><Code>InternalError</Code><Message>try again</Message></Error>"
            )
        return None

    with fault_proxy(_upstream(buckets), complete_fails) as url:
        code, stdout, err = cli(
            url, buckets.credentials, str(source), f"s3://{bucket}/big.bin",
            "--part-size", "5MiB", "--retries", "0",
        )  # fmt: skip
    assert code == 1, (stdout, err)
    assert "InternalError" in err and "upload:" not in stdout
    assert buckets.boto3_keys(bucket, "") == []
    assert buckets.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_complete_whose_answer_was_lost_is_confirmed_not_failed(
    buckets: Buckets, tmp_path: Path
) -> None:
    """The server completed the upload and the answer was lost (the proxy hangs
    up after forwarding): the retried CompleteMultipartUpload finds no upload
    (NoSuchUpload), and the object there, whose ETag is the one S3 makes of
    these parts, says it was this upload's - a success, reported once."""
    source = tmp_path / "big.bin"
    body = os.urandom(12 * MiB)
    source.write_bytes(body)
    bucket = new_bucket(buckets, {})
    lost: list[str] = []

    def lose_the_complete(
        method: str, path: str, headers: list[tuple[str, str]], data: bytes
    ) -> tuple[list[tuple[str, str]], bytes]:
        if method == "POST" and "uploadId=" in path and not lost:
            lost.append(path)
            raise ConnectionAbortedError("the answer is lost")  # the proxy hangs up
        return headers, data

    with fault_proxy(_upstream(buckets), lambda method, path: None, lose_the_complete) as url:
        code, stdout, err = cli(
            url, buckets.credentials, str(source), f"s3://{bucket}/big.bin", "--part-size", "5MiB"
        )
    assert len(lost) == 1
    assert code == 0, (stdout, err)
    assert stdout.count("upload:") == 1
    assert buckets.s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == body
    assert buckets.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_no_such_upload_with_another_object_there_is_a_failure(
    buckets: Buckets, tmp_path: Path
) -> None:
    """NoSuchUpload, and the object at the key is not this upload's (its ETag
    is not these parts'): a failure, never taken for a success."""
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(12 * MiB))
    bucket = new_bucket(buckets, {})
    buckets.s3.put_object(Bucket=bucket, Key="big.bin", Body=b"somebody else's")

    def no_such_upload(method: str, path: str) -> tuple[int, bytes] | None:
        if method == "POST" and "uploadId=" in path:
            return 404, (b"<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>")
        return None

    with fault_proxy(_upstream(buckets), no_such_upload) as url:
        code, stdout, err = cli(
            url, buckets.credentials, str(source), f"s3://{bucket}/big.bin", "--part-size", "5MiB"
        )
    assert code == 1 and "NoSuchUpload" in err, (stdout, err)
    assert "upload:" not in stdout
    assert buckets.s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == b"somebody else's"


def _as_sse_kms(with_sse_header: bool) -> Rewrite:
    """Answers as S3 gives them for an SSE-KMS object on a server that echoes
    no checksum: the CRC-32 left out, the ETag of a single PUT and of the
    whole multipart object (in the Complete's body) 32 hex digits that are no
    MD5 of the body, and - if ``with_sse_header`` -
    ``x-amz-server-side-encryption: aws:kms`` saying why.  (A part's ETag is
    kept: it goes back to the server in CompleteMultipartUpload.)"""

    def rewrite(
        method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[list[tuple[str, str]], bytes]:
        if method not in ("PUT", "POST"):
            return headers, body
        kept = [(k, v) for k, v in headers if not k.lower().startswith("x-amz-checksum")]
        if with_sse_header:
            kept.append(("x-amz-server-side-encryption", "aws:kms"))
        if method == "PUT" and "partNumber=" not in path:
            kept = [(k, v) for k, v in kept if k.lower() != "etag"]
            kept.append(("ETag", '"' + "ab" * 16 + '"'))
        if method == "POST" and "uploadId=" in path:
            body = re.sub(
                rb"<ETag>[^<]*</ETag>", b"<ETag>&quot;" + b"cd" * 16 + b"-3&quot;</ETag>", body
            )
            body = re.sub(rb"<ChecksumCRC32>[^<]*</ChecksumCRC32>", b"", body)
        return kept, body

    return rewrite


def _no_fault(method: str, path: str) -> tuple[int, bytes] | None:
    return None


def test_an_sse_kms_etag_is_not_taken_for_a_bad_digest(buckets: Buckets, tmp_path: Path) -> None:
    """SSE-KMS and SSE-C ETags are no MD5: with no checksum in the answer, an
    upload is not failed as BadDigest for that (single PUT and multipart); a
    non-MD5 ETag without that header still is."""
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(100_000))
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(11 * MiB))
    bucket = new_bucket(buckets, {})
    with fault_proxy(_upstream(buckets), _no_fault, _as_sse_kms(True)) as url:
        for source in (small, big):
            code, stdout, err = cli(
                url, buckets.credentials, str(source), f"s3://{bucket}/{source.name}",
                "--part-size", "5MiB", "--retries", "0",
            )  # fmt: skip
            assert code == 0, (source.name, stdout, err)
    assert sorted(buckets.boto3_keys(bucket, "")) == ["big.bin", "small.bin"]
    with fault_proxy(_upstream(buckets), _no_fault, _as_sse_kms(False)) as url:
        for source in (small, big):
            code, stdout, err = cli(
                url, buckets.credentials, str(source), f"s3://{bucket}/again-{source.name}",
                "--part-size", "5MiB", "--retries", "0",
            )  # fmt: skip
            assert code == 1, (source.name, stdout, err)
            assert "BadDigest" in err


def test_a_file_changed_during_a_multipart_upload_is_a_failure(
    buckets: Buckets, tmp_path: Path
) -> None:
    """The file is rewritten (same size, new bytes and mtime) once the first
    part has gone: the upload is aborted, not stored as a mix of both."""
    source = tmp_path / "big.bin"
    source.write_bytes(b"A" * (15 * MiB))
    bucket = new_bucket(buckets, {})
    rewritten = threading.Event()

    def rewrite_after_a_part(method: str, path: str) -> tuple[int, bytes] | None:
        if method == "PUT" and "partNumber=" in path and not rewritten.is_set():
            rewritten.set()
            source.write_bytes(b"B" * (15 * MiB))
            os.utime(source, ns=(1, 10**18))  # a different mtime, whatever the clock
        return None

    with fault_proxy(_upstream(buckets), rewrite_after_a_part) as url:
        code, stdout, err = cli(
            url, buckets.credentials, str(source), f"s3://{bucket}/big.bin",
            "--part-size", "5MiB", "--concurrency", "1",
        )  # fmt: skip
    assert rewritten.is_set()
    assert code == 1, (stdout, err)
    assert "changed while it was uploaded" in err
    assert buckets.boto3_keys(bucket, "") == []
    assert buckets.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_cancelled_recursive_upload_aborts_its_multipart_upload(
    buckets: Buckets, tmp_path: Path
) -> None:
    """Ctrl-C (the run's task cancelled, as run_cleanly does on SIGINT) while
    a big file's parts go up and a small file's PUT is slow: the multipart
    upload is aborted, not left stored.  The run's gather gives up at the
    first file cancelled and the run then cancels the others again: that
    second cancel used to cut the abort short (a hostile review's reproduction)."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "a-big").write_bytes(os.urandom(30 * MiB))
    (source / "small").write_bytes(b"s" * 100)
    bucket = new_bucket(buckets, {})
    part_sent = threading.Event()

    def slow_puts(method: str, path: str) -> tuple[int, bytes] | None:
        # parts and the small file take long enough to be in flight when
        # the run is cancelled, whatever the machine's speed
        if method == "PUT" and "partNumber=" in path:
            part_sent.set()
            time.sleep(1)
        elif method == "PUT" and path.endswith("/small"):
            time.sleep(3)
        return None

    async def cancelled_midway(url: str) -> None:
        task = asyncio.ensure_future(
            surge.s3.upload_async(
                str(source), f"s3://{bucket}/p/", recursive=True, part_size=5 * MiB,
                concurrency=4, endpoint_url=url, credentials=buckets.credentials,
            )
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not part_sent.is_set():
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with fault_proxy(_upstream(buckets), slow_puts) as url:
        asyncio.run(cancelled_midway(url))
    assert buckets.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert "p/a-big" not in buckets.boto3_keys(bucket, "")


def test_a_low_open_files_limit_lowers_the_concurrency(buckets: Buckets, tmp_path: Path) -> None:
    """With ``ulimit -n 128`` (hard too) and the default --concurrency of 256,
    cp says it lowers the concurrency and copies every file, both ways."""
    source = tmp_path / "many"
    source.mkdir()
    for i in range(300):
        (source / f"f{i:03d}").write_bytes(b"x" * i)
    bucket = new_bucket(buckets, {})
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": buckets.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": buckets.credentials.secret_key,
    }

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    for args in (
        [str(source), f"s3://{bucket}/m/"],
        [f"s3://{bucket}/m/", str(tmp_path / "back")],
    ):
        done = subprocess.run(
            [*SURGE_S3_CP, *args, "--endpoint-url", buckets.endpoint_url, "--only-show-errors"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=limited,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "lowering --concurrency from 256 to" in done.stderr
        assert "Traceback" not in done.stderr
    assert len(buckets.boto3_keys(bucket, "m/")) == 300
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == sorted(
        p.name for p in source.iterdir()
    )
