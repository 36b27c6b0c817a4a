"""surge.db's watchdog (the one thread that cuts a C call no timeout reaches)
outlives guards taken off while it looks at them: their tokens are popped
without its lock, and a walk of the armed calls that met one ended the thread
- and with it every timeout after (seen in CI under random interruptions)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time

from surge.db._session import Watchdog


def test_the_watchdog_outlives_guards_taken_off_while_it_looks() -> None:
    dog = Watchdog()
    until = time.monotonic() + 3.0
    count = [0]

    def churn() -> None:
        while time.monotonic() < until:
            with dog.guard(30.0, lambda: None):
                count[0] += 1

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside the watchdog's walk
    try:
        with contextlib.ExitStack() as held:
            for _ in range(3000):  # a long walk: many guards armed at once
                held.enter_context(dog.guard(60.0, lambda: None))
            threads = [threading.Thread(target=churn) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
    finally:
        sys.setswitchinterval(previous)
    assert count[0] > 100, count  # the storm happened
    fired = threading.Event()
    with dog.guard(0.05, fired.set):
        assert fired.wait(5), "a due guard did not fire: the watchdog thread is gone"
