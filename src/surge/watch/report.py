"""The terminal summary and the ``--report`` JSON, from one or more recordings'
data (a watched command may start several Python processes: each hands back
its own, and the report lists each one's findings)."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from surge.trace.redact import command_label as _label
from surge.trace.redact import safe_text
from surge.watch.findings import analyse, site_label
from surge.watch.recorder import union_s

SCHEMA = 1
#: Rows per table in the terminal summary (the busiest).
TABLE_ROWS = 10
#: Call sites per finding in the terminal summary (the report has them all).
SITES_SHOWN = 3
WIDTH = 100


def command_label(argv: list[str]) -> str:
    """The command as the outputs show it: the program's name and a count of its
    arguments, never the arguments or the environment (a database URL with its
    password, a token, an ``env PGPASSWORD=...`` prefix: see
    :func:`surge.trace.redact.command_label`)."""
    return _label(argv)


def network_s(runs: list[dict[str, Any]], wall_s: float) -> float:
    """The seconds of the wall clock during which any recorded process had a
    network operation open: one process's own union, or the union of every
    process's intervals on the shared clock (never a sum over processes)."""
    if len(runs) == 1:
        spent = float(runs[0]["network_s"])
    else:
        zero = min(run["started"] for run in runs)
        spans = [
            [run["started"] - zero + a, run["started"] - zero + b]
            for run in runs
            for a, b in run.get("network_spans", ())
        ]
        spent = union_s(spans)
    return min(spent, wall_s) if wall_s > 0 else spent


def against_wall(runs: list[dict[str, Any]], wall_s: float) -> list[dict[str, Any]]:
    """Each process's findings drawn again with the command's wall time: a
    process judges its own against its own wall, but "x% of the wall time" (and
    every threshold and model stated against the wall) is of what the user timed,
    the whole command, however much shorter or longer one of its processes ran."""
    if wall_s <= 0:
        return runs
    return [
        {**run, "findings": [f.to_dict() for f in analyse({**run, "wall_s": wall_s})]}
        for run in runs
    ]


def merged_rows(runs: list[dict[str, Any]], table: str) -> dict[str, dict[str, Any]]:
    """One row per peer of ``table`` (``hosts``, ``databases``) across every
    process: counts added; each time that is a union (``x_s`` with its
    ``intervals``) the union of every process's intervals on the shared clock,
    plus what each had folded before them (so never more than the sum of the
    processes' unions, and exact while none folded)."""
    if len(runs) == 1:
        return dict(runs[0][table])
    zero = min(run["started"] for run in runs)
    rows: dict[str, dict[str, Any]] = {}
    unions: dict[tuple[str, str], tuple[list[list[float]], float]] = {}
    for run in runs:
        shift = run["started"] - zero
        for peer, row in run[table].items():
            into = rows.get(peer)
            if into is None:
                rows[peer] = {k: v for k, v in row.items() if k != "intervals"}
            else:
                for name, value in row.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        into[name] = (into.get(name) or 0) + value
            for name, kept in (row.get("intervals") or {}).items():
                spans, folded = unions.get((peer, name), ([], 0.0))
                spans += [[shift + a, shift + b] for a, b in kept["spans"]]
                unions[(peer, name)] = spans, folded + kept["folded_s"]
    for (peer, name), (spans, folded) in unions.items():
        row = rows[peer]
        row[name] = round(min(row[name], union_s(spans) + folded), 6)
    return rows


def partial_notes(runs: list[dict[str, Any]], command_ended_by: str | None = None) -> list[str]:
    """Why the report is partial, a sentence per cause (none: it is whole)."""
    notes = []
    for run in runs:
        if run.get("partial"):
            notes.append(
                f"process {run['pid']} ended by {run['ended_by']}: what it had in flight "
                "then is cut off (marked unfinished), and what it would have done after "
                "is not here"
            )
    for run in runs:
        if lost := run.get("lost_children"):
            pids = ", ".join(str(pid) for pid in lost[:5]) + (", ..." if len(lost) > 5 else "")
            notes.append(
                f"{len(lost)} {'child' if len(lost) == 1 else 'children'} of process "
                f"{run['pid']} handed back nothing (killed by a signal, as Pool.terminate "
                f"ends its workers: use close() and join()): what they did is not here "
                f"(pid {pids})"
            )
    if command_ended_by is not None and not notes:
        notes.append(
            f"the command ended by {command_ended_by}: a process killed that way "
            "hands back nothing, so its operations are not here"
        )
    return notes


