"""``python -m surge.watch [options] prog.py args...``: see :mod:`surge.watch._run`."""

import sys

from surge.watch._run import main

if __name__ == "__main__":
    sys.exit(main())
