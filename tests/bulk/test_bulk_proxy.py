"""``surge fetch --proxy/--noproxy`` and the environment's proxy variables, which
the bulk engine reads as curl does (surge.http.proxy has the rules)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from tests.http.conftest import StartProxy, start_proxy  # noqa: F401 - a fixture, used by name

import surge
from surge.bulk.engine import FetchOptions
from surge.errors import UsageError
from surge.sim import SimInfo


def _dead_proxy() -> str:
    """A proxy URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def surge_fetch(url: str, *args: str, env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", "-", "--max-time", "5", *args],
        input=url + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    record: dict[str, object] = json.loads(line)
    return record


def test_flags_and_environment_as_curl(sim: SimInfo, start_proxy: StartProxy) -> None:  # noqa: F811
    """--proxy wins over the environment, --noproxy sends a host direct, and the
    environment alone is honoured (http_proxy, never HTTP_PROXY)."""
    tinyproxy = start_proxy("tinyproxy")
    dead = _dead_proxy()
    url = f"http://localhost:{sim.http_port}/"

    def outcome(*args: str, **env: str) -> tuple[object, object]:
        record = surge_fetch(url, "-i", *args, env=env)
        headers = {str(k).lower() for k, _ in record.get("headers") or []}  # type: ignore[attr-defined]
        if record["error"] is not None:
            assert str(record["error_detail"]).startswith("cannot reach the proxy")
            return record["error"], None
        return record["status"], "via" in headers

    assert outcome(http_proxy=dead) == ("connect_refused", None)
    assert outcome(HTTP_PROXY=dead) == (200, False)  # httpoxy: never read
    assert outcome(http_proxy=tinyproxy.url()) == (200, True)
    assert outcome("--proxy", tinyproxy.url(), http_proxy=dead) == (200, True)
    assert outcome("-x", "", http_proxy=dead) == (200, False)  # curl -x "": none at all
    assert outcome("--noproxy", "localhost", http_proxy=dead) == (200, False)
    assert outcome(http_proxy=dead, no_proxy="localhost") == (200, False)
    assert outcome("--noproxy", "", http_proxy=tinyproxy.url(), no_proxy="*") == (200, True)


def test_a_proxy_that_is_not_one_is_a_usage_error(tmp_path: object) -> None:
    with pytest.raises(UsageError, match="SOCKS4"):
        FetchOptions(proxy="socks4://127.0.0.1:1080")
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", "-", "--proxy", "ftp://p.test"],
        input="http://a.test/\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "scheme" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", "-"],
        input="http://a.test/\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "https_proxy": "gopher://p.test"},
    )
    assert done.returncode == 2 and "$https_proxy" in done.stderr
    missing = f"{tmp_path}/no-such-ca.pem"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "surge.cli",
            "fetch",
            "-",
            "-x",
            "https://p.test",
            *["--proxy-cacert", missing],
        ],
        input="http://a.test/\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and missing in done.stderr


def test_fetch_all_goes_through_socks5h(sim: SimInfo, start_proxy: StartProxy) -> None:  # noqa: F811
    microsocks = start_proxy("microsocks", auth=("u", "p"))
    urls = [f"http://localhost:{sim.http_port}/", f"https://localhost:{sim.https_port}/"]
    records = list(surge.fetch_all(urls, proxy=microsocks.url("socks5h", "u:p"), cafile=sim.cafile))
    assert [(r["status"], r["error"]) for r in records] == [(200, None), (200, None)]
    assert {r["remote_ip"] for r in records} == {"127.0.0.1"}
