"""``surge doctor``: run the environment checks and print them, a table or JSON."""

from __future__ import annotations

import json
import sys

import click

from surge.doctor.checks import exit_status, format_table, run_checks

#: The version of the --json shape: {schema, findings: [{id, status, message, fix,
#: measured, error}]}, each id's measured keys fixed.  Bumped when that changes.
SCHEMA = 1


@click.command("doctor")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object: {schema: 1, findings: [...]}."
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Connections the program will hold open (fd-limit fails below it; default: "
    "warn below a typical 1,000).",
)
def doctor_command(as_json: bool, concurrency: int | None) -> None:
    """Check this Python environment for what silently makes network I/O slow.

    Each finding has an id, a status (ok, warn, fail), a message and a fix.
    Exit status 1 when any check fails, else 2 when a check itself raised.  Inside a program, call
    surge.doctor.run_checks() after its imports to check the live process.
    """
    findings = run_checks(concurrency=concurrency)
    if as_json:
        payload = {"schema": SCHEMA, "findings": [finding.to_dict() for finding in findings]}
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(format_table(findings))
    sys.exit(exit_status(findings))
