"""Run a program in this interpreter under a recording: ``python -m surge.watch``.

The program sees what it would see run as ``python prog.py args`` (``sys.argv``,
``sys.path[0]`` its directory, ``__name__ == "__main__"``); its exit status
(``sys.exit``, an uncaught exception's 1, Ctrl-C) is this process's, after the
summary and the outputs.
"""

from __future__ import annotations

import argparse
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
    started = time.perf_counter()
    recording = Recording().start()
    status, interrupted = 0, False
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
        status, interrupted = 130, True
    except BaseException:
        traceback.print_exc()
        status = 1
    wall = time.perf_counter() - started
    try:
        recording.stop()
        deliver(
            [recording.data()],
            wall,
            command,
            report_path=options.report,
            html_path=options.html,
            trace_json_path=options.trace_json,
            otlp_url=options.otlp,
        )
    except Exception as error:  # the program ran: its exit status stands
        print(f"surge watch: could not report: {type(error).__name__}: {error}", file=sys.stderr)
    if interrupted:  # end as Python does on an uncaught Ctrl-C: by the signal
        sys.stderr.flush()
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
