"""surge.sinks: the one contract of every file surge writes, unit by unit.

Real faults only: a full disk is /dev/full, a size limit is RLIMIT_FSIZE (set
in a child process, as it applies to every file the process writes), a closed
pipe is a pipe whose reader went away, another run is another process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import memory_device

from surge.errors import LocalResourceError, SinkError, UsageError
from surge.sinks import (
    claim,
    lock_holder,
    names_stdout,
    open_output,
    open_replacement,
    read_capped,
    read_lines,
    stdout_sink,
)


def child(script: str, **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        **options,  # type: ignore[call-overload]
    )


def test_a_full_disk_is_one_error_naming_the_file(tmp_path: Path) -> None:
    full = memory_device(tmp_path, "full")
    sink = open_output(full)
    assert not sink.regular
    with pytest.raises(SinkError) as caught:
        sink.write(b"record\n")
    assert str(caught.value) == f"{full}: cannot write: [Errno 28] No space left on device"
    with pytest.raises(SinkError):  # and so is every write after it: nothing after a gap
        sink.write(b"x")
    sink.close()


def test_a_size_limit_keeps_the_whole_lines_written(tmp_path: Path) -> None:
    """RLIMIT_FSIZE cuts a write short (then EFBIG): with rollback="line" the
    file keeps the whole lines that made it; with "write", none of that write."""
    lines = b"".join(b"record %04d\n" % n for n in range(100))  # 12 bytes a line
    # "first line\n" is 11 bytes; 100 bytes fit: 7 whole records and a piece
    for mode, kept in (("line", 11 + 7 * 12), ("write", 11)):
        path = tmp_path / f"{mode}.out"
        done = child(
            f"""
            import resource
            from surge.errors import SinkError
            from surge.sinks import open_output
            sink = open_output({str(path)!r}, rollback={mode!r})
            sink.write(b"first line\\n")
            resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
            try:
                sink.write({lines!r})
            except SinkError as e:
                print(e)
            """
        )
        assert done.stdout.strip() == f"{path}: cannot write: [Errno 27] File too large"
        assert path.read_bytes() == (b"first line\n" + lines)[:kept]


def test_a_pipe_closed_early_is_one_error() -> None:
    reader, writer = os.pipe()
    os.close(reader)
    done = child(
        f"""
        import os
        from surge.errors import SinkError
        from surge.sinks import open_output
        sink = open_output("/dev/fd/{writer}")
        try:
            sink.write(b"x" * 100_000)
        except SinkError as e:
            print(e)
        """,
        pass_fds=(writer,),
    )
    os.close(writer)
    assert done.stdout.strip() == f"/dev/fd/{writer}: cannot write: [Errno 32] Broken pipe"


def test_short_writes_and_a_non_blocking_pipe_are_continued() -> None:
    """A pipe made non-blocking (by whoever shares it) takes 64 KiB and says
    EAGAIN: the sink waits for room and writes the rest - 4 MiB, in order."""
    data = bytes(range(256)) * 16384
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    done = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from surge.sinks import open_output; open_output('/dev/fd/{writer}').write("
            f"bytes(range(256)) * 16384)",
        ],
        pass_fds=(writer,),
    )
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        got = pipe.read()
    assert done.wait(timeout=60) == 0
    assert got == data


def test_a_second_run_is_refused_naming_the_holders_pid(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b"kept\n")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; from surge.sinks import open_output; s = open_output({str(path)!r}, "
            "append=True); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert lock_holder(os.stat(path)) == holder.pid
        for append in (False, True):
            with pytest.raises(SinkError) as caught:
                open_output(path, append=append)
            assert str(caught.value) == (
                f"{path}: in use by another run (pid {holder.pid}); wait for it, or write elsewhere"
            )
        assert path.read_bytes() == b"kept\n"  # refused before anything was cut
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    with open_output(path) as sink:  # free again: replaced
        sink.write(b"mine\n")
    assert path.read_bytes() == b"mine\n"


def test_the_same_file_for_two_outputs_of_one_run_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out"
    with open_output(path), pytest.raises(SinkError, match="given for two outputs of this run"):
        open_output(tmp_path / "." / "out", append=True)


def test_devices_and_fifos_are_not_locked_or_cut(tmp_path: Path) -> None:
    null = memory_device(tmp_path, "null")
    with open_output(null) as one, open_output(null) as two:
        one.write(b"a")
        two.write(b"b")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with open_output(fifo) as sink:
            assert not sink.regular
            sink.write(b"through\n")
        assert os.read(reader, 100) == b"through\n"
    finally:
        os.close(reader)


def test_a_file_deleted_or_replaced_under_the_run_stops_it(tmp_path: Path) -> None:
    path = tmp_path / "out"
    sink = open_output(path)
    sink.write(b"one\n")
    path.unlink()
    with pytest.raises(SinkError, match="deleted or replaced during the run"):
        sink.write(b"two\n")
    sink.close()
    sink = open_output(path)
    path.rename(tmp_path / "moved")
    path.write_bytes(b"someone else's\n")
    with pytest.raises(SinkError, match="deleted or replaced during the run"):
        sink.write(b"two\n")
    sink.close()
    assert path.read_bytes() == b"someone else's\n"


def test_opening_what_cannot_be_written_is_one_error(tmp_path: Path) -> None:
    readonly = tmp_path / "readonly"
    readonly.write_bytes(b"x")
    readonly.chmod(0o444)
    cases = {
        str(tmp_path): "Is a directory",
        str(tmp_path / "missing" / "out"): "No such file or directory",
        str(readonly / "below"): "Not a directory",
    }
    if os.geteuid() != 0:  # root writes a 0444 file anyway
        cases[str(readonly)] = "Permission denied"
    for path, problem in cases.items():
        for opener in (open_output, open_replacement):
            with pytest.raises(SinkError) as caught:
                opener(path)
            assert str(caught.value).startswith(f"{path}: cannot write: [Errno ")
            assert str(caught.value).endswith(problem)


def test_a_replacement_is_whole_or_absent(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(b"old page")
    path.chmod(0o640)
    sink = open_replacement(path)
    sink.write(b"half of a new")
    assert path.read_bytes() == b"old page"  # nothing of it under the name yet
    sink.discard()
    assert path.read_bytes() == b"old page" and os.listdir(tmp_path) == ["page.html"]
    sink = open_replacement(path)
    sink.write(b"new page")
    sink.commit()
    assert path.read_bytes() == b"new page" and os.listdir(tmp_path) == ["page.html"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # its mode kept


def test_a_replacement_through_a_symlink_replaces_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.har"
    target.write_bytes(b"old")
    link = tmp_path / "link.har"
    link.symlink_to(target)
    sink = open_replacement(link)
    sink.write(b"new")
    sink.commit()
    assert link.is_symlink() and target.read_bytes() == b"new"
    full = tmp_path / "full.har"
    device_ = memory_device(tmp_path, "full")
    full.symlink_to(device_)  # a device behind a link: written in place, never replaced
    sink = open_replacement(full)
    with pytest.raises(SinkError, match=r"full.har: cannot write: \[Errno 28\]"):
        sink.write(b"x")
    sink.discard()
    assert full.is_symlink() and stat.S_ISCHR(os.stat(device_).st_mode)


def test_out_of_descriptors_when_opening_is_a_local_shortage(tmp_path: Path) -> None:
    done = child(
        f"""
        import os, resource
        from surge.errors import LocalResourceError
        from surge.sinks import open_output
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            open_output({str(tmp_path / "out")!r})
        except LocalResourceError as e:
            print(e)
        """
    )
    assert done.stdout.strip() == f"{tmp_path / 'out'}: cannot open: [Errno 24] Too many open files"
    assert issubclass(LocalResourceError, Exception)


def test_read_capped_reads_at_most_the_cap(tmp_path: Path) -> None:
    small = tmp_path / "body"
    small.write_bytes(b"x" * 100)
    assert read_capped(str(small), 100, "-d @body") == b"x" * 100
    with pytest.raises(UsageError, match=r"-d @body: larger than the 99-byte cap"):
        read_capped(str(small), 99, "-d @body")
    with pytest.raises(UsageError, match=r"-d @/dev/zero: larger than the 1,048,576-byte cap"):
        read_capped("/dev/zero", 1 << 20, "-d @/dev/zero")
    with pytest.raises(UsageError, match=r"cannot read: \[Errno 21\] Is a directory"):
        read_capped(str(tmp_path), 100, "-d @dir")


def test_read_lines_never_holds_a_long_line(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"short\n" + b"x" * 3_000_000 + b"\nlast")
    fd = os.open(path, os.O_RDONLY)
    try:
        got = list(read_lines(fd, 100, "out"))
    finally:
        os.close(fd)
    assert got[0] == (b"short\n", True, 0)
    assert len(got[1][0]) == 102 and got[1][1:] == (True, 6)  # cut, and known to be cut
    assert got[2] == (b"last", False, 3_000_007)


def test_closed_standard_streams(tmp_path: Path) -> None:
    """Closed when the command starts: /dev/null takes their place, so a file
    opened next does not get descriptor 1; stdout is then a usage error."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import os, sys
                from surge.sinks import guard_standard_streams, open_output
                from surge.sinks import stdin_closed, stdout_sink
                from surge.errors import SinkError
                guard_standard_streams()
                sink = open_output({str(tmp_path / "out")!r})
                report = [sink.fd != 1, stdin_closed()]
                try:
                    stdout_sink()
                except SinkError as e:
                    report.append(str(e))
                sys.stderr.write(repr(report))
                """
            ),
        ],
        capture_output=False,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: [os.close(0), os.close(1)],  # closing is the point
    )
    assert done.stderr == repr(
        [True, True, "stdout: cannot write: it is closed (or not open for writing)"]
    )


def test_stdout_replaced_by_the_program_is_written_through_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stream)
    sink = stdout_sink()
    sink.write(b"through sys.stdout\n")
    assert stream.buffer.getvalue() == b"through sys.stdout\n"  # type: ignore[attr-defined]
    stream.close()
    with pytest.raises(SinkError, match="stdout: cannot write"):
        sink.write(b"after close\n")


def test_a_file_system_without_flock_is_written_unlocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flock's ENOLCK (some network file systems) is not a reason to refuse."""

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with open_output(tmp_path / "out") as sink:
        sink.write(b"ok\n")
    assert (tmp_path / "out").read_bytes() == b"ok\n"


