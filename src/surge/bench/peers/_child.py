"""The process a peer runs in: ``python -m surge.bench.peers._child NAME SPEC OUT``.

SPEC is a JSON file (``urls``, ``concurrency``, ``timeout``, ``cafile``); OUT gets
JSON lines: ``{"event": "start", "cpu_s": ...}`` once the peer's library is
imported and DNS patched (the CPU spent so far, which the runner subtracts), one
line per outcome as it happens, then ``{"event": "done", "wall_s": ...}``; or a
single ``{"event": "unavailable", "detail": ...}`` when the library will not
import.  Only the standard library is imported before the peer's module, so that
grequests monkey-patches a clean interpreter.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import resource
import sys
import time
from typing import IO, Any


def _raise_open_files_limit() -> None:
    """Soft RLIMIT_NOFILE -> hard: thousands of sockets at once need more than 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _write(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str]) -> int:
    name, spec_path, out_path = argv
    _raise_open_files_limit()
    package = __package__ or "surge.bench.peers"
    peers = importlib.import_module(package).PEERS
    with open(out_path, "w", buffering=1) as out:
        try:
            module = importlib.import_module(f"{package}.{peers[name][0]}")
        except ImportError as exc:
            _write(out, {"event": "unavailable", "detail": f"{type(exc).__name__}: {exc}"})
            return 0
        common = importlib.import_module(f"{package}._common")
        common.use_sim_dns()
        with open(spec_path) as spec_file:
            spec = json.load(spec_file)
        common.set_sink(out)
        _write(out, {"event": "start", "cpu_s": _cpu_s()})
        started = time.perf_counter()
        outcomes = module.run(
            spec["urls"],
            concurrency=int(spec["concurrency"]),
            timeout=float(spec["timeout"]),
            cafile=spec["cafile"],
        )
        wall_s = time.perf_counter() - started
        common.flush_sink()
        _write(out, {"event": "done", "wall_s": wall_s, "outcomes": len(outcomes)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
