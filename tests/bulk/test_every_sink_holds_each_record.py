"""A record is done only when every sink holds it: the records (``-o``), the
WARC (``--warc``) and the saved bodies (``--output-dir``) agree, whatever
stopped the run - a full disk (a small tmpfs, every sink on it), SIGKILL, a
WARC cut after its last complete record, a body file gone - and ``--resume``
then fetches again exactly what a sink lost.

After the fault: every record's exchange is in the WARC and its body on disk.
After ``--resume`` (the disk made larger): records == WARC responses == saved
bodies == inputs, each input once, with warcio (the reference reader) reading
the WARC and ``warcio check`` passing.

Before, a WARC on a full disk lost exchanges for good: the records said 58
done while the WARC held 38 responses, and after ``--resume`` 100 records sat
against 80 responses.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RESOLVE, require

from surge.sim import SimInfo

warcio = require("warcio.archiveiterator")

SURGE = [sys.executable, "-m", "surge.cli"]
N_INPUTS = 40
#: Each combination of the sinks besides the records.
COMBINATIONS = {
    "records": [],
    "records+warc": ["--warc"],
    "records+bodies": ["--output-dir"],
    "records+warc+bodies": ["--warc", "--output-dir"],
}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``disk(size)``: a new tmpfs of ``size`` bytes (a full disk on demand);
    ``disk.resize(path, size)`` grows one.  All are unmounted at the end."""
    mounted: list[Path] = []

    def make(size: int) -> Path:
        point = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
        point.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={max(size, 4096)}", "tmpfs", str(point)],
            check=True,
            timeout=30,
        )
        mounted.append(point)
        return point

    try:
        yield make
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", "-l", str(point)], check=False, timeout=30)


def resize(point: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(point)], check=True, timeout=30)


def _inputs(sim: SimInfo, kind: str = "big-30k") -> list[str]:
    return [sim.url(f"e{i}--{kind}.sim") for i in range(N_INPUTS)]


def _argv(source: Path, where: Path, sinks: list[str], fmt: str = "jsonl") -> list[str]:
    argv = ["fetch", str(source), "-o", str(where / f"out.{fmt}"), "--resolve", RESOLVE]
    argv += ["-c", "4", "-q", "--no-progress"]
    for flag in sinks:
        argv += [flag, str(where / ("run.warc.gz" if flag == "--warc" else "pages"))]
    return argv


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SURGE, *argv], capture_output=True, text=True, timeout=timeout)


def _records(where: Path, *, torn: bool = False) -> list[dict[str, Any]]:
    """The records of out.jsonl or out.csv (its cells as JSON's values).

    ``torn``: the run was SIGKILLed, so its last write may be cut short - Linux
    stops a write to a regular file at a page boundary once a fatal signal is
    pending, whatever the writer does; that unterminated tail is not a record
    (--resume cuts it) and is left out."""
    out = where / "out.jsonl"
    if (where / "out.csv").exists():
        out = where / "out.csv"
    if not out.exists():
        return []
    data = out.read_bytes()
    if torn and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    assert not data or data.endswith(b"\n"), data[-200:]
    if out.suffix == ".jsonl":
        return [json.loads(line) for line in data.splitlines()]
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    return [
        {
            **{key: value or None for key, value in row.items()},
            "line": int(row["line"]),
            "status": int(row["status"]) if row["status"] else None,
        }
        for row in rows
    ]


def _responses(where: Path) -> list[tuple[str, str | None]]:
    """(target URI, Surge-Input-Line) of each response the WARC holds, read by warcio."""
    path = where / "run.warc.gz"
    if not path.exists():
        return []
    with path.open("rb") as stream:
        return [
            (
                record.rec_headers.get_header("WARC-Target-URI"),
                record.rec_headers.get_header("Surge-Input-Line"),
            )
            for record in warcio.ArchiveIterator(stream)
            if record.rec_type == "response"
        ]


def _bodies(where: Path) -> list[Path]:
    """The saved bodies (not the hidden files of bodies being written)."""
    pages = where / "pages"
    if not pages.exists():
        return []
    return [p for p in pages.rglob("*") if p.is_file() and not p.name.startswith(".")]


