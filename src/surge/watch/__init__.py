"""See where an unmodified program's network time goes, and why.

Three ways in:

- ``surge watch [--report F.json] [--html F] [--trace-json F] [--otlp URL] -- CMD...``
  runs CMD with every Python process in it recorded (a ``sitecustomize`` on
  PYTHONPATH starts the recording before the program's first line);
- ``python -m surge.watch [options] prog.py args...`` records the program in
  this interpreter;
- in code::

      with surge.watch.recording() as rec:
          ...
      rec.findings(), rec.operations()

A set of instrumentors (:mod:`surge.watch.instrumentors`, one per library, each
with ``instrument()``/``uninstrument()``) feed one recorder
(:mod:`surge.watch.recorder`, bounded memory); :mod:`surge.watch.findings`
names what went wrong with its numbers and the fix; :mod:`surge.watch.report`
and :mod:`surge.watch.export` write the summary, the JSON report, the
waterfall page, the Chrome trace and the OTLP spans.

Importing this package imports nothing a program's behaviour depends on (no
``socket``, ``ssl``, ``threading``, ``asyncio``): a gevent program must still be
able to patch first.
"""

from __future__ import annotations

from surge.watch.findings import IDS, Finding
from surge.watch.session import Recording, recording

__all__ = ["IDS", "Finding", "Recording", "recording"]
