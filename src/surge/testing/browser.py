"""A real browser for tests: headless Chromium driven over the DevTools protocol.

The trace page is checked where its users look at it, in a browser: it must load
from disk with no network, draw without console errors, and show what it claims
(one waterfall row per request).  Chromium speaks the DevTools protocol over a
pipe (``--remote-debugging-pipe``: commands in on fd 3, replies and events out on
fd 4, NUL-terminated JSON), so no WebSocket library and no open port is needed.

    with Chromium() as browser:
        page = browser.load("trace.html", expression="document.title")
        page.errors, page.value, page.screenshot  # console errors, result, PNG bytes

``python -m surge.testing.browser PAGE.html --screenshot OUT.png`` takes the
screenshot the README shows.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import selectors
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

#: Where to look for the browser: $SURGE_CHROMIUM, then these names on PATH.
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(RuntimeError):
    """The browser could not be started, or did not answer in time."""


def find_chromium() -> str | None:
    """The Chromium binary: $SURGE_CHROMIUM, else the first of :data:`NAMES` on PATH."""
    configured = os.environ.get("SURGE_CHROMIUM")
    if configured:
        return configured
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Page:
    """What loading a page produced."""

    #: Console errors and uncaught exceptions, as text, in the order they came.
    errors: list[str] = field(default_factory=list)
    #: The value of the expression evaluated after the load (JSON-like).
    value: Any = None
    #: A PNG of the whole page, when asked for.
    screenshot: bytes | None = None


class Chromium:
    """One headless Chromium process; load pages with :meth:`load`."""

    def __init__(self, binary: str | None = None, *, timeout: float = 30.0) -> None:
        found = binary or find_chromium()
        if found is None:
            raise BrowserError(
                "no Chromium: install Debian's 'chromium' package or set SURGE_CHROMIUM"
            )
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="surge-chromium-")
        self._log = open(Path(self._profile.name) / "chromium.log", "wb")  # noqa: SIM115
        args = [
            found,
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            f"--user-data-dir={self._profile.name}",
            "about:blank",
        ]
        # The browser's ends of the two pipes go to fds 3 and 4 with posix_spawn's
        # file actions (no preexec_fn: that is unsafe in a process with threads,
        # such as a test run serving the simulated web).  They are first moved to
        # fds >= 10, so that neither dup2 can overwrite the other's source.
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser_r, from_browser_w)]
        os.close(to_browser_r)
        os.close(from_browser_w)
        log = self._log.fileno()
        try:
            self._pid = os.posix_spawn(
                found,
                args,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, log, 1),
                    (os.POSIX_SPAWN_DUP2, log, 2),
                    (os.POSIX_SPAWN_DUP2, ends[0], 3),
                    (os.POSIX_SPAWN_DUP2, ends[1], 4),
                ],
            )
        finally:
            for fd in ends:
                os.close(fd)
        self._exit: int | None = None
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._from_browser, selectors.EVENT_READ)

    # -- the protocol ----------------------------------------------------------------------

    def _send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
        """Send one command; return its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline, f"{method} (id {self._next_id})")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._events.append(reply)

    def _receive(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self._selector.select(left):
                raise BrowserError(f"Chromium did not answer {waiting_for} in {self.timeout} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError(f"Chromium exited; its log:\n{self.log()[-2000:]}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def _wait_event(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._receive(deadline, method))

    # -- pages -----------------------------------------------------------------------------

    def load(
        self,
        path: str | os.PathLike[str],
        *,
        expression: str | None = None,
        screenshot: bool = False,
        full_page: bool = True,
        width: int = 1280,
        height: int = 900,
    ) -> Page:
        """Open a local file in a new tab, wait for its load event, evaluate
        ``expression``, and gather console errors and uncaught exceptions."""
        url = Path(path).resolve().as_uri()
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        try:
            for domain in ("Runtime", "Log", "Page"):
                self._send(f"{domain}.enable", session=session)
            self._send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            navigated = self._send("Page.navigate", {"url": url}, session=session)
            if navigated.get("errorText"):
                raise BrowserError(f"{path}: {navigated['errorText']}")
            self._wait_event("Page.loadEventFired", session)
            page = Page()
            if expression is not None:
                result = self._send(
                    "Runtime.evaluate",
                    {"expression": expression, "returnByValue": True},
                    session=session,
                )
                if "exceptionDetails" in result:
                    page.errors.append(f"evaluating {expression!r}: {result['exceptionDetails']}")
                page.value = result.get("result", {}).get("value")
            if screenshot:
                shot = self._send(
                    "Page.captureScreenshot",
                    {"format": "png", "captureBeyondViewport": full_page},
                    session=session,
                )
                page.screenshot = base64.b64decode(shot["data"])
            self._send("Runtime.evaluate", {"expression": "0"}, session=session)  # drain
            page.errors[:0] = self._errors(session)
            return page
        finally:
            self._send("Target.closeTarget", {"targetId": target})

    def _errors(self, session: str) -> list[str]:
        errors = []
        for event in self._events:
            if event.get("sessionId") != session:
                continue
            params = event.get("params", {})
            method = event.get("method")
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                description = details.get("exception", {}).get("description")
                errors.append(f"uncaught: {description or details.get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                args = [str(a.get("value", a.get("description"))) for a in params.get("args", [])]
                errors.append("console.error: " + " ".join(args))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        self._events = [e for e in self._events if e.get("sessionId") != session]
        return errors

    def log(self) -> str:
        self._log.flush()
        return (Path(self._profile.name) / "chromium.log").read_text(errors="replace")

    def _wait(self, timeout: float) -> bool:
        """Reap the browser within ``timeout`` seconds; True when it has exited."""
        deadline = time.monotonic() + timeout
        while self._exit is None:
            pid, status = os.waitpid(self._pid, os.WNOHANG)
            if pid:
                self._exit = status
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        if self._exit is None:
            with contextlib.suppress(BrowserError, OSError):
                self._send("Browser.close")
            if not self._wait(10):
                os.kill(self._pid, signal.SIGKILL)
                self._wait(10)
        self._selector.close()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log.close()
        self._profile.cleanup()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render a page in headless Chromium.")
    parser.add_argument("page")
    parser.add_argument("--screenshot", metavar="OUT.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--viewport-only", action="store_true", help="Not the whole page.")
    args = parser.parse_args(argv)
    try:
        with Chromium() as browser:
            page = browser.load(
                args.page,
                screenshot=bool(args.screenshot),
                full_page=not args.viewport_only,
                width=args.width,
                height=args.height,
            )
    except BrowserError as e:
        print(f"surge.testing.browser: {e}")
        return 2
    for error in page.errors:
        print(error)
    if args.screenshot and page.screenshot is not None:
        Path(args.screenshot).write_bytes(page.screenshot)
    return 1 if page.errors else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
