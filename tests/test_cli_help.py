"""Every option of every ``surge`` command says what it does in ``--help``.

The command tree is walked as click sees it (subcommands are imported lazily,
``surge.cli.LazyGroup``), so a command or option added later is checked too.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from surge._version import __version__
from surge.cli import SUMMARIES, main


def commands(
    command: click.Command = main, ctx: click.Context | None = None, path: str = "surge"
) -> Iterator[tuple[str, click.Command, click.Context]]:
    ctx = ctx or click.Context(command, info_name="surge")
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} {name}"
            yield from commands(
                sub, click.Context(sub, parent=ctx, info_name=name), f"{path} {name}"
            )


COMMANDS = list(commands())


def test_the_walk_reaches_every_command() -> None:
    names = {path for path, _command, _ctx in COMMANDS}
    assert {"surge fetch", "surge s3 cp", "surge s3 sync", "surge trace", "surge demo"} <= names


def test_every_command_and_option_has_a_help_text() -> None:
    missing = []
    for path, command, _ctx in COMMANDS:
        if not (command.help or command.short_help or "").strip():
            missing.append(path)
        for param in command.params:
            if (
                isinstance(param, click.Option)
                and not param.hidden
                and not (param.help or "").strip()
            ):
                missing.append(f"{path} {'/'.join(param.opts)}")
    assert not missing, f"no help text: {missing}"


def test_every_command_prints_its_help() -> None:
    runner = CliRunner()
    for path, _command, _ctx in COMMANDS:
        args = [*path.split()[1:], "--help"]
        result = runner.invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, (path, result.output)
        assert result.output.startswith("Usage: "), path


@pytest.mark.parametrize("flag", ["-V", "--version"])
@pytest.mark.parametrize("how", ["surge", "python -m surge"])
def test_the_version_and_python_m_surge(flag: str, how: str) -> None:
    """``surge -V``/``--version`` print surge._version's, as ``python -m surge``
    (for an environment whose scripts are not on PATH) does."""
    argv = (
        [sys.executable, "-m", "surge", flag]
        if how != "surge"
        else [sys.executable, "-c", "from surge.cli import main; main()", flag]
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"surge, version {__version__}\n", "")


def test_python_m_surge_runs_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "surge", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and all(name in done.stdout for name in SUMMARIES)
    done = subprocess.run(
        [sys.executable, "-m", "surge", "trace", "not a url"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "FAILED: invalid_url" in done.stdout
