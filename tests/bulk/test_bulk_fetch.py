"""The bulk engine and ``surge fetch`` end to end, against the simulated web."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from tests.conftest import RESOLVE, memory_device

import surge
from surge.sim import SimInfo, behaviour, hosts


def surge_fetch(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_record_per_input_with_the_sim_outcomes(sim: SimInfo, tmp_path: Path) -> None:
    names = [*hosts(300), "status-404.sim", "reset.sim", "garbage.sim", "hang.sim"]
    lines = [sim.url(h) for h in names] + ["not a url", "ftp://example.com/"]
    source = tmp_path / "urls.txt"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    done = surge_fetch(
        str(source), "-o", str(out), "-c", "100", "--max-time", "1", "-L", "--resolve", RESOLVE
    )
    assert done.returncode == 0, done.stderr
    got = records(out)
    assert sorted(r["line"] for r in got) == list(range(1, len(lines) + 1))  # each once
    by_line = {r["line"]: r for r in got}
    for n, name in enumerate(names, 1):
        r = by_line[n]
        expected = behaviour(name).expected(1.0)
        if expected[1] is None or behaviour(name).service_ms < 800:  # not a borderline host
            assert (r["status"], r["error"]) == expected, (name, r)
        assert set(r) >= {"url", "input", "status", "error", "error_detail", "elapsed_ms"}
        assert set(r["timings"]) == {"dns_ms", "connect_ms", "tls_ms", "ttfb_ms", "body_ms"}
    assert by_line[len(names) + 1]["error"] == "invalid_url"
    assert by_line[len(names) + 2]["error"] == "invalid_url"
    assert "records in" in done.stderr and "status" in done.stderr  # the summary


def test_csv_output_and_stdin_input(sim: SimInfo, tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    stdin = "\n".join(sim.url(h) for h in ("status-200.sim", "status-500.sim")) + "\n"
    done = surge_fetch("-", "-o", str(out), "--resolve", RESOLVE, "-q", stdin=stdin)
    assert done.returncode == 0, done.stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("url,input,line,status,error")
    assert len(rows) == 3 and done.stderr == ""


def test_top_sites_csv_with_a_template(sim: SimInfo, tmp_path: Path) -> None:
    source = tmp_path / "top.csv"
    source.write_text("1,status-200.sim\n2,status-404.sim\n")
    done = surge_fetch(
        str(source), "--template", f"http://{{}}:{sim.http_port}/", "--resolve", RESOLVE, "-q"
    )
    assert done.returncode == 0, done.stderr
    got = {r["input"]: r["status"] for r in map(json.loads, done.stdout.splitlines())}
    assert got == {"status-200.sim": 200, "status-404.sim": 404}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.txt"], "missing.txt: cannot read"),
        (["-c", "0", "IN"], "concurrency must be at least 1"),
        (["--resolve", "nonsense", "IN"], "--resolve 'nonsense'"),
        (["-H", "no colon", "IN"], "-H 'no colon'"),
        (["--resume", "IN"], "--resume needs -o"),
        (["--template", "https://x/", "IN"], "must contain {} exactly once"),
    ],
)
def test_usage_errors_exit_2_with_one_clear_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("http://status-200.sim/\n")
    os.chdir(tmp_path)
    done = surge_fetch(*[str(source) if a == "IN" else a for a in args])
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_malformed_line_stops_with_file_and_line_and_keeps_what_was_done(
    sim: SimInfo, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    good = [json.dumps({"url": sim.url("status-200.sim", f"/{i}")}) for i in range(5)]
    source.write_text("\n".join([*good, '{"url": oops', *good]) + "\n")
    out = tmp_path / "out.jsonl"
    done = surge_fetch(str(source), "-o", str(out), "--resolve", RESOLVE)
    assert done.returncode == 2
    assert "in.jsonl:6:" in done.stderr
    assert len(records(out)) == 5  # the records before the bad line are kept


def test_retries_count_attempts(sim: SimInfo) -> None:
    urls = [sim.url("reset.sim"), sim.url("status-503.sim"), sim.url("status-404.sim")]
    got = list(surge.fetch_all(urls, retries=2, retry_backoff=0.01, resolve=[RESOLVE]))
    attempts = {r["url"]: r["attempts"] for r in got}
    assert attempts == {urls[0]: 3, urls[1]: 3, urls[2]: 1}  # 404 is not retried


def test_fetch_all_works_inside_a_running_event_loop(sim: SimInfo) -> None:
    async def notebook_cell() -> list[dict[str, object]]:
        return list(surge.fetch_all([sim.url("status-200.sim")], resolve=[RESOLVE]))

    got = asyncio.run(notebook_cell())
    assert [r["status"] for r in got] == [200]


def test_fetch_all_can_be_abandoned_early(sim: SimInfo) -> None:
    urls = (sim.url(f"n{i}--delay-20.sim") for i in range(10_000))
    started = time.monotonic()
    for n, _ in enumerate(surge.fetch_all(urls, concurrency=50, resolve=[RESOLVE]), 1):
        if n == 100:
            break
    assert time.monotonic() - started < 30  # did not go on to fetch all 10,000


def test_fetch_all_left_early_cancels_what_is_in_flight(sim: SimInfo) -> None:
    """Breaking out returns at once: the requests in flight (here each would take
    an hour, under a --max-time of two) are cancelled, not waited for."""
    urls = [sim.url("status-200.sim")] + [sim.url(f"h{i}--delay-3600000.sim") for i in range(20)]
    records = surge.fetch_all(urls, concurrency=21, max_time=7200, resolve=[RESOLVE])
    assert next(records)["status"] == 200
    closer = threading.Thread(target=records.close)
    closer.start()
    closer.join(10)  # an hour's wait is not waited for
    assert not closer.is_alive()
    assert not any(t.name == "surge-fetch" for t in threading.enumerate())


async def test_fetch_stopped_early_stops_its_workers_before_its_client(sim: SimInfo) -> None:
    """A caller that leaves ``surge.fetch()`` early leaves no worker running
    against a closed pool and no task for the garbage collector to finish."""
    reported: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context))
    urls = [sim.url(f"e{i}--delay-20.sim") for i in range(2_000)]
    records = surge.fetch(urls, concurrency=50, resolve=[RESOLVE])
    n = 0
    async for _ in records:
        n += 1
        if n == 20:
            break
    await records.aclose()
    assert asyncio.all_tasks() == {asyncio.current_task()}  # the workers are gone, now
    await asyncio.sleep(0.1)
    gc.collect()
    assert reported == []


async def test_fetch_closed_by_a_slow_caller_does_not_hang(sim: SimInfo) -> None:
    """The workers fill the engine's queue while the caller dawdles; closing must
    not wait to post the end marker into a full queue nobody reads."""
    records = surge.fetch([sim.url("status-200.sim")] * 2_000, concurrency=8, resolve=[RESOLVE])
    async for _ in records:
        await asyncio.sleep(1.0)
        break
    await asyncio.wait_for(records.aclose(), 10)


def test_fetch_all_abandoned_by_a_slow_consumer_returns(sim: SimInfo) -> None:
    script = textwrap.dedent(
        f"""
        import time, surge
        it = surge.fetch_all([{sim.url("status-200.sim")!r}] * 3000, concurrency=8,
                             resolve=[{RESOLVE!r}])
        next(it)
        time.sleep(3)  # the hand-off to this thread fills, then the engine's queue
        it.close()
        print("closed")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert "closed" in done.stdout, done.stderr


