"""A hung server never keeps ``surge s3`` running, and a signal always stops it.

MinIO behind a relay that stalls on cue (tests/s3/stall.py): a download, an
upload, a sync's listing each fail within the read timeout, retried first,
with one line that names what failed and the timeout; a stall in one part of
a multipart upload is retried on a new connection and the upload completes;
SIGINT (and SIGTERM, SIGHUP) through a stalled server ends the run within
its bound, and every multipart upload it began is aborted
(``list_multipart_uploads`` asks MinIO itself); a second SIGINT ends it at
once.  Timeouts here are short (1 s) so that the tests stay quick; the
commands run as real processes, signals and all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.s3._buckets import Buckets
from tests.s3.stall import StallingRelay, stalling_relay
from tests.s3.test_cp import new_bucket

from surge.s3 import Credentials
from surge.s3.interrupts import CANCEL_GRACE
from surge.s3.minio import MinioServer

MiB = 1024 * 1024
#: Flags that make a stall show quickly: 1 s of silence is a timeout, one retry.
QUICK = ["--read-timeout", "1", "--connect-timeout", "1", "--retries", "1", "--no-progress"]
#: A run that must end by itself does so within this (the timeouts above,
#: twice, and the start of a Python process on a loaded machine).
ENDS_WITHIN = 30


@pytest.fixture()
def server(minio: MinioServer, s3: Any) -> Buckets:
    return Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)


@pytest.fixture()
def relay(minio: MinioServer) -> Iterator[StallingRelay]:
    with stalling_relay(minio.port) as relay:
        yield relay


def surge(server: Buckets, *args: str, **environment: str) -> subprocess.Popen[str]:
    """``surge s3 ARGS`` in a child, with the server's keys (and ``environment``)."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
        **environment,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "surge.cli", "s3", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], within: float = ENDS_WITHIN) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"still running after {within} s: {err[-2000:]}")
    return process.returncode, out, err


