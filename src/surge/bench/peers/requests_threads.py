"""A thread pool of ``requests`` sessions: the usual answer to "requests is slow".

The pattern (Python docs' ``ThreadPoolExecutor`` example, with one
``requests.Session`` per thread because a Session is not thread-safe)::

    thread_local = threading.local()

    def get_session():
        if not hasattr(thread_local, "session"):
            thread_local.session = requests.Session()
        return thread_local.session

    def fetch(url):
        return get_session().get(url, timeout=timeout)

    with ThreadPoolExecutor(max_workers=concurrency) as executor:
        results = list(executor.map(fetch, urls))

``timeout`` is requests' own: a connect timeout and a per-read timeout, not a
deadline for the whole request.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from ._common import Outcome, classify, emit, finished, use_sim_dns


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` on ``concurrency`` threads; one outcome per URL, in order."""
    use_sim_dns()
    verify: str | bool = cafile if cafile is not None else True
    local = threading.local()
    sessions: list[requests.Session] = []
    sessions_lock = threading.Lock()

    def get_session() -> requests.Session:
        session: requests.Session | None = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
            with sessions_lock:
                sessions.append(session)
        return session

    def fetch(url: str) -> Outcome:
        started = time.perf_counter()
        try:
            response = get_session().get(url, timeout=timeout, verify=verify)
        except Exception as exc:
            return emit(finished(url, started, error=classify(exc)))
        return emit(finished(url, started, status=response.status_code))

    try:
        with ThreadPoolExecutor(max_workers=concurrency) as executor:
            return list(executor.map(fetch, urls))
    finally:
        for session in sessions:
            session.close()