def check_every_record_is_held(
    where: Path, sinks: list[str], *, torn: bool = False
) -> list[dict[str, Any]]:
    """Whatever stopped the run: each record's exchange is in the WARC, and its
    saved body on disk with the digest it names (``torn``: see :func:`_records`)."""
    records = _records(where, torn=torn)
    lines = [r["line"] for r in records]
    assert len(lines) == len(set(lines)), lines
    held = collections.Counter(uri for uri, _ in _responses(where))
    for record in records:
        if "--warc" in sinks:
            assert held[record["final_url"]] >= 1, (
                record["line"],
                len(records),
                sum(held.values()),
            )
        if "--output-dir" in sinks:
            body = Path(record["body_path"])
            assert body.is_file(), record
            assert hashlib.sha256(body.read_bytes()).hexdigest() == record["body_sha256"]
    return records


def check_complete(where: Path, sinks: list[str], urls: list[str]) -> None:
    """records == WARC responses == saved bodies == inputs, each input once."""
    records = check_every_record_is_held(where, sinks)
    assert sorted(r["line"] for r in records) == list(range(1, N_INPUTS + 1))
    assert all(r["status"] == 200 and r["error"] is None for r in records), records
    if "--warc" in sinks:
        responses = _responses(where)
        assert sorted(uri for uri, _ in responses) == sorted(urls)
        assert sorted(int(line) for _, line in responses if line) == list(range(1, N_INPUTS + 1))
        check = subprocess.run(
            [str(Path(sys.executable).parent / "warcio"), "check", str(where / "run.warc.gz")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
    if "--output-dir" in sinks:
        assert len(_bodies(where)) == N_INPUTS
        assert sorted(str(p) for p in _bodies(where)) == sorted(r["body_path"] for r in records)


def _used(where: Path) -> int:
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())


@pytest.mark.parametrize("fraction", [0.15, 0.4, 0.7])
@pytest.mark.parametrize("combination", sorted(COMBINATIONS))
def test_a_full_disk_under_any_sinks_loses_nothing_and_resume_completes(
    sim: SimInfo,
    tmp_path: Path,
    disk: Callable[[int], Path],
    combination: str,
    fraction: float,
) -> None:
    sinks = COMBINATIONS[combination]
    urls = _inputs(sim)
    source = tmp_path / "urls.txt"  # the input is not on the small disk
    source.write_text("".join(url + "\n" for url in urls))
    # what the whole job writes, on a disk large enough
    roomy = disk(64 << 20)
    assert _run(_argv(source, roomy, sinks)).returncode == 0
    needed = _used(roomy)
    where = disk(int(needed * fraction) // 4096 * 4096)
    first = _run(_argv(source, where, sinks))
    assert first.returncode == 2, first.stderr  # the disk filled up
    assert "No space left on device" in first.stderr, first.stderr
    assert first.stderr.count("\n") == 1 and "Traceback" not in first.stderr, first.stderr
    check_every_record_is_held(where, sinks)
    resize(where, 64 << 20)
    again = _run([*_argv(source, where, sinks), "--resume"])
    assert again.returncode == 0, again.stderr
    check_complete(where, sinks, urls)


@pytest.mark.parametrize("after", [1, 6000, 15000])
@pytest.mark.parametrize("combination", ["records+warc", "records+warc+bodies"])
def test_sigkill_at_any_point_then_resume_agrees(
    sim: SimInfo, tmp_path: Path, combination: str, after: int
) -> None:
    """Killed (no chance to flush anything) once the records reach ``after``
    bytes: the records on disk are held by the WARC, and --resume leaves each
    input once in every sink (the WARC's exchanges of records that never got
    out are cut, not kept twice)."""
    sinks = COMBINATIONS[combination]
    urls = _inputs(sim, "delay-40--big-30k")
    source = tmp_path / "urls.txt"
    source.write_text("".join(url + "\n" for url in urls))
    where = tmp_path / "run"
    where.mkdir()
    out = where / "out.jsonl"
    process = subprocess.Popen(
        [*SURGE, *_argv(source, where, sinks)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            if out.exists() and out.stat().st_size >= after:
                break
            time.sleep(0.005)
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
    finally:
        process.communicate(timeout=60)
    check_every_record_is_held(where, sinks, torn=True)
    again = _run([*_argv(source, where, sinks), "--resume"])
    assert again.returncode == 0, again.stderr
    check_complete(where, sinks, urls)


def _request_offsets(path: Path) -> list[int]:
    """The offset of each exchange's request record, as warcio reads them."""
    with path.open("rb") as stream:
        iterator = warcio.ArchiveIterator(stream)
        return [iterator.get_record_offset() for r in iterator if r.rec_type == "request"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("lost", [1, 7])
def test_a_warc_cut_after_its_last_complete_record_is_refetched(
    sim: SimInfo, tmp_path: Path, lost: int, fmt: str
) -> None:
    """The WARC loses its last ``lost`` exchanges (cut at a record boundary, so
    nothing looks torn; an OS that lost its tail): --resume finds the records
    whose exchanges are gone and fetches them again."""
    sinks = COMBINATIONS["records+warc+bodies"]
    urls = _inputs(sim)
    source = tmp_path / "urls.txt"
    source.write_text("".join(url + "\n" for url in urls))
    where = tmp_path / "run"
    where.mkdir()
    assert _run(_argv(source, where, sinks, fmt)).returncode == 0
    warc = where / "run.warc.gz"
    starts = _request_offsets(warc)
    assert len(starts) == N_INPUTS
    os.truncate(warc, starts[-lost])
    assert len(_responses(where)) == N_INPUTS - lost
    again = _run([*_argv(source, where, sinks, fmt), "--resume"])
    assert again.returncode == 0, again.stderr
    check_complete(where, sinks, urls)


def test_a_saved_body_gone_is_refetched(sim: SimInfo, tmp_path: Path) -> None:
    sinks = COMBINATIONS["records+warc+bodies"]
    urls = _inputs(sim)
    source = tmp_path / "urls.txt"
    source.write_text("".join(url + "\n" for url in urls))
    where = tmp_path / "run"
    where.mkdir()
    assert _run(_argv(source, where, sinks)).returncode == 0
    records = _records(where)
    gone = records[-3]
    os.unlink(gone["body_path"])
    again = _run([*_argv(source, where, sinks), "--resume"])
    assert again.returncode == 0, again.stderr
    check_complete(where, sinks, urls)


def test_the_api_yields_a_record_once_its_warc_holds_the_exchange(
    sim: SimInfo, tmp_path: Path
) -> None:
    """surge.fetch_all(warc=PATH): when a record is yielded its exchange is in
    the file already (before, the WARC kept up to 256 KiB of exchanges for
    0.5 s after their records were out)."""
    import surge

    urls = _inputs(sim, "big-2k")
    warc = tmp_path / "run.warc.gz"
    seen: list[str] = []
    for record in surge.fetch_all(urls, warc=str(warc), resolve=[RESOLVE], concurrency=4):
        seen.append(record["final_url"])
        held = collections.Counter(uri for uri, _ in _responses(tmp_path))
        assert all(held[url] >= 1 for url in seen), (len(seen), sum(held.values()))
    assert sorted(seen) == sorted(urls)


@pytest.mark.parametrize("max_size", [None, "40K"])
@pytest.mark.parametrize("kept", [0, 10, 33])
def test_exchanges_whose_records_were_lost_are_cut_not_kept_twice(
    sim: SimInfo, tmp_path: Path, kept: int, max_size: str | None
) -> None:
    """The records file lost its tail (its disk, not the WARC's, filled up):
    --resume cuts the WARC's exchanges of the records not kept - across the
    parts of a rotated WARC too - and each input ends up once in both."""
    from surge.bulk.warc import rotated_paths

    sinks = COMBINATIONS["records+warc"]
    urls = _inputs(sim, "big-8k")
    source = tmp_path / "urls.txt"
    source.write_text("".join(url + "\n" for url in urls))
    where = tmp_path / "run"
    where.mkdir()
    argv = _argv(source, where, sinks) + ([] if max_size is None else ["--warc-max-size", max_size])
    assert _run(argv).returncode == 0
    out = where / "out.jsonl"
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:kept]))
    again = _run([*argv, "--resume"])
    assert again.returncode == 0, again.stderr
    records = _records(where)
    assert sorted(r["line"] for r in records) == list(range(1, N_INPUTS + 1))
    parts = rotated_paths(where / "run.warc.gz")
    assert (len(parts) > 1) == (max_size is not None)
    targets = []
    for part in parts:
        with part.open("rb") as stream:
            targets += [
                r.rec_headers.get_header("WARC-Target-URI")
                for r in warcio.ArchiveIterator(stream)
                if r.rec_type == "response"
            ]
    assert sorted(targets) == sorted(urls)
