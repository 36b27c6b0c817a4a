"""``surge fetch`` and ``surge trace`` under faults of the files they write and
the inputs they read (issue #32): nothing lost, by construction.

Every run is the real command line in a child process, and every fault is a
real one: a full disk is /dev/full, a size limit RLIMIT_FSIZE, a closed pipe a
reader gone, a closed descriptor one replaced under the writer (``dup2`` of a
read-only /dev/null: EBADF, with no other file taking the number), another run
another process, a bomb served by nginx.  The properties:

- the exit status is 0, 1, 2 or 130, with no traceback, and at most one line
  on stderr (``-q``): ``surge fetch: error: FILE: ...`` for exit 2;
- every record written before the fault is whole;
- ``--resume`` then completes the job to exactly one record per input.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import RESOLVE, memory_device

from surge.sim import SimInfo
from surge.testing.servers import free_port, wait_listening

SURGE = [sys.executable, "-m", "surge.cli"]
EXIT_STATUSES = {0, 1, 2, 130}
N_INPUTS = 24
# Kinds of hosts: bodies of several sizes, gzipped and chunked, so that every
# file grows while the run goes (the WARC and the bodies by tens of KiB).
KINDS = ("status-200", "gzip--big-20k", "chunked--big-8k", "status-404", "big-30k")

# The child: surge's command line, after a size limit and with a thread that
# closes one of its files at a point (see the module doc).
WRAPPER = textwrap.dedent(
    """
    import json, os, resource, runpy, sys, threading, time
    config = json.loads(sys.argv[1])
    if config["fsize"] is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (config["fsize"], resource.RLIM_INFINITY))
    close = config["close"]
    if close is not None:
        def position(fd):
            with open(f"/proc/self/fdinfo/{fd}") as info:
                return int(info.readline().split()[1])

        def closer():
            readonly = os.open(os.devnull, os.O_RDONLY)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for name in os.listdir("/proc/self/fd"):
                    fd = int(name)
                    try:
                        target = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
                        if (fd == 1) if close["name"] is None else target.startswith(close["name"]):
                            if position(fd) >= close["after"]:
                                os.dup2(readonly, fd)  # EBADF for its writer from now on
                                return
                    except OSError:
                        continue
                time.sleep(0.002)

        threading.Thread(target=closer, daemon=True).start()
    sys.argv = ["surge", *config["argv"]]
    runpy.run_module("surge.cli", run_name="__main__")
    """
)


@dataclass
class Run:
    returncode: int
    stdout: bytes
    stderr: str


def check_run(done: Run) -> None:
    """The exit status, no traceback, and the one line (with -q)."""
    assert done.returncode in EXIT_STATUSES, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) <= 1, done.stderr
    if done.returncode == 2:
        assert lines and lines[0].startswith("surge fetch: error: "), done.stderr
    if done.returncode == 0:
        assert not lines, done.stderr


def whole_records(data: bytes) -> list[int]:
    """The line numbers of ``data``'s records, each of which must be whole."""
    assert not data or data.endswith(b"\n"), data[-200:]
    got = [json.loads(line)["line"] for line in data.splitlines()]
    assert len(got) == len(set(got)), got
    return got


def surge(*args: str, stdin: bytes | None = None, timeout: float = 120) -> Run:
    done = subprocess.run([*SURGE, *args], input=stdin or b"", capture_output=True, timeout=timeout)
    return Run(done.returncode, done.stdout, done.stderr.decode("utf-8", "replace"))


# -- the property: each sink, each fault, at any point ----------------------------------------

#: Each sink and the faults that can reach it.
FAULTS: dict[str, tuple[str, ...]] = {
    "records": ("fsize", "full", "closed", "pipe"),
    "stdout": ("fsize", "full", "closed", "pipe", "closed-at-start"),
    "warc": ("fsize", "full", "closed", "pipe"),
    "har": ("fsize", "full", "closed", "pipe"),
    "trace": ("fsize", "full", "pipe"),
    "bodies": ("fsize",),
}
#: The flag of each sink that is a file, and its file name when it is a regular file.
FILES = {
    "records": ("-o", "out.jsonl"),
    "warc": ("--warc", "run.warc.gz"),
    "har": ("--har", "run.har"),
    "trace": ("--trace", "page.html"),
}


