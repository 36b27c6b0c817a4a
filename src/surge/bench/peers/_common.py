"""What every peer shares: the outcome record, error classification, DNS and TLS set-up.

Nothing here imports a peer's library, ``ssl`` or ``surge.sim`` at module level:
the grequests peer must monkey-patch the standard library before those load.
"""

from __future__ import annotations

import errno
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import ssl

#: surge's error classes (``surge.errors.ERROR_CLASSES``), repeated so that a peer
#: never imports surge; anything else is reported as ``other:<ExceptionName>``.
ERROR_CLASSES: tuple[str, ...] = (
    "invalid_url",
    "dns_error",
    "connect_refused",
    "connect_timeout",
    "tls_error",
    "read_timeout",
    "connection_reset",
    "protocol_error",
    "too_many_redirects",
    "body_too_large",
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one URL ended for one peer: a status, or an error class, never both.

    ``elapsed_ms`` runs from the moment the peer's own code started this URL's
    request (for a gather pattern that is when the task starts, before any wait for
    a connection slot, as the library's timeout sees it) to its outcome.
    """

    url: str
    status: int | None
    error: str | None
    elapsed_ms: float

    def to_json(self) -> dict[str, Any]:
        """The record as written on one line of a peer's JSONL output."""
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Outcome:
        """The inverse of :meth:`to_json`."""
        return cls(
            url=str(record["url"]),
            status=None if record["status"] is None else int(record["status"]),
            error=None if record["error"] is None else str(record["error"]),
            elapsed_ms=float(record["elapsed_ms"]),
        )


def finished(
    url: str, started: float, status: int | None = None, error: str | None = None
) -> Outcome:
    """The outcome of ``url``, whose request started at ``started`` (``time.perf_counter``)."""
    return Outcome(url, status, error, round((time.perf_counter() - started) * 1000.0, 3))


# -- streaming outcomes out of a peer's child process --------------------------------

_sink: IO[str] | None = None
_sink_lock = threading.Lock()


def set_sink(sink: IO[str] | None) -> None:
    """Send every outcome passed to :func:`emit` to ``sink`` as a JSON line (None: stop)."""
    global _sink
    _sink = sink


def emit(outcome: Outcome) -> Outcome:
    """Report ``outcome`` as it happens (so a peer killed at its limit still tells
    how far it got); returns it.  Safe from threads and greenlets."""
    if _sink is not None:
        line = json.dumps(outcome.to_json()) + "\n"
        with _sink_lock:
            _sink.write(line)
    return outcome


def flush_sink() -> None:
    """Flush the sink (before a fork, so that no child inherits unwritten lines)."""
    if _sink is not None:
        with _sink_lock:
            _sink.flush()


# -- error classes -------------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps: causes, contexts, exceptions passed as
    arguments (requests wraps urllib3's that way) and the ``reason`` / ``os_error``
    attributes of urllib3 and aiohttp."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        inner: list[Any] = [current.__cause__, current.__context__, *current.args]
        inner += [getattr(current, name, None) for name in ("reason", "os_error")]
        pending += [e for e in inner if isinstance(e, BaseException)]


def _names(exc: BaseException) -> set[str]:
    return {klass.__name__ for klass in type(exc).__mro__}


_NOT_ERRORS = {"SSLWantReadError", "SSLWantWriteError"}
_TLS_NAMES = {"SSLError", "CertificateError", "ClientSSLError", "ClientConnectorCertificateError"}
_REDIRECT_NAMES = {"TooManyRedirects", "TooManyRedirectsError", "RedirectError"}
_CONNECT_TIMEOUT_NAMES = {
    "ConnectTimeout",  # requests, httpx
    "ConnectTimeoutError",  # urllib3, pyreqwest
    "ConnectionTimeoutError",  # aiohttp: connecting, or waiting for a connector slot
    "PoolTimeout",  # httpx: waiting for a pool slot
    "PoolTimeoutError",  # pyreqwest
}
_DNS_NAMES = {"gaierror", "NameResolutionError", "ClientConnectorDNSError"}
_RESET_NAMES = {"ServerDisconnectedError", "RemoteDisconnected"}
_PROTOCOL_NAMES = {
    "HTTPException",  # http.client: BadStatusLine, IncompleteRead, LineTooLong...
    "ProtocolError",  # urllib3, httpx
    "ChunkedEncodingError",
    "ContentDecodingError",
    "HttpProcessingError",  # aiohttp's parser errors
    "HttpParserError",  # httptools (llhttp)
    "ClientPayloadError",
    "ClientResponseError",
    "DecodingError",
    "DecodeError",
    "InvalidChunkLength",
}
# Words in a message that settle what a generic "protocol" or "transport" error was.
_RESET_WORDS = ("disconnected", "connection reset", "closed before", "connection closed", "eof")


def classify(exc: BaseException) -> str:
    """surge's error class for an exception raised by any peer's library.

    The most specific cause wins, whatever wraps it: a ``requests.ConnectionError``
    wrapping urllib3's ``ReadTimeoutError`` is a read timeout, a urllib3
    ``ProtocolError`` wrapping ``ConnectionResetError`` a reset.
    """
    # SSLWantReadError is an SSLError that means "no data yet": anyio's TLS stream
    # leaves one as the __context__ of every timeout and reset it raises.
    chain = [e for e in _chain(exc) if not _names(e) & _NOT_ERRORS]
    names = [_names(e) for e in chain]
    messages = " | ".join(str(e) for e in chain).lower()

    def any_named(wanted: Iterable[str]) -> bool:
        wanted = set(wanted)
        return any(n & wanted for n in names)

    def any_errno(*codes: int) -> bool:
        return any(isinstance(e, OSError) and e.errno in codes for e in chain)

    if any_named(_TLS_NAMES):
        return "tls_error"
    if any_named(_REDIRECT_NAMES):
        return "too_many_redirects"
    if any_named(_DNS_NAMES):
        return "dns_error"
    if any_named({"ConnectionRefusedError"}) or any_errno(errno.ECONNREFUSED):
        return "connect_refused"
    if any_named(_CONNECT_TIMEOUT_NAMES):
        return "connect_timeout"
    if any(isinstance(e, TimeoutError) for e in chain) or any(
        "Timeout" in name for n in names for name in n
    ):
        return "read_timeout"
    if any_named({"ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError"}):
        return "connection_reset"
    if any_named(_RESET_NAMES) or any_errno(errno.ECONNRESET, errno.EPIPE):
        return "connection_reset"
    if any_named(_PROTOCOL_NAMES):
        # httpx and h11 say "Server disconnected without sending a response" with a
        # RemoteProtocolError: the connection went away, the bytes were not wrong.
        if any(word in messages for word in _RESET_WORDS):
            return "connection_reset"
        return "protocol_error"
    return f"other:{type(exc).__name__}"


# -- the simulated web's names and CA ------------------------------------------------


def use_sim_dns() -> None:
    """Resolve ``*.sim`` to 127.0.0.1 through ``socket.getaddrinfo`` in this process.

    Imported late: after grequests (gevent) has monkey-patched ``socket``, so that
    the patch wraps gevent's cooperative ``getaddrinfo`` rather than being replaced
    by it.  Idempotent.
    """
    from surge.sim import patch_getaddrinfo

    patch_getaddrinfo()


def sim_names(urls: Iterable[str], max_hops: int = 10) -> set[tuple[str, int]]:
    """Every (host, port) a client may connect to while fetching ``urls`` from the
    simulated web: each URL's own, plus the hosts its redirect chain passes through.

    For clients that resolve names without ``socket.getaddrinfo`` and take static
    overrides per name (reqwest's ``resolve``), the way a real client relies on DNS.
    """
    from surge.sim import behaviour, is_sim_name

    names: set[tuple[str, int]] = set()
    for url in urls:
        parts = urlsplit(url)
        host = parts.hostname
        if host is None or not is_sim_name(host):
            continue
        port = parts.port or (443 if parts.scheme == "https" else 80)
        for _ in range(max_hops + 1):
            if (host, port) in names:
                break
            names.add((host, port))
            following = behaviour(host).next_host
            if following is None:
                break
            host = following
    return names


def ssl_context(cafile: str | None) -> ssl.SSLContext | None:
    """A default client context trusting ``cafile`` (None when there is no CA to add)."""
    if cafile is None:
        return None
    import ssl

    return ssl.create_default_context(cafile=cafile)


def in_order(urls: list[str], outcomes: dict[int, Outcome]) -> list[Outcome]:
    """Outcomes indexed by position in ``urls`` -> a list in the order of ``urls``."""
    return [outcomes[i] for i in range(len(urls))]
