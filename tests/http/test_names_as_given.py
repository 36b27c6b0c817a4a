"""A URL the user named is requested as given: its path is never normalised -
dot segments and "//" kept, as ``curl --path-as-is`` sends them - by any
front end (Client, ``fetch_all``, ``surge fetch``); ``final_url`` is the URL
asked for, with only the origin normalised (no default port, as httpx writes
it).  The drop-ins send what their library hands them: the same request line
stock httpx and requests send.  And a Location is a URL of its own when it
has a scheme: ``http:\\\\host\\path`` is refused, as curl and httpx refuse it.

Judged by the request lines a raw server received.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import requests
from tests.http.raw_server import RawServer

import surge.httpx
import surge.requests
from surge import fetch_all
from surge.errors import RequestError
from surge.http import Client

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"

#: Paths as named; each is sent exactly so.
PATHS = [
    "/a/./b",
    "/a/../b",
    "//x//y",
    "/a/%2e%2e/b",
    "/a/.",
    "/..",
    "/a/b/..",
    "/.%2e/x",
    "/a%2Fb",
    "/a/b/../../../c",
    "/./",
    "/a//../b?q=/../x",
]


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    raw = RawServer({}, default=OK)
    yield raw
    raw.close()


def _sent(server: RawServer) -> str:
    """The target of the last request the server received."""
    return server.requests[-1].split(b" ", 2)[1].decode()


def _base(server: RawServer) -> str:
    return f"http://127.0.0.1:{server.port}"


@pytest.mark.parametrize("path", PATHS)
def test_a_path_is_sent_as_given_as_curl_path_as_is_sends_it(server: RawServer, path: str) -> None:
    url = _base(server) + path
    subprocess.run(["curl", "-s", "--path-as-is", "-o", "/dev/null", url], timeout=30, check=True)
    assert _sent(server) == path  # the reference
    with Client() as client:
        response = client.get(url)
    assert _sent(server) == path and response.final_url == url
    (record,) = fetch_all([url], relax_gc=False)
    assert _sent(server) == path and record["final_url"] == url


def test_surge_fetch_sends_every_path_as_given(server: RawServer, tmp_path: Path) -> None:
    urls = [_base(server) + path for path in PATHS]
    inputs = tmp_path / "urls.txt"
    inputs.write_text("\n".join(urls) + "\n")
    before = len(server.requests)
    command = [sys.executable, "-m", "surge.cli", "fetch", str(inputs), "-c", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    sent = [head.split(b" ", 2)[1].decode() for head in server.requests[before:]]
    assert sent == PATHS
    assert [json.loads(line)["final_url"] for line in done.stdout.splitlines()] == urls


@pytest.mark.parametrize("path", PATHS)
def test_the_drop_ins_send_what_their_library_sends(server: RawServer, path: str) -> None:
    url = _base(server) + path
    httpx.get(url)
    stock = _sent(server)
    with httpx.Client(transport=surge.httpx.HTTPTransport()) as client:
        client.get(url)
    assert _sent(server) == stock
    requests.get(url, timeout=10)
    stock = _sent(server)
    with requests.Session() as session:
        session.mount("http://", surge.requests.Adapter())
        session.get(url, timeout=10)
    assert _sent(server) == stock


@pytest.mark.parametrize(
    ("given", "final"),
    [
        ("http://127.0.0.1:80/a/../b", "http://127.0.0.1/a/../b"),
        ("http://127.0.0.1:80", "http://127.0.0.1/"),  # written anew: the target as sent
        ("HTTP://Example.COM:80/x", "http://example.com/x"),
        ("https://127.0.0.1:443/x?q=1", "https://127.0.0.1/x?q=1"),
        ("http://u:p@127.0.0.1:80/x", "http://127.0.0.1/x"),
        ("http://127.0.0.1:443/x", "http://127.0.0.1:443/x"),  # not http's default
        ("https://127.0.0.1:80/x", "https://127.0.0.1:80/x"),
        ("http://127.0.0.1:8080//x", "http://127.0.0.1:8080//x"),
    ],
)
def test_final_url_has_no_default_port_and_the_path_as_given(given: str, final: str) -> None:
    from surge.http.url import parse_url

    parse_url.cache_clear()
    assert parse_url(given).url == final
    if final.count(":") == 1:  # no port left: httpx writes the origin without it too
        assert httpx.URL(given.replace("HTTP:", "http:")).port is None


def test_final_url_of_a_request_to_a_default_port(server: RawServer) -> None:
    """A record's final_url through the whole client (the port is the server's,
    so the default-port form is checked on the parser above)."""
    url = f"http://localhost:{server.port}/a/./b"
    (record,) = fetch_all([url], relax_gc=False)
    assert record["final_url"] == url and _sent(server) == "/a/./b"


# -- a Location with a scheme is a URL of its own -------------------------------------


@pytest.mark.parametrize(
    "location",
    [
        "http:\\\\127.0.0.1\\x",
        "http:\\\\evil.invalid\\path",
        "https:\\\\127.0.0.1\\x",
        "http:127.0.0.1/x",
        "http:////127.0.0.1/x",
    ],
)
def test_a_location_with_a_scheme_and_no_authority_is_refused_as_curl_and_httpx_refuse_it(
    location: str,
) -> None:
    answers = {
        "start": b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
        b"Connection: close\r\n\r\n" % location.encode()
    }
    raw = RawServer(answers, default=OK)
    try:
        start = raw.url("start")
        done = subprocess.run(["curl", "-sL", "-o", "/dev/null", start], timeout=30, check=False)
        assert done.returncode == 3  # curl: the redirect target could not be parsed
        with pytest.raises((httpx.HTTPError, httpx.InvalidURL)):  # or no such host
            httpx.get(start, follow_redirects=True, timeout=5)
        with Client(max_time=5) as client, pytest.raises(RequestError) as caught:
            client.get(start, follow_redirects=True)
        assert caught.value.error_class == "invalid_url"
        assert len(raw.requests) == 3  # curl's, httpx's and surge's first hop only
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("location", "followed", "curl_flags"),
    [
        # A relative reference is resolved against the URL, as RFC 3986 5.2
        # says and curl (without --path-as-is), httpx and browsers do: it is
        # no name the user gave.
        ("/b/../c", "/c", ()),
        ("d/./e", "/d/e", ()),
        # A URL of its own: its path as given, as curl --path-as-is sends it.
        ("//127.0.0.1:{port}/x/../y", "/x/../y", ("--path-as-is",)),
        ("http://127.0.0.1:{port}/x/./y", "/x/./y", ("--path-as-is",)),
        ("http:/127.0.0.1:{port}/z", "/z", ()),  # one slash: curl's shorthand
    ],
)
def test_a_location_is_followed_as_curl_follows_it(
    location: str, followed: str, curl_flags: tuple[str, ...]
) -> None:
    raw = RawServer({}, default=OK)
    try:
        target = location.format(port=raw.port)
        raw.answers["start"] = (
            b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n" % target.encode()
        )
        start = raw.url("start")
        command = ["curl", "-sL", *curl_flags, "-o", "/dev/null", start]
        subprocess.run(command, timeout=30, check=True)
        assert _sent(raw) == followed  # the reference
        with Client(max_time=5) as client:
            response = client.get(start, follow_redirects=True)
        assert response.status == 200 and _sent(raw) == followed
    finally:
        raw.close()
