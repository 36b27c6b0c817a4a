"""Hostile round 2 of ``surge fetch``'s rules, written from docs/fetch.md and
``surge fetch --help`` only (not the code): one record per input line; an
output is never an input; ``--resume`` refuses another input's output and
otherwise fetches exactly what is missing; a record is done only when every
sink holds it, so after a full disk, SIGKILL or SIGTERM, ``--resume`` ends with
records == WARC responses == saved bodies == inputs, each once; bad input is
one line naming file and line, exit 2, nothing written lost.

The server is the simulated web (the session's ``sim`` fixture); surge runs as
a child process, every one with a timeout, every loop bounded.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import RESOLVE
from tests.hostile.conftest import SURGE, run

from surge.sim import SimInfo

BASE = ["fetch", "--resolve", RESOLVE, "--max-time", "3", "-q"]


def fetch(args: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
    return run([*BASE, *args], timeout=kw.pop("timeout", 90), **kw)  # type: ignore[arg-type]


def one_line(stderr: bytes) -> str:
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def records(path: Path) -> list[dict[str, object]]:
    out = []
    for raw in path.read_bytes().splitlines():
        out.append(json.loads(raw))
    return out


def lines_of(path: Path) -> Counter[int]:
    return Counter(int(r["line"]) for r in records(path))  # type: ignore[call-overload]


def warc_lines(pattern: str) -> Counter[int]:
    from warcio.archiveiterator import ArchiveIterator

    seen: Counter[int] = Counter()
    for name in sorted(glob.glob(pattern)):
        with open(name, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type == "response":
                    seen[int(rec.rec_headers.get_header("Surge-Input-Line"))] += 1
    return seen


def bodies(directory: Path) -> Counter[str]:
    """The saved bodies: files named by 32 hex digits (temporaries aside)."""
    return Counter(
        p.name
        for p in directory.rglob("*")
        if p.is_file() and re.fullmatch(r"[0-9a-f]{32}", p.name)
    )


def url_hash(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:32]


# -- one record per input line ----------------------------------------------------------


def _u(sim: SimInfo, name: str) -> bytes:
    return f"http://{name}.sim:{sim.http_port}/".encode()


#: (id, input suffix, builder(sim) -> bytes, {line: expected error or None})
SHAPES: list[tuple[str, str, Callable[[SimInfo], bytes], dict[int, str | None]]] = [
    (
        "text-crlf",
        ".txt",
        lambda s: _u(s, "status-200") + b"\r\n" + _u(s, "status-404") + b"\r\nnot a url\r\n",
        {1: None, 2: None, 3: "invalid_url"},
    ),
    (
        "text-bom",
        ".txt",
        lambda s: b"\xef\xbb\xbf" + _u(s, "status-200") + b"\n" + _u(s, "x1.status-200") + b"\n",
        {1: None, 2: None},
    ),
    (
        "text-nul-in-url",
        ".txt",
        lambda s: _u(s, "status-200") + b"\nhttp://a\x00b.sim/\n" + _u(s, "x2.status-200") + b"\n",
        {1: None, 2: "invalid_url", 3: None},
    ),
    (
        "text-nul-alone",
        ".txt",
        lambda s: b"\x00\n" + _u(s, "status-200") + b"\n",
        {1: "invalid_url", 2: None},
    ),
    (
        "text-no-final-newline",
        ".txt",
        lambda s: _u(s, "status-200") + b"\n" + _u(s, "x3.status-200"),
        {1: None, 2: None},
    ),
    (
        "text-duplicates",
        ".txt",
        lambda s: (_u(s, "status-200") + b"\n") * 3,
        {1: None, 2: None, 3: None},
    ),
    (
        "text-cr-only-last",
        ".txt",
        lambda s: _u(s, "status-200") + b"\n" + _u(s, "x4.status-200") + b"\r",
        {1: None, 2: None},
    ),
    (
        "text-huge-line",
        ".txt",
        lambda s: b"http://" + b"a" * 70000 + b".sim/\n" + _u(s, "status-200") + b"\n",
        {1: "invalid_url", 2: None},
    ),
    (
        "jsonl-extra-fields",
        ".jsonl",
        lambda s: b'{"url": "' + _u(s, "status-200") + b'", "x": {"y": [1, 2]}, "z": null}\n',
        {1: None},
    ),
    (
        "jsonl-nested-url",
        ".jsonl",
        lambda s: (
            b'{"url": {"href": "'
            + _u(s, "status-200")
            + b'"}}\n{"url": "'
            + _u(s, "status-200")
            + b'"}\n'
        ),
        {1: "invalid_url", 2: None},
    ),
    (
        "jsonl-array-url",
        ".jsonl",
        lambda s: b'{"url": ["' + _u(s, "status-200") + b'"]}\n{"url": 5}\n{"url": true}\n',
        {1: "invalid_url", 2: "invalid_url", 3: "invalid_url"},
    ),
    (
        "jsonl-crlf-bom-no-final-newline",
        ".jsonl",
        lambda s: (
            b'\xef\xbb\xbf{"url": "'
            + _u(s, "status-200")
            + b'"}\r\n{"url": "'
            + _u(s, "status-404")
            + b'"}'
        ),
        {1: None, 2: None},
    ),
    (
        "jsonl-duplicates",
        ".jsonl",
        lambda s: (b'{"url": "' + _u(s, "status-200") + b'"}\n') * 2,
        {1: None, 2: None},
    ),
    (
        "csv-quoted-newline",
        ".csv",
        lambda s: (
            b"rank,url\n1,"
            + _u(s, "status-200")
            + b'\n2,"http://status-\n404.sim/"\n3,'
            + _u(s, "status-404")
            + b"\n"
        ),
        {2: None, 3: "invalid_url", 5: None},
    ),
    (
        "csv-crlf-bom-empty-cell",
        ".csv",
        lambda s: (
            b"\xef\xbb\xbfrank,url\r\n1,"
            + _u(s, "status-200")
            + b"\r\n2,\r\n3,"
            + _u(s, "status-404")
            + b"\r\n"
        ),
        {2: None, 3: "invalid_url", 4: None},
    ),
    (
        "csv-duplicates-no-final-newline",
        ".csv",
        lambda s: b"rank,url\n1," + _u(s, "status-200") + b"\n1," + _u(s, "status-200"),
        {2: None, 3: None},
    ),
]


@pytest.mark.parametrize(
    ("suffix", "build", "expected"), [r[1:] for r in SHAPES], ids=[r[0] for r in SHAPES]
)
def test_every_input_line_gives_exactly_one_record(
    sim: SimInfo,
    tmp_path: Path,
    suffix: str,
    build: Callable[[SimInfo], bytes],
    expected: dict[int, str | None],
) -> None:
    src = tmp_path / ("in" + suffix)
    src.write_bytes(build(sim))
    out = tmp_path / "out.jsonl"
    done = fetch([str(src), "-o", str(out)])
    assert done.returncode == 0, done.stderr
    got = records(out)
    assert Counter(int(r["line"]) for r in got) == Counter(expected.keys()), got  # type: ignore[call-overload]
    for r in got:
        assert r["error"] == expected[int(r["line"])], r  # type: ignore[call-overload]


# -- bad input: one line naming file and line, exit 2, nothing written lost ------------------

#: (id, suffix, builder, the bad line's number)
BAD: list[tuple[str, str, Callable[[SimInfo], bytes], int]] = [
    ("text-invalid-utf8", ".txt", lambda s: _u(s, "status-200") + b"\nhttp://\xff\xfe.sim/\n", 2),
    (
        "jsonl-top-level-string",
        ".jsonl",
        lambda s: b'{"url": "' + _u(s, "status-200") + b'"}\n"x"\n',
        2,
    ),
    (
        "jsonl-top-level-array",
        ".jsonl",
        lambda s: b'{"url": "' + _u(s, "status-200") + b'"}\n[1]\n',
        2,
    ),
    (
        "jsonl-not-json",
        ".jsonl",
        lambda s: b'{"url": "' + _u(s, "status-200") + b'"}\n{"url": \n',
        2,
    ),
    (
        "jsonl-no-field",
        ".jsonl",
        lambda s: b'{"url": "' + _u(s, "status-200") + b'"}\n{"href": "x"}\n',
        2,
    ),
    (
        "jsonl-invalid-utf8-in-string",
        ".jsonl",
        lambda s: b'{"url": "' + _u(s, "status-200") + b'"}\n{"url": "http://\xff.sim/"}\n',
        2,
    ),
]


@pytest.mark.parametrize(("suffix", "build", "bad"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resume"])
def test_bad_input_is_one_line_naming_file_and_line_and_loses_nothing(
    sim: SimInfo,
    tmp_path: Path,
    suffix: str,
    build: Callable[[SimInfo], bytes],
    bad: int,
    resume: bool,
) -> None:
    """With --resume: the good prefix is fetched first, then the bad lines are
    appended; the resumed run stops and the first run's records stay whole."""
    src = tmp_path / ("in" + suffix)
    out = tmp_path / "out.jsonl"
    data = build(sim)
    if resume:
        good = b"".join(data.splitlines(True)[: bad - 1])
        src.write_bytes(good)
        assert fetch([str(src), "-o", str(out)]).returncode == 0
        before = out.read_bytes()
    src.write_bytes(data)
    done = fetch([str(src), "-o", str(out), *(["--resume"] if resume else [])])
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert src.name in line and str(bad) in line, line
    if resume:
        assert out.read_bytes().startswith(before)
    for r in records(out):
        assert int(r["line"]) < bad  # type: ignore[call-overload]


