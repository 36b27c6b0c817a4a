"""A Python process that waits, then runs another Python program as its child:
a command whose own processes are shorter than it is.

    python child_after_pause.py SECONDS PROGRAM ARGS...
"""

import subprocess
import sys
import time

time.sleep(float(sys.argv[1]))
sys.exit(subprocess.run([sys.executable, *sys.argv[2:]], check=False).returncode)