def report(
    runs: list[dict[str, Any]],
    wall_s: float,
    command: str,
    command_ended_by: str | None = None,
) -> dict[str, Any]:
    """``{"schema": 1, "wall_s", "operations", "findings": [...]}`` and, beside
    them, the command, whether the recording is ``partial`` (and why, in
    ``partial_notes``), CPU and network time, and the per-host and per-database
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
        "partial": bool(partial_notes(runs, command_ended_by)),
        "partial_notes": partial_notes(runs, command_ended_by),
        "ended_by": command_ended_by,
        "command": command,
        "cpu_s": round(sum(run["cpu_s"] for run in runs), 6),
        "network_s": round(network_s(runs, wall_s), 6),
        "processes": [
            {
                "pid": run["pid"],
                "wall_s": run["wall_s"],
                "operations": run["operations"],
                "kept": run["kept"],
                "by_kind": run["by_kind"],
                "hosts": _without_intervals(run["hosts"]),
                "databases": _without_intervals(run["databases"]),
                "watch_errors": run.get("watch_errors", 0),
                "partial": run.get("partial", False),
                "ended_by": run.get("ended_by"),
                "forked_from": run.get("forked_from"),
                "lost_children": run.get("lost_children", []),
            }
            for run in runs
        ],
    }


def _without_intervals(table: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A table's rows as the report keeps them: the intervals that merge processes'
    rows are for the summary, not the file (up to 32 per time per row)."""
    return {peer: {k: v for k, v in row.items() if k != "intervals"} for peer, row in table.items()}


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


def summary(
    runs: list[dict[str, Any]],
    wall_s: float,
    command: str,
    command_ended_by: str | None = None,
) -> str:
    """What ``surge watch`` prints on stderr when the program ends."""
    network = network_s(runs, wall_s)
    cpu = sum(run["cpu_s"] for run in runs)
    operations = sum(run["operations"] for run in runs)
    share = f" ({100 * network / wall_s:.0f}%)" if wall_s > 0 else ""
    lines = [
        f"surge watch: {command}",
        f"  wall {_seconds(wall_s)} s, network {_seconds(network)} s{share}, CPU "
        f"{_seconds(cpu)} s; {operations:,} network operations"
        + (f" in {len(runs)} processes" if len(runs) > 1 else ""),
    ]
    for note in partial_notes(runs, command_ended_by):
        lines += textwrap.wrap(
            f"partial: {note}", WIDTH, initial_indent="  ", subsequent_indent="    "
        )
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
            sites = finding.get("sites") or []
            for site in sites[:SITES_SHOWN]:
                lines.append(f"    at {site_label(site)} ({site['count']:,} calls)")
            if len(sites) > SITES_SHOWN:
                lines.append(f"    and {len(sites) - SITES_SHOWN} more call sites (--report)")
    else:
        lines.append("findings: none")
    hosts = [(peer, row) for peer, row in merged_rows(runs, "hosts").items() if row["requests"]]
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
    dbs = list(merged_rows(runs, "databases").items())
    dbs.sort(key=lambda item: -item[1]["busy_s"])
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
    command_ended_by: str | None = None,
    new_line: bool = False,
) -> list[str]:
    """Print the summary (with ``echo``, to stderr by default) and write each
    output asked for (the command shown as :func:`command_label`); returns one
    line per output that could not be made (the others are made all the same,
    and so are they when stderr is gone: a closed terminal).  ``command_ended_by``:
    the signal that ended the command, if one did; ``new_line``: the program left
    its last stderr line open, so the summary starts on the next."""
    import contextlib
    import sys

    runs = against_wall(runs, wall_s)
    label = command_label(command)
    write = echo or (lambda text: print(text, file=sys.stderr, flush=True))
    ended = command_ended_by
    try:
        write(("\n" if new_line else "") + summary(runs, wall_s, label, ended))
        said = True
    except OSError:
        said = False
    problems = []
    outputs: list[tuple[str, str | None, Any]] = [
        ("--report", report_path, lambda p: write_report(report(runs, wall_s, label, ended), p)),
    ]
    if html_path is not None or trace_json_path is not None or otlp_url is not None:
        from surge.watch import export

        outputs += [
            (
                "--html",
                html_path,
                lambda p: export.write_html(runs, label, p, partial_notes(runs, ended)),
            ),
            (
                "--trace-json",
                trace_json_path,
                lambda p: export.write_chrome_trace(runs, label, p),
            ),
            ("--otlp", otlp_url, lambda u: export.export_otlp(runs, label, u)),
        ]
    for option, target, make in outputs:
        if target is None:
            continue
        try:
            make(target)
        except Exception as error:
            # an --otlp URL may carry its collector's password; a message, a URL
            line = f"surge watch: {option} {target}: {type(error).__name__}: {error}"
            problems.append(safe_text(line))
    if said:
        for line in problems:
            with contextlib.suppress(OSError):
                write(line)
    return problems
