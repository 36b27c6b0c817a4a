"""What every instrumentor shares: ``instrument()``/``uninstrument()``, patching
a library only once the program imports it, and the rule that a failure inside
watch never reaches the program.

An instrumentor names the modules it needs (``modules``); :meth:`instrument`
applies it at once to those already imported, and otherwise when the program
first imports them (a ``sys.meta_path`` finder that runs the module, then the
instrumentor).  Nothing is imported on the program's behalf: importing ``ssl``
before a gevent program patches would itself be the bug ``surge doctor``
reports as ``gevent-late-patch``.

Each replacement is undone by :meth:`Instrumentor.uninstrument` (only if the
attribute still holds watch's wrapper: someone who patched on top keeps theirs),
and each wrapper first checks that its instrumentor is still on, so a wrapper
that someone else kept a reference to (gevent's ``saved`` originals) becomes a
plain call to the original.
"""

from __future__ import annotations

import contextlib
import errno
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from surge.watch._log import failed, failures, set_log
from surge.watch.recorder import Recorder

__all__ = [
    "EXHAUSTED",
    "Instrumentor",
    "error_class",
    "exhaustion",
    "failed",
    "failures",
    "set_exhaustion_sink",
    "set_log",
    "unwrapped",
]


class _AfterImports:
    """A ``sys.meta_path`` finder: for the module names registered, the real
    finder's module runs, then each callback with the module."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._finding: set[str] = set()

    def add(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.callbacks.setdefault(name, []).append(then)
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self, then: Callable[[ModuleType], None]) -> None:
        for name in list(self.callbacks):
            kept = [c for c in self.callbacks[name] if c is not then]
            if kept:
                self.callbacks[name] = kept
            else:
                del self.callbacks[name]
        if not self.callbacks and self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if name not in self.callbacks or name in self._finding:
            return None
        self._finding.add(name)
        try:
            for finder in sys.meta_path:
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                spec = find(name, path, target) if find is not None else None
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._finding.discard(name)
        loader = spec.loader
        run: Any = getattr(loader, "exec_module", None)
        if run is None:
            return spec
        hooks = self

        class _Loader:
            """The real loader, with the callbacks after ``exec_module``."""

            def __getattr__(self, attribute: str) -> Any:
                return getattr(loader, attribute)

            def create_module(self, spec: Any) -> Any:
                create = getattr(loader, "create_module", None)
                return create(spec) if create is not None else None

            def exec_module(self, module: ModuleType) -> None:
                run(module)
                for then in hooks.callbacks.pop(name, []):
                    try:
                        then(module)
                    except Exception:
                        failed(f"instrumenting {name}")

        spec.loader = _Loader()
        return spec


_after_imports = _AfterImports()
#: Undo marker: the attribute was inherited, not the class's own (undo deletes it).
_INHERITED = object()


class Instrumentor:
    """One library's instrumentation.  Subclasses set ``library`` and ``modules``
    and implement :meth:`apply` (called once per module in ``modules``, when
    imported) with :meth:`replace` for each patch.  ``shown``: what it records, as
    ``surge watch --help`` lists it (a group and the names users know)."""

    library = ""
    modules: tuple[str, ...] = ()
    shown: tuple[str, tuple[str, ...]] = ("", ())

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.on = False
        self._undo: list[tuple[Any, str, Any, Any]] = []
        self._applied: set[str] = set()

    def instrument(self) -> None:
        if self.on:
            return
        self.on = True
        for name in self.modules:
            module = sys.modules.get(name)
            if module is not None:
                self._apply(module)
            else:
                _after_imports.add(name, self._apply)

    def uninstrument(self) -> None:
        self.on = False
        _after_imports.remove(self._apply)
        for owner, attribute, original, wrapper in reversed(self._undo):
            with contextlib.suppress(Exception):
                if owner.__dict__.get(attribute) is wrapper:
                    if original is _INHERITED:
                        delattr(owner, attribute)
                    else:
                        setattr(owner, attribute, original)
        self._undo.clear()
        self._applied.clear()
        with contextlib.suppress(Exception):
            self.removed()

    def _apply(self, module: ModuleType) -> None:
        if not self.on or module.__name__ in self._applied:
            return
        self._applied.add(module.__name__)
        if module.__name__ not in self.recorder.imported:
            self.recorder.imported.append(module.__name__)
        try:
            self.apply(module)
        except Exception:
            failed(f"instrumenting {module.__name__}")

    def apply(self, module: ModuleType) -> None:
        raise NotImplementedError

    def removed(self) -> None:
        """Undo what :meth:`replace` cannot (a subscriber, a filter)."""

    def replace(
        self, owner: Any, attribute: str, make: Callable[[Any], Callable[..., Any]]
    ) -> None:
        """``owner.attribute = make(original)``, undone by :meth:`uninstrument`.
        An attribute that a wrapper of watch already holds is left alone."""
        own = owner.__dict__.get(attribute)
        original = own if own is not None else getattr(owner, attribute, None)
        if original is None or getattr(original, "_surge_watch", False):
            return
        wrapper: Any = make(original)
        with contextlib.suppress(AttributeError, TypeError):
            wrapper._surge_watch = True
            wrapper.__wrapped__ = original
        setattr(owner, attribute, wrapper)
        inherited = isinstance(owner, type) and own is None
        self._undo.append((owner, attribute, _INHERITED if inherited else original, wrapper))


def unwrapped(function: Any) -> Any:
    """The original under watch's wrapper (itself if not wrapped)."""
    while getattr(function, "_surge_watch", False):
        function = function.__wrapped__
    return function


#: errno values of descriptor exhaustion: this process's limit (EMFILE, "Too many
#: open files"), the system's (ENFILE).
EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})
#: Causes and contexts looked through for one (a library's error wraps the OSError).
CHAIN = 8
#: Where an exhaustion seen goes (the running recording's recorder; None: nowhere).
_exhaustion_sink: Callable[[OSError], None] | None = None


def set_exhaustion_sink(sink: Callable[[OSError], None] | None) -> None:
    global _exhaustion_sink
    _exhaustion_sink = sink


def exhaustion(error: BaseException | None) -> OSError | None:
    """The OSError of descriptor exhaustion behind ``error`` (itself, or what it
    was raised from or while handling), if there is one."""
    for _ in range(CHAIN):
        if error is None:
            return None
        if isinstance(error, OSError) and error.errno in EXHAUSTED:
            return error
        error = error.__cause__ or error.__context__
    return None


def error_class(error: BaseException) -> str:
    """A failure as a class name: never its message, which may carry a URL's query,
    a password or a statement's values.  One that came of descriptor exhaustion is
    also handed to the recording (the ``fd-exhaustion`` finding)."""
    sink = _exhaustion_sink
    if sink is not None:
        with contextlib.suppress(Exception):
            cause = exhaustion(error)
            if cause is not None:
                sink(cause)
    return type(error).__name__
