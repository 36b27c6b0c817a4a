"""The error taxonomy shared by every layer of surge.

Remote failures are data: a request that failed becomes a result record whose
``error`` field is one of the stable class names in :data:`ERROR_CLASSES`.
Exceptions escape only for programming or usage errors (and :class:`PoolTimeout`,
which a caller of the pool asked for by setting a timeout).
"""

from __future__ import annotations

import errno
from typing import Any

#: The stable names of the error classes a result record may carry (see
#: docs/architecture-rules.md, bulk/, "Result records").  Order is documentation order.
ERROR_CLASSES: tuple[str, ...] = (
    "invalid_url",
    "dns_error",
    "connect_refused",
    "connect_timeout",
    "tls_error",
    "read_timeout",
    "write_timeout",
    "connection_reset",
    "protocol_error",
    "too_many_redirects",
    "body_too_large",
)

#: The error classes of a record whose input surge chose not to send (surge
#: fetch's crawl controls: ``--robots obey``, ``--max-host-errors``).  No request
#: fails with one, so the drop-ins have no exception for them.
SKIP_CLASSES: tuple[str, ...] = ("robots_disallowed", "host_skipped")

#: Every error class a result record may carry.
RECORD_ERROR_CLASSES: tuple[str, ...] = ERROR_CLASSES + SKIP_CLASSES


class SurgeError(Exception):
    """Base class of every exception surge raises on purpose."""


class UsageError(SurgeError, ValueError):
    """The caller asked for something impossible (bad flag, bad file): exit status 2
    on the command line; a ValueError to Python code."""


class SinkError(UsageError):
    """A file surge writes (or the stdout it writes to) failed: it could not be
    opened, locked or written - a full disk, a size limit, a closed pipe or
    descriptor.  The message names the file and the error; what was written
    before the failure is kept (surge.sinks).  Exit status 2 on the command line.
    ``errno``: the system's error number, when one said why (else None)."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class LocalResourceError(SurgeError):
    """This machine ran out of something a request needs (file descriptors, socket
    buffers): a fault of the client, never recorded as the remote host's.

    The bulk engine waits for a descriptor to free and tries again; one that
    stays out past the wait ends the run (exit status 2 on the command line).
    """

    #: The errno values that mean a local shortage, not a remote failure.
    ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class PoolError(SurgeError):
    """Base class of the pool's errors."""


class PoolClosed(PoolError):
    """The pool was closed; it hands out nothing more."""


class PoolTimeout(PoolError, TimeoutError):
    """No resource became available within the acquire timeout."""


class S3Error(SurgeError):
    """An S3 request answered with an error document (or failed for good).

    ``code`` is S3's own stable error code (``NoSuchBucket``, ``AccessDenied``,
    ``SlowDown``, ...) or, when no response arrived, the transport's error class
    (one of :data:`ERROR_CLASSES`); ``status`` the HTTP status (None without a
    response); ``bucket`` the bucket asked for.
    """

    #: Codes that are the caller's to fix (wrong bucket, wrong credentials): the
    #: CLI exits 2 for these, naming the bucket.
    USAGE_CODES = frozenset(
        {
            "NoSuchBucket",
            "AccessDenied",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "InvalidBucketName",
            "AuthorizationHeaderMalformed",
            "AllAccessDisabled",
            "PermanentRedirect",
            "ExpiredToken",
            "InvalidToken",
        }
    )

    def __init__(self, code: str, message: str, *, status: int | None, bucket: str) -> None:
        # bucket "": a request of the service itself (ListBuckets)
        super().__init__(f"{code}: {message}" + (f" (bucket {bucket!r})" if bucket else ""))
        self.code = code
        self.message = message
        self.status = status
        self.bucket = bucket

    @property
    def is_usage(self) -> bool:
        return self.code in self.USAGE_CODES


