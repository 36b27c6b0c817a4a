"""grequests with pyOpenSSL injected into urllib3: the write-up "grequests + pyOpenSSL".

The pattern (old advice for SNI on Python 2, still found in programs)::

    import grequests
    import urllib3.contrib.pyopenssl

    urllib3.contrib.pyopenssl.inject_into_urllib3()
    responses = grequests.map((grequests.get(u, timeout=timeout) for u in urls), size=concurrency)

grequests monkey-patches with ``patch_all(thread=False, select=False)``.  urllib3's
pyOpenSSL socket waits for each TLS record in ``urllib3.util.wait_for_read``, a
``select``/``poll`` that gevent left blocking, so every such wait stops all the
greenlets: the handshakes and reads run one after another.  ``surge doctor``
names this (``pyopenssl-injected``, ``gevent-partial-patch``).

Not in :data:`surge.bench.peers.PEERS` (benchmarks/fetch.py runs every peer
there): a variant of :mod:`.grequests_map` that ``surge demo`` runs through
:mod:`._doctor_child`.  Imports grequests first, as :mod:`.grequests_map` does.
"""

# ruff: noqa: I001 -- grequests must be imported first: it monkey-patches at import
from __future__ import annotations

import grequests  # noqa: F401

import urllib3.contrib.pyopenssl

urllib3.contrib.pyopenssl.inject_into_urllib3()

from .grequests_map import run  # noqa: E402

__all__ = ["run"]
