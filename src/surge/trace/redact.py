"""What surge writes about a request or a command: never a secret.

One place that every writer of a report about requests goes through - the
HAR, the trace page, ``surge fetch``'s records, ``surge trace``'s output,
``surge watch``'s summary, report, page, Chrome trace and OTLP spans, its
log, the warcinfo surge adds to a WARC - so that the rule is kept, or broken,
everywhere at once:

- :func:`safe_url`: a URL without its userinfo (``user:password@``), and with
  the value of every parameter that :func:`secret_parameter` names replaced by
  :data:`REDACTED` - in its query and in its fragment (OAuth's implicit flow
  hands the token over as ``#access_token=...``), parameters split at ``&``
  and ``;``; nothing else of it changes (its bytes as given: no decoding, no
  normalising);
- :func:`safe_text`: every URL inside a free text (an error's detail) so, and
  every ``name=value`` of a secret name that follows a ``?``, ``&``, ``;`` or
  ``#`` (a URL with a space in it is not all found as one);
- :func:`safe_headers`: headers without credentials (:func:`secret_header`), and the URLs
  of :data:`URL_HEADERS` (``Location``) through :func:`safe_url`;
- :func:`safe_peer`: a ``host:port`` without the userinfo a URL's authority
  brought along (``http.client`` keeps it in ``host`` when a redirect's
  ``Location`` has one);
- :func:`safe_record`: a ``surge fetch`` record so (its URLs, its input, its
  error's detail, its response headers);
- :func:`command_label`: a command line as the program's name and a count of
  its arguments (arguments carry passwords, tokens, database URLs; an
  ``env NAME=VALUE`` prefix carries the environment);
- :data:`SECRET_HEADERS`: the headers a sanitised HAR leaves out, as Chrome's
  "Export HAR (sanitized)" does (``Cookie``, ``Set-Cookie``, ``Authorization``;
  and ``Proxy-Authorization``, which surge's credential rules treat as one).

What is written about requests is for reading and sharing (a HAR attached to
a bug report is how sessions were stolen from Okta's support system in 2023);
what was sent stays what was sent (the WARC's request record).  ``surge
fetch``'s records are reports too: :func:`safe_record` is what every record
goes through (bulk/engine.py), and ``--resume`` folds an input as a record
writes it (:func:`safe_url` writes what it wrote the same).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import unquote_plus

#: What a secret value is replaced with.
REDACTED = "REDACTED"

#: Headers whose values are credentials (lower case).
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        # S3's SSE-C keys (surge.s3.putoptions): the key that decrypts the object
        "x-amz-server-side-encryption-customer-key",
        "x-amz-copy-source-server-side-encryption-customer-key",
    }
)

#: Query parameters whose values are secrets by their whole name (lower case,
#: ``-`` read as ``_``): Google's API ``key``, Azure SAS's ``sig``, and the like.
SECRET_NAMES = frozenset({"key", "sig", "auth", "pwd", "pass", "session", "sid", "code"})
#: ... or by a part of it: OAuth's ``access_token`` (RFC 6750 2.3) and
#: ``client_secret`` (RFC 6749 2.3.1), S3's presigned ``X-Amz-Signature``,
#: ``X-Amz-Credential`` and ``X-Amz-Security-Token``, ``api_key``, ``password``.
SECRET_PARTS = ("token", "secret", "passw", "signature", "credential", "apikey", "api_key")


#: Header names that hold a secret by a part of their name (lower case, ``-``
#: read as ``_``): ``X-Api-Key``, ``X-Auth-Token``, ``X-Amz-Security-Token``,
#: ``X-Vault-Token``, ``X-Client-Secret``, a ``Session`` id.  Not the query's
#: parts: ``Access-Control-Allow-Credentials`` is no secret.
SECRET_HEADER_PARTS = ("token", "secret", "passw", "api_key", "apikey", "auth_key", "session")


def secret_header(name: str) -> bool:
    """Whether a header of this name holds a credential: one of
    :data:`SECRET_HEADERS`, or a name with a part of :data:`SECRET_HEADER_PARTS`."""
    lower = name.lower()
    if lower in SECRET_HEADERS:
        return True
    text = lower.replace("-", "_")
    return any(part in text for part in SECRET_HEADER_PARTS)


def secret_parameter(name: str) -> bool:
    """Whether a query parameter of this name holds a secret (see
    :data:`SECRET_NAMES` and :data:`SECRET_PARTS`): the name as the server
    reads it (percent-decoded, ``+`` a space), case, ``-`` and spaces aside."""
    text = unquote_plus(name).lower().replace("-", "_").replace(" ", "_")
    return text in SECRET_NAMES or any(part in text for part in SECRET_PARTS)


#: What separates parameters: ``&``, and ``;`` (HTML 4's recommendation, which
#: servers such as Python's and Java's before their fixes split at too).
_SEPARATOR = re.compile(r"([&;])")


def safe_query(query: str) -> str:
    """``a=1&token=x`` as ``a=1&token=REDACTED``: each parameter as given, the
    values of the secret ones replaced (a query or a fragment's ``a=b`` pairs,
    split at ``&`` and ``;``)."""
    if "=" not in query:
        return query
    pieces = _SEPARATOR.split(query)  # parameters at even places, separators between
    changed = False
    for n in range(0, len(pieces), 2):
        name, equals, value = pieces[n].partition("=")
        if equals and value and secret_parameter(name):
            pieces[n] = f"{name}={REDACTED}"
            changed = True
    return "".join(pieces) if changed else query


def safe_url(url: str, *, query: bool = True) -> str:
    """``url`` without its userinfo, and (``query``) the values of its secret
    parameters redacted (:func:`safe_query`), in its query and its fragment;
    the rest exactly as given.  Written twice, it is written the same.

    Also a text that is not a valid URL (an input that became ``invalid_url``),
    a relative or scheme-relative one (``//user:pw@host/``, a ``Location``):
    whatever stands where a URL's userinfo, query and fragment would be is
    treated so."""
    if "@" not in url and "?" not in url and "#" not in url:  # the usual case
        return url
    scheme_end = url.find("://")
    slashed = _SLASHED_SCHEME.match(url)
    if scheme_end >= 0 and "?" not in url[:scheme_end] and "#" not in url[:scheme_end]:
        start = scheme_end + 3
    elif slashed is not None:  # http:\\host, http:%5C%5Chost: a browser's http://host
        start = slashed.end()
    else:  # no scheme; or the "://" of a URL in the query (/login?next=http://...)
        start = 2 if url.startswith("//") else 0
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if 0 <= found < end:
            end = found
    at = url.rfind("@", start, end)
    if at >= 0:
        url = url[:start] + url[at + 1 :]
    if not query:
        return url
    hash_ = url.find("#")
    query_end = len(url) if hash_ < 0 else hash_
    question = url.find("?", 0, query_end)
    if question < 0:
        written = url[:query_end]
    else:
        written = url[: question + 1] + safe_query(url[question + 1 : query_end])
    if hash_ >= 0:
        written += "#" + safe_query(url[hash_ + 1 :])
    return written


#: A scheme and the slashes after it as a browser reads them (WHATWG URL:
#: a backslash is a slash in http's and https's URLs), also percent-encoded
#: (``%5C``, ``%2F``: how a ``Location`` surge could not follow is quoted):
#: where the authority, and a userinfo, begin.
_SLASHED_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?:[/\\]|%5[Cc]|%2[Ff])+")

#: A URL inside a text: a scheme, its slashes (see above), and what follows up
#: to a space or a quote (an error detail quotes its URL with repr()).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?:[/\\]|%5[Cc]|%2[Ff])+[^\s'\"<>`]+")


#: A parameter inside a text: after ``?``, ``&``, ``;`` or ``#``, a name, ``=``
#: and a value up to a space, a quote or the next parameter.
_PARAMETER_IN_TEXT = re.compile(r"(?<=[?&;#])([^=\s&;#?'\"<>`]+)=([^\s&;#'\"<>`]+)")


def _parameter(match: re.Match[str]) -> str:
    return f"{match[1]}={REDACTED}" if secret_parameter(match[1]) else match[0]


def safe_text(text: str) -> str:
    """``text`` with every URL in it as :func:`safe_url` writes it, and every
    secret parameter's value after a ``?``, ``&``, ``;`` or ``#`` redacted
    (``'http://exa mple/?token=x'`` is not found as one URL)."""
    if ":" in text:
        text = _URL_IN_TEXT.sub(lambda m: safe_url(m[0]), text)
    if "=" in text:
        text = _PARAMETER_IN_TEXT.sub(_parameter, text)
    return text


def safe_peer(peer: str) -> str:
    """A ``host:port`` (or a host name) without a userinfo that came along with
    it from a URL's authority (``eve:pw@host:80``: ``host:80``)."""
    return peer.rpartition("@")[2] if "@" in peer else peer


def without_query(url: str) -> str:
    """``url`` as :func:`safe_url` writes it, and without its query and
    fragment (``surge watch`` records no query string at all)."""
    url = safe_url(url)
    for stop in "?#":
        url = url.partition(stop)[0]
    return url


#: Headers whose values are a URL (lower case): written as :func:`safe_url`
#: writes it - a redirect's ``Location`` may carry a userinfo or a token.
URL_HEADERS = frozenset({"location", "content-location", "referer"})


def safe_headers(
    headers: Iterable[Sequence[Any]], *, keep_secrets: bool = False
) -> list[tuple[str, str]]:
    """(name, value) pairs in order - request or response headers - without
    credentials (:func:`secret_header`) unless ``keep_secrets``; the URLs of
    :data:`URL_HEADERS` without their userinfo, ever, and with their secret
    parameters redacted unless ``keep_secrets``."""
    kept = []
    for name, value in headers:
        name, value = str(name), str(value)
        lower = name.lower()
        if not keep_secrets and secret_header(name):
            continue
        if lower in URL_HEADERS:
            value = safe_url(value, query=not keep_secrets)
        kept.append((name, value))
    return kept


#: The fields of a ``surge fetch`` record that hold a URL or what was given as one.
RECORD_URLS = ("url", "input", "final_url")


def safe_record(record: dict[str, Any]) -> dict[str, Any]:
    """A ``surge fetch`` record as it is handed out and written: its URLs
    (:data:`RECORD_URLS`) as :func:`safe_url` writes them, its
    ``error_detail`` as :func:`safe_text` does, its response ``headers``
    (``-i``) as :func:`safe_headers` does; the record itself when nothing
    changes (the usual case), else a copy."""
    changed: dict[str, Any] = {}
    for name in RECORD_URLS:
        value = record.get(name)
        if isinstance(value, str):
            written = safe_url(value)
            if written != value:
                changed[name] = written
    detail = record.get("error_detail")
    if isinstance(detail, str):
        written = safe_text(detail)
        if written != detail:
            changed["error_detail"] = written
    headers = record.get("headers")
    if headers:
        changed["headers"] = [list(pair) for pair in safe_headers(headers)]
    return {**record, **changed} if changed else record


def command_label(argv: Sequence[str]) -> str:
    """A command line as written in a report: the program's name (the last
    part of its path) and how many arguments followed, never the arguments
    (``python (+2 arguments)``)."""
    if not argv:
        return "(no command)"
    name = os.path.basename(str(argv[0]).rstrip("/")) or str(argv[0])
    if "=" in name:  # not a program: an assignment (env's NAME=VALUE) given as one
        name = "(a command)"
    more = len(argv) - 1
    if not more:
        return name
    return f"{name} (+{more} argument{'s' if more > 1 else ''})"


def query_pairs(url: str, *, keep_secrets: bool = False) -> list[tuple[str, str]]:
    """A URL's query as HAR's ``queryString`` holds it: (name, value) pairs,
    decoded (``+`` a space), in order; secret values :data:`REDACTED` unless
    ``keep_secrets``."""
    question = url.find("?")
    if question < 0:
        return []
    query = url[question + 1 :].partition("#")[0]
    pairs = []
    for piece in query.split("&"):
        if not piece:
            continue
        if not keep_secrets:
            piece = safe_query(piece)  # a name after a ';' inside it too
        name, _, value = piece.partition("=")
        pairs.append((unquote_plus(name), unquote_plus(value)))
    return pairs


def cookie_pairs(value: str) -> list[tuple[str, str]]:
    """A ``Cookie`` header's ``a=b; c=d`` as (name, value) pairs."""
    pairs = []
    for piece in value.split(";"):
        name, equals, rest = piece.strip().partition("=")
        if equals and name:
            pairs.append((name, rest))
    return pairs
