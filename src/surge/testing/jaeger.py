"""A Jaeger all-in-one (Jaeger v2: an OpenTelemetry collector with Jaeger's
in-memory storage and query API) on loopback, for ``surge watch --otlp``'s test.

    with jaeger_server() as jaeger:
        ...send spans to jaeger.otlp_url...
        jaeger.traces("surge-watch")  # the query API's /api/traces

The binary is found in ``$SURGE_JAEGER``, then on ``PATH``, then where
``.ci/run`` builds it once, beside MinIO: ``${XDG_CACHE_HOME:-~/.cache}/surge/bin/jaeger``.
Jaeger's module replaces some of its dependencies, which ``go install
module@version`` refuses; .ci/run builds it as a tool of a throwaway module
(``go get -tool`` :data:`JAEGER_MODULE`, then ``go build``), ~8 minutes on the
2-core machine.

Every port is a free one on 127.0.0.1 (a config file of its own: the default
one listens on fixed ports on every interface), storage is in memory, and the
collector's own telemetry is off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surge.s3.minio import _free_port, _stop, cache_dir

#: The Jaeger that the tests run, pinned (see surge.s3.minio.MINIO_MODULE for why).
JAEGER_MODULE = "github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0"

_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
"""


class JaegerNotInstalled(RuntimeError):
    pass


def find_jaeger() -> str:
    candidates = [os.environ.get("SURGE_JAEGER"), shutil.which("jaeger")]
    candidates.append(str(cache_dir() / "bin" / "jaeger"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise JaegerNotInstalled(
        "no Jaeger binary (looked in $SURGE_JAEGER, PATH and "
        f"{cache_dir() / 'bin' / 'jaeger'}); build it as .ci/run does: in an empty "
        f"module, go get -tool {JAEGER_MODULE}, then "
        f"go build -o {cache_dir() / 'bin' / 'jaeger'} {JAEGER_MODULE.partition('@')[0]}"
    )


@dataclass(frozen=True)
class JaegerServer:
    otlp_url: str  # the OTLP/HTTP receiver's base URL
    query_url: str  # the query API's base URL

    def traces(self, service: str) -> list[dict[str, Any]]:
        """The service's traces from the query API (``/api/traces``)."""
        query = urllib.parse.urlencode({"service": service, "limit": 100})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.query_url}/api/traces?{query}", timeout=10) as response:
            data: list[dict[str, Any]] = json.load(response).get("data") or []
        return data


@contextlib.contextmanager
def jaeger_server(*, start_timeout: float = 60.0) -> Iterator[JaegerServer]:
    binary = find_jaeger()
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="surge-jaeger-")))
        ports = {
            "query_port": _free_port(),
            "query_grpc_port": _free_port(),
            "otlp_port": _free_port(),
        }
        config = directory / "config.yaml"
        config.write_text(_CONFIG.format(**ports))
        log = stack.enter_context(open(directory / "jaeger.log", "ab"))
        process = subprocess.Popen(
            [binary, "--config", f"file:{config}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        stack.callback(_stop, process)
        server = JaegerServer(
            f"http://127.0.0.1:{ports['otlp_port']}", f"http://127.0.0.1:{ports['query_port']}"
        )
        _wait_ready(server, process, start_timeout, directory / "jaeger.log")
        yield server


def _wait_ready(
    server: JaegerServer, process: subprocess.Popen[bytes], timeout: float, log: Path
) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"Jaeger exited with status {process.returncode}:\n{tail}")
        try:
            with opener.open(f"{server.query_url}/api/services", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"Jaeger's query API did not answer at {server.query_url} in {timeout:g} s")
