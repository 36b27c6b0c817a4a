"""A peer's process, then ``surge doctor`` on it: ``python -m surge.bench.peers._doctor_child
MODULE SPEC OUT``.

Runs the peer module ``MODULE`` of this package exactly as :mod:`._child` does
(same SPEC, same JSON lines in OUT, the same clock around its ``run``), then, in
the same process and after the timed run, :func:`surge.doctor.run_checks` on
the state the peer left (what gevent patched, whether urllib3 runs on
pyOpenSSL), appended to OUT as one more line::

    {"event": "doctor", "findings": [Finding.to_dict(), ...]}

``MODULE`` need not be in :data:`~surge.bench.peers.PEERS`: the peers that only
``surge demo`` runs (:mod:`.grequests_pyopenssl`) are registered under their
module's name in this process only.  Only the standard library is imported
before the peer's module, as in :mod:`._child`.
"""

from __future__ import annotations

import json
import sys

#: The checks that read the process's state (no child interpreter, no timing).
CHECKS = ("pyopenssl-injected", "gevent-partial-patch")


def main(argv: list[str]) -> int:
    module, spec_path, out_path = argv
    from . import PEERS, _child

    PEERS.setdefault(module, (module, ()))
    status = _child.main([module, spec_path, out_path])
    with open(out_path) as out:
        events = [json.loads(line).get("event") for line in out if line.startswith('{"event"')]
    if "unavailable" in events:
        return status
    from surge.doctor import run_checks

    findings = [finding.to_dict() for finding in run_checks(only=CHECKS, measure=False)]
    with open(out_path, "a") as out:
        out.write(json.dumps({"event": "doctor", "findings": findings}) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
