"""httpx's request arguments - ``params``, ``content``, ``data``, ``json`` - turned
into what a request sends: a URL, header pairs and body bytes.

One place for the rules, used by both clients:

* ``params`` (a mapping or (name, value) pairs; a list value repeats the name)
  is form-encoded and appended to the URL's query (after ``&`` if it has one);
* at most one body: ``content`` (bytes, or text sent as UTF-8), ``data`` (a
  mapping: ``application/x-www-form-urlencoded``) or ``json`` (any JSON value,
  compact, UTF-8: ``application/json``);
* a Content-Type the caller gave wins over the one a body argument implies.
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from surge.errors import UsageError
from surge.http.headers import HeaderInput

#: A query or form: a mapping, or (name, value) pairs.  A value may be a list.
Params = Mapping[str, Any] | Iterable[tuple[str, Any]]


def form(params: Params) -> str:
    """``params`` form-encoded (``a=1&b=x+y``); a list value repeats its name."""
    items = params.items() if isinstance(params, Mapping) else params
    pairs: list[tuple[str, str]] = []
    for name, value in items:
        values = value if isinstance(value, list | tuple) else [value]
        pairs.extend((str(name), _text(v)) for v in values)
    return urlencode(pairs)


def with_params(url: str, params: Params) -> str:
    """``url`` with ``params`` form-encoded onto its query (before any fragment)."""
    query = form(params)
    if not query:
        return url
    base, hash_, fragment = url.partition("#")
    joiner = "&" if "?" in base and not base.endswith(("?", "&")) else ("" if "?" in base else "?")
    return f"{base}{joiner}{query}{hash_}{fragment}"


def encode_body(content: Any, data: Any, json: Any) -> tuple[bytes | None, str | None]:
    """The body and the Content-Type it implies (None: the caller's or none)."""
    given = [
        name for name, v in (("content", content), ("data", data), ("json", json)) if v is not None
    ]
    if len(given) > 1:
        raise UsageError(f"give one request body, not {' and '.join(given)}")
    if content is not None:
        if isinstance(content, str):
            return content.encode("utf-8"), None
        if isinstance(content, bytes | bytearray | memoryview):
            return bytes(content), None
        raise UsageError(f"content= takes bytes or str, not {type(content).__name__}")
    if data is not None:
        if not isinstance(data, Mapping):
            raise UsageError(
                f"data= takes a mapping (a form); send {type(data).__name__} with content="
            )
        return form(data).encode("ascii"), "application/x-www-form-urlencoded"
    if json is not None:
        text = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8"), "application/json"
    return None, None


def prepare(
    url: str,
    params: Params | None,
    headers: HeaderInput,
    content: Any,
    data: Any,
    json: Any,
) -> tuple[str, HeaderInput, bytes | None]:
    """The URL, headers and body of a request made with httpx's arguments."""
    if params is not None:
        url = with_params(url, params)
    body, content_type = encode_body(content, data, json)
    if content_type is not None:
        pairs = list(headers.items() if isinstance(headers, Mapping) else headers or ())
        if not any(str(name).lower() == "content-type" for name, _ in pairs):
            pairs.append(("Content-Type", content_type))
        headers = pairs
    return url, headers, body


def _text(value: Any) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"  # httpx's spelling, not Python's
    return str(value)
