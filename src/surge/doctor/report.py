"""The report of a list of findings: the CLI's exit status and the human table."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from surge.doctor.checks import Finding


def exit_status(findings: Iterable[Finding]) -> int:
    """The CLI's exit status: 1 when any check failed, else 2 when a check itself
    raised (the report is incomplete), else 0."""
    findings = list(findings)
    if any(finding.status == "fail" for finding in findings):
        return 1
    return 2 if any(finding.error is not None for finding in findings) else 0


def format_table(findings: list[Finding], width: int = 100) -> str:
    """The human report: one block per finding, status and id first, the message and
    (when something is wrong) the fix wrapped to ``width`` columns below them."""
    id_width = max((len(finding.id) for finding in findings), default=0)
    indent = " " * (6 + id_width + 2)
    lines = []
    for finding in findings:
        head = f"{finding.status.upper():4}  {finding.id:{id_width}}  "
        lines += textwrap.wrap(
            finding.message, width, initial_indent=head, subsequent_indent=indent
        ) or [head.rstrip()]
        if finding.fix and finding.status != "ok":
            lines += textwrap.wrap(
                f"fix: {finding.fix}", width, initial_indent=indent, subsequent_indent=indent
            )
    return "\n".join(lines)
