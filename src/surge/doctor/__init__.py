"""Environment checks: what in this interpreter silently makes network I/O slow, and the fix.

``surge doctor`` checks the interpreter it runs in; ``surge.doctor.run_checks()``
called inside an application (after its imports and any gevent patching) checks
the live process: what gevent patched and when, whether urllib3 runs on pyOpenSSL,
the open-files limit, PyMySQL connections that each had PyMySQL build a TLS context
(those open now; every connect since ``surge.doctor.watch()``, called first).

Each check returns one ``Finding`` with a stable ``id``, a ``status`` and a ``fix``
(``error`` is set when the check itself raised; the CLI then exits 2):

* ``fail`` - I/O is being serialised or requests will fail here (gevent patching
  that leaves sockets blocking or TLS failing, pyOpenSSL waiting in an unpatched
  ``select``, a hard open-files limit below the concurrency asked for, httptools
  installed but broken);
* ``warn`` - slower than it needs to be (pyOpenSSL without gevent, no uvloop or
  httptools, a TLS context that costs milliseconds to build, PyMySQL connections
  that each built one) or a limit below what is needed that can still be raised;
* ``ok`` - nothing found.

Looking must not change what is looked at: patching gevent *after* ``ssl`` was
imported is one of the problems, so this module imports none of gevent, urllib3,
ssl, asyncio, socket, select, selectors, threading or subprocess (only
``resource``).  The state checks read ``sys.modules`` and run first; what needs
an import (the SSLContext cost, whether uvloop and httptools import) runs in this
process when that module is already imported, else in a child interpreter.
"""

from __future__ import annotations

from surge.doctor.checks import Finding, Status, check_ids, run_checks
from surge.doctor.counters import watch
from surge.doctor.report import exit_status, format_table

__all__ = ["Finding", "Status", "check_ids", "exit_status", "format_table", "run_checks", "watch"]
