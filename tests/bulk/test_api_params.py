"""surge.fetch and surge.fetch_all take FetchOptions' fields as keyword
arguments: the same names, types and defaults, documented once (FetchOptions'
docstring, which help() shows on all three), and checked as Python checks any
call."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import json
import pydoc
import re
import textwrap
import typing
from collections.abc import Callable
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from tests._mypy import mypy_errors
from tests.http.conftest import httpbin  # noqa: F401 - a fixture, used by name

import surge
from surge.bulk import engine
from surge.bulk.engine import FetchKeywords, FetchOptions
from surge.bulk.warc import WarcWriter

APIS = [engine.fetch, engine.fetch_all]
#: What each takes besides the options.
OWN = {"fetch": ["urls", "client", "options"], "fetch_all": ["urls", "options"]}


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.__name__)
def test_the_signatures_are_fetch_options_fields(api: Callable[..., Any]) -> None:
    """Drift fails here: an option added to FetchOptions and not to fetch() (or
    a default or a type changed in one place only)."""
    parameters = inspect.signature(api).parameters
    fields = dataclasses.fields(FetchOptions)
    assert list(parameters) == OWN[api.__name__] + [f.name for f in fields]
    # WarcWriter and CookieJar are imported under TYPE_CHECKING only (loaded by
    # --warc, -b/--cookie-jar): given here.
    names = {"WarcWriter": WarcWriter, "CookieJar": CookieJar}
    hints = typing.get_type_hints(api, localns=names)
    field_hints = typing.get_type_hints(FetchOptions, localns=names)
    for f in fields:
        parameter = parameters[f.name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, f.name
        assert parameter.default == _default(f), f.name
        assert hints[f.name] == field_hints[f.name], f.name


def test_every_option_is_documented_once_and_help_shows_it() -> None:
    doc = FetchOptions.__doc__ or ""
    entries = re.findall(r"^    (\w+)\n        \S", doc, re.MULTILINE)
    assert entries == [f.name for f in dataclasses.fields(FetchOptions)]
    options_part = doc[doc.index("\n    concurrency\n") :].strip()
    for api in (surge.fetch, surge.fetch_all):
        text = pydoc.render_doc(api, renderer=pydoc.plaintext)
        assert "concurrency: 'int' = 1000" in text and "trace: 'Tracer | None' = None" in text
        assert options_part.splitlines()[-1].strip() in text  # the last option's text
        assert (api.__doc__ or "").strip().endswith(options_part)
        # Only FetchOptions spells the options out: the function's own source does not.
        assert "Requests in flight at most" not in inspect.getsource(api)


@pytest.mark.parametrize("api", [surge.fetch, surge.fetch_all], ids=["fetch", "fetch_all"])
def test_an_unknown_option_is_a_type_error_at_the_call(api: Callable[..., Any]) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'concurency'"):
        api(["http://127.0.0.1:9/"], concurency=5)
    with pytest.raises(TypeError, match="positional"):
        api(["http://127.0.0.1:9/"], 5)


async def test_options_and_single_options_are_one_or_the_other() -> None:
    options = FetchOptions(retries=2)
    with pytest.raises(TypeError, match=r"options= and concurrency, retries"):
        surge.fetch_all(["http://127.0.0.1:9/"], options=options, concurrency=5, retries=1)
    records = surge.fetch(["http://127.0.0.1:9/"], options=options, max_time=5)
    with pytest.raises(TypeError, match=r"options= and max_time"):
        await anext(records)
    with pytest.raises(TypeError, match="must be a FetchOptions, not dict"):
        surge.fetch_all(["http://127.0.0.1:9/"], options={"retries": 2})  # type: ignore[arg-type]


def test_the_options_reach_the_requests(httpbin: str) -> None:  # noqa: F811
    """A few options by name, through fetch_all, against a real server."""
    urls = [f"{httpbin}/headers", f"{httpbin}/basic-auth/u/p", f"{httpbin}/redirect/1"]
    records = sorted(
        surge.fetch_all(
            urls,
            headers={"X-Surge-Test": "yes"},
            user=("u", "p"),
            follow_redirects=True,
            max_redirects=1,
            keep_body=True,
            concurrency=2,
            relax_gc=False,
        ),
        key=lambda r: r["line"],
    )
    assert [r["status"] for r in records] == [200, 200, 200]
    assert json.loads(records[0]["body"])["headers"]["X-Surge-Test"] == "yes"
    assert records[2]["redirects"] == 1
    (head,) = surge.fetch_all([f"{httpbin}/get"], method="head", keep_body=True)
    assert head["status"] == 200 and head["body"] == ""
    (capped,) = surge.fetch_all([f"{httpbin}/bytes/2000"], body_cap=1000)
    assert capped["error"] == "body_too_large"


@pytest.mark.slow  # mypy, ~7 s
def test_type_checkers_see_the_parameters(tmp_path: Path) -> None:
    """mypy --strict on a caller, as a user's project runs it (surge ships
    py.typed): a wrong type and an unknown option are errors, the right ones are
    not (pyright and IDEs read the same Unpack[FetchKeywords], PEP 692)."""
    pytest.importorskip("mypy")
    errors = mypy_errors(
        tmp_path,
        "import surge\n"
        "def main() -> None:\n"
        "    urls = ['http://127.0.0.1:9/']\n"
        "    surge.fetch_all(urls, concurrency=5, headers={'a': 'b'}, resolve=['x:1:y'])\n"
        "    surge.fetch_all(urls, concurrency='many')\n"
        "    surge.fetch(urls, concurency=5)\n"
        "    surge.fetch_all(urls, client=None)\n",
    )
    assert [line.split(":")[1] for line in errors] == ["5", "6", "7"], errors
    assert 'Argument "concurrency" to "fetch_all"' in errors[0], errors[0]
    assert 'incompatible type "str"' in errors[0]
    assert 'Unexpected keyword argument "concurency" for "fetch"' in errors[1]
    # what the call refuses at run time (test_what_type_checkers_read_is_what_the_call_takes)
    assert 'Unexpected keyword argument "client" for "fetch_all"' in errors[2]


def test_no_cookie_goes_from_one_input_to_another(httpbin: str) -> None:  # noqa: F811
    """The engine's client keeps no cookies: one input's Set-Cookie is not sent
    with the next input's request (each input is a request of its own, as curl's)."""
    urls = [f"{httpbin}/cookies/set/a/1", f"{httpbin}/cookies"]
    records = list(surge.fetch_all(urls, concurrency=1, keep_body=True))
    by_line = {r["line"]: r for r in records}
    assert by_line[1]["status"] == 302
    assert json.loads(by_line[2]["body"]) == {"cookies": {}}


def test_fetch_and_fetch_all_take_the_same_keywords() -> None:
    """The two entry points side by side, not each against FetchOptions: the
    same keyword names, in the same order, of the same kind, with the same
    defaults and annotations - ``fetch_all`` lacking only ``client`` (an
    AsyncClient belongs to its caller's loop, and fetch_all runs on a loop of
    its own).  A parameter added to, dropped from or changed on one of them
    alone fails here, whichever way fetch_all's signature is made."""
    async_side = inspect.signature(surge.fetch).parameters
    sync_side = inspect.signature(surge.fetch_all).parameters
    assert list(sync_side) == [name for name in async_side if name != "client"]
    for name, parameter in sync_side.items():
        twin = async_side[name]
        assert parameter.kind is twin.kind, name
        assert parameter.default == twin.default, name
        assert parameter.annotation == twin.annotation, name
    # and both go through the one place that turns keywords into FetchOptions
    given = {f.name: _default(f) for f in dataclasses.fields(FetchOptions)}
    assert engine._chosen("fetch", None, given) == engine._chosen("fetch_all", None, given)