# -- an output is never an input ---------------------------------------------------------


def _same_file_cases() -> list[
    tuple[str, Callable[[Path, SimInfo], tuple[list[str], Path, Path | None]]]
]:
    """Each: (id, make(tmp, sim) -> (args, the file that must stay unchanged,
    the file given as stdin or None))."""

    def inp(tmp: Path, sim: SimInfo) -> Path:
        p = tmp / "in.txt"
        if not p.exists():
            p.write_bytes(b"".join(_u(sim, f"x{i}.status-200") + b"\n" for i in range(3)))
        return p

    def hard(tmp: Path, target: Path, name: str) -> Path:
        link = tmp / name
        os.link(target, link)
        return link

    def sym(tmp: Path, target: Path, name: str) -> Path:
        link = tmp / name
        link.symlink_to(target)
        return link

    def precious(tmp: Path, name: str) -> Path:
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"precious bytes\n")
        return p

    def body_path(tmp: Path, sim: SimInfo) -> Path:
        url = _u(sim, "x0.status-200").decode()
        return precious(tmp, f"od/x0.status-200.sim_{sim.http_port}/{url_hash(url)}")

    return [
        (
            "o-hardlink",
            lambda t, s: (
                [str(inp(t, s)), "-o", str(hard(t, inp(t, s), "h.jsonl"))],
                inp(t, s),
                None,
            ),
        ),
        (
            "o-symlink",
            lambda t, s: (
                [str(inp(t, s)), "-o", str(sym(t, inp(t, s), "s.jsonl"))],
                inp(t, s),
                None,
            ),
        ),
        (
            "o-dotdot-name",
            lambda t, s: (
                [str(inp(t, s)), "-o", str(t / "." / ".." / t.name / "in.txt")],
                inp(t, s),
                None,
            ),
        ),
        (
            "warc-hardlink",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "-o",
                    str(t / "o.jsonl"),
                    "--warc",
                    str(hard(t, inp(t, s), "h.warc.gz")),
                ],
                inp(t, s),
                None,
            ),
        ),
        (
            "har-symlink",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "-o",
                    str(t / "o.jsonl"),
                    "--har",
                    str(sym(t, inp(t, s), "s.har")),
                ],
                inp(t, s),
                None,
            ),
        ),
        (
            "trace-hardlink",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "-o",
                    str(t / "o.jsonl"),
                    "--trace",
                    str(hard(t, inp(t, s), "t.html")),
                ],
                inp(t, s),
                None,
            ),
        ),
        ("o-dev-stdin", lambda t, s: (["-", "-o", "/dev/stdin"], inp(t, s), inp(t, s))),
        ("o-proc-self-fd-0", lambda t, s: (["-", "-o", "/proc/self/fd/0"], inp(t, s), inp(t, s))),
        (
            "o-stdin-by-hardlink",
            lambda t, s: (["-", "-o", str(hard(t, inp(t, s), "h2.jsonl"))], inp(t, s), inp(t, s)),
        ),
        (
            "warc-dev-fd-0",
            lambda t, s: (
                ["-", "-o", str(t / "o.jsonl"), "--warc", "/dev/fd/0"],
                inp(t, s),
                inp(t, s),
            ),
        ),
        (
            "o-is-data-file",
            lambda t, s: (
                [str(inp(t, s)), "-d", "@" + str(precious(t, "d.txt")), "-o", str(t / "d.txt")],
                t / "d.txt",
                None,
            ),
        ),
        (
            "warc-is-cacert-by-symlink",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "--cacert",
                    s.cafile,
                    "-o",
                    str(t / "o.jsonl"),
                    "--warc",
                    str(sym(t, Path(s.cafile), "ca.warc.gz")),
                ],
                Path(s.cafile),
                None,
            ),
        ),
        (
            "o-equals-har",
            lambda t, s: (
                [str(inp(t, s)), "-o", str(precious(t, "x.jsonl")), "--har", str(t / "x.jsonl")],
                t / "x.jsonl",
                None,
            ),
        ),
        (
            "warc-equals-o",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "-o",
                    str(precious(t, "w.warc.gz")),
                    "--warc",
                    str(t / "w.warc.gz"),
                ],
                t / "w.warc.gz",
                None,
            ),
        ),
        (
            "o-and-har-hardlinked",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "-o",
                    str(precious(t, "p.jsonl")),
                    "--har",
                    str(hard(t, t / "p.jsonl", "p.har")),
                ],
                t / "p.jsonl",
                None,
            ),
        ),
        (
            "o-and-warc-hardlinked",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "-o",
                    str(precious(t, "q.jsonl")),
                    "--warc",
                    str(hard(t, t / "q.jsonl", "q.warc.gz")),
                ],
                t / "q.jsonl",
                None,
            ),
        ),
        (
            "warc-and-har-symlinked",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "-o",
                    str(t / "o.jsonl"),
                    "--warc",
                    str(precious(t, "r.warc.gz")),
                    "--har",
                    str(sym(t, t / "r.warc.gz", "r.har")),
                ],
                t / "r.warc.gz",
                None,
            ),
        ),
        (
            "o-is-a-body-path",
            lambda t, s: (
                [str(inp(t, s)), "--output-dir", str(t / "od"), "-o", str(body_path(t, s))],
                body_path(t, s),
                None,
            ),
        ),
        (
            "har-is-a-body-path",
            lambda t, s: (
                [
                    str(inp(t, s)),
                    "--output-dir",
                    str(t / "od"),
                    "-o",
                    str(t / "o.jsonl"),
                    "--har",
                    str(body_path(t, s)),
                ],
                body_path(t, s),
                None,
            ),
        ),
    ]


