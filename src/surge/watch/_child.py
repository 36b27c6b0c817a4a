"""The recording inside a process that ``surge watch -- CMD`` started: begun by
the bootstrap ``sitecustomize`` before the program's first line, ended at exit
(``atexit``: after the program's own exit handlers and its non-daemon threads),
when the data goes to ``$SURGE_WATCH_DIR/<pid>.json`` for ``surge watch`` to read.

Every Python process the command starts with the environment it inherits is
recorded, each to its own file.  A process that ends by ``os._exit`` or a
signal writes nothing (multiprocessing's forked workers end that way: their
requests are not seen).
"""

from __future__ import annotations

import atexit
import json
import os

from surge.watch.instrument import failed, set_log
from surge.watch.session import Recording

#: The environment ``surge watch`` sets for its command.
DIR_VARIABLE = "SURGE_WATCH_DIR"
LOG_VARIABLE = "SURGE_WATCH_LOG"
PATH_VARIABLE = "SURGE_WATCH_PATH"


def start() -> None:
    directory = os.environ.get(DIR_VARIABLE)
    if not directory:
        return
    set_log(os.environ.get(LOG_VARIABLE) or os.path.join(directory, "watch.log"))
    try:
        recording = Recording().start()
    except Exception:
        failed("starting the recording")
        return
    started_pid = os.getpid()

    def finish() -> None:
        try:
            recording.stop()
            data = recording.data()
            pid = os.getpid()
            if pid != started_pid:
                data["forked_from"] = started_pid
            path = os.path.join(directory, f"{pid}.json")
            with open(path + ".part", "w", encoding="utf-8") as out:
                json.dump(data, out, separators=(",", ":"))
            os.replace(path + ".part", path)
        except Exception:
            failed("writing the recording")

    atexit.register(finish)
