"""surge.testing: what surge's tests and benchmarks need to run against real servers.

``mariadb()`` and ``postgresql()`` start a throwaway database server from the
distribution's packages (see :mod:`surge.testing.servers`).  Nothing here is
imported by surge itself.
"""

from __future__ import annotations

from surge.testing.servers import (
    DBServer,
    ServerNotInstalled,
    ServerStartError,
    find_mariadb,
    find_postgresql,
    mariadb,
    postgresql,
)

__all__ = [
    "DBServer",
    "ServerNotInstalled",
    "ServerStartError",
    "find_mariadb",
    "find_postgresql",
    "mariadb",
    "postgresql",
]
