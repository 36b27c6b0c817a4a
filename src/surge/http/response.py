"""What a request gives back: :class:`Response`, and its :class:`Headers`.

The names are httpx's where httpx has one (``status_code``, ``content``,
``text``, ``json()``, ``raise_for_status()``, ``headers.get_list()``), so a
user moving over does not relearn them.  Headers are kept as the raw head and
parsed only when asked for: a bulk run that never looks at them pays nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from surge.errors import HTTPStatusError
from surge.http.connection import parse_head
from surge.http.timings import Timings, redirect_ms

if TYPE_CHECKING:
    from surge.http.connection import HTTPConnection

_CHARSET = re.compile(r";\s*charset\s*=\s*\"?([^\s;\"]+)", re.IGNORECASE)


class Headers(Mapping[str, str]):
    """Response headers: a case-insensitive mapping that keeps every value.

    ``headers["set-cookie"]`` joins repeated values with ", " (as httpx does);
    ``get_list(name)`` gives each one; ``multi_items()`` every (name, value) pair
    in the order received, names as sent.
    """

    __slots__ = ("_by_name", "_items")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        by_name: dict[str, list[str]] = {}
        for name, value in items:
            by_name.setdefault(name.lower(), []).append(value)
        self._by_name = by_name

    def __getitem__(self, name: str) -> str:
        return ", ".join(self._by_name[name.lower()])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)  # lower-cased names, each once, in first-seen order

    def __len__(self) -> int:
        return len(self._by_name)

    def get_list(self, name: str) -> list[str]:
        """Every value of ``name``, in order (empty if absent)."""
        return list(self._by_name.get(name.lower(), ()))

    def multi_items(self) -> list[tuple[str, str]]:
        """Every (name, value) pair, in the order received."""
        return list(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._items == other._items
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class Response:
    """A complete response: status, headers, the (decoded) body, and timings.

    ``url`` is the URL asked for and ``final_url`` the one that answered (after
    redirects); ``bytes`` is the body's size on the wire, before decoding;
    ``attempts`` the tries under the caller's retries; ``redirects`` the hops
    followed; ``connection`` the connection it came on (``address``, ``tls``).
    """

    __slots__ = (
        "_headers",
        "attempts",
        "body",
        "bytes",
        "connection",
        "final_url",
        "head",
        "redirects",
        "status",
        "timings",
        "url",
    )

    def __init__(
        self,
        url: str,
        final_url: str,
        status: int,
        head: bytes,
        body: bytes,
        wire_bytes: int,
        timings: Timings,
        attempts: int,
        redirects: int,
        connection: HTTPConnection | None = None,
    ) -> None:
        self.url = url
        self.final_url = final_url
        self.status = status
        self.head = head  # the status line and header lines, as received
        self._headers: Headers | None = None
        self.body = body
        self.bytes = wire_bytes  # body bytes on the wire (before decoding)
        self.timings = timings
        self.attempts = attempts
        self.redirects = redirects
        self.connection = connection

    # -- httpx's names --------------------------------------------------------------------

    @property
    def status_code(self) -> int:
        return self.status

    @property
    def content(self) -> bytes:
        """The body, decoded from its Content-Encoding (gzip, deflate, br, zstd)."""
        return self.body

    @property
    def encoding(self) -> str:
        """The charset of the Content-Type, if it names one Python knows; else UTF-8.
        Of several Content-Type headers the last counts (the Fetch standard's rule)."""
        types = self.headers.get_list("content-type")
        found = _CHARSET.search(types[-1]) if types else None
        if found is not None:
            name = found.group(1)
            try:
                "".encode(name)
            except LookupError:
                return "utf-8"
            return name.lower()
        return "utf-8"

    @property
    def text(self) -> str:
        """The body as text, in ``encoding`` (undecodable bytes replaced)."""
        return self.body.decode(self.encoding, "replace")

    def json(self, **kwargs: Any) -> Any:
        """The body parsed as JSON (``json.loads``; bytes, so UTF-8/16/32 are detected)."""
        return json.loads(self.body, **kwargs)

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    def raise_for_status(self) -> Response:
        """Raise :class:`~surge.errors.HTTPStatusError` on a 4xx or 5xx; return
        the response otherwise (so it chains: ``client.get(u).raise_for_status()``)."""
        if 400 <= self.status < 600:
            kind = "client error" if self.status < 500 else "server error"
            raise HTTPStatusError(f"{self.status} {kind} for {self.final_url}", response=self)
        return self

    @property
    def elapsed(self) -> timedelta:
        """From the request's start (its own network work) to the end of the body."""
        t = self.timings
        if t.started is None or t.done is None:
            return timedelta(0)
        return timedelta(seconds=t.done - t.started)

    # -- headers ----------------------------------------------------------------------------

    @property
    def http_version(self) -> str:
        """From the status line: "1.1" or "1.0" (read on use, not per response)."""
        head = self.head
        return head[5:8].decode("ascii", "replace") if head.startswith(b"HTTP/") else "1.1"

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The response headers as bytes, in order (parsed from ``head`` on use)."""
        return parse_head(self.head)

    @property
    def headers(self) -> Headers:
        """The response headers (latin-1 decoded, as sent): see :class:`Headers`."""
        if self._headers is None:
            self._headers = Headers(
                [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self.raw_headers]
            )
        return self._headers

    def header(self, name: str) -> str | None:
        """The first value of a header, by case-insensitive name (None if absent)."""
        values = self.headers.get_list(name)
        return values[0] if values else None

    @property
    def redirect_ms(self) -> float:
        """curl's time_redirect: from the start to the start of the last hop."""
        return redirect_ms(self.timings)

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.final_url} {len(self.body)} bytes>"