class FifoReader:
    """Reads a FIFO until ``limit`` bytes came, then closes it (the writer's next
    write is EPIPE); keeps it open until the writer came, so that its open never
    waits for a reader that left."""

    def __init__(self, path: Path, limit: int) -> None:
        os.mkfifo(path)
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.limit = limit
        self.got = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while not self.done.is_set():
                try:
                    data = os.read(self.fd, 65536)
                except BlockingIOError:
                    data = None
                if data:
                    self.got += len(data)
                    if self.got >= self.limit:
                        return
                elif data == b"" and self.got:
                    return  # the writer closed it
                time.sleep(0.001)
        finally:
            os.close(self.fd)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def run_with_fault(
    tmp: Path, argv: list[str], fault: str, sink: str, at: int
) -> tuple[Run, bytes | None]:
    """Run ``argv`` with ``fault`` at byte ``at`` of ``sink``; the run, and what
    stdout carried when it was a file or a pipe."""
    config: dict[str, Any] = {"fsize": None, "close": None, "argv": argv}
    if fault == "fsize":
        config["fsize"] = at
    elif fault == "closed":
        name = None if sink == "stdout" else FILES[sink][1]
        if sink in ("har", "trace"):  # written beside the name, renamed at the end
            name = f".{name}."
        config["close"] = {"name": name, "after": at}
    command = [sys.executable, "-c", WRAPPER, json.dumps(config)]
    stdout_file = tmp / "stdout.jsonl"
    options: dict[str, Any] = {"stderr": subprocess.PIPE}
    if sink == "stdout" and fault == "full":
        options["stdout"] = open("/dev/full", "wb")  # noqa: SIM115 - closed below
    elif sink == "stdout" and fault == "pipe":
        options["stdout"] = subprocess.PIPE
    elif sink == "stdout" and fault == "closed-at-start":
        options["preexec_fn"] = lambda: os.close(1)
        options["stdout"] = subprocess.DEVNULL
    else:
        options["stdout"] = open(stdout_file, "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, **options)
    carried = None
    if options["stdout"] is subprocess.PIPE:
        assert process.stdout is not None
        carried = process.stdout.read(at) if at else b""
        process.stdout.close()  # the reader goes away: EPIPE from here on
    try:
        _, err = process.communicate(timeout=120)
    finally:
        if hasattr(options["stdout"], "close"):
            options["stdout"].close()
    if (
        options["stdout"] is not subprocess.PIPE
        and sink == "stdout"
        and fault in ("fsize", "closed")
    ):
        carried = stdout_file.read_bytes()
    return Run(process.returncode, b"", err.decode("utf-8", "replace")), carried


@st.composite
def faults(draw: st.DrawFn) -> tuple[str, str, int]:
    sink = draw(st.sampled_from(sorted(FAULTS)), label="sink")
    fault = draw(st.sampled_from(FAULTS[sink]), label="fault")
    at = draw(st.integers(0, 60_000), label="at byte")
    return sink, fault, at


@settings(
    max_examples=int(os.environ.get("SURGE_FAULT_EXAMPLES", "10")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=faults())
def test_a_fault_in_any_sink_loses_nothing_and_resume_completes(
    sim: SimInfo, tmp_path_factory: pytest.TempPathFactory, case: tuple[str, str, int]
) -> None:
    sink, fault, at = case
    tmp = tmp_path_factory.mktemp("fault")
    source = tmp / "urls.txt"
    source.write_text(
        "".join(sim.url(f"i{i}--{KINDS[i % len(KINDS)]}.sim") + "\n" for i in range(N_INPUTS))
    )
    base = ["fetch", str(source), "-q", "--no-progress", "--resolve", RESOLVE, "-c", "4"]
    first = list(base)
    again = [*base, "--resume"]
    readers = []
    for name, (flag, file_name) in FILES.items():
        if name == "records" and sink == "stdout":
            continue  # the records go to stdout
        if name not in ("records", sink):
            continue
        regular = str(tmp / file_name)
        path = regular
        if name == sink and fault == "full":
            path = str(memory_device(tmp, "full"))  # never the machine's /dev/full
        elif name == sink and fault == "pipe":
            readers.append(FifoReader(tmp / f"fifo-{file_name}", at))
            path = str(tmp / f"fifo-{file_name}")
        first += [flag, path]
        again += [flag, regular if name == "records" or path != regular else path]
    if sink == "bodies":
        first += ["--output-dir", str(tmp / "bodies")]
        again += ["--output-dir", str(tmp / "bodies")]
    try:
        done, carried = run_with_fault(tmp, first, fault, sink, at)
    finally:
        for reader in readers:
            reader.stop()
    check_run(done)
    if carried is not None and fault != "pipe":
        lines = whole_records(carried)  # stdout in a file: whole records, each once
        if done.returncode == 0:
            assert sorted(lines) == list(range(1, N_INPUTS + 1))
    records = tmp / "out.jsonl"
    if sink == "stdout" or (sink == "records" and fault in ("full", "pipe")):
        return  # the records did not go to a file to resume
    whole_records(records.read_bytes())  # what is there is whole
    resumed = surge(*again)
    check_run(resumed)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(whole_records(records.read_bytes())) == list(range(1, N_INPUTS + 1))
    if sink == "warc" and fault in ("fsize", "closed"):
        from surge.bulk.warc import recover

        assert recover(tmp / "run.warc.gz") == 0  # no torn exchange anywhere
        # and every record's exchange is there once: none lost, none twice
        from warcio.archiveiterator import ArchiveIterator

        with (tmp / "run.warc.gz").open("rb") as stream:
            targets = [
                r.rec_headers.get_header("WARC-Target-URI")
                for r in ArchiveIterator(stream)
                if r.rec_type == "response"
            ]
        urls = [json.loads(line)["url"] for line in records.read_bytes().splitlines()]
        assert sorted(targets) == sorted(urls)


# -- one output, one run --------------------------------------------------------------------


def test_a_second_run_on_one_output_is_refused_and_the_first_completes(
    sim: SimInfo, tmp_path: Path
) -> None:
    """Two plain runs, and a --resume started while the first runs: both are
    refused naming the first's pid, and its file holds one record per input
    (before: 400 records for 300 inputs, and corrupt lines).

    The first run reads its inputs from a pipe that stays open until the
    others were refused: it cannot end before them, however slowly they start."""
    n = 150
    lines = [sim.url(f"c{i}--delay-100.sim") + "\n" for i in range(n)]
    source = tmp_path / "urls.txt"
    source.write_text("".join(lines))
    out = tmp_path / "out.jsonl"
    options = ["-o", str(out), "--resolve", RESOLVE, "-q"]
    args = ["fetch", str(source), *options]
    first = subprocess.Popen(
        [*SURGE, "fetch", "-", *options, "-c", "5"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdin is not None
    try:
        first.stdin.write("".join(lines[: n // 2]))
        first.stdin.flush()
        deadline = time.monotonic() + 60
        while (not out.exists() or out.stat().st_size < 1000) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.poll() is None, "the first run ended before the second started"
        for extra in (["-c", "50", "-i"], ["--resume"]):
            second = surge(*args, *extra)
            assert second.returncode == 2
            assert second.stderr == (
                f"surge fetch: error: {out}: in use by another run (pid {first.pid}); "
                "wait for it, or write elsewhere\n"
            )
        first.stdin.write("".join(lines[n // 2 :]))
    finally:
        _, err = first.communicate(timeout=120)  # closes its stdin: the inputs end
    assert first.returncode == 0, err
    assert sorted(whole_records(out.read_bytes())) == list(range(1, n + 1))


# -- --resume never destroys what it did not write ----------------------------------------------


#: The inputs of the --resume tests below: a record of line N is of INPUTS[N - 1].
INPUTS = ("http://127.0.0.1:9/", "http://127.0.0.1:9/b", "http://127.0.0.1:9/c")


def _record(line: int) -> str:
    given = INPUTS[line - 1] if line <= len(INPUTS) else "a.sim"
    return json.dumps(
        {
            "url": "http://a.sim/",
            "input": given,
            "line": line,
            "status": 200,
            "error": None,
            "error_detail": None,
            "elapsed_ms": 1.0,
            "bytes": 0,
            "attempts": 1,
            "final_url": "http://a.sim/",
            "timings": None,
        }
    )


FOREIGN = {
    "a JSON array": b'[{"url": "http://a.sim/", "line": 1}]',
    "garbage without a newline": bytes(range(256)) * 400,
    "a gzip file": gzip.compress(b"not records\n" * 1000),
    "the input list itself": b"http://a.sim/\nhttp://b.sim/\n",
    "a line number of 10**12": (_record(1) + "\n" + _record(10**12) + "\n").encode(),
    "a line number of 10**23": (_record(10**23) + "\n").encode(),
    "records, then a last line that is none": (_record(1) + "\n[1, 2, 3]").encode(),
    "objects that are not records": b'{"line": 1}\n{"line": 2}\n',
}


@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_resume_refuses_a_file_that_is_not_surges_records_and_leaves_it_unchanged(
    tmp_path: Path, kind: str
) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:9/\nhttp://127.0.0.1:9/b\n")
    out = tmp_path / "out.jsonl"
    out.write_bytes(FOREIGN[kind])
    before = hashlib.sha256(out.read_bytes()).hexdigest()
    done = surge("fetch", str(source), "-o", str(out), "--resume", "-q")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"surge fetch: error: {out}:") and done.stderr.count("\n") == 1
    assert done.stderr.endswith("not surge's records, so not resumed (the file is unchanged)\n")
    assert hashlib.sha256(out.read_bytes()).hexdigest() == before


def test_resume_keeps_a_whole_last_record_and_cuts_a_torn_one(tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("".join(f"{given}\n" for given in INPUTS))
    out = tmp_path / "out.jsonl"
    out.write_text(_record(1) + "\n" + _record(2))  # line 2 whole, its newline not written
    assert surge("fetch", str(source), "-o", str(out), "--resume", "-q").returncode == 0
    assert sorted(whole_records(out.read_bytes())) == [1, 2, 3]
    assert out.read_text().startswith(_record(1) + "\n" + _record(2) + "\n")  # kept, not redone
    out.write_text(_record(1) + "\n" + _record(2)[:40])  # line 2 cut
    assert surge("fetch", str(source), "-o", str(out), "--resume", "-q").returncode == 0
    assert sorted(whole_records(out.read_bytes())) == [1, 2, 3]


# -- every input is bounded -------------------------------------------------------------------

BIG = 256 * 1024 * 1024
RSS_LIMIT = 200 * 1024 * 1024


def _feed(write: Any, head: bytes, tail: bytes) -> None:
    """``head``, 256 MiB of one line (generated, never held), ``tail``."""
    block = b"a" * (1 << 20)
    write(head)
    for _ in range(BIG // len(block)):
        write(block)
    write(tail)


#: Runs its argv as a grandchild and writes the grandchild's ru_maxrss (KiB) to
#: the file named by SURGE_TEST_MAXRSS.  Linux keeps a process's peak RSS across
#: exec: surge started straight from this test process (vfork) would report the
#: test process's own peak - hundreds of MiB after a long test run - not its own.
#: Forked from this small interpreter, it starts from this one's few MiB.
_MEASURED = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
with open(os.environ["SURGE_TEST_MAXRSS"], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _peak_rss(args: list[str], feed: Any, *, stdin: bool) -> tuple[int, bytes, str, int]:
    """Run surge, feed it, and measure its own peak RSS (wait4's ru_maxrss, taken
    by a small parent of its own: see _MEASURED; a size, not a time); (status,
    stdout, stderr, peak bytes)."""
    maxrss = tempfile.NamedTemporaryFile(suffix=".maxrss", delete=False)  # noqa: SIM115
    maxrss.close()
    process = subprocess.Popen(
        [sys.executable, "-c", _MEASURED, *SURGE, *args],
        env={**os.environ, "SURGE_TEST_MAXRSS": maxrss.name},
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [
        threading.Thread(target=lambda: out.append(process.stdout.read())),  # type: ignore[union-attr]
        threading.Thread(target=lambda: err.append(process.stderr.read())),  # type: ignore[union-attr]
    ]
    for reader in readers:
        reader.start()
    with contextlib.suppress(BrokenPipeError):
        feed(process.stdin)
    if process.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
    _, status, _usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    with open(maxrss.name) as measured:
        peak_kib = int(measured.read() or 0)
    os.unlink(maxrss.name)
    for reader in readers:
        reader.join(timeout=60)
    return process.returncode, out[0], err[0].decode("utf-8", "replace"), peak_kib * 1024


def test_a_256_mib_input_line_is_one_error_record_in_bounded_memory(tmp_path: Path) -> None:
    """Read through a FIFO named as the input (the file reader), so that the
    256 MiB are generated as they are read, never written to disk."""
    fifo = tmp_path / "urls.txt"
    os.mkfifo(fifo)

    def feed(_: Any) -> None:
        with open(fifo, "wb") as pipe:
            _feed(pipe.write, b"http://127.0.0.1:9/\nhttp://", b"\nhttp://127.0.0.1:9/c\n")

    args = ["fetch", str(fifo), "-q", "--max-time", "5"]
    status, out, err, peak = _peak_rss(args, feed, stdin=False)
    assert peak < RSS_LIMIT, f"peak RSS {peak / 2**20:.0f} MiB"
    assert status == 0, err
    records = {r["line"]: r for r in map(json.loads, out.splitlines())}
    assert sorted(records) == [1, 2, 3]
    assert records[2]["error"] == "invalid_url" and records[2]["status"] is None
    assert "longer than the 65,536-byte bound" in records[2]["error_detail"]
    assert records[2]["input"].startswith("http://aaaa") and len(records[2]["input"]) < 300
    assert records[3]["error"] == "connect_refused"  # the line after it is read as usual


def test_a_256_mib_csv_row_is_one_error_record_in_bounded_memory() -> None:
    args = ["fetch", "-", "-q", "--input-format", "csv", "--max-time", "5"]
    status, out, err, peak = _peak_rss(
        args,
        lambda stdin: _feed(
            stdin.write,
            b"rank,url\n1,http://127.0.0.1:9/\n2,http://",
            b"\n3,http://127.0.0.1:9/c\n",
        ),
        stdin=True,
    )
    assert peak < RSS_LIMIT, f"peak RSS {peak / 2**20:.0f} MiB"
    assert status == 0, err
    records = {r["line"]: r for r in map(json.loads, out.splitlines())}
    assert sorted(records) == [2, 3, 4]
    assert records[3]["error"] == "invalid_url"
    assert "65,536-byte bound" in records[3]["error_detail"]


def test_a_csv_record_over_many_lines_past_the_bound_stops_with_one_line() -> None:
    head = b"rank,url\n1,http://127.0.0.1:9/\n2,http://127.0.0.1:9/b\n"
    rows = head + b'3,"' + b"x\n" * 40_000 + b'"\n'
    done = surge("fetch", "-", "-q", "--input-format", "csv", stdin=rows)
    assert done.returncode == 2
    assert done.stderr == (
        "surge fetch: error: <stdin>:4: a CSV record longer than the 65,536-byte bound "
        "(--max-input-line), over several lines (an unclosed quote?)\n"
    )
    assert sorted(whole_records(done.stdout)) == [2, 3]  # the records before it are out


def test_data_from_a_file_is_bounded_and_stdin_is_read_once(tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:9/\n")
    cases = {
        ("-d", "@/dev/zero"): "-d @/dev/zero: larger than the 67,108,864-byte cap",
        ("--data-binary", "@/dev/zero"): "-d @/dev/zero: larger than the 67,108,864-byte cap",
        ("-d", f"@{tmp_path}"): f"-d @{tmp_path}: cannot read: [Errno 21] Is a directory",
    }
    for flags, message in cases.items():
        done = surge("fetch", str(source), *flags)
        assert (done.returncode, done.stderr) == (2, f"surge fetch: error: {message}\n")
    done = surge("fetch", "-", "-d", "@-", stdin=b"http://127.0.0.1:9/\n")
    assert done.returncode == 2
    assert done.stderr == (
        "surge fetch: error: -d @-: reads stdin, the input too; give the body from a file\n"
    )


# -- standard streams ---------------------------------------------------------------------


def _closed(fds: tuple[int, ...]) -> Any:
    return lambda: [os.close(fd) for fd in fds]


@pytest.mark.parametrize(
    ("args", "closed", "message"),
    [
        (["fetch", "-"], (0,), "surge fetch: error: <stdin>: cannot read: stdin is closed"),
        (["fetch", "{urls}"], (1,), "surge fetch: error: stdout: cannot write: it is closed"),
        (["fetch", "{urls}", "-d", "@-"], (0,), "surge fetch: error: -d @-: cannot read: stdin"),
        (["trace", "http://127.0.0.1:9/"], (1,), "surge trace: error: stdout: cannot write"),
    ],
)
def test_a_closed_stdin_or_stdout_is_a_usage_error(
    tmp_path: Path, args: list[str], closed: tuple[int, ...], message: str
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/\n")
    done = subprocess.run(
        [*SURGE, *(a.replace("{urls}", str(urls)) for a in args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=_closed(closed),
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


def test_a_closed_output_with_o_given_is_not_needed(tmp_path: Path) -> None:
    """stdout closed but unused (-o): the run goes on, and the records file does
    not take descriptor 1."""
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/\n")
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [*SURGE, "fetch", str(urls), "-o", str(out), "-q"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=_closed((1,)),
    )
    assert done.returncode == 0, done.stderr
    assert whole_records(out.read_bytes()) == [1]


@pytest.mark.parametrize("command", ["fetch", "trace"])
def test_stdout_on_a_full_disk_or_a_closed_pipe_is_one_line(tmp_path: Path, command: str) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/\n" * 3)
    args = [*SURGE, command, str(urls) if command == "fetch" else "http://127.0.0.1:9/"]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"surge {command}: error: stdout: cannot write: [Errno 28] No space left on device"
    )
    piped = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert piped.stdout is not None and piped.stderr is not None
    piped.stdout.close()  # the reader went away before the first record
    err = piped.stderr.read()
    piped.stderr.close()
    assert piped.wait(timeout=60) == 2 and "Traceback" not in err
    assert (
        err.splitlines()[-1]
        == f"surge {command}: error: stdout: cannot write: [Errno 32] Broken pipe"
    )


# -- out of descriptors -----------------------------------------------------------------------


def _open_files_limit(limit: int) -> Any:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_every_open_files_limit_from_4_to_32_is_one_line_or_a_run(tmp_path: Path) -> None:
    """Never a traceback or an abort (libuv's, exit 134).  The interpreter runs
    with -S and the parent's sys.path: at ``ulimit -n 4`` Python 3.11's own
    start-up fails in a venv whose setuptools left distutils-precedence.pth (the
    site module keeps the .pth open while the import in it reads a directory),
    before any of surge runs; -S leaves the start-up to surge's code."""
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/\n" * 3)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    outcomes = {}
    for limit in range(4, 33):
        out = tmp_path / f"out{limit}.jsonl"
        done = subprocess.run(
            [sys.executable, "-S", "-m", "surge.cli", "fetch", str(urls), "-o", str(out), "-q"],
            capture_output=True,
            text=True,
            timeout=120,
            env=environment,
            preexec_fn=_open_files_limit(limit),
        )
        assert "Traceback" not in done.stderr, (limit, done.stderr)
        if done.returncode == 0:
            assert done.stderr == "" and len(whole_records(out.read_bytes())) == 3
        else:
            assert done.returncode == 2, (limit, done.returncode, done.stderr)
            assert done.stderr.startswith(
                f"surge fetch: error: the open-files limit ({limit}) leaves"
            ), done.stderr
            assert done.stderr.count("\n") == 1 and not out.exists()
        outcomes[limit] = done.returncode
    assert outcomes[4] == 2 and outcomes[32] == 0
    # one threshold: below it one line, from it on a run
    assert sorted(outcomes.values(), reverse=True) == [outcomes[n] for n in range(4, 33)]


# -- decoded bodies honour the cap on disk ------------------------------------------------------

CAP = 1_000_000


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nginx (Debian's) serving 64 MiB of zeros as some 64 KiB of gzip and a
    few hundred bytes of brotli, with their Content-Encoding; its base URL."""
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if binary is None:
        message = "nginx is not installed (apt-get install nginx; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: these tests must not be skipped)", pytrace=False)
        pytest.skip(message)
    brotli = pytest.importorskip("brotli")
    base = tmp_path_factory.mktemp("nginx")
    zeros = bytes(64 * 1024 * 1024)
    (base / "bomb.gzip").write_bytes(gzip.compress(zeros, 9))
    (base / "bomb.br").write_bytes(brotli.compress(zeros, quality=5))
    port = free_port()
    (base / "nginx.conf").write_text(
        f"""
daemon off; master_process off; pid {base}/nginx.pid; error_log {base}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off; default_type application/octet-stream;
    client_body_temp_path {base}; proxy_temp_path {base}; fastcgi_temp_path {base};
    uwsgi_temp_path {base}; scgi_temp_path {base};
    server {{
        listen 127.0.0.1:{port}; root {base};
        location ~ \\.gzip$ {{ add_header Content-Encoding gzip; }}
        location ~ \\.br$ {{ add_header Content-Encoding br; }}
    }}
}}
"""
    )
    process = subprocess.Popen(
        [binary, "-c", str(base / "nginx.conf"), "-p", str(base), "-e", str(base / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(port, process, "nginx")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def test_bombs_saved_with_output_dir_leave_at_most_the_cap_on_disk(
    bombs: str, tmp_path: Path
) -> None:
    """Before: 209,715,200 decoded bytes on disk for each, and error null."""
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{bombs}/bomb.gzip\n{bombs}/bomb.br\n")
    bodies = tmp_path / "bodies"
    for extra in ([], ["--warc", str(tmp_path / "run.warc.gz")]):
        done = surge(
            "fetch",
            str(urls),
            "-q",
            "--output-dir",
            str(bodies),
            "--max-filesize",
            str(CAP),
            *extra,
        )
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines()]
        assert [(r["error"], r["body_path"]) for r in records] == [("body_too_large", None)] * 2
        on_disk = sum(f.stat().st_size for f in bodies.rglob("*") if f.is_file())
        assert on_disk == 0  # at most the cap was written, and the partial files removed
    # the WARC keeps what the wire carried, which the cap bounds: both exchanges
    from surge.bulk.warc import recover

    assert recover(tmp_path / "run.warc.gz") == 0
    assert (tmp_path / "run.warc.gz").stat().st_size > 60_000


def test_the_apis_content_and_stream_honour_the_cap_on_a_bomb(bombs: str) -> None:
    from surge.errors import BodyTooLarge
    from surge.http import Client

    with Client(body_cap=CAP) as client:
        for coding in ("gzip", "br"):
            with pytest.raises(BodyTooLarge):
                client.get(f"{bombs}/bomb.{coding}")
            got = 0
            with (
                client.stream("GET", f"{bombs}/bomb.{coding}") as response,
                pytest.raises(BodyTooLarge),
            ):
                for piece in response.iter_bytes():
                    got += len(piece)
            assert got <= CAP


# -- found by a hostile round after the fixes above -----------------------------------------


def test_a_slow_stdin_holds_neither_the_records_nor_ctrl_c(tmp_path: Path) -> None:
    """stdin sends one URL and then nothing: its record is written while the run
    waits for the next line, and Ctrl-C stops the run (before: the wait held the
    event loop, so the record was never flushed and only SIGKILL ended it)."""
    out = tmp_path / "out.jsonl"
    process = subprocess.Popen(
        [*SURGE, "fetch", "-", "-o", str(out), "-q"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None
    try:
        process.stdin.write("http://127.0.0.1:9/\n")
        process.stdin.flush()
        deadline = time.monotonic() + 30
        while not (out.exists() and out.read_bytes().endswith(b"\n")):
            assert time.monotonic() < deadline, "the record was not written while stdin waited"
            time.sleep(0.05)
        assert whole_records(out.read_bytes()) == [1]
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        process.stdin.close()
    assert process.returncode == 130, err
    assert err == "surge fetch: stopped by SIGINT; the records written are kept (--resume)\n"


def test_sighup_stops_a_run_with_what_is_done_written(sim: SimInfo, tmp_path: Path) -> None:
    """The terminal going away is SIGTERM's case (before: the default action
    killed the process, dropping the records not yet flushed)."""
    source = tmp_path / "urls.txt"
    source.write_text("".join(sim.url(f"h{i}--delay-100.sim") + "\n" for i in range(100)))
    out = tmp_path / "out.jsonl"
    args = ["fetch", str(source), "-o", str(out), "--resolve", RESOLVE, "-q", "-c", "5"]
    process = subprocess.Popen([*SURGE, *args], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while (not out.exists() or out.stat().st_size < 1000) and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGHUP)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 129, err
    assert "stopped by SIGHUP" in err
    assert 0 < len(whole_records(out.read_bytes())) < 100
    assert surge(*args, "--resume").returncode == 0
    assert sorted(whole_records(out.read_bytes())) == list(range(1, 101))


def test_an_output_deleted_under_the_run_stops_it(sim: SimInfo, tmp_path: Path) -> None:
    """Before: the run went on writing into the deleted file and exited 0."""
    source = tmp_path / "urls.txt"
    source.write_text("".join(sim.url(f"d{i}--delay-100.sim") + "\n" for i in range(100)))
    out = tmp_path / "out.jsonl"
    process = subprocess.Popen(
        [*SURGE, "fetch", str(source), "-o", str(out), "--resolve", RESOLVE, "-q", "-c", "5"],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while (not out.exists() or out.stat().st_size < 1000) and time.monotonic() < deadline:
        time.sleep(0.02)
    out.unlink()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert err == (
        f"surge fetch: error: {out}: deleted or replaced during the run (what was written to it"
        " went with it)\n"
    )


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (["-o", "{tmp}/same", "--warc", "{tmp}/same"], "{tmp}/same: given for both -o and --warc"),
        (["-o", "{tmp}/same", "--har", "{tmp}/same"], "{tmp}/same: given for both -o and --har"),
        (["--trace", "{urls}"], "{urls}: is the input file; write the --trace file elsewhere"),
        (["--har", "{urls}"], "{urls}: is the input file; write the --har file elsewhere"),
        (
            ["-o", "{tmp}/fifo", "--resume"],
            "{tmp}/fifo: --resume needs a regular file to read back",
        ),
    ],
)
def test_outputs_that_would_destroy_each_other_or_wait_for_ever_are_refused(
    tmp_path: Path, case: list[str], message: str
) -> None:
    """Before: two outputs on one file, or an output on the input, wrote over
    each other with exit 0; --resume onto a FIFO waited for a writer for ever."""
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/\n")
    os.mkfifo(tmp_path / "fifo")

    def filled(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{urls}", str(urls))

    done = surge("fetch", str(urls), "-q", *map(filled, case), timeout=30)
    assert (done.returncode, done.stderr) == (2, f"surge fetch: error: {filled(message)}\n")
    assert urls.read_text() == "http://127.0.0.1:9/\n"
    assert not (tmp_path / "same").exists()


def test_stdin_by_any_name_is_read_once_and_a_closed_stdout_by_name_is_refused(
    tmp_path: Path,
) -> None:
    """-d @/dev/stdin would eat the URL list (0 records, exit 0); -o /dev/stdout
    with stdout closed would write to the /dev/null standing in for it."""
    done = surge("fetch", "-", "-d", "@/dev/stdin", stdin=b"http://127.0.0.1:9/\n")
    assert done.returncode == 2
    assert done.stderr.startswith("surge fetch: error: -d @/dev/stdin: reads stdin, the input too")
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/\n")
    closed = subprocess.run(
        [*SURGE, "fetch", str(urls), "-o", "/dev/stdout"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=_closed((1,)),
    )
    assert (closed.returncode, closed.stderr) == (
        2,
        "surge fetch: error: /dev/stdout: cannot write: stdout is closed\n",
    )
