"""``surge watch [options] -- CMD...``: run CMD, every Python process in it recorded.

How the recording gets into CMD: the directory of a bootstrap
``sitecustomize.py`` goes first on ``PYTHONPATH`` (with ``SURGE_WATCH_DIR``, where
each process writes its data at exit).  Python runs it at start-up, before the
program, in every Python process CMD starts (``python prog.py``, a console
script, ``pytest``, a subprocess of those), whatever the command line looks
like; wrapping the command line in ``python -m surge.watch`` instead would see
only a command that starts with ``python``.  The bootstrap runs any
``sitecustomize`` it hides.

CMD's arguments, stdin, stdout and stderr are its own (inherited, untouched);
the summary goes to stderr after CMD ends, and ``surge watch`` exits with CMD's
status (128 + N when a signal N ended it).  SIGINT, SIGTERM and SIGHUP sent to
``surge watch`` are passed on to CMD; a Python process of CMD that a signal or
``os._exit`` ends still hands its recording back, marked partial, and the
report is made from what came back.  On Linux, CMD is killed (SIGTERM, so it
still hands back what it recorded) when ``surge watch`` dies, even by SIGKILL
(``PR_SET_PDEATHSIG``): no orphan is left running.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from surge.terminal import die
from surge.watch.instrumentors import instrumented

BOOTSTRAP = Path(__file__).parent / "_bootstrap"


def _writable(option: str, path: str | None) -> None:
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        die("surge watch", f"{option} {path}: cannot write in {directory}")


def _environment(directory: str, log: str) -> dict[str, str]:
    import surge

    env = os.environ.copy()
    paths = [str(BOOTSTRAP), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["SURGE_WATCH_DIR"] = directory
    env["SURGE_WATCH_LOG"] = log
    env["SURGE_WATCH_PATH"] = str(Path(surge.__file__).parent.parent)
    env["SURGE_WATCH_PID"] = str(os.getpid())
    return env


#: prctl's option that has the kernel signal a process when its parent dies (Linux).
PR_SET_PDEATHSIG = 1


def _dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``Popen``: the child is sent SIGTERM when this process
    dies (Linux's ``PR_SET_PDEATHSIG``); ``None`` where there is no such call.
    Looked up here, before the fork: the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: as if after
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _runs(directory: str) -> list[dict[str, Any]]:
    """Each process's data (two for a pid that exec'd: before and after); a
    process the command started in turn that handed back nothing (its
    ``<pid>.lost`` marker left) is in its parent's ``lost_children`` (the
    first process's, if its parent is not there either)."""
    from surge.watch._child import LOST_SUFFIX

    runs = []
    for path in glob.glob(os.path.join(directory, "*.json")):
        try:
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
        except (OSError, ValueError):
            continue
    runs.sort(key=lambda run: run.get("started", 0.0))
    by_pid = {run.get("pid"): run for run in runs}
    for path in sorted(glob.glob(os.path.join(directory, f"*{LOST_SUFFIX}"))):
        try:
            pid = int(os.path.basename(path).removesuffix(LOST_SUFFIX))
            with open(path, encoding="ascii") as f:
                parent = int(f.read() or 0)
        except (OSError, ValueError):
            continue
        if pid in by_pid or not runs:
            continue  # written after all
        owner = by_pid.get(parent, runs[0])
        owner.setdefault("lost_children", []).append(pid)
    return runs