class RequestError(SurgeError):
    """A request failed; ``error_class`` is one of :data:`ERROR_CLASSES`.

    What is known of the failed request travels with it, for its result record:
    ``status`` when a response head arrived before the failure (a body that then
    stalled is ``read_timeout`` with the status kept), and, set by the client,
    ``url``, ``final_url``, ``timings``, ``attempts``, ``redirects``, ``bytes``,
    and - when it failed on a connection - ``remote_ip`` and ``tls``.
    """

    def __new__(cls, error_class: str, detail: str, *, status: int | None = None) -> RequestError:
        # RequestError("dns_error", ...) is a DNSError: every raise site names the
        # class by its record name, and callers may catch by type (httpx's names).
        if cls is RequestError:
            cls = _BY_CLASS.get(error_class, RequestError)
        return super().__new__(cls, detail)

    def __init__(self, error_class: str, detail: str, *, status: int | None = None) -> None:
        if error_class not in RECORD_ERROR_CLASSES:
            raise ValueError(f"unknown error class {error_class!r}")
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail
        self.status = status
        self.url: str | None = None
        self.final_url: str | None = None
        self.timings: Any = None
        self.attempts = 0
        self.redirects = 0  # redirects followed before the failure
        self.bytes = 0
        self.remote_ip: str | None = None  # the address it was connected to, if it was
        self.tls: Any = None  # that connection's TLS (surge.http.connection.TLSInfo)
        #: It failed while the request was still being sent: the server had
        #: stopped taking its body (httpx's WriteTimeout/WriteError).
        self.sending = False
        #: The server closed the connection, without a reset, before any byte
        #: of a response (curl's "Empty reply from server"; httpx's
        #: RemoteProtocolError "Server disconnected without sending a response").
        self.empty_reply = False
        #: The server said it did not process the request (HTTP/2's GOAWAY or
        #: REFUSED_STREAM): it may be sent again, whatever its method.
        self.unprocessed = False

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its own fields (the default would call cls(detail)).
        return (_rebuild, (self.error_class, self.detail, self.status, self.__dict__))


def _rebuild(
    error_class: str, detail: str, status: int | None, state: dict[str, Any]
) -> RequestError:
    error = RequestError(error_class, detail, status=status)
    error.__dict__.update(state)
    return error


class InvalidURL(RequestError):
    """``invalid_url``: not a URL surge can fetch (scheme, host, port, characters)."""


class ConnectError(RequestError):
    """No connection was made: ``dns_error``, ``connect_refused`` or ``tls_error``."""


class DNSError(ConnectError):
    """``dns_error``: the name did not resolve."""


class ConnectRefused(ConnectError):
    """``connect_refused``: every address refused (or could not be reached)."""


class TLSError(ConnectError):
    """``tls_error``: the handshake failed or the certificate was not trusted."""


class TimeoutException(RequestError, TimeoutError):
    """A deadline passed: ``connect_timeout``, ``read_timeout`` or ``write_timeout``."""


class ConnectTimeout(TimeoutException):
    """``connect_timeout``: DNS, TCP and TLS took longer than the connect timeout."""


class ReadTimeout(TimeoutException):
    """``read_timeout``: the response did not complete within ``max_time``."""


class WriteTimeout(TimeoutException):
    """``write_timeout``: the request was still being sent (the server took
    none of its body) when a timeout passed (httpx's and curl's word)."""


class ReadError(RequestError):
    """``connection_reset``: the connection was closed or reset mid-exchange."""


class RemoteProtocolError(RequestError):
    """``protocol_error``: what came back was not valid HTTP/1.1."""


class TooManyRedirects(RequestError):
    """``too_many_redirects``: more redirects than ``max_redirects``."""


class BodyTooLarge(RequestError):
    """``body_too_large``: the body (after decoding) passed the body cap."""


_BY_CLASS: dict[str, type[RequestError]] = {
    "invalid_url": InvalidURL,
    "dns_error": DNSError,
    "connect_refused": ConnectRefused,
    "tls_error": TLSError,
    "connect_timeout": ConnectTimeout,
    "read_timeout": ReadTimeout,
    "write_timeout": WriteTimeout,
    "connection_reset": ReadError,
    "protocol_error": RemoteProtocolError,
    "too_many_redirects": TooManyRedirects,
    "body_too_large": BodyTooLarge,
}
assert set(_BY_CLASS) == set(ERROR_CLASSES)


class HTTPStatusError(SurgeError):
    """``response.raise_for_status()`` on a 4xx or 5xx: ``response`` is the response
    (a status is an answer, not a failed request: no error class, no record)."""

    def __init__(self, message: str, *, response: Any) -> None:
        super().__init__(message)
        self.response = response


class StreamError(SurgeError, RuntimeError):
    """A streamed response used the wrong way round (httpx's names)."""


class ResponseNotRead(StreamError):
    """``content``/``text``/``json()`` of a streamed response before ``read()``."""


class StreamConsumed(StreamError):
    """A streamed body iterated a second time: it was not kept."""
