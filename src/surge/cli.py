"""The ``surge`` command: parses flags, prints progress and summaries, nothing else.

Every subcommand is a thin layer over the Python API; the work happens below.
Subcommands are imported only when run (``LazyGroup``), and ``surge --help``
lists them from :data:`SUMMARIES` (as pip's command table does), so neither it
nor ``--version`` pays for the event loop, the HTTP parser or the TLS machinery.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from surge._version import __version__
from surge.extras import how_to_install
from surge.sinks import guard_standard_streams
from surge.terminal import error_line, tell

#: name -> "module:attribute" of a click command.
SUBCOMMANDS = {
    "demo": "surge.bench.demo:demo_command",
    "doctor": "surge.doctor.cli:doctor_command",
    "fetch": "surge.bulk.cli:fetch_command",
    "s3": "surge.s3.cli:s3_group",
    "sim": "surge.sim.cli:sim_command",
    "trace": "surge.trace.cli:trace_command",
    "watch": "surge.watch.cli:watch_command",
}

#: name -> the first sentence of the command's help, which ``surge --help`` lists
#: without importing the command (tests/test_startup.py checks that they agree).
SUMMARIES = {
    "demo": "Fetch simulated sites the ways the write-ups did, then with surge; compare.",
    "doctor": "Check this Python environment for what silently makes network I/O slow.",
    "fetch": "Fetch every URL of INPUT (a file, or - for stdin): one record per input.",
    "s3": "S3 (and S3-compatible) storage.",
    "sim": "Run the simulated web (*.sim hosts) on 127.0.0.1 until interrupted.",
    "trace": "Request each URL and show where its time went, phase by phase.",
    "watch": "Run CMD and show where its network time went, and why.",
}


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The line to print for a missing optional dependency, or None if the module
    is not one (then it is a bug, and its traceback is wanted)."""
    top = (error.name or "").partition(".")[0]
    how = how_to_install(top)
    if how is None:
        return None
    return f"surge: this needs {top}, which is not installed: {how}"


def one_line_usage_error(error: click.ClickException) -> str:
    """click's usage error (a value it cannot convert, an unknown option) as the one
    line surge prints for every usage error: ``surge fetch: error: ...``, not
    click's four lines of usage and blank line."""
    ctx = getattr(error, "ctx", None)
    names = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    command = " ".join(["surge", *reversed(names[:-1])])  # the root's name is argv[0]
    message = " ".join(error.format_message().split()).rstrip(".")
    hint = f" (see {command} --help)" if isinstance(error, click.UsageError) else ""
    return error_line(command, f"{message}{hint}")


class LazyGroup(click.Group):
    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, standalone_mode: bool = True, **extra: Any
    ) -> Any:
        # Before anything is opened: a closed stdin, stdout or stderr gets
        # /dev/null, so no file of the run takes its number (surge.sinks).
        guard_standard_streams()
        #: This process's own command line (args None), not a caller's (a test's
        #: CliRunner): then the command's modules are frozen once loaded.
        self.owns_process = args is None
        if not standalone_mode:
            return super().main(args, standalone_mode=False, **extra)
        try:
            result = super().main(args, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as error:
            error.show()  # `surge` alone: the help, as click prints it
            sys.exit(error.exit_code)
        except click.ClickException as error:
            tell(one_line_usage_error(error))
            sys.exit(error.exit_code)
        except click.Abort:
            tell("Aborted!")
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)  # ctx.exit(n) returns n here

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as error:
            line = missing_extra(error)
            if line is None:
                raise
            tell(line)
            ctx.exit(2)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *SUBCOMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in SUBCOMMANDS:
            module, _, attribute = SUBCOMMANDS[cmd_name].partition(":")
            owns = getattr(self, "owns_process", False)
            collecting = owns and gc.isenabled()
            if collecting:
                gc.disable()  # what an import makes is no garbage: no collections meanwhile
            try:
                command: Any = getattr(importlib.import_module(module), attribute)
            finally:
                if owns:
                    # What is loaded now lives until exit: the collector, at exit
                    # too, skips it (interpreter shutdown ~20 ms shorter here).
                    gc.freeze()
                if collecting:
                    gc.enable()
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own imports every command to ask for its short help: read the
        # table instead (the lazy commands are all shown; none is hidden).
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            command = (
                click.Command(name, help=SUMMARIES[name])  # cut to the width as click cuts
                if name in SUMMARIES
                else super().get_command(ctx, name)
            )
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="surge")
def main() -> None:
    """Bulk network I/O that is fast by default and shows where the time goes."""


if __name__ == "__main__":  # pragma: no cover
    main()
