"""A program that opens a TCP connection, says so on stdout, then ends the way
its argument names: exit, exception, sigterm, sighup, sigint (each sent to
itself), os-exit, or wait (until a signal comes from outside, 60 s at most).

python endings.py HOW
"""

import os
import signal
import socket
import sys
import threading

how = sys.argv[1]
with socket.create_server(("127.0.0.1", 0)) as server:
    socket.create_connection(server.getsockname()).close()
print("connected", os.getpid(), flush=True)
print("buffered: a signal or os._exit loses it, watched or not")
if how == "exception":
    raise ValueError("the program's own crash")
if how in ("sigterm", "sighup", "sigint"):
    os.kill(os.getpid(), getattr(signal, how.upper()))
    threading.Event().wait(60)  # the signal ends it first
if how == "os-exit":
    os._exit(3)
if how == "wait":
    threading.Event().wait(60)
