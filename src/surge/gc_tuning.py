"""Relax the cycle collector while a bulk job runs, and put it back after.

Used by the layers that run many requests at once (``bulk/``, ``s3/``), so it
lives below them, beside ``errors.py``.

A run with 1,000 requests in flight keeps tens of thousands of live container
objects (tasks' frames, futures, connections, records), and CPython's default
young-generation threshold (700 allocations) makes the collector rescan them
hundreds of times a run: on 10,000 simulated hosts, ~370 collections took
0.3 s of the client's ~3 s of CPU while finding almost no garbage (surge's
connections leave no reference cycles behind; failed requests' tracebacks are
the rest).

While any run is active, this freezes the objects that existed before it
(``gc.freeze()``: start-up and the caller's data are never rescanned) and
raises the young-generation threshold to 50,000; when the last run ends, the
caller's thresholds come back and the frozen objects are unfrozen. A host that
had frozen objects itself keeps exactly its freeze: nothing more is frozen then
(``gc.unfreeze()`` cannot tell its objects from ours). The cost is
garbage cycles waiting up to 50,000 allocations longer to be freed. A collector
switched off (``gc.disable()``, or a threshold of 0) stays off. Opt out with
``FetchOptions(relax_gc=False)``.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The young-generation threshold during a run (CPython's default is 700).
YOUNG_THRESHOLD = 50_000

_lock = threading.Lock()
_active = 0  # runs in progress (fetch_all runs on threads of its own)
_saved: tuple[int, int, int] | None = None
_froze = False  # whether this run froze (and so may unfreeze) anything


@contextmanager
def relaxed_gc(enabled: bool = True) -> Iterator[None]:
    """The collector relaxed for the block (reference-counted across threads)."""
    if not enabled:
        yield
        return
    global _active, _saved, _froze
    with _lock:
        _active += 1
        if _active == 1:
            _saved = gc.get_threshold()
            if _saved[0] != 0:  # 0 means automatic collection is off: leave it off
                # A host that froze objects itself (gc.freeze() after start-up, as
                # pre-fork servers do) keeps its freeze: unfreezing ours would
                # unfreeze its too, so then nothing more is frozen.
                _froze = gc.get_freeze_count() == 0
                if _froze:
                    gc.freeze()
                gc.set_threshold(max(_saved[0], YOUNG_THRESHOLD), _saved[1], _saved[2])
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved is not None:
                if _saved[0] != 0:
                    gc.set_threshold(*_saved)
                    if _froze:
                        gc.unfreeze()
                _saved = None
                _froze = False