def _typed_keywords(api: Callable[..., Any]) -> dict[str, str]:
    """The keywords a type checker reads in ``api``'s source: its own keyword-only
    parameters and, for ``**given: Unpack[FetchKeywords]``, FetchKeywords' keys
    (each with its annotation as written) - not the signature help() shows."""
    (function,) = ast.parse(textwrap.dedent(inspect.getsource(api))).body
    assert isinstance(function, ast.FunctionDef)
    own = {a.arg: ast.unparse(a.annotation) for a in function.args.kwonlyargs if a.annotation}
    spread = function.args.kwarg
    assert spread is not None and spread.annotation is not None
    assert ast.unparse(spread.annotation) == "Unpack[FetchKeywords]"
    keys = {name: hint.__forward_arg__ for name, hint in FetchKeywords.__annotations__.items()}
    return {**own, **keys}


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.__name__)
def test_what_type_checkers_read_is_what_the_call_takes(api: Callable[..., Any]) -> None:
    """Drift between the typed signature and the run-time one fails here: the
    keywords mypy reads are the keywords help() shows, with the same types, and
    the call takes each of them and refuses any other (fetch_all once typed
    ``client`` from fetch's ParamSpec and refused it when called)."""
    typed = _typed_keywords(api)
    shown = inspect.signature(api).parameters
    keywords = {n: p for n, p in shown.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert typed == {name: p.annotation for name, p in keywords.items()}
    # FetchKeywords is FetchOptions' fields, type for type
    field_hints = {f.name: f.type for f in dataclasses.fields(FetchOptions)}
    assert {k: v for k, v in typed.items() if k in field_hints} == field_hints
    assert list(FetchKeywords.__annotations__) == list(field_hints)
    for name, parameter in keywords.items():  # nothing runs: fetch and fetch_all are lazy
        records = api([], **{name: parameter.default})
        if inspect.isasyncgen(records):
            asyncio.run(records.aclose())
        else:
            records.close()
    for name in ("client", "concurency", "given") if api is engine.fetch_all else ("given",):
        with pytest.raises(
            TypeError, match=rf"^{api.__name__}\(\) got an unexpected keyword argument '{name}'"
        ):
            api([], **{name: None})