SAME = _same_file_cases()


@pytest.mark.parametrize("make", [c[1] for c in SAME], ids=[c[0] for c in SAME])
def test_an_output_that_is_an_input_or_another_sink_is_refused_untouched(
    sim: SimInfo,
    tmp_path: Path,
    make: Callable[[Path, SimInfo], tuple[list[str], Path, Path | None]],
) -> None:
    args, keep, stdin = make(tmp_path, sim)
    before = keep.read_bytes()
    ino = keep.stat().st_ino
    if stdin is not None:
        with open(stdin, "rb") as f:
            done = subprocess.run(
                [*SURGE, *BASE, *args], stdin=f, capture_output=True, timeout=60, check=False
            )
    else:
        done = fetch(args)
    assert done.returncode == 2, done.stderr
    one_line(done.stderr)
    assert keep.read_bytes() == before
    assert keep.stat().st_ino == ino


# -- --resume: another input's output is refused; otherwise exactly what is missing --------


def _urls(sim: SimInfo, names: list[str]) -> bytes:
    return b"".join(_u(sim, n) + b"\n" for n in names)


N8 = [f"x{i}.status-200" for i in range(8)]

#: (id, first input, second input) - the second run must be refused.
REFUSE: list[tuple[str, list[str], list[str]]] = [
    ("gained-a-line-in-the-middle", N8, [*N8[:3], "new.status-200", *N8[3:]]),
    ("lost-its-last-line", N8, N8[:-1]),
    ("lost-its-first-line", N8, N8[1:]),
    ("another-list", N8, [f"y{i}.status-200" for i in range(8)]),
]


