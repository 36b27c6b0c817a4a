"""surge.http: HTTP/1.1 requests over pooled keep-alive connections.

from surge.http import Client, AsyncClient
with Client() as client:                      # synchronous
    response = client.get("https://example.com/").raise_for_status()
async with AsyncClient() as client:           # asyncio
    response = await client.get("https://example.com/")
    async with client.stream("GET", url) as response:   # the body as it comes
        async for chunk in response.aiter_bytes():
            ...
"""

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
