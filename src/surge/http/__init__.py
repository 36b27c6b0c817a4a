"""surge.http: one HTTP/1.1 request at a time over pooled keep-alive connections.

from surge.http import Client
async with Client() as client:
    response = await client.get("https://example.com/")
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
    TimeoutException,
    TLSError,
    TooManyRedirects,
)
from surge.http.client import Client, make_ssl_context
from surge.http.resolver import Override, Resolver
from surge.http.response import Headers, Response
from surge.http.timings import Timings
from surge.http.url import URL, parse_url

__all__ = [
    "URL",
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
    "RequestError",
    "TLSError",
    "TimeoutException",
    "TooManyRedirects",
    "Override",
    "Resolver",
    "Response",
    "Timings",
    "make_ssl_context",
    "parse_url",
]
