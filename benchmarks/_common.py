"""Helpers shared by surge's benchmark scripts: timing, tables, JSON and machine info.

Every benchmark in this folder measures surge against the tools people use today
*in the same run*, prints a table per section on stdout and writes every raw number
to a JSON file together with a description of the machine, so that a result can be
read again later and compared with runs made elsewhere.

Nothing here imports surge: a benchmark must still be able to say "surge is not
installed" rather than crash at import time.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime as _dt
import gc
import importlib.util
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

# Bytecode as an installed package has it.  This machine's environment sets
# PYTHONDONTWRITEBYTECODE=1, so every Python child compiled surge's ~115 modules
# from source on each start (~0.16 s of CPU, a third of ``surge s3 cp``'s
# start-up) while boto3, installed by pip, read its compiled bytecode.  pip
# compiles a package's bytecode when it installs it: the benchmarks' children
# may write and read it too.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# ... and compiled before any timed run, not by the first (found, not imported).
_surge_spec = importlib.util.find_spec("surge")
if _surge_spec is not None and _surge_spec.submodule_search_locations:
    compileall.compile_dir(_surge_spec.submodule_search_locations[0], quiet=1)

__all__ = [
    "PROXY_VARIABLES",
    "ChildRun",
    "announce",
    "payload",
    "print_targets",
    "read_outcomes",
    "surge_fetch_sim",
    "Table",
    "Target",
    "Timer",
    "best_of",
    "fmt_ns",
    "fmt_s",
    "gc_paused",
    "machine_info",
    "parse_count",
    "parse_sections",
    "percentile",
    "progress",
    "run_child",
    "stop_process",
    "surge_command",
    "timer",
    "write_invalid_input",
    "write_json",
]


# -- timing ------------------------------------------------------------------------


@dataclass
class Timer:
    """Elapsed wall-clock seconds of a ``with timer() as t:`` block (``t.s`` after it)."""

    start: float = 0.0
    s: float = 0.0


@contextmanager
def timer() -> Iterator[Timer]:
    """Time the body with :func:`time.perf_counter` (monotonic, highest resolution)."""
    t = Timer(start=time.perf_counter())
    try:
        yield t
    finally:
        t.s = time.perf_counter() - t.start


@contextmanager
def gc_paused() -> Iterator[None]:
    """Switch the cyclic garbage collector off for the body, as :mod:`timeit` does.

    Peers allocate different numbers of objects per operation; a collection that
    happens to fall inside one peer's timed phase would be charged to that peer.
    """
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def best_of(fn: Callable[[], float | None], repeat: int = 5) -> tuple[float, list[float]]:
    """Run ``fn`` ``repeat`` times and return (the fastest time, all times) in seconds.

    If ``fn`` returns a number, that is taken as its own measurement (so it can
    leave set-up out of the timing); if it returns None, the whole call is timed.
    The minimum is the usual estimator for "the cost of the code": noise (other
    processes, frequency changes) only ever adds time.
    """
    times: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        measured = fn()
        elapsed = time.perf_counter() - start
        times.append(elapsed if measured is None else measured)
    return min(times), times


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already *sorted* values, nearest-rank method."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# -- formatting --------------------------------------------------------------------


def fmt_s(seconds: float | None) -> str:
    """Seconds as a short human string: ``812 us``, ``35.2 ms``, ``4.10 s``."""
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_ns(ns: float | None) -> str:
    """Nanoseconds per operation with a thousands separator: ``1,234``."""
    if ns is None or math.isnan(ns):
        return "-"
    return f"{ns:,.0f}"


@dataclass
class Target:
    """One of an issue's targets, judged from a run's own numbers."""

    name: str
    wanted: str
    measured: str
    met: bool | None  # None: could not be checked

    def line(self) -> str:
        verdict = {True: "MET", False: "NOT MET", None: "NOT CHECKED"}[self.met]
        return f"{verdict:<11}  {self.name}: {self.measured} (target: {self.wanted})"


@dataclass
class Table:
    """A plain-text table with aligned columns, for stdout.

    Numbers and strings are right-aligned except the first column, which holds
    the row's name. Cells are converted with ``str``: format them before adding.
    """

    title: str
    columns: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        """Append one row; missing trailing cells are left blank."""
        row = ["" if c is None else str(c) for c in cells]
        if len(row) > len(self.columns):
            raise ValueError(f"{len(row)} cells for {len(self.columns)} columns")
        self.rows.append(row + [""] * (len(self.columns) - len(row)))

    def note(self, text: str) -> None:
        """Add a line printed under the table."""
        self.notes.append(text)

    def render(self) -> str:
        """The table as text: title, header, rule, rows, notes."""
        widths = [len(c) for c in self.columns]
        for row in self.rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

        def line(cells: Iterable[str]) -> str:
            parts = [
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
            ]
            return "  ".join(parts).rstrip()

        out = [self.title, line(self.columns), line("-" * w for w in widths)]
        out += [line(row) for row in self.rows]
        out += [f"  {n}" for n in self.notes]
        return "\n".join(out)

    def print(self) -> None:
        """Print the table and a blank line, flushing so progress shows in pipes."""
        print(self.render() + "\n", flush=True)


# -- results -----------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(packages: Iterable[str] = ()) -> dict[str, Any]:
    """What a reader needs to judge the numbers: CPU, cores, load, Python, versions, date.

    ``packages`` are distribution names (``"sqlalchemy"``); a package that is not
    installed is reported as None rather than omitted, so its absence is visible.
    The load average is recorded because these benchmarks often run on shared
    machines: a load above the core count means the numbers are pessimistic.
    """
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        load: list[float] | None = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": versions,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "argv": sys.argv,
    }


def write_json(path: str | os.PathLike[str], payload: Any) -> Path:
    """Write ``payload`` as indented JSON, creating parent folders; return the path.

    NaN and infinities are written as null (strict JSON has no spelling for them).
    """

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(clean(payload), indent=2, allow_nan=False) + "\n", "utf-8")
    tmp.replace(target)
    return target


# -- child processes ---------------------------------------------------------------

#: Seconds between two RSS samples of a child (run_child(poll_rss=True)).
RSS_POLL_S = 0.25


@dataclass
class ChildRun:
    """How a child process went: exit status, wall, CPU (wait4), peak RSS, killed."""

    status: int | None
    wall_s: float
    cpu_s: float
    maxrss_bytes: int
    killed: bool
    rss_samples: list[tuple[float, int]]
    #: The child's own peak RSS (VmHWM of /proc/PID/status, last read while polling);
    #: 0 unless polled.  Unlike ru_maxrss, it does not inherit the parent's peak:
    #: a forked child's maxrss starts from the parent's address space at exec.
    hwm_bytes: int = 0


def run_child(
    command: list[str],
    limit_s: float,
    *,
    poll_rss: bool = False,
    stdout: int | None = None,
    env: dict[str, str] | None = None,
) -> tuple[ChildRun, subprocess.Popen[bytes]]:
    """Run ``command`` in its own process group, reap it with ``os.wait4`` (killing the
    group at ``limit_s``), optionally polling its RSS; stderr goes to a pipe-free file."""
    rss: list[tuple[float, int]] = []
    started = time.perf_counter()
    child = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    watched = None
    if poll_rss:
        import psutil

        with contextlib.suppress(psutil.Error):
            watched = psutil.Process(child.pid)
    deadline = time.monotonic() + limit_s
    killed = False
    next_poll = 0.0
    hwm = 0
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid != 0:
            break
        now = time.monotonic()
        if now >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            killed = True
            pid, status, usage = os.wait4(child.pid, 0)
            break
        if watched is not None and now >= next_poll:
            next_poll = now + RSS_POLL_S
            with contextlib.suppress(Exception):
                rss.append((time.perf_counter() - started, int(watched.memory_info().rss)))
            hwm = max(hwm, _vm_hwm(child.pid))
        time.sleep(0.01 if watched is None else 0.02)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    return (
        ChildRun(
            status=child.returncode,
            wall_s=wall,
            cpu_s=usage.ru_utime + usage.ru_stime,
            maxrss_bytes=int(usage.ru_maxrss) * 1024,
            killed=killed,
            rss_samples=rss,
            hwm_bytes=hwm,
        ),
        child,
    )


def stop_process(process: subprocess.Popen[Any]) -> None:
    """A server the benchmark started: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process so far (Linux:
    /proc/PID/stat): a server's own share of a run."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm_hwm(pid: int) -> int:
    """The peak RSS of ``pid``'s address space (Linux), 0 if unknown."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def surge_fetch_sim(
    input_path: str, out_path: str, concurrency: int, timeout: float, *extra: str
) -> list[str]:
    """``surge fetch`` of a file of simulated hosts as the benchmarks run it: ``-L``,
    ``timeout`` as both deadlines, ``*.sim`` resolved to 127.0.0.1, no summary."""
    return [
        *surge_command(),
        "fetch",
        input_path,
        "-o",
        out_path,
        "-q",
        "-c",
        str(concurrency),
        "--max-time",
        f"{timeout:g}",
        "--connect-timeout",
        f"{timeout:g}",
        "-L",
        "--resolve",
        "*.sim:*:127.0.0.1",
        *extra,
    ]


def read_outcomes(path: str) -> list[Any]:
    """The ``surge.bench.peers.Outcome`` of each whole record of a JSONL output."""
    from surge.bench.peers import Outcome  # here: importing _common needs no surge

    outcomes = []
    with open(path) as out:
        for line in out:
            if not line.endswith("\n"):
                break
            record = json.loads(line)
            error = record["error"]
            status = record["status"] if error is None else None
            outcomes.append(Outcome(record["url"], status, error, record["elapsed_ms"]))
    return outcomes


def surge_command() -> list[str]:
    """The ``surge`` console script of this interpreter (else the same via ``-c``)."""
    script = Path(sys.executable).parent / "surge"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from surge.cli import main; sys.exit(main())"]


# -- arguments, inputs, environment ------------------------------------------------

#: Proxy settings every benchmark drops: all traffic is to 127.0.0.1.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY")


def progress(message: str) -> None:
    """A progress line on stderr (tables go to stdout)."""
    print(f"  .. {message}", file=sys.stderr, flush=True)


def parse_count(text: str) -> int:
    """``"10k"`` -> 10000, ``"1M"`` -> 1000000, ``"2,500"`` -> 2500."""
    text = text.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale != 1 else text) * scale)


def parse_sections(
    parser: argparse.ArgumentParser, only: str | None, sections: Sequence[str]
) -> list[str]:
    """The sections ``--only`` names (comma-separated; all when None), checked."""
    chosen = [s.strip() for s in (only or ",".join(sections)).split(",") if s.strip()]
    unknown = set(chosen) - set(sections)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {sections}")
    return chosen


def write_invalid_input(path: str, lines: int, http_port: int, real_every: int) -> None:
    """``lines`` URLs, almost all ``http://h<i>.invalid/`` (surge's resolver fails
    ``.invalid`` at once, RFC 6761), one in ``real_every`` a simulated host."""
    chunk = 200_000
    with open(path, "w") as out:
        for start in range(0, lines, chunk):
            stop = min(lines, start + chunk)
            block = [f"http://h{i}.invalid/\n" for i in range(start, stop)]
            first = start + (real_every // 2 - start) % real_every
            for i in range(first, stop, real_every):
                block[i - start] = f"http://r{i}--status-200.sim:{http_port}/\n"
            out.write("".join(block))


# -- a script's frame --------------------------------------------------------------


def announce(title: str, info: dict[str, Any], quick: bool) -> None:
    """The first line of a run: what ran, on what machine, under what load."""
    print(
        f"{title} -- {info['cpu_model']}, {info['cpu_count']} cores, "
        f"load {info['load_average']}, Python {info['python']}, "
        f"{'quick' if quick else 'full'} run\n",
        flush=True,
    )


def print_targets(targets: Sequence[Target], quick: bool) -> None:
    print("targets" + (" (quick run: sizes too small to judge)" if quick else ""))
    for target in targets:
        print("  " + target.line())


def payload(
    name: str,
    info: dict[str, Any],
    settings: dict[str, Any],
    results: dict[str, Any],
    targets: Sequence[Target],
    started: float,
    **extra: Any,
) -> dict[str, Any]:
    """What a script writes to its JSON file (``started``: its perf_counter at start)."""
    from dataclasses import asdict

    return {
        "benchmark": name,
        "machine": info,
        "load_average_after": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "settings": settings,
        **extra,
        "results": results,
        "targets": [asdict(t) for t in targets],
        "elapsed_s": time.perf_counter() - started,
    }
