"""surge watch's bootstrap: ``surge watch -- CMD`` puts this directory first on
PYTHONPATH, so every Python process of CMD runs this at start-up, before its
program: it starts recording (when ``SURGE_WATCH_DIR`` is set), then runs the
``sitecustomize`` this one hides, if there is one.  It never raises: a failure
goes to watch's log, and the program runs as it would have.
"""

import os
import sys


def _start() -> None:
    if not os.environ.get("SURGE_WATCH_DIR"):
        return
    where = os.environ.get("SURGE_WATCH_PATH")
    if where and where not in sys.path:
        sys.path.append(where)  # last: the program's own packages come first
    try:
        from surge.watch import _child

        _child.start()
    except Exception:
        log = os.environ.get("SURGE_WATCH_LOG")
        if log:
            try:
                import traceback

                with open(log, "a", encoding="utf-8") as out:
                    out.write(f"pid {os.getpid()} surge watch: could not start:\n")
                    out.write(traceback.format_exc())
            except Exception:
                pass


def _chain() -> None:
    """Run the next ``sitecustomize`` on sys.path (a distribution's, a venv's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception:
        pass


_start()
_chain()
