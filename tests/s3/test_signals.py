"""A signal stops every ``surge s3`` command the same way, from its first line
on: one "interrupted" line, exit 128 + the signal's number (130 Ctrl-C, 143
SIGTERM, 129 SIGHUP), the process's own cleanup run - never click's
"Aborted!" and status 1, never a SIGTERM that kills it outright, never
asyncio's "Task was destroyed but it is pending!".

Each command runs as a real process.  The signal is sent at a point the test
knows the command is at: while it is still starting (an import made slow on
purpose, by a finder the child loads through ``sitecustomize``: the first
~0.5 s of a real start, held open), and while a listing waits on a server
that went silent (tests/s3/stall.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.s3._buckets import Buckets
from tests.s3.stall import StallingRelay, stalling_relay
from tests.s3.test_cp import new_bucket
from tests.s3.test_stall import finish, surge, wait_for

from surge.s3 import Credentials
from surge.s3.minio import MinioServer

SIGNALS = pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)

#: Loaded by the child at start: the import of ``SLOW`` says so (a file) and
#: then waits, as a slow start would, until the test has sent its signal; at
#: exit, a file says the process's own cleanup ran (a process killed by a
#: signal runs none).
SITECUSTOMIZE = """
import atexit, os, sys, time

_MARK = os.environ["SURGE_TEST_MARK"]
_SLOW = os.environ["SURGE_TEST_SLOW"]

class _SlowImport:
    def find_spec(self, name, path=None, target=None):
        if name == _SLOW:
            sys.meta_path.remove(self)
            open(_MARK + ".importing", "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(_MARK + ".go") and time.monotonic() < deadline:
                time.sleep(0.01)  # the import goes on once the signal was sent
        return None

sys.meta_path.insert(0, _SlowImport())
atexit.register(lambda: open(_MARK + ".atexit", "w").close())
"""


@pytest.fixture()
def server(minio: MinioServer, s3: Any) -> Buckets:
    return Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)


def _clean_stop(code: int, err: str, signum: int, command: str) -> None:
    assert code == 128 + signum, err
    assert f"surge s3 {command}: interrupted" in err, err
    assert "Aborted!" not in err and "Traceback" not in err, err
    assert "Task was destroyed" not in err and "never awaited" not in err, err


@SIGNALS
@pytest.mark.parametrize(
    ("command", "slow"),
    [
        ("cp", "surge.s3.transfer"),  # a download: its engine loads after the options
        ("cp-up", "surge.s3.uploads"),  # an upload: the upload engine too
        ("ls", "surge.s3.keyspace"),  # a listing's first request
    ],
)
def test_a_signal_while_the_command_starts_stops_it_cleanly(
    server: Buckets, tmp_path: Path, signum: int, command: str, slow: str
) -> None:
    bucket = new_bucket(server, {"k": b"body"})
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    mark = str(tmp_path / "mark")
    path = os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")])
    source = tmp_path / "f.txt"
    source.write_bytes(b"upload me")
    args = {
        "cp": ["cp", f"s3://{bucket}/k", str(tmp_path / "out")],
        "cp-up": ["cp", str(source), f"s3://{bucket}/up"],
        "ls": ["ls", f"s3://{bucket}/", "--recursive"],
    }[command]
    process = surge(
        server,
        *args,
        "--endpoint-url",
        server.endpoint_url,
        PYTHONPATH=path,
        SURGE_TEST_MARK=mark,
        SURGE_TEST_SLOW=slow,
    )
    wait_for(lambda: os.path.exists(mark + ".importing"), process, f"the import of {slow}")
    process.send_signal(signum)
    time.sleep(0.1)
    Path(mark + ".go").touch()
    code, err = finish(process)[::2]
    _clean_stop(code, err, signum, command.partition("-")[0])
    assert os.path.exists(mark + ".atexit"), "killed outright: the process's cleanup never ran"
    assert not (tmp_path / "out").exists()


@pytest.fixture()
def relay(minio: MinioServer) -> Iterator[StallingRelay]:
    with stalling_relay(minio.port) as relay:
        yield relay


@SIGNALS
@pytest.mark.parametrize("what", ["objects", "versions", "buckets"])
def test_a_signal_while_a_listing_waits_stops_it_cleanly(
    server: Buckets, relay: StallingRelay, signum: int, what: str
) -> None:
    """The listing's request is in flight to a server gone silent; the
    signal cancels its tasks, which are awaited: no "Task was destroyed but
    it is pending!", and SIGTERM is 143 as in cp and sync."""
    bucket = new_bucket(server, {f"k{i}": b"x" for i in range(3)})
    relay.black_hole()
    args = {
        "objects": ["ls", f"s3://{bucket}/", "--recursive"],
        "versions": ["ls", f"s3://{bucket}/", "--all-versions"],
        "buckets": ["ls"],
    }[what]
    process = surge(
        server, *args, "--endpoint-url", relay.url, "--read-timeout", "60", "--no-progress"
    )
    wait_for(lambda: relay.accepted > 0, process, "a connection")
    time.sleep(0.3)  # the request sent, its answer awaited
    process.send_signal(signum)
    code, err = finish(process)[::2]
    _clean_stop(code, err, signum, "ls")
