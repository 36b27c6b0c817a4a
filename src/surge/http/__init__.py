"""surge.http: HTTP/1.1 requests over pooled keep-alive connections.

from surge.http import Client, AsyncClient
with Client() as client:                      # synchronous
    response = client.get("https://example.com/").raise_for_status()
async with AsyncClient() as client:           # asyncio
    response = await client.get("https://example.com/")
    async with client.stream("GET", url) as response:   # the body as it comes
        async for chunk in response.aiter_bytes():
            ...

The names below load on first use (PEP 562), so that a program that needs one
part (``surge s3 ls``: the async client, no cookies, no sync front-end) imports
only that part.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, __getattr__ loads them
    from surge.errors import (
        BodyTooLarge,
        ConnectError,
        ConnectRefused,
        ConnectTimeout,
        DNSError,
        HTTPStatusError,
        InvalidURL,
        ReadError,
        ReadTimeout,
        RemoteProtocolError,
        RequestError,
        ResponseNotRead,
        StreamConsumed,
        StreamError,
        TimeoutException,
        TLSError,
        TooManyRedirects,
        WriteTimeout,
    )
    from surge.http.auth import Request
    from surge.http.client import AsyncClient, make_ssl_context
    from surge.http.resolver import Override, Resolver
    from surge.http.response import Headers, Response
    from surge.http.sync import Client, delete, get, head, patch, post, put, request
    from surge.http.timeout import Timeout
    from surge.http.timings import Timings
    from surge.http.url import URL, parse_url

__all__ = [
    "URL",
    "AsyncClient",
    "BodyTooLarge",
    "Client",
    "ConnectError",
    "ConnectRefused",
    "ConnectTimeout",
    "DNSError",
    "HTTPStatusError",
    "Headers",
    "InvalidURL",
    "ReadError",
    "ReadTimeout",
    "RemoteProtocolError",
    "Request",
    "RequestError",
    "ResponseNotRead",
    "StreamConsumed",
    "StreamError",
    "TLSError",
    "Timeout",
    "TimeoutException",
    "TooManyRedirects",
    "WriteTimeout",
    "Override",
    "Resolver",
    "Response",
    "Timings",
    "delete",
    "get",
    "head",
    "make_ssl_context",
    "parse_url",
    "patch",
    "post",
    "put",
    "request",
]

#: name -> the module it is loaded from on first use.
_EXPORTS = {
    "BodyTooLarge": "surge.errors",
    "ConnectError": "surge.errors",
    "ConnectRefused": "surge.errors",
    "ConnectTimeout": "surge.errors",
    "DNSError": "surge.errors",
    "HTTPStatusError": "surge.errors",
    "InvalidURL": "surge.errors",
    "ReadError": "surge.errors",
    "ReadTimeout": "surge.errors",
    "RemoteProtocolError": "surge.errors",
    "RequestError": "surge.errors",
    "ResponseNotRead": "surge.errors",
    "StreamConsumed": "surge.errors",
    "StreamError": "surge.errors",
    "TimeoutException": "surge.errors",
    "TLSError": "surge.errors",
    "TooManyRedirects": "surge.errors",
    "WriteTimeout": "surge.errors",
    "Request": "surge.http.auth",
    "AsyncClient": "surge.http.client",
    "make_ssl_context": "surge.http.client",
    "Override": "surge.http.resolver",
    "Resolver": "surge.http.resolver",
    "Headers": "surge.http.response",
    "Response": "surge.http.response",
    "Client": "surge.http.sync",
    "delete": "surge.http.sync",
    "get": "surge.http.sync",
    "head": "surge.http.sync",
    "patch": "surge.http.sync",
    "post": "surge.http.sync",
    "put": "surge.http.sync",
    "request": "surge.http.sync",
    "Timeout": "surge.http.timeout",
    "Timings": "surge.http.timings",
    "URL": "surge.http.url",
    "parse_url": "surge.http.url",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'surge.http' has no attribute {name!r}")
