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
#: docs/architecture.md, "result records").  Order is documentation order.
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


class SurgeError(Exception):
    """Base class of every exception surge raises on purpose."""


class UsageError(SurgeError, ValueError):
    """The caller asked for something impossible (bad flag, bad file): exit status 2
    on the command line; a ValueError to Python code."""


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
    ``url``, ``final_url``, ``timings``, ``attempts``, ``redirects`` and ``bytes``.
    """

    def __init__(self, error_class: str, detail: str, *, status: int | None = None) -> None:
        if error_class not in ERROR_CLASSES:
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