async def test_fetch_async_iterator(sim: SimInfo) -> None:
    got = [r async for r in surge.fetch([sim.url("status-200.sim"), "bad"], resolve=[RESOLVE])]
    assert {(r["status"], r["error"]) for r in got} == {(200, None), (None, "invalid_url")}


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_resume_after_an_interrupted_run_loses_and_duplicates_nothing(
    sim: SimInfo, tmp_path: Path, signum: int, status: int
) -> None:
    # 400 hosts of 200 ms at 20 in flight take 4 s: the interrupt, sent once a few
    # records are on disk, always lands mid-run.
    n = 400
    source = tmp_path / "urls.txt"
    source.write_text("".join(sim.url(f"r{i}--delay-200.sim") + "\n" for i in range(n)))
    out = tmp_path / "out.jsonl"
    args = [str(source), "-o", str(out), "-c", "20", "--resolve", RESOLVE]
    first = subprocess.Popen(
        [sys.executable, "-m", "surge.cli", "fetch", *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while (not out.exists() or out.stat().st_size < 2000) and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signum)
    _, err = first.communicate(timeout=30)
    assert first.returncode == status, err
    assert "the records written are kept" in err
    partial = len(out.read_text().splitlines())
    assert 0 < partial < n
    second = surge_fetch(*args, "--resume")
    assert second.returncode == 0, second.stderr
    lines = sorted(r["line"] for r in records(out))
    assert lines == list(range(1, n + 1))  # nothing lost, nothing twice
    assert "already done" in second.stderr


def test_a_low_open_files_limit_lowers_concurrency_and_says_so(
    sim: SimInfo, tmp_path: Path
) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("".join(sim.url(f"f{i}--status-200.sim") + "\n" for i in range(50)))
    script = (
        "ulimit -Sn 200 && ulimit -Hn 300 && "
        f"exec {sys.executable} -m surge.cli fetch {source} -c 1000 --resolve '{RESOLVE}'"
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "lowering concurrency from 1000 to 236" in done.stderr  # soft raised to hard: 300
    assert len(done.stdout.splitlines()) == 50
    quiet = subprocess.run(
        ["bash", "-c", script + " -q"], capture_output=True, text=True, timeout=60
    )
    assert quiet.returncode == 0 and quiet.stderr == ""  # -q: errors only


def _python_under_a_low_fd_limit(limit: int, body: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import collections, json, os, resource, warnings, surge\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))\n" + textwrap.dedent(body)
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )


