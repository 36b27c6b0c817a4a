"""An output is never an input: not the file named as INPUT, and not the file
on standard input (by the inode of descriptor 0), whatever name the output is
given - the same name, ``/dev/stdin``, a hard link, a saved body's path.

Each is refused by the sink layer (surge.sinks) before a byte changes: one
line, exit status 2, the file as it was.  Before, ``surge fetch - -o st.txt <
st.txt`` emptied its own input (and so did ``-o /dev/stdin``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from tests.conftest import RESOLVE

from surge.bulk.bodies import BodyFiles
from surge.sim import SimInfo

SURGE = [sys.executable, "-m", "surge.cli"]

#: Each sink, given a name of the file on stdin ("{st}": its path; "{link}": a
#: hard link to it; "{dir}": a directory of the test's).
CASES = [
    ("-", ["-o", "{st}"]),
    ("-", ["-o", "/dev/stdin"]),
    ("-", ["-o", "/proc/self/fd/0"]),
    ("-", ["-o", "{link}"]),
    ("-", ["-o", "{dir}/out.jsonl", "--warc", "{st}"]),
    ("-", ["-o", "{dir}/out.jsonl", "--warc", "/dev/stdin"]),
    ("-", ["-o", "{dir}/out.jsonl", "--har", "{st}"]),
    ("-", ["-o", "{dir}/out.jsonl", "--har", "{link}"]),
    ("-", ["-o", "{dir}/out.jsonl", "--trace", "{st}"]),
    ("-", ["-o", "{dir}/out.jsonl", "--trace", "/dev/stdin"]),
    ("-", ["-o", "{link}", "--resume"]),
    # stdin redirected from the input file named as INPUT too
    ("{st}", ["-o", "/dev/stdin"]),
    ("/dev/stdin", ["-o", "{link}"]),
]


#: Files the options read, each given as an output too: (its option, an output flag).
READ_BY_OPTIONS = [
    ("-d", "-o"),
    ("--data-binary", "--warc"),
    ("--cacert", "-o"),
    ("--proxy-cacert", "--har"),
    ("--cert", "--trace"),
]


@pytest.mark.parametrize(("option", "flag"), READ_BY_OPTIONS)
def test_an_output_that_is_a_file_an_option_reads_is_refused(
    tmp_path: Path, option: str, flag: str
) -> None:
    """-d @FILE, --cacert FILE...: inputs of the run as INPUT is."""
    source = tmp_path / "urls.txt"
    source.write_text("http://a.invalid/\n")
    read = tmp_path / "read.pem"
    ca = trustme.CA()
    if option == "--cert":
        ca.issue_cert("client.example").private_key_and_cert_chain_pem.write_to_path(str(read))
    else:
        ca.cert_pem.write_to_path(str(read))  # (a body too, for -d)
    content = read.read_bytes()
    value = f"@{read}" if option in ("-d", "--data-binary") else str(read)
    argv = [str(source), option, value, flag, str(tmp_path / "link")]
    os.link(read, tmp_path / "link")
    if flag != "-o":
        argv += ["-o", str(tmp_path / "out.jsonl")]
    done = subprocess.run(
        [*SURGE, "fetch", *argv, "-q"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert len(err.splitlines()) == 1 and "is the input file" in err, err
    assert read.read_bytes() == content


@pytest.mark.parametrize(("source", "args"), CASES)
def test_an_output_that_is_the_file_on_stdin_is_refused(
    tmp_path: Path, source: str, args: list[str]
) -> None:
    st = tmp_path / "st.txt"
    content = b"http://a.invalid/\nhttp://b.invalid/\n"
    st.write_bytes(content)
    link = tmp_path / "link.txt"
    os.link(st, link)
    names = {"st": str(st), "link": str(link), "dir": str(tmp_path)}
    argv = [source.format(**names)] + [arg.format(**names) for arg in args]
    with open(st, "rb") as stdin:
        done = subprocess.run(
            [*SURGE, "fetch", *argv, "-q"], stdin=stdin, capture_output=True, timeout=60
        )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("surge fetch: error: ") and "input" in err, err
    assert st.read_bytes() == content
    assert not (tmp_path / "out.jsonl").exists() or (tmp_path / "out.jsonl").stat().st_size == 0


def test_a_saved_body_that_would_be_the_file_on_stdin_is_refused(
    sim: SimInfo, tmp_path: Path
) -> None:
    """--output-dir: a body's path, a hard link to the file on stdin."""
    url = sim.url("body.sim")
    st = tmp_path / "st.txt"
    content = f"{url}\n".encode()
    st.write_bytes(content)
    body = BodyFiles(tmp_path / "pages").path_for(url)
    body.parent.mkdir(parents=True)
    os.link(st, body)
    pages = ["--output-dir", str(tmp_path / "pages")]
    with open(st, "rb") as stdin:
        done = subprocess.run(
            [
                *SURGE,
                "fetch",
                "-",
                "-o",
                str(tmp_path / "out.jsonl"),
                "-q",
                *pages,
                "--resolve",
                RESOLVE,
            ],
            stdin=stdin,
            capture_output=True,
            timeout=60,
        )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert len(err.splitlines()) == 1 and "is the input file (stdin)" in err, err
    assert st.read_bytes() == content
    assert os.path.samefile(body, st)  # not replaced


