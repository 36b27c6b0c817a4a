"""A small S3 stand-in on loopback that gets ListObjectsV2 wrong on purpose.

The deviations are the ones met on real S3-compatible servers (issue #19): a
continuation token that never advances, an ignored ``start-after``, keys
sorted by UTF-16 code units and delimiter listings without CommonPrefixes (as
s3rver 3.7 does), a 200 answer that is not S3 at all (an HTML login page, a
JSON API) and 503 SlowDown. The bucket name picks the deviation, so one server
serves every case; ``s3`` is the conforming bucket the others are measured
against. Unsigned: the server never checks a signature.

Objects (HEAD, GET, PUT of ``/bucket/key``, kept in memory; a PUT's
Content-MD5 checked, its ETag the body's MD5) in the buckets ``throttle``,
which answers 503 SlowDown to the next ``throttles`` object requests,
``throttle-always``, which always does, and ``wrong-etag``, which stores a PUT
but answers an ETag that is not its body's MD5 (as a body corrupted on the way
would be, on a server that ignores Content-MD5 as moto does), and
``copy-error``, which answers a copy (a PUT with ``x-amz-copy-source``) 200
with an ``<Error>`` document, as S3 documents it may.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote_plus, unquote, urlsplit
from xml.sax.saxutils import escape

#: The buckets, each deviating in one way.
BUCKETS = (
    "s3",
    "repeat-token",
    "ignore-start-after",
    "utf16",
    "no-prefixes",
    "html",
    "json",
    "slowdown",
    "slowdown-always",
    "throttle",
    "throttle-always",
    "wrong-etag",
)
#: 503s the ``slowdown`` bucket answers before it lists.
SLOWDOWNS = 3


def deviant_keys() -> list[str]:
    """Keys in directories and at the top, with characters whose order differs
    between UTF-8 (S3) and UTF-16 (s3rver): U+FF71 sorts before U+1F600 by
    code point, after it by UTF-16 code unit (a surrogate pair, 0xD83D...)."""
    keys = []
    for i in range(240):
        base = f"dir{i % 4}/{i:04d}-"
        keys += [base + "a", base + "\uff71", base + "\U0001f600"]
    keys += [f"top-{i:03d}\uff71" for i in range(30)] + [
        f"top-{i:03d}\U0001f600" for i in range(30)
    ]
    return keys


def utf8(key: str) -> bytes:
    return key.encode()


def utf16(key: str) -> bytes:
    return key.encode("utf-16-be")


class Bucket:
    def __init__(self, keys: list[str], order: Callable[[str], bytes]) -> None:
        self.order = order
        self.keys = sorted(set(keys), key=order)
        self.orders = [order(k) for k in self.keys]

    def page(
        self,
        prefix: str,
        delimiter: str,
        after: str | None,
        limit: int,
        *,
        common_prefixes: bool = True,
    ) -> tuple[list[str], list[str], bool, str]:
        """(keys, common prefixes, truncated, last entry) of one page after ``after``."""
        keys = self.keys
        i = bisect_right(self.orders, self.order(after)) if after else 0
        if after and delimiter and after.endswith(delimiter):
            while i < len(keys) and keys[i].startswith(after):  # a listed prefix
                i += 1
        contents: list[str] = []
        prefixes: list[str] = []
        last, truncated = "", False
        while i < len(keys):
            key = keys[i]
            if not key.startswith(prefix):
                i += 1
                continue
            if len(contents) + len(prefixes) == limit:
                truncated = True
                break
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                common = key[: cut + len(delimiter)]
                if common_prefixes:
                    prefixes.append(common)
                last = common
                while i < len(keys) and keys[i].startswith(common):
                    i += 1
                continue
            contents.append(key)
            last = key
            i += 1
        return contents, prefixes, truncated, last


def render(
    contents: list[str], prefixes: list[str], truncated: bool, token: str | None, url: bool
) -> bytes:
    def enc(key: str) -> str:
        return quote_plus(key, safe="/") if url else escape(key)

    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>']
    if url:
        parts.append("<EncodingType>url</EncodingType>")
    parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    for key in contents:
        parts.append(
            f"<Contents><Key>{enc(key)}</Key><LastModified>2026-11-22T13:04:08.123Z"
            "</LastModified><ETag>&#34;x&#34;</ETag><Size>1</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
        )
    for common in prefixes:
        parts.append(f"<CommonPrefixes><Prefix>{enc(common)}</Prefix></CommonPrefixes>")
    if truncated and token is not None:
        parts.append(f"<NextContinuationToken>{escape(token)}</NextContinuationToken>")
    parts.append("</ListBucketResult>")
    return "".join(parts).encode()


class DeviantServer:
    """The server: ``endpoint_url``, the keys of every bucket, requests counted."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = sorted(set(keys))
        self.utf8 = Bucket(keys, utf8)
        self.utf16 = Bucket(keys, utf16)
        self.requests = 0
        self.slowdowns = 0
        #: object requests of the ``throttle`` bucket still to answer SlowDown
        self.throttles = 0
        #: (method, key) of every object request, in order of arrival
        self.object_requests: list[tuple[str, str]] = []
        self.stored: dict[str, bytes] = {}  # "bucket/key" -> body
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        host, port = self.httpd.server_address[:2]
        self.endpoint_url = f"http://{host!s}:{port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def handle(self) -> None:
                with suppress(ConnectionError):  # the client gave up on a pipelined page
                    super().handle()

            def do_GET(self) -> None:
                if server.is_object(self.path):
                    self.object("GET")
                    return
                status, ctype, body = server.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self) -> None:
                self.object("HEAD")

            def do_PUT(self) -> None:
                self.object("PUT")

            def object(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if method == "PUT" else b""
                status, headers, out = server.object(
                    method,
                    self.path,
                    body,
                    self.headers.get("Content-MD5"),
                    self.headers.get("x-amz-copy-source"),
                )
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(out)

        return Handler

    @staticmethod
    def is_object(path: str) -> bool:
        return "/" in urlsplit(path).path.strip("/")

    def object(
        self,
        method: str,
        path: str,
        body: bytes,
        content_md5: str | None,
        copy_source: str | None = None,
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """(status, headers, body) of an object request."""
        name = unquote(urlsplit(path).path.lstrip("/"))
        bucket, _, key = name.partition("/")
        with self._lock:
            self.object_requests.append((method, key))
            throttled = bucket == "throttle-always" or (bucket == "throttle" and self.throttles > 0)
            if bucket == "throttle" and throttled:
                self.throttles -= 1
        xml = [("Content-Type", "application/xml")]
        if throttled:
            return 503, xml, b"<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>"
        if bucket == "copy-error" and method == "PUT" and copy_source:
            error = b"<Error><Code>InternalError</Code><Message>We encountered an internal error."
            return (
                200,
                xml,
                b'<?xml version="1.0" encoding="UTF-8"?>\n\n' + error + b"</Message></Error>",
            )
        if bucket not in ("throttle", "throttle-always", "wrong-etag"):
            return 404, xml, b"<Error><Code>NoSuchBucket</Code><Message>no</Message></Error>"
        if method == "PUT":
            md5 = hashlib.md5(body).digest()
            if bucket == "wrong-etag":
                return 200, [("ETag", f'"{hashlib.md5(body + b"!").hexdigest()}"')], b""
            if content_md5 is not None and base64.b64decode(content_md5) != md5:
                return 400, xml, b"<Error><Code>BadDigest</Code><Message>md5</Message></Error>"
            with self._lock:
                self.stored[name] = body
            return 200, [("ETag", f'"{md5.hex()}"')], b""
        with self._lock:
            stored = self.stored.get(name)
        if stored is None:
            return 404, xml, b"<Error><Code>NoSuchKey</Code><Message>no</Message></Error>"
        headers = [("ETag", f'"{hashlib.md5(stored).hexdigest()}"')]
        return 200, headers, stored if method == "GET" else b"\0" * len(stored)

    def answer(self, path: str) -> tuple[int, str, bytes]:
        with self._lock:
            self.requests += 1
        parts = urlsplit(path)
        bucket = parts.path.strip("/")
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if bucket == "html":
            return 200, "text/html", b"<!DOCTYPE html><html><body>Please log in</body></html>"
        if bucket == "json":
            return 200, "application/json", b'{"objects": []}'
        if bucket == "slowdown-always" or (bucket == "slowdown" and self._slow_down()):
            error = b"<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>"
            return 503, "application/xml", error
        if bucket not in BUCKETS:
            error = b"<Error><Code>NoSuchBucket</Code><Message>no such bucket</Message></Error>"
            return 404, "application/xml", error
        store = self.utf16 if bucket == "utf16" else self.utf8
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        limit = max(1, min(1000, int(query.get("max-keys", "1000"))))
        token = query.get("continuation-token")
        start_after = query.get("start-after")
        if bucket == "ignore-start-after":
            start_after = None
        after = token if token is not None else start_after
        if bucket == "repeat-token" and token is not None:
            after = self._first_token(store, prefix, delimiter, limit)  # never advances
        contents, prefixes, truncated, last = store.page(
            prefix, delimiter, after, limit, common_prefixes=bucket != "no-prefixes"
        )
        url = query.get("encoding-type") == "url"
        return 200, "application/xml", render(contents, prefixes, truncated, last, url)

    def _first_token(self, store: Bucket, prefix: str, delimiter: str, limit: int) -> str:
        return store.page(prefix, delimiter, None, limit)[3]

    def _slow_down(self) -> bool:
        with self._lock:
            self.slowdowns += 1
            return self.slowdowns <= SLOWDOWNS


@contextmanager
def deviant_server(keys: list[str] | None = None) -> Iterator[DeviantServer]:
    server = DeviantServer(deviant_keys() if keys is None else keys)
    thread = threading.Thread(target=server.httpd.serve_forever, name="deviant-s3", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        thread.join(5)