def test_the_python_api_fits_its_concurrency_to_the_open_files_limit(sim: SimInfo) -> None:
    urls = [sim.url(f"a{i}--delay-20.sim") for i in range(200)]
    done = _python_under_a_low_fd_limit(
        120,
        f"""
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            got = list(surge.fetch_all({urls!r}, concurrency=200, resolve=[{RESOLVE!r}]))
        print(json.dumps(collections.Counter(str(r["error"]) for r in got)))
        print(*(str(w.message) for w in said), sep="\\n")
        """,
    )
    assert done.returncode == 0, done.stderr
    counts, *warned = done.stdout.splitlines()
    assert json.loads(counts) == {"None": 200}
    assert warned == [
        "surge: the open-files limit is 120; running 56 requests at a time, not 200"
        " (raise it with 'ulimit -n')"
    ]


def test_out_of_descriptors_is_waited_out_not_recorded_as_a_remote_failure(
    sim: SimInfo,
) -> None:
    """The host program holds most of the process's descriptors, so connects fail
    with EMFILE: each request waits for one to come back and every record is a
    success - never connect_refused (the old record: 85 of 200)."""
    urls = [sim.url(f"m{i}--delay-50.sim") for i in range(300)]
    done = _python_under_a_low_fd_limit(
        160,
        f"""
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(110)]  # the host's own
        got = list(surge.fetch_all({urls!r}, concurrency=90, resolve=[{RESOLVE!r}]))
        print(json.dumps(collections.Counter(str(r["error"]) for r in got)))
        print(sum(r["attempts"] for r in got))
        """,
    )
    assert done.returncode == 0, done.stderr
    counts, attempts = done.stdout.splitlines()
    assert json.loads(counts) == {"None": 300}
    assert int(attempts) == 300  # a wait for a descriptor is not a try