@pytest.mark.parametrize(("first", "second"), [r[1:] for r in REFUSE], ids=[r[0] for r in REFUSE])
def test_resume_of_another_input_is_refused_and_the_file_is_unchanged(
    sim: SimInfo, tmp_path: Path, first: list[str], second: list[str]
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_bytes(_urls(sim, first))
    assert fetch([str(src), "-o", str(out)]).returncode == 0
    before = out.read_bytes()
    src.write_bytes(_urls(sim, second))
    done = fetch([str(src), "-o", str(out), "--resume"])
    assert done.returncode == 2, done.stderr
    one_line(done.stderr)
    assert out.read_bytes() == before


@pytest.mark.parametrize("at", [0, 3, 6], ids=["first-two", "middle-two", "last-two"])
def test_resume_after_two_lines_swapped_is_refused_every_time(
    sim: SimInfo, tmp_path: Path, at: int
) -> None:
    """ "the same lines moved, is not" (this input): the first run writes in
    input order (-c 1), then lines ``at`` and ``at+1`` swap.  Each of 8 resumed
    runs must refuse; today some of them accept (exit 0) a file whose line N
    records another URL than the input's line N."""
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_bytes(_urls(sim, N8))
    assert fetch([str(src), "-c", "1", "-o", str(out)]).returncode == 0
    before = out.read_bytes()
    moved = list(N8)
    moved[at], moved[at + 1] = moved[at + 1], moved[at]
    src.write_bytes(_urls(sim, moved))
    codes = [fetch([str(src), "-o", str(out), "--resume"]).returncode for _ in range(8)]
    assert codes == [2] * 8
    assert out.read_bytes() == before


def _tear_last(out: Path) -> None:
    data = out.read_bytes().splitlines(True)
    out.write_bytes(b"".join(data[:-1]) + data[-1][:30])


def _drop_middle(out: Path) -> None:
    data = out.read_bytes().splitlines(True)
    out.write_bytes(b"".join(data[:3] + data[4:]))


#: (id, mutate the records file between the runs, fmt) - the resumed run ends
#: with every input line recorded exactly once.
FIXUP: list[tuple[str, Callable[[Path], None], str]] = [
    ("torn-last-record-jsonl", _tear_last, "jsonl"),
    ("torn-last-record-csv", _tear_last, "csv"),
    ("last-record-without-newline", lambda p: p.write_bytes(p.read_bytes().rstrip(b"\n")), "jsonl"),
    ("nothing-changed", lambda p: None, "jsonl"),
    ("a-record-missing-in-the-middle", _drop_middle, "jsonl"),
    ("empty-file", lambda p: p.write_bytes(b""), "jsonl"),
]


def csv_lines(path: Path) -> Counter[int]:
    import csv

    with open(path, newline="") as f:
        return Counter(int(row["line"]) for row in csv.DictReader(f))


@pytest.mark.parametrize(("mutate", "fmt"), [r[1:] for r in FIXUP], ids=[r[0] for r in FIXUP])
def test_resume_fetches_exactly_what_is_missing(
    sim: SimInfo, tmp_path: Path, mutate: Callable[[Path], None], fmt: str
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / f"out.{fmt}"
    src.write_bytes(_urls(sim, N8))
    assert fetch([str(src), "-o", str(out)]).returncode == 0
    mutate(out)
    done = fetch([str(src), "-o", str(out), "--resume"])
    assert done.returncode == 0, done.stderr
    got = csv_lines(out) if fmt == "csv" else lines_of(out)
    assert got == Counter(range(1, 9))


def test_resume_after_the_input_grew_at_the_end_fetches_only_the_new_lines(
    sim: SimInfo, tmp_path: Path
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_bytes(_urls(sim, N8[:5]))
    assert fetch([str(src), "-o", str(out)]).returncode == 0
    before = out.read_bytes()
    src.write_bytes(_urls(sim, N8))
    assert fetch([str(src), "-o", str(out), "--resume"]).returncode == 0
    assert out.read_bytes().startswith(before)
    assert lines_of(out) == Counter(range(1, 9))


def test_resume_of_a_csv_with_quoted_newlines(sim: SimInfo, tmp_path: Path) -> None:
    src, out = tmp_path / "in.csv", tmp_path / "out.jsonl"
    rows = b'rank,url\n1,%s\n2,"%s"\n' % (_u(sim, "x1.status-200"), _u(sim, "x2.status-200"))
    rows += b'3,"http://x\n3.sim/"\n4,%s\n' % _u(sim, "x4.status-200")
    src.write_bytes(rows)
    assert fetch([str(src), "-o", str(out)]).returncode == 0
    first = lines_of(out)
    _tear_last(out)
    assert fetch([str(src), "-o", str(out), "--resume"]).returncode == 0
    assert lines_of(out) == first
    assert sum(first.values()) == 4


def test_resume_with_another_template_is_refused_or_changes_nothing(
    sim: SimInfo, tmp_path: Path
) -> None:
    """The records' ``input`` is the line itself: a different --template must
    not add a second record of any line."""
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_bytes(b"".join(f"x{i}.status-200.sim:{sim.http_port}\n".encode() for i in range(4)))
    assert fetch([str(src), "--template", "http://{}/", "-o", str(out)]).returncode == 0
    before = out.read_bytes()
    done = fetch([str(src), "--template", "http://{}/other", "-o", str(out), "--resume"])
    assert done.returncode in (0, 2), done.stderr
    if done.returncode == 2:
        one_line(done.stderr)
    assert out.read_bytes() == before


# -- every sink holds each record once, after kills and full disks ------------------------

SINKS: dict[str, list[str]] = {
    "warc": ["warc"],
    "dir": ["dir"],
    "warc+dir": ["warc", "dir"],
    "warc-rotating+dir": ["warc", "dir", "rotate"],
}


def sink_args(tmp: Path, sinks: list[str], root: Path | None = None) -> list[str]:
    where = root or tmp
    args: list[str] = []
    if "warc" in sinks:
        args += ["--warc", str(where / "w.warc.gz")]
        if "rotate" in sinks:
            args += ["--warc-max-size", "4K"]
    if "dir" in sinks:
        args += ["--output-dir", str(where / "od")]
    return args


def assert_every_sink_once(
    tmp: Path, out: Path, n: int, sinks: list[str], root: Path | None = None
) -> None:
    where = root or tmp
    want = Counter(range(1, n + 1))
    assert lines_of(out) == want
    if "warc" in sinks:
        assert warc_lines(str(where / "w*.warc.gz")) == want
    if "dir" in sinks:
        got = bodies(where / "od")
        assert sum(got.values()) == n and all(v == 1 for v in got.values()), got


def slow_input(sim: SimInfo, n: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    return b"".join(
        _u(sim, f"x{i}.delay-{rnd.randrange(20, 300)}--big-{rnd.choice([1, 3, 6])}k") + b"\n"
        for i in range(n)
    )


def resume_until_done(args: list[str], tries: int = 4) -> subprocess.CompletedProcess[bytes]:
    for _ in range(tries):
        done = fetch([*args, "--resume"])
        if done.returncode == 0:
            return done
    return done


@pytest.mark.parametrize("sink", list(SINKS), ids=list(SINKS))
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["KILL", "TERM"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kill_at_a_random_point_then_resume_leaves_each_input_once_in_every_sink(
    sim: SimInfo, tmp_path: Path, sink: str, sig: signal.Signals, seed: int
) -> None:
    n = 40
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_bytes(slow_input(sim, n, seed))
    args = [str(src), "-o", str(out), "-c", "2", *sink_args(tmp_path, SINKS[sink])]
    wait = random.Random(seed * 7919 + sig).uniform(0.3, 2.0)
    child = subprocess.Popen(
        [*SURGE, *BASE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=wait)
        if child.returncode is None:
            child.send_signal(sig)
        child.communicate(timeout=60)
        # the kill landed mid-run: the first run did not complete
        assert child.returncode != 0, "the run ended before its kill: not a test"
        if sig == signal.SIGTERM:
            assert child.returncode in (143, -signal.SIGTERM), (
                child.returncode
            )  # a shell sees 143 for both
    finally:
        if child.returncode is None:
            child.kill()
            child.wait(timeout=10)
    done = resume_until_done(args)
    assert done.returncode == 0, done.stderr
    assert_every_sink_once(tmp_path, out, n, SINKS[sink])


def _cut_warc(tmp: Path) -> None:
    warc = tmp / "w.warc.gz"
    data = warc.read_bytes()
    warc.write_bytes(data[: len(data) // 2])


def _drop_a_body(tmp: Path) -> None:
    files = sorted(p for p in (tmp / "od").rglob("*") if p.is_file())
    files[len(files) // 2].unlink()


def _drop_the_dir(tmp: Path) -> None:
    import shutil

    shutil.rmtree(tmp / "od")


#: (id, what goes missing from the other sinks between the runs)
DAMAGE: list[tuple[str, Callable[[Path], None]]] = [
    ("warc-cut-in-half", _cut_warc),
    ("a-body-deleted", _drop_a_body),
    ("output-dir-deleted", _drop_the_dir),
]


@pytest.mark.parametrize("damage", [d[1] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_resume_refetches_from_what_another_sink_lost(
    sim: SimInfo, tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    n = 12
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_bytes(b"".join(_u(sim, f"x{i}.big-2k") + b"\n" for i in range(n)))
    args = [str(src), "-o", str(out), *sink_args(tmp_path, ["warc", "dir"])]
    assert fetch(args).returncode == 0
    damage(tmp_path)
    done = fetch([*args, "--resume"])
    assert done.returncode == 0, done.stderr
    assert_every_sink_once(tmp_path, out, n, ["warc", "dir"])


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs of the test's own, unmounted at the end."""
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True, timeout=30
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


@pytest.mark.parametrize(
    "full",
    ["records", "warc", "dir", "warc+dir", "all", "all-rotating"],
)
def test_a_full_disk_then_more_space_and_resume_leaves_each_input_once_in_every_sink(
    sim: SimInfo, tmp_path: Path, small_fs: Path, full: str
) -> None:
    """The sink(s) named by ``full`` are on a 64 KiB tmpfs; the others (always
    WARC and bodies both in use) beside.  The first run fills the disk: one
    line, exit 2.  Then the tmpfs grows and --resume completes."""
    n = 60
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(_u(sim, f"x{i}.big-{3 if i % 2 else 5}k") + b"\n" for i in range(n)))
    on_small = {
        "records": {"o"},
        "warc": {"warc"},
        "dir": {"dir"},
        "warc+dir": {"warc", "dir"},
    }.get(full, {"o", "warc", "dir"})
    out = (small_fs if "o" in on_small else tmp_path) / "out.jsonl"
    wroot = small_fs if "warc" in on_small else tmp_path
    droot = small_fs if "dir" in on_small else tmp_path
    warc = ["--warc", str(wroot / "w.warc.gz")]
    if full == "all-rotating":
        warc += ["--warc-max-size", "8K"]
    args = [str(src), "-o", str(out), "-c", "8", *warc, "--output-dir", str(droot / "od")]
    if full == "records":
        # records alone are small: fill the tmpfs first so they do not fit
        (small_fs / "ballast").write_bytes(b"x" * (60 * 1024))
    first = fetch(args)
    assert first.returncode == 2, first.stderr
    one_line(first.stderr)
    with contextlib.suppress(FileNotFoundError):
        (small_fs / "ballast").unlink()
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True, timeout=30)
    done = resume_until_done(args)
    assert done.returncode == 0, done.stderr
    want = Counter(range(1, n + 1))
    assert lines_of(out) == want
    assert warc_lines(str(wroot / "w*.warc.gz")) == want
    got = bodies(droot / "od")
    assert sum(got.values()) == n and set(got.values()) == {1}, got


# -- FIFOs ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["fifo-as-input", "fifo-on-stdin"])
def test_an_input_fifo_gives_one_record_per_line(sim: SimInfo, tmp_path: Path, how: str) -> None:
    fifo, out = tmp_path / "in.fifo", tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    data = _urls(sim, N8) + b"not a url\n"

    def writer() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    if how == "fifo-as-input":
        done = fetch([str(fifo), "-o", str(out)])
    else:
        with open(fifo, "rb") as f:
            done = subprocess.run(
                [*SURGE, *BASE, "-", "-o", str(out)],
                stdin=f,
                capture_output=True,
                timeout=60,
                check=False,
            )
    t.join(timeout=10)
    assert done.returncode == 0, done.stderr
    assert lines_of(out) == Counter(range(1, 10))


def test_resume_to_a_fifo_is_one_line_and_exit_2_without_hanging(
    sim: SimInfo, tmp_path: Path
) -> None:
    """``--resume -o FIFO``: a FIFO cannot be read back as records; the run must
    not hang and must say so in one line (exit 2), or else give every record."""
    src, fifo = tmp_path / "in.txt", tmp_path / "out.fifo"
    src.write_bytes(_urls(sim, N8))
    os.mkfifo(fifo)
    got: list[bytes] = []
    stop = time.monotonic() + 30

    def reader() -> None:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while time.monotonic() < stop:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    time.sleep(0.05)
                    continue
                if chunk:
                    got.append(chunk)
                else:
                    time.sleep(0.05)
        finally:
            os.close(fd)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    done = fetch([str(src), "-o", str(fifo), "--resume"], timeout=45)
    if done.returncode == 2:
        one_line(done.stderr)
    else:
        assert done.returncode == 0, done.stderr
        time.sleep(0.3)
        assert b"".join(got).count(b"\n") == 8


# -- the summary adds up ------------------------------------------------------------------


def test_the_summary_counts_add_up_to_the_records(sim: SimInfo, tmp_path: Path) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    names = ["status-200", "status-404", "status-500", "reset", "garbage", "x.hang-body"]
    src.write_bytes(_urls(sim, names) + b"not a url\n" + b"http://bad host/\n")
    done = run(
        ["fetch", "--resolve", RESOLVE, "--max-time", "1", str(src), "-o", str(out)], timeout=60
    )
    assert done.returncode == 0, done.stderr
    n = len(records(out))
    assert n == 8
    text = done.stderr.decode()
    # every "<label>: <count>" or "<label> <count>" pair of the counts section
    counts = [int(m) for m in re.findall(r"(?:^|[\s,])(?:\d{3}|[a-z_]+)[:=]\s*(\d+)\b", text)]
    assert sum(counts) == n, text


# -- -o against --output-dir --------------------------------------------------------------

#: (id, -o relative to tmp, --output-dir relative to tmp) - both names new.
COLLIDE: list[tuple[str, str, str]] = [
    ("o-is-the-output-dir", "od", "od"),
    ("o-is-a-host-directory-of-it", "od/x0.status-200.sim_{port}", "od"),
]


@pytest.mark.parametrize(("o", "d"), [c[1:] for c in COLLIDE], ids=[c[0] for c in COLLIDE])
def test_o_on_the_output_dirs_own_path_is_refused_before_anything_is_made(
    sim: SimInfo, tmp_path: Path, o: str, d: str
) -> None:
    """Two sinks on one name: refused before a byte changes - so no -o file is
    left behind (today an empty one is created, then the run stops)."""
    src = tmp_path / "in.txt"
    src.write_bytes(_urls(sim, ["x0.status-200"]))
    out = tmp_path / o.format(port=sim.http_port)
    done = fetch([str(src), "-o", str(out), "--output-dir", str(tmp_path / d)])
    assert done.returncode == 2, done.stderr
    one_line(done.stderr)
    assert not out.is_file()


def test_duplicate_lines_with_output_dir_each_name_a_body_that_is_in_place(
    sim: SimInfo, tmp_path: Path
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_bytes(_urls(sim, ["status-200"] * 3 + ["big-3k"] * 2))
    done = fetch(
        [str(src), "-o", str(out), "--output-dir", str(tmp_path / "od")], cwd=str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    got = records(out)
    assert lines_of(out) == Counter(range(1, 6))
    for r in got:
        body = Path(str(r["body_path"]))
        if not body.is_absolute():
            body = tmp_path / body
        assert hashlib.sha256(body.read_bytes()).hexdigest() == r["body_sha256"], r
