"""``python -m surge``: the ``surge`` command, for an environment whose scripts
directory is not on PATH (as ``python -m pip`` is pip)."""

from surge.cli import main

if __name__ == "__main__":  # pragma: no cover - run as a program
    main()