# -- no two sinks are one file: a saved body is never another output's file ---------------

SINK_FLAGS = ["-o", "--warc", "--har", "--trace"]


def _run_fetch(args: list[str], src: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*SURGE, "fetch", str(src), "-q", "--resolve", RESOLVE, *args],
        capture_output=True,
        timeout=60,
        check=False,
    )


def _sinks(tmp_path: Path, flag: str, path: Path) -> list[str]:
    """Every sink at its own name but ``flag``, which is at ``path``."""
    given = {f: str(tmp_path / f"own{f}") for f in SINK_FLAGS} | {flag: str(path)}
    return [part for f in SINK_FLAGS for part in (f, given[f])]


#: Where a sink is put, relative to --output-dir "od": itself, a host's folder, a body.
INSIDE = ["od", "od/{host}", "od/{host}/{body}"]


@pytest.mark.parametrize("flag", SINK_FLAGS)
@pytest.mark.parametrize("where", INSIDE, ids=["the-dir", "a-host-dir", "a-body"])
@pytest.mark.parametrize("exists", [False, True], ids=["new", "existing"])
def test_a_sink_at_or_inside_the_output_dir_is_refused_before_anything_is_made(
    sim: SimInfo, tmp_path: Path, flag: str, where: str, exists: bool
) -> None:
    url = sim.url("body.sim")
    src = tmp_path / "in.txt"
    src.write_text(f"{url}\n")
    body = BodyFiles(tmp_path / "probe").path_for(url)
    path = tmp_path / where.format(host=body.parent.name, body=body.name)
    if exists:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"precious\n")
    done = _run_fetch([*_sinks(tmp_path, flag, path), "--output-dir", str(tmp_path / "od")], src)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert len(err.splitlines()) == 1 and "--output-dir" in err, err
    if exists:
        assert path.read_bytes() == b"precious\n"
    else:
        assert not (tmp_path / "od").exists()  # not a byte: nor the directory
    assert not any((tmp_path / f"own{f}").exists() for f in SINK_FLAGS)


@pytest.mark.parametrize("flag", SINK_FLAGS)
@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_body_that_would_be_another_sinks_file_is_refused_unwritten(
    sim: SimInfo, tmp_path: Path, flag: str, link: str
) -> None:
    """What a name cannot tell - the body's path a link to another output's
    file - is refused as the body is opened: one line, exit 2, the body not
    written (the link as it was, the other file not replaced by the body)."""
    url = sim.url("body.sim")
    src = tmp_path / "in.txt"
    src.write_text(f"{url}\n")
    other = tmp_path / f"own{flag}"
    other.write_bytes(b"precious\n")
    body = BodyFiles(tmp_path / "pages").path_for(url)
    body.parent.mkdir(parents=True)
    if link == "hard":
        os.link(other, body)
    else:
        body.symlink_to(other)
    before = os.lstat(body)
    done = _run_fetch([*_sinks(tmp_path, flag, other), "--output-dir", str(body.parents[1])], src)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert len(err.splitlines()) == 1 and "another output of this run" in err, err
    after = os.lstat(body)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # not replaced
    if link == "symbolic":
        assert os.readlink(body) == str(other)
    if flag in ("--har", "--trace"):  # written whole at the end: the old file stays at the link
        assert other.read_bytes() != b"precious\n"
        if link == "hard":
            assert body.read_bytes() == b"precious\n"
