"""``requests.get`` in a loop: the baseline every write-up starts from.

The pattern (the write-up's 1,000 sites in 643 s)::

    for url in urls:
        response = requests.get(url, timeout=timeout)

One request at a time, a new connection each (no Session).  On a long list run it
on a sample (``run_peer(..., sample=N)``) and extrapolate: the time is the sum of
the hosts' times, so the extrapolation is fair.  ``concurrency`` is ignored.
"""

from __future__ import annotations

import time

import requests

from ._common import Outcome, classify, emit, finished, use_sim_dns


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` one after another; one outcome per URL, in order."""
    del concurrency  # the point of this peer
    use_sim_dns()
    verify: str | bool = cafile if cafile is not None else True
    outcomes = []
    for url in urls:
        started = time.perf_counter()
        try:
            response = requests.get(url, timeout=timeout, verify=verify)
        except Exception as exc:
            outcomes.append(emit(finished(url, started, error=classify(exc))))
        else:
            outcomes.append(emit(finished(url, started, status=response.status_code)))
    return outcomes