def wait_for(condition: Any, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + ENDS_WITHIN
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the run ended before {what}: {process.communicate()[1][-2000:]}")
        assert time.monotonic() < deadline, f"no {what} in {ENDS_WITHIN} s"
        time.sleep(0.01)


def uploads_left(server: Buckets, bucket: str) -> list[str]:
    return [u["Key"] for u in server.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def test_a_stalled_download_is_retried_then_fails_naming_the_key(
    server: Buckets, relay: StallingRelay, tmp_path: Path
) -> None:
    bucket = new_bucket(server, {"data/obj": os.urandom(6 * MiB)})
    relay.stall_after(down=1 * MiB)  # mid-body, and every try after it
    code, _out, err = finish(
        surge(
            server,
            "cp",
            f"s3://{bucket}/data/obj",
            str(tmp_path / "obj"),
            "--endpoint-url",
            relay.url,
            *QUICK,
        )
    )
    assert code == 1, err
    failed = [line for line in err.splitlines() if "failed" in line and "to" in line]
    assert len(failed) == 1, err
    assert f"s3://{bucket}/data/obj" in failed[0]
    assert "read_timeout" in failed[0] and "1 s (the read timeout), after 2 tries" in failed[0]
    assert list(tmp_path.iterdir()) == []  # no file, no temporary one


def test_a_stalled_upload_fails_within_the_timeout(
    server: Buckets, relay: StallingRelay, tmp_path: Path
) -> None:
    bucket = new_bucket(server, {})
    source = tmp_path / "file"
    source.write_bytes(os.urandom(4 * MiB))  # one PUT: its body stalls
    relay.stall_after(up=1 * MiB)
    code, _out, err = finish(
        surge(server, "cp", str(source), f"s3://{bucket}/file", "--endpoint-url", relay.url, *QUICK)
    )
    assert code == 1, err
    # write_timeout while the body is still going out; read_timeout if the
    # sockets' buffers took the rest of it (4 MiB fits in loopback's).
    assert any(f"s3://{bucket}/file: {kind}: " in err for kind in ("write_timeout", "read_timeout"))
    assert "after 2 tries" in err


def test_a_stalled_listing_ends_a_sync_within_the_timeout(
    server: Buckets, relay: StallingRelay, tmp_path: Path
) -> None:
    """A sync begins with a listing of the destination: its pages stall."""
    bucket = new_bucket(server, {"a": b"a"})
    (tmp_path / "b").write_bytes(b"b")
    relay.black_hole()
    code, _out, err = finish(
        surge(server, "sync", str(tmp_path), f"s3://{bucket}/", "--endpoint-url", relay.url, *QUICK)
    )
    assert code == 1, err
    assert "read_timeout" in err and "after 2 tries" in err and repr(bucket) in err
    # and the other way, a download sync whose listing stalls
    code, _out, err = finish(
        surge(server, "sync", f"s3://{bucket}/", str(tmp_path), "--endpoint-url", relay.url, *QUICK)
    )
    assert code == 1 and "read_timeout" in err, err


def _upload(
    server: Buckets, relay: StallingRelay, tmp_path: Path, size: int, *extra: str
) -> tuple[str, bytes, subprocess.Popen[str]]:
    """A multipart upload (5 MiB parts) of ``size`` random bytes through the relay."""
    bucket = new_bucket(server, {})
    data = os.urandom(size)
    (tmp_path / "big").write_bytes(data)
    destination = f"s3://{bucket}/big"
    flags = ["--endpoint-url", relay.url, "--part-size", "5MiB", *QUICK, *extra]
    return bucket, data, surge(server, "cp", str(tmp_path / "big"), destination, *flags)


def abort_all(server: Buckets, bucket: str) -> None:
    for upload in server.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        server.s3.abort_multipart_upload(Bucket=bucket, Key="big", UploadId=upload["UploadId"])


def test_a_part_that_stalls_is_sent_again_and_the_upload_completes(
    server: Buckets, relay: StallingRelay, tmp_path: Path
) -> None:
    """The connections in flight die mid-part; the parts go again on new ones."""
    relay.stall_after(up=7 * MiB, new=False)
    bucket, data, process = _upload(server, relay, tmp_path, 12 * MiB)
    code, _out, err = finish(process)
    assert code == 0, err
    assert server.s3.get_object(Bucket=bucket, Key="big")["Body"].read() == data
    assert uploads_left(server, bucket) == []


def _interrupted_upload(
    server: Buckets, relay: StallingRelay, tmp_path: Path, *extra: str
) -> tuple[str, subprocess.Popen[str]]:
    relay.stall_after(up=12 * MiB)  # a black hole, once parts are stored
    bucket, _, process = _upload(server, relay, tmp_path, 30 * MiB, "--concurrency", "2", *extra)
    wait_for(lambda: relay.stalled, process, "a stall")
    wait_for(lambda: uploads_left(server, bucket), process, "a multipart upload")
    return bucket, process


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_signal_through_a_stalled_server_ends_the_run_and_aborts_its_upload(
    server: Buckets, relay: StallingRelay, tmp_path: Path, signum: int
) -> None:
    """The server hangs mid-upload; the user gives up.  The run stops within
    its bound and its multipart upload is aborted - over a connection made
    once the path heals, since those made into the black hole stay dead."""
    bucket, process = _interrupted_upload(server, relay, tmp_path)
    process.send_signal(signum)
    sent = time.monotonic()
    time.sleep(0.5)
    relay.heal()  # new connections pass again; the stalled ones never will
    code, _out, err = finish(process)
    took = time.monotonic() - sent
    assert code == 128 + signum, err
    assert "interrupted" in err and "Traceback" not in err
    assert took < CANCEL_GRACE + 3, f"{took:.1f} s"
    assert uploads_left(server, bucket) == []


def test_an_upload_that_cannot_be_aborted_is_named_and_the_run_still_ends(
    server: Buckets, relay: StallingRelay, tmp_path: Path
) -> None:
    """A server that never comes back: no abort can reach it.  The run still
    ends within its bound, and says which upload is left and how to abort it."""
    bucket, process = _interrupted_upload(server, relay, tmp_path)
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    code, _out, err = finish(process)
    took = time.monotonic() - sent
    assert code == 130 and took < CANCEL_GRACE + 3, (took, err)
    left = uploads_left(server, bucket)
    assert left == ["big"]
    assert f"the incomplete multipart upload of s3://{bucket}/big is left" in err
    assert "aws s3api abort-multipart-upload" in err
    abort_all(server, bucket)


def test_a_second_sigint_ends_the_run_at_once(
    server: Buckets, relay: StallingRelay, tmp_path: Path
) -> None:
    """Retried for all its bound, the abort would hold the run ~4 s; the
    second Ctrl-C does not wait for it."""
    bucket, process = _interrupted_upload(server, relay, tmp_path, "--retries", "5")
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)  # cleaning up: its abort waits on the dead server
    assert process.poll() is None
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    code, _out, err = finish(process)
    assert code == 130 and "interrupted again" in err, err
    assert time.monotonic() - sent < 2
    assert "the incomplete multipart upload of" in err  # named, as it may be left
    abort_all(server, bucket)


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_server_that_trickles_is_no_live_one(
    server: Buckets, relay: StallingRelay, tmp_path: Path, where: str
) -> None:
    """A byte every few tenths of a second is never a read timeout's silence;
    it would hold each try for its whole max_time (minutes).  A head that
    trickles, or a body of known length slower than 1 KiB/s for a read
    timeout's window, is a stalled server too - for a download, a listing."""
    objects = {"obj": os.urandom(100_000)} | {f"listed/{i:03d}-{'x' * 60}": b"" for i in range(20)}
    bucket = new_bucket(server, objects)  # a listing page of some KB
    relay.trickle(0.2, after=0 if where == "head" else 1000)
    runs = [["cp", f"s3://{bucket}/obj", str(tmp_path / "obj")]]
    if where == "body":  # a listing's page, read whole: the same floor
        runs.append(["ls", f"s3://{bucket}/", "--recursive"])
    for args in runs:
        flags = QUICK if args[0] == "cp" else QUICK[:4]  # ls has no --retries
        code, _out, err = finish(surge(server, *args, "--endpoint-url", relay.url, *flags))
        assert code == 1, err
        assert "read_timeout" in err
        assert ("head was still coming" if where == "head" else "bytes/s") in err, err
