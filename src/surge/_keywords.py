"""Keyword options taken from one table, shown and checked as written-out keywords.

Some public callables take their options as ``**options`` from a table kept once
(surge.pool's ``PoolOptions``/``DEFAULTS``, surge.bulk's ``FetchOptions``), or
hand them to a constructor that has them (surge.db's front-ends to ``DBPool``).
Two things then go wrong unless something puts them right, and this module
does, for all of them:

* ``help()``, ``inspect.signature()`` and IDEs show ``**options`` instead of the
  keywords: :func:`spelt_out` writes the table's entries into the signature,
  each a keyword-only parameter with its default and its type.
* a misspelt keyword is refused by whatever code first looks at it, under that
  code's name (``SessionResets.__init__() got ...``): :func:`refuse_unknown`
  raises Python's own TypeError under the name the user called, with the close
  match if there is one (the suggestion Python 3.13 adds to its own).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Iterable
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")

#: One entry of a table: (name, default, annotation); ``inspect.Parameter.empty``
#: as the default for a required one.
Entry = tuple[str, Any, Any]


def unexpected(caller: str, name: str, known: Iterable[str]) -> TypeError:
    """The TypeError Python raises for ``caller(name=...)`` (``caller`` as the user
    wrote the call: ``"DBPool()"``), with the known name closest to ``name``."""
    import difflib  # an error's path only

    message = f"{caller} got an unexpected keyword argument {name!r}"
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.7)
    if close:
        message += f". Did you mean {close[0]!r}?"
    return TypeError(message)


def refuse_unknown(caller: str, given: Iterable[str], known: Collection[str]) -> None:
    """Raise :func:`unexpected` for the first of ``given`` not in ``known``."""
    for name in given:
        if name not in known:
            raise unexpected(caller, name, known)


def keywords_of(function: Callable[..., Any], *, method: bool = False) -> frozenset[str]:
    """The names ``function`` (a class: its constructor) takes as keywords; but
    the first, ``self``, of a ``method`` not bound."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = list(inspect.signature(function).parameters.values())[1 if method else 0 :]
    return frozenset(p.name for p in parameters if p.kind in kinds)


def named_refusals(init: Callable[P, None]) -> Callable[P, None]:
    """``init`` (an ``__init__`` with its keywords written out), refusing an unknown
    keyword under its class's name - ``DBPool()``, not the base class whose
    ``__init__`` it is - as Python would name a class of its own."""
    known = keywords_of(init, method=True)

    def __init__(*args: P.args, **kwargs: P.kwargs) -> None:
        if not kwargs.keys() <= known:
            refuse_unknown(f"{type(args[0]).__name__}()", kwargs, known)
        init(*args, **kwargs)

    functools.update_wrapper(__init__, init)  # its signature and doc for help()
    return __init__


def spelt_out(function: Callable[..., Any], table: Iterable[Entry]) -> inspect.Signature:
    """``function``'s signature with its ``**options`` replaced by the table's
    entries: a keyword-only parameter each, with its default and annotation."""
    signature = inspect.signature(function)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        for name, default, hint in table
    ]
    return signature.replace(parameters=own + options)


def parameters_of(
    target: Callable[P, Any],
) -> Callable[[Callable[..., T]], Callable[P, T]]:
    """For a function that hands its arguments on to ``target`` (``surge.db.pool``
    to ``DBPool``): type checkers, ``help()`` and ``inspect.signature()`` see
    ``target``'s parameters, not ``(url, **options: Any)``."""

    def typed(function: Callable[..., T]) -> Callable[P, T]:
        returns = inspect.signature(function).return_annotation
        signature = inspect.signature(target).replace(return_annotation=returns)
        function.__signature__ = signature  # type: ignore[attr-defined]
        return cast("Callable[P, T]", function)

    return typed
