"""pycurl's ``CurlMulti`` with a fixed set of easy handles: the fast C path.

The pattern (pycurl's ``examples/retriever-multi.py``)::

    m = pycurl.CurlMulti()
    handles = [pycurl.Curl() for _ in range(concurrency)]  # FOLLOWLOCATION, TIMEOUT...
    free = handles[:]
    while processed < len(urls):
        while queue and free:            # hand out URLs to free handles
            c = free.pop(); c.setopt(pycurl.URL, queue.pop()); m.add_handle(c)
        while m.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        while True:                      # collect finished transfers
            queued, ok, failed = m.info_read()
            ...; m.remove_handle(c); free.append(c)
            if queued == 0:
                break
        m.select(1.0)                    # (bounded by m.timeout() here)

``timeout`` is curl's ``--max-time`` (a total per transfer, redirects included)
and ``--connect-timeout``; redirects followed (``-L``, at most 10, aiohttp's
number); ``Accept-Encoding`` for every encoding libcurl decodes, as the Python
clients send one.  libcurl resolves names itself, never through Python, so each
transfer gets ``CURLOPT_RESOLVE`` entries (``--resolve HOST:PORT:127.0.0.1``) for
its ``*.sim`` host and the hosts its redirects go through; other names use DNS.
"""

from __future__ import annotations

import time

import pycurl

from ._common import Outcome, emit, finished, sim_names

MAX_REDIRECTS = 10

# libcurl error numbers (CURLE_*) -> surge's classes.
_CURL_ERRORS: dict[int, str] = {
    1: "protocol_error",  # UNSUPPORTED_PROTOCOL: also "Received HTTP/0.9 when not allowed"
    3: "invalid_url",  # URL_MALFORMAT
    6: "dns_error",  # COULDNT_RESOLVE_HOST
    7: "connect_refused",  # COULDNT_CONNECT
    8: "protocol_error",  # WEIRD_SERVER_REPLY
    16: "protocol_error",  # HTTP2
    18: "connection_reset",  # PARTIAL_FILE: the connection ended mid-body
    35: "tls_error",  # SSL_CONNECT_ERROR
    47: "too_many_redirects",  # TOO_MANY_REDIRECTS
    52: "connection_reset",  # GOT_NOTHING: closed before any response byte
    55: "connection_reset",  # SEND_ERROR
    56: "connection_reset",  # RECV_ERROR
    58: "tls_error",  # SSL_CERTPROBLEM
    59: "tls_error",  # SSL_CIPHER
    60: "tls_error",  # PEER_FAILED_VERIFICATION
    61: "protocol_error",  # BAD_CONTENT_ENCODING
    77: "tls_error",  # SSL_CACERT_BADFILE
    83: "tls_error",  # SSL_ISSUER_ERROR
    90: "tls_error",  # SSL_PINNEDPUBKEYNOTMATCH
    91: "tls_error",  # SSL_INVALIDCERTSTATUS
}


def _error_class(handle: pycurl.Curl, code: int) -> str:
    if code == 28:  # OPERATION_TIMEDOUT: before or after the connection was made?
        return "read_timeout" if handle.getinfo(pycurl.CONNECT_TIME) > 0 else "connect_timeout"
    return _CURL_ERRORS.get(code, f"other:curl_{code}")


def _handle(timeout: float, cafile: str | None) -> pycurl.Curl:
    handle = pycurl.Curl()
    handle.setopt(pycurl.NOSIGNAL, 1)
    handle.setopt(pycurl.FOLLOWLOCATION, 1)
    handle.setopt(pycurl.MAXREDIRS, MAX_REDIRECTS)
    handle.setopt(pycurl.CONNECTTIMEOUT_MS, int(timeout * 1000))
    handle.setopt(pycurl.TIMEOUT_MS, int(timeout * 1000))
    handle.setopt(pycurl.ACCEPT_ENCODING, "")
    handle.setopt(pycurl.WRITEFUNCTION, len)  # read the body, keep nothing
    if cafile is not None:
        handle.setopt(pycurl.CAINFO, cafile)
    return handle


def run(urls: list[str], *, concurrency: int, timeout: float, cafile: str | None) -> list[Outcome]:
    """Fetch ``urls`` on ``concurrency`` easy handles of one multi handle; one outcome
    per URL, in order."""
    multi = pycurl.CurlMulti()
    handles = [_handle(timeout, cafile) for _ in range(max(1, min(concurrency, len(urls))))]
    free = handles[:]
    # What each busy handle is doing: id(handle) -> (index, started)
    busy: dict[int, tuple[int, float]] = {}
    outcomes: list[Outcome | None] = [None] * len(urls)
    next_index = 0
    processed = 0

    def done(handle: pycurl.Curl, status: int | None, error: str | None) -> None:
        nonlocal processed
        index, started = busy.pop(id(handle))
        multi.remove_handle(handle)
        free.append(handle)
        outcomes[index] = emit(finished(urls[index], started, status=status, error=error))
        processed += 1

    try:
        while processed < len(urls):
            while next_index < len(urls) and free:
                handle = free.pop()
                url = urls[next_index]
                handle.setopt(pycurl.URL, url)
                handle.setopt(
                    pycurl.RESOLVE, [f"{host}:{port}:127.0.0.1" for host, port in sim_names([url])]
                )
                busy[id(handle)] = (next_index, time.perf_counter())
                multi.add_handle(handle)
                next_index += 1
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            while True:
                queued, succeeded, failed = multi.info_read()
                for handle in succeeded:
                    done(handle, handle.getinfo(pycurl.RESPONSE_CODE), None)
                for handle, code, _message in failed:
                    done(handle, None, _error_class(handle, code))
                if queued == 0:
                    break
            # Wake for libcurl's next timeout (curl_multi_timeout), not only for
            # sockets: with the example's fixed select(1.0), a transfer's timeout
            # fires up to a second late.
            wait_ms = multi.timeout()
            multi.select(1.0 if wait_ms < 0 else min(1.0, wait_ms / 1000.0))
    finally:
        for handle in handles:
            handle.close()
        multi.close()
    return [outcome for outcome in outcomes if outcome is not None]
