"""A recording: every instrumentor on, feeding one recorder, until it stops.

    with surge.watch.recording() as rec:
        run_the_program()
    for finding in rec.findings():
        print(finding.id, finding.message)

One recording at a time per process (the instrumentors patch the libraries'
classes, which every thread shares).  After ``fork()`` the child records afresh:
what the parent recorded is the parent's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from surge.watch._endings import is_partial
from surge.watch.findings import Finding, analyse
from surge.watch.instrument import Instrumentor, failed, failures, set_exhaustion_sink
from surge.watch.instrumentors import instrumentors
from surge.watch.recorder import KEEP, Recorder, site_of

#: surge doctor's checks a recording runs at its end (state only: nothing that
#: takes time or starts a process), when the program imported gevent or urllib3.
DOCTOR_CHECKS = ("pyopenssl-injected", "gevent-partial-patch", "gevent-late-patch")

_active: Recording | None = None


class Recording:
    """The instrumentors and their recorder; :meth:`start`, :meth:`stop`, then
    :meth:`findings`, :meth:`operations` and :meth:`data`."""

    def __init__(self, *, keep: int = KEEP) -> None:
        self.keep = keep
        self.recorder = Recorder(keep=keep)
        self.instrumentors: list[Instrumentor] = instrumentors(self.recorder)
        self._data: dict[str, Any] | None = None
        #: how the process ended, when not by returning or exiting: a signal's
        #: name, ``os._exit(N)``, ``KeyboardInterrupt``, ``uncaught ValueError``
        self.ended_by: str | None = None

    def start(self) -> Recording:
        global _active
        if _active is not None:
            raise RuntimeError("surge.watch: a recording is already running in this process")
        _active = self
        set_exhaustion_sink(lambda error: self.recorder.fd_exhausted(error))
        for instrumentor in self.instrumentors:
            try:
                instrumentor.instrument()
            except Exception:
                failed(f"starting the {instrumentor.library} instrumentor")
        with contextlib.suppress(AttributeError):
            os.register_at_fork(after_in_child=self._forked)
        return self

    def _forked(self) -> None:
        if _active is not self:
            return
        self.recorder = Recorder(keep=self.keep)
        for instrumentor in self.instrumentors:
            instrumentor.recorder = self.recorder

    def stop(self, ended_by: str | None = None, *, forced: bool = False) -> None:
        """Stop recording: the libraries are restored, surge doctor's checks run.
        ``ended_by``: how the program ended (see :attr:`ended_by`); ``forced``:
        from a signal's handler or ``os._exit``, where the frame interrupted may
        hold the recorder's lock."""
        global _active
        if _active is not self:
            return
        _active = None
        set_exhaustion_sink(None)
        self.ended_by = ended_by
        recorder = self.recorder
        if forced:
            recorder.seize_lock()
        recorder.stop()
        for instrumentor in self.instrumentors:
            try:
                instrumentor.uninstrument()
            except Exception:
                failed(f"stopping the {instrumentor.library} instrumentor")
        recorder.doctor = doctor_findings(recorder.imported)

    def data(self) -> dict[str, Any]:
        """What was recorded (see :meth:`Recorder.data`) and its findings, as JSON
        values; after :meth:`stop`, the same object every call."""
        if self._data is not None:
            return self._data
        data = self.recorder.data()
        data["pid"] = os.getpid()
        data["findings"] = [f.to_dict() for f in analyse(data)]
        data["watch_errors"] = len(failures())
        data["ended_by"] = self.ended_by
        data["partial"] = is_partial(self.ended_by)
        if self.recorder.stopped is not None:
            self._data = data
        return data

    def findings(self) -> list[Finding]:
        return [Finding(**f) for f in self.data()["findings"]]

    def operations(self) -> list[dict[str, Any]]:
        """The operations kept one by one (the first :data:`KEEP`), as dicts:
        ``kind``, ``library``, ``peer``, ``what``, ``start_s``, ``duration_s``,
        ``who`` and, where known, ``status``, ``bytes``, ``error``, ``marks`` and
        ``site`` (where the program made it: ``{"file", "line", "function"}``)."""
        data = self.data()
        return [{**op, "site": site_of(data, op)} if "site" in op else op for op in data["ops"]]


def doctor_findings(imported: list[str]) -> list[dict[str, Any]]:
    """surge doctor's gevent and pyOpenSSL checks, when the program imported either."""
    if not any(name.startswith(("gevent", "urllib3")) for name in imported):
        return []
    try:
        from surge.doctor import run_checks

        return [f.to_dict() for f in run_checks(only=DOCTOR_CHECKS, measure=False)]
    except Exception:
        failed("surge doctor's checks")
        return []


@contextlib.contextmanager
def recording(*, keep: int = KEEP) -> Iterator[Recording]:
    """Record every network operation of this process inside the block."""
    rec = Recording(keep=keep).start()
    try:
        yield rec
    finally:
        rec.stop()
