"""Echoes what a program sees: its argv (as JSON, on stdout), stdin (on stdout),
a line on stderr; exits with the status given as its first argument, or by the
signal named with --signal."""

import json
import os
import signal
import sys

print(json.dumps(sys.argv[1:]))
print(sys.stdin.read().upper(), end="")
print("to stderr", file=sys.stderr)
sys.stdout.flush()
if "--signal" in sys.argv:
    os.kill(os.getpid(), signal.SIGTERM)
sys.exit(int(sys.argv[1]))
