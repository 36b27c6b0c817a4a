"""``surge doctor``: run the environment checks and print them, a table or JSON."""

from __future__ import annotations

import json
import sys

import click

from surge.doctor.checks import check_ids, run_checks
from surge.doctor.report import exit_status, format_table

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
    help="Connections the program will hold open (fd-limit fails when the hard limit is "
    "below it, warns when only the soft one is; default: warn below a typical 1,000).",
)
@click.option(
    "--only",
    metavar="ID[,ID]",
    default=None,
    help="Run only these checks (comma-separated ids, in any order).",
)
@click.option(
    "--no-measure",
    is_flag=True,
    help="Skip what takes time or a child interpreter (SSLContext cost, import checks).",
)
def doctor_command(
    as_json: bool, concurrency: int | None, only: str | None, no_measure: bool
) -> None:
    """Check this Python environment for what silently makes network I/O slow.

    Each finding has an id, a status (ok, warn, fail), a message and a fix.
    Exit status 1 when any check fails, else 2 when a check itself raised (or, with
    nothing printed on stdout, for a usage error), else 0.  Inside a program, call
    surge.doctor.run_checks() after its imports to check the live process.
    """
    wanted = None if only is None else [part.strip() for part in only.split(",") if part.strip()]
    unknown = [check_id for check_id in wanted or () if check_id not in check_ids()]
    if unknown or wanted == []:
        named = f"unknown check id(s): {', '.join(unknown)}" if unknown else "no check id given"
        raise click.BadParameter(f"{named}; known: {', '.join(check_ids())}", param_hint="--only")
    findings = run_checks(concurrency=concurrency, only=wanted, measure=not no_measure)
    if as_json:
        payload = {"schema": SCHEMA, "findings": [finding.to_dict() for finding in findings]}
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(format_table(findings))
    sys.exit(exit_status(findings))