def test_out_of_descriptors_for_good_stops_the_run_with_one_line(sim: SimInfo) -> None:
    """Once the run is under way, another thread of the program takes every free
    descriptor and keeps taking any that comes back: the run stops with one line
    and exit 2, the records done are written, and none says connect_refused."""
    urls = [sim.url("first--delay-1000.sim")] + [sim.url(f"g{i}.sim") for i in range(4)]
    script = textwrap.dedent(
        f"""
        import atexit, os, resource, runpy, sys, threading, time
        from surge.bulk import engine
        engine.LOCAL_WAIT_S = 0.5
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))
        held, done = [], threading.Event()

        def hog():
            time.sleep(0.5)  # the first request is connected and waiting by then
            while not done.is_set():
                try:
                    held.append(os.open(os.devnull, os.O_RDONLY))
                except OSError:
                    time.sleep(0.002)

        def give_back():  # the C runtime needs a descriptor or two to exit
            done.set()
            hogging.join()
            for fd in held:
                os.close(fd)

        hogging = threading.Thread(target=hog, daemon=True)
        hogging.start()
        atexit.register(give_back)
        sys.argv = ["surge", "fetch", "-", "-c", "1", "--resolve", {RESOLVE!r}, "-q"]
        runpy.run_module("surge.cli", run_name="__main__")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input="".join(u + "\n" for u in urls),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Too many open files, still after 0.5 s" in done.stderr
    assert [json.loads(line)["status"] for line in done.stdout.splitlines()] == [200]


# ------------------------------------------------- nothing already written is lost


def test_an_input_that_cannot_be_read_leaves_the_output_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    out.write_text('{"kept": true}\n')
    done = surge_fetch(str(tmp_path / "missing.txt"), "-o", str(out))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"surge fetch: error: {tmp_path / 'missing.txt'}: cannot read:"
        " [Errno 2] No such file or directory"
    ]
    assert out.read_text() == '{"kept": true}\n'


def test_the_output_may_not_be_the_input(tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:9/\n")
    for out in (source, tmp_path / "." / "urls.txt"):
        done = surge_fetch(str(source), "-o", str(out))
        assert done.returncode == 2
        assert "is the input file" in done.stderr and "Traceback" not in done.stderr
    assert source.read_text() == "http://127.0.0.1:9/\n"


def test_a_full_disk_is_one_line_and_exit_2(tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:9/\n" * 3)
    full = memory_device(tmp_path, "full")
    done = surge_fetch(str(source), "-o", str(full), "-q")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"surge fetch: error: {full}: cannot write: [Errno 28] No space left on device"
    ]


def test_a_write_that_fails_mid_run_keeps_the_records_written_for_resume(
    sim: SimInfo, tmp_path: Path
) -> None:
    """The output file hits a size limit (RLIMIT_FSIZE: EFBIG, as a full disk's
    ENOSPC) part-way: the records before it stay, and --resume completes the job
    with one record per input."""
    n = 300
    source = tmp_path / "urls.txt"
    source.write_text("".join(sim.url(f"w{i}--status-200.sim") + "\n" for i in range(n)))
    out = tmp_path / "out.jsonl"
    args = [str(source), "-o", str(out), "-c", "20", "--resolve", RESOLVE, "-q"]
    limit = 20_000  # bytes: some 50 records, far from all
    script = (
        "import resource, signal, sys, runpy;"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}));"
        f"sys.argv = ['surge', 'fetch', *{args!r}];"
        "runpy.run_module('surge.cli', run_name='__main__')"
    )
    first = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 2, first.stderr
    assert "cannot write" in first.stderr and "Traceback" not in first.stderr
    kept = out.read_bytes()
    assert 0 < len(kept) <= limit
    second = surge_fetch(*args, "--resume")
    assert second.returncode == 0, second.stderr
    assert sorted(r["line"] for r in records(out)) == list(range(1, n + 1))


@pytest.mark.parametrize(
    "flag",
    [
        ["--max-time", "nan"],
        ["--max-time", "inf"],
        ["--max-time", "0"],
        ["--connect-timeout", "-1"],
        ["--max-connecting", "0"],
        ["--max-filesize", "-1"],
        ["-c", "0"],
        ["-H", "X-Test: €uro"],
        # Refused by click itself: once its four lines of usage, now one.
        ["--format", "xml"],
        ["-c", "many"],
        ["--max-time", "abc"],
        ["--no-such-flag"],
    ],
)
def test_bad_option_values_are_one_line_and_exit_2(flag: list[str], tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:9/\n")
    done = surge_fetch(str(source), *flag)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    "options",
    [{"max_time": float("nan")}, {"max_connecting": 0}, {"body_cap": -1}, {"retries": 1.5}],
)
def test_the_api_raises_value_error_for_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        surge.fetch_all(["http://127.0.0.1:9/"], **options)


def test_one_url_string_is_a_type_error_and_one_resolve_string_an_entry(sim: SimInfo) -> None:
    with pytest.raises(TypeError, match="not one string"):
        surge.fetch_all(sim.url("status-200.sim"))
    (record,) = surge.fetch_all([sim.url("status-200.sim")], resolve=RESOLVE)
    assert record["status"] == 200


async def test_fetch_with_a_client_of_ones_own(sim: SimInfo) -> None:
    """client=: two runs share one AsyncClient (its keep-alive connections), which
    stays open after each; FetchOptions is exported beside fetch."""
    from surge.http import AsyncClient

    urls = [sim.url("status-200.sim")] * 20
    options = surge.FetchOptions(concurrency=4)
    async with AsyncClient(resolve=[RESOLVE]) as client:
        first = [r async for r in surge.fetch(urls, client=client, options=options)]
        second = [r async for r in surge.fetch(urls, client=client, options=options)]
        assert (await client.get(sim.url("status-200.sim"))).status_code == 200  # still open
        stats = client.stats()
    assert [r["status"] for r in first + second] == [200] * 40
    assert stats["created"] <= 4 and stats["requests"] == 41
