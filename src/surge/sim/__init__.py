"""A simulated web on loopback, for surge's tests, ``surge demo`` and the benchmarks.

One plain-HTTP port and one HTTPS port on 127.0.0.1 serve any number of virtual
hosts under the ``.sim`` TLD.  What a host does is a pure function of its name
(and a seed), so a test or a benchmark knows every outcome in advance::

    >>> from surge.sim import behaviour
    >>> behaviour("delay-200--status-404.sim").expected()
    (404, None)
    >>> behaviour("reset.sim").expected_error
    'connection_reset'

Explicit names (``status-500.sim``, ``redirect-3.sim``, ``hang.sim``...) are for
tests; generic names ``site0.sim``, ``site1.sim``... draw a realistic mix of
latencies and failures.  The grammar and the exact mix are documented in
:mod:`surge.sim.behaviour`.

Clients reach the hosts by mapping ``*.sim`` to 127.0.0.1: surge with
``--resolve '*.sim:PORT:127.0.0.1'``, other clients with
:func:`patch_getaddrinfo`.  Over TLS, trust the CA in ``cafile``.

Running it:

- in a loop you own: ``server = await serve(); ...; await server.close()``
- on a thread (pytest): ``with running() as sim: sim.url("site1.sim")``
- in a child process (benchmarks): ``with background() as sim: ...``
- from a shell: ``surge sim`` or ``python -m surge.sim``
"""

from __future__ import annotations

from surge.sim.behaviour import (
    DEFAULT_MAX_REDIRECTS,
    GENERIC_FATES,
    TLD,
    Action,
    Behaviour,
    behaviour,
    hosts,
    lower_bound,
)
from surge.sim.resolve import is_sim_name, patch_getaddrinfo
from surge.sim.runner import background, running
from surge.sim.server import SimInfo, SimServer, serve

__all__ = [
    "DEFAULT_MAX_REDIRECTS",
    "GENERIC_FATES",
    "TLD",
    "Action",
    "Behaviour",
    "SimInfo",
    "SimServer",
    "background",
    "behaviour",
    "hosts",
    "is_sim_name",
    "lower_bound",
    "patch_getaddrinfo",
    "running",
    "serve",
]