def test_parts_written_at_their_offsets_by_threads(tmp_path: Path) -> None:
    """A ranged download's parts (s3's way): each at its offset, whole, from
    several threads; a failure names the file."""
    import threading

    path = tmp_path / "object"
    sink = open_replacement(path)
    part = 1 << 20
    parts = [bytes([n]) * part for n in range(8)]
    threads = [
        threading.Thread(target=sink.write_at, args=([p[:1000], p[1000:]], n * part))
        for n, p in enumerate(parts)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.commit()
    assert path.read_bytes() == b"".join(parts)
    full = open_output(memory_device(tmp_path, "full"))
    with pytest.raises(SinkError, match=r"full: cannot write: \[Errno 28\]"):
        full.write_at([b"x"], 0)
    full.close()


@pytest.mark.parametrize(
    ("path", "is_stdout"),
    [
        ("-", True),
        ("/dev/stdout", True),
        ("/dev/fd/1", True),
        ("/proc/self/fd/1", True),
        ("/dev/stdin", False),
        ("out.jsonl", False),
        ("./-", False),
    ],
)
def test_the_names_of_stdout(path: str, is_stdout: bool) -> None:
    """What ``cp s3://b/k PATH`` streams to stdout, by name (nothing written)."""
    assert names_stdout(path) is is_stdout


# -- no two sinks are one file -----------------------------------------------------------


@pytest.mark.parametrize("link", ["same", "hard", "symbolic"])
@pytest.mark.parametrize("owner", ["locked output", "claimed"])
def test_a_replacement_onto_a_claimed_file_is_refused_until_the_claim_ends(
    tmp_path: Path, link: str, owner: str
) -> None:
    kept = tmp_path / "records.jsonl"
    kept.write_bytes(b"kept\n")
    if owner == "locked output":
        sink = open_output(kept, append=True)
        release = sink.close
    else:
        release = claim(kept)
    other = tmp_path / "body"
    if link == "same":
        other = kept
    elif link == "hard":
        os.link(kept, other)
    else:
        other.symlink_to(kept)
    with pytest.raises(SinkError, match="another output of this run"):
        open_replacement(other)
    assert kept.read_bytes() == b"kept\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp
    release()
    open_replacement(other).discard()  # the run's end gave the file back
