"""The terminal summary and the ``--report`` JSON, from one or more recordings'
data (a watched command may start several Python processes: each hands back
its own, and the report lists each one's findings)."""

from __future__ import annotations

import json
import shlex
import textwrap
from typing import Any

SCHEMA = 1
#: Rows per table in the terminal summary (the busiest).
TABLE_ROWS = 10
WIDTH = 100


def command_label(argv: list[str]) -> list[str]:
    """The command as the outputs show it: the program, not its arguments (a
    database URL with its password, a token: arguments carry credentials)."""
    keep = 3 if len(argv) >= 3 and argv[1] in ("-m", "-c") else 2
    if argv[1:2] == ["-c"]:
        keep = 2
    shown = list(argv[:keep])
    if len(argv) > keep:
        more = len(argv) - keep
        shown.append(f"(+{more} argument{'s' if more > 1 else ''})")
    return shown


def report(runs: list[dict[str, Any]], wall_s: float, command: list[str]) -> dict[str, Any]:
    """``{"schema": 1, "wall_s", "operations", "findings": [...]}`` and, beside
    them, the command, CPU and network time, and the per-host and per-database
    totals."""
    findings: list[dict[str, Any]] = []
    for run in runs:
        for finding in run["findings"]:
            if len(runs) > 1:
                finding = {**finding, "evidence": {**finding["evidence"], "pid": run["pid"]}}
            findings.append(finding)
    return {
        "schema": SCHEMA,
        "wall_s": round(wall_s, 6),
        "operations": sum(run["operations"] for run in runs),
        "findings": findings,
        "command": command,
        "cpu_s": round(sum(run["cpu_s"] for run in runs), 6),
        "network_s": round(sum(run["network_s"] for run in runs), 6),
        "processes": [
            {
                "pid": run["pid"],
                "wall_s": run["wall_s"],
                "operations": run["operations"],
                "kept": run["kept"],
                "by_kind": run["by_kind"],
                "hosts": run["hosts"],
                "databases": run["databases"],
                "watch_errors": run.get("watch_errors", 0),
            }
            for run in runs
        ],
    }


def write_report(data: dict[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=1, allow_nan=False)
        out.write("\n")


def _seconds(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = [title]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=False)
        ]
        out.append("  " + "  ".join(cells))
    return out


def _shown(command: list[str]) -> str:
    """The command label as a shell line (its "(+N arguments)" unquoted)."""
    if command and command[-1].startswith("(+"):
        return f"{shlex.join(command[:-1])} {command[-1]}"
    return shlex.join(command)


def summary(runs: list[dict[str, Any]], wall_s: float, command: list[str]) -> str:
    """What ``surge watch`` prints on stderr when the program ends."""
    network = sum(run["network_s"] for run in runs)
    cpu = sum(run["cpu_s"] for run in runs)
    operations = sum(run["operations"] for run in runs)
    share = f" ({100 * network / wall_s:.0f}%)" if wall_s > 0 else ""
    lines = [
        f"surge watch: {_shown(command)}",
        f"  wall {_seconds(wall_s)} s, network {_seconds(network)} s{share}, CPU "
        f"{_seconds(cpu)} s; {operations:,} network operations"
        + (f" in {len(runs)} processes" if len(runs) > 1 else ""),
    ]
    findings = [f for run in runs for f in run["findings"]]
    lines.append("")
    if findings:
        lines.append(f"findings ({len(findings)}):")
        for finding in findings:
            lines += textwrap.wrap(
                f"{finding['id']}: {finding['message']}",
                WIDTH,
                initial_indent="  * ",
                subsequent_indent="    ",
            )
            lines += textwrap.wrap(
                f"fix: {finding['fix']}", WIDTH, initial_indent="    ", subsequent_indent="    "
            )
    else:
        lines.append("findings: none")
    hosts = [(peer, row) for run in runs for peer, row in run["hosts"].items() if row["requests"]]
    hosts.sort(key=lambda item: -item[1]["time_s"])
    host_rows = [
        [
            peer,
            f"{row['requests']:,}",
            f"{row['connects']:,}",
            f"{row['tls']:,}",
            f"{row['dns']:,}",
            f"{row['errors']:,}",
            _seconds(row["time_s"]),
            _seconds(row["wait_s"]),
        ]
        for peer, row in hosts[:TABLE_ROWS]
    ]
    if len(hosts) > TABLE_ROWS:
        host_rows.append([f"... {len(hosts) - TABLE_ROWS:,} more hosts", *[""] * 7])
    lines.append("")
    lines += _table(
        "per host (HTTP):",
        ["host", "requests", "connects", "TLS", "DNS", "errors", "time s", "wait s"],
        host_rows,
    )
    dbs = [(peer, row) for run in runs for peer, row in run["databases"].items()]
    dbs.sort(key=lambda item: -(item[1]["connect_s"] + item[1]["query_s"]))
    lines += _table(
        "per database:",
        ["database", "connects", "connect s", "queries", "query s", "errors"],
        [
            [
                peer,
                f"{row['connects']:,}",
                _seconds(row["connect_s"]),
                f"{row['queries']:,}",
                _seconds(row["query_s"]),
                f"{row['connect_errors'] + row['query_errors']:,}",
            ]
            for peer, row in dbs[:TABLE_ROWS]
        ],
    )
    kept = sum(run["kept"] for run in runs)
    if kept < operations:
        lines.append(
            f"(the first {kept:,} operations are kept one by one for the trace outputs; "
            "the totals and findings count all of them)"
        )
    errors = sum(run.get("watch_errors", 0) for run in runs)
    if errors:
        lines.append(f"surge watch itself hit {errors} error(s): see its log")
    return "\n".join(line.rstrip() for line in lines)


def deliver(
    runs: list[dict[str, Any]],
    wall_s: float,
    command: list[str],
    *,
    report_path: str | None = None,
    html_path: str | None = None,
    trace_json_path: str | None = None,
    otlp_url: str | None = None,
    echo: Any = None,
) -> list[str]:
    """Print the summary (with ``echo``, to stderr by default) and write each
    output asked for (the command shown as :func:`command_label`); returns one
    line per output that could not be made (the others are made all the same)."""
    import sys

    command = command_label(command)
    write = echo or (lambda text: print(text, file=sys.stderr, flush=True))
    write(summary(runs, wall_s, command))
    problems = []
    outputs: list[tuple[str, str | None, Any]] = [
        ("--report", report_path, lambda p: write_report(report(runs, wall_s, command), p)),
    ]
    if html_path is not None or trace_json_path is not None or otlp_url is not None:
        from surge.watch import export

        outputs += [
            ("--html", html_path, lambda p: export.write_html(runs, command, p)),
            (
                "--trace-json",
                trace_json_path,
                lambda p: export.write_chrome_trace(runs, command, p),
            ),
            ("--otlp", otlp_url, lambda u: export.export_otlp(runs, command, u)),
        ]
    for option, target, make in outputs:
        if target is None:
            continue
        try:
            make(target)
        except Exception as error:
            problems.append(f"surge watch: {option} {target}: {type(error).__name__}: {error}")
    for line in problems:
        write(line)
    return problems
