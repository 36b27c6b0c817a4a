"""grequests: requests on gevent greenlets, the pattern from grequests' README.

The pattern::

    import grequests

    rs = (grequests.get(u, timeout=timeout) for u in urls)
    responses = grequests.map(rs, size=concurrency)

Importing grequests monkey-patches the standard library (``patch_all(thread=False,
select=False)``), so this peer must run in a process of its own
(:func:`surge.bench.peers.runner.run_peer` does) and ``grequests`` is imported here
before anything that loads ``ssl`` or ``socket``.  Each ``grequests.get`` makes a
``requests.Session`` of its own, so no connection is reused, as in the README.

``*.sim`` resolves through ``socket.getaddrinfo`` as for plain requests: the patch
is applied after gevent's, so it wraps gevent's cooperative ``getaddrinfo``
(urllib3 looks ``socket.getaddrinfo`` up at each call).
"""

# ruff: noqa: I001 -- grequests must be imported first: it monkey-patches at import
from __future__ import annotations

import grequests

import time
from typing import Any

from ._common import Outcome, classify, emit, finished, use_sim_dns


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` on a pool of ``concurrency`` greenlets; one outcome per URL, in order."""
    use_sim_dns()
    verify: str | bool = cafile if cafile is not None else True
    outcomes: dict[int, Outcome] = {}
    pending = []
    for index, url in enumerate(urls):
        request = grequests.get(url, timeout=timeout, verify=verify)
        # Instrumentation only: time each send as grequests' pool runs it.
        request.send = _timed(request, index, url, outcomes)
        pending.append(request)
    grequests.map(pending, size=concurrency)
    return [outcomes[i] for i in range(len(urls))]


def _timed(request: Any, index: int, url: str, outcomes: dict[int, Outcome]) -> Any:
    send = request.send

    def send_and_record(**kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return send(**kwargs)
        finally:
            # AsyncRequest.send catches everything into .exception
            error = getattr(request, "exception", None)
            if request.response is not None:
                outcome = finished(url, started, status=request.response.status_code)
            else:
                outcome = finished(url, started, error=classify(error) if error else "other:None")
            outcomes[index] = emit(outcome)

    return send_and_record
