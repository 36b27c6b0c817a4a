"""The open-files limit a run needs: one descriptor per request in flight, plus headroom.

Used where an engine runs: the ``surge fetch`` process, and each Dask worker
process of ``surge fetch --cluster`` (a worker on another machine has limits of
its own).
"""

from __future__ import annotations

import resource

#: File descriptors kept for everything but sockets (files, DNS threads, the loop).
FD_HEADROOM = 64


def fit_open_files(wanted: int) -> int:
    """Raise the soft open-files limit to the hard one; return the concurrency it holds.

    That is ``wanted`` when the limit allows it, else the limit less
    :data:`FD_HEADROOM` (at least 1): lowering the concurrency beats failing every
    request past the limit with EMFILE, as every client tested did at 5,000.
    """
    soft = raise_open_files_limit(wanted + FD_HEADROOM)
    if soft == resource.RLIM_INFINITY or wanted + FD_HEADROOM <= soft:
        return wanted
    return max(1, soft - FD_HEADROOM)


def raise_open_files_limit(wanted: int = 0) -> int:
    """Raise the soft open-files limit to the hard one (to at least ``wanted``
    when the hard one is unlimited); return the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    elif hard == resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    return soft


def open_files_limit() -> int | None:
    """The soft open-files limit (None: unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft
