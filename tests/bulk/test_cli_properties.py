"""``surge fetch`` under generated inputs and option values (Hypothesis).

Every example runs the command line in a subprocess against the simulated web.
Whatever the input and the flags, the properties are:

- the exit status is 0, 1, 2 or 130, and no traceback is printed;
- exit 2 prints exactly one line on stderr, ``surge fetch: error: ...``, and
  stdout holds only whole records;
- exit 0 accounts for every input record: one output record per record the
  input format defines (blank lines, ``#`` comments in text, a CSV header, empty
  CSV cells and JSONL ``null`` or blank values are not records), each with
  url/input/line/status/error;
- valid flags on a well-formed input exit 0; an invalid flag, or an input the
  reader refuses, exits 2.

No request leaves loopback: generated values never contain a digit, ``:``,
``%``, ``@`` or ``[`` (so no IP literal, port, scheme or userinfo of their own),
their non-ASCII letters have no digit under NFKC, and ``--resolve`` sends every
other name to 127.0.0.1.  Bytes that are not UTF-8 are only continuation or
never-valid bytes, so a line holding one is refused rather than decoded.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import RESOLVE

from surge.bulk.inputs import read_inputs
from surge.errors import UsageError
from surge.sim import SimInfo

#: Every name not under .sim to loopback too (a refused port 80 or 443 there).
RESOLVE_ALL = "*:*:127.0.0.1"

EXIT_STATUSES = {0, 1, 2, 130}
RECORD_FIELDS = {"url", "input", "line", "status", "error"}

# Characters of generated values: no digit, ':', '%', '@', '[' (see the module doc),
# nor ',', tab or '{', which would make a text input sniff as CSV or JSONL.
SAFE_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-_/?#=&~ \"'é߀中ü\u00a0"
SIM_HOSTS = ("status-200.sim", "status-404.sim", "status-500.sim", "reset.sim", "garbage.sim")
# Bytes for binary garbage: safe ASCII, control bytes, NUL, and bytes that are
# never valid UTF-8 on their own (continuation bytes, C0/C1, F5-FF).
GARBAGE_BYTES = [
    *b"abcdefghijklmnopqrstuvwxyz.-_/ #,{}\"'\t\r\n\x00\x01\x1f\x7f",
    *range(0x80, 0xC0),
    0xC0,
    0xC1,
    *range(0xF5, 0x100),
]
LONG = 100_000


def run_fetch(args: list[str], stdin: bytes | None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=120,
    )


safe_words = st.text(alphabet=SAFE_ALPHABET, min_size=1, max_size=30)


@st.composite
def url_values(draw: st.DrawFn, port: int) -> str:
    """A value of one input: a sim URL, a bare sim domain, a long one, or garbage."""
    kind = draw(st.sampled_from(["url", "domain", "garbage", "long-url", "long-garbage"]))
    host = draw(st.sampled_from(SIM_HOSTS))
    if kind == "url":
        return f"http://{host}:{port}/{draw(st.sampled_from(['', 'a', 'p?q=é']))}"
    if kind == "domain":
        return host
    if kind == "long-url":
        return f"http://{host}:{port}/" + "a" * LONG
    if kind == "long-garbage":
        return "x" * LONG
    return draw(safe_words)


@dataclass
class Input:
    """A generated input: its bytes, the format it is written in, and the lines
    of its records (None if it is not well-formed as that format)."""

    data: bytes
    kind: str  # text, csv, jsonl, binary
    lines: list[int] | None


def _finish(rows: list[str], draw: st.DrawFn) -> tuple[str, bytes]:
    """Join rows with LF or CRLF, maybe without a final newline, maybe with a BOM."""
    end = draw(st.sampled_from(["\n", "\r\n"]))
    final_newline = draw(st.booleans())
    text = end.join(rows) + (end if rows and final_newline else "")
    bom = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    return end, bom + text.encode()


@st.composite
def text_inputs(draw: st.DrawFn, port: int) -> Input:
    entries = draw(
        st.lists(
            st.one_of(
                url_values(port),
                st.sampled_from(["", "   ", "\t", " \u00a0 "]),  # blank lines
                safe_words.map(lambda w: "#" + w),  # comments
                st.just("a\x00b"),  # a NUL byte is a (bad) value, not a line end
            ),
            max_size=8,
        )
    )
    # Values indented or not; a comment is only one at the start of the stripped line.
    rows = [draw(st.sampled_from(["", " ", "\t"])) + e if e.strip() else e for e in entries]
    _, data = _finish(rows, draw)
    lines = [n for n, e in enumerate(entries, 1) if e.strip() and not e.strip().startswith("#")]
    return Input(data, "text", lines)


@st.composite
def csv_inputs(draw: st.DrawFn, port: int) -> Input:
    header = draw(st.booleans())
    # Domains that look like hosts (a dot, one word), as a top-sites list has them.
    domain = st.one_of(
        st.sampled_from(SIM_HOSTS),
        st.sampled_from(SIM_HOSTS).map(lambda h: f"http://{h}:{port}/"),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyzéü中-", min_size=1, max_size=12).map(
            lambda w: w + ".example.sim"
        ),
        st.just(f"http://status-200.sim:{port}/" + "b" * LONG),
    )
    cells = draw(st.lists(st.one_of(domain, st.just("")), max_size=8))
    if not header and cells and not cells[0]:
        cells[0] = SIM_HOSTS[0]  # headerless: the first row must show the URL column
    rows: list[str] = ["rank,domain"] if header else []
    lines: list[int] = []
    for rank, cell in enumerate(cells, 1):
        if draw(st.integers(0, 4)) == 0:
            rows.append("")  # a blank line: no row at all
        rows.append(f"{rank},{cell}")
        lines.append(len(rows))  # an empty cell too: an invalid_url record
    _, data = _finish(rows, draw)
    return Input(data, "csv", lines)


@st.composite
def jsonl_inputs(draw: st.DrawFn, port: int) -> Input:
    values = draw(
        st.lists(
            st.one_of(
                url_values(port).map(lambda v: {"url": v}),
                url_values(port).map(lambda v: {"id": "x", "url": v, "extra": [None]}),
                st.just({"url": None}),  # an invalid_url record
                st.just({"url": "   "}),  # and so is this one
                st.none(),  # a blank line
            ),
            max_size=8,
        )
    )
    rows = ["" if v is None else json.dumps(v, ensure_ascii=draw(st.booleans())) for v in values]
    _, data = _finish(rows, draw)
    lines = [n for n, v in enumerate(values, 1) if v is not None]
    return Input(data, "jsonl", lines)


@st.composite
def binary_inputs(draw: st.DrawFn, port: int) -> Input:
    """Good lines and lines of bytes that are not UTF-8, in any order: the reader
    stops at the first bad one, after the records before it are out."""
    garbage = st.lists(st.sampled_from(GARBAGE_BYTES), min_size=1, max_size=60).map(bytes)
    good = st.one_of(url_values(port), safe_words).map(str.encode)
    rows = draw(st.lists(st.one_of(good, garbage), min_size=1, max_size=6))
    data = draw(st.sampled_from([b"\n", b"\r\n"])).join(rows)
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return Input(data, "binary", None)


def inputs(port: int) -> st.SearchStrategy[Input]:
    return st.one_of(
        text_inputs(port),
        csv_inputs(port),
        jsonl_inputs(port),
        binary_inputs(port),
        st.sampled_from([b"", b"\n", b"\r\n\r\n", b"\xef\xbb\xbf", b"   \n\t\n"]).map(
            lambda data: Input(data, "text", [])
        ),
    )


@dataclass
class Flags:
    args: list[str] = field(default_factory=list)
    valid: bool = True


#: Per option: valid values (None leaves the flag out); values click parses that
#: surge refuses; values click itself cannot parse (not a number, not a choice).
OPTION_VALUES: dict[str, tuple[list[str | None], list[str], list[str]]] = {
    "--concurrency": ([None, "1", "4", "100", "50000"], ["0", "-3"], ["many", "2.5"]),
    "--max-time": ([None, "0.5", "2", "5"], ["0", "-1", "nan", "inf", "1e999"], ["abc"]),
    "--connect-timeout": ([None, "0.2", "1", "3"], ["0", "-0.5", "nan", "-inf"], [""]),
    "--retries": ([None, "0", "1"], ["-1"], ["once"]),
    "--max-filesize": ([None, "0", "1", "1024", "10k", "2M"], ["-1"], ["10Q", "1e6", "k"]),
    "--max-connecting": ([None, "1", "8", "256"], ["0", "-2"], ["x"]),
    "--format": ([None, "jsonl", "csv"], [], ["xml", ""]),
}
# Values are sent as latin-1: crème can be, 中文 cannot.
VALID_HEADERS = ["X-Test: 1", "X-Accent: crème", "Accept:", "X-Sp:   spaced  "]
# A header name is an HTTP token: ASCII, no space.
INVALID_HEADERS = ["no colon", ": no name", "Bad Name: x", "中文", "X-Café: crème", "X-Han: 中文"]


@st.composite
def flags(draw: st.DrawFn, port: int, invalid: bool) -> Flags:
    """Option values, all valid, or (``invalid``) maybe some invalid ones."""
    out = Flags()
    for name, (good, refused, unparsable) in OPTION_VALUES.items():
        bad = refused + unparsable
        if invalid and bad and draw(st.integers(0, 5)) == 0:
            out.valid = False
            out.args.append(f"{name}={draw(st.sampled_from(bad))}")
        else:
            value = draw(st.sampled_from(good))
            if value is not None:
                out.args.append(f"{name}={value}")
    # Defaults of 30 s and 10 s: small ones keep a run short if anything stalls.
    if not any(a.startswith("--max-time") for a in out.args):
        out.args.append("--max-time=3")
    if not any(a.startswith("--connect-timeout") for a in out.args):
        out.args.append("--connect-timeout=1")
    for header in draw(st.lists(st.sampled_from(VALID_HEADERS), max_size=2)):
        out.args += ["-H", header]
    if invalid and draw(st.integers(0, 5)) == 0:
        out.valid = False
        out.args += ["-H", draw(st.sampled_from(INVALID_HEADERS))]
    templates: list[str | None] = [None, f"http://{{}}:{port}/", "https://www.{}/", "{}", "www.{}/"]
    if invalid and draw(st.integers(0, 5)) == 0:
        out.valid = False
        out.args.append("--template=" + draw(st.sampled_from(["http://x/", "{}{}", ""])))
    else:
        template = draw(st.sampled_from(templates))
        if template is not None:
            out.args.append(f"--template={template}")
    return out


def check_run(
    done: subprocess.CompletedProcess[bytes],
    source: Input,
    flags_: Flags,
    reader: Callable[[str | None], int | None],
) -> None:
    """The properties of one run (see the module doc)."""
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode in EXIT_STATUSES, (done.returncode, stderr)
    assert "Traceback" not in stderr, stderr
    csv_out = "--format=csv" in flags_.args
    if done.returncode == 2:
        assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
        assert stderr.startswith("surge fetch: error:"), stderr
    if csv_out:
        got = list(csv.reader(io.StringIO(done.stdout.decode(), newline="")))
        assert not done.stdout or done.stdout.endswith(b"\n")
        if got:
            assert set(got[0]) >= RECORD_FIELDS, got[0]
            assert all(len(row) == len(got[0]) for row in got), got
            lines = [int(row[got[0].index("line")]) for row in got[1:]]
        else:
            lines = []
    else:
        assert not done.stdout or done.stdout.endswith(b"\n"), done.stdout[-200:]
        parsed = [json.loads(line) for line in done.stdout.split(b"\n")[:-1]]
        for record in parsed:
            assert isinstance(record, dict) and set(record) >= RECORD_FIELDS, record
        lines = [record["line"] for record in parsed]
    input_format = next(
        (a.partition("=")[2] for a in flags_.args if a.startswith("--input-format=")), None
    )
    expected = reader(input_format)  # the records surge's reader finds; None: it refuses
    if not flags_.valid:
        assert done.returncode == 2, (done.returncode, stderr)
        return
    if expected is None:
        assert done.returncode == 2, (done.returncode, stderr)
        return
    assert done.returncode == 0, stderr
    assert len(lines) == expected == len(set(lines)), (lines, expected)
    if source.lines is not None and input_format in (None, source.kind):
        assert sorted(lines) == source.lines, (lines, source.lines)


def reader_count(
    source: str | io.BytesIO, template: str | None
) -> Callable[[str | None], int | None]:
    def count(input_format: str | None) -> int | None:
        if isinstance(source, io.BytesIO):
            source.seek(0)
        try:
            return sum(1 for _ in read_inputs(source, template=template, input_format=input_format))
        except UsageError:
            return None

    return count


def template_of(args: list[str]) -> str | None:
    found = [a.partition("=")[2] for a in args if a.startswith("--template=")]
    return found[-1] if found else None


NAMES = ["in.txt", "in.csv", "in.jsonl", "in.json", "in", "in.dat", "in.tsv", "IN.CSV"]
EXTENSION_KINDS = {
    ".txt": "text",
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
}


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_generated_inputs_on_stdin_and_in_files(
    sim: SimInfo, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    source = data.draw(inputs(sim.http_port), label="input")
    flags_ = data.draw(flags(sim.http_port, invalid=False), label="flags")
    input_format = data.draw(st.sampled_from([None, None, None, "text", "csv", "jsonl"]))
    if input_format is not None:
        flags_.args.append(f"--input-format={input_format}")
    name = data.draw(st.sampled_from(["-", *NAMES]), label="name")
    args = ["-q", "--no-progress", "--resolve", RESOLVE, "--resolve", RESOLVE_ALL, *flags_.args]
    template = template_of(flags_.args)
    if name == "-":
        done = run_fetch([*args, "-"], source.data)
        counter = reader_count(io.BytesIO(source.data), template)
    else:
        path = tmp_path_factory.mktemp("in") / name
        path.write_bytes(source.data)
        done = run_fetch([*args, str(path)], None)
        counter = reader_count(str(path), template)
        if EXTENSION_KINDS.get(path.suffix.lower(), source.kind) != source.kind:
            source.lines = None  # a mismatched extension: the reader decides what is a record
    check_run(done, source, flags_, counter)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_generated_option_values(sim: SimInfo, data: st.DataObject) -> None:
    source = data.draw(st.one_of(text_inputs(sim.http_port), jsonl_inputs(sim.http_port)))
    flags_ = data.draw(flags(sim.http_port, invalid=True), label="flags")
    args = ["-q", "--no-progress", "--resolve", RESOLVE, "--resolve", RESOLVE_ALL, *flags_.args]
    done = run_fetch([*args, "-"], source.data)
    check_run(done, source, flags_, reader_count(io.BytesIO(source.data), template_of(args)))