def ended_by(returncode: int) -> str | None:
    """How a command ended, when a signal ended it: the signal's name."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_watched(
    command: list[str], log: str | None = None
) -> tuple[int, float, list[dict[str, Any]], str, str | None]:
    """Run ``command`` recorded; (its exit status as a shell reports it, wall
    seconds, each Python process's data, the log's path, the signal that ended
    it if one did)."""
    directory = tempfile.mkdtemp(prefix="surge-watch-")
    log = log or os.path.join(directory, "watch.log")
    env = _environment(directory, log)
    started = time.perf_counter()
    try:
        process = subprocess.Popen(command, env=env, preexec_fn=_dies_with_parent())
    except OSError as error:
        shutil.rmtree(directory, ignore_errors=True)
        from surge.trace.redact import command_label

        die("surge watch", f"cannot run {command_label(command[:1])}: {error.strerror or error}")

    def forward(signum: int, frame: FrameType | None) -> None:
        if process.poll() is None:
            process.send_signal(signum)

    previous = {
        s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        while True:
            try:
                returncode = process.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - the handler forwards it
                continue
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    wall = time.perf_counter() - started
    runs = _runs(directory)
    if log.startswith(directory) and os.path.exists(log) and os.path.getsize(log):
        kept = os.path.join(tempfile.gettempdir(), f"surge-watch-{os.getpid()}.log")
        shutil.copyfile(log, kept)
        log = kept
    shutil.rmtree(directory, ignore_errors=True)
    status = returncode if returncode >= 0 else 128 - returncode
    return status, wall, runs, log, ended_by(returncode)


@click.command(
    "watch",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--report", "report_path", metavar="FILE.json", help="Write the findings as JSON.")
@click.option(
    "--html", "html_path", metavar="FILE", help="Write the waterfall page with the findings."
)
@click.option(
    "--trace-json",
    "trace_json_path",
    metavar="FILE",
    help="Write a Chrome trace (opens in Perfetto and the Firefox Profiler).",
)
@click.option(
    "--otlp", "otlp_url", metavar="URL", help="Send OpenTelemetry spans to an OTLP/HTTP collector."
)
@click.option("--log", "log_path", metavar="FILE", help="Where watch logs its own errors.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.pass_context
def watch_command(
    ctx: click.Context,
    report_path: str | None,
    html_path: str | None,
    trace_json_path: str | None,
    otlp_url: str | None,
    log_path: str | None,
    command: tuple[str, ...],
) -> None:
    """Run CMD and show where its network time went, and why.

    \b
      surge watch -- python prog.py args...
      surge watch --report watch.json --html watch.html -- python prog.py

    Every Python process CMD starts is recorded: {instrumented}. The summary
    (findings, per-host and per-database tables) goes to stderr when CMD ends;
    surge watch exits with CMD's status.
    """
    for option, path in (("--report", report_path), ("--html", html_path)):
        _writable(option, path)
    _writable("--trace-json", trace_json_path)
    _writable("--log", log_path)
    if otlp_url is not None:
        import importlib.util

        from surge.extras import install_hint
        from surge.watch.export import otlp_endpoint

        if importlib.util.find_spec("opentelemetry") is None:
            die("surge watch", f"--otlp needs the OpenTelemetry SDK: {install_hint('watch')}")

        try:
            otlp_endpoint(otlp_url)
        except ValueError as error:
            die("surge watch", str(error))
    from surge.watch.report import deliver

    argv = list(command)
    status, wall, runs, log, signalled = run_watched(argv, log_path)
    if not runs:
        _say(
            "surge watch: no Python process reported back (did CMD run Python? "
            "one killed by SIGKILL reports nothing)"
        )
    else:
        try:
            deliver(
                runs,
                wall,
                argv,
                report_path=report_path,
                html_path=html_path,
                trace_json_path=trace_json_path,
                otlp_url=otlp_url,
                command_ended_by=signalled,
                new_line=_open_line(runs),
            )
        except Exception as error:  # the program ran: its exit status stands
            from surge.trace.redact import safe_text

            _say(safe_text(f"surge watch: could not report: {type(error).__name__}: {error}"))
    if any(run.get("watch_errors") for run in runs) or (
        os.path.exists(log) and os.path.getsize(log)
    ):
        _say(f"surge watch: its own errors are logged in {log}")
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    ctx.exit(status)


# what is recorded, listed from the instrumentors' registry (one list, theirs)
watch_command.help = (watch_command.help or "").replace("{instrumented}", instrumented())


def _open_line(runs: list[dict[str, Any]]) -> bool:
    """Whether the last of the processes that wrote to this stderr left a line open."""
    from surge.watch._stderr import identity

    here = identity()
    ours = [run for run in runs if here is not None and run.get("stderr_id") == here]
    if not ours:
        return False
    last = max(ours, key=lambda run: run.get("started", 0.0) + run.get("wall_s", 0.0))
    return bool(last.get("stderr_open_line"))


def _say(line: str) -> None:
    """A line on stderr, if stderr is still there (a closed terminal: SIGHUP)."""
    with contextlib.suppress(OSError):
        click.echo(line, err=True)
