"""A request's time limits, phase by phase (``timeout=``).

A number is the whole request's limit (``max_time``); :class:`Timeout` sets it,
the connect phase's and the read (idle) limit apart, as httpx's object does (its
names where the phases are the same).  The clocks start when the request starts
its own network work: waiting for a connection or a handshake slot never counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from surge.errors import UsageError


@dataclass(frozen=True, slots=True)
class Timeout:
    """``Timeout(30, connect=5, read=10)``: 30 s for the whole request, redirects
    included (curl's ``--max-time``), 5 s to open a connection - DNS, TCP and
    TLS - (curl's ``--connect-timeout``), and at most 10 s without a byte from
    the server, or taken by it while a body is sent (httpx's ``read``; the AWS
    CLI's ``--cli-read-timeout``, a socket timeout).  None: the client's."""

    total: float | None = None
    connect: float | None = None
    read: float | None = None

    def __post_init__(self) -> None:
        for name in ("total", "connect", "read"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise UsageError(f"Timeout({name}=...) must be a positive number, not {value!r}")


def split(timeout: float | Timeout | None) -> tuple[float | None, float | None]:
    """(total, connect) of a ``timeout=`` argument; None: the client's."""
    if timeout is None:
        return None, None
    if isinstance(timeout, Timeout):
        return timeout.total, timeout.connect
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise UsageError(f"timeout must be a positive number or a Timeout, not {timeout!r}")
    return float(timeout), None
