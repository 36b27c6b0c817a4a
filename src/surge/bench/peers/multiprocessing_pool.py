"""``multiprocessing.Pool(8)`` mapping ``requests.get``: the write-up's "multiprocessing (8)".

The pattern::

    def fetch(url):
        return requests.get(url, timeout=timeout)

    with multiprocessing.Pool(processes=8) as pool:
        results = pool.map(fetch, urls)

Eight processes whatever ``concurrency`` says (the write-up's number, one per
core on its machine), ``map``'s default chunking (the list is cut into chunks of
``len(urls) / 32`` handed out in order), the platform's default start method.
Outcomes come back only when the whole map is done, as they do for the pattern.
"""

from __future__ import annotations

import multiprocessing
import time

import requests

from ._common import Outcome, classify, emit, finished, flush_sink, use_sim_dns

#: The write-up's process count.
PROCESSES = 8

# Set in each worker by _init (module globals: pool.map pickles only the URL).
_timeout = 0.0
_verify: str | bool = True


def _init(timeout: float, verify: str | bool) -> None:
    global _timeout, _verify
    _timeout, _verify = timeout, verify
    use_sim_dns()  # inherited under fork; needed again under spawn or forkserver


def _fetch(url: str) -> Outcome:
    started = time.perf_counter()
    try:
        response = requests.get(url, timeout=_timeout, verify=_verify)
    except Exception as exc:
        return finished(url, started, error=classify(exc))
    return finished(url, started, status=response.status_code)


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` on 8 processes; one outcome per URL, in order."""
    del concurrency  # the write-up's pool has 8 processes, full stop
    use_sim_dns()
    verify: str | bool = cafile if cafile is not None else True
    flush_sink()  # a forked worker must not inherit unwritten output
    with multiprocessing.Pool(PROCESSES, initializer=_init, initargs=(timeout, verify)) as pool:
        outcomes = pool.map(_fetch, urls)
    return [emit(outcome) for outcome in outcomes]
