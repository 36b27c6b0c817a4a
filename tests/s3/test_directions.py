"""The directions of a transfer - download, upload, copy between buckets,
delete - are one run (:class:`surge.s3.transfer.TransferRun`) with thin
subclasses: counting, results, the sinks told, the run-ending stop and the
summary's request counts live in one place.  These tests drive every direction
through the same cases, so that a fix (or a slip) on one side alone fails."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.s3._buckets import Buckets
from tests.s3.test_rm import new_bucket

from surge.errors import SinkError
from surge.s3.copies import _Copies, copy, copy_async
from surge.s3.deletes import _Remove, remove_async
from surge.s3.transfer import (
    BucketRun,
    Result,
    Summary,
    TransferRun,
    _Download,
    download,
    download_async,
    run_sync,
)
from surge.s3.uploads import _Upload, upload, upload_async

RUNS = [_Download, _Upload, _Copies, _Remove]
#: What only TransferRun (or BucketRun) may define: a direction that wrote its
#: own would count, tell or stop differently from the others.
SHARED = ["run", "counts", "_copied", "_fail", "_tell", "_progress", "_listed"]
KEYS = ["d/a.txt", "d/b.txt", "d/c/d.txt"]


@pytest.mark.parametrize("run", RUNS, ids=lambda run: run.__name__)
def test_every_direction_is_a_transfer_run_and_keeps_its_plumbing(run: type[Any]) -> None:
    assert issubclass(run, TransferRun)
    for name in SHARED:
        owner = next(c for c in run.__mro__ if name in vars(c))
        allowed = (TransferRun, BucketRun) + ((_Copies,) if name == "counts" else ())
        assert owner in allowed, f"{run.__name__} defines its own {name}"


@pytest.mark.parametrize(
    ("run_async", "run_sync"),
    [(download_async, download), (upload_async, upload), (copy_async, copy)],
    ids=["download", "upload", "copy"],
)
def test_the_entry_points_have_one_calling_convention(
    run_async: Callable[..., Any], run_sync: Callable[..., Any]
) -> None:
    """(source, destination, *, options=None, client=None, **kwargs) for the
    async side; the sync side the same, without ``client``."""
    shape = [(p.name, p.kind, p.default) for p in inspect.signature(run_async).parameters.values()]
    P = inspect.Parameter
    assert shape == [
        ("source", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("destination", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("options", P.KEYWORD_ONLY, None),
        ("client", P.KEYWORD_ONLY, None),
        ("kwargs", P.VAR_KEYWORD, P.empty),
    ]
    sync_shape = [
        (p.name, p.kind, p.default) for p in inspect.signature(run_sync).parameters.values()
    ]
    assert sync_shape == [s for s in shape if s[0] != "client"]


def _direction(name: str, server: Buckets, tmp_path: Path, **options: Any) -> Callable[[], Summary]:
    """A recursive run of ``name`` over the three KEYS, made ready."""
    kwargs = server.options(recursive=True, **options)
    if name == "download":
        bucket = new_bucket(server, KEYS)
        return lambda: download(f"s3://{bucket}/d/", str(tmp_path / "out"), **kwargs)
    if name == "upload":
        for key in KEYS:
            path = tmp_path / "in" / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
        bucket = new_bucket(server, [])
        return lambda: upload(str(tmp_path / "in" / "d"), f"s3://{bucket}/d/", **kwargs)
    if name == "copy":
        source, target = new_bucket(server, KEYS), new_bucket(server, [])
        return lambda: copy(f"s3://{source}/d/", f"s3://{target}/d/", **kwargs)
    bucket = new_bucket(server, KEYS)
    return lambda: run_sync(lambda: remove_async(f"s3://{bucket}/d/", **kwargs))


DIRECTIONS = ["download", "upload", "copy", "remove"]


@pytest.mark.parametrize("name", DIRECTIONS)
def test_each_object_is_told_once_and_counted(server: Buckets, tmp_path: Path, name: str) -> None:
    told: list[Result] = []
    progress: list[int] = []
    summary = _direction(
        name, server, tmp_path, on_result=told.append, on_progress=lambda s: progress.append(1)
    )()
    assert summary.failures == [] and all(r.failure is None for r in told)
    assert len(told) == 3
    done = summary.deleted if name == "remove" else summary.objects
    assert done == 3
    if name != "remove":
        assert summary.bytes == 3 and summary.verified + summary.unverified == 3
    # (a listing is counted by its own stats; a DeleteObjects takes 1,000 keys)
    assert summary.requests >= (1 if name == "remove" else 3) and summary.seconds > 0
    assert progress  # told of the running summary


@pytest.mark.parametrize("name", DIRECTIONS)
def test_a_sink_that_fails_ends_each_direction_with_its_error(
    server: Buckets, tmp_path: Path, name: str
) -> None:
    """The first result's sink failing (stdout full) ends the run with that
    error - one line, exit 2 on the command line - whichever the direction."""

    def full(result: Result) -> None:
        raise SinkError("stdout: No space left on device", errno=28)

    with pytest.raises(SinkError, match="No space left"):
        _direction(name, server, tmp_path, on_result=full, concurrency=1)()


@pytest.mark.parametrize("name", ["download", "upload", "copy"])
def test_a_missing_source_is_one_failure_told_as_counted(
    server: Buckets, tmp_path: Path, name: str
) -> None:
    told: list[Result] = []
    kwargs = server.options(on_result=told.append)
    bucket = new_bucket(server, [])
    if name == "download":
        summary = download(f"s3://{bucket}/missing", str(tmp_path / "x"), **kwargs)
    elif name == "upload":
        summary = upload(str(tmp_path / "missing"), f"s3://{bucket}/k", **kwargs)
    else:
        summary = copy(f"s3://{bucket}/missing", f"s3://{bucket}/k", **kwargs)
    assert summary.objects == 0 and len(summary.failures) == 1
    [result] = told
    assert result.failure == summary.failures[0]
    assert (result.source, result.destination) == (
        result.failure.source,
        result.failure.destination,
    )
