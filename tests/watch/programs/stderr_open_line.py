"""A progress line on stderr, left open (or closed, given "closed").

python stderr_open_line.py [closed]
"""

import sys

print("progress 50%", end="\n" if sys.argv[1:] == ["closed"] else "", file=sys.stderr)
