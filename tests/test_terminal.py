"""One place (surge.terminal) decides which escape codes a command writes to a
terminal: no colour under ``NO_COLOR`` (any non-empty value, https://no-color.org),
and no escape code at all under ``TERM=dumb``.

The table runs every command that colours or redraws a line - ``surge trace``
(colour), ``surge fetch``, ``surge s3 ls``, ``cp`` and ``sync`` (the progress
line) - on a real pseudo-terminal, under each variable; and, as the control
that shows the harness sees escape codes at all, under neither.
"""

from __future__ import annotations

import io
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import RESOLVE, require

from surge.sim import SimInfo
from surge.terminal import ProgressLine, colours, paint

#: Any escape sequence, and the colour ones (SGR: ESC [ params m).
ESCAPE = re.compile(r"\x1b")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def on_terminal(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 60) -> str:
    """What ``argv`` wrote with its stdout and stderr on one pseudo-terminal."""
    main, sub = os.openpty()
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=sub, stderr=sub, env=env, cwd=cwd,
        start_new_session=True,
    )  # fmt: skip
    os.close(sub)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"{argv[3:5]} still running after {timeout} s: {b''.join(chunks)!r}")
            ready, _, _ = select.select([main], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(main)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def moto() -> Iterator[dict[str, str]]:
    """An S3 server (moto's, on loopback) with one bucket of a few objects, and
    the environment that reaches it."""
    boto3 = require("boto3")
    server_module = require("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {
            "AWS_ACCESS_KEY_ID": "moto-key",
            "AWS_SECRET_ACCESS_KEY": "moto-secret",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )
        client.create_bucket(Bucket="terminal")
        for n in range(3):
            client.put_object(Bucket="terminal", Key=f"k/{n}.txt", Body=b"x" * 10)
        yield env
    finally:
        server.stop()


Command = Callable[[SimInfo, dict[str, str], Path], list[str]]


def _trace(sim: SimInfo, s3: dict[str, str], cwd: Path) -> list[str]:
    return ["trace", "--resolve", RESOLVE, sim.url("status-200.sim")]


def _fetch(sim: SimInfo, s3: dict[str, str], cwd: Path) -> list[str]:
    (cwd / "urls.txt").write_text("".join(sim.url(f"x{n}.sim") + "\n" for n in range(5)))
    return ["fetch", "urls.txt", "--resolve", RESOLVE, "-o", "out.jsonl"]


def _s3_ls(sim: SimInfo, s3: dict[str, str], cwd: Path) -> list[str]:
    return ["s3", "ls", "s3://terminal", "--recursive"]


def _s3_cp(sim: SimInfo, s3: dict[str, str], cwd: Path) -> list[str]:
    (cwd / "up.txt").write_bytes(b"y" * 100)
    return ["s3", "cp", "up.txt", "s3://terminal/up.txt"]


def _s3_sync(sim: SimInfo, s3: dict[str, str], cwd: Path) -> list[str]:
    (cwd / "dir").mkdir()
    (cwd / "dir" / "a.txt").write_bytes(b"z" * 100)
    return ["s3", "sync", "dir/", f"s3://terminal/sync/{cwd.name}/"]  # a new one each time


#: Each command that colours or redraws, and the escape codes it writes to a
#: terminal that takes them (the control).
COMMANDS: dict[str, tuple[Command, re.Pattern[str]]] = {
    "trace": (_trace, COLOUR),
    "fetch": (_fetch, re.compile(r"\r\x1b\[K")),
    "s3 ls": (_s3_ls, re.compile(r"\r\x1b\[K")),
    "s3 cp": (_s3_cp, re.compile(r"\r\x1b\[K")),
    "s3 sync": (_s3_sync, re.compile(r"\r\x1b\[K")),
}

#: The environment -> what must not appear.  NO_COLOR forbids colour only (a
#: progress line may still erase itself); TERM=dumb every escape code.
SETTINGS = {
    "NO_COLOR=1": ({"NO_COLOR": "1", "TERM": "xterm"}, COLOUR),
    "NO_COLOR=anything": ({"NO_COLOR": "false", "TERM": "xterm"}, COLOUR),
    "TERM=dumb": ({"TERM": "dumb"}, ESCAPE),
    "TERM=dumb NO_COLOR=1": ({"TERM": "dumb", "NO_COLOR": "1"}, ESCAPE),
}


def _run(name: str, settings: dict[str, str], sim: SimInfo, s3: dict[str, str], cwd: Path) -> str:
    command, _ = COMMANDS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env.update(s3, HOME=str(cwd), **settings)
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = str(cwd / "none")
    out = on_terminal([sys.executable, "-m", "surge", *command(sim, s3, cwd)], env, cwd)
    assert "Traceback" not in out and "error:" not in out, out
    return out


@pytest.mark.parametrize("setting", SETTINGS.values(), ids=SETTINGS)
@pytest.mark.parametrize("name", COMMANDS)
def test_no_colour_and_no_escapes_where_the_terminal_says(
    name: str,
    setting: tuple[dict[str, str], re.Pattern[str]],
    sim: SimInfo,
    moto: dict[str, str],
    tmp_path: Path,
) -> None:
    settings, forbidden = setting
    out = _run(name, settings, sim, moto, tmp_path)
    assert not forbidden.search(out), repr(out)
    if name != "trace":  # the progress line is still drawn, over itself with spaces
        assert "\r" in out.replace("\r\n", "\n"), repr(out)


@pytest.mark.parametrize("empty", [False, True], ids=["unset", "NO_COLOR empty"])
@pytest.mark.parametrize("name", COMMANDS)
def test_a_terminal_that_takes_them_gets_them(
    name: str, empty: bool, sim: SimInfo, moto: dict[str, str], tmp_path: Path
) -> None:
    settings = {"TERM": "xterm", **({"NO_COLOR": ""} if empty else {})}
    out = _run(name, settings, sim, moto, tmp_path)
    assert COMMANDS[name][1].search(out), repr(out)


def test_a_dumb_progress_line_covers_what_it_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    stream = io.StringIO()
    line = ProgressLine(stream)
    line.show("1,234 done")
    line.show("5 done")
    line.close()
    assert stream.getvalue() == "\r1,234 done\r5 done    \r          \r"


@pytest.mark.parametrize(
    ("env", "tty", "expected"),
    [
        ({}, True, True),
        ({"NO_COLOR": ""}, True, True),
        ({"NO_COLOR": "0"}, True, False),
        ({"TERM": "dumb"}, True, False),
        ({}, False, False),
    ],
)
def test_colours_decides_in_one_place(
    env: dict[str, str], tty: bool, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    assert colours(Stream()) is expected
    assert paint("x", "31", colours(Stream())) == ("\x1b[31mx\x1b[0m" if expected else "x")


def test_nothing_else_in_surge_writes_an_escape_code() -> None:
    src = Path(__file__).resolve().parent.parent / "src" / "surge"
    writers = []
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\\x1b\[|\\033\[|\\u001b\[|\\e\[", text) and path.name != "terminal.py":
            writers.append(str(path.relative_to(src)))
    assert writers == [], "escape codes go through surge.terminal"
