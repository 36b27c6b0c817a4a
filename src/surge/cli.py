"""The ``surge`` command: parses flags, prints progress and summaries, nothing else.

Every subcommand is a thin layer over the Python API; the work happens below.
"""

from __future__ import annotations

import click

from surge import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="surge")
def main() -> None:
    """Bulk network I/O that is fast by default and shows where the time goes."""


if __name__ == "__main__":  # pragma: no cover
    main()
