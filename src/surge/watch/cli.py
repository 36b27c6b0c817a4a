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
``surge watch`` are passed on to CMD.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from surge.terminal import die

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
    return env


def _runs(directory: str) -> list[dict[str, Any]]:
    runs = []
    for path in glob.glob(os.path.join(directory, "*.json")):
        try:
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
        except (OSError, ValueError):
            continue
    return sorted(runs, key=lambda run: run.get("started", 0.0))


def run_watched(
    command: list[str], log: str | None = None
) -> tuple[int, float, list[dict[str, Any]], str]:
    """Run ``command`` recorded; (its exit status as a shell reports it, wall
    seconds, each Python process's data, the log's path)."""
    directory = tempfile.mkdtemp(prefix="surge-watch-")
    log = log or os.path.join(directory, "watch.log")
    env = _environment(directory, log)
    started = time.perf_counter()
    try:
        process = subprocess.Popen(command, env=env)
    except OSError as error:
        shutil.rmtree(directory, ignore_errors=True)
        die("surge watch", f"cannot run {command[0]}: {error.strerror or error}")

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
    return status, wall, runs, log


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

    Every Python process CMD starts is recorded: HTTP (requests, urllib3, botocore,
    aiohttp, httpx), databases (PyMySQL, mysqlclient, psycopg, aiomysql), DNS, TCP
    and TLS. The summary (findings, per-host and per-database tables) goes to stderr
    when CMD ends; surge watch exits with CMD's status.
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
    status, wall, runs, log = run_watched(argv, log_path)
    if not runs:
        click.echo(
            "surge watch: no Python process reported back (did CMD run Python? "
            "one that ends by os._exit or a signal reports nothing)",
            err=True,
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
            )
        except Exception as error:  # the program ran: its exit status stands
            click.echo(f"surge watch: could not report: {type(error).__name__}: {error}", err=True)
    if any(run.get("watch_errors") for run in runs) or (
        os.path.exists(log) and os.path.getsize(log)
    ):
        click.echo(f"surge watch: its own errors are logged in {log}", err=True)
    sys.stdout.flush()
    ctx.exit(status)
