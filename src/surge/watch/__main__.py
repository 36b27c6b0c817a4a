"""``python -m surge.watch [options] prog.py args...``: see :mod:`surge.watch._run`."""

import sys

from surge.sinks import guard_standard_streams
from surge.watch._run import main

if __name__ == "__main__":
    guard_standard_streams()  # as `surge watch`: a closed 0, 1 or 2 gets /dev/null
    sys.exit(main())
