"""Run a program in this interpreter under a recording: ``python -m surge.watch``.

The program sees what it would see run as ``python prog.py args`` (``sys.argv``,
``sys.path[0]`` its directory, ``__name__ == "__main__"``); its exit status
(``sys.exit``, an uncaught exception's 1, Ctrl-C) is this process's, after the
summary and the outputs.  SIGTERM, SIGHUP and ``os._exit`` end it as they
would, after the summary and the outputs, marked partial
(:mod:`surge.watch._endings`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import signal
import sys
import time
import traceback

USAGE = "python -m surge.watch [options] (prog.py | -m module) [args...]"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m surge.watch", usage=USAGE)
    p.add_argument("--report", metavar="FILE.json", help="the findings as JSON")
    p.add_argument("--html", metavar="FILE", help="surge trace's waterfall with the findings")
    p.add_argument("--trace-json", metavar="FILE", help="Chrome Trace Event Format")
    p.add_argument("--otlp", metavar="URL", help="OpenTelemetry spans to an OTLP/HTTP collector")
    p.add_argument("--log", metavar="FILE", help="where watch logs its own errors")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m")
    p.add_argument("program", nargs=argparse.REMAINDER)
    return p


def _exit_status(error: SystemExit) -> int:
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    if options.module is None and not options.program:
        parser().error("no program given")
    from surge.watch._endings import Endings
    from surge.watch.instrument import set_log
    from surge.watch.report import deliver
    from surge.watch.session import Recording

    set_log(options.log)
    if options.module is not None:
        program_argv = [options.module, *options.program]
        command = [sys.executable, "-m", *program_argv]
    else:
        program_argv = list(options.program)
        command = [sys.executable, *program_argv]
        if not os.path.exists(program_argv[0]):
            print(f"surge watch: error: no such file: {program_argv[0]}", file=sys.stderr)
            return 2
    from surge.watch import _stderr

    _stderr.track()
    started = time.perf_counter()
    recording = Recording().start()

    def finish(ended_by: str | None, forced: bool = False) -> None:
        try:
            recording.stop(ended_by, forced=forced)
            deliver(
                [recording.data()],
                time.perf_counter() - started,
                command,
                report_path=options.report,
                html_path=options.html,
                trace_json_path=options.trace_json,
                otlp_url=options.otlp,
                new_line=_stderr.open_line(),
            )
        except Exception as error:  # the program ran: its exit status stands
            from surge.trace.redact import safe_text

            print(
                safe_text(f"surge watch: could not report: {type(error).__name__}: {error}"),
                file=sys.stderr,
            )

    endings = Endings(lambda ended_by: finish(ended_by, forced=True)).install()
    status, interrupted = 0, False
    uncaught: str | None = None
    sys.argv = program_argv
    try:
        if options.module is not None:
            runpy.run_module(options.module, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(program_argv[0]))
            runpy.run_path(program_argv[0], run_name="__main__")
        _join_threads()
    except SystemExit as error:
        status = _exit_status(error)
    except KeyboardInterrupt:
        traceback.print_exc()
        status, interrupted, uncaught = 130, True, "KeyboardInterrupt"
    except BaseException as error:
        traceback.print_exc()
        status, uncaught = 1, f"uncaught {type(error).__name__}"
    if not endings.done:  # not reported at a forced ending already
        endings.done = True
        finish(uncaught)
    if interrupted:  # end as Python does on an uncaught Ctrl-C: flushed, by the signal
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, as the interpreter would."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
